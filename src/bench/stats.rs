//! Benchmark statistics: latency histograms and percentiles, least-squares fits,
//! the SNIA PTS steady-state rule and the seeds' 70/30 normalisation.
//!
//! Invariant: every function here is pure (no clocks, no IO), so each is tested on
//! known inputs; a histogram percentile is within `Histogram::RELATIVE_ERROR` of the
//! exact nearest-rank percentile of the values recorded.

use serde::Serialize;

/// Exact nearest-rank percentile of `sorted` (ascending); `p` in 0..=100.
/// Returns None for an empty slice.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    // nearest rank: the smallest value with at least p% of the values <= it
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

/// Log-linear histogram of non-negative integer values (nanoseconds): 64 linear
/// sub-buckets per power of two, so any reported value is within 1/64 of the truth.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 * SUB) as usize],
            n: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Histogram {
    pub const RELATIVE_ERROR: f64 = 1.0 / SUB as f64;

    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros(); // >= SUB_BITS
        let shift = exp - SUB_BITS;
        let sub = (v >> shift) - SUB; // 0..SUB
        ((shift as u64 + 1) * SUB + sub) as usize
    }

    /// Smallest and largest value that map to bucket `i`.
    fn bounds(i: usize) -> (u64, u64) {
        let i = i as u64;
        if i < SUB {
            return (i, i);
        }
        let shift = i / SUB - 1;
        let sub = i % SUB;
        let lo = (SUB + sub) << shift;
        (lo, lo + (1u64 << shift) - 1)
    }

    pub fn record(&mut self, v: u64) {
        self.record_weighted(v, 1);
    }

    /// Record `v` as standing for `weight` values (a sampled value: the run
    /// timed one IO in `weight`), so counts, mean and percentiles stay estimates
    /// of every IO; min and max are of the values recorded.
    pub fn record_weighted(&mut self, v: u64, weight: u64) {
        self.counts[Self::index(v)] += weight;
        self.n += weight;
        self.sum += v as u128 * weight as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    pub fn max(&self) -> Option<u64> {
        (self.n > 0).then_some(self.max)
    }

    /// Nearest-rank percentile, reported as the midpoint of its bucket (clamped to
    /// the observed min and max).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = (((p.clamp(0.0, 100.0) / 100.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = Self::bounds(i);
                let mid = (lo as f64 + hi as f64) / 2.0;
                return Some(mid.clamp(self.min as f64, self.max as f64));
            }
        }
        Some(self.max as f64)
    }
}

/// Latency summary in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram) -> Latency {
        let us = |v: Option<f64>| v.unwrap_or(0.0) / 1000.0;
        Latency {
            mean_us: us(h.mean()),
            p50_us: us(h.percentile(50.0)),
            p99_us: us(h.percentile(99.0)),
            p999_us: us(h.percentile(99.9)),
            max_us: us(h.max().map(|m| m as f64)),
        }
    }
}

/// Least-squares line through (x, y): returns (intercept, slope). None when fewer
/// than two points or all x are equal.
pub fn linear_fit(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let mx = x[..n].iter().sum::<f64>() / n as f64;
    let my = y[..n].iter().sum::<f64>() / n as f64;
    let sxx: f64 = x[..n].iter().map(|a| (a - mx) * (a - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = x[..n]
        .iter()
        .zip(&y[..n])
        .map(|(a, b)| (a - mx) * (b - my))
        .sum();
    let slope = sxy / sxx;
    Some((my - slope * mx, slope))
}

/// The SNIA PTS steady-state verdict over the last `window` rounds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SteadyState {
    pub reached: bool,
    pub window: usize,
    /// Rounds used (the last `window` of the series), or fewer when the series is short.
    pub rounds: usize,
    pub average: f64,
    /// (max - min) / average, percent; the rule allows at most 20.
    pub range_percent: f64,
    /// |slope| x (window - 1) / average, percent: how far the best-fit line moves
    /// across the window; the rule allows at most 10.
    pub slope_percent: f64,
    pub reason: String,
}

pub const STEADY_WINDOW: usize = 5;
pub const STEADY_RANGE_LIMIT: f64 = 20.0;
pub const STEADY_SLOPE_LIMIT: f64 = 10.0;

/// SNIA PTS rule: over the last 5 rounds, max - min within 20% of the average and
/// the best-fit line's excursion across the window within 10% of the average.
pub fn steady_state(series: &[f64]) -> SteadyState {
    let window = STEADY_WINDOW;
    let w = &series[series.len().saturating_sub(window)..];
    let rounds = w.len();
    let avg = if rounds > 0 {
        w.iter().sum::<f64>() / rounds as f64
    } else {
        0.0
    };
    let max = w.iter().cloned().fold(f64::MIN, f64::max);
    let min = w.iter().cloned().fold(f64::MAX, f64::min);
    let range_percent = if avg > 0.0 {
        (max - min) / avg * 100.0
    } else {
        0.0
    };
    let xs: Vec<f64> = (0..rounds).map(|i| i as f64).collect();
    let slope_percent = match linear_fit(&xs, w) {
        Some((_, b)) if avg > 0.0 => (b.abs() * (rounds as f64 - 1.0)) / avg * 100.0,
        _ => 0.0,
    };
    let (reached, reason) = if rounds < window {
        (
            false,
            format!("only {rounds} complete interval(s); the rule needs {window}"),
        )
    } else if avg <= 0.0 {
        (false, "no IO completed in the window".to_string())
    } else if range_percent > STEADY_RANGE_LIMIT {
        (
            false,
            format!("max-min is {range_percent:.1}% of the average (limit {STEADY_RANGE_LIMIT}%)"),
        )
    } else if slope_percent > STEADY_SLOPE_LIMIT {
        (
            false,
            format!(
                "best-fit line moves {slope_percent:.1}% of the average across the window (limit {STEADY_SLOPE_LIMIT}%)"
            ),
        )
    } else {
        (
            true,
            format!(
                "range {range_percent:.1}% <= {STEADY_RANGE_LIMIT}% and slope excursion {slope_percent:.1}% <= {STEADY_SLOPE_LIMIT}% over the last {window} intervals"
            ),
        )
    };
    SteadyState {
        reached,
        window,
        rounds,
        average: avg,
        range_percent,
        slope_percent,
        reason,
    }
}

/// The seeds' 70/30 composite: R / (0.7 + 0.3 R / W) (a harmonic mix: the rate at
/// which 70% reads at R and 30% writes at W complete). None when W or R is not positive.
pub fn normalise_70_30(read_iops: f64, write_iops: f64) -> Option<f64> {
    if read_iops <= 0.0 || write_iops <= 0.0 {
        return None;
    }
    Some(read_iops / (0.7 + 0.3 * read_iops / write_iops))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_on_known_data() {
        let v: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        assert_eq!(percentile_sorted(&v, 50.0), Some(50.0));
        assert_eq!(percentile_sorted(&v, 99.0), Some(99.0));
        assert_eq!(percentile_sorted(&v, 99.5), Some(100.0));
        assert_eq!(percentile_sorted(&v, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&v, 100.0), Some(100.0));
        assert_eq!(percentile_sorted(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        // 5 values: p40 -> rank 2
        assert_eq!(
            percentile_sorted(&[1.0, 2.0, 3.0, 4.0, 5.0], 40.0),
            Some(2.0)
        );
    }

    #[test]
    fn histogram_buckets_cover_every_value_once() {
        for v in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            4095,
            1 << 20,
            u64::MAX / 3,
        ] {
            let i = Histogram::index(v);
            let (lo, hi) = Histogram::bounds(i);
            assert!(lo <= v && v <= hi, "{v} not in bucket {i} = [{lo},{hi}]");
        }
        // consecutive buckets tile the line
        for i in 0..2000 {
            assert_eq!(Histogram::bounds(i).1 + 1, Histogram::bounds(i + 1).0);
        }
    }

    #[test]
    fn histogram_percentiles_match_exact_within_error() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut h = Histogram::default();
        let mut v = Vec::new();
        for _ in 0..20_000 {
            // log-uniform between 1 us and 100 ms, in ns
            let x = (10f64.powf(rng.gen_range(3.0..8.0))) as u64;
            h.record(x);
            v.push(x as f64);
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for p in [1.0, 50.0, 90.0, 99.0, 99.9] {
            let exact = percentile_sorted(&v, p).unwrap();
            let approx = h.percentile(p).unwrap();
            assert!(
                (approx - exact).abs() <= exact * Histogram::RELATIVE_ERROR,
                "p{p}: {approx} vs {exact}"
            );
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((h.mean().unwrap() - mean).abs() < 1e-6 * mean);
        assert_eq!(h.count(), 20_000);
        let mut h2 = Histogram::default();
        h2.record(5);
        h2.merge(&h);
        assert_eq!(h2.count(), 20_001);
        assert_eq!(h2.percentile(0.0), Some(5.0));
        let l = Latency::from_histogram(&Histogram::default());
        assert_eq!(l, Latency::default());
    }

    #[test]
    fn linear_fit_recovers_a_line() {
        let x = [0.0, 1.0, 2.0, 3.0];
        let y = [1.0, 3.0, 5.0, 7.0];
        let (a, b) = linear_fit(&x, &y).unwrap();
        assert!((a - 1.0).abs() < 1e-12 && (b - 2.0).abs() < 1e-12);
        assert!(linear_fit(&[1.0], &[1.0]).is_none());
        assert!(linear_fit(&[2.0, 2.0], &[1.0, 5.0]).is_none());
    }

    #[test]
    fn steady_state_rule_on_known_series() {
        // flat after a fall: steady
        let s = steady_state(&[500.0, 300.0, 100.0, 101.0, 99.0, 100.0, 102.0, 98.0]);
        assert!(s.reached, "{s:?}");
        assert_eq!(s.rounds, 5);
        assert!((s.average - 100.0).abs() < 1e-9);
        assert!((s.range_percent - 4.0).abs() < 1e-9);
        // range too wide (max-min = 25% of avg 100) although no trend
        let s = steady_state(&[100.0, 87.5, 112.5, 100.0, 100.0]);
        assert!(!s.reached);
        assert!((s.range_percent - 25.0).abs() < 1e-9, "{s:?}");
        assert!(s.reason.contains("max-min"));
        // steady decline: range 16% passes, slope excursion 16% fails
        let s = steady_state(&[108.0, 104.0, 100.0, 96.0, 92.0]);
        assert!(!s.reached);
        assert!((s.range_percent - 16.0).abs() < 1e-9);
        assert!((s.slope_percent - 16.0).abs() < 1e-9, "{s:?}");
        assert!(s.reason.contains("best-fit"));
        // too short
        let s = steady_state(&[1.0, 1.0, 1.0]);
        assert!(!s.reached && s.reason.contains("only 3"));
        // all zero
        assert!(!steady_state(&[0.0; 6]).reached);
    }

    #[test]
    fn seventy_thirty_normalisation() {
        // equal R and W -> R
        assert!((normalise_70_30(1000.0, 1000.0).unwrap() - 1000.0).abs() < 1e-9);
        // R = 22,838 and W = 21,927 (seed 002, SandForce 4K x10)
        let v = normalise_70_30(22_838.0, 21_927.0).unwrap();
        let want = 22_838.0 / (0.7 + 0.3 * 22_838.0 / 21_927.0);
        assert!((v - want).abs() < 1e-9);
        // harmonic: time per op = 0.7/R + 0.3/W
        let v = normalise_70_30(10_000.0, 1_000.0).unwrap();
        assert!((1.0 / v - (0.7 / 10_000.0 + 0.3 / 1_000.0)).abs() < 1e-12);
        assert!(normalise_70_30(0.0, 5.0).is_none());
        assert!(normalise_70_30(5.0, 0.0).is_none());
    }
}
