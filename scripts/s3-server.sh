#!/usr/bin/env bash
# A SeaweedFS S3 server on 127.0.0.1 for sluice's object-store tests (issue 21).
#
#   scripts/s3-server.sh start  DIR [PORT]   # start (or find running) and wait for S3
#   scripts/s3-server.sh stop   DIR          # stop the server this DIR's pid file names
#   scripts/s3-server.sh status DIR          # exit 0 running, 3 not running
#
# Everything lives under DIR: the data (DIR/data), the pid file (DIR/weed.pid),
# the port (DIR/port), the log (DIR/weed.log) and the unix sockets. PORT is the
# S3 port (default 8333); the server's other listeners take PORT+1 .. PORT+9
# (s3 grpc, master http/grpc, volume http/grpc, filer http/grpc, admin
# http/grpc), all bound to 127.0.0.1 only. The bucket SLUICE_S3_BUCKET
# (default "sluice") is created at start; `start` returns once an object put
# into it (.s3-server-probe, deleted again) reads back. Auth is open (no
# -s3.config), so any access key works. Telemetry is off
# (-master.telemetry=false) and its URL points at loopback: this server sends
# nothing off the machine.
#
# `start` is idempotent: a live server of this DIR is reused (its port is
# printed), a stale pid file (its pid gone or not ours) is replaced. It refuses
# when another process already listens on PORT. `stop` kills only the pid in
# DIR/weed.pid, and only when that process is a weed of this DIR.
#
# The `weed` binary: $WEED, else `weed` on PATH, else the venv that
# scripts/install-deps makes (/opt/sluice-tools/seaweedfs/bin/weed).
set -euo pipefail

# The daemons must not inherit the caller's descriptors: under `flock LOCK
# CMD` they would hold LOCK for as long as they run (a benchmark lock held by
# a server until it stops), and a caller reading this script's output
# through a pipe would wait for their EOF. fd 255 is bash's own copy of the
# script.
close_inherited_fds() {
  local fd n
  for fd in /proc/$$/fd/*; do
    n=${fd##*/}
    [ "$n" -gt 2 ] && [ "$n" -ne 255 ] && eval "exec $n>&-" 2>/dev/null || true
  done
}

usage() {
  echo "usage: $0 start|stop|status DIR [PORT]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
port=${3:-8333}
bucket=${SLUICE_S3_BUCKET:-sluice}
pidf=$dir/weed.pid

find_weed() {
  if [ -n "${WEED:-}" ]; then
    echo "$WEED"
  elif command -v weed >/dev/null 2>&1; then
    command -v weed
  elif [ -x /opt/sluice-tools/seaweedfs/bin/weed ]; then
    echo /opt/sluice-tools/seaweedfs/bin/weed
  else
    echo "s3-server: no weed binary (run scripts/install-deps, or set WEED)" >&2
    return 1
  fi
}

# ours PID: the process is a weed started for this DIR.
ours() {
  local pid=$1
  [ -r "/proc/$pid/cmdline" ] || return 1
  local cl
  cl=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ "$cl" == *weed* && "$cl" == *"-dir=$dir/data "* ]]
}

running_pid() {
  [ -f "$pidf" ] || return 1
  local pid
  pid=$(cat "$pidf" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  ours "$pid" || return 1
  echo "$pid"
}

# answers PORT: S3 answers a listing of the bucket, and stores and returns
# an object (64 KiB, put, read back, compared, deleted). The listing alone
# answers before the volume server has registered with the master: reads of
# stored objects then fail with 500 for a while after a restart.
answers() {
  local code url=http://127.0.0.1:$1/$bucket
  code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$url" 2>/dev/null) || true
  [ "$code" = 200 ] || return 1
  [ -s "$dir/probe" ] || head -c 65536 /dev/urandom >"$dir/probe"
  curl -sf -o /dev/null -m 5 -X PUT --data-binary @"$dir/probe" "$url/.s3-server-probe" 2>/dev/null &&
    curl -sf -m 5 "$url/.s3-server-probe" 2>/dev/null | cmp -s - "$dir/probe" &&
    curl -sf -o /dev/null -m 5 -X DELETE "$url/.s3-server-probe" 2>/dev/null
}

listening() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

case "$cmd" in
start)
  if pid=$(running_pid); then
    p=$(cat "$dir/port")
    for _ in $(seq 1 300); do
      answers "$p" && break
      sleep 0.1
    done
    answers "$p" || { echo "s3-server: pid $pid runs but S3 on port $p does not answer" >&2; exit 1; }
    echo "s3-server: running, pid $pid, http://127.0.0.1:$p bucket $bucket"
    exit 0
  fi
  rm -f "$pidf"
  [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1024 ] && [ "$port" -le 65520 ] ||
    { echo "s3-server: PORT must be 1024..65520" >&2; exit 2; }
  for i in $(seq 0 9); do
    if listening $((port + i)); then
      echo "s3-server: port $((port + i)) is in use by another process" >&2
      exit 1
    fi
  done
  weed=$(find_weed)
  mkdir -p "$dir/data"
  close_inherited_fds
  echo "$port" >"$dir/port"
  setsid "$weed" mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -bucket="$bucket" -admin.ui=false -webdav=false \
    -master.telemetry=false -master.telemetry.url=http://127.0.0.1:1/ \
    -s3.port="$port" -s3.port.grpc=$((port + 1)) \
    -master.port=$((port + 2)) -master.port.grpc=$((port + 3)) \
    -volume.port=$((port + 4)) -volume.port.grpc=$((port + 5)) \
    -filer.port=$((port + 6)) -filer.port.grpc=$((port + 7)) \
    -admin.port=$((port + 8)) -admin.port.grpc=$((port + 9)) \
    -s3.port.iceberg=0 -s3.port.lance=0 \
    -filer.localSocket="$dir/filer.sock" -s3.localSocket="$dir/s3.sock" \
    </dev/null >>"$dir/weed.log" 2>&1 &
  pid=$!
  echo "$pid" >"$pidf"
  for _ in $(seq 1 300); do
    if answers "$port"; then
      echo "s3-server: started, pid $pid, http://127.0.0.1:$port bucket $bucket"
      exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "s3-server: weed exited during start; last lines of $dir/weed.log:" >&2
      tail -20 "$dir/weed.log" >&2
      rm -f "$pidf"
      exit 1
    fi
    sleep 0.1
  done
  echo "s3-server: S3 did not answer on port $port within 30 s; stopping pid $pid" >&2
  kill "$pid" 2>/dev/null || true
  rm -f "$pidf"
  exit 1
  ;;
stop)
  if ! pid=$(running_pid); then
    rm -f "$pidf"
    echo "s3-server: not running"
    exit 0
  fi
  kill "$pid"
  for _ in $(seq 1 100); do
    ours "$pid" || break
    sleep 0.1
  done
  if ours "$pid"; then
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidf"
  echo "s3-server: stopped pid $pid"
  ;;
status)
  if pid=$(running_pid); then
    p=$(cat "$dir/port")
    if answers "$p"; then
      echo "s3-server: running, pid $pid, http://127.0.0.1:$p bucket $bucket"
      exit 0
    fi
    echo "s3-server: pid $pid runs, S3 on port $p does not answer"
    exit 1
  fi
  echo "s3-server: not running"
  exit 3
  ;;
*)
  usage
  ;;
esac
