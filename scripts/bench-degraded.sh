#!/usr/bin/env bash
# bench-degraded.sh: 4 KiB random reads on a 4+1 stripe set with one member
# gone against the same shape healthy, side by side in the same run (issue
# 20's target: degraded >= 0.5x healthy). Both sets are made alike (files on
# the same filesystem); member 2 of the degraded one is deleted after
# `sluice create`, so it serves degraded (a read of a piece on it is rebuilt
# from the other four members of its row).
# Method: short rounds of `sluice bench grid` with both targets, their order
# alternating from round to round so slow spells hit each alike; the result
# is the median of the per-round ratios with its interquartile range. The
# grid prefills the region on each target and runs its write cells too (not
# reported here). Not a test.
# Usage: scripts/bench-degraded.sh
# Env: ROUNDS=6 CELL=3 (seconds per grid cell) SIZE=1G REGION=512M
#      THREADS=1,32 DIR=/var/tmp/sluice-bench-degraded
#      SLUICE=target/release/sluice
set -euo pipefail
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-6}
CELL=${CELL:-3}
SIZE=${SIZE:-1G}
REGION=${REGION:-512M}
THREADS=${THREADS:-1,32}
DIR=${DIR:-/var/tmp/sluice-bench-degraded}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
[ -x "$SLUICE" ] || { echo "bench-degraded: build first: cargo build --release" >&2; exit 2; }
. "$(dirname "$0")/bench-dir.sh"
own_dir bench-degraded
trap 'rm -rf "$DIR"/h "$DIR"/d "$DIR"/round-*.json' EXIT
cd "$DIR"
rm -rf h d
mkdir -p h d
h=(h/m0 h/m1 h/m2 h/m3 h/m4)
d=(d/m0 d/m1 d/m2 d/m3 d/m4)
"$SLUICE" create --size "$SIZE" --parity 1 $(printf -- '--device %s ' "${h[@]}") >/dev/null
"$SLUICE" create --size "$SIZE" --parity 1 $(printf -- '--device %s ' "${d[@]}") >/dev/null
rm -f d/m2
targets=("healthy=sluice-stripe:$(IFS=,; echo "${h[*]}");parity=1"
         "degraded=sluice-stripe:d/m0,d/m1,d/m3,d/m4;parity=1")
: > rounds.txt
for round in $(seq "$ROUNDS"); do
  k=$(( (round - 1) % 2 ))
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
  grep "^$round " rounds.txt | awk '{printf "round %s %-9s x%-3s %9.0f IOPS\n", $1, $2, $3, $4}'
done
PYTHONPATH="$SCRIPTS" python3 - rounds.txt <<'PY'
import sys
by = {}
for r, label, th, iops in (l.split() for l in open(sys.argv[1])):
    by.setdefault((int(r), int(th)), {})[label] = float(iops)
from rounds import median_iqr as q
print()
print(f"{'ratio':<20} {'threads':>7} {'median':>7} {'IQR':>17} {'rounds':>6}")
for th in sorted({t for _, t in by}):
    xs = [v["degraded"] / v["healthy"] for (r, t), v in by.items()
          if t == th and "degraded" in v and "healthy" in v and v["healthy"] > 0]
    if xs:
        m, lo, hi = q(xs)
        print(f"{'degraded / healthy':<20} {th:>7} {m:>6.2f}x {f'[{lo:.2f}, {hi:.2f}]':>17} {len(xs):>6}")
print("(issue 20's target: degraded >= 0.5x healthy)")
PY
