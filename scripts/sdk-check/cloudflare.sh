#!/usr/bin/env bash
# Checks the emulator's Workers AI async batch with the official Cloudflare
# TypeScript SDK (`cloudflare` on npm): its default ai.run (model slashes
# sent as %2F) gets the live API's 400 code 7000, the client.post workaround
# queues, polls and finishes a batch. Needs node and npm; not part of CI.
# Usage: scripts/sdk-check/cloudflare.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $emu 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$here/cloudflare.mjs" "$work/"
(cd "$work" && npm init -y >/dev/null && npm install --silent cloudflare@7.3.0 >/dev/null)
go build -o "$work/sluice" "$here/../../cmd/sluice"
SLUICE_EMULATOR_API_KEY=sdk-check-key "$work/sluice" emulate --addr 127.0.0.1:0 --batch-time 300ms 2>"$work/emu.log" &
emu=$!
for _ in $(seq 50); do grep -q 'http://' "$work/emu.log" && break; sleep 0.1; done
addr=$(grep -o 'http://[0-9.:]*' "$work/emu.log" | head -1)
node "$work/cloudflare.mjs" "$addr"
