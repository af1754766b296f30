//! Phase execution: N threads drive one target for a fixed time (or volume of
//! bytes), a monitor samples throughput and write amplification at fixed intervals,
//! reports progress and honours the stop flag (Ctrl-C); plus the SLOG loop of
//! FreeBSD `diskinfo -S` (writes in batches of 250, each followed by a flush).
//!
//! Invariants: a phase stops at its deadline, at its byte budget, on the first IO
//! error or when `stop` is set, and always returns what it measured (marked
//! incomplete when cut short); latencies are measured from just before the call to
//! just after it returns, on every IO of a thread's first `TIME_ALL_FIRST` and
//! then on one IO in `TIME_EVERY` (recorded with that weight): a clock read costs
//! about as much as a tenth of a sluice write, and showed as 7% of a profile.

use super::stats::{Histogram, Latency};
use super::target::{StoreCounters, Target};
use super::workload::{sequential_offset, DataGen, OffsetGen, OpChooser};
use crate::media::AlignedBuf;
use crate::stats::Stats;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receives progress; the CLI draws a progress bar, tests use `Quiet`.
pub trait Observer: Send + Sync {
    /// A phase begins.
    fn phase(&self, _target: &str, _label: &str) {}
    /// `secs` more of the planned run time has passed.
    fn advance(&self, _secs: f64) {}
}

pub struct Quiet;
impl Observer for Quiet {}

pub struct Ctx {
    pub stop: Arc<AtomicBool>,
    pub observer: Arc<dyn Observer>,
    pub seed: u64,
    /// Payload shape: percent of each 4 KiB block that is zeros (fio's
    /// `buffer_compress_percentage`); 0 = random.
    pub compressible: u32,
}

impl Ctx {
    pub fn quiet(seed: u64) -> Ctx {
        Ctx {
            stop: Arc::new(AtomicBool::new(false)),
            observer: Arc::new(Quiet),
            seed,
            compressible: 0,
        }
    }
    pub fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }
    /// Sleep up to `d`, waking early when stopped.
    pub fn sleep(&self, d: Duration) {
        let end = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    RandRead,
    RandWrite,
    /// Random mix with this percentage of reads.
    Mix(u32),
    SeqWrite,
    /// A random write, then a FLUSH, by each thread in turn: each write
    /// counts once its FLUSH returned (the `durable` workload).
    WriteFlush,
}

impl Op {
    pub fn reads(self) -> bool {
        matches!(self, Op::RandRead | Op::Mix(_))
    }
    pub fn writes(self) -> bool {
        !matches!(self, Op::RandRead)
    }
}

#[derive(Clone, Debug)]
pub struct PhaseSpec {
    pub name: String,
    pub op: Op,
    pub block: u64,
    pub threads: usize,
    /// (start, length) in bytes.
    pub region: (u64, u64),
    pub duration: Duration,
    /// Stop after this many bytes (sequential fills).
    pub max_bytes: Option<u64>,
    pub sample_every: Duration,
}

/// One sampling interval.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the phase began, at the end of the interval.
    pub t_s: f64,
    pub seconds: f64,
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub mib_s: f64,
    /// Media bytes / host bytes written in this interval (in-process sluice only).
    pub write_amplification: Option<f64>,
    /// Shorter than the sampling interval (the phase ended inside it).
    pub partial: bool,
    /// The engine's free space, GC and waits in this interval (in-process
    /// sluice only): what bounds a phase, second by second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<SampleEngine>,
}

/// Engine counters over one sampling interval (`Sample::engine`): the free
/// and pending segments at its end, the rest as differences.
#[derive(Clone, Debug, Serialize)]
pub struct SampleEngine {
    pub segments_free: u32,
    pub segments_pending: u32,
    pub host_write_bytes: u64,
    pub media_write_bytes: u64,
    pub gc_runs: u64,
    pub gc_blocks_moved: u64,
    pub gc_bytes_read: u64,
    pub pace_sleeps: u64,
    pub pace_sleep_us: u64,
    pub space_waits: u64,
    pub space_wait_us: u64,
    pub checkpoint_wait_us: u64,
    /// The housekeeper's time reading victims, in reuse barriers and in
    /// checkpoints (barriers and checkpoints may run beside a victim).
    pub hk_gc_read_us: u64,
    pub hk_barrier_us: u64,
    pub hk_checkpoint_us: u64,
    pub reuse_barriers: u64,
    pub checkpoints: u64,
}

impl SampleEngine {
    fn between(a: &Option<Stats>, b: &Option<Stats>) -> Option<Self> {
        let (a, b) = (a.as_ref()?, b.as_ref()?);
        Some(SampleEngine {
            segments_free: b.segments_free,
            segments_pending: b.segments_pending,
            host_write_bytes: b.host_write_bytes.saturating_sub(a.host_write_bytes),
            media_write_bytes: b.media_write_bytes.saturating_sub(a.media_write_bytes),
            gc_runs: b.gc_runs.saturating_sub(a.gc_runs),
            gc_blocks_moved: b.gc_blocks_moved.saturating_sub(a.gc_blocks_moved),
            gc_bytes_read: b.gc_bytes_read.saturating_sub(a.gc_bytes_read),
            pace_sleeps: b.pace_sleeps.saturating_sub(a.pace_sleeps),
            pace_sleep_us: b.pace_sleep_us.saturating_sub(a.pace_sleep_us),
            space_waits: b.space_waits.saturating_sub(a.space_waits),
            space_wait_us: b.space_wait_us.saturating_sub(a.space_wait_us),
            checkpoint_wait_us: b.checkpoint_wait_us.saturating_sub(a.checkpoint_wait_us),
            hk_gc_read_us: b.hk_gc_read_us.saturating_sub(a.hk_gc_read_us),
            hk_barrier_us: b.hk_barrier_us.saturating_sub(a.hk_barrier_us),
            hk_checkpoint_us: b.hk_checkpoint_us.saturating_sub(a.hk_checkpoint_us),
            reuse_barriers: b.reuse_barriers.saturating_sub(a.reuse_barriers),
            checkpoints: b.checkpoints.saturating_sub(a.checkpoints),
        })
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseResult {
    pub name: String,
    pub op: Op,
    pub block_bytes: u64,
    pub threads: usize,
    pub seconds: f64,
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub latency: Latency,
    pub write_amplification: Option<f64>,
    pub samples: Vec<Sample>,
    /// Ran for its whole planned time or byte budget.
    pub complete: bool,
    pub skipped: Option<String>,
    pub error: Option<String>,
    /// CPU time of this process over the phase (every thread: the workload's,
    /// and for an in-process sluice target its writers, housekeeper and reads;
    /// an NBD server's CPU is in its own process and not counted here).
    pub cpu: Option<Cpu>,
    /// `WriteFlush` phases: the FLUSH calls' own latency (`latency` is the
    /// write and its FLUSH together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush_latency: Option<Latency>,
    /// `WriteFlush` phases on an in-process sluice target: what the engine
    /// (and its object store) did for the phase's FLUSHes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable: Option<DurableCounters>,
}

/// The engine's and the store's work over a `WriteFlush` phase (differences
/// of the counters at its ends; they include what background threads did
/// meanwhile: GC, checkpoints, uploads).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DurableCounters {
    /// Writes acknowledged durable (the phase's ops).
    pub writes: u64,
    /// FLUSH calls the engine took (every write's own: equal to `writes`).
    pub host_flushes: u64,
    /// Media flushes: FLUSH groups (group commit: one serves every waiter
    /// whose writes it covers).
    pub media_flushes: u64,
    /// Intent log records written (a FLUSH of a few blocks writes one
    /// instead of sealing its chunk).
    pub log_records: u64,
    /// Chunks sealed (FLUSHes that sealed, full chunks, idle seals, GC).
    pub chunks_sealed: u64,
    /// FLUSHes that waited in the group commit for others' writes.
    pub group_commit_waits: u64,
    /// Writes each media flush covered, on average.
    pub writes_per_media_flush: f64,
    /// The object store's share (`sluice-objects:` targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreDelta>,
}

/// What a volume in an object store asked of the store over a phase.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StoreDelta {
    pub log_puts: u64,
    pub log_puts_per_s: f64,
    /// Mean time of one FLUSH log PUT.
    pub log_put_ms: f64,
    /// Durable writes per FLUSH log object.
    pub writes_per_log_put: f64,
    pub log_bytes: u64,
    pub uploads: u64,
    pub upload_bytes: u64,
    pub gets: u64,
}

impl DurableCounters {
    /// Between two engine snapshots (None without an engine) and two store
    /// snapshots, over `writes` writes in `seconds`.
    pub fn between(
        a: &Option<Stats>,
        b: &Option<Stats>,
        sa: Option<StoreCounters>,
        sb: Option<StoreCounters>,
        writes: u64,
        seconds: f64,
    ) -> Option<DurableCounters> {
        let (a, b) = (a.as_ref()?, b.as_ref()?);
        let media_flushes = b.media_flushes.saturating_sub(a.media_flushes);
        let store = match (sa, sb) {
            (Some(x), Some(y)) => {
                let puts = y.log_puts.saturating_sub(x.log_puts);
                Some(StoreDelta {
                    log_puts: puts,
                    log_puts_per_s: puts as f64 / seconds.max(1e-9),
                    log_put_ms: y.log_put_us.saturating_sub(x.log_put_us) as f64
                        / 1000.0
                        / puts.max(1) as f64,
                    writes_per_log_put: if puts == 0 {
                        0.0
                    } else {
                        writes as f64 / puts as f64
                    },
                    log_bytes: y.log_bytes.saturating_sub(x.log_bytes),
                    uploads: y.uploads.saturating_sub(x.uploads),
                    upload_bytes: y.upload_bytes.saturating_sub(x.upload_bytes),
                    gets: y.gets.saturating_sub(x.gets),
                })
            }
            _ => None,
        };
        Some(DurableCounters {
            writes,
            host_flushes: b.host_flushes.saturating_sub(a.host_flushes),
            media_flushes,
            log_records: b.log_records.saturating_sub(a.log_records),
            chunks_sealed: b.chunks_sealed.saturating_sub(a.chunks_sealed),
            group_commit_waits: b.group_commit_waits.saturating_sub(a.group_commit_waits),
            writes_per_media_flush: if media_flushes == 0 {
                0.0
            } else {
                writes as f64 / media_flushes as f64
            },
            store,
        })
    }
}

/// Process CPU over a phase, from `getrusage(RUSAGE_SELF)` read once at each end
/// (no per-IO clock reads).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Cpu {
    pub user_s: f64,
    pub sys_s: f64,
    /// (user + sys) microseconds per operation of the phase.
    pub us_per_op: f64,
    /// (user + sys) / wall seconds: how many cores the phase kept busy.
    pub cores: f64,
}

/// (user, system) CPU seconds this process has used so far.
pub fn process_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF cannot fail.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

impl Cpu {
    /// CPU used since `start` (a `process_cpu()` reading) by `ops` operations in
    /// `seconds` of wall time.
    pub fn since(start: (f64, f64), ops: u64, seconds: f64) -> Cpu {
        let (u, s) = process_cpu();
        let (user_s, sys_s) = ((u - start.0).max(0.0), (s - start.1).max(0.0));
        Cpu {
            user_s,
            sys_s,
            us_per_op: if ops == 0 {
                0.0
            } else {
                (user_s + sys_s) * 1e6 / ops as f64
            },
            cores: (user_s + sys_s) / seconds.max(1e-9),
        }
    }
}

impl PhaseResult {
    fn empty(spec: &PhaseSpec) -> PhaseResult {
        PhaseResult {
            name: spec.name.clone(),
            op: spec.op,
            block_bytes: spec.block,
            threads: spec.threads,
            seconds: 0.0,
            ops: 0,
            bytes: 0,
            iops: 0.0,
            mib_s: 0.0,
            latency: Latency::default(),
            write_amplification: None,
            samples: vec![],
            complete: false,
            skipped: None,
            error: None,
            cpu: None,
            flush_latency: None,
            durable: None,
        }
    }
    pub fn skipped(spec: &PhaseSpec, why: String) -> PhaseResult {
        let mut r = PhaseResult::empty(spec);
        r.skipped = Some(why);
        r
    }
    pub fn measured(&self) -> bool {
        self.skipped.is_none() && self.ops > 0
    }
}

/// Write amplification between two stats snapshots.
pub fn wa_between(a: &Option<Stats>, b: &Option<Stats>) -> Option<f64> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let host = b.host_write_bytes.saturating_sub(a.host_write_bytes);
    let media = b.media_write_bytes.saturating_sub(a.media_write_bytes);
    (host > 0).then(|| media as f64 / host as f64)
}

/// Can `t` run an IO of `block` bytes at all?
pub fn unsupported(t: &dyn Target, block: u64, region: (u64, u64)) -> Option<String> {
    if block < t.min_io() || !block.is_multiple_of(t.min_io()) {
        return Some(format!(
            "target needs IO in multiples of {} bytes",
            t.min_io()
        ));
    }
    if region.1 < block {
        return Some(format!(
            "region of {} bytes is smaller than one IO",
            region.1
        ));
    }
    None
}

struct Shared<'a> {
    t: &'a dyn Target,
    spec: &'a PhaseSpec,
    seed: u64,
    compressible: u32,
    ops: AtomicU64,
    bytes: AtomicU64,
    cursor: AtomicU64,
    halt: AtomicBool,
    done: AtomicUsize,
    error: Mutex<Option<String>>,
    deadline: Instant,
}

/// A thread times each of its first `TIME_ALL_FIRST` IOs (short phases keep
/// every sample), then one IO in `TIME_EVERY`, recorded with weight
/// `TIME_EVERY`. The deadline is checked and the shared counters are updated at
/// timed IOs only, so an untimed IO reads no clock and writes no shared line.
pub const TIME_ALL_FIRST: u64 = 256;
pub const TIME_EVERY: u64 = 16;

/// One thread of a phase: its latencies, and (`WriteFlush`) its FLUSHes'.
fn worker(sh: &Shared, w: usize) -> (Histogram, Histogram) {
    let spec = sh.spec;
    let block = spec.block as usize;
    let mut h = Histogram::default();
    let mut hf = Histogram::default();
    let flushes = spec.op == Op::WriteFlush;
    let mut wbuf = AlignedBuf::new(if spec.op.writes() { block } else { 0 });
    let mut rbuf = AlignedBuf::new(if spec.op.reads() { block } else { 0 });
    let mut data = DataGen::compressible(sh.seed, w as u64, sh.compressible);
    data.fill(&mut wbuf);
    let mut offs = OffsetGen::new(
        sh.seed ^ ((w as u64 + 1) * 0x2545_F491_4F6C_DD1D),
        spec.region.0,
        spec.region.1,
        spec.block,
    );
    let mut chooser = OpChooser::new(
        sh.seed.wrapping_add(w as u64),
        match spec.op {
            Op::Mix(p) => p,
            Op::RandRead => 100,
            _ => 0,
        },
    );
    let budget_ios = spec.max_bytes.map(|b| b.div_ceil(spec.block));
    // IOs done by this thread, and those not yet added to the shared counters
    let (mut done, mut unposted) = (0u64, 0u64);
    let post = |n: &mut u64| {
        sh.ops.fetch_add(*n, Relaxed);
        sh.bytes.fetch_add(*n * spec.block, Relaxed);
        *n = 0;
    };
    if Instant::now() >= sh.deadline {
        return (h, hf);
    }
    loop {
        if sh.halt.load(Relaxed) {
            break;
        }
        let (read, off) = match spec.op {
            Op::SeqWrite => {
                let i = sh.cursor.fetch_add(1, Relaxed);
                if budget_ios.is_some_and(|b| i >= b) {
                    break;
                }
                (
                    false,
                    sequential_offset(spec.region.0, spec.region.1, spec.block, i),
                )
            }
            _ => {
                let Some(o) = offs.as_mut() else { break };
                (chooser.next_is_read(), o.next_offset())
            }
        };
        if !read {
            data.stamp(&mut wbuf);
        }
        // a durable write (tens of microseconds at least) times every IO
        let weight = if done < TIME_ALL_FIRST || flushes {
            1
        } else if done.is_multiple_of(TIME_EVERY) {
            TIME_EVERY
        } else {
            0
        };
        let t0 = (weight > 0).then(Instant::now);
        let r = if read {
            sh.t.read(off, &mut rbuf)
        } else {
            sh.t.write(off, &wbuf)
        };
        // WriteFlush: the write counts once its FLUSH returned
        let mut flushed = None;
        let r = r.and_then(|_| {
            // MUTANT: durable-write-not-flushed s|if flushes {|if false {|
            if flushes {
                let f0 = Instant::now();
                sh.t.flush().map_err(|e| e.context("the FLUSH after it"))?;
                flushed = Some(f0.elapsed());
            }
            Ok(())
        });
        let t1 = t0.map(|t0| (t0, Instant::now()));
        if let Err(e) = r {
            sh.error.lock().get_or_insert_with(|| {
                format!(
                    "{} of {} bytes at offset {off}: {e:#}",
                    if read { "read" } else { "write" },
                    block
                )
            });
            sh.halt.store(true, Relaxed);
            break;
        }
        if let Some(f) = flushed {
            hf.record(f.as_nanos() as u64);
        }
        done += 1;
        unposted += 1;
        if let Some((t0, t1)) = t1 {
            h.record_weighted((t1 - t0).as_nanos() as u64, weight);
            post(&mut unposted);
            if t1 >= sh.deadline {
                break;
            }
        }
    }
    post(&mut unposted);
    (h, hf)
}

/// A random-write phase on a target that `batches`: one thread keeps the
/// phase's `threads` writes outstanding as one `write_many` call at a time
/// (each write a distinct buffer and offset); every call is timed, its time
/// recorded as the latency of each of its writes.
fn worker_batch(sh: &Shared) -> Histogram {
    let spec = sh.spec;
    let block = spec.block as usize;
    let depth = spec.threads.max(1);
    let mut h = Histogram::default();
    let mut buf = AlignedBuf::new(block * depth);
    let mut data = DataGen::compressible(sh.seed, 0, sh.compressible);
    data.fill(&mut buf);
    let Some(mut offs) = OffsetGen::new(
        sh.seed ^ 0x2545_F491_4F6C_DD1D,
        spec.region.0,
        spec.region.1,
        spec.block,
    ) else {
        return h;
    };
    let mut offsets = vec![0u64; depth];
    loop {
        if sh.halt.load(Relaxed) || Instant::now() >= sh.deadline {
            break;
        }
        for (k, o) in offsets.iter_mut().enumerate() {
            *o = offs.next_offset();
            data.stamp(&mut buf[k * block..(k + 1) * block]);
        }
        let writes: Vec<(u64, &[u8])> = offsets
            .iter()
            .enumerate()
            .map(|(k, &o)| (o, &buf[k * block..(k + 1) * block]))
            .collect();
        let t0 = Instant::now();
        let r = sh.t.write_many(&writes);
        let t1 = Instant::now();
        if let Err(e) = r {
            sh.error
                .lock()
                .get_or_insert_with(|| format!("batch of {depth} writes of {block} bytes: {e:#}"));
            sh.halt.store(true, Relaxed);
            break;
        }
        h.record_weighted((t1 - t0).as_nanos() as u64, depth as u64);
        sh.ops.fetch_add(depth as u64, Relaxed);
        sh.bytes.fetch_add((depth * block) as u64, Relaxed);
    }
    h
}

/// Run one phase on `t`.
pub fn run_phase(t: &dyn Target, spec: &PhaseSpec, ctx: &Ctx) -> PhaseResult {
    if let Some(why) = unsupported(t, spec.block, spec.region) {
        ctx.observer.advance(spec.duration.as_secs_f64());
        return PhaseResult::skipped(spec, why);
    }
    let cpu0 = process_cpu();
    let start = Instant::now();
    let sh = Shared {
        t,
        spec,
        seed: ctx.seed,
        compressible: ctx.compressible,
        ops: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        cursor: AtomicU64::new(0),
        halt: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        error: Mutex::new(None),
        deadline: start + spec.duration,
    };
    // Byte-budgeted phases (the prefill) are not in the planned time the progress
    // bar counts: their `duration` is only a bound, so reporting it would show the
    // bar full before the measured phases start.
    let planned = if spec.max_bytes.is_some() {
        0.0
    } else {
        spec.duration.as_secs_f64()
    };
    let mut reported = 0.0f64;
    let mut samples = Vec::new();
    let stats0 = t.engine_stats();
    let store0 = t.store_counters();
    let threads = spec.threads.max(1);
    // a batching target runs a random-write phase on one thread
    let batch = t.batches() && spec.op == Op::RandWrite;
    let spawned = if batch { 1 } else { threads };
    let hist = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spawned)
            .map(|w| {
                let sh = &sh;
                s.spawn(move || {
                    let h = if batch {
                        (worker_batch(sh), Histogram::default())
                    } else {
                        worker(sh, w)
                    };
                    sh.done.fetch_add(1, Relaxed);
                    h
                })
            })
            .collect();
        let mut last_t = start;
        let (mut last_ops, mut last_bytes) = (0u64, 0u64);
        let mut last_stats = stats0.clone();
        let mut next = start + spec.sample_every;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            if ctx.stopped() {
                sh.halt.store(true, Relaxed);
            }
            let now = Instant::now();
            let el = (now - start).as_secs_f64().min(planned);
            if el > reported {
                ctx.observer.advance(el - reported);
                reported = el;
            }
            let finished = sh.done.load(Relaxed) == spawned;
            if now >= next || finished {
                let (o, b) = (sh.ops.load(Relaxed), sh.bytes.load(Relaxed));
                let secs = (now - last_t).as_secs_f64();
                if secs > 0.0 && (o > last_ops || !finished) {
                    let st = t.engine_stats();
                    let partial = secs < spec.sample_every.as_secs_f64() * 0.95;
                    samples.push(Sample {
                        t_s: (now - start).as_secs_f64(),
                        seconds: secs,
                        ops: o - last_ops,
                        bytes: b - last_bytes,
                        iops: (o - last_ops) as f64 / secs,
                        mib_s: (b - last_bytes) as f64 / secs / (1 << 20) as f64,
                        // a sliver at the end mostly holds the final seal: no WA
                        write_amplification: if partial {
                            None
                        } else {
                            wa_between(&last_stats, &st)
                        },
                        partial,
                        engine: SampleEngine::between(&last_stats, &st),
                    });
                    last_stats = st;
                }
                last_t = now;
                last_ops = o;
                last_bytes = b;
                next += spec.sample_every;
                while next <= now {
                    next += spec.sample_every;
                }
            }
            if finished {
                break;
            }
        }
        let (mut all, mut all_flush) = (Histogram::default(), Histogram::default());
        for h in handles {
            if let Ok((h, hf)) = h.join() {
                all.merge(&h);
                all_flush.merge(&hf);
            }
        }
        (all, all_flush)
    });
    let (hist, flush_hist) = hist;
    let seconds = start.elapsed().as_secs_f64();
    if planned > reported {
        ctx.observer.advance(planned - reported);
    }
    let ops = sh.ops.load(Relaxed);
    let bytes = sh.bytes.load(Relaxed);
    let error = sh.error.lock().clone();
    let budget_done = spec.max_bytes.is_some_and(|b| bytes >= b);
    let complete = error.is_none()
        && !ctx.stopped()
        && (budget_done || seconds >= spec.duration.as_secs_f64() * 0.999);
    let stats1 = t.engine_stats();
    let durable = (spec.op == Op::WriteFlush)
        .then(|| {
            DurableCounters::between(&stats0, &stats1, store0, t.store_counters(), ops, seconds)
        })
        .flatten();
    PhaseResult {
        name: spec.name.clone(),
        op: spec.op,
        block_bytes: spec.block,
        threads,
        seconds,
        ops,
        bytes,
        iops: ops as f64 / seconds.max(1e-9),
        mib_s: bytes as f64 / seconds.max(1e-9) / (1 << 20) as f64,
        latency: Latency::from_histogram(&hist),
        write_amplification: wa_between(&stats0, &stats1),
        samples,
        complete,
        skipped: None,
        error,
        cpu: Some(Cpu::since(cpu0, ops, seconds)),
        flush_latency: (spec.op == Op::WriteFlush).then(|| Latency::from_histogram(&flush_hist)),
        durable,
    }
}

/// SLOG settings (FreeBSD diskinfo -S).
#[derive(Clone, Debug, Serialize)]
pub struct SlogSpec {
    pub block: u64,
    pub region: (u64, u64),
    /// Writes per batch (250).
    pub batch: u64,
    /// Batches repeat until this much time has passed (1 s).
    pub min_seconds: f64,
    /// Pause after the pre-size flush (1 s).
    pub settle: Duration,
    /// Split writes above 128 KiB into 128 KiB pieces issued in parallel.
    pub split: bool,
}

pub const SLOG_PIECE: u64 = 128 << 10;

/// One SLOG size: writes to random size-aligned offsets, each followed by a flush.
pub fn run_slog(t: &dyn Target, spec: &SlogSpec, ctx: &Ctx) -> PhaseResult {
    let pspec = PhaseSpec {
        name: "slog".into(),
        op: Op::RandWrite,
        block: spec.block,
        threads: 1,
        region: spec.region,
        duration: Duration::from_secs_f64(spec.min_seconds),
        max_bytes: None,
        sample_every: Duration::from_secs(1),
    };
    let planned = spec.min_seconds + spec.settle.as_secs_f64();
    if let Some(why) = unsupported(t, spec.block, spec.region) {
        ctx.observer.advance(planned);
        return PhaseResult::skipped(&pspec, why);
    }
    let mut res = PhaseResult::empty(&pspec);
    // sync; sleep 1; sync; sync
    let pre = t.flush().and_then(|_| {
        ctx.sleep(spec.settle);
        t.flush()?;
        t.flush()
    });
    ctx.observer.advance(spec.settle.as_secs_f64());
    if let Err(e) = pre {
        res.error = Some(format!("flush before the run: {e:#}"));
        return res;
    }
    let pieces = if spec.split && spec.block > SLOG_PIECE {
        (spec.block / SLOG_PIECE) as usize
    } else {
        1
    };
    let piece_len = spec.block / pieces as u64;
    let mut offs = OffsetGen::new(
        ctx.seed ^ spec.block,
        spec.region.0,
        spec.region.1,
        spec.block,
    )
    .expect("region checked above");
    let mut hist = Histogram::default();
    let mut ops = 0u64;
    let mut error = None;
    let cpu0 = process_cpu();
    let start = Instant::now();
    let mut reported = 0.0;
    std::thread::scope(|s| {
        // Helper threads write pieces 0..pieces-1 in parallel (as diskinfo's aio);
        // the caller writes the last piece itself, then waits for the others.
        let (job_tx, job_rx) = std::sync::mpsc::channel::<u64>();
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        for h in 0..pieces.saturating_sub(1) {
            let (rx, tx) = (job_rx.clone(), done_tx.clone());
            let (seed, pct) = (ctx.seed, ctx.compressible);
            s.spawn(move || {
                let mut buf = AlignedBuf::new(piece_len as usize);
                let mut g = DataGen::compressible(seed, 1000 + h as u64, pct);
                g.fill(&mut buf);
                loop {
                    let job = rx
                        .lock()
                        .map_err(|_| ())
                        .and_then(|r| r.recv().map_err(|_| ()));
                    let Ok(off) = job else { return };
                    g.stamp(&mut buf);
                    let r = t.write(off, &buf).map_err(|e| format!("{e:#}"));
                    if tx.send(r).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        let mut buf = AlignedBuf::new(piece_len as usize);
        let mut g = DataGen::compressible(ctx.seed, 999, ctx.compressible);
        g.fill(&mut buf);
        'outer: loop {
            for _ in 0..spec.batch.max(1) {
                if ctx.stopped() {
                    break 'outer;
                }
                let off = offs.next_offset();
                g.stamp(&mut buf);
                let t0 = Instant::now();
                for p in 0..pieces as u64 - 1 {
                    let _ = job_tx.send(off + p * piece_len);
                }
                let mut r = t
                    .write(off + (pieces as u64 - 1) * piece_len, &buf)
                    .map_err(|e| format!("{e:#}"));
                for _ in 0..pieces - 1 {
                    match done_rx.recv() {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => r = Err(e),
                        Err(_) => r = Err("helper thread ended".into()),
                    }
                }
                let r = r.and_then(|_| t.flush().map_err(|e| format!("flush: {e:#}")));
                if let Err(e) = r {
                    error = Some(format!("write of {} bytes at {off}: {e}", spec.block));
                    break 'outer;
                }
                hist.record(t0.elapsed().as_nanos() as u64);
                ops += 1;
                let el = start.elapsed().as_secs_f64().min(spec.min_seconds);
                if el > reported {
                    ctx.observer.advance(el - reported);
                    reported = el;
                }
            }
            if start.elapsed().as_secs_f64() >= spec.min_seconds {
                break;
            }
        }
        drop(job_tx);
    });
    if spec.min_seconds > reported {
        ctx.observer.advance(spec.min_seconds - reported);
    }
    let seconds = start.elapsed().as_secs_f64();
    res.seconds = seconds;
    res.ops = ops;
    res.bytes = ops * spec.block;
    res.iops = ops as f64 / seconds.max(1e-9);
    res.mib_s = res.bytes as f64 / seconds.max(1e-9) / (1 << 20) as f64;
    res.latency = Latency::from_histogram(&hist);
    res.complete = error.is_none() && !ctx.stopped();
    res.error = error;
    res.cpu = Some(Cpu::since(cpu0, ops, seconds));
    res
}
