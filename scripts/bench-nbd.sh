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
# Env:   RUNTIME=20 (s per case and server)  SIZE_MB=2048  DIR=/var/tmp/sluice-bench
#        SERVERS="sluice qemu-nbd nbdkit nbdkit-nocache raw"  SLUICE=target/release/sluice
#        ROUNDS=1 (rounds; each runs every case and server, in a rotated order)
#        (server "sluice-pool" = sluice with every request on the worker pool;
#         "sluice-noring" = sluice with READs in pool batches, not the read ring;
#         "sluice-base" = the build $SLUICE_BASE (A/B);
#         "sluice-ilog" = sluice on a volume created with --intent-log;
#         "raw" = no server: fio libaio O_DIRECT on the backing file, the device's own rate;
#         "nbdkit-nocache" = nbdkit file cache=none; "nbdkit-memory" = nbdkit's RAM
#         plugin, no media: the ceiling of the client and protocol on this machine)
set -euo pipefail

RUNTIME=${RUNTIME:-20}
SIZE_MB=${SIZE_MB:-2048}
DIR=${DIR:-/var/tmp/sluice-bench}
SERVERS=${SERVERS:-"sluice qemu-nbd nbdkit nbdkit-nocache raw"}
ROUNDS=${ROUNDS:-1}
SLUICE=${SLUICE:-target/release/sluice}
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(randwrite randread fsync)

for t in fio qemu-nbd nbdkit; do
    command -v "$t" >/dev/null || { echo "bench-nbd: $t is not installed" >&2; exit 2; }
done
[ -x "$SLUICE" ] || { echo "bench-nbd: build first: cargo build --release" >&2; exit 2; }

mkdir -p "$DIR"
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
}
trap 'stop_server; rm -f "$DIR"/*.img' EXIT

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
    fresh_file "$img"
    case $srv in
    sluice|sluice-pool|sluice-noring|sluice-base|sluice-ilog)
        # sluice keeps ~10% of its file for GC and metadata: same file, smaller export.
        # sluice-pool: every request through the worker pool (no inline writes).
        # sluice-noring: READs in worker-pool batches instead of the read ring.
        # sluice-base: another build ($SLUICE_BASE), for A/B comparisons.
        # sluice-ilog: the same build, the volume created with --intent-log.
        local extra=() create=() bin=$SLUICE
        [ "$srv" = sluice-pool ] && extra=(--no-inline-writes)
        [ "$srv" = sluice-noring ] && extra=(--no-read-ring)
        [ "$srv" = sluice-base ] && bin=${SLUICE_BASE:?set SLUICE_BASE to the other build}
        [ "$srv" = sluice-ilog ] && create=(--intent-log)
        # the fresh zero-filled file is the script's own: --force past the probe
        "$bin" create "$img" --force "${create[@]}" >/dev/null
        "$bin" serve "$img" --socket "$SOCK" "${extra[@]}" >/dev/null 2>"$DIR/sluice.log" &
        SERVER_PID=$! ;;
    qemu-nbd)
        qemu-nbd -f raw --cache=none --aio=native --shared=16 --persistent -k "$SOCK" "$img" &
        SERVER_PID=$! ;;
    nbdkit)
        nbdkit --foreground -U "$SOCK" file "file=$img" &
        SERVER_PID=$! ;;
    nbdkit-nocache)
        # the file plugin told to keep its data out of the page cache
        nbdkit --foreground -U "$SOCK" file "file=$img" cache=none &
        SERVER_PID=$! ;;
    nbdkit-memory)
        # no media at all: what fio + libnbd + a fast server reach on this machine
        nbdkit --foreground -U "$SOCK" memory "size=${SIZE_MB}M" &
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
        echo "--ioengine=libaio --direct=1 --filename=$RAW_FILE --size=${SIZE_MB}M"
    else
        echo "--ioengine=nbd --uri=nbd+unix:///?socket=$SOCK --size=$(export_size)"
    fi
}

run_fio() {  # name, extra fio args...
    local name=$1; shift
    # shellcheck disable=SC2046
    fio --name="$name" $(target) \
        --bs=4k --runtime="$RUNTIME" --time_based \
        --group_reporting --output-format=json --output="$DIR/fio-$name.json" "$@" >/dev/null 2>&1
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(int(j["read"]["iops"]+j["write"]["iops"]))' "$DIR/fio-$name.json"
}

prefill() {  # sequential random-data fill so reads hit real data everywhere
    # shellcheck disable=SC2046
    fio --name=fill $(target) --rw=write --bs=1M --iodepth=8 --refill_buffers >/dev/null 2>&1
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
reads_from_memory() {
    case $1 in
    nbdkit) echo "nbdkit file (default cache) answers reads from the page cache" ;;
    nbdkit-memory) echo "nbdkit memory has no device" ;;
    esac
}

median() { python3 -c 'import statistics,sys; print(int(statistics.median(map(float, sys.argv[1:]))))' "$@"; }

declare -A RUNS CPUS IOPS CPU
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
        randwrite) n=$(run_fio rw --rw=randwrite --iodepth=32 --refill_buffers) ;;
        randread) n=$(run_fio rr --rw=randread --iodepth=32) ;;
        fsync) n=$(run_fio fs --rw=randwrite --iodepth=1 --numjobs=8 --fsync=1 --refill_buffers) ;;
        *) echo "unknown case $c" >&2; exit 2 ;;
        esac
        t1=$(cpu_ticks)
        # Server CPU per request: a figure the machine's other load barely moves.
        cpu=$(python3 -c "print(f'{($t1-$t0)/$(getconf CLK_TCK)*1e6/max(1,$n*$RUNTIME):.1f}')")
        RUNS[$c,$s]="${RUNS[$c,$s]:-} $n"
        CPUS[$c,$s]="${CPUS[$c,$s]:-} $cpu"
        stop_server
        rm -f "$DIR/$s.img"
        extra=""
        case $s in sluice*) extra=" ($(grep -o 'flushes ([^)]*), WA [0-9.]*' "$DIR/sluice.log" || true))" ;; esac
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
echo "(fio --ioengine=nbd over a Unix socket, 4 KiB, ${RUNTIME}s per run, ${SIZE_MB} MiB backing files in $DIR; median of $ROUNDS round(s))"
echo "(randread: only peers whose reads reach the device are run: raw = fio libaio O_DIRECT QD32 on the file, qemu-nbd --cache=none, nbdkit file cache=none; nbdkit's default cache and nbdkit memory answer from RAM)"
