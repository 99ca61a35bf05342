#!/usr/bin/env bash
# Benchmark the splitter against GNU split on the same file.
#
#   scripts/bench-split.sh [SIZE]        SIZE as for internal/gen: 1G (default), 4G, 500M, ...
#
# Environment: PROVIDER (openai: limits and wire format of the preset),
# RUNS (3: each tool runs RUNS times, alternating; the best run counts,
# since the machine may be shared), BENCH_DIR (where the generated input is
# cached, default ${TMPDIR:-/tmp}/sluice-bench), KEEP_INPUT=0 to delete the
# input afterwards, DB=postgres://... to record the plan in that PostgreSQL
# database instead of SQLite (docs/scale-out.md, "PostgreSQL"; the server's
# own CPU is not in the figures).
#
# sluice runs splitter.Split with full validation, grouping, fsynced chunk
# files and every request row in the real tracker (SQLite in a fresh state
# directory next to the input); a second run with a sink that records
# nothing shows the splitter alone. Peak RSS comes from GNU time when present,
# else from the driver's own VmHWM.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1G}
provider=${PROVIDER:-openai}
runs=${RUNS:-3}
bench=${BENCH_DIR:-${TMPDIR:-/tmp}/sluice-bench}
mkdir -p "$bench"
input="$bench/input-$size.jsonl"
if [ ! -s "$input" ]; then
  echo "generating $input ..." >&2
  go run ./internal/gen -size "$size" -seed 1 -out "$input.tmp"
  mv "$input.tmp" "$input"
fi
bin="$bench/benchsplit"
go build -o "$bin" ./splitter/internal/benchsplit
bytes=$(stat -c %s "$input")
dbargs=()
if [ -n "${DB:-}" ]; then dbargs=(-db "$DB"); fi
work=$(mktemp -d "$bench/run.XXXXXX")
cleanup() {
  rm -rf "$work"
  if [ "${KEEP_INPUT:-1}" = 0 ]; then rm -f "$input"; fi
}
trap cleanup EXIT
cat "$input" >/dev/null # both tools read from the page cache
# Warm-up, untimed: on a VM the first writes into memory the guest has not
# touched for a while cost several times more system time than later ones
# (measured: 2.7 s, then 0.2 s, for the same 1 GB dd), which would
# penalise whichever tool runs first.
mkdir -p "$work/warm" && split --line-bytes=10M "$input" "$work/warm/x" && rm -rf "$work/warm"

now() { date +%s.%N; }
best_sluice="" best_split="" best_rss="" best_nosink=""
run_sluice() {
  sync
  state="$work/state$i"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v "$bin" -in "$input" -state "$state" -provider "$provider" "${dbargs[@]}" >"$work/out.json" 2>"$work/time.txt"
    rss_kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$work/time.txt")
    cpu=$(awk -F: '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$work/time.txt")
  else
    "$bin" -in "$input" -state "$state" -provider "$provider" "${dbargs[@]}" >"$work/out.json"
    rss_kb=$(sed -n 's/.*"peak_rss_mb":\([0-9.]*\).*/\1/p' "$work/out.json" | awk '{printf "%d", $1*1024}')
    cpu="?"
  fi
  secs=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$work/out.json")
  echo "run $i: sluice $(awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.0f MB/s (%.2fs)", b/s/1e6, s}'), peak RSS $((rss_kb / 1024)) MB, CPU (user+sys) ${cpu}s  $(cat "$work/out.json")" >&2
  rm -rf "$state"
  if [ -z "$best_sluice" ] || awk -v a="$secs" -v b="$best_sluice" 'BEGIN{exit !(a<b)}'; then best_sluice=$secs; fi
  if [ -z "$best_rss" ] || [ "$rss_kb" -gt "$best_rss" ]; then best_rss=$rss_kb; fi # worst RSS counts
}
run_null() { # the splitter alone: the sink records nothing (no SQLite)
  sync
  state="$work/state$i"
  "$bin" -in "$input" -state "$state" -provider "$provider" -null-sink >"$work/out.json"
  ns=$(sed -n 's/.*"seconds":\([0-9.]*\).*/\1/p' "$work/out.json")
  echo "run $i: sluice without tracker rows $(awk -v b="$bytes" -v s="$ns" 'BEGIN{printf "%.0f MB/s (%.2fs)", b/s/1e6, s}')" >&2
  rm -rf "$state"
  if [ -z "$best_nosink" ] || awk -v a="$ns" -v b="$best_nosink" 'BEGIN{exit !(a<b)}'; then best_nosink=$ns; fi
}
run_split() {
  sync
  mkdir -p "$work/split$i"
  t0=$(now)
  split --line-bytes=10M "$input" "$work/split$i/x"
  t1=$(now)
  s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
  echo "run $i: split  $(awk -v b="$bytes" -v s="$s" 'BEGIN{printf "%.0f MB/s (%.2fs)", b/s/1e6, s}')" >&2
  rm -rf "$work/split$i"
  if [ -z "$best_split" ] || awk -v a="$s" -v b="$best_split" 'BEGIN{exit !(a<b)}'; then best_split=$s; fi
}
# The order rotates from run to run: on this VM whichever command follows
# a pause or another tool's cleanup can pay more system time, and a fixed
# order would charge that to the same tool every time.
tools=(run_sluice run_null run_split)
for i in $(seq "$runs"); do
  for k in 0 1 2; do
    "${tools[$(((i - 1 + k) % 3))]}"
  done
done
awk -v db="${DB:+postgres}" -v b="$bytes" -v a="$best_sluice" -v s="$best_split" -v r="$best_rss" -v n="$best_nosink" -v size="$size" -v p="$provider" 'BEGIN{
  printf "input %s (%.0f bytes), provider %s, tracker %s, best of runs:\n", size, b, p, (db == "" ? "sqlite" : db)
  printf "  sluice split : %7.0f MB/s  (%.2fs)  peak RSS %d MB\n", b/a/1e6, a, r/1024
  printf "  GNU split    : %7.0f MB/s  (%.2fs)  --line-bytes=10M\n", b/s/1e6, s
  printf "  ratio        : %7.2fx  (target >= 0.5x; RSS target < 150 MB)\n", s/a
  printf "  without the tracker rows (null sink): %.0f MB/s, ratio %.2fx\n", b/n/1e6, s/n
}'
