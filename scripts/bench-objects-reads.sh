#!/usr/bin/env bash
# bench-objects-reads.sh: 4 KiB random reads at queue depth 1 from a volume
# whose segments live in SeaweedFS (issue 21), cache hits against cache
# misses, same volume, same run. Not a test: prints IOPS and fio's mean and
# p99 completion latency of each, and the miss/hit ratio.
#
#   hit:  `serve --store ... --cache-segments 1000000`, read by the same
#         server that filled the volume: every segment's staging copy is
#         kept, every read is a local read;
#   restart: the same cache dir served again, every segment cached: a
#         check keeps each stored segment's staging copy whose CRC32C is
#         its object's (docs/objects.md §5.7; since h20-cache in the
#         background after the attach, reads going to the store until a
#         copy is checked), so reads become local; the server's "kept"
#         line (with the time the check took) is printed, and for every
#         run the ms from the server's start to its first answered request
#         and fio's IOPS per 250 ms in the first 2 s against the rest;
#   miss: the same cache dir served again with `--cache-segments 0`: every
#         read of an uploaded segment is one ranged GET.
#
# Usage: scripts/bench-objects-reads.sh
# Env:   RUNTIME=15 (s per run)  SIZE_MB=256 (export)  DIR=/var/tmp/sluice-objreads
#        S3_PORT=27400  SLUICE=target/release/sluice
#        COLD=1: drop the cache file from the page cache before the restart
#        run (dd iflag=nocache), so its attach reads the copies from disk
#        RADOS_CONF=DIR/ceph.conf: the volume in rados://${RADOS_POOL:-sluice}
#        instead (a running scripts/ceph-cluster.sh; SLUICE a --features
#        rados build), no SeaweedFS
# After each run: the GETs the server made and fio's reads (a miss run
# should show one GET per read: a cache miss is one ranged read).
set -euo pipefail

RUNTIME=${RUNTIME:-15}
SIZE_MB=${SIZE_MB:-256}
DIR=${DIR:-/var/tmp/sluice-objreads}
S3_PORT=${S3_PORT:-27400}
SLUICE=${SLUICE:-target/release/sluice}
here=$(cd "$(dirname "$0")" && pwd)

for t in fio nbdinfo python3; do
    command -v "$t" >/dev/null || { echo "bench-objects-reads: $t is not installed" >&2; exit 2; }
done
[ -x "$SLUICE" ] || { echo "bench-objects-reads: build first: cargo build --release" >&2; exit 2; }

mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/run.XXXXXX")
SOCK="$WORK/nbd.sock"
SERVER_PID=
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=
}
cleanup() {
    stop_server
    [ -n "${RADOS_CONF:-}" ] || "$here/s3-server.sh" stop "$WORK/s3" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -n "${RADOS_CONF:-}" ]; then
    STORE=(--store "rados://${RADOS_POOL:-sluice}/reads-$$" --ceph-conf "$RADOS_CONF" --cache-dir "$WORK/cache")
    WHERE="RADOS pool ${RADOS_POOL:-sluice} ($RADOS_CONF)"
else
    "$here/s3-server.sh" start "$WORK/s3" "$S3_PORT" >/dev/null
    export AWS_ACCESS_KEY_ID=sluice-bench AWS_SECRET_ACCESS_KEY=sluice-bench AWS_REGION=us-east-1
    STORE=(--store "s3://sluice/reads-$$" --endpoint "http://127.0.0.1:$S3_PORT" --cache-dir "$WORK/cache")
    WHERE="SeaweedFS on 127.0.0.1:$S3_PORT"
fi
"$SLUICE" create "${STORE[@]}" --size "${SIZE_MB}M" >/dev/null

URI="nbd+unix:///?socket=$SOCK"
# start a server; $WORK/attach.ms: ms from its start to the first request
# it answered (nbdinfo, polled every 10 ms: the attach and the mount), and
# the MiB it had read from disk by then (/proc/PID/io read_bytes: not a
# time, so not moved by the load)
serve() {
    rm -f "$SOCK"
    local t0
    t0=$(date +%s%N)
    "$SLUICE" serve "${STORE[@]}" --socket "$SOCK" --cache-segments "$1" >/dev/null 2>>"$WORK/serve.log" &
    SERVER_PID=$!
    for _ in $(seq 1 3000); do
        if [ -S "$SOCK" ] && nbdinfo --size "$URI" >/dev/null 2>&1; then
            echo "$(( ($(date +%s%N) - t0) / 1000000 )) ms after start, $(awk '/^read_bytes/ { printf "%.0f", $2 / 1048576 }' "/proc/$SERVER_PID/io") MiB read by then" >"$WORK/attach.ms"
            return 0
        fi
        sleep 0.01
    done
    echo "bench-objects-reads: server did not come up" >&2; cat "$WORK/serve.log" >&2; exit 1
}

# fill every block once (1 MiB sequential writes); the hit run reads
# through the same server (its cache holds every segment)
serve 1000000
fio --name=fill --ioengine=nbd --uri="$URI" --size="$(nbdinfo --size "$URI")" \
    --rw=write --bs=1M --iodepth=8 --refill_buffers >/dev/null

run() {
    [ -n "$SERVER_PID" ] || serve "$1"
    # IOPS per 250 ms (the restart run: while the cache check runs, after)
    fio --name=rr --ioengine=nbd --uri="$URI" --size="$(nbdinfo --size "$URI")" \
        --rw=randread --bs=4k --iodepth=1 --time_based --runtime="$RUNTIME" \
        --write_iops_log="$WORK/$2" --log_avg_msec=250 \
        --output-format=json >"$WORK/$2.json"
    stop_server
    python3 - "$WORK/$2.json" "$2" "$WORK/serve.log" "$WORK/$2_iops.1.log" "$(cat "$WORK/attach.ms")" <<'EOF'
import json, re, sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]["read"]
c = j["clat_ns"]
p99 = c.get("percentile", {}).get("99.000000", 0)
# this serve's stop line (the last in the log): its GETs
gets = re.findall(r"objects: .*?, (\d+) GET\(s\)", open(sys.argv[3], errors="replace").read())
g = gets[-1] if gets else "?"
print(f"{sys.argv[2]:5} {j['iops']:9.0f} IOPS  mean {c['mean']/1000:8.0f} us  p99 {p99/1000:8.0f} us  {j['total_ios']} reads, {g} GETs")
try:
    # fio's IOPS per 250 ms: the first 2 s apart from the rest
    rows = [l.split(",") for l in open(sys.argv[4]) if l.strip()]
    pts = [(int(r[0]), int(r[1])) for r in rows]
    early = [v for t, v in pts if t <= 2000]
    late = [v for t, v in pts if t > 2000]
    m = lambda x: sum(x) / len(x) if x else 0
    print(f"      first answer {sys.argv[5]}; IOPS in the first 2 s {m(early):.0f} (per 250 ms: {' '.join(str(v) for v in early)}), after {m(late):.0f}")
except Exception as e:
    print(f"      (no IOPS log: {e})")
EOF
}
echo "(4 KiB random reads, QD1, ${RUNTIME}s each, ${SIZE_MB} MiB export, segments in $WHERE)"
# (not in $(...): the server started or stopped must be this shell's)
run 1000000 hit >"$WORK/hit.line"
if [ -n "${COLD:-}" ]; then
    dd if="$WORK/cache/volume" iflag=nocache count=0 status=none
fi
run 1000000 restart >"$WORK/restart.line"
run 0 miss >"$WORK/miss.line"
hit=$(cat "$WORK/hit.line")
miss=$(cat "$WORK/miss.line")
echo "$hit"
cat "$WORK/restart.line"
echo "$miss"
grep -h "of an earlier mount kept" "$WORK/serve.log" || true
python3 - "$hit" "$miss" <<'EOF'
import sys
h = float(sys.argv[1].split()[1]); m = float(sys.argv[2].split()[1])
print(f"miss/hit IOPS {m/h:.3f}")
EOF
grep -h "uploaded\|pending" "$WORK/serve.log" | tail -3 || true
