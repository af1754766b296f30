#!/usr/bin/env bash
# bench-nbd-tls.sh: the cost of TLS. fio's nbd engine (libnbd) against one
# `sluice serve` over TCP without TLS and one with --tls=require, same volume
# size, same run, 4 KiB randwrite then randread at queue depth 32. Prints IOPS
# and the TLS/plain ratio, and the server's CPU per request (utime+stime of
# the server process over the timed run / requests). A test CA is made with
# openssl in a temp dir.
#
# Env: RUNTIME=10 SIZE_MB=1024 DIR=/var/tmp/sluice-bench-tls SLUICE=target/release/sluice
set -euo pipefail
RUNTIME=${RUNTIME:-10}
SIZE_MB=${SIZE_MB:-1024}
DIR=${DIR:-/var/tmp/sluice-bench-tls}
SLUICE=${SLUICE:-target/release/sluice}
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
run() { # mode case -> "IOPS CPU-us-per-request"
  local mode=$1 case=$2 img="$DIR/$1.img" extra=() uri
  rm -f "$img"; "$SLUICE" create "$img" --size "${SIZE_MB}M" >/dev/null
  [ "$mode" = tls ] && extra=(--tls-certificates "$DIR/pki")
  rm -f "$DIR/uri"
  "$SLUICE" serve "$img" --port 0 "${extra[@]}" >"$DIR/uri" 2>/dev/null &
  PID=$!
  for _ in $(seq 100); do [ -s "$DIR/uri" ] && break; sleep 0.1; done
  read -r uri <"$DIR/uri"
  local port=${uri##*:}; port=${port%%/*}
  if [ "$mode" = tls ]; then uri="nbds://localhost:$port/"; else uri="nbd://localhost:$port/"; fi
  local size=$((SIZE_MB * 9 / 10))M
  if [ "$case" = randread ]; then
    HOME="$DIR/home" fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=$size --refill_buffers >/dev/null
  fi
  local t0; t0=$(ticks "$PID")
  local iops; iops=$(HOME="$DIR/home" fio --name=b --ioengine=nbd --uri="$uri" --rw="$case" --bs=4k --iodepth=32 --size=$size \
      --time_based --runtime="$RUNTIME" --refill_buffers --output-format=json \
    2>/dev/null | python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; print(int(j["read"]["iops"]+j["write"]["iops"]))')
  local t1; t1=$(ticks "$PID")
  echo "$iops $(python3 -c "print(f'{($t1-$t0)/$(getconf CLK_TCK)*1e6/max(1,$iops*$RUNTIME):.1f}')")"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
}
printf '%-10s %10s %10s %8s %14s %12s\n' case plain tls tls/plain 'plain us/req' 'tls us/req'
for c in randwrite randread; do
  read -r p pc < <(run plain $c); read -r t tc < <(run tls $c)
  printf '%-10s %10s %10s %7.2fx %14s %12s\n' $c "$p" "$t" "$(python3 -c "print($t/$p)")" "$pc" "$tc"
done
