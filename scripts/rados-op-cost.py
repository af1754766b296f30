#!/usr/bin/python3
# What one RADOS write op costs the OSD (issue 21, docs/objects.md §4.6), by
# hand, not in CI. Debian's python3-rados (run with /usr/bin/python3).
#
#   scripts/rados-op-cost.py ops   CONF OSD_PIDFILE [N] [SIZES] [QDS]
#       N ops a row (default 800), for each size (bytes, default
#       16384,131072) and queue depth (default 1,8), two rounds: an exclusive
#       create + write_full of a new object (sluice's put_new), an append to
#       one object, an append + setxattr; ops/s and the OSD's CPU (utime +
#       stime of OSD_PIDFILE's pid, /proc/PID/stat) per op.
#   scripts/rados-op-cost.py split CONF OSD_PIDFILE [N]
#       N groups a row, one at a time: 100 KiB stored as 1, 2 or 4 exclusive
#       creates sent at once, and 48 and 24 KiB as one; median and mean time
#       until every create of a group is acknowledged, OSD CPU per group.
#   scripts/rados-op-cost.py seg   CONF OSD_PIDFILE [N] [SIZES] [QD]
#       What segment objects cost (docs/objects.md §4.8): for each size
#       (bytes, default 4 MiB and 16 MiB; N objects of 4 MiB, default 64,
#       the same bytes for other sizes) at QD (default 2, sluice's uploads),
#       two rounds of: N exclusive creates + write_full, N whole-object
#       reads, N removes; OSD CPU per op and per MiB of each.
#
# Objects go to pool `sluice` under `opcost-PID/` and are removed at the end.
import os
import statistics
import sys
import threading
import time

import rados

mode, conf, pidfile = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(sys.argv[4]) if len(sys.argv) > 4 else (800 if mode == "ops" else 200)
pid = int(open(pidfile).read())
tck = os.sysconf("SC_CLK_TCK")
cluster = rados.Rados(conffile=conf)
cluster.connect()
io = cluster.open_ioctx("sluice")
run = f"opcost-{os.getpid()}"
names, keep = set(), []


def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def create(name, data, cb):
    op = io.create_write_op()
    op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
    op.write_full(data)
    keep.append(op)  # alive until the end: librados may still use it
    names.add(name)
    io.operate_aio_write_op(op, name, oncomplete=cb)


def append(name, data, cb, xattr=None):
    op = io.create_write_op()
    op.append(data)
    if xattr is not None:
        op.set_xattr("n", xattr)
    keep.append(op)
    names.add(name)
    io.operate_aio_write_op(op, name, oncomplete=cb)


def in_flight(count, qd, fn):
    """Run fn(i, cb) for i in 0..count with at most qd outstanding (each
    calls cb when it completes); the OSD's CPU seconds and the wall time."""
    sem = threading.Semaphore(qd)
    done, left, lock = threading.Event(), [count], threading.Lock()

    def cb(*_):
        sem.release()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    t0, w0 = ticks(), time.time()
    for i in range(count):
        sem.acquire()
        fn(i, cb)
    done.wait()
    return (ticks() - t0) / tck, time.time() - w0


def ops_row(what, size, qd, fn):
    data = os.urandom(size)
    cpu, wall = in_flight(N, qd, lambda i, cb: fn(i, data, cb))
    print(f"{what:28s} size {size:7d} qd {qd:2d}: {N} ops {wall:6.2f} s, "
          f"{N / wall:7.0f} ops/s, OSD CPU {cpu * 1e6 / N:6.0f} us/op", flush=True)


def group(tag, i, size, parts):
    ev, left, lock = threading.Event(), [parts], threading.Lock()

    def cb(*_):
        with lock:
            left[0] -= 1
            if left[0] == 0:
                ev.set()

    for p in range(parts):
        create(f"{run}/{tag}/{i}/{p}", os.urandom(size // parts), cb)
    ev.wait()


if mode == "ops":
    sizes = [int(s) for s in (sys.argv[5] if len(sys.argv) > 5 else "16384,131072").split(",")]
    qds = [int(s) for s in (sys.argv[6] if len(sys.argv) > 6 else "1,8").split(",")]
    for rnd in range(2):
        for size in sizes:
            for qd in qds:
                t = f"{rnd}-{size}-{qd}"
                ops_row("create+write_full", size, qd,
                        lambda i, d, cb, t=t: create(f"{run}/c{t}/{i}", d, cb))
                ops_row("append", size, qd,
                        lambda i, d, cb, t=t: append(f"{run}/a{t}", d, cb))
                ops_row("append+setxattr", size, qd,
                        lambda i, d, cb, t=t: append(f"{run}/x{t}", d, cb, str(i).encode()))
elif mode == "split":
    for rnd in range(2):
        for size, parts in [(102400, 1), (102400, 2), (102400, 4), (49152, 1), (24576, 1)]:
            lat, t0 = [], ticks()
            for i in range(N):
                s = time.time()
                group(f"{rnd}-{size}-{parts}", i, size, parts)
                lat.append(time.time() - s)
            cpu = (ticks() - t0) / tck
            print(f"group {size // 1024:4d} KiB as {parts} object(s): median "
                  f"{statistics.median(lat) * 1e3:5.2f} ms, mean {statistics.mean(lat) * 1e3:5.2f} ms, "
                  f"OSD CPU {cpu * 1e6 / N:5.0f} us/group", flush=True)
elif mode == "seg":
    sizes = [int(s) for s in (sys.argv[5] if len(sys.argv) > 5 else "4194304,16777216").split(",")]
    qd = int(sys.argv[6]) if len(sys.argv) > 6 else 2

    def phase(what, size, count, fn):
        cpu, wall = in_flight(count, qd, fn)
        mib = count * size / 2**20
        print(f"{what:8s} size {size >> 10:6d} KiB qd {qd}: {count:4d} ops {wall:6.2f} s, "
              f"OSD CPU {cpu * 1e6 / count:7.0f} us/op, {cpu * 1e3 / mib:6.2f} ms/MiB", flush=True)

    for rnd in range(2):
        for size in sizes:
            count = max(1, N * 4194304 // size)
            data = os.urandom(size)
            tag = f"{run}/s{rnd}-{size}"
            phase("create", size, count, lambda i, cb: create(f"{tag}/{i}", data, cb))
            comps = []
            phase("read", size, count, lambda i, cb: comps.append(
                io.aio_read(f"{tag}/{i}", size, 0, lambda c, d: cb())))
            phase("remove", size, count, lambda i, cb: comps.append(
                io.aio_remove(f"{tag}/{i}", oncomplete=lambda c: cb())))
            names.difference_update(f"{tag}/{i}" for i in range(count))
else:
    sys.exit(f"usage: {sys.argv[0]} ops|split|seg CONF OSD_PIDFILE [N] ...")
for n in names:
    io.remove_object(n)
io.close()
cluster.shutdown()
