#!/usr/bin/env bash
# Issue 21's numbers, by hand (not in CI), all on one single-node Ceph
# (scripts/ceph-cluster.sh DIR --rgw, started here if it is not running):
#
#   1. the RBD baseline and its file peer (scripts/bench-rbd.sh: fio rbd
#      engine, 4 KiB random writes at QD32 and QD1, each write durable; a
#      file O_DIRECT+O_DSYNC at the same depths);
#   2. sluice over NBD (scripts/bench-nbd.sh, fio nbd engine, 4 KiB): a
#      local file ("sluice"), and a volume in radosgw's S3 in both modes
#      ("sluice-s3": FLUSH durable in the cache's metadata file;
#      "sluice-s3-durable": FLUSH durable in the store, --flush-to store);
#      cases randwrite (QD32, no FLUSH: fio's nbd engine sends none),
#      fsync32 (32 writers, each a write + FLUSH at a time: 32 outstanding
#      durable writes, the issue's durable QD32 against RBD's QD32) and
#      fsync-qd1 (QD1 write + FLUSH); CASES="..." picks some;
#   3. the backend's CPU seconds (every OSD and radosgw, utime + stime from
#      /proc/PID/stat) around each sluice run, per GiB of host writes, and
#      the store bytes per host byte sluice reports at its stop.
#
#   scripts/bench-objects.sh DIR [SECONDS]      # default 30 s a run
#
# Prints each run and a summary; the tables in docs/objects.md §4 come from it.
# SKIP_RBD=1 skips step 1; OBJ_SERVERS="sluice-s3-durable" runs only those
# servers of step 2. The sluice volumes are deleted after each run
# (scripts/bench-nbd.sh; KEEP_VOLUMES=1 keeps them).
# After each run a line from scripts/osd-breakdown.py: what osd.0 did per GiB
# of host writes (its perf counters) and what sluice asked of the store
# (docs/objects.md §4.8); RBD_QDS=32 (scripts/bench-rbd.sh) runs RBD's QD32
# case only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [SECONDS]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
secs=${2:-30}
# radosgw only when an S3 backend runs (BACKENDS=rados needs none)
rgw=()
[[ " ${BACKENDS:-s3} " == *" s3 "* ]] && rgw=(--rgw)
"$root/scripts/ceph-cluster.sh" start "$dir" "${rgw[@]}" >/dev/null
if [ "${SKIP_RBD:-0}" != 1 ]; then
  echo "== RBD baseline and file peer ($secs s a run)"
  "$root/scripts/bench-rbd.sh" "$dir" "$secs"
fi
AWS_ENDPOINT_URL=
if [ ${#rgw[@]} -gt 0 ]; then
  set -a
  # shellcheck disable=SC1091
  . "$dir/s3.env"
  set +a
fi
tck=$(getconf CLK_TCK)
backend_ticks() {
  local t=0 f pid
  for f in "$dir"/run/osd.*.pid "$dir"/run/client.rgw.a.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    t=$((t + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
  done
  echo $t
}
rows=() bds=()
# osd.0's perf counters (its admin socket; {} without one): the OSD's own
# write ops, their latency and how many BlueStore deferred, around each run
osd_perf() {
  timeout 20 ceph --admin-daemon "$dir/run/ceph-osd.0.asok" perf dump >"$1" 2>/dev/null || echo '{}' >"$1"
}
# BACKENDS="s3 rados": rados runs the two object servers on rados://sluice
# through librados (SLUICE_RADOS: a `cargo build --release --features rados`
# binary); each backend's sluice-s3* rows are named by it
# LOG_PUTS="1 8": the store-durable server once per value of
# SLUICE_LOG_PUTS (log PUTs in flight, docs/objects.md §5.0.2), rows named
# "K=N"; unset: the built-in default only
# LOG_PIECES="0 60": the same, once per SLUICE_LOG_PIECE_KIB (the log bytes
# one log object of a FLUSH group holds at most, 0 = the whole group in one
# object; docs/objects.md §4.6), rows named "P=N"
# SLUICE_RADOS="A B": several builds, each server and case run with each in
# turn (an A/B pair in one run; rows tagged with the binary's file name)
read -ra bins <<<"${SLUICE_RADOS:-}"
[ ${#bins[@]} -gt 0 ] || bins=("")
for be in ${BACKENDS:-s3}; do
for srv in ${OBJ_SERVERS:-sluice sluice-s3 sluice-s3-durable}; do
  [ "$be" = rados ] && [ "$srv" = sluice ] && continue
  for bin in "${bins[@]}"; do
  [ "$be" != rados ] && [ "$bin" != "${bins[0]}" ] && continue
  ks=(default)
  [ "$srv" = sluice-s3-durable ] && [ -n "${LOG_PUTS:-}" ] && read -ra ks <<<"$LOG_PUTS"
  ps=(default)
  [ "$srv" = sluice-s3-durable ] && [ -n "${LOG_PIECES:-}" ] && read -ra ps <<<"$LOG_PIECES"
  for k in "${ks[@]}"; do
  for pc in "${ps[@]}"; do
  for c in ${CASES:-randwrite fsync32 fsync-qd1}; do
    tag=
    [ ${#bins[@]} -gt 1 ] && [ "$be" = rados ] && tag=$(basename "$bin")
    out=$dir/nbd-$be-$srv-$k-$pc-$c${tag:+-$tag}
    env=(S3_ENDPOINT=$AWS_ENDPOINT_URL)
    [ "$be" = rados ] && env=(RADOS_CONF=$dir/ceph.conf SLUICE=${bin:?SLUICE_RADOS: a --features rados build})
    [ "$k" != default ] && env+=(SLUICE_LOG_PUTS="$k")
    [ "$pc" != default ] && env+=(SLUICE_LOG_PIECE_KIB="$pc")
    rm -rf "$out"
    mkdir -p "$out"
    t0=$(backend_ticks)
    osd_perf "$out/perf0.json"
    env "${env[@]}" SERVERS=$srv RUNTIME=$secs SIZE_MB=${SIZE_MB:-1024} \
      DIR=$out "$root/scripts/bench-nbd.sh" "$c" 2>"$out/stderr" >"$out/stdout" ||
      { cat "$out/stderr" >&2; exit 1; }
    t1=$(backend_ticks)
    osd_perf "$out/perf1.json"
    json=$out/fio-rw.json
    [ "$c" = fsync-qd1 ] && json=$out/fio-fs1.json
    [ "$c" = fsync32 ] && json=$out/fio-fs32.json
    line=$(grep "round 1 $c $srv" "$out/stderr" || true)
    name=$srv
    [ "$srv" != sluice ] && name="$srv ($be)"
    [ "$k" != default ] && name="$name K=$k"
    [ "$pc" != default ] && name="$name P=$pc"
    [ -n "$tag" ] && name="$name [$tag]"
    row=$(python3 - "$json" $((t1 - t0)) "$tck" "$name" "$c" "$line" "$out/sluice.log" <<'EOF'
import json, re, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["write"]
ticks, tck, srv, case, line = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
try:
    log = open(sys.argv[7], errors="replace").read()
except OSError:
    log = ""
# the FLUSH log (store-durable): mean PUT, log bytes per host byte
m = re.search(r"FLUSH log: (\d+) object\(s\) put, ([0-9.]+) ms a PUT", log)
put = f"{m.group(2)} ms x {m.group(1)}" if m else "-"
m = re.search(r"([0-9.]+) MiB of FLUSH log objects", log)
logb = f"{float(m.group(1)) * 2**20 / j['io_bytes']:.2f}" if m and j["io_bytes"] and put != "-" else "-"
# the OSD's write ops in the run: count, mean latency, share deferred
osd = "-"
try:
    d = sys.argv[7].rsplit("/", 1)[0]
    p0, p1 = (json.load(open(f"{d}/perf{i}.json")) for i in (0, 1))
    ops = p1["osd"]["op_w"] - p0["osd"]["op_w"]
    wlat = p1["osd"]["op_w_latency"]["sum"] - p0["osd"]["op_w_latency"]["sum"]
    dfr = p1["bluestore"]["deferred_write_ops"] - p0["bluestore"]["deferred_write_ops"]
    osd = f"{ops} ops, {wlat / max(ops, 1) * 1000:.1f} ms, {dfr / max(ops, 1):.2f} deferred writes an op"
except (OSError, KeyError, ValueError):
    pass
gib = j["io_bytes"] / 2**30
lat = j["clat_ns"]
p99 = lat.get("percentile", {}).get("99.000000", 0) / 1000
cpu = ticks / tck
m = re.search(r"store bytes per host byte ([0-9.]+)", line)
sb = m.group(1) if m else "-"
per = f"{cpu / gib:.1f}" if srv != "sluice" and gib > 0 else "-"
us = 1e6 / j["iops"] if j["iops"] else 0
print(f"| {srv} {case} | {j['iops']:.0f} | {us:.0f} | {lat['mean']/1000:.0f} | {p99:.0f} | {cpu:.1f} | {per} | {sb} | {put} | {logb} | {osd} |")
EOF
)
    echo "$row"
    rows+=("$row")
    # what the OSD did per GiB and what sluice asked of it (§4.8)
    bd=$(python3 "$root/scripts/osd-breakdown.py" "$name $c" "$out/perf0.json" "$out/perf1.json" \
      "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["io_bytes"])' "$json")" \
      "$(python3 -c "print($((t1 - t0)) / $tck)")" "$out/sluice.log" || true)
    echo "$bd"
    bds+=("$bd")
  done
  done
  done
  done
done
done
echo
echo "| run | IOPS | us per op (1/IOPS) | mean write lat us | p99 write lat us | OSD+rgw CPU s | per GiB | store B / host B | log PUT mean x count | log B / host B | OSD write ops, mean latency, deferred writes an op |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${bds[@]}"
