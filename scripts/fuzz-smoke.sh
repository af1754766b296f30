#!/usr/bin/env bash
# fuzz-smoke.sh: short cargo-fuzz run of every format decoder and of recovery, for CI.
# Installs cargo-fuzz if missing, builds the targets in fuzz/ on the stable toolchain
# (RUSTC_BOOTSTRAP=1 unlocks the -Z flags cargo-fuzz passes), then runs each target
# for FUZZ_SECONDS (default 15) from the committed seeds (fuzz/seeds/, and
# fuzz/regressions/ replayed first). Exits non-zero on the first crash, leaving the
# input in fuzz/artifacts/TARGET/.
#
#   scripts/fuzz-smoke.sh                 # all targets, 15 s each
#   FUZZ_SECONDS=60 scripts/fuzz-smoke.sh mount superblock
#   FUZZ_SANITIZER=address scripts/fuzz-smoke.sh    # ASan build (slower)
#
# Debug assertions and overflow checks are on (cargo-fuzz's default without -O).
# The default sanitizer is none: the code under test is safe Rust apart from
# AlignedBuf, and ASan roughly halves the executions per second.
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-15}
SANITIZER=${FUZZ_SANITIZER:-none}
ALL=(superblock chunk_header chunk_verify checkpoint_header checkpoint_segments map_decode mount nbd_proto
     packed intent_record logdev_superblock stripe_identity obj_checkpoint obj_log)
TARGETS=("${@:-${ALL[@]}}")
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

echo "fuzz-smoke: building ${#TARGETS[@]} target(s) (sanitizer: $SANITIZER)"
cargo fuzz build --sanitizer "$SANITIZER"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for t in "${TARGETS[@]}"; do
    mkdir -p "$work/$t" "fuzz/artifacts/$t"
    # Replay the crash regressions first (a directory of files: run once each).
    if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
        if ! cargo fuzz run --sanitizer "$SANITIZER" "$t" fuzz/regressions/$t/* \
            >"$work/$t.regress.log" 2>&1; then
            echo "fuzz-smoke: $t: a committed regression input fails again"
            tail -n 40 "$work/$t.regress.log"
            failed=1
            continue
        fi
    fi
    start=$(date +%s)
    if cargo fuzz run --sanitizer "$SANITIZER" "$t" "$work/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -max_len=20000 -timeout=10 -print_final_stats=1 >"$work/$t.log" 2>&1; then
        stats=$(grep -E '^stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}')
        cov=$(grep -oE 'cov: [0-9]+' "$work/$t.log" | tail -n 1)
        echo "fuzz-smoke: $t ok: ${stats:-?} runs in $(($(date +%s) - start)) s, $cov, corpus $(ls "$work/$t" | wc -l)"
    else
        echo "fuzz-smoke: $t CRASHED; input saved in fuzz/artifacts/$t/"
        tail -n 60 "$work/$t.log"
        failed=1
    fi
done
exit $failed
