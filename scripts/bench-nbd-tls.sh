#!/usr/bin/env bash
# bench-nbd-tls.sh: the cost of TLS. fio's nbd engine (libnbd) against one
# `sluice serve` over TCP without TLS and one with --tls=require, same volume
# size, same run, 4 KiB randwrite then randread at queue depth 32. Prints IOPS
# and the TLS/plain ratio, and the server's CPU per request (utime+stime of
# the server process over the timed run / requests) and the client's (fio's
# usr+sys CPU / requests). A test CA is made with openssl in a temp dir.
# With PEER=1 (the default when nbdkit is installed) `nbdkit memory` runs the
# same two modes with the same certificates (--tls=require), in the same run:
# what TLS costs a mature server with no media, on this machine and client.
#
# Env: RUNTIME=10 SIZE_MB=1024 DIR=/var/tmp/sluice-bench-tls SLUICE=target/release/sluice
#      PEER=0|1
set -euo pipefail
RUNTIME=${RUNTIME:-10}
SIZE_MB=${SIZE_MB:-1024}
DIR=${DIR:-/var/tmp/sluice-bench-tls}
SLUICE=${SLUICE:-target/release/sluice}
PEER=${PEER:-$(command -v nbdkit >/dev/null && echo 1 || echo 0)}
for t in fio openssl; do command -v $t >/dev/null || { echo "bench-nbd-tls: $t missing" >&2; exit 2; }; done
mkdir -p "$DIR"; rm -rf "$DIR/pki"; mkdir -p "$DIR/pki"
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -f "$DIR"/*.img; }
trap cleanup EXIT
(
  cd "$DIR/pki"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout ca-key.pem -out ca-cert.pem -days 2 -subj "/CN=bench CA" 2>/dev/null
  openssl req "${ec[@]}" -keyout server-key.pem -out s.csr -subj /CN=localhost 2>/dev/null
  printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' > s.ext
  openssl x509 -req -in s.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile s.ext 2>/dev/null
)
# fio's nbd engine may not name a certificate directory in the URI: libnbd then
# looks in $HOME/.pki/libnbd, so fio runs with a HOME that holds the test CA.
mkdir -p "$DIR/home/.pki/libnbd"
cp "$DIR/pki/ca-cert.pem" "$DIR/home/.pki/libnbd/"
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() { # server mode case -> "IOPS server-us-per-request client-us-per-request"
  local srv=$1 mode=$2 case=$3 img="$DIR/$2.img" extra=() uri port
  rm -f "$DIR/uri"
  if [ "$srv" = sluice ]; then
    rm -f "$img"; "$SLUICE" create "$img" --size "${SIZE_MB}M" >/dev/null
    [ "$mode" = tls ] && extra=(--tls-certificates "$DIR/pki")
    "$SLUICE" serve "$img" --port 0 "${extra[@]}" >"$DIR/uri" 2>/dev/null &
    PID=$!
    for _ in $(seq 100); do [ -s "$DIR/uri" ] && break; sleep 0.1; done
    read -r uri <"$DIR/uri"
    port=${uri##*:}; port=${port%%/*}
  else
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    [ "$mode" = tls ] && extra=(--tls=require "--tls-certificates=$DIR/pki")
    [ "$srv" = nbdkit-memory ] || { echo "unknown server $srv" >&2; exit 2; }
    nbdkit --foreground --exit-with-parent -p "$port" "${extra[@]}" memory "size=${SIZE_MB}M" 2>/dev/null &
    PID=$!
    for _ in $(seq 100); do nbdinfo --can connect "nbd://localhost:$port/" 2>/dev/null && break
      [ "$mode" = tls ] && HOME="$DIR/home" nbdinfo --can connect "nbds://localhost:$port/" 2>/dev/null && break
      sleep 0.1; done
  fi
  if [ "$mode" = tls ]; then uri="nbds://localhost:$port/"; else uri="nbd://localhost:$port/"; fi
  local size=$((SIZE_MB * 9 / 10))M
  if [ "$case" = randread ]; then
    HOME="$DIR/home" fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=$size --refill_buffers >/dev/null
  fi
  local t0; t0=$(ticks "$PID")
  HOME="$DIR/home" fio --name=b --ioengine=nbd --uri="$uri" --rw="$case" --bs=4k --iodepth=32 --size=$size \
      --time_based --runtime="$RUNTIME" --refill_buffers --output-format=json 2>/dev/null >"$DIR/fio.json"
  local t1; t1=$(ticks "$PID")
  python3 - "$DIR/fio.json" "$((t1 - t0))" "$(getconf CLK_TCK)" "$RUNTIME" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]
ticks, hz, runtime = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
iops = j["read"]["iops"] + j["write"]["iops"]
n = max(1.0, iops * runtime)
client = (j["usr_cpu"] + j["sys_cpu"]) / 100 * runtime
print(int(iops), f"{ticks / hz * 1e6 / n:.1f}", f"{client * 1e6 / n:.1f}")
PY
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
}
servers=(sluice); [ "$PEER" = 1 ] && servers+=(nbdkit-memory)
printf '%-14s %-10s %9s %9s %9s %16s %16s\n' server case plain tls tls/plain 'server us/req' 'client us/req'
for c in randwrite randread; do
  for srv in "${servers[@]}"; do
    read -r p pc pf < <(run "$srv" plain $c); read -r t tc tf < <(run "$srv" tls $c)
    printf '%-14s %-10s %9s %9s %8.2fx %16s %16s\n' "$srv" $c "$p" "$t" "$(python3 -c "print($t/$p)")" "$pc -> $tc" "$pf -> $tf"
  done
done
