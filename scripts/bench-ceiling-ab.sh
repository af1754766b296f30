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
# A missing image is created by the bench with posix_fallocate (unwritten
# extents: the first lap then measures ext4's extent conversions, not
# sluice); PREWRITE=1 writes each missing image once with dd first (r.img
# SIZE, sA/sB.img SIZE x 5/4, under $LOCK), and every later invocation
# reuses it in place (--force; a sluice image holding a volume is mounted).
# Each invocation's --json goes to DIR/ceil-R-B.json; the line adds, from
# the volume's counters over the whole invocation (prefill, random and
# sequential phases), pacing sleeps per random write, checkpoints and the
# writers' checkpoint waits (count, ms), and the tails run beside a victim.
set -euo pipefail
: "${A:?A=path of build A}" "${B:?B=path of build B}" "${DIR:?DIR=work directory}"
ROUNDS=${ROUNDS:-4}
SIZE=${SIZE:-4G}
REGION=${REGION:-2G}
SECS=${SECS:-8}
mkdir -p "$DIR"
cd "$DIR"
[ "${KEEP:-0}" = 1 ] || trap 'rm -f sA.img sB.img' EXIT
if [ "${PREWRITE:-0}" = 1 ]; then
  gib=${SIZE%G}
  [ "$gib" != "$SIZE" ] || { echo "PREWRITE=1 needs SIZE in G" >&2; exit 2; }
  for f in r.img sA.img sB.img; do
    [ -e "$f" ] && continue
    mib=$((gib * 1024)); [ "$f" = r.img ] || mib=$((gib * 1280))
    lock=(); [ -n "${LOCK:-}" ] && lock=(flock "$LOCK")
    "${lock[@]}" dd if=/dev/zero of="$f" bs=1M count="$mib" oflag=direct status=none
  done
fi
lines=$(mktemp)
for r in $(seq "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for b in $order; do
    bin=$A; [ "$b" = B ] && bin=$B
    lock=(); [ -n "${LOCK:-}" ] && lock=(flock "$LOCK")
    out=$("${lock[@]}" "$bin" bench ceiling --prefill --force --target raw=file:r.img \
      --target "sluice=sluice:s$b.img" --size "$SIZE" --region "$REGION" --seconds "$SECS" \
      --quiet --json "ceil-$r-$b.json" 2>&1)
    la=$(cut -d' ' -f1 /proc/loadavg)
    hk=$(jq -r '.targets[] | select(.target == "sluice") as $t
      | ($t.stats_after) as $a | ($t.stats_before // {}) as $b
      | ([$t.phases[] | select(.name == "randwrite") | .ops] | add // 0) as $n
      | def d(k): ($a[k] // 0) - ($b[k] // 0);
      "sleeps/rand \(if $n > 0 then (d("pace_sleeps") / $n * 1000 | round / 1000) else "-" end) ckpts \(d("checkpoints")) ckpt_waits \(d("checkpoint_waits")) \(d("checkpoint_wait_us") / 1000 | round)ms tails_beside \(d("hk_tails_overlapped")) gc_runs \(d("gc_runs"))"' \
      "ceil-$r-$b.json" 2>/dev/null || echo "hk -")
    echo "$out" | awk -v r="$r" -v b="$b" -v la="$la" -v hk="$hk" '
      function num(s) { gsub(",", "", s); return s + 0 }
      $1 == "raw" && $2 ~ /^[0-9]/ { rs = num($2) }
      $1 == "sluice" && $2 ~ /^[0-9]/ { ss = num($2); ri = num($3); rm = num($4) }
      $1 == "sluice" && $2 == "randwrite" { cr = $5 }
      $1 == "sluice" && $2 == "seqwrite" { cs = $5 }
      END {
        if (rs == 0 || ss == 0) { printf "round %d %s: no result\n", r, b; exit }
        printf "round %d %s raw_seq %.0f seq %.0f seq/raw %.3f rand_iops %.0f rand/raw_seq %.3f cpu_rand_us %s cpu_seq_us %s %s load %s\n",
          r, b, rs, ss, ss / rs, ri, rm / rs, cr, cs, hk, la
      }' | tee -a "$lines"
  done
done
for b in A B; do
  for k in seq/raw rand/raw_seq cpu_rand_us sleeps/rand; do
    grep " $b raw_seq " "$lines" | awk -v k="$k" '{ for (i = 1; i < NF; i++) if ($i == k && $(i + 1) ~ /^[0-9.]+$/) print $(i + 1) }' \
      | sort -g | awk -v b="$b" -v k="$k" '{ v[NR] = $1 } END {
          if (NR) printf "%s median %s %.3f (%d rounds)\n", b, k, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, NR }'
  done
done
rm -f "$lines"
