#!/usr/bin/env bash
# The RBD baseline of issue 21, by hand (not in CI): fio's rbd engine against
# the single-node Ceph of scripts/ceph-cluster.sh, 4 KiB random writes at
# queue depth 32 and 1, and the OSDs' CPU seconds per GiB written (utime +
# stime from /proc/PID/stat of every OSD, before and after each run), with
# its peer in the same run: a file on the same file system written O_DIRECT +
# O_DSYNC at the same depths (ratios printed at the end).
#
#   scripts/bench-rbd.sh DIR [SECONDS]     # default 30 s a run
#
# DIR is the cluster's directory (started here if it is not running). The
# image sluice/bench-rbd (1 GiB) is made if missing and filled once with 1 MiB
# sequential writes, so the timed runs overwrite allocated RADOS objects. The
# client runs with `rbd cache = false` (its own copy of the conf,
# DIR/bench-client.conf): every write is acknowledged only when the OSD has
# committed it (BlueStore's durable point), i.e. each write is durable on its
# own. Prints one line per run and a markdown table (docs/objects.md), then
# what osd.0 did per GiB in each RBD run (scripts/osd-breakdown.py, its perf
# counters; docs/objects.md §4.8). RBD_QDS="32" runs those depths only
# (default "32 1"). FILE_PEER=0 skips the file peer (a script that brings
# its own peers: scripts/bench-objects-inproc.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [SECONDS]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
secs=${2:-30}
"$root/scripts/ceph-cluster.sh" start "$dir" >/dev/null
fio --enghelp 2>/dev/null | grep -qw rbd || { echo "bench-rbd: this fio has no rbd engine" >&2; exit 1; }
conf=$dir/bench-client.conf
{ cat "$dir/ceph.conf"; printf '[client]\nrbd cache = false\n'; } >"$conf"
export CEPH_CONF=$conf
# RBD_IMAGE=NAME: another image (a fresh name is made and filled first)
img=${RBD_IMAGE:-bench-rbd}
if ! timeout 30 rbd -p sluice info "$img" >/dev/null 2>&1; then
  timeout 60 rbd -p sluice create "$img" --size 1G
  fio --name=fill --ioengine=rbd --clientname=admin --pool=sluice --rbdname="$img" \
    --rw=write --bs=1M --iodepth=8 --size=1G >/dev/null
fi
tck=$(getconf CLK_TCK)
osd_ticks() {
  local t=0 f pid
  for f in "$dir"/run/osd.*.pid; do
    pid=$(cat "$f")
    # fields 14, 15 of /proc/PID/stat (after the ')' of the command name)
    t=$((t + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
  done
  echo $t
}
rows=() ratios=()
# the peer in the same run: a 1 GiB file on the file system that holds the
# OSD's block file, O_DIRECT + O_DSYNC (each write durable on its own), io_uring
peer=$dir/bench-peer.file
[ -f "$peer" ] || fallocate -l 1G "$peer"
declare -A file_iops
file_qds=${RBD_QDS:-32 1}
[ "${FILE_PEER:-1}" = 0 ] && file_qds=
for qd in $file_qds; do
  fio --name=file-qd$qd --filename="$peer" --ioengine=io_uring --direct=1 --sync=dsync \
    --rw=randwrite --bs=4k --iodepth=$qd --size=1G --time_based --runtime="$secs" \
    --randrepeat=0 --output-format=json --output="$dir/fio-file-qd$qd.json"
  row=$(python3 - "$dir/fio-file-qd$qd.json" "$qd" <<'EOF2'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["write"]
lat = j["clat_ns"]
p99 = lat.get("percentile", {}).get("99.000000", 0) / 1000
print(f"| file O_DIRECT+O_DSYNC QD{sys.argv[2]} | {j['iops']:.0f} | {lat['mean']/1000:.0f} | {p99:.0f} | - | - |")
EOF2
)
  echo "$row"
  rows+=("$row")
  file_iops[$qd]=$(echo "$row" | awk -F'|' '{print $3}')
done
# osd.0's perf counters around each run (docs/objects.md §4.8: what the
# OSD did per GiB, scripts/osd-breakdown.py)
osd_perf() {
  timeout 20 ceph --admin-daemon "$dir/run/ceph-osd.0.asok" perf dump >"$1" 2>/dev/null || echo '{}' >"$1"
}
breakdowns=()
for qd in ${RBD_QDS:-32 1}; do
  out=$dir/fio-qd$qd.json
  # FIO_LOG_MS=N: IOPS averaged over N ms windows in DIR/iops-rbd-qdQD_iops.1.log
  log=()
  rm -f "$dir/iops-rbd-qd$qd"_iops.*.log
  [ -n "${FIO_LOG_MS:-}" ] && log=(--write_iops_log="$dir/iops-rbd-qd$qd" --log_avg_msec="$FIO_LOG_MS")
  osd_perf "$dir/perf-rbd-qd$qd-0.json"
  t0=$(osd_ticks)
  fio --name=rbd-qd$qd --ioengine=rbd --clientname=admin --pool=sluice --rbdname="$img" \
    --rw=randwrite --bs=4k --iodepth=$qd --time_based --runtime="$secs" "${log[@]}" \
    --randrepeat=0 --output-format=json --output="$out"
  t1=$(osd_ticks)
  osd_perf "$dir/perf-rbd-qd$qd-1.json"
  breakdowns+=("$(python3 "$root/scripts/osd-breakdown.py" "rbd QD$qd" "$dir/perf-rbd-qd$qd-0.json" \
    "$dir/perf-rbd-qd$qd-1.json" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["io_bytes"])' "$out")" \
    "$(python3 -c "print($((t1 - t0)) / $tck)")")")
  row=$(python3 - "$out" $((t1 - t0)) "$tck" "$qd" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["write"]
ticks, tck, qd = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
gib = j["io_bytes"] / 2**30
cpu = ticks / tck
lat = j["clat_ns"]
p99 = lat.get("percentile", {}).get("99.000000", 0) / 1000
print(f"| rbd 4 KiB randwrite QD{qd} | {j['iops']:.0f} | {lat['mean']/1000:.0f} | {p99:.0f} | "
      f"{cpu:.1f} | {cpu/gib if gib else float('nan'):.0f} |")
EOF
)
  echo "$row"
  rows+=("$row")
  rbd=$(echo "$row" | awk -F'|' '{print $3}')
  if [ -n "${file_iops[$qd]:-}" ]; then
    ratios+=("QD$qd: RBD IOPS / file IOPS = $(python3 -c "print(f'{$rbd / $((file_iops[$qd])):.3f}')")")
  fi
done
echo
echo "| run | IOPS | mean lat us | p99 lat us | OSD CPU s | OSD CPU s per GiB |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf '%s\n' "${ratios[@]}"
echo
printf '%s\n' "${breakdowns[@]}"
