# What the end-to-end benchmarks share; sourced (from the repository root)
# by bench-e2e.sh, bench-scale.sh, bench-money.sh and bench-polling.sh.

# bench_input DIR N: prints the path of DIR/input-N.jsonl, generated first
# when missing: N requests, lines of 200 B to 2,860 B (log-uniform, mean
# ~1 KB), so about N KB.
bench_input() {
  local f="$1/input-$2.jsonl"
  if [ ! -s "$f" ]; then
    echo "generating $f ..." >&2
    go run ./internal/gen -lines "$2" -max-line 2860 -seed 1 -out "$f.tmp"
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# bench_build DIR [benche2e]: the sluice binary into DIR (a copy of
# $SLUICE_BIN when set, to compare two versions), and internal/benche2e
# when asked.
bench_build() {
  if [ -n "${SLUICE_BIN:-}" ]; then
    cp "$SLUICE_BIN" "$1/sluice"
  else
    go build -o "$1/sluice" ./cmd/sluice
  fi
  if [ "${2:-}" = benche2e ]; then
    go build -o "$1/benche2e" ./internal/benche2e
  fi
}

# machine: one line on stderr about this machine and its load now.
machine() {
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
