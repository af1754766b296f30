#!/usr/bin/env bash
# bench-metrics.sh: cost of `serve --metrics` (latency histograms + access-pattern
# counters), metrics off vs on in alternating rounds of the same run: fio 4 KiB
# randwrite through NBD. Prints IOPS and the server's CPU time per write (from
# /proc/PID/stat), which is less sensitive than IOPS to other load on the machine.
# Not a test. Usage: scripts/bench-metrics.sh   Env: ROUNDS=3 RUNTIME=8 SIZE=1G
set -euo pipefail
ROUNDS=${ROUNDS:-3}
RUNTIME=${RUNTIME:-8}
SIZE=${SIZE:-1G}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
tick=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
  for mode in off on; do
    rm -f v.img s.sock
    "$SLUICE" create v.img --size "$SIZE" >/dev/null
    extra=(); [ $mode = on ] && extra=(--metrics 127.0.0.1:0)
    "$SLUICE" serve v.img --socket "$DIR/s.sock" "${extra[@]}" >/dev/null 2>&1 &
    pid=$!
    while [ ! -S s.sock ]; do sleep 0.1; done
    cpu0=$(awk '{print $14+$15}' /proc/$pid/stat)
    fio --name=rw --ioengine=nbd --uri="nbd+unix:///?socket=$DIR/s.sock" --rw=randwrite \
      --bs=4k --iodepth=32 --size="$SIZE" --runtime="$RUNTIME" --time_based \
      --output-format=json --output=fio.json >/dev/null 2>&1
    cpu1=$(awk '{print $14+$15}' /proc/$pid/stat)
    kill $pid; wait $pid || true
    python3 - "$round" "$mode" "$cpu0" "$cpu1" "$tick" <<'PY'
import json, sys
r, mode, c0, c1, tick = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
w = json.load(open("fio.json"))["jobs"][0]["write"]
n = w["total_ios"]
print(f"round {r} metrics={mode:3} iops={w['iops']:8.0f} server_cpu_us_per_write={(c1-c0)/tick*1e6/max(n,1):6.2f}")
PY
  done
done
