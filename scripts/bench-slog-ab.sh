#!/usr/bin/env bash
# Paired `sluice bench slog` A/B of two sluice binaries: each round runs both
# (order alternating) on the same files, and prints, per size and build, the
# ring's and seal-on-FLUSH's time over the raw file's in the same invocation.
#
#   A=/path/sluice-main B=target/release/sluice DIR=/var/tmp/slog-ab ROUNDS=4 \
#     scripts/bench-slog-ab.sh
#
# DIR must already hold r.img (the raw file, written once with dd as a device
# would be: `dd if=/dev/zero of=r.img bs=1M count=2048 oflag=direct`); the
# volumes i.img and s.img in DIR are (re)created by the bench (`--force`).
set -euo pipefail
: "${A:?A=path of build A}" "${B:?B=path of build B}" "${DIR:?DIR=directory with r.img}"
ROUNDS=${ROUNDS:-4}
SIZES=${SIZES:-128K,1M,4M,8M}
[ -f "$DIR/r.img" ] || { echo "bench-slog-ab: $DIR/r.img missing (write it once with dd)" >&2; exit 2; }
cd "$DIR"
for run in $(seq 1 "$ROUNDS"); do
  order="A B"; [ $((run % 2)) = 0 ] && order="B A"
  for b in $order; do
    bin=$A; [ "$b" = B ] && bin=$B
    "$bin" bench slog --target ilog=sluice-ilog:i.img --target raw=file:r.img \
      --target seal=sluice:s.img --size 2G --region 1G --sizes "$SIZES" --force --quiet 2>&1 \
      | awk -v b="$b" -v r="$run" '/^Size/{on=1;next} on&&NF>=7&&$1~/^[0-9]+[KM]$/{gsub(/[()x]/,""); printf "%s %s %s ring/raw %.2f seal/raw %.2f raw_us %d\n", r, b, $1, $2/$4, $6/$4, $4} on&&NF<7{on=0}'
  done
done
