#!/usr/bin/env bash
# Issue 21's durable 4 KiB random writes at 32 outstanding (and at 1), with
# sluice's engine in process as fio's rbd engine runs librbd in process: no
# NBD hop (docs/objects.md §4.13). By hand, not in CI. On one single-node
# Ceph (scripts/ceph-cluster.sh DIR, started here if it is not running), in
# one invocation and in this order:
#
#   1. RBD: fio's rbd engine, 4 KiB random writes at QD32 and QD1, rbd cache
#      off (every write acknowledged once the OSD committed it), as
#      scripts/bench-rbd.sh runs it (FILE_PEER=0: the peers are below);
#   2. `sluice bench durable --threads 32,1` (each of N threads a 4 KiB
#      random write then a FLUSH, over and over; a write counts once its
#      FLUSH returned) on, each in its own process:
#        raw      the local file system's own write + fdatasync (file:),
#        ilog     a sluice volume in a local file with the intent log ring
#                 (sluice-ilog:),
#        local    a volume in RADOS, local-log mode (its ring in the cache
#                 directory; sluice-objects:rados://sluice/PREFIX,CACHE),
#        durable  a volume in RADOS, store-durable mode (;flush-to=store);
#   3. RBD again, as in 1.
#
#   scripts/bench-objects-inproc.sh DIR [SECONDS]     # default 20 s a phase
#
# Prints each run, then a table: IOPS at QD32 and QD1 and each one's ratio to
# RBD (the mean of the two RBD runs; both RBD runs are printed), the FLUSH
# latency, CPU per write, writes per media flush, and in the store-durable
# mode the log PUTs (count, rate, mean latency, writes per PUT).
#
# SLUICE: the binary (default target/release/sluice; a --features rados
# build). SIZE_MB (default 435: the export of §4.12's 512 MiB volume) and
# REGION_MB (default 304: 70% of it, issue 21's fill). LOCK=FILE: each timed
# step runs under `flock FILE` (the cluster starts outside it). RUNS="raw
# ilog local durable" picks sluice runs. WORK (default DIR/inproc) holds the
# volumes and reports; each volume (file and cache directory) and its RADOS
# objects are deleted after its run. `uptime` is printed with each step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [SECONDS]" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
secs=${2:-20}
sluice=${SLUICE:-$root/target/release/sluice}
work=${WORK:-$dir/inproc}
size=${SIZE_MB:-435}
region=${REGION_MB:-304}
lock=()
[ -n "${LOCK:-}" ] && lock=(flock "$LOCK")
"$root/scripts/ceph-cluster.sh" start "$dir" >/dev/null
conf=$dir/ceph.conf
rm -rf "$work"
mkdir -p "$work"
load() { echo "$(date -u +%T) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

# the RADOS objects under PREFIX/, deleted (they free at once in RADOS)
rm_prefix() {
  timeout 120 rados -c "$conf" -p sluice ls 2>/dev/null | grep "^$1/" |
    xargs -r -n 64 timeout 120 rados -c "$conf" -p sluice rm 2>/dev/null || true
}

rbd_run() {  # tag
  echo "== RBD ($1): $(load)"
  "${lock[@]}" env FILE_PEER=0 RBD_QDS="32 1" "$root/scripts/bench-rbd.sh" "$dir" "$secs" \
    >"$work/rbd-$1.out" 2>&1 || { cat "$work/rbd-$1.out" >&2; exit 1; }
  grep '^| rbd' "$work/rbd-$1.out" | sort -u
  cp "$dir/fio-qd32.json" "$work/rbd-$1-qd32.json"
  cp "$dir/fio-qd1.json" "$work/rbd-$1-qd1.json"
}

sluice_run() {  # tag
  local t=$1 spec pfx=
  case $t in
  raw) spec="file:$work/raw.file" ;;
  ilog) spec="sluice-ilog:$work/ilog.vol" ;;
  local) pfx=inproc-$$-local; spec="sluice-objects:rados://sluice/$pfx,$work/local" ;;
  durable) pfx=inproc-$$-durable; spec="sluice-objects:rados://sluice/$pfx,$work/durable;flush-to=store" ;;
  *) echo "unknown run $t" >&2; exit 2 ;;
  esac
  echo "== sluice bench durable $t: $(load)"
  # the volume is made at open, before the phases; the lock is taken for the whole process
  "${lock[@]}" "$sluice" bench durable --quiet --threads 32,1 --seconds "$secs" \
    --size "${size}M" --region "${region}M" --ceph-conf "$conf" \
    --json "$work/$t.json" --target "$t=$spec" >"$work/$t.out" 2>"$work/$t.err" ||
    { cat "$work/$t.out" "$work/$t.err" >&2; exit 1; }
  cat "$work/$t.out"
  grep -E 'FLUSH log:|store bytes per host byte' "$work/$t.err" || true
  rm -rf "$work/raw.file" "$work/ilog.vol" "$work/local" "$work/durable"
  [ -n "$pfx" ] && rm_prefix "$pfx"
  return 0
}

rbd_run before
for t in ${RUNS:-raw ilog local durable}; do
  sluice_run "$t"
done
rbd_run after
echo "== done: $(load)"

python3 - "$work" ${RUNS:-raw ilog local durable} <<'PY'
import json, sys
work, runs = sys.argv[1], sys.argv[2:]
def rbd(tag, qd):
    return json.load(open(f"{work}/rbd-{tag}-qd{qd}.json"))["jobs"][0]["write"]["iops"]
base = {}
for qd in (32, 1):
    b, a = rbd("before", qd), rbd("after", qd)
    base[qd] = (b + a) / 2
    print(f"RBD QD{qd}: {b:.0f} before, {a:.0f} after, mean {base[qd]:.0f}")
print()
print("| run | QD | durable writes/s | / RBD (mean of 2) | FLUSH p50 us | FLUSH p99 us | CPU us/write | writes per media flush | log PUTs/s, ms each, writes each |")
print("|---|---|---|---|---|---|---|---|---|")
for t in runs:
    j = json.load(open(f"{work}/{t}.json"))
    for p in j["targets"][0]["phases"]:
        d = p.get("durable") or {}
        st = d.get("store") or {}
        fl = p.get("flush_latency") or {}
        put = "-"
        if st.get("log_puts"):
            put = f"{st['log_puts_per_s']:.0f}/s, {st['log_put_ms']:.2f} ms, {st['writes_per_log_put']:.1f}"
        wpf = f"{d['writes_per_media_flush']:.1f}" if d else "-"
        print(f"| {t} | {p['threads']} | {p['iops']:.0f} | {p['iops'] / base[p['threads']]:.2f}x | "
              f"{fl.get('p50_us', 0):.0f} | {fl.get('p99_us', 0):.0f} | {p['cpu']['us_per_op']:.1f} | {wpf} | {put} |")
PY
