#!/usr/bin/env bash
# bench-discard.sh: what giving freed segments back to the host costs (issue 17:
# "no loss of speed from the hole punching", same-run A/B).
# A workload where discard has work to do, through `sluice serve` and fio's nbd
# engine: fill 900 MiB of a 1 GiB volume, trim all of it, then 4 KiB random
# writes (32 outstanding) over the first 200 MiB for SECONDS. GC frees the
# trimmed segments; with discard on they are punched out of the volume file.
# Runs alternate on / off (RUNS), each on a fresh volume, and print the random
# write IOPS, the host space the volume file holds at the end, and the WA line.
# Not a test. Usage: scripts/bench-discard.sh
# Env: RUNS="on off on2 off2" SECONDS_W=20 DIR=/var/tmp/sluice-bench-discard
#      SLUICE=target/release/sluice
set -euo pipefail
RUNS=${RUNS:-on off on2 off2}
SECONDS_W=${SECONDS_W:-20}
DIR=${DIR:-/var/tmp/sluice-bench-discard}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
[ -x "$SLUICE" ] || { echo "bench-discard: build first: cargo build --release" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-discard: needs fio (scripts/install-deps)" >&2; exit 2; }
mkdir -p "$DIR"
trap 'rm -f "$DIR"/t-*.img "$DIR"/s-*.sock "$DIR"/fio-*.json "$DIR"/serve-*.err' EXIT
cd "$DIR"
for run in $RUNS; do
  rm -f "t-$run.img" "s-$run.sock"
  "$SLUICE" create "t-$run.img" --size 1G >/dev/null
  extra=()
  case $run in off*) extra=(--discard off) ;; esac
  "$SLUICE" serve "t-$run.img" --socket "$DIR/s-$run.sock" "${extra[@]}" 2>"serve-$run.err" >/dev/null &
  pid=$!
  for _ in $(seq 100); do [ -S "$DIR/s-$run.sock" ] && break; sleep 0.1; done
  uri="nbd+unix:///?socket=$DIR/s-$run.sock"
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=4 --size=900M >/dev/null 2>&1
  fio --name=trim --ioengine=nbd --uri="$uri" --rw=trim --bs=1M --iodepth=4 --size=900M >/dev/null 2>&1
  fio --name=w --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --iodepth=32 --size=200M \
      --runtime="$SECONDS_W" --time_based --output-format=json >"fio-$run.json" 2>/dev/null
  kill -TERM "$pid"
  wait "$pid" || true
  iops=$(python3 -c "import json,sys; t=open(sys.argv[1]).read(); print(round(json.loads(t[t.index('{'):])['jobs'][0]['write']['iops']))" "fio-$run.json")
  echo "$run randwrite_iops=$iops host_MiB=$(( $(du -k "t-$run.img" | cut -f1) / 1024 )) $(grep -o 'WA [0-9.]*' "serve-$run.err" || true)"
done
