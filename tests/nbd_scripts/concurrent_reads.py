# Run by tests/nbd_verified_reads.rs under nbdsh (`h` is the connected handle).
# MODE=reads: N reads of mixed sizes and alignments (512-byte multiples), DEPTH in flight, over a
# volume whose block i holds pattern(i, 0); every reply's bytes are checked
# and the replies that overtook an earlier request are counted.
# MODE=versions: the same reads while another client rewrites blocks (GC
# runs): every block read must be pattern(i, v) for its own i, some v.
# MODE=rewrite: rewrite random blocks with rising versions until killed.
import os
import random
import signal
import struct

import nbd

BS = 4096
blocks = int(os.environ["BLOCKS"])
mode = os.environ.get("MODE", "reads")
rng = random.Random(int(os.environ.get("SEED", "7")))
# a server that stops answering fails the test instead of hanging it
signal.alarm(int(os.environ.get("DEADLINE_S", "300")))


def pattern(i, v):
    word = struct.pack("<QQ", i + 1, (v << 32) ^ ((i * 0x9E3779B1) & 0xFFFFFFFF))
    return word * (BS // 16)


def check_versions(off, got):
    # every whole block inside the range: pattern(i, v) for its own i
    first = (off + BS - 1) // BS
    for b in range(first, (off + len(got)) // BS):
        blk = bytes(got[b * BS - off:(b + 1) * BS - off])
        i1, w = struct.unpack("<QQ", blk[:16])
        v = w >> 32
        if i1 != b + 1 or blk != pattern(b, v):
            raise SystemExit(f"block {b}: not any version of its own data (header {i1}, {w:#x})")


if mode == "rewrite":
    v = 1
    while True:
        b = rng.randrange(blocks)
        h.pwrite(pattern(b, v), b * BS)
        v += 1
        if v % 256 == 0:
            h.flush()

image = None
if mode == "reads":
    image = b"".join(pattern(i, 0) for i in range(blocks))
    assert h.get_structured_replies_negotiated(), "structured replies negotiated"
size = blocks * BS
n_reads = int(os.environ.get("N", "3000"))
depth = int(os.environ.get("DEPTH", "64"))
sizes = [512, 1536, 4096, 4096, 4096, 4096, 8192, 12288, 65536, 131072, 1 << 20, 3 << 20]
if os.environ.get("SIZES"):
    sizes = [int(x) for x in os.environ["SIZES"].split()]
inflight = {}
issued = completed = reordered = 0
while completed < n_reads:
    while issued < n_reads and len(inflight) < depth:
        n = rng.choice(sizes)
        off = rng.randrange(0, size - n + 1)
        # the advertised minimum block size is 512: most reads 4 KiB aligned
        off -= off % (BS if rng.random() < 0.7 else 512)
        buf = nbd.Buffer(n)
        c = h.aio_pread(buf, off)
        inflight[c] = (issued, off, buf)
        issued += 1
    h.poll(-1)
    while inflight:
        c = h.aio_peek_command_completed()
        if c <= 0:
            break
        idx, off, buf = inflight.pop(c)
        h.aio_command_completed(c)  # raises on an error reply
        if any(i < idx for i, _, _ in inflight.values()):
            reordered += 1
        got = buf.to_bytearray()
        if image is not None:
            if got != image[off:off + len(got)]:
                raise SystemExit(f"read {idx} at {off}+{len(got)}: wrong data")
        else:
            check_versions(off, got)
        completed += 1
print(f"reads {completed} reordered {reordered}")
