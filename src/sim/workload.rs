//! Workload generators over a space of 4 KiB blocks. Each call to `next` yields
//! one operation (write or trim of `n` blocks at `lba`).
//!
//! Invariant: lba + n <= blocks for every yielded operation.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    Uniform,
    /// Zipf with exponent theta over blocks (ranks scattered over the space).
    Zipf(f64),
    /// `ops` fraction of writes go to the first `space` fraction of blocks (scattered).
    HotCold {
        ops: f64,
        space: f64,
    },
    Sequential,
    /// Weighted mixture.
    Mix(Vec<(Workload, f64)>),
}

impl Workload {
    /// `uniform`, `zipf:0.99`, `hotcold:80/20`, `seq`, `mix:zipf:0.99@0.8,seq@0.2`.
    pub fn parse(s: &str) -> Result<Workload, String> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("mix:") {
            let mut parts = Vec::new();
            for p in rest.split(',') {
                let (w, wt) = p
                    .rsplit_once('@')
                    .ok_or_else(|| format!("mix part {p:?} needs @weight"))?;
                let wt: f64 = wt
                    .parse()
                    .map_err(|_| format!("mix weight {wt:?} is not a number"))?;
                if wt.is_nan() || wt <= 0.0 {
                    return Err(format!("mix weight {wt} must be positive"));
                }
                parts.push((Workload::parse(w)?, wt));
            }
            return Ok(Workload::Mix(parts));
        }
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        Ok(match name {
            "uniform" | "random" => Workload::Uniform,
            "seq" | "sequential" => Workload::Sequential,
            "zipf" => {
                let t: f64 = if arg.is_empty() {
                    0.99
                } else {
                    arg.parse()
                        .map_err(|_| format!("zipf theta {arg:?} is not a number"))?
                };
                if !(0.0..=3.0).contains(&t) {
                    return Err(format!("zipf theta {t} outside 0..3"));
                }
                Workload::Zipf(t)
            }
            "hotcold" => {
                let (a, b) = if arg.is_empty() {
                    ("80", "20")
                } else {
                    arg.split_once('/')
                        .ok_or("hotcold needs OPS/SPACE, e.g. hotcold:80/20")?
                };
                let ops: f64 = a.parse().map_err(|_| format!("{a:?} is not a number"))?;
                let space: f64 = b.parse().map_err(|_| format!("{b:?} is not a number"))?;
                if !(0.0 < ops && ops < 100.0 && 0.0 < space && space < 100.0) {
                    return Err("hotcold percentages must be in (0, 100)".into());
                }
                Workload::HotCold {
                    ops: ops / 100.0,
                    space: space / 100.0,
                }
            }
            _ => {
                return Err(format!(
                    "unknown workload {s:?} (uniform, zipf:T, hotcold:A/B, seq, mix:...)"
                ))
            }
        })
    }

    pub fn name(&self) -> String {
        match self {
            Workload::Uniform => "uniform".into(),
            Workload::Sequential => "seq".into(),
            Workload::Zipf(t) => format!("zipf:{t}"),
            Workload::HotCold { ops, space } => {
                format!("hotcold:{:.0}/{:.0}", ops * 100.0, space * 100.0)
            }
            Workload::Mix(p) => format!(
                "mix:{}",
                p.iter()
                    .map(|(w, x)| format!("{}@{x}", w.name()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

enum Part {
    Uniform,
    Zipf { cdf: Vec<f64> },
    HotCold { ops: f64, hot: u64 },
    Seq { next: u64 },
}

/// A running generator.
pub struct Gen {
    blocks: u64,
    parts: Vec<(Part, f64)>,
    total: f64,
    rng: SmallRng,
    trim: f64,
    /// Blocks per sequential write / per trim.
    pub seq_blocks: u64,
}

/// Op yielded by a generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOp {
    Write(u64, u64),
    Trim(u64, u64),
}

fn flatten(w: &Workload, wt: f64, out: &mut Vec<(Workload, f64)>) {
    match w {
        Workload::Mix(p) => {
            let s: f64 = p.iter().map(|x| x.1).sum();
            for (x, y) in p {
                flatten(x, wt * y / s, out);
            }
        }
        other => out.push((other.clone(), wt)),
    }
}

impl Gen {
    /// `trim`: fraction of operations that are single-block trims.
    pub fn new(w: &Workload, blocks: u64, trim: f64, seed: u64) -> Gen {
        let mut flat = Vec::new();
        flatten(w, 1.0, &mut flat);
        let parts: Vec<(Part, f64)> = flat
            .into_iter()
            .map(|(w, wt)| {
                let p = match w {
                    Workload::Uniform | Workload::Mix(_) => Part::Uniform,
                    Workload::Sequential => Part::Seq { next: 0 },
                    Workload::HotCold { ops, space } => Part::HotCold {
                        ops,
                        hot: ((blocks as f64 * space) as u64).clamp(1, blocks),
                    },
                    Workload::Zipf(t) => {
                        let mut cdf = Vec::with_capacity(blocks as usize);
                        let mut s = 0.0;
                        for r in 1..=blocks {
                            s += 1.0 / (r as f64).powf(t);
                            cdf.push(s);
                        }
                        Part::Zipf { cdf }
                    }
                };
                (p, wt)
            })
            .collect();
        let total = parts.iter().map(|p| p.1).sum();
        Gen {
            blocks,
            parts,
            total,
            rng: SmallRng::seed_from_u64(seed),
            trim,
            seq_blocks: 32,
        }
    }

    /// Scatter rank r over the space (a bijection on [0, blocks)).
    fn scatter(&self, r: u64) -> u64 {
        // multiply by a large odd constant modulo the next power of two, cycle-walk back into range
        let m = self.blocks.next_power_of_two();
        let mut x = r;
        loop {
            x = (x
                .wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1)
                .wrapping_add(0x632B_E59B))
                & (m - 1);
            if x < self.blocks {
                return x;
            }
        }
    }

    fn pick(&mut self) -> (u64, u64) {
        let mut u = self.rng.gen::<f64>() * self.total;
        let mut idx = self.parts.len() - 1;
        for (i, p) in self.parts.iter().enumerate() {
            if u < p.1 {
                idx = i;
                break;
            }
            u -= p.1;
        }
        let blocks = self.blocks;
        let seqn = self.seq_blocks.min(blocks);
        match &mut self.parts[idx].0 {
            Part::Uniform => (self.rng.gen_range(0..blocks), 1),
            Part::HotCold { ops, hot } => {
                let (ops, hot) = (*ops, *hot);
                let r = if self.rng.gen::<f64>() < ops || hot == blocks {
                    self.rng.gen_range(0..hot)
                } else {
                    self.rng.gen_range(hot..blocks)
                };
                (self.scatter(r), 1)
            }
            Part::Zipf { cdf } => {
                let x = self.rng.gen::<f64>() * cdf[cdf.len() - 1];
                let r = cdf.partition_point(|&c| c < x).min(cdf.len() - 1) as u64;
                (self.scatter(r), 1)
            }
            Part::Seq { next } => {
                if *next + seqn > blocks {
                    *next = 0;
                }
                let l = *next;
                *next += seqn;
                (l, seqn)
            }
        }
    }

    pub fn next_op(&mut self) -> SimOp {
        let is_trim = self.trim > 0.0 && self.rng.gen::<f64>() < self.trim;
        let (l, n) = self.pick();
        if is_trim {
            SimOp::Trim(l, n)
        } else {
            SimOp::Write(l, n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_stay_in_range_and_skew() {
        for w in [
            "uniform",
            "zipf:0.99",
            "hotcold:80/20",
            "seq",
            "mix:zipf:1.2@0.7,seq@0.3",
        ] {
            let wl = Workload::parse(w).unwrap();
            let mut g = Gen::new(&wl, 1000, 0.1, 7);
            for _ in 0..5000 {
                let (SimOp::Write(l, n) | SimOp::Trim(l, n)) = g.next_op();
                assert!(n >= 1 && l + n <= 1000, "{w}: {l}+{n}");
            }
        }
        // hot/cold 80/20: ~80% of writes land in the hot 20% of ranks.
        let mut g = Gen::new(&Workload::parse("hotcold:80/20").unwrap(), 10_000, 0.0, 1);
        let hot: std::collections::HashSet<u64> = (0..2000).map(|r| g.scatter(r)).collect();
        assert_eq!(hot.len(), 2000);
        let n = 20_000;
        let inside = (0..n)
            .filter(|_| matches!(g.next_op(), SimOp::Write(l, _) if hot.contains(&l)))
            .count();
        assert!((inside as f64 / n as f64 - 0.8).abs() < 0.02, "{inside}");
        assert!(Workload::parse("zipf:x").is_err());
        assert!(Workload::parse("hotcold:80").is_err());
        assert!(Workload::parse("mix:seq").is_err());
    }
}
