#!/usr/bin/env bash
# bench-rebuild.sh: how long `sluice replace` takes to rebuild a member of a
# 4+1 stripe set with about a quarter of the volume live, against its peer in
# the same run: `dd` of one whole member (O_DIRECT both ways, fsync), the cost
# of copying a member. Issue 20's target: rebuild <= 0.35x of the copy.
# Method: one set is made and filled once (`sluice bench fill` over REGION of
# SIZE); its members are kept. Each round restores the members (cp, not
# timed), then runs dd and the rebuild in an order that alternates from round
# to round. Reported per round: dd seconds, `sluice replace` wall seconds
# (mount included) and the rebuild's own seconds (what replace prints); the
# result is the median of the per-round ratios. A third peer, `reads`, is
# the floor a rebuild cannot beat on these members: the members' allocated
# bytes (live data and metadata: `du`) read from the four members kept, in
# parallel (dd, O_DIRECT), what a RAID-5 rebuild must read. dd of a member
# file is cheap where the file is sparse (holes read as zeros without IO),
# so on files, rather than devices, dd is a lower peer than a real copy.
# Not a test.
# Usage: scripts/bench-rebuild.sh
# Env: ROUNDS=5 SIZE=1G REGION=256M (live share = REGION/SIZE)
#      DIR=/var/tmp/sluice-bench-rebuild SLUICE=target/release/sluice
#      BEFORE=path/to/another/sluice (optional: its `replace` is timed too,
#      on the same restored members, each round, to compare two builds)
set -euo pipefail
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-1G}
REGION=${REGION:-256M}
DIR=${DIR:-/var/tmp/sluice-bench-rebuild}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
BEFORE=${BEFORE:+$(realpath "$BEFORE")}
[ -x "$SLUICE" ] || { echo "bench-rebuild: build first: cargo build --release" >&2; exit 2; }
. "$(dirname "$0")/bench-dir.sh"
own_dir bench-rebuild
trap 'rm -rf "$DIR"/m "$DIR"/keep "$DIR"/copy.img "$DIR"/new.img' EXIT
cd "$DIR"
rm -rf m keep copy.img new.img
mkdir -p m keep
members=(m/r0 m/r1 m/r2 m/r3 m/r4)
"$SLUICE" create --size "$SIZE" --parity 1 $(printf -- '--device %s ' "${members[@]}") >/dev/null
"$SLUICE" bench fill --target "sluice-stripe:$(IFS=,; echo "${members[*]}");parity=1" \
  --size "$SIZE" --region "$REGION" --force --quiet >/dev/null 2>fill.err || { cat fill.err >&2; exit 1; }
cp --sparse=always m/r* keep/
echo "member: $(stat -c %s m/r1) bytes; region $REGION of $SIZE written"
: > rounds.txt
time_of() { local t0 t1; t0=$(date +%s.%N); "$@" >out.txt 2>err.txt || { cat err.txt >&2; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
run_dd() { rm -f copy.img; sync; time_of dd if=m/r1 of=copy.img bs=1M iflag=direct oflag=direct conv=fsync; }
live_mib=$(( $(du -m keep/r1 | cut -f1) + 1 ))
read_members() { for i in 0 1 3 4; do dd if=m/r$i of=/dev/null bs=1M count="$live_mib" iflag=direct status=none & done; wait; }
run_reads() { sync; time_of read_members; }
run_rebuild() { # [binary]
  rm -f new.img; cp --sparse=always keep/r* m/; sync
  wall=$(time_of "${1:-$SLUICE}" replace $(printf -- '--device %s ' "${members[@]}") --old 2 --new new.img)
  own=$(sed -n 's/.* in \([0-9.]*\)s:.*/\1/p' out.txt)
  what=$(sed -n 's/.*s: \(.*\)/\1/p' out.txt)
}
for round in $(seq "$ROUNDS"); do
  if [ -n "$BEFORE" ]; then
    run_rebuild "$BEFORE"
    printf 'round %d: BEFORE replace %.3f s wall, rebuild %.3f s\n' "$round" "$wall" "$own" | tee -a rounds.txt
  fi
  if (( round % 2 )); then d=$(run_dd); f=$(run_reads); run_rebuild; else run_rebuild; f=$(run_reads); d=$(run_dd); fi
  printf 'round %d (load %s): dd %.3f s, reads %.3f s, replace %.3f s wall, rebuild %.3f s (%s): %.2fx wall, %.2fx rebuild, %.2fx of reads\n' \
    "$round" "$(cut -d' ' -f1 /proc/loadavg)" "$d" "$f" "$wall" "$own" "$what" "$(echo "$wall / $d" | bc -l)" "$(echo "$own / $d" | bc -l)" "$(echo "$own / $f" | bc -l)" | tee -a rounds.txt
done
python3 - rounds.txt <<'PY'
import re, statistics, sys
w, r, f = [], [], []
for line in open(sys.argv[1]):
    m = re.search(r': ([0-9.]+)x wall, ([0-9.]+)x rebuild, ([0-9.]+)x of reads', line)
    if m: w.append(float(m.group(1))); r.append(float(m.group(2))); f.append(float(m.group(3)))
text = open(sys.argv[1]).read()
b = [float(x) for x in re.findall(r'BEFORE replace ([0-9.]+) s', text)]
if b:
    import statistics as st
    a = [float(x) for x in re.findall(r', replace ([0-9.]+) s wall', text)]
    ob = [float(x) for x in re.findall(r'BEFORE replace [0-9.]+ s wall, rebuild ([0-9.]+) s', text)]
    oa = [float(x) for x in re.findall(r', rebuild ([0-9.]+) s \(', text)]
    print(f"median replace wall: this build {st.median(a):.3f} s, BEFORE {st.median(b):.3f} s; "
          f"rebuild alone: this build {st.median(oa):.3f} s, BEFORE {st.median(ob):.3f} s")
print(f"median over {len(w)} rounds: replace/dd {statistics.median(w):.2f}x wall, rebuild/dd {statistics.median(r):.2f}x (target <= 0.35x), rebuild/reads {statistics.median(f):.2f}x (the floor: 1.0x)")
PY
