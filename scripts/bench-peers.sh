#!/usr/bin/env bash
# bench-peers.sh: compare sluice with the usual peers in one command.
#
# Starts qemu-nbd (--cache=none --aio=native) and nbdkit (file plugin) on unix
# sockets, both exporting the same raw backing file, then runs
#   sluice bench WORKLOAD --target sluice:VOL --target file:RAW \
#       --target nbd:<qemu-nbd> --target nbd:<nbdkit> --target nbd:<sluice serve> ARGS...
# so every peer is measured in the same run and the tables show ratios to sluice.
# The servers are stopped (by their own pids) on exit, also on Ctrl-C.
#
# Usage: scripts/bench-peers.sh WORKLOAD [sluice bench args...]
# Environment:
#   BENCH_DIR   where the volume, raw file and sockets live (default ./bench-peers.d)
#   SIZE        size of the volume and of the raw file (default 8G)
#   SLUICE      the sluice binary (default target/release/sluice)
#   SERVE=0     do not start `sluice serve` (on a second volume, measured over NBD)
#   PEERS       space-separated subset of: sluice file qemu-nbd nbdkit serve
#               (default: "sluice serve file qemu-nbd nbdkit"; serve is left out with SERVE=0)
# Needs: qemu-utils (qemu-nbd) and nbdkit (Debian/Ubuntu: apt-get install qemu-utils nbdkit).
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
workload=$1
shift

dir=${BENCH_DIR:-./bench-peers.d}
size=${SIZE:-8G}
sluice=${SLUICE:-target/release/sluice}
if [ "${SERVE:-1}" = 0 ]; then def="sluice file qemu-nbd nbdkit"; else def="sluice serve file qemu-nbd nbdkit"; fi
peers=${PEERS:-$def}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
raw=$dir/peer.raw
vol=$dir/sluice.vol
pids=()

cleanup() {
    for p in "${pids[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]:-}"; do
        [ -n "$p" ] && wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT INT TERM

has() { [[ " $peers " == *" $1 "* ]]; }

wait_socket() {
    for _ in $(seq 1 200); do
        [ -S "$1" ] && return 0
        sleep 0.05
    done
    echo "bench-peers: $2 did not create $1" >&2
    exit 1
}

if [ ! -e "$raw" ]; then
    # Allocated up front so no peer pays for the filesystem's block allocation.
    fallocate -l "$size" "$raw" 2>/dev/null || truncate -s "$size" "$raw"
fi

targets=()
has sluice && targets+=(--target "sluice=sluice:$vol")
has file && targets+=(--target "raw-file=file:$raw")
if has qemu-nbd; then
    command -v qemu-nbd >/dev/null || { echo "bench-peers: qemu-nbd not installed (apt-get install qemu-utils)" >&2; exit 1; }
    rm -f "$dir/qemu.sock"
    qemu-nbd -f raw --cache=none --aio=native --discard=unmap -x peer -k "$dir/qemu.sock" "$raw" &
    pids+=($!)
    wait_socket "$dir/qemu.sock" qemu-nbd
    targets+=(--target "qemu-nbd=nbd:nbd+unix:///peer?socket=$dir/qemu.sock")
fi
if has nbdkit; then
    command -v nbdkit >/dev/null || { echo "bench-peers: nbdkit not installed (apt-get install nbdkit)" >&2; exit 1; }
    rm -f "$dir/nbdkit.sock"
    # nbdkit file plugin, cache=none: evicts written pages from the page cache (not O_DIRECT).
    nbdkit -f -e peer -U "$dir/nbdkit.sock" file "$raw" cache=none &
    pids+=($!)
    wait_socket "$dir/nbdkit.sock" nbdkit
    targets+=(--target "nbdkit=nbd:nbd+unix:///peer?socket=$dir/nbdkit.sock")
fi
if has serve; then
    if ! "$sluice" serve --help >/dev/null 2>&1; then
        echo "bench-peers: this sluice has no 'serve' command yet; skipping nbd:sluice" >&2
    else
        served=$dir/served.vol
        [ -e "$served" ] || "$sluice" create "$served" --size "$size" >/dev/null
        rm -f "$dir/sluice.sock"
        "$sluice" serve "$served" --socket "$dir/sluice.sock" --export-name sluice >/dev/null &
        pids+=($!)
        wait_socket "$dir/sluice.sock" "sluice serve"
        targets+=(--target "sluice-serve=nbd:nbd+unix:///sluice?socket=$dir/sluice.sock")
    fi
fi

# The raw file is ours: --force lets write tests run on it after the first run
# (it then holds benchmark data, which the safety check would otherwise refuse).
"$sluice" bench "$workload" --size "$size" --force "${targets[@]}" "$@"
