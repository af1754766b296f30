#!/usr/bin/env bash
# bench-ceiling-ab.sh: `sluice bench ceiling` of two sluice binaries in
# paired rounds (issue 22's in-process targets). Each invocation measures
# the raw file and one build's volume (its own file, kept between rounds),
# so every ratio is to the raw file's sequential rate in the same
# invocation; the order of A and B flips every round. Prints one line per
# invocation and the medians of the ratios. Not a test.
#
#   A=/var/tmp/x/sluice-main B=target/release/sluice DIR=/var/tmp/x ROUNDS=4 \
#     scripts/bench-ceiling-ab.sh
#
# Env: SIZE=4G REGION=2G SECS=8; LOCK=/tmp/h16-bench.lock (each invocation
# runs under `flock $LOCK` when set, so no other benchmark overlaps it).
# DIR holds r.img (the raw file) and sA.img / sB.img, created when missing
# (2 x SIZE plus SIZE: mind the disk) and removed at the end unless KEEP=1.
set -euo pipefail
: "${A:?A=path of build A}" "${B:?B=path of build B}" "${DIR:?DIR=work directory}"
ROUNDS=${ROUNDS:-4}
SIZE=${SIZE:-4G}
REGION=${REGION:-2G}
SECS=${SECS:-8}
mkdir -p "$DIR"
cd "$DIR"
[ "${KEEP:-0}" = 1 ] || trap 'rm -f sA.img sB.img' EXIT
lines=$(mktemp)
for r in $(seq "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for b in $order; do
    bin=$A; [ "$b" = B ] && bin=$B
    lock=(); [ -n "${LOCK:-}" ] && lock=(flock "$LOCK")
    out=$("${lock[@]}" "$bin" bench ceiling --prefill --force --target raw=file:r.img \
      --target "sluice=sluice:s$b.img" --size "$SIZE" --region "$REGION" --seconds "$SECS" \
      --quiet 2>&1)
    la=$(cut -d' ' -f1 /proc/loadavg)
    echo "$out" | awk -v r="$r" -v b="$b" -v la="$la" '
      function num(s) { gsub(",", "", s); return s + 0 }
      $1 == "raw" && $2 ~ /^[0-9]/ { rs = num($2) }
      $1 == "sluice" && $2 ~ /^[0-9]/ { ss = num($2); ri = num($3); rm = num($4) }
      $1 == "sluice" && $2 == "randwrite" { cr = $5 }
      $1 == "sluice" && $2 == "seqwrite" { cs = $5 }
      END {
        if (rs == 0 || ss == 0) { printf "round %d %s: no result\n", r, b; exit }
        printf "round %d %s raw_seq %.0f seq %.0f seq/raw %.3f rand_iops %.0f rand/raw_seq %.3f cpu_rand_us %s cpu_seq_us %s load %s\n",
          r, b, rs, ss, ss / rs, ri, rm / rs, cr, cs, la
      }' | tee -a "$lines"
  done
done
for b in A B; do
  for k in seq/raw rand/raw_seq; do
    grep " $b raw_seq " "$lines" | awk -v k="$k" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' \
      | sort -g | awk -v b="$b" -v k="$k" '{ v[NR] = $1 } END {
          if (NR) printf "%s median %s %.3f (%d rounds)\n", b, k, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR }'
  done
done
rm -f "$lines"
