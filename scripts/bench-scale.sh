#!/usr/bin/env bash
# Scale-out benchmark (issue 13): `sluice run` of N requests (default
# 1,000,000, about 1 GB) end to end against `sluice emulate` in its own
# process with zero batch time, in three configurations:
#
#   sqlite       1 worker, SQLite in the state directory, local input and output
#   pg-s3        1 worker, PostgreSQL (--db) + S3: input and output in the
#                bucket, job files under --store s3://BUCKET/state
#   pg-s3-3      3 `--join` workers on PostgreSQL + S3, each on a state
#                directory of its own (three machines)
#   pg           (not by default) 1 worker, PostgreSQL + local files: the
#                tracker's share of pg-s3 apart from the store's
#
#   scripts/bench-scale.sh [N]
#
# Environment:
#   CONFIGS   which of the above to run (default "sqlite pg-s3 pg-s3-3")
#   SLUICE_TEST_POSTGRES  a postgres:// URL of a server where that role may
#             CREATE DATABASE; unset: a private PostgreSQL (initdb in a temp
#             directory, loopback, fsync off) is started per configuration
#             and taken down after it (internal/testsrv, as the tests do)
#   SLUICE_TEST_S3  an S3 endpoint URL (credentials in AWS_ACCESS_KEY_ID,
#             AWS_SECRET_ACCESS_KEY); unset: a private versitygw (posix
#             backend, loopback) the same way
#   BENCH_DIR where the input is cached (default ${TMPDIR:-/tmp}/sluice-bench-e2e,
#             shared with scripts/bench-e2e.sh)
#   KEEP=1    keep the generated input and the runs' state, logs and reports
#   SLUICE_BIN  a sluice binary to measure instead of one built from this
#             tree (as scripts/bench-e2e.sh)
#
# Prints per configuration: wall time, each sluice process's CPU (user +
# sys) and peak RSS, the database size after the run per million requests
# (the SQLite file with its WAL; PostgreSQL's pg_database_size less that of
# the empty database before the run, its catalog), and the
# requests the emulator processed more than once (the run fails unless 0).
# The input is put into the bucket before the clock starts. Phases (plan,
# submit, wait+download, merge) are in each report-*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
n=${1:-1000000}
configs=${CONFIGS:-sqlite pg-s3 pg-s3-3}
bench=${BENCH_DIR:-${TMPDIR:-/tmp}/sluice-bench-e2e}
mkdir -p "$bench"
input=$(bench_input "$bench" "$n")
bench_build "$bench" benche2e
runs=()
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    for w in "${runs[@]}"; do rm -rf "$w"; done
    rm -f "$input"
  fi
}
trap cleanup EXIT

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3); uptime: $(uptime)" >&2
echo "input: $n requests, $(stat -c %s "$input") bytes" >&2
# The openai preset with the local preset's pacing: no client rate limit, 200ms first poll.
run_args="--rate -1 --poll-interval 200ms --max-poll-interval 2s"
summary=()
for c in $configs; do
  case $c in
    sqlite) flags=() ;;
    pg) flags=(-postgres) ;;
    pg-s3) flags=(-postgres -s3) ;;
    pg-s3-3) flags=(-postgres -s3 -workers 3) ;;
    *) echo "CONFIGS: unknown configuration $c (want sqlite, pg, pg-s3, pg-s3-3)" >&2; exit 2 ;;
  esac
  work=$(mktemp -d "$bench/scale-$c.XXXXXX")
  runs+=("$work")
  echo "== $c ($(cut -d' ' -f1-3 /proc/loadavg) load before)" >&2
  sync
  "$bench/benche2e" -mode e2e -sluice "$bench/sluice" -input "$input" -work "$work" \
    -emulator separate -run-args "$run_args" "${flags[@]}" >"$work/report.json"
  cp "$work/report.json" "$bench/report-scale-$c.json"
  line=$(python3 - "$work/report.json" "$n" "$c" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n, c = int(sys.argv[2]), sys.argv[3]
if r.get("output_lines") != n:
    sys.exit(f"{c}: output has {r.get('output_lines')} lines, want {n}")
twice = (r.get("emulator_stats") or {}).get("requests_processed_more_than_once")
if twice != 0:
    sys.exit(f"{c}: the emulator processed {twice} request(s) more than once")
plan = next((p["end_s"] - p["start_s"] for p in r["phases"] if p["name"] == "plan"), 0)
ws = r.get("workers") or []
procs = "; ".join(f"{w['user_s'] + w['sys_s']:.1f} s CPU, {w['peak_rss_mb']:.0f} MB"
                  + (" (planned)" if w["planned"] else "") + (" (merged)" if w["merged"] else "") for w in ws)
print(f"| {c} | {r['backend']} | {len(ws)} | {r['wall_s']:.1f} s | {plan:.1f} s | {procs} | "
      f"{r['sluice_user_s'] + r['sluice_sys_s']:.1f} s | {r['db_bytes_per_million_requests'] / 1e6:.0f} MB | {twice} |")
EOF
  )
  summary+=("$line")
done
echo >&2
echo "| config | backend | workers | wall | plan | each sluice process: CPU (user+sys), peak RSS | CPU, all workers | database per million requests | processed twice |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "reports: $bench/report-scale-*.json; uptime: $(uptime)" >&2
