#!/usr/bin/env bash
# The Linux kernel's NBD client against `sluice serve`.
#
# Boots Debian's 6.1 kernel under qemu (TCG: the host has no nbd module and KVM
# guests hang here) with a busybox initramfs. qemu's user networking (slirp)
# carries the guest's TCP connections to the slirp host alias 10.0.2.2, which
# qemu turns into connections to 127.0.0.1 on the host: the only address any
# traffic goes to. In the guest Debian's nbd-client attaches exports as
# /dev/nbd0 and runs the cases below; the host then checks every volume with
# `sluice check` and reads every file back (nbdcopy of the export, e2fsck,
# debugfs) against the checksums the guest printed.
#
# Cases (each ends in a PASS/FAIL line; exit status 1 if any failed):
#   ext4-4k     nbd-client -b 4096: mkfs.ext4, mount, files, rm half of them and
#               a 6 MiB one whose extents filefrag printed, fstrim, umount,
#               e2fsck -f clean, remount, checksums
#   ext4-512    the same with nbd-client -b 512 (512 B logical blocks, 1 KiB ext4 blocks)
#   multi-conn  the same over two connections (nbd-client -C 2)
#   read-only   an export marked read_only in the config: the device is read-only,
#               a write fails, its content is what the host put there
#   host-*      after the guest: `sluice check` clean, e2fsck -fn of the image read
#               back with nbdcopy clean, every kept file's sha256 (debugfs) equals
#               the guest's, every deleted file gone, the 6 MiB file's blocks holes
#               in `nbdinfo --map` (fstrim reached sluice)
#
# Usage: scripts/kernel-nbd.sh            (builds nothing: uses target/release/sluice)
# Exit:  0 every case passed, 1 a case failed, 2 it could not run here (install,
#        download); tests/nbd_kernel.rs runs it in CI.
# Env:   SLUICE=path/to/sluice  WORK=dir (kept)  KNBD_CACHE=dir (downloaded packages,
#        default target/kernel-nbd)  KNBD_TIMEOUT=seconds for the guest (default 300)
# Installs what it needs through scripts/install-deps (root or sudo):
# qemu-system-x86 at the version of the installed qemu-utils (from
# <codename>-backports when qemu-utils came from there, so qemu-utils is never
# downgraded), libnbd-bin, e2fsprogs; the guest's kernel, nbd-client, busybox-static and e2fsprogs are fetched with
# `apt-get download` and unpacked, never installed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$ROOT/target/release/sluice}
CACHE=${KNBD_CACHE:-$ROOT/target/kernel-nbd}
GUEST_TIMEOUT=${KNBD_TIMEOUT:-300}
T0=$(date +%s)

say() { echo "kernel-nbd: $*"; }
die() { echo "kernel-nbd: FAIL: $*" >&2; exit 1; }
# Exit status 2: the test could not run here (tools, packages); 1: a case failed.
cannot() { echo "kernel-nbd: CANNOT RUN: $*" >&2; exit 2; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- host tools -------------------------------------------------------------
apt_update() {
  say "apt-get update"
  $SUDO apt-get update -q >/dev/null || cannot "apt-get update failed"
}

install_host() {
  # qemu-system-x86 (at qemu-utils' version), libnbd-bin, e2fsprogs: see install-deps
  "$ROOT/scripts/install-deps" || cannot "scripts/install-deps failed"
  local t
  for t in qemu-system-x86_64 nbdcopy e2fsck debugfs; do
    command -v "$t" >/dev/null 2>&1 || cannot "$t is not installed"
  done
}

# --- guest packages (downloaded and unpacked, not installed) --------------------
GUEST_PKGS=(nbd-client busybox-static e2fsprogs libext2fs2 libcom-err2 libblkid1 libuuid1
            libgnutls30 libnl-3-200 libnl-genl-3-200 libp11-kit0 libidn2-0 libunistring2
            libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8)
# Modules loaded in the guest, in order (dependencies first).
MODULES=(crypto/crc32c_generic lib/crc16 fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4
         drivers/net/ethernet/intel/e1000/e1000 drivers/block/nbd)

fetch_guest() {
  if [ -f "$CACHE/ready" ]; then
    return
  fi
  rm -rf "$CACHE"
  mkdir -p "$CACHE/debs" "$CACHE/x"
  apt_update
  local kpkg
  kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$kpkg" ] || cannot "cannot find the kernel package linux-image-amd64 depends on"
  say "downloading $kpkg ${GUEST_PKGS[*]} (apt-get download, into $CACHE)"
  (cd "$CACHE/debs" && apt-get download -q "$kpkg" "${GUEST_PKGS[@]}" >/dev/null 2>&1) ||
    cannot "apt-get download $kpkg ${GUEST_PKGS[*]} failed"
  for d in "$CACHE"/debs/*.deb; do dpkg-deb -x "$d" "$CACHE/x"; done
  local kver
  kver=$(ls "$CACHE/x/lib/modules")
  mkdir -p "$CACHE/modules"
  for m in "${MODULES[@]}"; do
    cp "$CACHE/x/lib/modules/$kver/kernel/$m.ko" "$CACHE/modules/" ||
      die "module $m.ko missing from $kpkg"
  done
  cp "$CACHE/x/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
  rm -rf "$CACHE/x/lib/modules" "$CACHE/x/boot" "$CACHE/debs"
  echo "$kver" >"$CACHE/ready"
}

# Copy a dynamic binary and every library ldd finds for it (unpacked packages
# first, then the host's, which are the same Debian release) into the initramfs.
LIBPATH=""
copy_bin() {
  local bin=$1 dest=$2 lib
  cp "$bin" "$ROOTFS/$dest"
  mkdir -p "$ROOTFS/lib/x86_64-linux-gnu"
  while read -r lib; do
    case "$lib" in
      "") ;;
      */ld-linux-x86-64.so.2) cp -L "$lib" "$ROOTFS/lib64/" ;;
      *) cp -L "$lib" "$ROOTFS/lib/x86_64-linux-gnu/" ;;  # the loader's default path
    esac
  done < <(LD_LIBRARY_PATH=$LIBPATH ldd "$bin" | awk '
      /not found/ {print "MISSING:" $1; next}
      $2 == "=>" && $3 ~ /^\// {print $3}
      $1 ~ /^\// {print $1}' | sed 's/^MISSING:\(.*\)/\/MISSING\/\1/')
  if [ -d "$ROOTFS/MISSING" ]; then
    die "library not found for $bin: $(ls "$ROOTFS/MISSING")"
  fi
}

build_initramfs() {
  ROOTFS=$WORK/rootfs
  rm -rf "$ROOTFS"
  mkdir -p "$ROOTFS"/{bin,sbin,etc,proc,sys,dev,mnt,tmp,modules,lib64}
  local x=$CACHE/x
  LIBPATH=$x/lib/x86_64-linux-gnu:$x/usr/lib/x86_64-linux-gnu
  cp "$x/bin/busybox" "$ROOTFS/bin/busybox"
  copy_bin "$x/sbin/nbd-client" sbin/nbd-client
  copy_bin "$x/sbin/mke2fs" sbin/mke2fs
  copy_bin "$x/sbin/e2fsck" sbin/e2fsck
  copy_bin "$x/usr/sbin/filefrag" sbin/filefrag
  ln -s mke2fs "$ROOTFS/sbin/mkfs.ext4"
  [ -f "$x/etc/mke2fs.conf" ] && cp "$x/etc/mke2fs.conf" "$ROOTFS/etc/"
  cp "$CACHE"/modules/*.ko "$ROOTFS/modules/"
  guest_init >"$ROOTFS/init"
  chmod +x "$ROOTFS/init"
  (cd "$ROOTFS" && find . | "$x/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$WORK/initramfs.gz"
}

# --- the guest's /init --------------------------------------------------------
guest_init() {
  local mods="" m
  for m in "${MODULES[@]}"; do mods="$mods ${m##*/}"; done
  cat <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $mods; do
  if [ \$m = nbd ]; then insmod /modules/\$m.ko nbds_max=2; else insmod /modules/\$m.ko; fi ||
    echo "KNBD insmod \$m failed"
done
EOF
  cat <<'EOF'
PORT=$(sed -n 's/.*knbd_port=\([0-9]*\).*/\1/p' /proc/cmdline)
ip link set lo up; ip link set eth0 up; ip addr add 10.0.2.15/24 dev eth0
HOST=10.0.2.2
# the e1000 link comes up a moment after "ip link set up": wait (20 s at most)
# until slirp answers a ping, so the first nbd-client does not race it
i=0
until ping -c 1 -W 1 $HOST >/dev/null 2>&1 || [ $i -ge 20 ]; do sleep 1; i=$((i+1)); done
echo "KNBD guest up: kernel $(uname -r), server $HOST:$PORT (network after ${i} s)"

fail() { echo "KNBD-CASE $CASE FAIL: $*"; umount /mnt 2>/dev/null; nbd-client -d /dev/nbd0 >/dev/null 2>&1; return 1; }
step() { echo "KNBD $CASE: $*"; }

attach() {  # attach EXPORT [nbd-client options...]
  local name=$1; shift
  step "nbd-client $HOST $PORT /dev/nbd0 -N $name $*"
  nbd-client $HOST $PORT /dev/nbd0 -N "$name" "$@" >/tmp/nbd-client.out 2>&1 || { cat /tmp/nbd-client.out; return 1; }
  CONNS=$(grep -c Negotiation /tmp/nbd-client.out)
  local i=0
  while [ "$(cat /sys/block/nbd0/size)" = 0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  step "attached over $CONNS connection(s): $(blockdev --getsize64 /dev/nbd0) bytes, logical block $(cat /sys/block/nbd0/queue/logical_block_size), largest request $(cat /sys/block/nbd0/queue/max_hw_sectors_kb) KiB"
}

fs_case() {  # fs_case CASE EXPORT BLOCK MKFS-OPTS CONNECTIONS [nbd-client options...]
  CASE=$1; local name=$2 bs=$3 mkfs=$4 conns=$5; shift 5
  attach "$name" -b "$bs" "$@" || { fail "nbd-client"; return; }
  [ "$CONNS" = "$conns" ] || { fail "$CONNS connections, not $conns"; return; }
  [ "$(cat /sys/block/nbd0/queue/logical_block_size)" = "$bs" ] || { fail "logical block size is not $bs"; return; }
  step "mkfs.ext4 $mkfs (discards the device first)"
  mkfs.ext4 -q -F $mkfs /dev/nbd0 || { fail "mkfs.ext4"; return; }
  mount -t ext4 /dev/nbd0 /mnt || { fail "mount"; return; }
  mkdir -p /mnt/d/sub
  local i=0 kb
  while [ $i -lt 24 ]; do
    kb=$(( (i % 6) * 97 + 3 ))
    # odd sizes: whole KiB plus i*37 bytes
    { dd if=/dev/urandom bs=1024 count=$kb 2>/dev/null; dd if=/dev/urandom bs=$((i * 37 + 1)) count=1 2>/dev/null; } >/mnt/d/sub/f$i || { fail "write f$i"; return; }
    i=$((i+1))
  done
  dd if=/dev/urandom of=/mnt/big bs=1M count=6 2>/dev/null || { fail "write big"; return; }
  dd if=/dev/urandom of=/mnt/big2 bs=1M count=6 2>/dev/null || { fail "write big2"; return; }
  sync
  # where big2 lives on the device (bytes), for the host to check after fstrim
  filefrag -e /mnt/big2 >/tmp/frag.$CASE || { fail "filefrag"; return; }
  awk '/blocks of [0-9]+ bytes/ {bs = $(NF-1)}
       /\.\./ && $1 ~ /^[0-9]+:$/ {split($0, f, ":"); split(f[3], p, "\\.\\.");
                                   print "KNBD-TRIMMED", c, p[1] * bs, (f[4] + 0) * bs}' \
    c="$CASE" /tmp/frag.$CASE >/tmp/trimmed.$CASE
  [ -s /tmp/trimmed.$CASE ] || { cat /tmp/frag.$CASE; fail "no extents for big2"; return; }
  step "wrote $(du -sk /mnt | cut -f1) KiB; deleting big2 and the odd files"
  rm /mnt/big2; echo "KNBD-GONE $CASE /big2"
  i=1; while [ $i -lt 24 ]; do rm /mnt/d/sub/f$i; echo "KNBD-GONE $CASE /d/sub/f$i"; i=$((i+2)); done
  sync
  local trimmed
  trimmed=$(fstrim -v /mnt) || { fail "fstrim"; return; }
  step "fstrim: $trimmed"
  (cd /mnt && find . -type f | sort | xargs sha256sum) >/tmp/sums.$CASE || { fail "sha256sum"; return; }
  umount /mnt || { fail "umount"; return; }
  step "e2fsck -f -n"
  e2fsck -f -n /dev/nbd0 >/tmp/fsck.$CASE 2>&1 || { cat /tmp/fsck.$CASE; fail "e2fsck -f -n found problems"; return; }
  mount -t ext4 -o ro /dev/nbd0 /mnt || { fail "remount"; return; }
  (cd /mnt && sha256sum -c -s /tmp/sums.$CASE) || { fail "contents differ after remount"; return; }
  umount /mnt
  sed "s|^\([0-9a-f]*\)  \./|KNBD-SUM $CASE \1 /|" /tmp/sums.$CASE
  cat /tmp/trimmed.$CASE
  nbd-client -d /dev/nbd0 >/dev/null 2>&1 || { fail "nbd-client -d"; return; }
  echo "KNBD-CASE $CASE PASS"
}

ro_case() {
  CASE=read-only
  attach ro -b 4096 || { fail "nbd-client"; return; }
  [ "$(blockdev --getro /dev/nbd0)" = 1 ] || { fail "device not read-only"; return; }
  if dd if=/dev/zero of=/dev/nbd0 bs=4096 count=1 oflag=direct conv=fsync 2>/dev/null; then
    fail "a write to the read-only device succeeded"; return
  fi
  step "a write was refused"
  echo "KNBD-RO-SUM $(sha256sum </dev/nbd0 | cut -d' ' -f1)"
  nbd-client -d /dev/nbd0 >/dev/null 2>&1 || { fail "nbd-client -d"; return; }
  echo "KNBD-CASE $CASE PASS"
}

fs_case ext4-4k fs4k 4096 "-b 4096" 1
fs_case ext4-512 fs512 512 "-b 1024" 1
fs_case multi-conn mc 4096 "-b 4096" 2 -C 2
ro_case
echo "KNBD guest done"
sync
poweroff -f
EOF
}

# --- run ----------------------------------------------------------------------
[ "$(uname -m)" = x86_64 ] || cannot "the guest is Debian's amd64 kernel: x86_64 hosts only"
[ -x "$SLUICE" ] || cannot "$SLUICE not found: cargo build --release first (or set SLUICE)"
install_host
fetch_guest
if [ -n "${WORK:-}" ]; then
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d /tmp/sluice-kernel-nbd.XXXXXX)
fi
say "work dir $WORK"

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'die "line $LINENO: a command failed (status $?)"' ERR

build_initramfs
say "initramfs $(du -h "$WORK/initramfs.gz" | cut -f1) (busybox, nbd-client, mke2fs, e2fsck, ${#MODULES[@]} modules)"

# Wait (bounded) for a server's first stdout line, its URI.
SERVER_PID=""
URI=""
start_server() {  # start_server LOG ARGS...: sets SERVER_PID and URI (not in a subshell)
  local log=$1; shift
  "$SLUICE" serve "$@" >"$log.out" 2>"$log.err" &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  local i=0
  while ! [ -s "$log.out" ]; do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log.err" >&2; die "sluice serve exited"; }
    i=$((i+1)); [ $i -lt 300 ] || die "sluice serve did not start within 30 s"
    sleep 0.1
  done
  URI=$(head -1 "$log.out")
}
stop_server() {  # SIGTERM and wait at most 60 s for the drain and clean close
  local i=0
  kill -TERM "$SERVER_PID"
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    i=$((i+1)); [ $i -lt 600 ] || die "sluice serve did not exit within 60 s of SIGTERM"
    sleep 0.1
  done
  wait "$SERVER_PID" || die "sluice serve exited with status $?"
}

V=$WORK/vol
mkdir -p "$V"
for n in fs4k fs512 mc; do "$SLUICE" create "$V/$n.img" --size 128M >/dev/null; done
"$SLUICE" create "$V/ro.img" --size 32M >/dev/null

say "putting 32 MiB of random data on the read-only export's volume"
head -c $((32 << 20)) /dev/urandom >"$WORK/ro.data"
RO_SUM=$(sha256sum <"$WORK/ro.data" | cut -d' ' -f1)
start_server "$WORK/prep" "$V/ro.img" --socket "$WORK/prep.sock"
timeout 60 nbdcopy "$WORK/ro.data" "$URI" || die "nbdcopy to the read-only volume"
stop_server

cat >"$WORK/exports.toml" <<EOF
# sluice serve --config: the kernel-nbd.sh exports
[[export]]
name = "fs4k"
path = "$V/fs4k.img"

[[export]]
name = "fs512"
path = "$V/fs512.img"

[[export]]
name = "mc"
path = "$V/mc.img"
description = "two connections"

[[export]]
name = "ro"
path = "$V/ro.img"
read_only = true
EOF
start_server "$WORK/serve" --config "$WORK/exports.toml" --port 0 -v
PORT=${URI##*:}; PORT=${PORT%%/*}
say "sluice serve --config exports.toml listening on 127.0.0.1:$PORT"

say "booting the guest (qemu TCG, at most ${GUEST_TIMEOUT} s); console in $WORK/console.log"
tg=$(date +%s)
# -netdev user: slirp; the guest reaches only 10.0.2.2 (this host's 127.0.0.1).
timeout --kill-after=10 "$GUEST_TIMEOUT" qemu-system-x86_64 -accel tcg -m 512 -smp 1 \
  -nodefaults -display none -no-reboot -serial stdio \
  -kernel "$CACHE/vmlinuz" -initrd "$WORK/initramfs.gz" \
  -append "console=ttyS0 quiet panic=-1 knbd_port=$PORT" \
  -netdev user,id=n0,ipv6=off -device e1000,netdev=n0 \
  </dev/null >"$WORK/console.log" 2>&1 &
QPID=$!
PIDS+=("$QPID")
qrc=0
wait "$QPID" || qrc=$?
[ $qrc != 124 ] || say "the guest did not finish within ${GUEST_TIMEOUT} s: killed"
say "guest finished in $(( $(date +%s) - tg )) s (qemu exit $qrc)"
grep -E '^KNBD' "$WORK/console.log" | tr -d '\r' | grep -v '^KNBD-SUM\|^KNBD-GONE' | sed 's/^/  guest: /' || true
stop_server

declare -A RESULT
ORDER=(ext4-4k ext4-512 multi-conn read-only)
for c in "${ORDER[@]}"; do
  line=$(tr -d '\r' <"$WORK/console.log" | grep -E "^KNBD-CASE $c " | tail -1 || true)
  case "$line" in
    *" PASS") RESULT[$c]=PASS ;;
    "") RESULT[$c]="FAIL: no result from the guest (see $WORK/console.log)" ;;
    *) RESULT[$c]="FAIL:${line#*FAIL:}" ;;
  esac
done
if [ "${RESULT[read-only]}" = PASS ]; then
  got=$(tr -d '\r' <"$WORK/console.log" | sed -n 's/^KNBD-RO-SUM //p')
  [ "$got" = "$RO_SUM" ] || RESULT[read-only]="FAIL: the guest read $got, the host wrote $RO_SUM"
fi

# --- host-side verification ----------------------------------------------------
host_check() {  # host_check CASE VOLUME: prints PASS or FAIL: why
  local c=$1 n=$2 img=$WORK/$2.raw
  "$SLUICE" check "$V/$n.img" >"$WORK/check.$n" 2>&1 || { echo "FAIL: sluice check: $(tail -3 "$WORK/check.$n")"; return; }
  start_server "$WORK/rb.$n" "$V/$n.img" --read-only --socket "$WORK/rb.$n.sock"
  timeout 60 nbdcopy "$URI" "$img" || { stop_server; echo "FAIL: nbdcopy"; return; }
  timeout 60 nbdinfo --map "$URI" >"$WORK/map.$n" || { stop_server; echo "FAIL: nbdinfo --map"; return; }
  stop_server
  # The deleted big2's blocks must be holes now (fstrim -> NBD_CMD_TRIM -> sluice
  # drops them; base:allocation type 3 = hole,zero), not merely free in ext4.
  # sluice trims whole 4 KiB blocks (a trim is advisory), so with 1 KiB ext4
  # blocks the partial 4 KiB blocks at an extent's ends may keep their data.
  local trims off len bad trimmed=0
  trims=$(tr -d '\r' <"$WORK/console.log" | sed -n "s/^KNBD-TRIMMED $c //p")
  [ -n "$trims" ] || { echo "FAIL: no extents of the deleted big2 from the guest"; return; }
  while read -r off len; do
    bad=$(awk -v a=$(((off + 4095) / 4096 * 4096)) -v e=$(((off + len) / 4096 * 4096)) \
      '$1 < e && $1 + $2 > a && $3 % 2 == 0 {print; exit}' "$WORK/map.$n")
    [ -z "$bad" ] || { echo "FAIL: the deleted big2's blocks at $off+$len are not holes after fstrim (map: $bad)"; return; }
    trimmed=$((trimmed + len))
  done <<<"$trims"
  e2fsck -f -n "$img" >"$WORK/e2fsck.$n" 2>&1 || { echo "FAIL: e2fsck -fn of the image read back"; return; }
  local sums gone nsum=0 h p got
  sums=$(tr -d '\r' <"$WORK/console.log" | sed -n "s/^KNBD-SUM $c //p")
  [ -n "$sums" ] || { echo "FAIL: no checksums from the guest"; return; }
  while read -r h p; do
    got=$(debugfs -R "cat $p" "$img" 2>/dev/null | sha256sum | cut -d' ' -f1)
    [ "$got" = "$h" ] || { echo "FAIL: $p differs (guest $h, host $got)"; return; }
    nsum=$((nsum+1))
  done <<<"$sums"
  gone=$(tr -d '\r' <"$WORK/console.log" | sed -n "s/^KNBD-GONE $c //p")
  for p in $gone; do
    debugfs -R "stat $p" "$img" 2>&1 | grep -q 'File not found' || { echo "FAIL: deleted $p still there"; return; }
  done
  echo "PASS ($nsum files equal, $(echo $gone | wc -w) deleted ones gone, big2's $((trimmed >> 20)) MiB holes, check and e2fsck clean)"
}
HORDER=()
for pair in ext4-4k:fs4k ext4-512:fs512 multi-conn:mc; do
  c=${pair%%:*}; n=${pair##*:}
  HORDER+=("host-$c")
  if [ "${RESULT[$c]}" = PASS ]; then
    host_check "$c" "$n" >"$WORK/host.$c"
    RESULT[host-$c]=$(cat "$WORK/host.$c")
  else
    RESULT[host-$c]="FAIL: the guest case failed"
  fi
done
if "$SLUICE" check "$V/ro.img" >"$WORK/check.ro" 2>&1; then RESULT[host-read-only]=PASS; else RESULT[host-read-only]="FAIL: sluice check"; fi
HORDER+=(host-read-only)

echo
say "results ($(( $(date +%s) - T0 )) s in all):"
failed=0
for c in "${ORDER[@]}" "${HORDER[@]}"; do
  r=${RESULT[$c]}
  printf '  %-16s %s\n' "$c" "$r"
  [[ "$r" == PASS* ]] || failed=$((failed+1))
done
if [ $failed -gt 0 ]; then
  say "FAIL ($failed cases); work dir kept: $WORK"
  exit 1
fi
say "PASS (all $(( ${#ORDER[@]} + ${#HORDER[@]} )) cases)"
[ -n "${KNBD_KEEP:-}" ] || rm -rf "$WORK"
