#!/usr/bin/env bash
# A single-node Ceph 16 (Debian's packages) on 127.0.0.1 for sluice's
# object-store work (issue 21): one monitor, one manager, N BlueStore OSDs on
# preallocated files, a pool, and optionally radosgw (S3). No systemd.
#
#   scripts/ceph-cluster.sh start  DIR [--osds N] [--rgw] [--port P] [--osd-gib G]
#   scripts/ceph-cluster.sh stop   DIR
#   scripts/ceph-cluster.sh status DIR      # exit 0 all up, 3 not running
#
# Everything lives under DIR: ceph.conf, the keyrings, monitor/manager/OSD data
# (OSD block files: G GiB each, default 4, allocated with fallocate before
# mkfs so they read as zeros and never grow: BlueStore does not punch freed
# extents), sockets, pid files (DIR/run/*.pid) and logs (DIR/log). The monitor
# listens on 127.0.0.1:P (msgr2, default 3300) and P+1 (msgr1); OSDs and the
# manager bind 127.0.0.1 only; radosgw (beast) serves S3 on 127.0.0.1:P+2.
#
# Use it with `-c DIR/ceph.conf` (ceph, rados, rbd) or CEPH_CONF=DIR/ceph.conf.
# Pool `sluice` (8 PGs, application rbd) is ready when `start` returns: size 1
# with one OSD, size 3 / min_size 2 with three. With --rgw, the S3 user
# `sluice` exists and DIR/s3.env holds its AWS_* variables and endpoint.
#
# `start` is idempotent: a cluster already made in DIR has its stopped daemons
# started again (no mkfs), and running ones are left alone. `stop` kills only
# the pids in DIR/run/*.pid whose command line names DIR/ceph.conf.
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|status DIR [--osds N] [--rgw] [--port P] [--osd-gib G]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
shift 2
osds=1 rgw=0 port=3300 gib=4
while [ $# -gt 0 ]; do
  case "$1" in
  --osds) osds=$2; shift 2 ;;
  --rgw) rgw=1; shift ;;
  --port) port=$2; shift 2 ;;
  --osd-gib) gib=$2; shift 2 ;;
  *) usage ;;
  esac
done
[[ "$osds" =~ ^[1-9]$ ]] || { echo "ceph-cluster: --osds 1..9" >&2; exit 2; }
conf=$dir/ceph.conf
run=$dir/run
pool=sluice

say() { echo "ceph-cluster: $*"; }
c() { timeout 30 ceph -c "$conf" "$@"; }

# ours PID: a process started with this DIR's ceph.conf.
ours() {
  [ -r "/proc/$1/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "-c $conf "
}

# alive NAME (mon.a, osd.0, ...): its pid file names a live daemon of ours.
alive() {
  local f=$run/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && ours "$pid"
}

wait_for() {
  local what=$1 secs=$2
  shift 2
  for _ in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "ceph-cluster: $what not ready after $secs s (logs in $dir/log)" >&2
  return 1
}

write_conf() {
  local fsid size min
  fsid=$(cat /proc/sys/kernel/random/uuid)
  size=$((osds >= 3 ? 3 : osds))
  min=$((osds >= 3 ? 2 : 1))
  cat >"$conf" <<EOF
# made by scripts/ceph-cluster.sh; everything under $dir
[global]
fsid = $fsid
mon initial members = a
mon host = [v2:127.0.0.1:$port,v1:127.0.0.1:$((port + 1))]
public network = 127.0.0.1/32
cluster network = 127.0.0.1/32
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/\$cluster.\$name.keyring
run dir = $run
admin socket = $run/\$cluster-\$name.asok
pid file = $run/\$name.pid
log file = $dir/log/\$cluster-\$name.log
mon data = $dir/mon/\$cluster-\$id
mgr data = $dir/mgr/\$cluster-\$id
osd data = $dir/osd/\$cluster-\$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $((gib << 30))
osd memory target = 1073741824
osd pool default size = $size
osd pool default min size = $min
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
[mon]
keyring = $dir/mon/\$cluster-\$id/keyring
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$((port + 2))
rgw data = $dir/rgw
EOF
}

make_cluster() {
  say "making a cluster in $dir ($osds OSD(s) of $gib GiB)"
  mkdir -p "$run" "$dir/log" "$dir/mon" "$dir/mgr" "$dir/osd" "$dir/rgw"
  write_conf
  local fsid
  fsid=$(sed -n 's/^fsid = //p' "$conf")
  ceph-authtool --create-keyring "$dir/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool --create-keyring "$dir/ceph.client.admin.keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool "$dir/mon.keyring" --import-keyring "$dir/ceph.client.admin.keyring" >/dev/null
  monmaptool --create --addv a "[v2:127.0.0.1:$port,v1:127.0.0.1:$((port + 1))]" \
    --fsid "$fsid" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.keyring" >>"$dir/log/mkfs.log" 2>&1
  ceph-mon -c "$conf" -i a
  wait_for "monitor" 30 c mon stat
  c auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
    -o "$dir/ceph.mgr.x.keyring" >/dev/null
  mkdir -p "$dir/mgr/ceph-x"
  ceph-mgr -c "$conf" -i x
  for _ in $(seq 1 "$osds"); do
    local uuid id
    uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(c osd new "$uuid")
    mkdir -p "$dir/osd/ceph-$id"
    fallocate -l "$((gib << 30))" "$dir/osd/ceph-$id/block" ||
      dd if=/dev/zero of="$dir/osd/ceph-$id/block" bs=1M count=$((gib << 10)) status=none
    c auth get-or-create "osd.$id" mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' \
      -o "$dir/ceph.osd.$id.keyring" >/dev/null
    ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >>"$dir/log/mkfs.log" 2>&1
    ceph-osd -c "$conf" -i "$id"
  done
  wait_for "$osds OSD(s) up" 60 osds_up
  c osd pool create "$pool" 8 8 >/dev/null 2>&1
  c osd pool application enable "$pool" rbd >/dev/null 2>&1
}

osds_up() {
  local n
  n=$(c osd stat -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["num_up_osds"])')
  [ "$n" -ge "$osds" ]
}

pool_ready() {
  local f=$dir/run/probe
  echo probe >"$f"
  timeout 10 rados -c "$conf" -p "$pool" put sluice-probe "$f" &&
    timeout 10 rados -c "$conf" -p "$pool" rm sluice-probe
}

restart_daemons() {
  alive mon.a || ceph-mon -c "$conf" -i a
  wait_for "monitor" 30 c mon stat
  alive mgr.x || ceph-mgr -c "$conf" -i x
  osds=0
  for d in "$dir"/osd/ceph-*; do
    local id=${d##*-}
    osds=$((osds + 1))
    alive "osd.$id" || ceph-osd -c "$conf" -i "$id"
  done
  wait_for "$osds OSD(s) up" 60 osds_up
}

rgw_answers() {
  curl -s -o /dev/null -m 2 "http://127.0.0.1:$(rgw_port)/"
}
rgw_port() {
  sed -n 's/^rgw frontends = beast endpoint=127.0.0.1://p' "$conf"
}

start_rgw() {
  if [ ! -f "$dir/ceph.client.rgw.a.keyring" ]; then
    c auth get-or-create client.rgw.a mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
      -o "$dir/ceph.client.rgw.a.keyring" >/dev/null
  fi
  alive client.rgw.a || radosgw -c "$conf" -n client.rgw.a
  wait_for "radosgw" 90 rgw_answers
  if [ ! -f "$dir/s3.env" ]; then
    timeout 60 radosgw-admin -c "$conf" user create --uid=sluice --display-name=sluice \
      --access-key=sluice --secret=sluice-secret >/dev/null
    # the bucket "sluice" (radosgw-admin cannot make buckets; a signed PUT can)
    curl -sf -o /dev/null -m 30 --aws-sigv4 "aws:amz:us-east-1:s3" --user sluice:sluice-secret \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "http://127.0.0.1:$(rgw_port)/sluice"
    cat >"$dir/s3.env" <<EOF
AWS_ACCESS_KEY_ID=sluice
AWS_SECRET_ACCESS_KEY=sluice-secret
AWS_ENDPOINT_URL=http://127.0.0.1:$(rgw_port)
AWS_REGION=us-east-1
EOF
  fi
}

# The daemons must not inherit the caller's descriptors: under `flock LOCK
# CMD` they would hold LOCK for as long as they run (a benchmark lock held by
# a cluster until it stops), and a caller reading this script's output
# through a pipe would wait for their EOF. fd 255 is bash's own copy of the
# script.
close_inherited_fds() {
  local fd n
  for fd in /proc/$$/fd/*; do
    n=${fd##*/}
    [ "$n" -gt 2 ] && [ "$n" -ne 255 ] && eval "exec $n>&-" 2>/dev/null || true
  done
}

case "$cmd" in
start)
  close_inherited_fds
  command -v ceph-mon >/dev/null ||
    { echo "ceph-cluster: no ceph-mon (apt-get install -y ceph-mon ceph-mgr ceph-osd ceph-common radosgw)" >&2; exit 1; }
  if [ -f "$conf" ]; then
    restart_daemons
  else
    make_cluster
  fi
  wait_for "pool $pool" 60 pool_ready
  [ $rgw = 0 ] || start_rgw
  say "up: $osds OSD(s), pool $pool, conf $conf$([ $rgw = 0 ] || echo ", S3 at http://127.0.0.1:$(rgw_port) ($dir/s3.env)")"
  ;;
stop)
  [ -d "$run" ] || { say "not running"; exit 0; }
  for name in client.rgw.a $(cd "$run" && ls osd.*.pid 2>/dev/null | sed 's/\.pid$//') mgr.x mon.a; do
    if alive "$name"; then
      pid=$(cat "$run/$name.pid")
      kill "$pid"
      for _ in $(seq 1 100); do
        ours "$pid" || break
        sleep 0.1
      done
      ! ours "$pid" || kill -9 "$pid" 2>/dev/null || true
      say "stopped $name (pid $pid)"
    fi
    rm -f "$run/$name.pid"
  done
  ;;
status)
  [ -f "$conf" ] || { say "no cluster in $dir"; exit 3; }
  up=0 down=0
  for f in "$run"/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    if alive "$name"; then up=$((up + 1)); echo "$name: pid $(cat "$f")"; else down=$((down + 1)); echo "$name: not running"; fi
  done
  [ $up -gt 0 ] || { say "not running"; exit 3; }
  c -s || true
  [ $down = 0 ]
  ;;
*)
  usage
  ;;
esac
