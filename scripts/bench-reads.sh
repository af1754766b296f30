#!/usr/bin/env bash
# bench-reads.sh: in-process 4 KiB random reads, made robust to a noisy machine.
# Answers two questions with ratios measured side by side:
#   - what verified reads cost: sluice with verification on vs the same build
#     with it off (`sluice-noverify:`, a diagnostic mount option), issue 9's
#     budget: verified >= 0.90x of unverified at 1 and 32 threads;
#   - how close sluice's reads come to the raw file under it (`file:`, O_DIRECT,
#     same filesystem), issue 10's target: >= 0.90x at 1 and 32 threads.
# Method: many short rounds of `sluice bench grid`; each round measures the three
# targets once, in an order that rotates from round to round, so slow spells hit
# each alike; the result per ratio is the median of the per-round ratios with its
# interquartile range. The grid also runs its write cells (not reported here).
# Not a test. Usage: scripts/bench-reads.sh
# Env: ROUNDS=10 CELL=3 (seconds per grid cell) SIZE=4G (each volume / file)
#      REGION=1G (what is read: prefilled every round) THREADS=1,32
#      DIR=/var/tmp/sluice-bench-reads SLUICE=target/release/sluice
set -euo pipefail
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-10}
CELL=${CELL:-3}
SIZE=${SIZE:-4G}
REGION=${REGION:-1G}
THREADS=${THREADS:-1,32}
DIR=${DIR:-/var/tmp/sluice-bench-reads}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
[ -x "$SLUICE" ] || { echo "bench-reads: build first: cargo build --release" >&2; exit 2; }
. "$(dirname "$0")/bench-dir.sh"
own_dir bench-reads
trap 'rm -f "$DIR"/*.img "$DIR"/round-*.json' EXIT
cd "$DIR"
targets=("verified=sluice:v.img" "unverified=sluice-noverify:n.img" "raw=file:r.img")
: > rounds.txt
for round in $(seq "$ROUNDS"); do
  k=$(( (round - 1) % 3 ))
  order=("${targets[@]:$k}" "${targets[@]:0:$k}")
  args=()
  for t in "${order[@]}"; do args+=(--target "$t"); done
  "$SLUICE" bench grid "${args[@]}" --size "$SIZE" --region "$REGION" --sizes 4K \
    --threads "$THREADS" --seconds "$CELL" --seed "$round" --force --quiet \
    --json "round-$round.json" >/dev/null 2>grid.err || { cat grid.err >&2; exit 1; }
  python3 - "$round" "round-$round.json" >> rounds.txt <<'PY'
import json, sys
r, path = sys.argv[1], sys.argv[2]
for t in json.load(open(path))["targets"]:
    label = t["target"].split("=")[0] if "=" in t["target"] else t["target"]
    for p in t["phases"]:
        if p["op"] == "rand_read" and p["block_bytes"] == 4096:
            print(r, label, p["threads"], f"{p['iops']:.1f}")
PY
  grep "^$round " rounds.txt | awk '{printf "round %s %-10s x%-3s %9.0f IOPS\n", $1, $2, $3, $4}'
done
PYTHONPATH="$SCRIPTS" python3 - rounds.txt <<'PY'
import sys, statistics as st
by = {}
for r, label, th, iops in (l.split() for l in open(sys.argv[1])):
    by.setdefault((int(r), int(th)), {})[label] = float(iops)
from rounds import median_iqr as q
print()
print(f"{'ratio':<24} {'threads':>7} {'median':>7} {'IQR':>17} {'rounds':>6}")
for num, den, name in (("verified", "unverified", "verified / unverified"),
                       ("verified", "raw", "sluice / raw file")):
    for th in sorted({t for _, t in by}):
        v = [d[num] / d[den] for (r, t), d in by.items() if t == th and num in d and den in d]
        if v:
            m, lo, hi = q(v)
            print(f"{name:<24} {th:>7} {m:>7.3f} [{lo:.3f}, {hi:.3f}] {len(v):>6}")
PY
