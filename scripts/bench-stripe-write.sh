#!/usr/bin/env bash
# bench-stripe-write.sh: issue 20's write targets for a 4+1 stripe set, with
# their peers in the same run: 4 KiB random writes, 32 outstanding, on
# 4 data + 1 parity against sluice on the same number of data members as
# RAID-0 (target >= 0.8x), and against the 4+1 set's own 1 MiB sequential
# writes (target >= 0.9 x 4/5: random MiB/s over sequential MiB/s >= 0.72,
# the 4/5 being the data share of what the members write).
# Method: each round makes both sets fresh (members deleted first) and runs
# `sluice bench ceiling` (random 4 KiB QD32, then sequential 1 MiB QD1, on
# each target) with the two targets in an order that alternates from round
# to round. Reported per round: both IOPS, the ratio, the 4+1 set's own
# random/sequential ratio, and the member reads each set issued over the
# run (a write-only workload must read none; GC runs are printed beside
# them, as GC reads live blocks). The result is the median of the per-round
# ratios. Not a test.
# Usage: scripts/bench-stripe-write.sh
# Env: ROUNDS=4 SIZE=8G REGION=1G SECONDS_PER=6 (SIZE well above what a
#      round writes, so no GC runs and no GC read counts against the write
#      path) DIR=/var/tmp/sluice-bench-stripe-write
#      SLUICE=target/release/sluice
set -euo pipefail
ROUNDS=${ROUNDS:-4}
SIZE=${SIZE:-8G}
REGION=${REGION:-1G}
SECONDS_PER=${SECONDS_PER:-6}
DIR=${DIR:-/var/tmp/sluice-bench-stripe-write}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
[ -x "$SLUICE" ] || { echo "bench-stripe-write: build first: cargo build --release" >&2; exit 2; }
. "$(dirname "$0")/bench-dir.sh"
own_dir bench-stripe-write
trap 'rm -rf "$DIR"/m' EXIT
cd "$DIR"
r5="raid5=sluice-stripe:m/p0,m/p1,m/p2,m/p3,m/p4;parity=1"
r0="raid0=sluice-stripe:m/z0,m/z1,m/z2,m/z3;parity=0"
: > rounds.txt
for round in $(seq "$ROUNDS"); do
  rm -rf m round$round.json; mkdir -p m
  if (( round % 2 )); then a=$r5; b=$r0; else a=$r0; b=$r5; fi
  "$SLUICE" bench ceiling --target "$a" --target "$b" --size "$SIZE" --region "$REGION" \
    --threads 32 --seconds "$SECONDS_PER" --quiet --json "round$round.json" >"round$round.txt" 2>&1 \
    || { cat "round$round.txt" >&2; exit 1; }
  python3 - "round$round.json" "$round" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' | tee -a rounds.txt
import json, sys
r = json.load(open(sys.argv[1]))
t = {x["target"]: x for x in r["targets"]}
def reads(x):
    a, b = x.get("stats_before") or {}, x.get("stats_after") or {}
    return b.get("stripe_member_reads", 0) - a.get("stripe_member_reads", 0), b.get("gc_runs", 0) - a.get("gc_runs", 0)
c5, c0 = t["raid5"]["ceiling"], t["raid0"]["ceiling"]
(m5, g5), (m0, g0) = reads(t["raid5"]), reads(t["raid0"])
print(f"round {sys.argv[2]} (load {sys.argv[3]}): 4+1 {c5['rand_write_iops']:.0f} IOPS, "
      f"RAID-0 {c0['rand_write_iops']:.0f} IOPS: {c5['rand_write_iops'] / c0['rand_write_iops']:.3f}x; "
      f"4+1 seq {c5['seq_write_mib_s']:.1f} MiB/s, rand {c5['rand_write_mib_s']:.1f} MiB/s: "
      f"{c5['rand_over_own_seq']:.3f} of own seq; "
      f"RAID-0 seq {c0['seq_write_mib_s']:.1f} MiB/s; "
      f"member reads 4+1 {m5} (GC runs {g5}), RAID-0 {m0} (GC runs {g0})")
PY
done
python3 - rounds.txt <<'PY'
import re, statistics, sys
x, s = [], []
for line in open(sys.argv[1]):
    m = re.search(r'IOPS: ([0-9.]+)x; .*: ([0-9.]+) of own seq', line)
    if m: x.append(float(m.group(1))); s.append(float(m.group(2)))
print(f"median over {len(x)} rounds: 4+1/RAID-0 {statistics.median(x):.3f}x (target >= 0.8), "
      f"4+1 random/own sequential {statistics.median(s):.3f} (target >= 0.9 x 4/5 = 0.72)")
PY
