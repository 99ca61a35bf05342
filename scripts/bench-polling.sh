#!/usr/bin/env bash
# Polling benchmark: what sluice costs while many batches wait at the
# provider (the overnight case).
#
#   scripts/bench-polling.sh [BATCHES...]      default: 2000 100
#
# For each count B: B one-request chunks (--max-batch-requests 1) are
# submitted to `sluice emulate --batch-time 1h` in its own process
# (`sluice run --provider openai --base-url ...`, no client rate limit, the
# openai preset's poll intervals: 10s growing by half per poll up to 2m).
# Once all B batches are submitted, the driver reads utime+stime of the
# sluice process from /proc over two windows: the first WINDOW after the
# last submission (polls ramping up) and WINDOW from WARMUP after it (every
# batch polled every ~2 min: the steady state), and reports CPU seconds per
# hour of waiting, API calls per second, and sluice's peak RSS (rusage after
# it is stopped with SIGINT, which leaves the batches running and exits 3).
# Running it with 100 and 2,000 batches shows whether memory stays flat.
#
# Environment: WINDOW (default 120s), WARMUP (default 420s), BENCH_DIR
# (default ${TMPDIR:-/tmp}/sluice-bench-polling; removed afterwards unless
# KEEP=1), RUN_ARGS (extra `sluice run` flags, e.g. "--max-poll-interval 30s"),
# CPUPROFILE=1 (sluice.pprof per count, kept in BENCH_DIR).
# SLUICE_BIN: a sluice binary to measure instead of one built from this tree.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
counts=${*:-2000 100}
window=${WINDOW:-120s}
warmup=${WARMUP:-420s}
bench=${BENCH_DIR:-${TMPDIR:-/tmp}/sluice-bench-polling}
mkdir -p "$bench"
cleanup() { if [ "${KEEP:-0}" != 1 ]; then rm -rf "$bench"; fi; }
trap cleanup EXIT
bench_build "$bench" benche2e
machine
prof=()
[ "${CPUPROFILE:-0}" = 1 ] && prof=(-cpuprofile)
for b in $counts; do
  input="$bench/input-$b.jsonl"
  go run ./internal/gen -lines "$b" -max-line 400 -seed 1 -out "$input" 2>/dev/null
  work="$bench/run-$b"
  rm -rf "$work" && mkdir -p "$work"
  echo "== $b batches (window $window, steady window from +$warmup)" >&2
  "$bench/benche2e" -mode poll -sluice "$bench/sluice" -input "$input" -work "$work" -batches "$b" \
    -window "$window" -warmup "$warmup" -emu-args "--batch-time 1h" "${prof[@]}" \
    -run-args "--max-batch-requests 1 --rate -1 ${RUN_ARGS:-}" >"$work/report.json"
  cp "$work/report.json" "$bench/report-$b.json"
  [ -e "$work/sluice.pprof" ] && cp "$work/sluice.pprof" "$bench/sluice-$b.pprof"
  rm -rf "$work/state" "$work/emulator"
done
echo "reports: $bench/report-*.json" >&2
