//! `sluice bench`: the seeds' test programs run on sluice and on its peers.
//! This module owns the workload plans (which phases a workload runs, in what
//! order, with which defaults) and the result model; `run` executes phases,
//! `report` and `plot` present them, `target` / `nbd_client` reach the devices.
//!
//! Invariant: every workload runs the same phases, with the same seeds, on every
//! target, so results are comparable side by side; a run cut short (Ctrl-C or an IO
//! error) still returns every phase measured so far, marked as such.

pub mod nbd_client;
pub mod plot;
pub mod report;
pub mod run;
pub mod stats;
pub mod target;
pub mod workload;

use self::run::{run_phase, run_slog, wa_between, Ctx, Op, PhaseResult, PhaseSpec, SlogSpec};
use self::stats::{normalise_70_30, steady_state, SteadyState};
use self::target::Target;
use crate::stats::Stats;
use serde::Serialize;
use std::time::Duration;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// SuperCharger grid: random read and write, sizes x threads.
    Grid,
    /// FreeBSD diskinfo -S: growing writes, each followed by a flush.
    Slog,
    /// Iometer sustained 4 KiB random write, sampled per interval.
    Steady,
    /// 70/30 random read/write at 4 KiB, and the seeds' normalisation.
    Mix,
    /// 4 KiB random write (QD 32) against 1 MiB sequential write (QD 1).
    Ceiling,
    /// Write the region once, sequentially, with 1 MiB random data.
    Fill,
    /// Durable random writes: each of N threads does a 4 KiB random write
    /// then a FLUSH, over and over (fio's `--fsync=1` per job, issue 21's
    /// "32 outstanding, durable"); one phase per `--threads` count.
    Durable,
}

impl Workload {
    pub fn parse(s: &str) -> Result<Workload, String> {
        Ok(match s {
            "grid" => Workload::Grid,
            "slog" => Workload::Slog,
            "steady" => Workload::Steady,
            "mix" => Workload::Mix,
            "ceiling" => Workload::Ceiling,
            "fill" => Workload::Fill,
            "durable" => Workload::Durable,
            _ => {
                return Err(format!(
                    "unknown workload {s:?} (grid, slog, steady, mix, ceiling, fill, durable)"
                ))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Workload::Grid => "grid",
            Workload::Slog => "slog",
            Workload::Steady => "steady",
            Workload::Mix => "mix",
            Workload::Ceiling => "ceiling",
            Workload::Fill => "fill",
            Workload::Durable => "durable",
        }
    }
    pub fn writes(self) -> bool {
        true // every workload writes (reads need a prefilled region)
    }
}

/// Everything that shapes a run (recorded in the JSON).
#[derive(Clone, Debug, Serialize)]
pub struct BenchConfig {
    pub workload: Workload,
    /// Sample region: offsets [0, region) of each target (clamped to its size).
    pub region_bytes: u64,
    /// Block sizes (grid, slog).
    pub sizes: Vec<u64>,
    /// Thread counts = queue depths (grid uses all; others the first).
    pub threads: Vec<usize>,
    /// Seconds per phase or grid cell (slog: minimum per size).
    pub seconds: f64,
    /// Steady: total duration and sampling interval.
    pub duration_s: f64,
    pub interval_s: f64,
    /// Mix: read share in percent.
    pub read_pct: u32,
    /// Write the region before read tests so reads hit real data.
    pub prefill: bool,
    pub slog_batch: u64,
    pub slog_settle_s: f64,
    pub slog_split: bool,
    pub seed: u64,
    /// Percent of each 4 KiB block written as zeros after a random head (fio's
    /// `buffer_compress_percentage` with `buffer_compress_chunk=4k`); 0 = random.
    pub compressible: u32,
}

impl BenchConfig {
    /// The seeds' defaults for `w`.
    pub fn defaults(w: Workload) -> BenchConfig {
        let mut c = BenchConfig {
            workload: w,
            region_bytes: 4 << 30,
            sizes: vec![],
            threads: vec![32],
            seconds: 20.0,
            duration_s: 80.0 * 60.0,
            interval_s: 60.0,
            read_pct: 70,
            prefill: true,
            slog_batch: 250,
            slog_settle_s: 1.0,
            slog_split: true,
            seed: 0x51_u64 << 32 | 0xCE,
            compressible: 0,
        };
        match w {
            Workload::Grid => {
                c.sizes = workload::grid_sizes();
                c.threads = workload::GRID_THREADS.to_vec();
                c.seconds = 1.0;
            }
            Workload::Slog => {
                c.sizes = workload::slog_sizes(512);
                c.threads = vec![1];
                c.seconds = 1.0;
                c.prefill = false;
            }
            Workload::Steady => {
                c.sizes = vec![4096];
                c.prefill = false;
            }
            Workload::Mix => c.sizes = vec![4096],
            Workload::Ceiling => {
                c.sizes = vec![4096, 1 << 20];
                c.prefill = false;
            }
            Workload::Fill => {
                c.sizes = vec![1 << 20];
                c.threads = vec![4];
                c.prefill = false;
            }
            Workload::Durable => {
                c.sizes = vec![4096];
                c.prefill = false;
            }
        }
        c
    }

    fn depth(&self) -> usize {
        self.threads.first().copied().unwrap_or(1).max(1)
    }

    /// Planned seconds per target (for the progress bar's ETA), prefill excluded.
    pub fn planned_seconds(&self) -> f64 {
        match self.workload {
            Workload::Grid => (self.sizes.len() * self.threads.len() * 2) as f64 * self.seconds,
            Workload::Slog => self.sizes.len() as f64 * (self.seconds + self.slog_settle_s),
            Workload::Steady => self.duration_s,
            Workload::Mix => 3.0 * self.seconds,
            Workload::Ceiling => 2.0 * self.seconds,
            Workload::Fill => 0.0,
            Workload::Durable => self.threads.len() as f64 * self.seconds,
        }
    }
}

/// Summary of a mix run.
#[derive(Clone, Debug, Serialize)]
pub struct MixSummary {
    pub read_iops: f64,
    pub write_iops: f64,
    pub mixed_iops: f64,
    /// R / (0.7 + 0.3 R / W) from the separate read and write results.
    pub normalised_iops: Option<f64>,
}

/// Summary of a ceiling run.
#[derive(Clone, Debug, Serialize)]
pub struct CeilingSummary {
    pub seq_write_mib_s: f64,
    pub rand_write_iops: f64,
    pub rand_write_mib_s: f64,
    /// Random 4 KiB write MiB/s over this target's own 1 MiB sequential MiB/s.
    pub rand_over_own_seq: f64,
}

/// Everything measured on one target.
#[derive(Clone, Debug, Serialize)]
pub struct TargetRun {
    pub target: String,
    pub description: String,
    pub size_bytes: u64,
    pub region_bytes: u64,
    pub prefill: Option<PhaseResult>,
    pub phases: Vec<PhaseResult>,
    pub steady_state: Option<SteadyState>,
    pub mix: Option<MixSummary>,
    pub ceiling: Option<CeilingSummary>,
    pub stats_before: Option<Stats>,
    pub stats_after: Option<Stats>,
    /// Over the whole run (in-process sluice only).
    pub write_amplification: Option<f64>,
    /// Host requests in front and media writes behind over the whole run
    /// (in-process sluice only): random in front, sequential behind.
    pub access_pattern: Option<AccessPattern>,
    pub error: Option<String>,
}

/// The access pattern a run caused, front and back (see `metrics::pattern`).
#[derive(Clone, Debug, Serialize)]
pub struct AccessPattern {
    pub host: crate::metrics::pattern::PatternSnapshot,
    pub media: crate::metrics::pattern::PatternSnapshot,
}

impl TargetRun {
    pub fn find(&self, name: &str, block: u64, threads: usize) -> Option<&PhaseResult> {
        self.phases
            .iter()
            .find(|p| p.name == name && p.block_bytes == block && p.threads == threads)
    }
}

/// A whole `sluice bench` invocation.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub workload: Workload,
    pub config: BenchConfig,
    pub started_unix_s: u64,
    pub interrupted: bool,
    pub targets: Vec<TargetRun>,
}

impl Report {
    pub fn new(cfg: &BenchConfig) -> Report {
        Report {
            workload: cfg.workload,
            config: cfg.clone(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            interrupted: false,
            targets: vec![],
        }
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Write `region` once with 1 MiB sequential random data (the grid's and mix's
/// prefill, and the `fill` workload).
pub fn fill(t: &dyn Target, region: (u64, u64), threads: usize, ctx: &Ctx) -> PhaseResult {
    let block = (1u64 << 20).min(region.1 / 4096 * 4096).max(4096);
    let spec = PhaseSpec {
        name: "fill".into(),
        op: Op::SeqWrite,
        block,
        threads,
        region,
        duration: Duration::from_secs(24 * 3600),
        max_bytes: Some(region.1 / block * block),
        sample_every: Duration::from_secs(1),
    };
    let mut r = run_phase(t, &spec, ctx);
    if r.error.is_none() {
        if let Err(e) = t.flush() {
            r.error = Some(format!("flush after fill: {e:#}"));
        }
    }
    r
}

/// Run the configured workload on one open target.
pub fn run_target(cfg: &BenchConfig, label: &str, t: &dyn Target, ctx: &Ctx) -> TargetRun {
    let region = (0, cfg.region_bytes.min(t.size()) / 4096 * 4096);
    let stats_before = t.engine_stats();
    let mut out = TargetRun {
        target: label.to_string(),
        description: t.describe(),
        size_bytes: t.size(),
        region_bytes: region.1,
        prefill: None,
        phases: vec![],
        steady_state: None,
        mix: None,
        ceiling: None,
        stats_before: stats_before.clone(),
        stats_after: None,
        write_amplification: None,
        access_pattern: None,
        error: None,
    };
    let pattern_before = crate::metrics::get()
        .filter(|_| stats_before.is_some())
        .map(|m| (m.host.snapshot(), m.media.snapshot()));
    let sample = secs(cfg.seconds.clamp(0.05, 1.0));
    let phase = |name: &str, op: Op, block: u64, threads: usize, dur: f64| PhaseSpec {
        name: name.into(),
        op,
        block,
        threads,
        region,
        duration: secs(dur),
        max_bytes: None,
        sample_every: sample,
    };
    let mut plan: Vec<PhaseSpec> = vec![];
    match cfg.workload {
        Workload::Grid => {
            for (name, op) in [("randread", Op::RandRead), ("randwrite", Op::RandWrite)] {
                for &b in &cfg.sizes {
                    for &th in &cfg.threads {
                        plan.push(phase(name, op, b, th, cfg.seconds));
                    }
                }
            }
        }
        Workload::Steady => {
            let mut p = phase("steady", Op::RandWrite, 4096, cfg.depth(), cfg.duration_s);
            p.sample_every = secs(cfg.interval_s.max(0.05));
            plan.push(p);
        }
        Workload::Mix => {
            let d = cfg.depth();
            plan.push(phase("randread", Op::RandRead, 4096, d, cfg.seconds));
            plan.push(phase("randwrite", Op::RandWrite, 4096, d, cfg.seconds));
            plan.push(phase("mix", Op::Mix(cfg.read_pct), 4096, d, cfg.seconds));
        }
        Workload::Ceiling => {
            plan.push(phase(
                "randwrite",
                Op::RandWrite,
                4096,
                cfg.depth(),
                cfg.seconds,
            ));
            plan.push(phase("seqwrite", Op::SeqWrite, 1 << 20, 1, cfg.seconds));
        }
        Workload::Durable => {
            let block = cfg.sizes.first().copied().unwrap_or(4096);
            for &th in &cfg.threads {
                plan.push(phase("durable", Op::WriteFlush, block, th, cfg.seconds));
            }
        }
        Workload::Slog | Workload::Fill => {}
    }
    if cfg.prefill && !ctx.stopped() {
        ctx.observer
            .phase(label, "prefill (sequential 1 MiB writes over the region)");
        let r = fill(t, region, 4, ctx);
        let failed = r.error.clone();
        out.prefill = Some(r);
        if let Some(e) = failed {
            out.error = Some(format!("prefill: {e}"));
        }
    }
    match cfg.workload {
        Workload::Fill if out.error.is_none() => {
            ctx.observer.phase(label, "fill");
            let r = fill(t, region, cfg.depth(), ctx);
            out.error = r.error.clone();
            out.phases.push(r);
        }
        Workload::Slog => {
            for &b in &cfg.sizes {
                if ctx.stopped() || out.error.is_some() {
                    break;
                }
                ctx.observer
                    .phase(label, &format!("slog {}", report::size_label(b)));
                let r = run_slog(
                    t,
                    &SlogSpec {
                        block: b,
                        region,
                        batch: cfg.slog_batch,
                        min_seconds: cfg.seconds,
                        settle: secs(cfg.slog_settle_s),
                        split: cfg.slog_split,
                    },
                    ctx,
                );
                out.error = r.error.clone();
                out.phases.push(r);
            }
        }
        _ => {
            for p in &plan {
                if ctx.stopped() || out.error.is_some() {
                    break;
                }
                ctx.observer.phase(
                    label,
                    &format!("{} {} x{}", p.name, report::size_label(p.block), p.threads),
                );
                let r = run_phase(t, p, ctx);
                out.error = r.error.clone();
                out.phases.push(r);
            }
        }
    }
    if let Some(p) = out.phases.iter().find(|p| p.name == "steady") {
        let ys: Vec<f64> = p
            .samples
            .iter()
            .filter(|s| !s.partial)
            .map(|s| s.iops)
            .collect();
        out.steady_state = Some(steady_state(&ys));
    }
    if cfg.workload == Workload::Mix {
        let get = |n: &str| out.phases.iter().find(|p| p.name == n && p.measured());
        if let (Some(r), Some(w), Some(m)) = (get("randread"), get("randwrite"), get("mix")) {
            out.mix = Some(MixSummary {
                read_iops: r.iops,
                write_iops: w.iops,
                mixed_iops: m.iops,
                normalised_iops: normalise_70_30(r.iops, w.iops),
            });
        }
    }
    if cfg.workload == Workload::Ceiling {
        let get = |n: &str| out.phases.iter().find(|p| p.name == n && p.measured());
        if let (Some(r), Some(s)) = (get("randwrite"), get("seqwrite")) {
            out.ceiling = Some(CeilingSummary {
                seq_write_mib_s: s.mib_s,
                rand_write_iops: r.iops,
                rand_write_mib_s: r.mib_s,
                rand_over_own_seq: r.mib_s / s.mib_s.max(1e-9),
            });
        }
    }
    out.stats_after = t.engine_stats();
    out.write_amplification = wa_between(&stats_before, &out.stats_after);
    if let (Some((h0, m0)), Some(m)) = (pattern_before, crate::metrics::get()) {
        out.access_pattern = Some(AccessPattern {
            host: m.host.snapshot().since(&h0),
            media: m.media.snapshot().since(&m0),
        });
    }
    out
}
