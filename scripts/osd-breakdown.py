#!/usr/bin/env python3
# What the OSD did in one run, per GiB of host writes (issue 21,
# docs/objects.md §4.8), by hand, not in CI:
#
#   scripts/osd-breakdown.py NAME PERF0 PERF1 HOST_BYTES OSD_CPU_S [SLUICE_LOG]
#
# PERF0/PERF1: `ceph daemon osd.0 perf dump` before and after the run;
# HOST_BYTES: bytes the host wrote (fio's io_bytes); OSD_CPU_S: the OSD's
# utime + stime in the run; SLUICE_LOG: the server's stderr, whose stop
# lines say what sluice asked of the store (objects put by kind, deletes,
# GETs). Prints one line of counters per GiB and the OSD CPU per write op.
import json
import re
import sys

name, f0, f1, host, cpu = sys.argv[1:6]
host, cpu = int(host), float(cpu)
p0, p1 = (json.load(open(f)) for f in (f0, f1))


def d(sec, key):
    a, b = p0.get(sec, {}).get(key, 0), p1.get(sec, {}).get(key, 0)
    if isinstance(b, dict):
        return b.get("avgcount", 0) - (a.get("avgcount", 0) if isinstance(a, dict) else 0)
    return b - a


gib = host / 2**30 if host else float("nan")
w, r = d("osd", "op_w"), d("osd", "op_r")
win, rout = d("osd", "op_w_in_bytes"), d("osd", "op_r_out_bytes")
txc = d("bluestore", "bluestore_txc")
big, small = d("bluestore", "bluestore_write_big"), d("bluestore", "bluestore_write_small")
dfr = d("bluestore", "deferred_write_ops")
dfrb = d("bluestore", "deferred_write_bytes")
rm = d("bluestore", "remove_lat")
kv = d("bluestore", "kv_commit_lat")
out = (f"{name}: host {host / 2**20:.0f} MiB, OSD CPU {cpu:.2f} s = {cpu / gib:.2f} s/GiB; per GiB: "
       f"{w / gib:.0f} write ops ({win / host:.3f} B/host B, {win / max(w, 1) / 1024:.0f} KiB an op), "
       f"{r / gib:.0f} read ops ({rout / host:.3f} B/host B), {rm / gib:.0f} removes, "
       f"{txc / gib:.0f} txc, {kv / gib:.0f} kv commits, write_big {big / gib:.0f} small {small / gib:.0f}, "
       f"deferred {dfr / gib:.0f} ({dfrb / host:.3f} B/host B); "
       f"OSD CPU {cpu * 1e6 / max(w + r, 1):.0f} us an op")
if len(sys.argv) > 6:
    try:
        log = open(sys.argv[6], errors="replace").read()
    except OSError:
        log = ""
    m = re.search(r"objects: (\d+) segment object\(s\) put[^,]*, (\d+) checkpoint object\(s\) \(([0-9.]+) MiB\), "
                  r"(\d+) delete\(s\) \(([0-9.]+) MiB\), (\d+) GET\(s\) \(([0-9.]+) MiB\)", log)
    if m:
        seg, ck, ckm, dl, dlm, g, gm = m.groups()
        mib = host / 2**20
        out += (f"; sluice per GiB: {int(seg) / gib:.0f} segment objects, {int(ck) / gib:.1f} checkpoint objects "
                f"({float(ckm) / mib:.3f} B/host B), {int(dl) / gib:.0f} deletes, {int(g) / gib:.0f} GETs "
                f"({float(gm) / mib:.3f} B/host B)")
    m = re.search(r"put ([0-9.]+) MiB: ([0-9.]+) MiB of segment objects, ([0-9.]+) MiB of FLUSH log objects, "
                  r"([0-9.]+) MiB of checkpoint objects", log)
    if m:
        mib = host / 2**20
        out += "; B/host B seg {:.3f} log {:.3f} ckpt {:.3f}".format(*(float(x) / mib for x in m.groups()[1:]))
print(out)
