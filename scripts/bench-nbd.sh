#!/usr/bin/env bash
# bench-nbd.sh: fio (nbd engine, Unix socket) against `sluice serve`, qemu-nbd
# (--cache=none --aio=native) and `nbdkit file`, side by side, on the same kind of
# backing file (zero-filled, same size, same filesystem). Not a test: prints IOPS
# per server (the median of ROUNDS interleaved rounds) and sluice's ratio to each
# peer.
#
# Reads are compared only with peers whose reads reach the device: the raw file
# (fio libaio O_DIRECT, QD32), qemu-nbd --cache=none, nbdkit file cache=none
# (nbdkit 1.32 has no O_DIRECT: it evicts what it read from the page cache) and
# other sluice builds. `nbdkit file` with its default cache answers reads from
# the page cache and `nbdkit memory` has no device, so the randread case skips
# them and says so.
#
# Usage: scripts/bench-nbd.sh [CASE...]      CASE: randwrite randread fsync (default: all)
#        (fsync = two rows: "fsync", write+fsync with 8 jobs at iodepth 1 each, and
#         "fsync-qd1", one job at iodepth 1; "fsync8" or "fsync-qd1" alone run one;
#         "fsync32": 32 jobs at iodepth 1, each write followed by a FLUSH)
# Env:   RUNTIME=20 (s per case and server)  SIZE_MB=2048  DIR=/var/tmp/sluice-bench
#        SERVERS="sluice qemu-nbd nbdkit nbdkit-nocache raw"  SLUICE=target/release/sluice
#        ROUNDS=1 (rounds; each runs every case and server, in a rotated order)
#        (server "sluice-pool" = sluice with every request on the worker pool;
#         "sluice-noring" = sluice with READs in pool batches, not the read ring;
#         "sluice-base" = the build $SLUICE_BASE (A/B);
#         "sluice-base-lz4" = $SLUICE_BASE on a volume created with --compress lz4;
#         "sluice-ilog" = sluice on a volume created with --intent-log;
#         "sluice-lz4" = sluice on a volume created with --compress lz4 (issue 19;
#           pair it with COMPRESS_PCT, and compare with "sluice" in the same run);
#         "sluice-logdev" = sluice with its intent log on a file on a tmpfs the
#           script mounts under $DIR and unmounts at exit (RAM standing in for
#           a DRAM or NVRAM log device);
#         "sluice-s3" = sluice with its segments in SeaweedFS (scripts/s3-server.sh,
#           started under $DIR on S3_PORT=27300 and stopped at exit; metadata and
#           staging in a cache dir under $DIR, --cache-segments 64): same export size
#           as "sluice" (SIZE_MB less 15%), uploads in the background (issue 21);
#         "sluice-s3-durable" = the same, created with --flush-to store (a FLUSH
#           is answered once its log object is stored: docs/objects.md §5.0.2);
#         S3_ENDPOINT=URL (with AWS_* set, S3_BUCKET default sluice): the two
#           above use that S3 server (e.g. radosgw of scripts/ceph-cluster.sh
#           --rgw) instead of starting SeaweedFS; RADOS_CONF=CEPH.CONF: they
#           use rados://$RADOS_POOL (default sluice) through librados instead
#           (SLUICE must be a `--features rados` build);
#         "raw" = no server: fio libaio O_DIRECT on the backing file, the device's own rate;
#         COMPRESS_PCT=N: every writer's data is fio's buffer_compress_percentage=N
#           with buffer_compress_chunk=4k (each 4 KiB block N% compressible; the
#           prefill too), for every server; unset: fio's default random data.
#         CHRT=N: run every server and fio at SCHED_FIFO priority N (root): on a
#           machine shared with builds it keeps the other load from preempting
#           the run, so it measures what a quiet machine would (docs/nbd.md);
#         REGION_MB=N: fio reads and writes only the first N MiB of each export
#           (default: all of it); with SIZE_MB well above it, a short randwrite
#           run on a fresh volume never needs GC (how much of a gap is GC's);
#         NUMJOBS=1: fio jobs of the randwrite and randread cases (each at iodepth 32/NUMJOBS);
#         "nbdkit-nocache" = nbdkit file cache=none; "nbdkit-memory" = nbdkit's RAM
#         plugin, no media: the ceiling of the client and protocol on this machine)
set -euo pipefail

RUNTIME=${RUNTIME:-20}
SIZE_MB=${SIZE_MB:-2048}
DIR=${DIR:-/var/tmp/sluice-bench}
SERVERS=${SERVERS:-"sluice qemu-nbd nbdkit nbdkit-nocache raw"}
ROUNDS=${ROUNDS:-1}
NUMJOBS=${NUMJOBS:-1}
QD=$(( 32 / NUMJOBS )); [ "$QD" -ge 1 ] || QD=1
# fio's data: random by default; COMPRESS_PCT makes each 4 KiB block that compressible
DATA=(--refill_buffers)
[ -n "${COMPRESS_PCT:-}" ] && DATA=(--refill_buffers "--buffer_compress_percentage=$COMPRESS_PCT" --buffer_compress_chunk=4k)
SLUICE=${SLUICE:-target/release/sluice}
RT=()
[ -n "${CHRT:-}" ] && RT=(chrt -f "$CHRT")
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(randwrite randread fsync)
CASES=()
for c in "${ARGS[@]}"; do
    case $c in
    fsync) CASES+=(fsync fsync-qd1) ;;
    fsync8) CASES+=(fsync) ;;
    randwrite|randread|fsync-qd1|fsync32) CASES+=("$c") ;;
    *) echo "bench-nbd: unknown case $c" >&2; exit 2 ;;
    esac
done

for t in fio qemu-nbd nbdkit; do
    command -v "$t" >/dev/null || { echo "bench-nbd: $t is not installed" >&2; exit 2; }
done
[ -x "$SLUICE" ] || { echo "bench-nbd: build first: cargo build --release" >&2; exit 2; }

mkdir -p "$DIR"
# one run per DIR: a second would share its socket, images and fio outputs
exec 8>"$DIR/.bench-nbd.lock"
flock -n 8 || { echo "bench-nbd: $DIR is in use by another run (give this one its own DIR)" >&2; exit 2; }
SOCK="$DIR/nbd.sock"
PIDF="$DIR/server.pid"
SERVER_PID=

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=
    rm -f "$SOCK" "$PIDF"
    drop_volume
}
# The store volume of the last sluice-s3* start (its objects under a fresh
# prefix): deleted once its server stopped, so runs do not fill the store
# (a 4 GiB OSD filled up once); KEEP_VOLUMES=1 keeps them.
STORE_POOL= STORE_PREFIX= STORE_BUCKET=
drop_volume() {
    [ -n "$STORE_PREFIX" ] || return 0
    local pfx=$STORE_PREFIX
    STORE_PREFIX=
    [ "${KEEP_VOLUMES:-0}" = 1 ] && return 0
    if [ -n "$STORE_POOL" ]; then
        timeout 300 rados -c "$RADOS_CONF" -p "$STORE_POOL" ls 2>/dev/null | { grep "^$pfx/" || true; } |
            xargs -r -n 500 timeout 300 rados -c "$RADOS_CONF" -p "$STORE_POOL" rm ||
            echo "bench-nbd: could not delete rados://$STORE_POOL/$pfx" >&2
    elif [ -n "${S3_ENDPOINT:-}" ]; then
        # (a SeaweedFS of the script's own goes with its directory at exit)
        timeout 300 aws --endpoint-url "$S3_ENDPOINT" s3 rm --quiet --recursive \
            "s3://$STORE_BUCKET/$pfx/" >/dev/null 2>&1 ||
            echo "bench-nbd: could not delete s3://$STORE_BUCKET/$pfx (aws cli)" >&2
    fi
}
# sluice-logdev: its log device lives on a tmpfs of the script's own, mounted
# in a fresh directory under $DIR (never over anything that exists) and
# unmounted at exit.
LOGDEV_MNT=
S3_DIR=
cleanup() {
    stop_server
    rm -f "$DIR"/*.img
    if [ -n "$S3_DIR" ]; then
        "$(dirname "$0")/s3-server.sh" stop "$S3_DIR" >/dev/null 2>&1 || true
        rm -rf "$S3_DIR" "$DIR/s3cache"
    fi
    if [ -n "$LOGDEV_MNT" ]; then
        umount "$LOGDEV_MNT" 2>/dev/null || true
        rmdir "$LOGDEV_MNT" 2>/dev/null || true
    fi
}
trap cleanup EXIT
case " $SERVERS " in
*" sluice-logdev "*)
    LOGDEV_MNT=$(mktemp -d "$DIR/logdev.XXXXXX")
    mount -t tmpfs -o size=64m,mode=0700 tmpfs "$LOGDEV_MNT" ||
        { echo "bench-nbd: cannot mount a tmpfs for sluice-logdev (root needed)" >&2; exit 2; } ;;
esac

case " $SERVERS " in
*" sluice-s3 "*|*" sluice-s3-durable "*)
  if [ -n "${RADOS_CONF:-}" ]; then
    :
  elif [ -n "${S3_ENDPOINT:-}" ]; then
    : "${AWS_ACCESS_KEY_ID:?S3_ENDPOINT needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY}"
  else
    S3_PORT=${S3_PORT:-27300}
    S3_DIR=$(mktemp -d "$DIR/s3.XXXXXX")
    "$(dirname "$0")/s3-server.sh" start "$S3_DIR" "$S3_PORT" >/dev/null ||
        { echo "bench-nbd: cannot start SeaweedFS for sluice-s3 (scripts/install-deps)" >&2; exit 2; }
    # weed mini accepts any key
    export AWS_ACCESS_KEY_ID=sluice-bench AWS_SECRET_ACCESS_KEY=sluice-bench AWS_REGION=us-east-1
    S3_ENDPOINT=http://127.0.0.1:$S3_PORT
  fi ;;
esac
S3_BUCKET=${S3_BUCKET:-sluice}

wait_socket() {
    for _ in $(seq 1 100); do [ -S "$SOCK" ] && return 0; sleep 0.1; done
    echo "bench-nbd: server did not come up" >&2; exit 1
}

# A fresh zero-filled (fully allocated) backing file per server and case.
fresh_file() {
    rm -f "$1"
    dd if=/dev/zero of="$1" bs=1M count="$SIZE_MB" oflag=direct status=none
}

start_server() {
    local srv=$1 img="$DIR/$1.img"
    stop_server
    rm -f "$DIR/sluice.log"
    fresh_file "$img"
    case $srv in
    sluice|sluice-pool|sluice-noring|sluice-base|sluice-base-lz4|sluice-ilog|sluice-logdev|sluice-lz4)
        # sluice keeps ~10% of its file for GC and metadata: same file, smaller export.
        # sluice-pool: every request through the worker pool (no inline writes).
        # sluice-noring: READs in worker-pool batches instead of the read ring.
        # sluice-base: another build ($SLUICE_BASE), for A/B comparisons.
        # sluice-ilog: the same build, the volume created with --intent-log.
        # sluice-logdev: the same build, the intent log on a fresh file on the tmpfs.
        local extra=() create=() bin=$SLUICE
        [ "$srv" = sluice-pool ] && extra=(--no-inline-writes)
        [ "$srv" = sluice-noring ] && extra=(--no-read-ring)
        case $srv in sluice-base|sluice-base-lz4) bin=${SLUICE_BASE:?set SLUICE_BASE to the other build} ;; esac
        [ "$srv" = sluice-ilog ] && create=(--intent-log)
        case $srv in sluice-lz4|sluice-base-lz4) create=(--compress lz4) ;; esac
        if [ "$srv" = sluice-logdev ]; then
            rm -f "$LOGDEV_MNT/log.img"
            create=(--log-device "$LOGDEV_MNT/log.img")
            extra=(--log-device "$LOGDEV_MNT/log.img")
        fi
        # the fresh zero-filled file is the script's own: --force past the probe
        "$bin" create "$img" --force "${create[@]}" >/dev/null
        "${RT[@]}" "$bin" serve "$img" --socket "$SOCK" "${extra[@]}" >/dev/null 2>"$DIR/sluice.log" &
        SERVER_PID=$! ;;
    qemu-nbd)
        "${RT[@]}" qemu-nbd -f raw --cache=none --aio=native --shared=16 --persistent -k "$SOCK" "$img" &
        SERVER_PID=$! ;;
    nbdkit)
        "${RT[@]}" nbdkit --foreground -U "$SOCK" file "file=$img" &
        SERVER_PID=$! ;;
    nbdkit-nocache)
        # the file plugin told to keep its data out of the page cache
        "${RT[@]}" nbdkit --foreground -U "$SOCK" file "file=$img" cache=none &
        SERVER_PID=$! ;;
    nbdkit-memory)
        # no media at all: what fio + libnbd + a fast server reach on this machine
        "${RT[@]}" nbdkit --foreground -U "$SOCK" memory "size=${SIZE_MB}M" &
        SERVER_PID=$! ;;
    sluice-s3|sluice-s3-durable)
        # a fresh prefix and cache per start; the zero-filled file is unused
        rm -f "$img"
        rm -rf "$DIR/s3cache"
        STORE_PREFIX=bench-$$-$RANDOM STORE_BUCKET=$S3_BUCKET STORE_POOL=
        local store=(--store "s3://$S3_BUCKET/$STORE_PREFIX" --endpoint "${S3_ENDPOINT:-}"
            --cache-dir "$DIR/s3cache") mode=()
        [ -n "${RADOS_CONF:-}" ] && STORE_POOL=${RADOS_POOL:-sluice} &&
            store=(--store "rados://$STORE_POOL/$STORE_PREFIX"
            --ceph-conf "$RADOS_CONF" --cache-dir "$DIR/s3cache")
        [ "$srv" = sluice-s3-durable ] && mode=(--flush-to store)
        "$SLUICE" create "${store[@]}" "${mode[@]}" --size "$(( SIZE_MB * 85 / 100 ))M" >/dev/null
        "$SLUICE" serve "${store[@]}" --socket "$SOCK" >/dev/null 2>"$DIR/sluice.log" &
        SERVER_PID=$! ;;
    raw)
        RAW_FILE=$img
        return ;;
    esac
    wait_socket
}

# Export size as the server reports it (fio needs --size).
export_size() { nbdinfo --size "nbd+unix:///?socket=$SOCK"; }

# fio's target: the NBD export, or the file itself for "raw".
target() {
    if [ "$CUR" = raw ]; then
        echo "--ioengine=libaio --direct=1 --filename=$RAW_FILE --size=${REGION_MB:-$SIZE_MB}M"
    elif [ -n "${REGION_MB:-}" ]; then
        echo "--ioengine=nbd --uri=nbd+unix:///?socket=$SOCK --size=${REGION_MB}M"
    else
        echo "--ioengine=nbd --uri=nbd+unix:///?socket=$SOCK --size=$(export_size)"
    fi
}

run_fio() {  # name, extra fio args...
    local name=$1; shift
    # (never a previous run's figures: the output goes first, and a failed fio stops the run)
    rm -f "$DIR/fio-$name.json" "$DIR/iops-$name"_iops.*.log
    # FIO_LOG_MS=N: fio also logs IOPS averaged over N ms windows, one file per job
    # (scripts/fio-iops-series.py DIR/iops-NAME sums them: a time series)
    local log=()
    [ -n "${FIO_LOG_MS:-}" ] && log=(--write_iops_log="$DIR/iops-$name" --log_avg_msec="$FIO_LOG_MS")
    # shellcheck disable=SC2046
    "${RT[@]}" fio --name="$name" $(target) \
        --bs=4k --runtime="$RUNTIME" --time_based "${log[@]}" \
        --group_reporting --output-format=json --output="$DIR/fio-$name.json" "$@" >/dev/null 2>&1 ||
        { echo "bench-nbd: fio failed on $CUR ($name)" >&2; exit 1; }
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(int(j["read"]["iops"]+j["write"]["iops"]))' "$DIR/fio-$name.json"
}

prefill() {  # sequential random-data fill so reads hit real data everywhere
    # shellcheck disable=SC2046
    fio --name=fill $(target) --rw=write --bs=1M --iodepth=8 "${DATA[@]}" >/dev/null 2>&1
}

# utime+stime of the server process (all threads), in clock ticks.
cpu_ticks() {
    if [ -n "$SERVER_PID" ] && [ -r "/proc/$SERVER_PID/stat" ]; then
        awk '{print $14+$15}' "/proc/$SERVER_PID/stat"
    else
        echo 0
    fi
}

# Peers whose reads do not reach the device: not compared on reads.
# (sluice-logdev's reads do reach the device: its log device holds no data to read)
reads_from_memory() {
    case $1 in
    nbdkit) echo "nbdkit file (default cache) answers reads from the page cache" ;;
    nbdkit-memory) echo "nbdkit memory has no device" ;;
    esac
}

median() { python3 -c 'import statistics,sys; print(int(statistics.median(map(float, sys.argv[1:]))))' "$@"; }

declare -A RUNS=() CPUS=() IOPS=() CPU=() WAS=() WAM=() BYROUND=()
read -r -a SRV <<<"$SERVERS"
for round in $(seq 1 "$ROUNDS"); do
  # rotate the order each round, so no server always runs first (or last)
  k=$(( (round - 1) % ${#SRV[@]} ))
  order=("${SRV[@]:k}" "${SRV[@]:0:k}")
  for c in "${CASES[@]}"; do
    for s in "${order[@]}"; do
        if [ "$c" = randread ] && why=$(reads_from_memory "$s") && [ -n "$why" ]; then
            [ "$round" = 1 ] && echo "  $c $s: skipped: $why, not the device" >&2
            continue
        fi
        CUR=$s
        start_server "$s"
        [ "$c" = randread ] && prefill
        t0=$(cpu_ticks)
        case $c in
        randwrite) n=$(run_fio rw --rw=randwrite --iodepth="$QD" --numjobs="$NUMJOBS" "${DATA[@]}") ;;
        randread) n=$(run_fio rr --rw=randread --iodepth="$QD" --numjobs="$NUMJOBS") ;;
        fsync) n=$(run_fio fs --rw=randwrite --iodepth=1 --numjobs=8 --fsync=1 "${DATA[@]}") ;;
        fsync-qd1) n=$(run_fio fs1 --rw=randwrite --iodepth=1 --numjobs=1 --fsync=1 "${DATA[@]}") ;;
        fsync32) n=$(run_fio fs32 --rw=randwrite --iodepth=1 --numjobs=32 --fsync=1 "${DATA[@]}") ;;
        *) echo "unknown case $c" >&2; exit 2 ;;
        esac
        t1=$(cpu_ticks)
        # Server CPU per request: a figure the machine's other load barely moves.
        cpu=$(python3 -c "print(f'{($t1-$t0)/$(getconf CLK_TCK)*1e6/max(1,$n*$RUNTIME):.1f}')")
        RUNS[$c,$s]="${RUNS[$c,$s]:-} $n"
        BYROUND[$round,$c,$s]=$n
        CPUS[$c,$s]="${CPUS[$c,$s]:-} $cpu"
        stop_server
        rm -f "$DIR/$s.img"
        extra=""
        case $s in sluice*)
            extra=" ($(grep -o 'flushes ([^)]*), WA [0-9.]*' "$DIR/sluice.log" || true))"
            # a volume in a store: bytes put per host byte (segments, log, checkpoints)
            sb=$(grep -o 'store bytes per host byte [0-9.]*[^;]*' "$DIR/sluice.log" | tail -1 || true)
            [ -n "$sb" ] && extra="$extra ($sb)"
            # GC's reads (issue 22): victims, bytes read per byte moved
            gcr=$(grep -o 'GC [0-9]* victims, [^(]*([0-9.]* bytes read per byte moved)' "$DIR/sluice.log" | tail -1 || true)
            [ -n "$gcr" ] && extra="$extra ($gcr)"
            # WA over the whole serve: media bytes (main log, log device, metadata) per host byte
            wa=$(grep -o 'WA [0-9.]*' "$DIR/sluice.log" | tail -1 | cut -d' ' -f2 || true)
            [ -n "$wa" ] && WAS[$c,$s]="${WAS[$c,$s]:-} $wa" ;;
        esac
        echo "  round $round $c $s: $n IOPS, server CPU $cpu us/request$extra" >&2
    done
  done
done
for key in "${!RUNS[@]}"; do
    # shellcheck disable=SC2086
    IOPS[$key]=$(median ${RUNS[$key]})
    # shellcheck disable=SC2086
    CPU[$key]=$(python3 -c 'import statistics,sys; print(f"{statistics.median(map(float, sys.argv[1:])):.1f}")' ${CPUS[$key]})
done
for key in "${!WAS[@]}"; do
    # shellcheck disable=SC2086
    WAM[$key]=$(python3 -c 'import statistics,sys; print(f"{statistics.median(map(float, sys.argv[1:])):.3f}")' ${WAS[$key]})
done

printf '\n%-10s' case
for s in $SERVERS; do printf '%16s' "$s"; done
for s in $SERVERS; do [ "$s" != sluice ] && printf '%22s' "sluice/$s"; done
echo
for c in "${CASES[@]}"; do
    printf '%-10s' "$c"
    for s in $SERVERS; do printf '%16s' "${IOPS[$c,$s]:--}"; done
    for s in $SERVERS; do
        [ "$s" = sluice ] && continue
        if [ -n "${IOPS[$c,sluice]:-}" ] && [ -n "${IOPS[$c,$s]:-}" ] && [ "${IOPS[$c,$s]}" -gt 0 ]; then
            printf '%22s' "$(python3 -c "print(f'{${IOPS[$c,sluice]}/${IOPS[$c,$s]}:.2f}x')")"
        else
            printf '%22s' "-"
        fi
    done
    echo
done
echo
printf '%-10s' "us CPU/req"
for s in $SERVERS; do [ "$s" = raw ] && continue; printf '%16s' "$s"; done
echo
for c in "${CASES[@]}"; do
    printf '%-10s' "$c"
    for s in $SERVERS; do [ "$s" = raw ] && continue; printf '%16s' "${CPU[$c,$s]:--}"; done
    echo
done
# Every server against the two references, where they ran: plain sluice (A/B
# of the engine's options) and nbdkit memory (the client's ceiling, no media).
# Paired: the median over rounds of each round's own ratio, so a slow spell of
# the shared machine that hits one round moves one ratio, not both medians.
paired() {  # case server ref
    local r ratios=()
    for r in $(seq 1 "$ROUNDS"); do
        local a=${BYROUND[$r,$1,$2]:-} b=${BYROUND[$r,$1,$3]:-}
        [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt 0 ] && ratios+=("$a/$b")
    done
    [ ${#ratios[@]} -eq 0 ] && { echo "-"; return; }
    python3 -c 'import statistics,sys; print(f"{statistics.median(eval(x) for x in sys.argv[1:]):.2f}x")' "${ratios[@]}"
}
for ref in sluice nbdkit-memory; do
    case " $SERVERS " in *" $ref "*) ;; *) continue ;; esac
    echo
    printf '%-24s' "paired x/$ref"
    for s in $SERVERS; do [ "$s" != "$ref" ] && printf '%16s' "$s"; done
    echo
    for c in "${CASES[@]}"; do
        printf '%-24s' "$c"
        for s in $SERVERS; do
            [ "$s" = "$ref" ] && continue
            printf '%16s' "$(paired "$c" "$s" "$ref")"
        done
        echo
    done
done
echo "(paired x/REF: median over rounds of the round's IOPS ratio)"
if [ ${#WAM[@]} -gt 0 ]; then
    echo
    printf '%-10s' "WA"
    for s in $SERVERS; do case $s in sluice*) printf '%16s' "$s" ;; esac; done
    echo
    for c in "${CASES[@]}"; do
        printf '%-10s' "$c"
        for s in $SERVERS; do case $s in sluice*) printf '%16s' "${WAM[$c,$s]:--}" ;; esac; done
        echo
    done
    echo "(WA: median of the server's own figure at close: media bytes, log device and metadata included, per host byte)"
fi
echo "(fio --ioengine=nbd over a Unix socket, 4 KiB, ${RUNTIME}s per run, ${SIZE_MB} MiB backing files in $DIR${REGION_MB:+, fio on the first $REGION_MB MiB}; median of $ROUNDS round(s))"
echo "(randread: only peers whose reads reach the device are run: raw = fio libaio O_DIRECT QD32 on the file, qemu-nbd --cache=none, nbdkit file cache=none; nbdkit's default cache and nbdkit memory answer from RAM)"
