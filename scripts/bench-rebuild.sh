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
#
# MEMBERS=throttled emulates members that are separate devices, each with
# its own bandwidth (docs/stripes.md §0, fifth pass): every member file, the
# new member and dd's copy sit behind their own loop device (`losetup
# --direct-io=on`, so no page cache in between), and the timed commands run
# in a blkio cgroup (v1 `blkio.throttle.{read,write}_bps_device`, or v2
# `io.max` where the io controller is on) that limits each loop device to
# MB_S MB/s read and MB_S MB/s write, the same for every device. A loop
# device charges holes like data, so dd pays for the whole member as it would
# on a device. A fourth peer is timed there: `copy`, the member copied with
# its read and its write overlapped (`dd | dd`), the fastest plain copy on
# such devices (dd alone reads, then writes, each block: about 2x member/rate).
# Needs root, losetup and a blkio or io cgroup controller; loop devices and
# the cgroup are removed on exit. Pick MB_S low enough that neither the
# disk under the files (all 7 devices share it) nor the CPU is the bound.
# Not a test.
# Usage: scripts/bench-rebuild.sh
# Env: ROUNDS=5 SIZE=1G REGION=256M (live share = REGION/SIZE)
#      DIR=/var/tmp/sluice-bench-rebuild SLUICE=target/release/sluice
#      BEFORE=path/to/another/sluice (optional: its `replace` is timed too,
#      on the same restored members, each round, to compare two builds)
#      MEMBERS=files|throttled MB_S=100 (throttled: MB/s per device, 10^6)
set -euo pipefail
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-1G}
REGION=${REGION:-256M}
DIR=${DIR:-/var/tmp/sluice-bench-rebuild}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
BEFORE=${BEFORE:+$(realpath "$BEFORE")}
MEMBERS=${MEMBERS:-files}
MB_S=${MB_S:-100}
[ -x "$SLUICE" ] || { echo "bench-rebuild: build first: cargo build --release" >&2; exit 2; }
case $MEMBERS in files|throttled) ;; *) echo "bench-rebuild: MEMBERS=files or throttled" >&2; exit 2;; esac
. "$(dirname "$0")/bench-dir.sh"
own_dir bench-rebuild
LOOPS=() CGBASE= CG=
cleanup() {
  local l
  for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  if [ -n "$CGBASE" ]; then for l in "$CGBASE"-*; do [ -d "$l" ] && rmdir "$l" 2>/dev/null; done; fi
  rm -rf "$DIR"/m "$DIR"/keep "$DIR"/copy.img "$DIR"/new.img
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$DIR"
rm -rf m keep copy.img new.img
mkdir -p m keep
files=(m/r0 m/r1 m/r2 m/r3 m/r4)
"$SLUICE" create --size "$SIZE" --parity 1 $(printf -- '--device %s ' "${files[@]}") >/dev/null
"$SLUICE" bench fill --target "sluice-stripe:$(IFS=,; echo "${files[*]}");parity=1" \
  --size "$SIZE" --region "$REGION" --force --quiet >/dev/null 2>fill.err || { cat fill.err >&2; exit 1; }
cp --sparse=always m/r* keep/
member_bytes=$(stat -c %s m/r1)
rate=; [ "$MEMBERS" = throttled ] && rate=", $MB_S MB/s each way per device"
echo "member: $member_bytes bytes; region $REGION of $SIZE written; members: $MEMBERS$rate"
live_mib=$(( $(du -m keep/r1 | cut -f1) + 1 ))

# the devices the timed commands use: the files, or loop devices over them
members=("${files[@]}") new=new.img copy=copy.img
in_cg() { "$@"; }
if [ "$MEMBERS" = throttled ]; then
  [ "$(id -u)" = 0 ] || { echo "bench-rebuild: MEMBERS=throttled needs root (losetup, cgroups)" >&2; exit 2; }
  bps=$(( MB_S * 1000000 ))
  if [ -w /sys/fs/cgroup/blkio/cgroup.procs ]; then
    CGBASE=/sys/fs/cgroup/blkio/sluice-bench-rebuild-$$ CGV=1
  elif grep -qw io /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    CGBASE=/sys/fs/cgroup/sluice-bench-rebuild-$$ CGV=2
  else
    echo "bench-rebuild: no blkio (v1) or io (v2, enabled in the root's subtree_control) cgroup controller" >&2; exit 2
  fi
  # run "$@" inside a cgroup of its own (its children too), every loop
  # device limited; its bytes read and written are left in moved.txt
  in_cg() {
    CG=$CGBASE-$RANDOM; mkdir "$CG"
    local l rc=0; for l in "${LOOPS[@]}"; do limit "$l"; done
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@" || rc=$?
    moved > moved.txt; rmdir "$CG"; return $rc
  }
  limit() { # loop device: MB_S each way
    local mm; mm=$(printf '%d:%d' "0x$(stat -c %t "$1")" "0x$(stat -c %T "$1")")
    if [ "$CGV" = 1 ]; then
      echo "$mm $bps" > "$CG/blkio.throttle.read_bps_device"
      echo "$mm $bps" > "$CG/blkio.throttle.write_bps_device"
    else
      echo "$mm rbps=$bps wbps=$bps" > "$CG/io.max"
    fi
  }
  loop() { losetup --direct-io=on -f --show "$1"; } # prints the device
fi
# the members as kept, the new member and dd's copy blank (not timed)
restore() {
  local l i
  for l in "${LOOPS[@]}"; do losetup -d "$l"; done
  LOOPS=()
  rm -f new.img copy.img; cp --sparse=always keep/r* m/
  if [ "$MEMBERS" = throttled ]; then
    truncate -s "$member_bytes" new.img copy.img
    members=()
    for i in "${files[@]}"; do l=$(loop "$i"); LOOPS+=("$l"); members+=("$l"); done
    new=$(loop new.img); LOOPS+=("$new")
    copy=$(loop copy.img); LOOPS+=("$copy")
  fi
  sync
}
# bytes read and written in cgroup $CG (v1: its every device; v2: the same)
moved() {
  if [ "$CGV" = 1 ]; then
    awk '$2=="Read"{r+=$3} $2=="Write"{w+=$3} END{printf "%d %d\n", r, w}' "$CG/blkio.throttle.io_service_bytes_recursive"
  else
    awk '{for(i=2;i<=NF;i++){split($i,a,"="); if(a[1]=="rbytes")r+=a[2]; if(a[1]=="wbytes")w+=a[2]}} END{printf "%d %d\n", r, w}' "$CG/io.stat"
  fi
}
: > rounds.txt
time_of() { local t0 t1; t0=$(date +%s.%N); in_cg "$@" >out.txt 2>err.txt || { cat err.txt >&2; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
run_dd() { sync; time_of dd if="${members[1]}" of="$copy" bs=1M iflag=direct oflag=direct conv=fsync; }
run_copy() { sync; time_of sh -c 'dd if="$0" bs=1M iflag=direct status=none | dd of="$1" bs=1M iflag=fullblock oflag=direct conv=fsync status=none' "${members[1]}" "$copy"; }
run_reads() {
  sync
  time_of bash -c 'n=$1; shift; for m in "$@"; do dd if="$m" of=/dev/null bs=1M count="$n" iflag=direct status=none & done; wait' \
    _ "$live_mib" "${members[0]}" "${members[1]}" "${members[3]}" "${members[4]}"
}
run_rebuild() { # [binary]
  restore
  wall=$(time_of "${1:-$SLUICE}" replace $(printf -- '--device %s ' "${members[@]}") --old 2 --new "$new" --force)
  own=$(sed -n 's/.* in \([0-9.]*\)s:.*/\1/p' out.txt)
  what=$(sed -n 's/.*s: \(.*\)/\1/p' out.txt)
  if [ "$MEMBERS" = throttled ]; then
    read -r r1 w1 < moved.txt
    what="$what; $(( r1 >> 20 )) MiB read, $(( w1 >> 20 )) MiB written"
  fi
}
restore
for round in $(seq "$ROUNDS"); do
  if [ -n "$BEFORE" ]; then
    run_rebuild "$BEFORE"
    printf 'round %d: BEFORE replace %.3f s wall, rebuild %.3f s\n' "$round" "$wall" "$own" | tee -a rounds.txt
  fi
  c=0
  if (( round % 2 )); then
    d=$(run_dd); [ "$MEMBERS" = throttled ] && c=$(run_copy); f=$(run_reads); run_rebuild
  else
    run_rebuild; f=$(run_reads); [ "$MEMBERS" = throttled ] && c=$(run_copy); d=$(run_dd)
  fi
  cc=
  [ "$MEMBERS" = throttled ] && cc=$(printf ', copy %.3f s, %.2fx of copy' "$c" "$(echo "$own / $c" | bc -l)")
  printf 'round %d (load %s): dd %.3f s, reads %.3f s, replace %.3f s wall, rebuild %.3f s (%s): %.2fx wall, %.2fx rebuild, %.2fx of reads%s\n' \
    "$round" "$(cut -d' ' -f1 /proc/loadavg)" "$d" "$f" "$wall" "$own" "$what" "$(echo "$wall / $d" | bc -l)" "$(echo "$own / $d" | bc -l)" "$(echo "$own / $f" | bc -l)" "$cc" | tee -a rounds.txt
done
python3 - rounds.txt <<'PY'
import re, statistics, sys
w, r, f, c = [], [], [], []
for line in open(sys.argv[1]):
    m = re.search(r': ([0-9.]+)x wall, ([0-9.]+)x rebuild, ([0-9.]+)x of reads', line)
    if m: w.append(float(m.group(1))); r.append(float(m.group(2))); f.append(float(m.group(3)))
    m = re.search(r', ([0-9.]+)x of copy', line)
    if m: c.append(float(m.group(1)))
text = open(sys.argv[1]).read()
b = [float(x) for x in re.findall(r'BEFORE replace ([0-9.]+) s', text)]
if b:
    import statistics as st
    a = [float(x) for x in re.findall(r', replace ([0-9.]+) s wall', text)]
    ob = [float(x) for x in re.findall(r'BEFORE replace [0-9.]+ s wall, rebuild ([0-9.]+) s', text)]
    oa = [float(x) for x in re.findall(r', rebuild ([0-9.]+) s \(', text)]
    print(f"median replace wall: this build {st.median(a):.3f} s, BEFORE {st.median(b):.3f} s; "
          f"rebuild alone: this build {st.median(oa):.3f} s, BEFORE {st.median(ob):.3f} s")
extra = f", rebuild/copy {statistics.median(c):.2f}x (dd | dd, read and write overlapped)" if c else ""
print(f"median over {len(w)} rounds: replace/dd {statistics.median(w):.2f}x wall, rebuild/dd {statistics.median(r):.2f}x (target <= 0.35x), rebuild/reads {statistics.median(f):.2f}x (the floor: 1.0x){extra}")
PY
