#!/usr/bin/env bash
# bench-merge.sh [SIZE]: measure the merger on a synthetic job of SIZE bytes
# of results (default 1G; K/M/G suffixes), beside cat and sort of the same
# files. Generates results files (200 B - 8 KB lines, files of <= 200 MB /
# 50,000 lines, shuffled within each file, 3% of requests in attempt-2 files),
# merges them in input order (plain and .zst), prints seconds, MB/s and peak
# RSS of each child, then removes everything it wrote.
# BENCH_DIR picks the scratch directory (default: a new one under $TMPDIR).
set -euo pipefail
size=${1:-1G}
root=$(cd "$(dirname "$0")/.." && pwd)
work=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bench-merge.XXXXXX")}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
bin=$work/benchmerge
(cd "$root" && go build -o "$bin" ./merger/internal/benchmerge)
echo "== generating $size of results in $work"
"$bin" -gen -dir "$work/in" -size "$size"
sync # let the generator's writeback finish before timing anything
echo "== running"
"$bin" -bench -dir "$work/in" -out "$work/out/out.jsonl"
