#!/usr/bin/env bash
# Issue 21's durable-write ratio in steady state, by hand (not in CI): on one
# single-node Ceph (scripts/ceph-cluster.sh, started here if not running),
# long runs with fio's IOPS logged per window, so a ratio to RBD is taken
# where both have settled, and RBD is measured on both sides of sluice
# (on a machine shared with builds RBD's rate fell several-fold within
# minutes; on a quiet one it held: docs/objects.md §4.12).
#
#   scripts/bench-objects-steady.sh DIR [SECONDS] [WINDOW_S]   # 180 s, 15 s windows
#
# In order: RBD QD32 on a freshly made and filled image; sluice on RADOS,
# local-log mode, fsync32 (32 writers, each a write + FLUSH); the same in
# the store-durable mode (--flush-to store); RBD QD32 again on another fresh
# image. Prints each run's IOPS per window and the mean of its last third
# (the steady state), and the ratios of the sluice runs to the RBD runs'
# steady states. SLUICE (default target/release/sluice: a --features rados
# build), SIZE_MB (default 512: the export is 85% of it), REGION_MB (default
# 304: fio writes 70% of the export, issue 21's fill for GC; the whole export
# makes GC work at 100% full). The ratios are only as steady as RBD's rate,
# which falls with the cluster's history: compare rbd-before and rbd-after.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [SECONDS] [WINDOW_S]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
secs=${2:-180}
win=${3:-15}
export FIO_LOG_MS=$((win * 1000))
"$root/scripts/ceph-cluster.sh" start "$dir" >/dev/null
series=()
run_rbd() {  # tag
  local out=$dir/steady-$1
  rm -rf "$out" && mkdir -p "$out"
  cp "$dir/ceph.conf" "$out/ceph.conf"
  RBD_QDS=32 RBD_IMAGE="steady-$1-$$" "$root/scripts/bench-rbd.sh" "$dir" "$secs" >"$out/stdout" 2>&1 ||
    { cat "$out/stdout" >&2; exit 1; }
  for f in "$dir"/iops-rbd-qd32_iops.*.log; do mv "$f" "$out/"; done
  timeout 60 rbd -c "$dir/ceph.conf" -p sluice rm "steady-$1-$$" >/dev/null 2>&1 || true
  series+=("$1 rbd $out/iops-rbd-qd32")
}
run_sluice() {  # tag server
  local out=$dir/steady-$1
  rm -rf "$out" && mkdir -p "$out"
  SKIP_RBD=1 BACKENDS=rados OBJ_SERVERS="$2" CASES=fsync32 SLUICE_RADOS="${SLUICE:-$root/target/release/sluice}" \
    SIZE_MB=${SIZE_MB:-512} REGION_MB=${REGION_MB:-304} "$root/scripts/bench-objects.sh" "$dir" "$secs" >"$out/stdout" 2>&1 ||
    { cat "$out/stdout" >&2; exit 1; }
  local run
  run=$(ls -d "$dir"/nbd-rados-"$2"-default-default-fsync32)
  for f in "$run"/iops-fs32_iops.*.log; do mv "$f" "$out/"; done
  series+=("$1 $2 $out/iops-fs32")
}
echo "== steady state: $secs s runs, $win s windows, $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
run_rbd rbd-before
run_sluice local sluice-s3
run_sluice durable sluice-s3-durable
run_rbd rbd-after
python3 - "$root" "${series[@]}" <<'PY'
import json, subprocess, sys
root = sys.argv[1]
runs = {}
for arg in sys.argv[2:]:
    tag, what, prefix = arg.split(" ")
    j = json.loads(subprocess.check_output(["python3", root + "/scripts/fio-iops-series.py", prefix, "--json"]))
    s = j["iops"]
    tail = s[len(s) - max(1, len(s) // 3):]
    runs[tag] = sum(tail) / len(tail)
    print(f"{tag:12} {what:18} per window: {' '.join(str(x) for x in s)}")
    print(f"{'':12} {'':18} first window {s[0]}, steady (last third) {runs[tag]:.0f}")
rbd = [runs[t] for t in ("rbd-before", "rbd-after") if t in runs]
for t in ("local", "durable"):
    if t in runs:
        print(f"{t}: {runs[t]:.0f} IOPS steady = " + ", ".join(f"{runs[t] / r:.1f}x" for r in rbd) + " RBD's steady state (before, after)")
PY
