#!/usr/bin/env bash
# Money measurements (docs/money.md): on an N-line job (default 1,000,000,
# the inputs of scripts/bench-e2e.sh), against the built-in emulator
# (--provider local):
#   1. plan's estimated cost per model, before any lesson, vs the usage the
#      emulator reported for the same job, priced with the same table;
#   2. the same after the job's batches taught the ratios (plan of a copy);
#   3. what the reuse lookup adds to planning: plan of a copy of the file
#      (a new job) on the database holding the finished job, with
#      --reuse=false and with --reuse (wall time, peak RSS from
#      /usr/bin/time -v).
#
#   scripts/bench-money.sh [N]
# Needs python3 and sqlite3. BENCH_DIR (default ${TMPDIR:-/tmp}/sluice-bench-money).
# SLUICE_BIN: a sluice binary to measure instead of one built from this tree.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
n=${1:-1000000}
bench=${BENCH_DIR:-${TMPDIR:-/tmp}/sluice-bench-money}
mkdir -p "$bench"
input=$(bench_input "$bench" "$n")
bench_build "$bench"
s="$bench/sluice"
state="$bench/state"
rm -rf "$state" "$bench"/out*.jsonl
export SLUICE_STATE="$state"
timed() { # label, command...: wall seconds and peak RSS
  local label=$1; shift
  /usr/bin/time -v "$@" 2> "$bench/$label.time" > "$bench/$label.stdout" || { tail -5 "$bench/$label.time"; exit 1; }
  awk -v l="$label" '/Elapsed \(wall/ {w=$NF} /Maximum resident/ {r=$NF} END {printf "%-22s wall %s  peak RSS %.0f MB\n", l, w, r/1024}' "$bench/$label.time"
}
timed plan-fresh "$s" plan "$input" --json --log-format json
timed run "$s" run "$input" --out "$bench/out.jsonl" --log-format json --log-level warn
# Another file of the same kind (seed 2, a tenth the size): planned with
# what the first job taught, then run, to compare.
input2="$bench/input2-$((n / 10)).jsonl"
[ -s "$input2" ] || go run ./internal/gen -lines $((n / 10)) -max-line 2860 -seed 2 -out "$input2"
timed plan-learned "$s" plan "$input2" --json --job second --log-format json
timed run-second "$s" run "$input2" --job second --out "$bench/out2.jsonl" --log-format json --log-level warn
cp "$input" "$bench/copy.jsonl"
timed plan-copy-noreuse "$s" plan "$bench/copy.jsonl" --json --job copy-noreuse --reuse=false --log-format json
timed plan-copy-reuse "$s" plan "$bench/copy.jsonl" --json --job copy-reuse --reuse --log-format json
python3 - "$bench" "$state/sluice.db" <<'PY'
import json, sqlite3, sys, collections
bench, db = sys.argv[1], sys.argv[2]
prices = json.load(open("pricing/prices.json"))["providers"]["openai"]["models"]
con = sqlite3.connect(db)
job = con.execute("select id from jobs where id not like 'copy-%' and id != 'second'").fetchone()[0]
def spent(job):
    a = collections.Counter()
    for model, i, o in con.execute("select model, sum(input_tokens), sum(output_tokens) from chunks where job_id=? group by model", (job,)):
        p = prices[model]
        a[model] = i * p["input"] / 1e6 + o * p.get("output", 0) / 1e6
    return a
actual, actual2 = spent(job), spent("second")
def est(path):
    d = json.load(open(path)); c = collections.Counter(); m = collections.Counter()
    for ch in d["chunks"]:
        c[ch["model"]] += ch["est_cost_usd"] or 0; m[ch["model"]] += ch["max_cost_usd"] or 0
    return c, m, d
fresh, fresh_max, _ = est(f"{bench}/plan-fresh.stdout")
learned, _, d2 = est(f"{bench}/plan-learned.stdout")
print("plan estimate / emulator usage priced with the same table, per model")
print(f"{'model':24} {'actual $':>10} {'plan $ (fresh)':>15} {'ratio':>7} {'upper $':>10} | {'2nd actual $':>12} {'plan $ (learned)':>17} {'ratio':>7}")
for m in sorted(actual):
    a, a2 = actual[m], actual2[m]
    print(f"{m:24} {a:10.4f} {fresh[m]:15.4f} {fresh[m]/a:7.3f} {fresh_max[m]:10.4f} | {a2:12.4f} {learned[m]:17.4f} {learned[m]/a2:7.3f}")
for m, l in sorted(d2["learned"].items()):
    print(f"  learned {m}: input usage / estimate x{l['input_ratio']:.3f}, output per input {l['output_ratio']:.3f}")
r = json.load(open(f"{bench}/plan-copy-reuse.stdout"))
print(f"reuse plan: {r['reused_requests']} requests reused from {r['reused_from']}, {len(r['chunks'])} chunks left to buy")
PY
