#!/usr/bin/env bash
# bench-mount.sh: mount time of a fully written volume, after a clean close and
# after a crash (kill -9 in the middle of random writes).
#
#  1. sluice create VOL --size SIZE --overprovision OP
#  2. sluice bench fill: write every logical block once with random data, close cleanly
#  3. clean mount: `sluice info --json VOL` (read-only mount) RUNS times;
#     prints the engine's own mount_ms and the whole command's wall time
#  4. crash: `sluice bench steady` (4 KiB random writes, 32 threads) killed with
#     SIGKILL after CRASH_AFTER seconds, so the log holds chunks newer than the last
#     checkpoint; then the same mount measurement (replay included)
#  5. the volume is deleted unless KEEP=1
#
# Usage: scripts/bench-mount.sh [SIZE]          (default 64G)
# Environment: BENCH_DIR (default ./bench-mount.d), SLUICE (default
#   target/release/sluice), OP (over-provisioning percent, default 5 to save disk;
#   mount work does not depend on it), CRASH_AFTER (default 20), RUNS (default 3), KEEP.
# Disk needed: about SIZE / (1 - OP/100) plus the checkpoint slots.
set -euo pipefail

size=${1:-64G}
dir=${BENCH_DIR:-./bench-mount.d}
sluice=${SLUICE:-target/release/sluice}
op=${OP:-5}
crash_after=${CRASH_AFTER:-20}
runs=${RUNS:-3}
mkdir -p "$dir"
vol=$dir/mount.vol
bench_pid=

cleanup() {
    if [ -n "$bench_pid" ]; then kill -9 "$bench_pid" 2>/dev/null || true; fi
    if [ -z "${KEEP:-}" ]; then rm -f "$vol"; fi
}
trap cleanup EXIT INT TERM

now() { date +%s.%N; }

measure() { # label
    for i in $(seq 1 "$runs"); do
        t0=$(now)
        out=$("$sluice" info --json "$vol")
        t1=$(now)
        ms=$(printf '%s\n' "$out" | grep -o '"mount_ms": *[0-9]*' | grep -o '[0-9]*$')
        replayed=$(printf '%s\n' "$out" | grep -o '"chunks_replayed": *[0-9]*' | grep -o '[0-9]*$')
        clean=$(printf '%s\n' "$out" | grep -o '"clean": *[a-z]*' | head -1 | grep -o '[a-z]*$')
        printf '%-6s run %d: engine mount %5d ms, sluice info wall %6.3f s, chunks replayed %s, clean flag %s\n' \
            "$1" "$i" "$ms" "$(echo "$t1 - $t0" | bc)" "$replayed" "$clean"
    done
}

rm -f "$vol"
echo "== create $size (over-provisioning $op%) at $vol"
"$sluice" create "$vol" --size "$size" --overprovision "$op"
echo "== fill: every block once, 1 MiB sequential random data"
"$sluice" bench fill --quiet --target "sluice:$vol" --region "$size" --threads 4
"$sluice" info "$vol" | grep -E "exported|segments|map" || true

echo "== mount after a clean close"
measure clean

echo "== crash: 4 KiB random writes for ${crash_after}s, then kill -9"
"$sluice" bench steady --quiet --force --target "sluice:$vol" --region "$size" --duration 1h \
    --interval 5 >/dev/null 2>&1 &
bench_pid=$!
sleep "$crash_after"
kill -9 "$bench_pid"
wait "$bench_pid" 2>/dev/null || true
bench_pid=
echo "== mount after the crash (read-only: replay is redone each run)"
measure crash
