#!/usr/bin/env bash
# bench-ab.sh: did a change make 4 KiB random reads or writes slower? Two
# sluice binaries (A = before, B = after) in the same run, in interleaved
# rounds (the order flips every round), each round on a fresh volume per
# binary, through the in-process `sluice:` bench target (`bench grid`,
# reads and writes at 4 KiB). Prints the median of the per-round ratios B/A
# and its interquartile range, per operation and thread count. Not a test.
#
#   scripts/bench-ab.sh /tmp/sluice-main target/release/sluice
#
# Env: ROUNDS=8 THREADS=1,32 SECONDS_C=4 SIZE=2G REGION=1G
#      DIR=/dev/shm/sluice-bench-ab (tmpfs keeps disk noise out; the images
#      are this script's own and removed at exit)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/bench-ab.sh BINARY_A BINARY_B" >&2; exit 2; }
A=$(realpath "$1")
B=$(realpath "$2")
ROUNDS=${ROUNDS:-8}
THREADS=${THREADS:-1,32}
SECONDS_C=${SECONDS_C:-4}
SIZE=${SIZE:-2G}
REGION=${REGION:-1G}
DIR=${DIR:-/dev/shm/sluice-bench-ab}
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
work=$(mktemp -d "$DIR/ab-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for who in $order; do
    if [ "$who" = A ]; then bin=$A; else bin=$B; fi
    rm -f "$who.img"
    "$bin" bench grid --target "sluice:$work/$who.img" --size "$SIZE" --region "$REGION" \
      --sizes 4K --threads "$THREADS" --seconds "$SECONDS_C" --seed 7 --quiet --force \
      --json "$work/r$r-$who.json" >/dev/null
    rm -f "$who.img"
    python3 - "$r" "$who" "$work/r$r-$who.json" >> rounds.txt <<'PY'
import json, sys
r, who, path = sys.argv[1:4]
for t in json.load(open(path))["targets"]:
    for p in t["phases"]:
        if p["block_bytes"] == 4096 and p["op"] in ("rand_read", "rand_write"):
            print(r, who, p["op"], p["threads"], f"{p['iops']:.1f}")
PY
  done
  grep "^$r " rounds.txt | awk '{printf "round %s %s %-10s x%-3s %10.0f IOPS\n", $1, $2, $3, $4, $5}'
done
PYTHONPATH="$SCRIPTS" python3 - rounds.txt <<'PY'
import sys
from rounds import median_iqr as q
by = {}
for r, who, op, th, iops in (l.split() for l in open(sys.argv[1])):
    by.setdefault((op, int(th)), {}).setdefault(int(r), {})[who] = float(iops)
print()
print(f"{'B / A':<12} {'threads':>7} {'median':>7} {'IQR':>17} {'rounds':>6}")
for (op, th), rounds in sorted(by.items()):
    v = [d["B"] / d["A"] for d in rounds.values() if "A" in d and "B" in d]
    if v:
        m, lo, hi = q(v)
        print(f"{op:<12} {th:>7} {m:>7.3f} {f'[{lo:.3f}, {hi:.3f}]':>17} {len(v):>6}")
PY
