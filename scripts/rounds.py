"""Shared by the round-based bench scripts (bench-metrics.sh, bench-reads.sh):
the median of per-round ratios and its interquartile range."""
import statistics as st


def median_iqr(v):
    """(median, first quartile, third quartile); with fewer than 4 values the
    range is (smallest, largest)."""
    v = sorted(v)
    if len(v) < 4:
        return st.median(v), v[0], v[-1]
    qs = st.quantiles(v, n=4)
    return st.median(v), qs[0], qs[2]
