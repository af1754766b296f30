#!/usr/bin/env python3
"""Sum fio's per-job IOPS logs (--write_iops_log=PREFIX --log_avg_msec=N)
into one time series: a line per window with its end time (s) and IOPS.

    scripts/fio-iops-series.py PREFIX [--json]

PREFIX is what fio was given (files PREFIX_iops.1.log, PREFIX_iops.2.log...).
Each log line is "msec, iops, direction, bs, offset[, prio]"; a job's line
for window k is its average over that window, so the windows of all jobs
are summed by index (fio logs every job at the same cadence); only the
windows every job logged are kept. With --json
prints {"window_s": .., "iops": [..]}. Not a test.
"""
import glob
import json
import sys


def series(prefix):
    files = sorted(glob.glob(f"{prefix}_iops.*.log"))
    if not files:
        sys.exit(f"fio-iops-series: no logs {prefix}_iops.*.log")
    logs = []
    for f in files:
        with open(f) as fh:
            logs.append([ln.split(",") for ln in fh if ln.strip()])
    # only the windows every job logged: a job's last, partial window may be
    # missing from some logs (summing it would show a false drop)
    n = min(len(rows) for rows in logs)
    ends = [int(logs[0][k][0]) for k in range(n)]
    sums = [sum(int(rows[k][1]) for rows in logs) for k in range(n)]
    return ends, sums


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ends, sums = series(sys.argv[1])
    if "--json" in sys.argv[2:]:
        win = (ends[1] - ends[0]) / 1000 if len(ends) > 1 else ends[0] / 1000
        print(json.dumps({"window_s": win, "end_s": [e / 1000 for e in ends], "iops": sums}))
        return
    for e, s in zip(ends, sums):
        print(f"{e / 1000:8.1f} {s}")


if __name__ == "__main__":
    main()
