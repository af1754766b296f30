#!/usr/bin/env bash
# compress-real.sh: real data on a compressed volume (issue 19). Not a test:
# run by hand, as root (loop devices, mount).
#
# Makes a fresh compressed sluice volume (`create --compress lz4`), serves it,
# exposes the export as a block device (nbdfuse + a loop device with direct
# IO), makes ext4 on it, copies a real tree into it (`cp -a TREE`), unmounts,
# and reads the volume's own counters from its metrics endpoint: host bytes the
# packer placed and the bytes they take in their chunks. Then it copies the
# export to an image file (nbdcopy) and measures the yardsticks on the same
# image: LZ4 alone on each 4 KiB block (examples/lz4_image), sluice's rules on
# each block (the least a compressed volume could store), and zstd -3 over the
# whole image. Prints one table.
#
# Usage: scripts/compress-real.sh
# Env:   TREE=/usr (what to copy)  SIZE=8G (exported size)  DIR=/var/tmp (a fresh
#        directory is made under it and removed at exit)  SLUICE=target/release/sluice
#        METRICS_PORT=29912
set -euo pipefail

TREE=${TREE:-/usr}
SIZE=${SIZE:-8G}
DIR=${DIR:-/var/tmp}
SLUICE=${SLUICE:-target/release/sluice}
METRICS_PORT=${METRICS_PORT:-29912}

for t in nbdfuse nbdcopy losetup mkfs.ext4 zstd curl; do
    command -v "$t" >/dev/null || { echo "compress-real: $t is not installed (scripts/install-deps)" >&2; exit 2; }
done
[ -x "$SLUICE" ] || { echo "compress-real: build first: cargo build --release" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "compress-real: needs root (loop device, mount)" >&2; exit 2; }
cargo build --release --quiet --example lz4_image
LZ4_IMAGE=target/release/examples/lz4_image

mkdir -p "$DIR"
W=$(mktemp -d "$DIR/compress-real.XXXXXX")
SOCK=$W/nbd.sock
SERVER_PID=
LOOP=
cleanup() {
    mountpoint -q "$W/fs" 2>/dev/null && umount "$W/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    mountpoint -q "$W/fuse" 2>/dev/null && fusermount3 -u "$W/fuse" 2>/dev/null
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$W"
}
trap cleanup EXIT

"$SLUICE" create "$W/vol.img" --size "$SIZE" --compress lz4 >/dev/null
"$SLUICE" serve "$W/vol.img" --socket "$SOCK" --metrics "127.0.0.1:$METRICS_PORT" \
    >/dev/null 2>"$W/serve.log" &
SERVER_PID=$!
for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "compress-real: sluice serve did not come up" >&2; cat "$W/serve.log" >&2; exit 1; }

mkdir "$W/fuse" "$W/fs"
nbdfuse "$W/fuse/nbd" "nbd+unix:///?socket=$SOCK" &
for _ in $(seq 1 100); do [ -e "$W/fuse/nbd" ] && break; sleep 0.1; done
LOOP=$(losetup --direct-io=on -f --show "$W/fuse/nbd")
mkfs.ext4 -q -F "$LOOP"
mount "$LOOP" "$W/fs"
echo "compress-real: copying $TREE ($(du -sh "$TREE" 2>/dev/null | cut -f1)) into ext4 on a compressed volume..." >&2
t0=$(date +%s)
cp -a "$TREE/." "$W/fs/"
umount "$W/fs"
t1=$(date +%s)
losetup -d "$LOOP"; LOOP=

metric() { curl -s "127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 ~ "^"m"[{ ]" || $1 == m {print $2}' | head -1; }
HOST=$(metric sluice_compress_host_bytes_total)
STORED=$(metric sluice_compress_stored_bytes_total)
FRAGS=$(metric sluice_compress_fragments_total)
SKIPPED=$(metric sluice_compress_skipped_blocks_total)

echo "compress-real: copying the export to an image for the yardsticks..." >&2
nbdcopy "nbd+unix:///?socket=$SOCK" "$W/image.raw"
fusermount3 -u "$W/fuse" 2>/dev/null || true
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
"$LZ4_IMAGE" "$W/image.raw" >"$W/lz4.txt"
ZSTD=$(zstd -3 -T1 -c "$W/image.raw" | wc -c)
DATA_BLOCKS=$(awk '$1=="blocks"{print $6}' "$W/lz4.txt")
ALONE=$(awk '$1=="lz4_alone"{print $2}' "$W/lz4.txt")
RULE=$(awk '$1=="sluice_rule"{print $2}' "$W/lz4.txt")
WA=$(grep -o 'WA [0-9.]*' "$W/serve.log" | tail -1)

python3 - "$TREE" "$HOST" "$STORED" "$FRAGS" "$SKIPPED" "$DATA_BLOCKS" "$ALONE" "$RULE" "$ZSTD" "$((t1 - t0))" "$WA" <<'EOF'
import sys
tree, host, stored, frags, skipped, data_blocks, alone, rule, zstd, secs, wa = sys.argv[1:]
host, stored, frags, skipped = int(float(host)), int(float(stored)), int(float(frags)), int(float(skipped))
data = int(data_blocks) * 4096
alone, rule, zstd = int(alone), int(rule), int(zstd)
print(f"tree {tree}, copied in {secs} s; serve: {wa}")
print(f"{'what':<80}{'bytes':>16}{'per byte':>10}")
print(f"{'sluice: host bytes written (non-zero blocks, ext4 journal and metadata included)':<80}{host:>16}")
print(f"{'sluice: bytes they take in their chunks (stored)':<80}{stored:>16}{stored/max(host,1):>10.3f}")
print(f"{'  host blocks stored as LZ4 fragments':<80}{frags:>16}")
print(f"{'  host blocks the entropy sample stored raw':<80}{skipped:>16}")
print(f"{'image: non-zero 4 KiB blocks at the end':<80}{data:>16}")
print(f"{'image: LZ4 alone, each 4 KiB block on its own':<80}{alone:>16}{alone/max(data,1):>10.3f}")
print(f"{'image: sluice rules on each block (the least possible)':<80}{rule:>16}{rule/max(data,1):>10.3f}")
print(f"{'image: zstd -3 over the whole image':<80}{zstd:>16}{zstd/max(data,1):>10.3f}")
r = (stored / max(host, 1)) / (alone / max(data, 1))
print(f"sluice's stored share over LZ4 alone's: {r:.3f} (issue 19: within 10%, <= 1.10)")
EOF
