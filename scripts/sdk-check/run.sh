#!/usr/bin/env bash
# Checks the emulator's Mistral and Together APIs with the official
# TypeScript SDKs (docs/providers/mistral.md, docs/providers/together.md).
# Needs node and npm; not part of CI. Usage: scripts/sdk-check/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $emu 2>/dev/null || true; rm -rf "$work"' EXIT
cp "$here/check.mjs" "$work/"
(cd "$work" && npm init -y >/dev/null && npm install --silent @mistralai/mistralai@2.7.0 together-ai@0.52.0 >/dev/null)
go build -o "$work/sluice" "$here/../../cmd/sluice"
SLUICE_EMULATOR_API_KEY=sdk-check-key "$work/sluice" emulate --addr 127.0.0.1:0 --batch-time 300ms 2>"$work/emu.log" &
emu=$!
for _ in $(seq 50); do grep -q 'http://' "$work/emu.log" && break; sleep 0.1; done
addr=$(grep -o 'http://[0-9.:]*' "$work/emu.log" | head -1)
TOGETHER_API_BASE_URL="$addr/together/v1" node "$work/check.mjs" "$addr"  # the upload helper reads it when loaded
