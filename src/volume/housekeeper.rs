//! Housekeeper stage: the only code that runs GC, reuse barriers and
//! checkpoints. It asks the engine for plans (victim relocations, segments to
//! free, checkpoint images) and hands their IO to the commit stage.
//!
//! Who runs it: the housekeeper thread in background mode; `Volume::
//! housekeeper_step` (tests drive it); `Volume::checkpoint`, `gc_until_free`
//! and `close`; and in deterministic mode (no threads) the request thread
//! itself, inline, where the housekeeper thread would have been woken. Every one
//! of them holds `round` for the whole round, so housekeeping is never concurrent
//! with itself, but for one thing: during a clean-ahead the IO of a planned
//! barrier or checkpoint (`Tail`) runs on a scoped helper thread beside the
//! next victim's read and relocation (deterministic mode: right after that
//! victim), one tail at a time, joined before the next barrier or checkpoint
//! is planned and before the clean-ahead returns.
//!
//! Request threads meet the housekeeper only through credit:
//! - hard credit: an append that finds no free segment beyond the reserve waits
//!   for a housekeeper round (`wait_for_space`) instead of cleaning itself;
//! - pacing: while free segments are below the clean-ahead mark, each append
//!   batch waits for a slot from a rate that follows what GC frees per second
//!   of the housekeeper's busy time (`pace`, `GcClock`), so
//!   waiting is spread thinly over every write instead of stalling a few; a
//!   writer that sleeps pays for a quantum of slots at once and spends that
//!   credit on its next appends (one sleep per few 4 KiB writes);
//! - the log written since the last checkpoint is bounded: past twice the
//!   interval, writers wait for the housekeeper's checkpoint.
//!
//! Invariants: a segment goes Pending -> Free only in `barrier`, after the
//! superblock records a durable point covering every chunk that emptied it and
//! its first block is wiped (and flushed); the rest of it may then be discarded,
//! never its first block, before it is Free; a checkpoint is made current only after every chunk
//! it reflects is durable.

use super::core::RelocateError;
use super::{gcread, Shared};
use crate::checkpoint;
use crate::error::{Error, Result};
use crate::format::checkpoint::Lifetime;
use crate::format::BLOCK_BYTES;
use crate::gc;
use crate::media::AlignedBuf;
use crate::segments::SegState;
use crate::stats::Counters;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most free segments one pass gives back: bounds the time a housekeeping
/// round spends in discard calls (after a mass trim, or the first passes after
/// a mount, which cannot know what was given back already, a pass may find
/// thousands of candidates).
const DISCARD_BATCH: usize = 64;

/// Pacing: a slot less than this far ahead is taken without sleeping.
const PACE_SLEEP_MIN_NS: u64 = 20_000;
/// Pacing: a thread that sleeps pays for at least this much of the admitted
/// rate at once (`Housekeeper::pace`). With 32 writers the sleep is then
/// about 32 quanta (~1 ms) once per quantum's blocks, instead of 32 slots
/// every write; below ~30K blocks/s a block's slot alone is longer.
const PACE_QUANTUM_NS: u64 = 32_000;
/// Pacing: most blocks one sleep pays for ahead.
const PACE_PREPAY_MAX: u64 = 16;

/// `PACE_QUANTUM_NS`, or `SLUICE_PACE_QUANTUM_US` (microseconds; 0: one
/// sleep per append batch, as before issue 22's change) for measurements.
fn pace_quantum_ns() -> u64 {
    static Q: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *Q.get_or_init(|| {
        std::env::var("SLUICE_PACE_QUANTUM_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(PACE_QUANTUM_NS, |us| us.min(10_000) * 1000)
    })
}

/// `SLUICE_PACE_OFF=1`: no pacing at all, writers meet the housekeeper only
/// through hard credit and the checkpoint bound (measurements only: what
/// the pacer costs or saves, issue 22).
fn pace_off() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| std::env::var("SLUICE_PACE_OFF").is_ok_and(|v| v == "1"))
}

/// `SLUICE_HK_SERIAL=1`: barriers and checkpoints run in series with GC
/// again, as before issue 22's overlap (A/B in one build; measurements only).
fn hk_serial() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| std::env::var("SLUICE_HK_SERIAL").is_ok_and(|v| v == "1"))
}

/// Pending segments that make a reuse barrier worth its cost while free
/// segments are not short (`Shared::needs_barrier`). Each barrier drains the
/// write queue and makes three media flushes (4 counted: the superblock's
/// write is two) on the housekeeper's thread, between victims.
const BARRIER_BATCH: u32 = 8;

thread_local! {
    /// Blocks this thread paid for ahead in its last pacing sleep, and the
    /// pacer (its `Housekeeper`'s address) they were paid to. Spent by the
    /// thread's next appends to that volume; worth at most
    /// `PACE_PREPAY_MAX` blocks, so a stale entry (another volume at a
    /// reused address) lets at most that many blocks by unpaced.
    static PREPAID: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The IO of a reuse barrier or a checkpoint after its plan (made under the
/// engine lock by the housekeeper): what may run beside the next victim
/// (`Shared::clean_ahead`). Owned by whichever thread runs it; its effects
/// on shared state are the commit stage's (queue, flushes, superblock,
/// wipes) and, for a barrier, the release of exactly `segs`.
enum Tail {
    /// Make every chunk below `target` durable (the plan queued the chunks
    /// it sealed), record that in the superblock, wipe `segs`, release them.
    Barrier {
        target: u64,
        segs: Vec<u32>,
        kill_lsn: u64,
    },
    /// Make every chunk below `next_seq` durable (the plan queued the chunks
    /// it sealed), write `img` to the other slot and make it current.
    Checkpoint {
        img: AlignedBuf,
        next_seq: u64,
        uuid: [u8; 16],
        lsn: u64,
        clean: bool,
    },
}

/// Where a clean-ahead's tail runs: a scoped helper thread (background
/// mode), or deferred to after the next victim (deterministic mode).
struct Side<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    threaded: bool,
    running: Option<std::thread::ScopedJoinHandle<'scope, Result<()>>>,
    deferred: Option<Tail>,
}

/// GC's freeing rate is measured over the housekeeper's busy time, the
/// time from one victim to the next less the waits between rounds: what GC
/// can free per second while it works, not what writers' demand asked of it.
/// (Measured over wall time, a GC that keeps up measures the rate writers
/// wrote at, which pacing itself sets: the pacer then admitted its own last
/// rate, and a GC that started after an idle spell measured a few blocks
/// over that whole spell; issue 22, docs/benchmarks.md.)
#[derive(Default)]
struct GcClock {
    /// When the last freeing was accounted (ns since `started`).
    last_ns: u64,
    /// Idle since (between rounds), and idle time since `last_ns`.
    idle_from: Option<u64>,
    idle_ns: u64,
    /// Blocks freed and busy time of the window not yet in the rate.
    win_blocks: u64,
    win_busy_ns: u64,
}

/// Busy time a window of the GC rate spans before it is folded in.
const GC_RATE_WINDOW_NS: u64 = 50_000_000;

#[derive(Default)]
struct Wake {
    stop: bool,
    /// A request thread asked for a round (below the clean-ahead mark, out of
    /// space, or the checkpoint is due).
    wanted: bool,
}

/// Rounds the housekeeper started and finished, for request threads waiting on
/// credit: a waiter needs a round that started after it registered.
#[derive(Default)]
struct Credit {
    started: u64,
    done: u64,
    /// Last round whose foreground clean found no space to reclaim.
    nospace: u64,
    /// Reuse barriers that handed segments back to the free list.
    released: u64,
    /// Request threads waiting for space.
    waiting: u32,
    /// Checkpoints written (request threads bounded by the replay window wait
    /// for the next one).
    checkpoints: u64,
}

pub(in crate::volume) struct Housekeeper {
    /// Held for one whole round of housekeeping (GC, barrier, checkpoint).
    round: Mutex<()>,
    wake: Mutex<Wake>,
    wake_cv: Condvar,
    credit: Mutex<Credit>,
    credit_cv: Condvar,
    /// Pacing: the next free slot (ns since `started`) and the admitted rate in
    /// host blocks per second (0: unpaced).
    next_slot_ns: AtomicU64,
    rate_bits: AtomicU64,
    /// The housekeeper's busy time and what GC freed in it, for the rate.
    gc_clock: Mutex<GcClock>,
    /// Segments beyond the reserve the housekeeper keeps free (or pending).
    pub clean_mark: u32,
    pub reserve: u32,
    segment_blocks: u32,
    pub checkpoint_interval: u64,
    /// When the last host write was accepted (ms since `started`), for idle GC.
    last_write_ms: AtomicU64,
    started: Instant,
    /// A background housekeeper thread runs (else request threads do its work inline).
    threaded: bool,
    /// The buffer GC reads a victim into, kept between runs (a fresh zeroed
    /// segment-sized buffer per victim was 1.5% of a write profile). Taken
    /// only by `gc_one`, which runs under `round`; a leaf lock.
    victim_buf: Mutex<Option<AlignedBuf>>,
    /// The checkpoint image buffer, kept between checkpoints (a fresh zeroed
    /// slot-sized buffer per checkpoint was most of a 4 KiB write run's page
    /// faults, issue 22). Taken by `plan_checkpoint`, given back by
    /// `checkpoint_tail` once the slot is written; one checkpoint at a time
    /// (plans run under `round`, a tail is joined before the next plan). A
    /// leaf lock.
    image_buf: Mutex<Option<AlignedBuf>>,
    /// Checkpoint image buffers allocated (stays 1 while the kept one serves).
    image_allocs: AtomicU64,
    /// Victims in a row whose live-run plan fell back to a whole read
    /// (`gcread::read_victim` skips the header walk while they pile up).
    gc_plan_misses: std::sync::atomic::AtomicU32,
}

impl Housekeeper {
    pub fn new(
        reserve: u32,
        clean_mark: u32,
        segment_blocks: u32,
        checkpoint_interval: u64,
        threaded: bool,
    ) -> Self {
        Housekeeper {
            round: Mutex::new(()),
            wake: Mutex::new(Wake::default()),
            wake_cv: Condvar::new(),
            credit: Mutex::new(Credit::default()),
            credit_cv: Condvar::new(),
            next_slot_ns: AtomicU64::new(0),
            rate_bits: AtomicU64::new(0),
            gc_clock: Mutex::new(GcClock {
                idle_from: Some(0),
                ..GcClock::default()
            }),
            clean_mark,
            reserve,
            segment_blocks,
            checkpoint_interval,
            last_write_ms: AtomicU64::new(0),
            started: Instant::now(),
            threaded,
            victim_buf: Mutex::new(None),
            image_buf: Mutex::new(None),
            image_allocs: AtomicU64::new(0),
            gc_plan_misses: std::sync::atomic::AtomicU32::new(0),
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Ask the housekeeper thread for a round (no-op once one is asked for).
    pub fn wake(&self) {
        let mut w = self.wake.lock();
        if !w.wanted {
            w.wanted = true;
            self.wake_cv.notify_one();
        }
    }

    /// Ask for a round and wake the thread even if a round was already asked
    /// for (a request thread waits on it).
    fn wake_now(&self) {
        self.wake.lock().wanted = true;
        self.wake_cv.notify_one();
    }

    pub fn stop(&self) {
        self.wake.lock().stop = true;
        self.wake_cv.notify_all();
        self.credit_cv.notify_all();
    }

    fn stopping(&self) -> bool {
        self.wake.lock().stop
    }

    pub fn note_write(&self) {
        self.last_write_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// A housekeeping round begins (`now`: ns since `started`): the time
    /// since the last round ended was idle, not GC's.
    fn round_begin_at(&self, now: u64) {
        let mut c = self.gc_clock.lock();
        if let Some(i) = c.idle_from.take() {
            // MUTANT: gc-rate-wall-clock s|c.idle_ns += now.saturating_sub(i);|c.idle_ns += 0 * i;|
            c.idle_ns += now.saturating_sub(i);
        }
    }

    /// A housekeeping round ended: idle from `now` until the next begins.
    fn round_end_at(&self, now: u64) {
        self.gc_clock.lock().idle_from = Some(now);
    }

    /// GC freed `blocks` net at `now`. The rate (blocks per second of the
    /// housekeeper's busy time, `GcClock`) is folded in once a window spans
    /// 50 ms of busy time, averaged over the last ~second of it.
    fn note_freed_at(&self, blocks: u64, now: u64) {
        let mut c = self.gc_clock.lock();
        let busy = now.saturating_sub(c.last_ns).saturating_sub(c.idle_ns);
        c.last_ns = now;
        c.idle_ns = 0;
        c.win_blocks += blocks;
        c.win_busy_ns += busy;
        if c.win_busy_ns >= GC_RATE_WINDOW_NS {
            let dt = c.win_busy_ns as f64 / 1e9;
            let r = c.win_blocks as f64 / dt;
            let old = f64::from_bits(self.rate_bits.load(Ordering::Relaxed));
            let w = dt.min(1.0);
            let new = if old > 0.0 { old + (r - old) * w } else { r };
            self.rate_bits.store(new.to_bits(), Ordering::Relaxed);
            (c.win_blocks, c.win_busy_ns) = (0, 0);
        }
    }

    fn note_freed(&self, blocks: u64) {
        self.note_freed_at(blocks, self.now_ns());
    }

    /// Pacing (background mode): below the clean-ahead mark (`level` free or
    /// pending segments beyond the reserve), wait for `blocks` slots at a rate
    /// of the GC's measured freeing rate (per second of the housekeeper's busy
    /// time, `GcClock`) scaled by how full the reservoir is
    /// (`headroom` blocks of the mark's): balance at half the mark, slower
    /// below it. The scale follows headroom block by block, so the admitted
    /// rate moves smoothly instead of in steps of a segment.
    ///
    /// A thread that has to sleep pays for at least `PACE_QUANTUM_NS` of the
    /// rate at once (up to `PACE_PREPAY_MAX` blocks), and its next appends
    /// spend that prepaid credit (`PREPAID`, per thread) without a slot or a
    /// sleep: one sleep per quantum instead of one per 4 KiB write. A sleep
    /// and its wake-up cost a few us of system time, which at 140K paced
    /// writes/s was most of a write's CPU (issue 22, docs/benchmarks.md).
    /// The admitted rate is unchanged: every block still takes its share of
    /// the slots; only who sleeps, and how often, changes.
    /// Returns the nanoseconds it slept (0: none).
    pub fn pace(&self, blocks: u64, level: u32, headroom: u64) -> u64 {
        if !self.threaded || level >= self.clean_mark || blocks == 0 || pace_off() {
            return 0;
        }
        let gc_rate = f64::from_bits(self.rate_bits.load(Ordering::Relaxed));
        if gc_rate <= 0.0 {
            return 0;
        }
        let me = self as *const Self as usize;
        let (owner, credit) = PREPAID.with(|c| c.get());
        let credit = if owner == me { credit } else { 0 };
        let mark_blocks = self.clean_mark as f64 * self.segment_blocks as f64;
        let scale = (2.0 * headroom as f64 / mark_blocks).clamp(0.125, 2.0);
        let per_block = 1e9 / (gc_rate * scale);
        let now = self.now_ns();
        let (slot, credit) = self.take_slot(credit, blocks, per_block, now, pace_quantum_ns());
        PREPAID.with(|c| c.set((me, credit)));
        match slot.filter(|&s| s > now + PACE_SLEEP_MIN_NS) {
            Some(slot) => {
                std::thread::sleep(Duration::from_nanos(slot - now));
                slot - now
            }
            None => 0,
        }
    }

    /// The bookkeeping of `pace` at time `now` (ns since `started`), for a
    /// thread holding `credit` prepaid blocks: the slot its `blocks` start
    /// at (None: the credit covered them) and its credit after. A thread
    /// whose slot lies ahead (it will sleep) takes slots for at least
    /// `quantum` ns of the rate, up to `PACE_PREPAY_MAX` blocks beyond its
    /// own, and keeps the extra as credit. `next_slot_ns` moves by
    /// `per_block` for every block, prepaid or not.
    fn take_slot(
        &self,
        credit: u64,
        blocks: u64,
        per_block: f64,
        now: u64,
        quantum: u64,
    ) -> (Option<u64>, u64) {
        if credit >= blocks {
            return (None, credit - blocks);
        }
        let blocks = blocks - credit;
        let mut cur = self.next_slot_ns.load(Ordering::Relaxed);
        loop {
            // a slot never lies more than 100 ms ahead: the rate is a guess
            let start = cur.max(now).min(now + 100_000_000);
            let extra = if start > now + PACE_SLEEP_MIN_NS {
                ((quantum as f64 / per_block) as u64)
                    .saturating_sub(blocks)
                    .min(PACE_PREPAY_MAX)
            } else {
                0
            };
            // MUTANT: pace-prepaid-free s|(blocks + extra) as f64|blocks as f64|
            let step = ((blocks + extra) as f64 * per_block) as u64;
            match self.next_slot_ns.compare_exchange_weak(
                cur,
                start + step,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return (Some(start), extra),
                Err(c) => cur = c,
            }
        }
    }
}

impl Shared {
    /// A user append found no free segment beyond the reserve. Background mode:
    /// wait for a housekeeper round that started after this call (hard credit);
    /// NoSpace if that round could reclaim nothing. Deterministic mode: run the
    /// foreground clean here, as the housekeeper.
    pub(in crate::volume) fn wait_for_space(&self) -> Result<()> {
        if !self.hk.threaded {
            let _r = self.hk.round.lock();
            return self.make_space();
        }
        self.wait_round()
    }

    /// Last step of a writable mount, and the first of re-homing the intent
    /// log: clean until more than the reserve is free (`make_space`, a
    /// writer's foreground clean). Invariant (ARCHITECTURE.md "Capacity"):
    /// every writable mount ends with more than `reserve` free segments
    /// unless no victim gains anything (a full thin volume); between mounts
    /// only GC and trims take the reserve, so a power cut always leaves the
    /// next mount a free segment to clean into. A volume GC cannot clean
    /// mounts anyway (a full thin volume answers ENOSPC to writes).
    pub(in crate::volume) fn mount_clean(&self) -> Result<()> {
        // MUTANT: mount-never-cleans s|if self.opts.read_only {|if true {|
        if self.opts.read_only {
            return Ok(());
        }
        let _r = self.hk.round.lock();
        match self.make_space() {
            Ok(()) => {}
            Err(Error::NoSpace) => {
                let (free, reserve) = (self.free_pending().0, self.hk.reserve);
                tracing::warn!(
                    "mount: {free} free segment(s), the GC reserve is {reserve}, and cleaning gains nothing more"
                );
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Wait for the next housekeeper round's foreground clean, or for a barrier
    /// that freed segments meanwhile (background mode).
    fn wait_round(&self) -> Result<()> {
        let t0 = Instant::now();
        let r = self.wait_round_inner();
        Counters::add(&self.counters.space_waits, 1);
        Counters::add(
            &self.counters.space_wait_us,
            t0.elapsed().as_micros() as u64,
        );
        r
    }

    fn wait_round_inner(&self) -> Result<()> {
        let (need, released) = {
            let mut cr = self.hk.credit.lock();
            cr.waiting += 1;
            (cr.started + 1, cr.released)
        };
        self.hk.wake_now();
        let mut cr = self.hk.credit.lock();
        let r = loop {
            if cr.released > released {
                // a barrier freed segments meanwhile: try again
                break Ok(());
            }
            if cr.done >= need {
                break if cr.nospace >= need {
                    Err(Error::NoSpace)
                } else {
                    Ok(())
                };
            }
            if let Err(e) = self.commit.check_failed() {
                break Err(e);
            }
            if self.hk.stopping() {
                break Err(Error::Closed);
            }
            self.hk
                .credit_cv
                .wait_for(&mut cr, Duration::from_millis(50));
        };
        cr.waiting -= 1;
        r
    }

    /// After an append batch: checkpoint when due. Deterministic mode writes it
    /// here (as the housekeeper); background mode wakes the housekeeper, and
    /// waits for it only when the log since the last checkpoint passes twice the
    /// interval (so the replay window stays bounded). `since`: the log bytes
    /// since the last checkpoint as the append's last batch saw them (no second
    /// trip through the engine lock).
    pub(in crate::volume) fn after_append(&self, since: u64) -> Result<()> {
        let interval = self.hk.checkpoint_interval;
        if since < interval {
            return Ok(());
        }
        if !self.hk.threaded {
            let _r = self.hk.round.lock();
            return self.checkpoint_if_due(interval);
        }
        if since < 2 * interval {
            self.hk.wake();
            return Ok(());
        }
        let t0 = Instant::now();
        let r = self.wait_checkpoint(2 * interval);
        Counters::add(&self.counters.checkpoint_waits, 1);
        Counters::add(
            &self.counters.checkpoint_wait_us,
            t0.elapsed().as_micros() as u64,
        );
        r
    }

    /// Wait until the log since the last checkpoint is below `limit` bytes
    /// (background mode): woken by each checkpoint the housekeeper writes, not
    /// by the end of a round (a round can clean ahead for a long time after its
    /// checkpoint; waiting for the round made this the longest write stall).
    fn wait_checkpoint(&self, limit: u64) -> Result<()> {
        loop {
            let seen = self.hk.credit.lock().checkpoints;
            if self.core.lock().bytes_since_checkpoint < limit {
                return Ok(());
            }
            self.commit.check_failed()?;
            if self.hk.stopping() {
                return Err(Error::Closed);
            }
            self.hk.wake_now();
            let mut cr = self.hk.credit.lock();
            if cr.checkpoints == seen {
                self.hk
                    .credit_cv
                    .wait_for(&mut cr, Duration::from_millis(50));
            }
        }
    }

    /// One round of housekeeping on the caller's thread: seal and write an idle
    /// user chunk, clean (foreground for waiting writers, then ahead to the
    /// mark), run the reuse barrier, checkpoint when due.
    /// Driven by a test, a step never looks at the clock (no idle extension of
    /// the clean-ahead mark), so a seeded schedule replays exactly.
    pub(crate) fn housekeeper_step(&self) -> Result<bool> {
        self.step(false)
    }

    /// One round; `idle_ahead`: clean further ahead after a second without
    /// writes (the background thread only).
    fn step(&self, idle_ahead: bool) -> Result<bool> {
        let _r = self.hk.round.lock();
        self.hk.round_begin_at(self.hk.now_ns());
        let r = self.step_counted(idle_ahead);
        self.hk.round_end_at(self.hk.now_ns());
        r
    }

    fn step_counted(&self, idle_ahead: bool) -> Result<bool> {
        let (round, writers_wait) = {
            let mut cr = self.hk.credit.lock();
            cr.started += 1;
            (cr.started, cr.waiting > 0)
        };
        let mut done = false;
        let r = self.round(round, writers_wait, idle_ahead, &mut done);
        if !done {
            self.round_done(round, false);
        }
        r
    }

    /// Tell request threads waiting on credit that this round's foreground
    /// part is over (`nospace`: it could reclaim nothing).
    fn round_done(&self, round: u64, nospace: bool) {
        {
            let mut cr = self.hk.credit.lock();
            cr.done = round;
            if nospace {
                cr.nospace = round;
            }
        }
        self.hk.credit_cv.notify_all();
    }

    fn round(
        &self,
        round: u64,
        writers_wait: bool,
        idle_ahead: bool,
        done: &mut bool,
    ) -> Result<bool> {
        self.commit.check_failed()?;
        let idle = self
            .core
            .lock()
            .user_chunk_age()
            .is_some_and(|a| a >= Duration::from_millis(self.opts.idle_seal_ms));
        if idle {
            // seal, never log: the idle seal is what moves logged blocks
            // into the main log
            self.flush_sealing(true)?;
        }
        let (free, pending) = self.free_pending();
        if writers_wait || free <= self.hk.reserve {
            match self.make_space() {
                Ok(()) => {}
                Err(Error::NoSpace) => {
                    self.round_done(round, true);
                    *done = true;
                }
                Err(e) => return Err(e),
            }
        }
        if !*done {
            // waiting writers go on now, not after the clean-ahead below
            self.round_done(round, false);
            *done = true;
        }
        // After a second without writes, clean further ahead so the next burst
        // finds free segments instead of waiting for GC.
        let ahead = self.hk.clean_mark;
        let idle_ms = (self.hk.started.elapsed().as_millis() as u64)
            .saturating_sub(self.hk.last_write_ms.load(Ordering::Relaxed));
        let want = if idle_ahead && idle_ms >= 1000 {
            (self.geo.segment_count / 8).max(ahead)
        } else {
            ahead
        };
        let mut cleaned = 0;
        if free + pending < self.hk.reserve + want {
            match self.clean_ahead(want, false) {
                Ok(n) => cleaned = n,
                Err(Error::NoSpace) => {}
                Err(e) => return Err(e),
            }
        }
        // emptied segments are freed once free ones run near the reserve, not
        // when a writer reaches it (each barrier drains the write queue, so
        // not on every round)
        let (free, pending) = self.free_pending();
        if pending > 0 && free <= self.hk.reserve + 1 {
            self.barrier()?;
        }
        // After a second without writes (a trim, then silence), give the
        // space back: free what is pending, and pass over the free stack
        // again, so that every deep free segment counts as untouched (no
        // write can have reached it since the previous pass). Nothing is
        // left to do, and nothing is done, once each was given back.
        if idle_ahead && idle_ms >= 1000 && self.commit.discard_enabled() {
            if self.free_pending().1 > 0 {
                self.barrier()?;
            }
            self.discard_deep()?;
        }
        self.checkpoint_if_due(self.hk.checkpoint_interval)?;
        Ok(cleaned > 0)
    }

    pub(in crate::volume) fn free_pending(&self) -> (u32, u32) {
        let c = self.core.lock();
        (c.segs.free.len() as u32, c.segs.pending.len() as u32)
    }

    /// The housekeeper thread: a round whenever a request thread asks or a tick
    /// passes; rounds back to back while they make progress and writes wait.
    pub(in crate::volume) fn housekeeper_thread(self: Arc<Self>) {
        let tick = Duration::from_millis((self.opts.idle_seal_ms / 2).clamp(10, 100));
        let mut progressed = false;
        loop {
            // writers waiting for space get a round even if the last one could
            // clean nothing; otherwise such a round waits a tick
            let urgent = self.hk.credit.lock().waiting > 0;
            {
                let mut w = self.hk.wake.lock();
                if w.stop {
                    return;
                }
                if !(w.wanted && (progressed || urgent)) {
                    self.hk.wake_cv.wait_for(&mut w, tick);
                }
                if w.stop {
                    return;
                }
                w.wanted = false;
            }
            if self.commit.check_failed().is_err() {
                // wake waiting writers: they see the failure
                self.hk.credit_cv.notify_all();
                return;
            }
            match self.step(true) {
                Ok(p) => progressed = p,
                // a stopped volume was logged once, where it stopped
                Err(Error::Failed(_)) => progressed = false,
                Err(e) => {
                    progressed = false;
                    tracing::error!("housekeeper: {e}");
                }
            }
            // keep going while below the mark and cleaning helps
            let (free, pending) = self.free_pending();
            if progressed && free + pending < self.hk.reserve + self.hk.clean_mark {
                self.hk.wake.lock().wanted = true;
            }
        }
    }

    /// Whether at least `limit` bytes of chunks were sealed since the last
    /// checkpoint.
    fn checkpoint_due(&self, limit: u64) -> bool {
        self.core.lock().bytes_since_checkpoint >= limit
    }

    /// Checkpoint when at least `limit` bytes of chunks were sealed since the last.
    fn checkpoint_if_due(&self, limit: u64) -> Result<()> {
        if self.checkpoint_due(limit) {
            self.write_checkpoint(false)?;
        }
        Ok(())
    }

    /// Write a checkpoint of the current state (`clean`: a clean close). The
    /// caller holds the round lock (or is the mount, before any other thread).
    /// `hk_checkpoint_us` gets the plan's time here and the tail's in
    /// `run_tail`, each once.
    fn write_checkpoint(&self, clean: bool) -> Result<()> {
        let t0 = Instant::now();
        let t = self.plan_checkpoint(clean);
        Counters::add(
            &self.counters.hk_checkpoint_us,
            t0.elapsed().as_micros() as u64,
        );
        self.run_tail(t?)
    }

    /// A checkpoint's plan: seal every open chunk and make the image of the
    /// state they end (engine lock), with the lifetime counters it records.
    /// Its tail (`run_tail`) makes those chunks durable, then the image
    /// current.
    fn plan_checkpoint(&self, clean: bool) -> Result<Tail> {
        let mut img = self.take_image_buf();
        let mut out = Vec::new();
        let (next_seq, uuid, lsn) = loop {
            // (compressed volumes: the image is made with nothing staged, so
            // chunks other threads are packing right now are waited for)
            self.pack_staged(&mut out)?;
            let mut c = self.core.lock();
            if c.staged_busy() {
                drop(c);
                std::thread::yield_now();
                continue;
            }
            let d = self.commit.durable_seq();
            let n = c.checkpoint_image(d, &mut img[BLOCK_BYTES..], &mut out);
            break (n, c.uuid, c.next_lsn);
        };
        // queued here, in order before the next victim's GC chunks (its
        // chunks of the same slots name these as their predecessors)
        self.commit.submit_seals(out)?;
        Ok(Tail::Checkpoint {
            img,
            next_seq,
            uuid,
            lsn,
            clean,
        })
    }

    /// The kept checkpoint image buffer (a new one the first time, or when
    /// the kept one went with a failed tail), every byte of the slot past
    /// the body zeroed. The rest is this checkpoint's own: the header block
    /// is written whole by `finish_image`, the body by the engine's image
    /// (`Core::checkpoint_image` encodes every map value and segment record;
    /// its length is fixed by the geometry), so no byte of an earlier
    /// checkpoint reaches the slot, and the body CRC covers exactly the
    /// bytes recovery reads.
    fn take_image_buf(&self) -> AlignedBuf {
        let geo = &self.geo;
        let len = geo.checkpoint_slot_bytes as usize;
        let body = crate::format::checkpoint::body_bytes_with(
            geo.logical_blocks,
            geo.segment_count,
            geo.map_value_bytes,
        ) as usize;
        let kept = self.hk.image_buf.lock().take();
        let mut img = match kept.filter(|b| b.len() == len) {
            Some(b) => b,
            None => {
                self.hk.image_allocs.fetch_add(1, Ordering::Relaxed);
                AlignedBuf::new(len)
            }
        };
        // MUTANT: ckpt-pad-stale s|img[BLOCK_BYTES + body..].fill(0)|img[len..].fill(0)|
        img[BLOCK_BYTES + body..].fill(0);
        img
    }

    /// The IO of a planned barrier or checkpoint, on whichever thread runs it
    /// (the housekeeper's, or its helper beside the next victim).
    fn run_tail(&self, t: Tail) -> Result<()> {
        match t {
            Tail::Barrier {
                target,
                segs,
                kill_lsn,
            } => {
                let t0 = Instant::now();
                let flushes0 = self.counters.media_flushes.load(Ordering::Relaxed);
                let r = self.barrier_tail(target, segs, kill_lsn);
                let flushes = self.counters.media_flushes.load(Ordering::Relaxed) - flushes0;
                Counters::add(&self.counters.barrier_flushes, flushes);
                Counters::add(
                    &self.counters.hk_barrier_us,
                    t0.elapsed().as_micros() as u64,
                );
                r
            }
            Tail::Checkpoint {
                img,
                next_seq,
                uuid,
                lsn,
                clean,
            } => {
                let t0 = Instant::now();
                let r = self.checkpoint_tail(img, next_seq, uuid, lsn, clean);
                Counters::add(
                    &self.counters.hk_checkpoint_us,
                    t0.elapsed().as_micros() as u64,
                );
                r
            }
        }
    }

    fn checkpoint_tail(
        &self,
        mut img: AlignedBuf,
        next_seq: u64,
        uuid: [u8; 16],
        lsn: u64,
        clean: bool,
    ) -> Result<()> {
        self.commit.flush_covering(next_seq)?;
        {
            // every user record below `lsn` is durable in the main log now
            let mut c = self.core.lock();
            let dl = c.note_durable(self.commit.durable_seq());
            assert!(
                !c.lsn_on || dl >= lsn,
                "checkpoint before its user records are durable"
            );
        }
        // the lifetime counters it records are taken now, after the chunks
        // its plan sealed are written (they count), and include its own
        // writes: the slot, its flush, and the superblock write that makes
        // it current
        let own = Lifetime {
            media_checkpoint_bytes: img.len() as u64,
            media_superblock_bytes: super::commit::superblock_write_bytes(&self.commit.sb.lock()),
            media_flushes: 2,
            checkpoints: 1,
            ..Lifetime::default()
        };
        let lifetime = self.counters.lifetime(&own);
        checkpoint::finish_image(
            &mut img,
            &self.geo,
            uuid,
            next_seq,
            lifetime,
            self.opts.clock.unix_ns(),
            lsn,
        );
        let r = self.commit.write_checkpoint(&img, next_seq, clean);
        // kept for the next checkpoint (written or not: nothing reads it)
        *self.hk.image_buf.lock() = Some(img);
        r?;
        self.hk.credit.lock().checkpoints += 1;
        self.hk.credit_cv.notify_all();
        Ok(())
    }

    /// Checkpoint now, as the housekeeper (any thread).
    pub(in crate::volume) fn checkpoint_now(&self, clean: bool) -> Result<()> {
        let _r = self.hk.round.lock();
        self.write_checkpoint(clean)
    }

    /// Clean ahead now, as the housekeeper (any thread).
    pub(in crate::volume) fn gc_until_free(&self, want: u32) -> Result<u64> {
        let _r = self.hk.round.lock();
        self.clean_ahead(want, true)
    }

    /// Reuse barrier: make every chunk so far durable, record that in the
    /// superblock, wipe the first block of each emptied segment, then let those
    /// segments be reused. After it, replay can skip any missing chunk below the
    /// recorded watermark: such a chunk was dead and its segment reused.
    pub(in crate::volume) fn barrier(&self) -> Result<()> {
        match self.plan_barrier()? {
            Some(t) => self.run_tail(t),
            None => Ok(()),
        }
    }

    /// A barrier's plan (engine lock): seal the open chunks that hold records
    /// emptying a Pending segment, and take the pending set, the target (every
    /// chunk below it must be durable) and the LSN the main log must cover.
    /// None when nothing is pending (what it sealed is submitted here).
    fn plan_barrier(&self) -> Result<Option<Tail>> {
        let mut out = Vec::new();
        let (target, segs, kill_lsn) = {
            let mut c = self.core.lock();
            let d = self.commit.durable_seq();
            let partial = c.seal_for_barrier(d, &mut out);
            Counters::add(&self.counters.barrier_partial_seals, partial);
            (c.next_seq, c.segs.pending.clone(), c.kill_lsn)
        };
        // (compressed volumes: chunks other threads sealed may be placed
        // here too; whatever is placed must reach the commit stage)
        self.pack_staged(&mut out)?;
        if segs.is_empty() {
            self.commit.submit_housekeeping(out)?;
            return Ok(None);
        }
        // queued here, in order before the next victim's GC chunks
        self.commit.submit_seals(out)?;
        Ok(Some(Tail::Barrier {
            target,
            segs,
            kill_lsn,
        }))
    }

    fn barrier_tail(&self, target: u64, segs: Vec<u32>, kill_lsn: u64) -> Result<()> {
        // 1. every chunk so far durable; 2. the superblock records it
        self.commit.flush_covering(target)?;
        {
            // redb's rule: nothing is freed by a write that is durable only in
            // the intent log; the records that emptied these segments are in
            // durable main-log chunks now
            let mut c = self.core.lock();
            let dl = c.note_durable(target);
            assert!(
                !c.lsn_on || dl >= kill_lsn,
                "reuse barrier before the records that emptied its segments are durable in the main log ({dl} < {kill_lsn})"
            );
        }
        self.commit
            .update_superblock(|sb| sb.durable_seq = sb.durable_seq.max(target))?;
        assert!(self.commit.sb.lock().durable_seq >= target, "barrier order");
        // 3. tombstones, flushed
        self.commit.wipe(&segs)?;
        // 4. only then reusable (on top of the free stack: used first)
        {
            let _w = self.reuse.write();
            self.core.lock().release(&segs, target);
        }
        self.hk.credit.lock().released += 1;
        self.hk.credit_cv.notify_all();
        Counters::add(&self.counters.barriers, 1);
        // 5. give back the space of free segments deep in the stack
        self.discard_deep()
    }

    /// Give back (hole punch or discard) free segments that wait deeper in
    /// the free stack than the ones the housekeeper keeps ready for writes
    /// (reserve + twice the clean-ahead mark) and that no stream took since
    /// the previous call (`SegmentTable::take_to_discard`), each once since it
    /// was freed, at most `DISCARD_BATCH` per call, never their first block
    /// (`Commit::discard`). A segment writes take again soon gains nothing from
    /// a discard and costs twice (the discard, then filling a hole: on ext4 an
    /// O_DIRECT write into a hole allocates under the inode lock). The stack
    /// keeps the writes on its top segments, so what is punched stays punched.
    /// The segments are Free (their barrier wiped them and fenced out every
    /// reader) and out of the free stack while they are discarded, so no
    /// stream can take one meanwhile. `discard_every_segment` (the simulator)
    /// keeps none back. Also run by the mount after its wipes (which, not
    /// knowing what writes will reach, only starts the window).
    pub(in crate::volume) fn discard_deep(&self) -> Result<()> {
        if !self.commit.discard_enabled() {
            return Ok(());
        }
        let keep = if self.opts.discard_every_segment {
            0
        } else {
            (self.hk.reserve + 2 * self.hk.clean_mark) as usize
        };
        let cold_only = !self.opts.discard_every_segment;
        let segs = self
            .core
            .lock()
            .segs
            .take_to_discard(keep, DISCARD_BATCH, cold_only);
        if segs.is_empty() {
            return Ok(());
        }
        let r = self.commit.discard(&segs);
        self.core.lock().segs.return_discarded(&segs);
        r
    }

    /// Foreground clean: until one segment is free beyond the reserve, or
    /// NoSpace when nothing can be reclaimed.
    fn make_space(&self) -> Result<()> {
        let reserve = self.hk.reserve;
        let batch = (reserve / 2).max(1);
        for _ in 0..(self.geo.segment_count as usize * 4 + 64) {
            let (free, pending) = self.free_pending();
            if free > reserve {
                return Ok(());
            }
            if pending > 0 && (free + pending > reserve + batch || free <= 1) {
                self.barrier()?;
                continue;
            }
            if !self.gc_one(1)? {
                if pending > 0 {
                    self.barrier()?;
                    continue;
                }
                return Err(Error::NoSpace);
            }
        }
        Err(Error::NoSpace)
    }

    /// Clean until `want` segments beyond the reserve are free or pending.
    /// Emptied segments are freed by a reuse barrier only when the free list
    /// needs them or enough are pending (`needs_barrier`), or at the end when
    /// `release` (an explicit `gc_until_free`). Returns segments cleaned.
    ///
    /// A barrier that is not urgent and a checkpoint falling due are planned
    /// here (under the engine lock: seals, the pending set, the image) and
    /// their IO (`Tail`: the drain of the write queue, flushes, superblock,
    /// wipes, the release) runs beside the next victim's read and relocation:
    /// on a scoped helper thread in background mode, after that victim in
    /// deterministic mode (so the simulator cuts power inside the overlap).
    /// At most one tail is in flight (`hand_off` joins the last first), and
    /// every tail is joined before this returns.
    fn clean_ahead(&self, want: u32, release: bool) -> Result<u64> {
        std::thread::scope(|scope| {
            let mut side = Side {
                scope,
                threaded: self.hk.threaded,
                running: None,
                deferred: None,
            };
            let r = self.clean_ahead_beside(want, &mut side);
            let j = self.join_tail(&mut side);
            let cleaned = r?;
            j?;
            let (free, pending) = self.free_pending();
            if pending > 0 && (release || self.needs_barrier(free, pending)) {
                self.barrier()?;
            }
            Ok(cleaned)
        })
    }

    fn clean_ahead_beside<'scope, 'env>(
        &'env self,
        want: u32,
        side: &mut Side<'scope, 'env>,
    ) -> Result<u64> {
        let reserve = self.hk.reserve;
        let mut cleaned = 0;
        for _ in 0..self.geo.segment_count * 2 {
            let (free, pending) = self.free_pending();
            if free + pending >= reserve + want || free <= 1 {
                break;
            }
            if self.needs_barrier(free, pending) {
                // free segments short or writers waiting: freed now, in
                // series; otherwise beside the next victim
                let urgent = free <= self.hk.reserve + 2 || self.hk.credit.lock().waiting > 0;
                self.join_tail(side)?;
                if urgent {
                    self.barrier()?;
                } else if let Some(t) = self.plan_barrier()? {
                    self.hand_off(side, t)?;
                }
            }
            // a checkpoint falling due is written between victims, so writers
            // bounded by the replay window do not wait for a whole clean-ahead
            if self.checkpoint_due(self.hk.checkpoint_interval) {
                self.join_tail(side)?;
                let t0 = Instant::now();
                let t = self.plan_checkpoint(false)?;
                Counters::add(
                    &self.counters.hk_checkpoint_us,
                    t0.elapsed().as_micros() as u64,
                );
                self.hand_off(side, t)?;
            }
            // ahead of need, only victims worth it (>= 1/16 of a segment)
            let beside = side.running.is_some() || side.deferred.is_some();
            if !self.gc_one(self.geo.segment_blocks / 16)? {
                break;
            }
            if beside {
                Counters::add(&self.counters.hk_victims_beside_tails, 1);
            }
            // deterministic mode: the tail runs now, after the victim
            if let Some(t) = side.deferred.take() {
                self.run_tail(t)?;
            }
            cleaned += 1;
        }
        Ok(cleaned)
    }

    /// Start `tail` beside the housekeeper's next work (after the tail
    /// before it is done: one at a time, so no two barriers share a pending
    /// segment and superblock writes keep their order).
    fn hand_off<'scope, 'env>(&'env self, side: &mut Side<'scope, 'env>, tail: Tail) -> Result<()> {
        self.join_tail(side)?;
        // MUTANT: tails-in-series s|if hk_serial() {|if true {|
        if hk_serial() {
            return self.run_tail(tail);
        }
        if !side.threaded {
            Counters::add(&self.counters.hk_tails_overlapped, 1);
            side.deferred = Some(tail);
            return Ok(());
        }
        // the tail goes through a cell, so that a thread that cannot be
        // started leaves it to run here (its sealed chunks must be written)
        let cell = Arc::new(Mutex::new(Some(tail)));
        let theirs = cell.clone();
        let spawned = std::thread::Builder::new()
            .name("sluice-hk-tail".into())
            .spawn_scoped(side.scope, move || match theirs.lock().take() {
                Some(t) => self.run_tail(t),
                None => Ok(()),
            });
        match spawned {
            Ok(h) => {
                Counters::add(&self.counters.hk_tails_overlapped, 1);
                side.running = Some(h);
                Ok(())
            }
            Err(e) => {
                tracing::warn!("housekeeper: no helper thread for a barrier or checkpoint ({e}); run in series");
                match cell.lock().take() {
                    Some(t) => self.run_tail(t),
                    None => Ok(()),
                }
            }
        }
    }

    /// Wait for the tail in flight, if any (deterministic mode: run the one
    /// deferred). Its time is the housekeeper's wait (`hk_tail_wait_us`).
    fn join_tail(&self, side: &mut Side<'_, '_>) -> Result<()> {
        if let Some(t) = side.deferred.take() {
            return self.run_tail(t);
        }
        let Some(h) = side.running.take() else {
            return Ok(());
        };
        let t0 = Instant::now();
        let r = match h.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Counters::add(
            &self.counters.hk_tail_wait_us,
            t0.elapsed().as_micros() as u64,
        );
        r
    }

    /// Whether to free the pending segments now (a reuse barrier): free
    /// segments are down to two beyond the reserve (appends stop at the
    /// reserve), writers wait for space, or `BARRIER_BATCH` are pending.
    /// Otherwise emptied segments wait in Pending: pacing counts them as
    /// headroom already (`Core::headroom_blocks`), and each barrier drains
    /// the write queue and flushes three times. Main barriered at 4 pending
    /// and at the end of every clean-ahead (3.6 victims per barrier in
    /// `bench ceiling`; docs/gc.md, "Barriers when the free list needs them").
    fn needs_barrier(&self, free: u32, pending: u32) -> bool {
        // MUTANT: barrier-every-victim s|pending >= BARRIER_BATCH|pending > 0|
        pending >= BARRIER_BATCH
            || (pending > 0 && (free <= self.hk.reserve + 2 || self.hk.credit.lock().waiting > 0))
    }

    /// Relocate the live entries of one victim segment into the GC stream.
    /// Returns false when no segment can be cleaned with net gain.
    pub(in crate::volume) fn gc_one(&self, min_gain: u32) -> Result<bool> {
        let mut out = Vec::new();
        // 1. Choose the victim and take it out of circulation (no IO under the lock).
        let (victim, fill, uuid) = {
            let mut c = self.core.lock();
            let written = self.commit.progress.lock().written_through;
            let Some(victim) = gc::pick_victim(&c.segs, self.policy, c.next_seq, written, min_gain)
            else {
                return Ok(false);
            };
            let s = &mut c.segs.segs[victim as usize];
            assert_eq!(s.state, SegState::Closed, "GC victim must be closed");
            s.state = SegState::Victim;
            (victim, s.fill as usize, c.uuid)
        };
        // 2. Read it without the lock (a Victim is never reused, and its blocks
        //    never change while anything may point at them): its chunk headers,
        //    then only what the map still points at, each block checked
        //    against its CRC (gcread); writers go on meanwhile.
        let seg_bytes = self.geo.segment_blocks as usize * BLOCK_BYTES;
        let mut buf = self
            .hk
            .victim_buf
            .lock()
            .take()
            .unwrap_or_else(|| AlignedBuf::new(seg_bytes));
        let base = victim as u64 * self.geo.segment_blocks as u64;
        let t_read = Instant::now();
        let read = gcread::read_victim(
            &*self.store,
            victim,
            fill,
            &uuid,
            &mut buf,
            &self.hk.gc_plan_misses,
            |chunks| {
                let c = self.core.lock();
                gcread::live_blocks(&c.map, base, chunks, fill)
            },
        );
        let read = match read {
            Ok(r) => r,
            Err(e) => {
                *self.hk.victim_buf.lock() = Some(buf);
                self.core.lock().end_victim(victim);
                return Err(e.into());
            }
        };
        Counters::add(
            &self.counters.hk_gc_read_us,
            t_read.elapsed().as_micros() as u64,
        );
        Counters::add(&self.counters.gc_bytes_read, read.bytes_read);
        Counters::add(
            if read.runs {
                &self.counters.gc_victims_read_runs
            } else {
                &self.counters.gc_victims_read_whole
            },
            1,
        );
        let img = &buf[..fill * BLOCK_BYTES];
        // 3. Relocate what the map still points at (blocks overwritten
        //    meanwhile no longer match and are skipped; a live block not
        //    verified refuses the victim).
        let moved = {
            let mut c = self.core.lock();
            let durable = self.commit.durable_seq();
            let r = c.relocate(
                victim,
                img,
                &read.verified,
                read.chunks,
                self.hk.reserve,
                durable,
                &mut out,
            );
            c.end_victim(victim);
            match r {
                Ok((d, v, class)) => (d, v, Some(class)),
                Err(RelocateError::Damaged(why)) => {
                    tracing::error!("segment {victim} is damaged, GC leaves it alone: {why}");
                    // (if nothing live is left in it, it was made Pending: reusable)
                    if c.segs.segs[victim as usize].live > 0 {
                        c.segs.segs[victim as usize].state = SegState::Damaged;
                    }
                    (0, 0, None)
                }
                Err(RelocateError::NoSpace) => {
                    drop(c);
                    self.commit.submit_housekeeping(out)?;
                    return Err(Error::NoSpace);
                }
            }
        };
        *self.hk.victim_buf.lock() = Some(buf);
        let t_submit = Instant::now();
        self.commit.submit_housekeeping(out)?;
        Counters::add(
            &self.counters.hk_gc_submit_us,
            t_submit.elapsed().as_micros() as u64,
        );
        self.hk
            .note_freed((fill as u64).saturating_sub(moved.0 + moved.0 / 255 + 1));
        Counters::add(&self.counters.gc_runs, 1);
        Counters::add(&self.counters.gc_blocks_moved, moved.0);
        Counters::add(&self.counters.gc_virtual_moved, moved.1);
        if let Some(k) = moved.2.filter(|&k| k < self.counters.gc_class_runs.len()) {
            Counters::add(&self.counters.gc_class_runs[k], 1);
            Counters::add(&self.counters.gc_class_blocks_moved[k], moved.0 + moved.1);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform random 4 KiB overwrites of a volume with enough segments for a
    /// clean-ahead mark of 16, a housekeeper step every 48 writes (as the
    /// thread would be woken), so appends never reach the reserve: reuse
    /// barriers run when `BARRIER_BATCH` segments are pending or free ones
    /// run short, not after every few victims (main: a barrier at 4 pending
    /// and at the end of every clean-ahead, ~1.3 victims per barrier here).
    /// Counts, not time (mutation `barrier-every-victim`).
    #[test]
    fn reuse_barriers_free_segments_in_batches() {
        let blocks = 24_576u64;
        let vol = crate::volume::tests::driven_greedy_volume(blocks, 32);
        assert!(
            vol.sh.hk.clean_mark >= 2 * BARRIER_BATCH,
            "mark {}",
            vol.sh.hk.clean_mark
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut data = [0u8; BLOCK_BYTES];
        let mut step = |i: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data[..8].copy_from_slice(&i.to_le_bytes());
            // every block written once first, then uniform random overwrites
            let lba = if i < blocks { i } else { x % blocks };
            vol.write(lba * BLOCK_BYTES as u64, &data, false).unwrap();
            if i % 48 == 47 {
                vol.housekeeper_step().unwrap();
            }
        };
        for i in 0..blocks {
            step(i);
        }
        let before = vol.stats();
        for i in blocks..4 * blocks {
            step(i);
        }
        let after = vol.stats();
        let victims = after.gc_runs - before.gc_runs;
        let barriers = after.reuse_barriers - before.reuse_barriers;
        assert!(victims > 500, "GC ran: {victims} victims");
        assert!(
            victims >= 6 * barriers,
            "{victims} victims, {barriers} reuse barriers: fewer than 6 per barrier"
        );
        // the barriers sealed few chunks part-filled (at most the user and
        // the GC chunk each), and made their three flushes (4 counted)
        let partial = after.barrier_partial_seals - before.barrier_partial_seals;
        assert!(partial <= 2 * barriers, "{partial} partial seals");
        assert_eq!(after.barrier_flushes - before.barrier_flushes, 4 * barriers);
    }

    /// A reuse barrier that is not urgent and a checkpoint falling due run
    /// beside the next victim (deterministic mode: right after it), not in
    /// series before it, and nothing is lost by it: every block reads back
    /// its last value, before and after a remount from what the tails wrote
    /// (the engine's asserts check each barrier's and checkpoint's order).
    /// Counts, not time; with `SLUICE_HK_SERIAL=1` (or the overlap undone)
    /// no tail is overlapped and it fails.
    #[test]
    fn barriers_and_checkpoints_run_beside_the_next_victim() {
        use crate::media::Media;
        use crate::volume::{OpenOptions, Volume};
        let (blocks, seg_blocks) = (24_576u64, 32u32);
        let bs = BLOCK_BYTES as u64;
        let open = OpenOptions {
            background: false,
            // a checkpoint every 64 segments written
            checkpoint_interval_bytes: Some(64 * seg_blocks as u64 * bs),
            ..Default::default()
        };
        let (vol, media) = crate::volume::tests::volume_in_memory(
            blocks,
            seg_blocks,
            crate::gc::GcPolicy::Greedy,
            &open,
        );
        let mut last = vec![0u64; blocks as usize];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut data = [0u8; BLOCK_BYTES];
        let before = vol.stats();
        for i in 0..4 * blocks {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lba = if i < blocks { i } else { x % blocks };
            data[..8].copy_from_slice(&(i + 1).to_le_bytes());
            vol.write(lba * bs, &data, false).unwrap();
            last[lba as usize] = i + 1;
            if i % 48 == 47 {
                vol.housekeeper_step().unwrap();
            }
        }
        let after = vol.stats();
        let victims = after.gc_runs - before.gc_runs;
        let tails = after.hk_tails_overlapped - before.hk_tails_overlapped;
        let beside = after.hk_victims_beside_tails - before.hk_victims_beside_tails;
        let barriers = after.reuse_barriers - before.reuse_barriers;
        let checkpoints = after.checkpoints - before.checkpoints;
        assert!(victims > 500, "GC ran: {victims} victims");
        assert!(checkpoints >= 10, "{checkpoints} checkpoints");
        // (a few barriers are urgent and run in series)
        assert!(
            2 * tails >= barriers + checkpoints,
            "{tails} tails overlapped of {barriers} barriers and {checkpoints} checkpoints"
        );
        assert!(
            10 * beside >= 9 * tails,
            "{beside} victims read beside {tails} tails"
        );
        let check = |vol: &Volume, when: &str| {
            let mut buf = [0u8; BLOCK_BYTES];
            for (lba, &v) in last.iter().enumerate() {
                vol.read(lba as u64 * bs, &mut buf).unwrap();
                let got = u64::from_le_bytes(buf[..8].try_into().unwrap());
                assert_eq!(got, v, "block {lba} {when}");
            }
        };
        check(&vol, "before the remount");
        // a remount that replays the log since the last checkpoint (no
        // clean close: the volume is dropped as a power cut would leave it)
        vol.flush().unwrap();
        drop(vol);
        let vol = Volume::open(media as Arc<dyn Media>, &open).unwrap();
        check(&vol, "after the remount");
    }

    /// One checkpoint image buffer serves every checkpoint of a mount, and
    /// nothing an earlier image left in it reaches a slot: with the kept
    /// buffer filled with garbage before a checkpoint, that checkpoint's
    /// slot holds zeros past its body, loads, and a remount from it (no log
    /// past it to replay) reads every block back, trimmed ones as zeros.
    /// Fails with a fresh buffer per checkpoint (none kept), and with the
    /// slot's bytes past the body not cleared (mutation `ckpt-pad-stale`).
    #[test]
    fn one_kept_checkpoint_buffer_and_nothing_stale_in_the_slot() {
        use crate::media::Media;
        use crate::volume::tests::{driven_open, volume_in_memory};
        use crate::volume::Volume;
        let (blocks, seg_blocks) = (4096u64, 32u32);
        let bs = BLOCK_BYTES as u64;
        let open = driven_open();
        let policy = crate::gc::DEFAULT_POLICY;
        let (vol, media) = volume_in_memory(blocks, seg_blocks, policy, &open);
        let mut last = vec![0u64; blocks as usize];
        let mut data = [0u8; BLOCK_BYTES];
        let mut n = 0u64;
        let mut write = |vol: &Volume, lba: u64, last: &mut Vec<u64>| {
            n += 1;
            data[..8].copy_from_slice(&n.to_le_bytes());
            vol.write(lba * bs, &data, false).unwrap();
            last[lba as usize] = n;
        };
        for lba in 0..blocks {
            write(&vol, lba, &mut last);
        }
        vol.checkpoint().unwrap();
        for lba in (0..blocks).step_by(3) {
            write(&vol, lba, &mut last);
        }
        vol.checkpoint().unwrap();
        let allocs = vol.sh.hk.image_allocs.load(Ordering::Relaxed);
        vol.sh
            .hk
            .image_buf
            .lock()
            .as_mut()
            .expect("the checkpoint image buffer is kept")
            .fill(0xa5);
        for lba in (0..blocks).step_by(5) {
            write(&vol, lba, &mut last);
        }
        vol.trim(64 * bs, 64 * bs, false).unwrap();
        last[64..128].fill(0);
        vol.checkpoint().unwrap();
        assert_eq!(
            vol.sh.hk.image_allocs.load(Ordering::Relaxed),
            allocs,
            "a checkpoint allocated a new image buffer"
        );
        assert!(allocs <= 1, "{allocs} image buffers before");
        // the slot as written: garbage nowhere, the image loads
        let sb = vol.sh.commit.sb.lock().clone();
        let slot = sb.checkpoint_slot;
        let mut raw = vec![0u8; sb.checkpoint_slot_bytes as usize];
        media
            .read_at(&mut raw, sb.checkpoint_offset[slot as usize])
            .unwrap();
        let body_end = BLOCK_BYTES
            + crate::format::checkpoint::body_bytes_with(
                sb.logical_blocks,
                sb.segment_count,
                sb.map_value_bytes(),
            ) as usize;
        assert!(body_end < raw.len(), "no bytes past the body to check");
        assert!(
            raw[body_end..].iter().all(|&b| b == 0),
            "stale bytes past the checkpoint's body"
        );
        let loaded = checkpoint::load(&*media, &sb, slot).unwrap();
        assert_eq!(loaded.next_seq, sb.checkpoint_next_seq);
        vol.flush().unwrap();
        // dropped as a power cut would leave it: the mount takes that image
        drop(vol);
        let vol = Volume::open(media as Arc<dyn Media>, &open).unwrap();
        let mut buf = [0u8; BLOCK_BYTES];
        for (lba, &v) in last.iter().enumerate() {
            vol.read(lba as u64 * bs, &mut buf).unwrap();
            let got = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert_eq!(got, v, "block {lba} after the remount");
        }
    }

    /// The pacer's GC rate is what GC frees per second of the housekeeper's
    /// busy time, not of wall time: a GC that keeps up with the writers
    /// (busy a tenth of the time) may admit ten times what they wrote, and
    /// one that is busy all the time measures what it frees. The first
    /// rounds after a long idle spell (the mount, a burst's start) measure
    /// GC, not the spell. Counts, not time: the clock is the test's
    /// (mutation `gc-rate-wall-clock` measures over wall time, as before).
    #[test]
    fn the_gc_rate_is_measured_over_the_housekeepers_busy_time() {
        const MS: u64 = 1_000_000;
        let rate = |hk: &Housekeeper| f64::from_bits(hk.rate_bits.load(Ordering::Relaxed));
        // 1000 blocks freed per ms of work, a round every 10 ms, after an
        // idle second since the mount
        let hk = Housekeeper::new(2, 8, 256, 1 << 30, true);
        for i in 0..200 {
            let t = 1000 * MS + i * 10 * MS;
            hk.round_begin_at(t);
            hk.note_freed_at(1000, t + MS);
            hk.round_end_at(t + MS);
        }
        let r = rate(&hk);
        assert!((0.95e6..1.05e6).contains(&r), "rate {r} blocks/s, want 1M");
        // the same GC busy all the time: what it frees per wall second
        let hk = Housekeeper::new(2, 8, 256, 1 << 30, true);
        for i in 0..200 {
            let t = 1000 * MS + i * 10 * MS;
            hk.round_begin_at(t);
            hk.note_freed_at(1000, t + 10 * MS);
            hk.round_end_at(t + 10 * MS);
        }
        let r = rate(&hk);
        assert!(
            (0.95e5..1.05e5).contains(&r),
            "rate {r} blocks/s, want 100K"
        );
        // victims in one long round: the time between them is GC's
        let hk = Housekeeper::new(2, 8, 256, 1 << 30, true);
        hk.round_begin_at(1000 * MS);
        for i in 1..=200 {
            hk.note_freed_at(1000, 1000 * MS + i * 4 * MS);
        }
        hk.round_end_at(1800 * MS);
        let r = rate(&hk);
        assert!((2.4e5..2.6e5).contains(&r), "rate {r} blocks/s, want 250K");
    }

    /// Prepaid pacing keeps the rate: every block a sleeping thread pays
    /// for ahead moves the shared slot by its share, and spending the
    /// credit moves it no further (mutation `pace-prepaid-free`).
    #[test]
    fn a_pacing_sleep_pays_for_every_block_it_lets_by() {
        let hk = Housekeeper::new(2, 8, 256, 1 << 30, true);
        let per_block = 1000.0; // ns: 1M blocks/s
        hk.next_slot_ns.store(1_000_000, Ordering::Relaxed);
        // 1 ms ahead: this thread sleeps, and pays for a quantum of 16 blocks
        let (slot, credit) = hk.take_slot(0, 1, per_block, 0, 16_000);
        assert_eq!((slot, credit), (Some(1_000_000), 15));
        assert_eq!(hk.next_slot_ns.load(Ordering::Relaxed), 1_016_000);
        // its next 15 blocks go by on the credit, taking no slot
        let mut credit = credit;
        for _ in 0..15 {
            let (slot, c) = hk.take_slot(credit, 1, per_block, 0, 16_000);
            assert_eq!(slot, None);
            credit = c;
        }
        assert_eq!(credit, 0);
        assert_eq!(hk.next_slot_ns.load(Ordering::Relaxed), 1_016_000);
        // a batch of 5 with 2 blocks of credit left pays for 3 of them
        hk.next_slot_ns.store(0, Ordering::Relaxed);
        let (slot, c) = hk.take_slot(2, 5, per_block, 0, 32_000);
        // not ahead of now: no sleep, so nothing prepaid
        assert_eq!((slot, c), (Some(0), 0));
        assert_eq!(hk.next_slot_ns.load(Ordering::Relaxed), 3_000);
        // quantum 0 (one sleep per append, as before): nothing prepaid
        hk.next_slot_ns.store(1_000_000, Ordering::Relaxed);
        let (_, c) = hk.take_slot(0, 1, per_block, 0, 0);
        assert_eq!(c, 0);
        assert_eq!(hk.next_slot_ns.load(Ordering::Relaxed), 1_001_000);
        // at most PACE_PREPAY_MAX blocks ahead, however slow a block's slot is not
        let (_, c) = hk.take_slot(0, 1, 10.0, 0, 32_000);
        assert_eq!(c, PACE_PREPAY_MAX);
        assert_eq!(
            hk.next_slot_ns.load(Ordering::Relaxed),
            1_001_000 + (1 + PACE_PREPAY_MAX) * 10
        );
    }
}
