//! Access pattern of one request stream (host requests in front, media writes
//! behind): how many requests start where the previous one ended (sequential)
//! versus elsewhere (random), how far the random ones seek, and how large requests
//! are. The point it shows: random in front, sequential behind.
//!
//! Invariant: `observe` is three or four relaxed atomic operations; concurrent
//! streams are taken in order of arrival (interleaving counts as seeking).

use super::{write_hist, Log2Hist};
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Pattern {
    last_end: AtomicU64,
    pub sequential: AtomicU64,
    pub random: AtomicU64,
    /// |offset - previous end| in bytes, random requests only.
    pub seek_bytes: Log2Hist,
    /// Request length in bytes.
    pub size_bytes: Log2Hist,
}

impl Pattern {
    #[inline]
    pub fn observe(&self, offset: u64, len: u64) {
        let prev = self.last_end.swap(offset.saturating_add(len), Relaxed);
        if prev == offset {
            self.sequential.fetch_add(1, Relaxed);
        } else {
            self.random.fetch_add(1, Relaxed);
            self.seek_bytes.observe(offset.abs_diff(prev));
        }
        self.size_bytes.observe(len);
    }

    pub fn snapshot(&self) -> PatternSnapshot {
        let seq = self.sequential.load(Relaxed);
        let rnd = self.random.load(Relaxed);
        let buckets = |h: &Log2Hist| {
            h.counts()
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(k, &n)| (Log2Hist::upper(k), n))
                .collect()
        };
        PatternSnapshot::new(
            seq,
            rnd,
            buckets(&self.seek_bytes),
            buckets(&self.size_bytes),
        )
    }
}

/// A point-in-time copy for reports (`sluice bench --json`). Histograms are
/// (bucket upper bound in bytes, count) for non-empty power-of-two buckets.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct PatternSnapshot {
    pub requests: u64,
    pub sequential: u64,
    pub random: u64,
    pub sequential_share: f64,
    pub seek_bytes: Vec<(u64, u64)>,
    pub size_bytes: Vec<(u64, u64)>,
}

impl PatternSnapshot {
    fn new(seq: u64, rnd: u64, seek_bytes: Vec<(u64, u64)>, size_bytes: Vec<(u64, u64)>) -> Self {
        PatternSnapshot {
            requests: seq + rnd,
            sequential: seq,
            random: rnd,
            sequential_share: if seq + rnd == 0 {
                0.0
            } else {
                seq as f64 / (seq + rnd) as f64
            },
            seek_bytes,
            size_bytes,
        }
    }

    /// The counts accumulated since `earlier` (same stream).
    pub fn since(&self, earlier: &PatternSnapshot) -> PatternSnapshot {
        let sub = |a: &[(u64, u64)], b: &[(u64, u64)]| -> Vec<(u64, u64)> {
            a.iter()
                .map(|&(ub, n)| {
                    let before = b.iter().find(|x| x.0 == ub).map_or(0, |x| x.1);
                    (ub, n.saturating_sub(before))
                })
                .filter(|x| x.1 > 0)
                .collect()
        };
        let seq = self.sequential.saturating_sub(earlier.sequential);
        let rnd = self.random.saturating_sub(earlier.random);
        PatternSnapshot::new(
            seq,
            rnd,
            sub(&self.seek_bytes, &earlier.seek_bytes),
            sub(&self.size_bytes, &earlier.size_bytes),
        )
    }
}

/// Exposition of the access-pattern metrics for each named stream.
pub fn render(out: &mut String, sides: &[(&str, &Pattern)]) {
    let _ = writeln!(out, "# HELP sluice_access_requests_total Requests that start where the previous one ended (sequential) or elsewhere (random); side host = client requests, media = engine writes.\n# TYPE sluice_access_requests_total counter");
    for (side, p) in sides {
        for (pat, v) in [
            ("sequential", p.sequential.load(Relaxed)),
            ("random", p.random.load(Relaxed)),
        ] {
            let _ = writeln!(
                out,
                "sluice_access_requests_total{{side=\"{side}\",pattern=\"{pat}\"}} {v}"
            );
        }
    }
    let _ = writeln!(out, "# HELP sluice_access_seek_bytes Distance from the previous request's end to a random request's start.\n# TYPE sluice_access_seek_bytes histogram");
    for (side, p) in sides {
        write_hist(
            out,
            "sluice_access_seek_bytes",
            &format!("side=\"{side}\""),
            &p.seek_bytes,
            1.0,
        );
    }
    let _ = writeln!(out, "# HELP sluice_access_request_bytes Request length.\n# TYPE sluice_access_request_bytes histogram");
    for (side, p) in sides {
        write_hist(
            out,
            "sluice_access_request_bytes",
            &format!("side=\"{side}\""),
            &p.size_bytes,
            1.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_random_are_told_apart() {
        let p = Pattern::default();
        for i in 0..10u64 {
            p.observe(i * 4096, 4096);
        }
        p.observe(1 << 30, 4096);
        p.observe(0, 8192);
        let s = p.snapshot();
        assert_eq!((s.sequential, s.random), (10, 2));
        // seek from 40960 to 1 GiB lands in the bucket below 2^30.
        assert!(s
            .seek_bytes
            .iter()
            .any(|&(ub, n)| ub == (1 << 30) - 1 && n == 1));
        assert_eq!(s.size_bytes, vec![(8191, 11), (16383, 1)]);
        let later = {
            p.observe(8192, 4096);
            p.snapshot()
        };
        let d = later.since(&s);
        assert_eq!((d.sequential, d.random), (1, 0));
    }
}
