#!/usr/bin/env bash
# How long the object store takes to really free space after sluice deletes
# segment objects (issue 21 item 4; docs/objects.md §5.5), by hand, on one
# single-node Ceph (scripts/ceph-cluster.sh DIR --rgw, started here if it is
# not running; stop it yourself: scripts/ceph-cluster.sh stop DIR):
#
#   scripts/bench-objects-free.sh DIR [--port P]
#
# radosgw: a volume in radosgw's S3 (`sluice create/serve --store
# s3://sluice/free-N`, cache 0) is written and overwritten through NBD (fio
# nbd engine, 1 MiB sequential writes over the whole export, PASSES times,
# default 3), so GC frees whole segments and the old lives' objects are
# deleted (after the checkpoint objects that no longer name them); serve
# stops cleanly (SIGTERM: the closing checkpoint, then its deletes). Then the
# data pool's bytes (`ceph df`: stored and used) and the objects waiting in
# radosgw's GC (`radosgw-admin gc list --include-all`) are sampled every 2 s
# for WATCH seconds (default 60); then `radosgw-admin gc process
# --include-all` runs and sampling goes on for 30 s.
#
# RADOS: the same number of 4 MiB objects (a segment object's size) put with
# `rados put` into pool `sluice` and removed with `rados rm` (the call
# sluice's RadosObjects::delete makes, rados_remove), then the pool's bytes
# are sampled the same way. (A sluice volume on rados:// needs a
# `--features rados` binary; the store frees the same way whoever deletes.)
#
# Prints one line per sample: seconds since the last delete returned, pool,
# stored MiB, used MiB, radosgw GC entries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [--port P]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
shift
port=3300
while [ $# -gt 0 ]; do
  case "$1" in
  --port) port=$2; shift 2 ;;
  *) echo "usage: $0 DIR [--port P]" >&2; exit 2 ;;
  esac
done
passes=${PASSES:-3}
watch=${WATCH:-30}
size_mb=${SIZE_MB:-256}
sluice=${SLUICE:-$root/target/release/sluice}
"$root/scripts/ceph-cluster.sh" start "$dir" --rgw --port "$port" >/dev/null
conf=$dir/ceph.conf
set -a
# shellcheck disable=SC1091
. "$dir/s3.env"
set +a
c() { timeout 60 ceph -c "$conf" "$@"; }
rgwadmin() { timeout 120 radosgw-admin -c "$conf" "$@"; }

# pool_mib POOL: "stored used" in MiB from `ceph df`
pool_mib() {
  c df --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for p in d["pools"]:
    if p["name"] == sys.argv[1]:
        s = p["stats"]
        print("%.1f %.1f" % (s["stored"] / 2**20, s["bytes_used"] / 2**20))
        break
else:
    print("- -")
' "$1"
}
gc_entries() {
  rgwadmin gc list --include-all 2>/dev/null | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except Exception:
    print("?"); sys.exit()
print(sum(len(e.get("objs", [])) for e in d))'
}
deleted() {
  curl -s -m 2 "http://127.0.0.1:$mport/metrics" 2>/dev/null |
    awk '/^sluice_objects_deleted_total/ {print $2; f=1} END {if (!f) print "-"}'
}
bucket_mib() {
  rgwadmin bucket stats --bucket sluice 2>/dev/null | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
    print("%.1f" % (d["usage"]["rgw.main"]["size"] / 2**20))
except Exception:
    print("-")'
}
# one sample line: seconds since $t0, the pool's stored and used MiB, and
# what the caller adds
line() {
  printf '%6.1f s  %-24s stored %8s MiB  used %8s MiB  %s\n' \
    "$(echo "$(date +%s.%N) - $t0" | bc)" "$1" $(pool_mib "$1") "${2:-}"
}
rgw_line() {
  line "$data" "bucket $(bucket_mib) MiB  rgw-gc $(gc_entries) objs  sluice-deleted $(deleted)"
}

data=default.rgw.buckets.data
mport=$((port + 40))
# rgw_volume SEGMENT_SIZE: a volume in radosgw written PASSES times over,
# each pass once every segment of the one before is uploaded (so the
# overwrite frees stored segments and GC's new lives delete their objects),
# sampled during the last pass and after serve stops
rgw_volume() {
  local seg=$1 cache=$dir/free-cache sock=$dir/free.sock prefix=free-$$-$RANDOM
  echo "== radosgw: a sluice volume ($size_mb MiB, segments $seg) written $passes times over"
  rm -rf "$cache" "$sock"
  local store=(--store "s3://sluice/$prefix" --endpoint "$AWS_ENDPOINT_URL" --cache-dir "$cache")
  "$sluice" create "${store[@]}" --size "${size_mb}M" --segment-size "$seg" >/dev/null
  "$sluice" serve "${store[@]}" --cache-segments 0 --socket "$sock" \
    --metrics "127.0.0.1:$mport" >/dev/null 2>"$dir/free-serve.log" &
  local srv=$!
  for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.2; done
  [ -S "$sock" ] || { echo "serve did not come up (see $dir/free-serve.log)" >&2; exit 1; }
  local uri="nbd+unix:///?socket=$sock"
  local bytes
  bytes=$(nbdinfo --size "$uri")
  t0=$(date +%s.%N)
  rgw_line
  for p in $(seq 1 "$passes"); do
    fio --name=pass$p --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size="$bytes" \
      --iodepth=8 --output="$dir/free-fio-$p.txt" >/dev/null
    echo "   pass $p written"
    for _ in $(seq 1 6); do sleep 3; rgw_line; done
  done
  kill -TERM "$srv"
  wait "$srv" || true
  grep -E 'put |released|pending' "$dir/free-serve.log" | sed 's/^/   /'
  echo "   serve stopped"
  local end=$((SECONDS + watch))
  while [ $SECONDS -lt $end ]; do rgw_line; sleep 3; done
  echo "-- radosgw-admin gc process --include-all"
  local tp
  tp=$(date +%s.%N)
  rgwadmin gc process --include-all
  echo "   took $(echo "$(date +%s.%N) - $tp" | bc) s"
  for _ in $(seq 1 5); do rgw_line; sleep 3; done
}

rgw_volume 4M
rgw_volume 16M

echo "== RADOS: 4 MiB objects put, then removed one by one (pool sluice)"
n=$(( size_mb * passes / 4 ))
prefix=free-$$-$RANDOM
head -c $((4 << 20)) /dev/urandom >"$dir/free-obj"
for i in $(seq 1 "$n"); do
  timeout 60 rados -c "$conf" -p sluice put "$prefix-$i" "$dir/free-obj"
done
rm -f "$dir/free-obj"
sleep 10
t0=$(date +%s.%N)
line sluice "($n objects stored)"
for i in $(seq 1 "$n"); do
  timeout 60 rados -c "$conf" -p sluice rm "$prefix-$i"
done
line sluice "(the last rm returned)"
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do sleep 3; line sluice; done
