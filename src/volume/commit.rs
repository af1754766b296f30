//! Commit stage: owns every media write of the write side. It takes plans from
//! the engine (sealed chunks, segments to wipe, checkpoint images) and turns them
//! into IO: the bounded write queue and its writer threads, chunk completion
//! (`written_through`), group commit (`durable`), the superblock, segment wipes
//! and checkpoint slot writes. It never touches the map or the segment table.
//!
//! Invariants kept here:
//! - `written_through` only rises, and only past seqs whose chunk is written;
//! - `durable <= written_through` at all times, and `durable` rises only after a
//!   media flush that began once every chunk below it was written;
//! - the superblock's generation rises by one per write, alternating copies, and
//!   its `durable_seq` never falls;
//! - once `failed` is set, no further media write is started by this stage;
//! - no thread sleeps for write queue room below its limit unless a waiter
//!   woken for that limit is on its way, and that one passes the wake on
//!   (`Waiters`): one wake per chunk popped, none lost;
//! - every media write or flush error of the write side stops the volume through
//!   `fail` (one path: the reason is kept, logged once at error level, and its
//!   errno, ENOSPC or EIO, is what every later write answers); reads go on.

use super::intent::{self, PlannedRecord};
use super::OpenOptions;
use crate::crc_index::CrcIndex;
use crate::error::{Error, Failure, Result};
use crate::format::chunk::Stream;
use crate::format::superblock::{LogStart, Superblock};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::log::{ChunkPool, Sealed};
use crate::media::{AlignedBuf, Media};
use crate::stats::Counters;
use crate::store::SegmentStore;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Write a new intent log start to both superblock indexes (two updates, each
/// flushed), so a mount that falls back to either copy replays from it: a
/// copy with an older start would send replay into ring space reused since.
pub(in crate::volume) fn persist_start(commit: &Commit, start: LogStart) -> Result<()> {
    let stale = commit.log_stale.load(Ordering::Acquire);
    let set = |sb: &mut Superblock| {
        if let Some(v) = sb.v2.as_mut() {
            if start.seq >= v.log_start.seq {
                v.log_start = start;
            }
            // the mirrors this mount does not write to (set at mount: a
            // mirror absent now; later: one that failed), and only those
            v.log_stale = stale;
        }
    };
    commit.update_superblock(set)?;
    commit.update_superblock(set)
}

const BS: u64 = BLOCK_BYTES as u64;

/// Group commit (`Commit::company_wait`): a flusher waits for the chunks and
/// records other FLUSHes are writing for at most this percent of a recent
/// media flush's time, and never more than `COMPANY_WAIT_MAX`.
const COMPANY_WAIT_PCT: u64 = 50;
const COMPANY_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(2);

/// A FLUSH's answer (`Commit::flush_covering_log_then`), run by whichever
/// thread ends the media flush that makes its chunks and records durable:
/// Ok(true) durable; Ok(false) its chunks durable but its records never will
/// be (`log_lost`: the caller seals); Err the volume failed. Run with no
/// lock of the commit stage held.
pub(in crate::volume) type Answer = Box<dyn FnOnce(Result<bool>) + Send>;

/// A FLUSH parked until a media flush that began after its chunks and
/// records were written ends (`flush_covering_log_then`).
struct Parked {
    target: u64,
    rec_target: u64,
    answer: Answer,
}

/// Bytes of sealed chunks that may wait for a writer before appends block.
pub(in crate::volume) const WRITE_QUEUE_BYTES: u64 = 32 << 20;
/// The housekeeper's share of the queue: its chunks (GC output, barrier and
/// checkpoint seals) wait once the queue holds this much, so a GC burst never
/// fills the whole queue and the last quarter stays for request threads (a
/// user append blocked behind GC output was the write tail).
pub(in crate::volume) const HOUSEKEEPER_QUEUE_BYTES: u64 = WRITE_QUEUE_BYTES / 4 * 3;
/// Writer threads in background mode: enough to keep the device busy while the
/// threads that fill chunks go on (one writes while another chunk fills).
pub(in crate::volume) const WRITER_THREADS: usize = 2;

pub(in crate::volume) struct Progress {
    /// Every chunk with seq < this has been written to the media.
    pub written_through: u64,
    completed: BTreeSet<u64>,
    /// Every chunk with seq < this is durable.
    pub durable: u64,
    /// Media flushes of `flush_covering_log` running now (at most the
    /// media's `flush_parallelism`, 1 with log devices).
    flushing: usize,
    /// The highest `written_through` a running flush covers.
    flushing_upto: u64,
    /// Lowest `written_through` a waiter in `flush_covering` is waiting for
    /// (u64::MAX: none). Chunk completions wake waiters only once it is reached,
    /// so a burst of writes does not wake every flusher for every chunk.
    wake_written: u64,
    pub failed: Option<Failure>,
    /// Intent log records: every record with seq < `log_written` is written,
    /// every one below `log_durable` durable (the same prefix rule as chunks).
    pub log_written: u64,
    /// Lowest `log_written` a waiter in `flush_covering_log` is waiting for
    /// (u64::MAX: none): as `wake_written`, so a record written does not wake
    /// the waiters of a flush in progress.
    wake_log: u64,
    log_completed: BTreeSet<u64>,
    pub log_durable: u64,
    /// The highest chunk target and record target a FLUSH announced before
    /// writing its sealed chunk or its record (`announce`). A flusher that
    /// finds them above what is written knows company is on its way, and
    /// waits a little for it (group commit, `company_wait`).
    announced: u64,
    announced_log: u64,
    /// Recent media flush time (ns, a moving average): the scale of the
    /// group commit's wait.
    flush_ns: u64,
    /// FLUSHes parked for a media flush (`flush_covering_log_then`).
    /// Invariant: while it is not empty,
    /// a media flush is running (its end answers or hands on) or the
    /// flusher thread is busy (`flusher_busy`).
    parked: Vec<Parked>,
    /// The flusher thread was handed the parked FLUSHes and has not found
    /// the list empty since.
    flusher_busy: bool,
    /// The flusher thread is to exit once nothing is parked.
    flusher_stop: bool,
}

impl Progress {
    /// Has chunk `seq` been written (in order or ahead of a gap)?
    pub fn is_written(&self, seq: u64) -> bool {
        seq < self.written_through || self.completed.contains(&seq)
    }
    /// A count that rises by one with every chunk written.
    pub fn writes_seen(&self) -> u64 {
        self.written_through + self.completed.len() as u64
    }
}

/// A run of a streamed host write's data blocks (`Commit::place`): data
/// indexes `from..to` of an open user chunk (its `Placed` map), the first
/// at block `block` of `segment`, and their bytes.
pub(in crate::volume) struct PlaceRun<'a> {
    pub placed: Arc<crate::log::Placed>,
    pub segment: u32,
    pub block: u32,
    pub from: u32,
    pub to: u32,
    pub bytes: &'a [u8],
}

/// The intent log devices a mount uses (`Commit::new`): each with its mirror
/// index, how many of the volume's devices are missing, and the mask of
/// mirrors absent (stale from this mount on).
pub(in crate::volume) struct LogDeviceSet {
    pub devs: Vec<(Arc<dyn Media>, u16)>,
    pub missing: usize,
    pub absent: u32,
}

/// Chunks handed to the writer threads; bounded by WRITE_QUEUE_BYTES.
#[derive(Default)]
struct WriteQueue {
    chunks: VecDeque<Sealed>,
    bytes: u64,
    stop: bool,
    failed: bool,
    /// Request threads waiting for `bytes < WRITE_QUEUE_BYTES`.
    room: Waiters,
    /// The housekeeper waiting for `bytes < HOUSEKEEPER_QUEUE_BYTES` (a
    /// condvar of its own: a waiter woken for room it may not use would
    /// swallow the wake of a request thread that may).
    hk_room: Waiters,
}

/// Threads waiting for room in the write queue below one limit, and the
/// one wake in flight among them (a baton: the waiter it reaches passes it
/// on, `Commit::pass_room`, while room is left). Kept under the queue's lock.
///
/// Invariant (whenever the lock is free): no waiter sleeps while the queue
/// is below its limit unless a woken one (`woken`) is yet to run, and that
/// one passes the wake on when it has taken its room. So a writer thread's
/// pop wakes one sleeper, not all of them (the thundering herd of a
/// `notify_all` per chunk), and no wake is lost.
#[derive(Default)]
struct Waiters {
    /// Waiting and not yet woken.
    asleep: usize,
    /// Woken by `pass_room` and not yet run (0 or 1).
    woken: usize,
}

/// The commit stage. Request threads reach it only through `submit` (hand over
/// sealed chunks) and `flush_covering` (wait for durability); the housekeeper
/// also through `write_checkpoint`, `wipe` and `update_superblock`.
pub(in crate::volume) struct Commit {
    /// Superblocks, checkpoint slots, the intent log ring, and the one media
    /// flush that covers them and the segment store's writes.
    media: Arc<dyn Media>,
    /// Segment data: chunks, tombstones, discards.
    store: Arc<dyn SegmentStore>,
    geo: Geometry,
    counters: Arc<Counters>,
    /// Verified reads' CRC index: each chunk is recorded just before its write.
    crc_index: Arc<CrcIndex>,
    /// The engine's chunk buffers: a written chunk's image goes back here when
    /// the engine has already let go of it.
    pool: Arc<ChunkPool>,
    pub progress: Mutex<Progress>,
    /// `progress.failed` is set (read without the lock by every request).
    has_failed: AtomicBool,
    progress_cv: Condvar,
    /// Waiters for the media flush in progress to end (`flush_covering_log`)
    /// wait here, apart from the waiters for chunks or records to be written
    /// (`progress_cv`): a record written does not wake the waiters of a flush
    /// it cannot change, nor a flush's end the waiters for writes.
    flush_cv: Condvar,
    /// The flusher thread waits here for parked FLUSHes handed to it.
    flusher_cv: Condvar,
    /// The flusher thread runs: a FLUSH may park (`flush_covering_log_then`).
    parking: AtomicBool,
    /// The superblock as last written (leaf lock).
    pub sb: Mutex<Superblock>,
    writeq: Mutex<WriteQueue>,
    /// Writer threads wait here for chunks (one wake per queued chunk).
    writeq_work: Condvar,
    /// Request threads wait here while the queue is full (`WriteQueue::room`).
    writeq_space: Condvar,
    /// The housekeeper waits here while the queue holds its share
    /// (`WriteQueue::hk_room`).
    writeq_hk_space: Condvar,
    /// Writer threads run (background mode): `submit` queues instead of writing.
    pub async_writes: bool,
    /// Freed segments are discarded (`OpenOptions::discard`); turned off for
    /// the mount when the media cannot discard or a discard fails.
    discard_on: AtomicBool,
    /// The intent log's devices (empty: the ring is in the volume's media),
    /// each with whether it is still in use: a write or flush error takes one
    /// of a mirrored pair out (warned, counted) and the other carries on.
    log_devs: Vec<(Arc<dyn Media>, AtomicBool, u16)>,
    /// Mirrors this mount does not write records to (bit = mirror index):
    /// absent at mount, or failed since. Durable in the superblock
    /// (`log_stale`) before a waiter is released on the other mirror alone.
    log_stale: std::sync::atomic::AtomicU32,
    /// Every log device failed while serving: records are no longer written,
    /// and a FLUSH seals the open chunk into the main log instead (the path
    /// of a volume without an intent log). Set once, never cleared (until
    /// the next mount).
    log_lost: AtomicBool,
}

/// Write `sb` to its copy (index generation mod 2) at the head and, when the
/// volume has tail copies, first to the tail copy of the same index, flushed;
/// the head copy is not flushed (the caller flushes before anything depends
/// on it).
pub(in crate::volume) fn write_superblock(
    media: &dyn Media,
    sb: &Superblock,
) -> std::io::Result<()> {
    let index = sb.generation % 2;
    let bytes = sb.encode();
    // The tail twin first, flushed, then the head copy (the caller flushes
    // it): a power cut can tear the head copy or its twin but never both,
    // so `read_superblocks` tells an update torn in flight (the head copy
    // unusable, its twin older or as new) from damage to a durable copy
    // (both unusable) and never falls back for a power cut. Written before
    // one flush, both could be torn, and a fallback with a log gap refused
    // the mount (ARCHITECTURE.md finding E).
    if let Some(t) = sb.tail_copy_offset(index) {
        write_block(media, &bytes, t)?;
        // MUTANT: superblock-twin-same-flush
        media.flush()?;
    }
    write_block(media, &bytes, index * BS)?;
    Ok(())
}

/// Media flushes one `write_superblock` issues itself (the caller's comes on
/// top): one between the tail twin and the head copy.
pub(in crate::volume) fn superblock_write_flushes(sb: &Superblock) -> u64 {
    (sb.tail_offset != 0) as u64
}

/// Media bytes one superblock write takes: its head copy, plus its tail copy.
pub(in crate::volume) fn superblock_write_bytes(sb: &Superblock) -> u64 {
    if sb.tail_offset != 0 {
        2 * BS
    } else {
        BS
    }
}

pub(in crate::volume) fn write_block(
    media: &dyn Media,
    bytes: &[u8],
    offset: u64,
) -> std::io::Result<()> {
    let mut b = AlignedBuf::new(bytes.len().div_ceil(BLOCK_BYTES) * BLOCK_BYTES);
    b[..bytes.len()].copy_from_slice(bytes);
    media.write_at(&b, offset)
}

/// Run FLUSH answers (no lock of the commit stage held).
fn answer_all(answers: Vec<(Answer, Result<bool>)>) {
    for (a, r) in answers {
        a(r);
    }
}

/// Where the commit stage writes: the media (superblocks, checkpoint slots,
/// an in-volume log ring), the segment store over it, and the log devices.
pub(in crate::volume) struct Places {
    pub media: Arc<dyn Media>,
    pub store: Arc<dyn SegmentStore>,
    pub logs: LogDeviceSet,
}

impl Commit {
    /// How many media flushes may run at once: several only on a media
    /// that overlaps them (the store-durable log's PUTs, whose window may
    /// change while open) and without log devices (their records have one
    /// flusher). Read at each use.
    pub fn flushes_at_once(&self) -> usize {
        match self.log_devs.is_empty() {
            // MUTANT: flush-parallelism-ignored s|self.media.flush_parallelism().max(1)|1|
            true => self.media.flush_parallelism().max(1),
            false => 1,
        }
    }

    pub fn new(
        places: Places,
        geo: Geometry,
        counters: Arc<Counters>,
        crc_index: Arc<CrcIndex>,
        pool: Arc<ChunkPool>,
        sb: Superblock,
        next_seq: u64,
        opts: &OpenOptions,
    ) -> Commit {
        let Places { media, store, logs } = places;
        let LogDeviceSet {
            devs: log_devs,
            missing: log_missing,
            absent: log_absent,
        } = logs;
        Counters::add(&counters.log_devices_degraded, log_missing as u64);
        Commit {
            media,
            store,
            geo,
            counters,
            crc_index,
            pool,
            has_failed: AtomicBool::new(false),
            progress: Mutex::new(Progress {
                written_through: next_seq,
                completed: BTreeSet::new(),
                durable: next_seq,
                flushing: 0,
                flushing_upto: next_seq,
                wake_written: u64::MAX,
                failed: None,
                log_written: 0,
                wake_log: u64::MAX,
                log_completed: BTreeSet::new(),
                log_durable: 0,
                announced: 0,
                announced_log: 0,
                flush_ns: 0,
                parked: Vec::new(),
                flusher_busy: false,
                flusher_stop: false,
            }),
            progress_cv: Condvar::new(),
            flush_cv: Condvar::new(),
            flusher_cv: Condvar::new(),
            parking: AtomicBool::new(false),
            sb: Mutex::new(sb),
            writeq: Mutex::new(WriteQueue::default()),
            writeq_work: Condvar::new(),
            writeq_space: Condvar::new(),
            writeq_hk_space: Condvar::new(),
            async_writes: opts.background && !opts.read_only,
            discard_on: AtomicBool::new(opts.discard && !opts.read_only),
            log_devs: log_devs
                .into_iter()
                .map(|(d, m)| (d, AtomicBool::new(true), m))
                .collect(),
            log_stale: std::sync::atomic::AtomicU32::new(log_absent),
            log_lost: AtomicBool::new(false),
        }
    }

    /// Every log device failed: FLUSH seals instead of logging.
    pub fn log_lost(&self) -> bool {
        self.log_lost.load(Ordering::Acquire)
    }

    /// Log device `i` failed at `what`: take it out of use (warned once,
    /// counted). When it was the last one in use, the intent log is lost for
    /// this mount: logged once at error level, counted (`log_fallbacks`),
    /// and every FLUSH from now on seals into the main log (`log_lost`);
    /// waiters for records are woken to do so. The volume keeps serving.
    fn log_device_failed(
        &self,
        i: usize,
        what: std::fmt::Arguments,
        e: &std::io::Error,
    ) -> Result<()> {
        let (d, alive, mirror) = &self.log_devs[i];
        Counters::add(&self.counters.log_device_errors, 1);
        let first = alive.swap(false, Ordering::AcqRel);
        if first {
            Counters::add(&self.counters.log_devices_degraded, 1);
            tracing::warn!(
                "log device {}: {what}: {e}; the intent log runs without it until the next mount",
                d.describe()
            );
        }
        if self
            .log_devs
            .iter()
            .any(|(_, a, _)| a.load(Ordering::Acquire))
        {
            if first {
                // the other mirror now holds records this one lacks: say so
                // durably before any waiter relies on the other alone, so a
                // mount never replays this one's shorter chain by itself
                let bit = 1u32 << mirror;
                self.log_stale.fetch_or(bit, Ordering::AcqRel);
                // MUTANT: stale-mirror-unmarked s|let mark = bit;|let mark = 0;|
                let mark = bit;
                self.update_superblock(|sb| {
                    if let Some(v) = sb.v2.as_mut() {
                        v.log_stale |= mark;
                    }
                })?;
            }
            return Ok(());
        }
        self.fall_back(
            format_args!("log device {} (the last one in use): {what}", d.describe()),
            "with a working log device",
            e,
        );
        Ok(())
    }

    /// The intent log is lost for this mount (the last log device failed, or
    /// a write into the in-volume ring did): the one fallback path. Logged
    /// once at error level, counted (`log_fallbacks`); every FLUSH from now on
    /// seals into the main log (`log_lost`), and waiters for records are
    /// woken to do so (`flush_covering_log` answers them false). Records
    /// already durable stay so; none is counted written after this.
    fn fall_back(&self, why: std::fmt::Arguments, cure: &str, e: &std::io::Error) {
        // MUTANT: log-loss-stops-volume s|if !self.log_lost.swap(true, Ordering::AcqRel) {|if self.fail("log device", e).to_string() != "" && !self.log_lost.swap(true, Ordering::AcqRel) {|
        if !self.log_lost.swap(true, Ordering::AcqRel) {
            Counters::add(&self.counters.log_fallbacks, 1);
            tracing::error!(
                "{why}: {e}; FLUSH and FUA now seal the open chunk into the main log (slower, nothing acknowledged is lost); restart {cure} to log again"
            );
        }
        // record waiters must stop waiting for records that will not come
        let mut p = self.progress.lock();
        self.wake_all();
        // parked ones too: the flusher answers them (they seal)
        self.hand_on(&mut p);
    }

    /// Each log device (mirror order) and whether it is still in use.
    pub fn log_device_state(&self) -> Vec<(String, bool)> {
        self.log_devs
            .iter()
            .map(|(d, a, _)| (d.describe(), a.load(Ordering::Acquire)))
            .collect()
    }

    /// Flush every log device in use (a record is durable once each device
    /// still in use has flushed it: a mirrored record is acknowledged only
    /// after both flushes). Ok(false): no device is left (`log_lost`).
    fn flush_log_devices(&self) -> Result<bool> {
        for (i, (d, alive, _)) in self.log_devs.iter().enumerate() {
            if !alive.load(Ordering::Acquire) {
                continue;
            }
            // MUTANT: logdev-flush-noop s|d.flush()|Ok::<(), std::io::Error>(())|
            let r = d.flush();
            Counters::add(&self.counters.log_flushes, 1);
            if let Err(e) = r {
                self.log_device_failed(i, format_args!("flush"), &e)?;
            }
            // MUTANT: mirror-acked-after-one-flush s|continue;|break;|
            continue;
        }
        Ok(!self.log_lost())
    }

    pub fn check_failed(&self) -> Result<()> {
        // every request asks: an atomic, not the progress lock, on the way
        if !self.has_failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match &self.progress.lock().failed {
            Some(f) => Err(Error::Failed(f.clone())),
            None => Ok(()),
        }
    }

    /// Why the volume stopped, if it did.
    pub fn failure(&self) -> Option<Failure> {
        if !self.has_failed.load(Ordering::Acquire) {
            return None;
        }
        self.progress.lock().failed.clone()
    }

    /// The one fail path: `what` (a media write, flush or size check of the
    /// write side) failed with `cause`. Stops the volume: every later write,
    /// trim, zero, flush and housekeeping round fails with the first reason
    /// (errno from the cause: ENOSPC or EIO), logged once at error level.
    /// Reads go on (`Volume::read`). Takes `progress`: the caller holds no
    /// `sb` (lock order).
    pub fn fail(&self, what: impl std::fmt::Display, cause: &std::io::Error) -> Error {
        self.fail_with(Failure::io(what, cause))
    }

    fn fail_with(&self, f: Failure) -> Error {
        let mut p = self.progress.lock();
        let first = p.failed.is_none();
        if first {
            p.failed = Some(f.clone());
            self.has_failed.store(true, Ordering::Release);
        }
        let kept = p.failed.clone().expect("set above");
        let answers = self.take_answered(&mut p);
        drop(p);
        self.wake_all();
        answer_all(answers);
        if first {
            tracing::error!(
                "volume stopped, writes now answer {}, reads of stored data go on: {}",
                if f.errno == libc::ENOSPC {
                    "ENOSPC"
                } else {
                    "EIO"
                },
                f.why
            );
        }
        Error::Failed(kept)
    }

    pub fn durable_seq(&self) -> u64 {
        self.progress.lock().durable
    }

    /// Start the writer threads (background mode).
    pub fn start_writers(self: &Arc<Self>) -> Result<Vec<JoinHandle<()>>> {
        let mut writers = Vec::new();
        if self.async_writes {
            let w = self.clone();
            match std::thread::Builder::new()
                .name("sluice-flusher".into())
                .spawn(move || w.flusher())
            {
                Ok(h) => {
                    writers.push(h);
                    self.parking.store(true, Ordering::Release);
                }
                Err(e) => return Err(Error::Io(e)),
            }
            for i in 0..WRITER_THREADS {
                let w = self.clone();
                match std::thread::Builder::new()
                    .name(format!("sluice-writer-{i}"))
                    .spawn(move || w.writer())
                {
                    Ok(h) => writers.push(h),
                    Err(e) => {
                        self.stop_writer_threads(writers);
                        return Err(Error::Io(e));
                    }
                }
            }
        }
        Ok(writers)
    }

    /// Writer threads finish what is queued, then exit.
    pub fn stop_writer_threads(&self, writers: Vec<JoinHandle<()>>) {
        self.parking.store(false, Ordering::Release);
        self.progress.lock().flusher_stop = true;
        self.flusher_cv.notify_all();
        self.writeq.lock().stop = true;
        self.writeq_work.notify_all();
        self.writeq_space.notify_all();
        self.writeq_hk_space.notify_all();
        for h in writers {
            let _ = h.join();
        }
    }

    /// Hand sealed chunks to the writer threads (background mode), or write them
    /// now. Either way every caller that needs them durable waits in
    /// `flush_covering`, and reads find them in `Core::inflight` meanwhile.
    pub fn submit(&self, out: Vec<Sealed>) -> Result<()> {
        self.submit_within(out, WRITE_QUEUE_BYTES)
    }

    /// `submit` for the housekeeper: waits while the queue holds
    /// `HOUSEKEEPER_QUEUE_BYTES`, leaving the rest to request threads.
    pub fn submit_housekeeping(&self, out: Vec<Sealed>) -> Result<()> {
        self.submit_within(out, HOUSEKEEPER_QUEUE_BYTES)
    }

    /// `submit` for the chunks a reuse barrier or a checkpoint sealed (a
    /// part-filled chunk per slot, and on a compressed volume what was
    /// staged): queued without waiting for room. Their caller waits in
    /// `flush_covering` next for every chunk queued before them anyway;
    /// waiting for room first only let request threads' chunks go ahead
    /// (the housekeeper's share is below theirs), which held the first
    /// checkpoints of a run 30-160 ms each (issue 22). Bounded: one plan's
    /// seals, and at most one plan at a time (the round lock). Queued by
    /// the plan on the housekeeper's thread, before the next victim's GC
    /// chunks that follow them in their slot's chain.
    pub fn submit_seals(&self, out: Vec<Sealed>) -> Result<()> {
        self.submit_within(out, u64::MAX)
    }

    /// `submit` that does not wait for queue space (writer threads only):
    /// for chunks a streamed host write holds claims in, handed on before
    /// it writes them so that their headers go out beside its data. Their
    /// writer waits for those claims (`Placed::wait_idle`), so waiting here
    /// for the writers to drain the queue could wait for itself; the caller
    /// waits afterwards (`wait_queue_space`), having written its claims.
    pub fn submit_now(&self, out: Vec<Sealed>) -> Result<()> {
        assert!(
            self.async_writes,
            "only writer threads take chunks unwritten"
        );
        self.submit_within(out, u64::MAX)
    }

    /// Wait while the write queue holds `WRITE_QUEUE_BYTES` (as `submit`
    /// does before it queues).
    pub fn wait_queue_space(&self) -> Result<()> {
        let mut q = self.writeq.lock();
        let r = self.wait_room(&mut q, WRITE_QUEUE_BYTES);
        // it took no room: what woke it goes on to the next waiter
        self.pass_room(&mut q);
        r
    }

    fn submit_within(&self, out: Vec<Sealed>, limit: u64) -> Result<()> {
        if !self.async_writes || out.is_empty() {
            return self.write_sealed(out);
        }
        let mut q = self.writeq.lock();
        for s in out {
            self.wait_room(&mut q, limit)?;
            q.bytes += s.bytes().len() as u64;
            q.chunks.push_back(s);
            self.writeq_work.notify_one();
        }
        self.pass_room(&mut q);
        Ok(())
    }

    /// Wait (queue lock held, released while asleep) until the queue holds
    /// less than `limit` bytes; Err once the queue stopped or failed (whose
    /// paths wake every waiter). `limit` is `WRITE_QUEUE_BYTES` (request
    /// threads), `HOUSEKEEPER_QUEUE_BYTES` or no limit (`submit_now`).
    fn wait_room(&self, q: &mut MutexGuard<'_, WriteQueue>, limit: u64) -> Result<()> {
        while q.bytes >= limit && !q.failed && !q.stop {
            // MUTANT: hk-shares-request-condvar s|limit < WRITE_QUEUE_BYTES|false|
            let hk = limit < WRITE_QUEUE_BYTES;
            let (w, cv) = match hk {
                true => (&mut q.hk_room, &self.writeq_hk_space),
                false => (&mut q.room, &self.writeq_space),
            };
            w.asleep += 1;
            cv.wait(q);
            if q.failed || q.stop {
                break;
            }
            // parking_lot wakes no waiter spuriously: this is the baton
            let w = match hk {
                true => &mut q.hk_room,
                false => &mut q.room,
            };
            // MUTANT: baton-kept s|w.woken -= 1;|();|
            w.woken -= 1;
        }
        if q.failed || q.stop {
            // `check_failed` takes `progress`: not under the queue's lock
            MutexGuard::unlocked(q, || self.check_failed())?;
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// A waiter leaves (it queued its chunks, or found room and queues
    /// none): while room is left below a limit and nobody woken is on the
    /// way, wake the next sleeper of that limit (one: each takes its room,
    /// then passes the wake on, so no wake is lost and no herd forms).
    fn pass_room(&self, q: &mut MutexGuard<'_, WriteQueue>) {
        // MUTANT: wake-without-chain s|self.wake_room(q);|();|
        self.wake_room(q);
    }

    /// Wake one sleeper of each limit the queue is below, unless one woken
    /// before is still on its way (it passes the wake on): after a writer
    /// thread's pop and when a waiter leaves.
    fn wake_room(&self, q: &mut WriteQueue) {
        for (w, limit, cv) in [
            (&mut q.room, WRITE_QUEUE_BYTES, &self.writeq_space),
            (
                &mut q.hk_room,
                HOUSEKEEPER_QUEUE_BYTES,
                &self.writeq_hk_space,
            ),
        ] {
            if q.bytes < limit && w.asleep > 0 && w.woken == 0 {
                w.asleep -= 1;
                w.woken += 1;
                // under the lock: parking_lot moves the sleeper to the
                // lock's queue, and our unlock wakes it (one futex wake)
                cv.notify_one();
            }
        }
    }

    /// A writer thread: write queued chunks until told to stop and the queue is empty.
    fn writer(self: Arc<Self>) {
        loop {
            let s = {
                let mut q = self.writeq.lock();
                loop {
                    if let Some(s) = q.chunks.pop_front() {
                        q.bytes -= s.bytes().len() as u64;
                        // one sleeper per chunk's room, not all of them
                        self.wake_room(&mut q);
                        break s;
                    }
                    if q.stop || q.failed {
                        return;
                    }
                    self.writeq_work.wait(&mut q);
                }
            };
            if self.write_sealed(vec![s]).is_err() {
                // the volume has failed (write_sealed said why); wake everyone
                let mut q = self.writeq.lock();
                q.failed = true;
                q.chunks.clear();
                q.bytes = 0;
                drop(q);
                self.writeq_work.notify_all();
                self.writeq_space.notify_all();
                self.writeq_hk_space.notify_all();
                return;
            }
        }
    }

    /// Write sealed chunks to the media and record them as written.
    pub fn write_sealed(&self, out: Vec<Sealed>) -> Result<()> {
        if !out.is_empty() {
            self.check_failed()?;
        }
        for s in out {
            // a sealed chunk goes to the media exactly once, after its seal
            assert!(s.blocks >= 1 && s.start + s.blocks <= self.geo.segment_blocks);
            // reads of its blocks go to the media only after this write
            self.crc_index.record_chunk(s.segment, s.start, s.bytes());
            let data = match self.write_chunk(&s) {
                Ok(d) => d,
                Err(e) => {
                    return Err(self.fail(
                        format_args!(
                            "writing chunk {} at segment {} block {}",
                            s.seq, s.segment, s.start
                        ),
                        &e,
                    ))
                }
            };
            Counters::add(&self.counters.media_chunk_header_bytes, BS);
            Counters::add(
                if s.stream == Stream::Gc {
                    &self.counters.media_gc_data_bytes
                } else {
                    &self.counters.media_user_data_bytes
                },
                data,
            );
            Counters::add(&self.counters.chunks_sealed, 1);
            let mut p = self.progress.lock();
            assert!(s.seq >= p.written_through, "chunk {} written twice", s.seq);
            let fresh = p.completed.insert(s.seq);
            assert!(fresh, "chunk {} written twice", s.seq);
            while p.completed.first() == Some(&p.written_through) {
                p.completed.pop_first();
                p.written_through += 1;
            }
            if p.written_through >= p.wake_written {
                p.wake_written = u64::MAX;
                self.progress_cv.notify_all();
            }
            drop(p);
            self.pool.release(s.image);
        }
        Ok(())
    }

    /// Write a sealed chunk's image; returns the data bytes written. Data
    /// blocks a version 3 record already wrote at their places (`placed`)
    /// are skipped: for a chunk filled by FLUSHed writes, the header alone.
    /// Blocks a streamed host write claimed (`Placed::claim`) are skipped
    /// too, and the chunk counts as written only once their placing writes
    /// have ended (`wait_idle`); a claimed block whose write failed is not
    /// in the image, so the chunk is not written (Err).
    fn write_chunk(&self, s: &Sealed) -> std::io::Result<u64> {
        let Some(placed) = &s.placed else {
            self.store.write(s.segment, s.start, s.bytes())?;
            return Ok((s.blocks as u64 - 1) * BS);
        };
        let b = BLOCK_BYTES;
        let runs = placed.unclaimed(s.blocks - 1);
        let mut data = 0;
        match runs.first() {
            // the header and the first unplaced run in one write when they touch
            Some(&(0, to)) => {
                self.store
                    .write(s.segment, s.start, &s.bytes()[..(1 + to as usize) * b])?;
                data += to as u64 * BS;
            }
            _ => self.store.write(s.segment, s.start, &s.bytes()[..b])?,
        }
        let mut write_runs = |runs: &[(u32, u32)]| -> std::io::Result<()> {
            for &(from, to) in runs.iter().filter(|r| r.0 > 0) {
                let (f, t) = (1 + from as usize, 1 + to as usize);
                self.store
                    .write(s.segment, s.start + f as u32, &s.bytes()[f * b..t * b])?;
                data += (to - from) as u64 * BS;
            }
            Ok(())
        };
        write_runs(&runs)?;
        // the streamed blocks: written by their host write. They are not in
        // the image (log.rs), so one whose placing write failed (the volume
        // failed with it, `place`) leaves the chunk unwritten
        // MUTANT: seal-skips-claim-wait s|placed.wait_idle();|();|
        placed.wait_idle();
        if let Some(&(from, to)) = placed.claimed_unplaced(s.blocks - 1).first() {
            return Err(std::io::Error::other(format!(
                "streamed data blocks {from}..{to} of the chunk were never written"
            )));
        }
        Ok(data)
    }

    /// Write streamed data blocks of open user chunks at their places (a
    /// large host write, `Shared::append_run`), all in one submission when
    /// the store can: `runs` each name the chunk's `Placed` map, its data
    /// indexes `from..to` (claimed by the caller under the engine lock),
    /// the segment and block of the first, and the bytes. Every claim is
    /// ended (`Placed::finish`) whatever happens, so a seal waiting for
    /// them never hangs; a write error stops the volume (`fail`), as a
    /// chunk write's does.
    ///
    /// `rec`: a version 3 record that names these runs' blocks (and none
    /// that is not placed, `Ring::plan_streamed`), written in the same
    /// submission; the record counts written only once the whole
    /// submission has completed, so a FLUSH that waits for it finds the
    /// data on the media too. An error there: the data is written again
    /// alone; if that fails too the volume stops, else the record's write
    /// failed and the volume falls back to seal-on-FLUSH (`fall_back`, as
    /// `write_record` does). While the log is lost (`log_lost`) the record
    /// is not written (its waiters seal).
    pub fn place(&self, runs: &[PlaceRun<'_>], rec: Option<&PlannedRecord>) -> Result<()> {
        let rec = rec.filter(|_| !self.log_lost());
        assert!(
            rec.is_none() || self.log_devs.is_empty(),
            "a streamed write's record goes to the volume's own ring"
        );
        // a write error into the ring alone (the data landed) does not stop
        // the volume: the log is lost, FLUSH seals (`write_record`'s rule)
        let mut rec_failed = None;
        let r = match self.check_failed() {
            Err(e) => Err(e),
            Ok(()) => {
                let pieces: Vec<(u32, u32, &[u8])> =
                    runs.iter().map(|r| (r.segment, r.block, r.bytes)).collect();
                let res = match rec {
                    // MUTANT: streamed-write-dropped s|self.store.write_pieces(&pieces)|Ok::<(), std::io::Error>(())|
                    None => self.store.write_pieces(&pieces),
                    Some(r) => match self.store.write_pieces_with(&pieces, (&r.image, r.at)) {
                        Some(Ok(())) => Ok(()),
                        // the data's error or the record's: the data again,
                        // alone; if it lands, the ring failed (below)
                        // MUTANT: streamed-record-error-stops s|self.store.write_pieces(&pieces).map(|Err::<(), std::io::Error>(std::io::Error::other("stop")).map(|
                        Some(Err(e)) => self.store.write_pieces(&pieces).map(|()| {
                            rec_failed = Some(e);
                        }),
                        None => self.store.write_pieces(&pieces).map(|()| {
                            rec_failed = self.media.write_at(&r.image, r.at).err();
                        }),
                    },
                };
                res.map_err(|e| {
                    let r = &runs[0];
                    self.fail(
                        format_args!(
                            "writing {} streamed data blocks at segment {} block {}",
                            runs.iter().map(|r| r.to - r.from).sum::<u32>(),
                            r.segment,
                            r.block
                        ),
                        &e,
                    )
                })
            }
        };
        for run in runs {
            run.placed.finish(run.from, run.to, r.is_ok());
            if r.is_ok() {
                Counters::add(&self.counters.media_user_data_bytes, run.bytes.len() as u64);
                Counters::add(&self.counters.streamed_blocks, (run.to - run.from) as u64);
            }
        }
        if let (Ok(()), Some(e), Some(rec)) = (&r, &rec_failed, rec) {
            // not counted written (it may be on the media: replay verifies
            // it); its waiters seal
            self.fall_back(
                format_args!(
                    "intent log ring in {}: writing streamed record {} at byte {}",
                    self.media.describe(),
                    rec.seq,
                    rec.at
                ),
                "once the media takes writes there",
                e,
            );
            return Ok(());
        }
        // a record naming blocks other writes were placing (the last write
        // of a burst) counts written only once they are on the media too:
        // else a FLUSH could be answered with the record durable and a block
        // it names not, and replay would end the log at it, losing every
        // write it carries (docs/intent-log.md §4.13)
        let r = match (r, rec.and_then(|x| x.company.as_ref())) {
            // MUTANT: streamed-record-before-company s|(Ok(()), Some(c)) => self.company_placed(c),|(Ok(()), Some(_)) => Ok(()),|
            (Ok(()), Some(c)) => self.company_placed(c),
            (r, _) => r,
        };
        if let (Ok(()), Some(rec)) = (&r, rec) {
            Counters::add(&self.counters.streamed_records, 1);
            self.record_done(rec);
        }
        r
    }

    /// Wait until the placing writes of the other writes a streamed record
    /// names have ended (`Placed::wait_idle`: every claim of the chunk,
    /// those taken after the record was planned too, at most a chunk's
    /// blocks); an error when one of them did not place its blocks (the
    /// volume has failed with that write).
    fn company_placed(&self, c: &intent::Company) -> Result<()> {
        c.placed.wait_idle();
        if (c.from..c.to).all(|i| c.placed.get(i)) {
            return Ok(());
        }
        self.check_failed()?;
        Err(self.fail(
            format_args!(
                "a streamed intent log record names data blocks {}..{} of its chunk",
                c.from, c.to
            ),
            &std::io::Error::other("a block it names was not placed"),
        ))
    }

    /// Streamed host writes may write intent log records (`place`): the
    /// ring is the volume's own (no log devices) and still in use.
    pub fn streams_records(&self) -> bool {
        self.log_devs.is_empty() && !self.log_lost()
    }

    /// `blocks` streamed blocks are written from a copy (their caller's
    /// buffer was not aligned for direct IO).
    pub fn count_streamed_copy(&self, blocks: u64) {
        Counters::add(&self.counters.streamed_copied_blocks, blocks);
    }

    /// A buffer from the engine's chunk pool (content arbitrary; back with
    /// `recycle`).
    pub fn pool_buf(&self) -> AlignedBuf {
        self.pool.get()
    }

    /// Give a buffer taken from the engine's chunk pool back to it.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.put(buf);
    }

    /// The intent log's records start at `seq` (mount).
    pub fn start_log(&self, seq: u64) {
        let mut p = self.progress.lock();
        p.log_written = seq;
        p.log_durable = seq;
    }

    /// Write one intent log record into the ring (no flush: the waiter's
    /// `flush_covering_log` shares one media flush with every other waiter).
    ///
    /// A write error into the in-volume ring does not stop the volume: the
    /// ring's bytes are the log's only, so the volume falls back to
    /// seal-on-FLUSH as after the last log device's failure (`fall_back`).
    /// A flush error is another matter: the in-volume ring shares the media
    /// flush with chunks and superblocks, so it stops the volume (`fail`).
    pub fn write_record(&self, r: &PlannedRecord) -> Result<()> {
        self.check_failed()?;
        if self.log_lost() {
            // planned before the log was lost: never written (its waiter seals)
            return Ok(());
        }
        // the record already went out with its data (`write_with`)
        let mut record_out = false;
        if let Some(d) = &r.data {
            // version 3: the data at its places and the record, in one
            // submission when the store shares the volume's media (a flat
            // store: one device round trip per FLUSH), else the data first.
            // The two are unordered before the one media flush that covers
            // both (`flush_covering_log`); replay verifies the CRCs a record
            // names at their places, so a record that reached the media
            // without its data ends the log there: it was never acknowledged,
            // which needs both durable (docs/intent-log.md §3)
            let with = self.log_devs.is_empty().then(|| {
                self.store
                    .write_with(d.segment, d.block, d.bytes(), (&r.image, r.at))
            });
            let res = match with.flatten() {
                Some(res) => {
                    record_out = true;
                    // MUTANT: batch-error-acked s|res|res.or(Ok::<(), std::io::Error>(()))|
                    res
                }
                None => self.store.write(d.segment, d.block, d.bytes()),
            };
            match res {
                Ok(()) => {
                    d.placed.set(d.from, d.to);
                    Counters::add(&self.counters.media_user_data_bytes, d.bytes().len() as u64);
                }
                Err(e) => {
                    self.fall_back(
                        format_args!(
                            "intent log record {} or its data in {} at segment {} block {}",
                            r.seq,
                            self.media.describe(),
                            d.segment,
                            d.block
                        ),
                        "once the media takes writes there",
                        &e,
                    );
                    // the record is not counted written (it may be on the
                    // media, its data not: replay ends there): its waiter
                    // seals the chunk, whose seal writes every block not placed
                    return Ok(());
                }
            }
        }
        if self.log_devs.is_empty() && !record_out {
            // MUTANT: ring-error-acked s|self.media.write_at(&r.image, r.at) {|self.media.write_at(&r.image, r.at).or(Ok::<(), std::io::Error>(())) {|
            if let Err(e) = self.media.write_at(&r.image, r.at) {
                self.fall_back(
                    format_args!(
                        "intent log ring in {}: writing record {} at byte {}",
                        self.media.describe(),
                        r.seq,
                        r.at
                    ),
                    "once the media takes writes there",
                    &e,
                );
            }
        }
        for (i, (d, alive, _)) in self.log_devs.iter().enumerate() {
            if !alive.load(Ordering::Acquire) {
                continue;
            }
            if let Err(e) = d.write_at(&r.image, r.at) {
                self.log_device_failed(
                    i,
                    format_args!("writing intent log record {} at byte {}", r.seq, r.at),
                    &e,
                )?;
            }
        }
        if self.log_lost() {
            // written nowhere: never counted as written (its waiter seals)
            return Ok(());
        }
        self.record_done(r);
        Ok(())
    }

    /// Record `r` is written: count it, and move `log_written` over every
    /// record written without a gap before it (records complete in any
    /// order; a waiter needs all below its target).
    fn record_done(&self, r: &PlannedRecord) {
        Counters::add(&self.counters.media_log_bytes, r.image.len() as u64);
        Counters::add(&self.counters.log_records, 1);
        let mut p = self.progress.lock();
        assert!(r.seq >= p.log_written, "record {} written twice", r.seq);
        let fresh = p.log_completed.insert(r.seq);
        assert!(fresh, "record {} written twice", r.seq);
        while p.log_completed.first() == Some(&p.log_written) {
            p.log_completed.pop_first();
            p.log_written += 1;
        }
        if p.log_written >= p.wake_log {
            p.wake_log = u64::MAX;
            self.progress_cv.notify_all();
        }
    }

    /// A FLUSH is about to write the chunks below `target` or the records
    /// below `rec_target`, and will then wait for them to be durable: a
    /// flusher that starts meanwhile may wait for them to be written, so that
    /// one media flush covers both (`company_wait`).
    pub fn announce(&self, target: u64, rec_target: u64) {
        let mut p = self.progress.lock();
        p.announced = p.announced.max(target);
        p.announced_log = p.announced_log.max(rec_target);
    }

    /// Group commit's wait for company (ZFS's `zfs_commit_timeout_pct`): a
    /// flusher about to start a media flush while another FLUSH's chunk or
    /// record is being written (`announce`) waits for those writes, at most
    /// `COMPANY_WAIT_PCT` percent of a recent media flush, so that its flush
    /// covers them too instead of that FLUSH waiting for this flush and then
    /// starting one of its own. Alone (nothing announced beyond what is
    /// written: QD1) it does not wait at all. Returns with the lock held;
    /// the caller checks everything again (true: it waited). Only a delay: what the flush then
    /// covers is still read after the wait (`written_through`, `log_written`).
    fn company_wait(&self, p: &mut parking_lot::MutexGuard<'_, Progress>) -> bool {
        let chunks = p.announced > p.written_through;
        let records = p.announced_log > p.log_written;
        // MUTANT: company-wait-alone s|let alone = !chunks && !records;|let alone = false;|
        let alone = !chunks && !records;
        if alone || p.flush_ns == 0 {
            return false;
        }
        let budget = std::time::Duration::from_nanos(p.flush_ns * COMPANY_WAIT_PCT / 100);
        let deadline = std::time::Instant::now() + budget.min(COMPANY_WAIT_MAX);
        let (upto, log_upto) = (p.announced, p.announced_log);
        if chunks {
            p.wake_written = p.wake_written.min(upto);
        }
        if records {
            p.wake_log = p.wake_log.min(log_upto);
        }
        Counters::add(&self.counters.group_commit_waits, 1);
        while (p.written_through < upto || p.log_written < log_upto)
            && p.failed.is_none()
            && !self.log_lost()
        {
            if self.progress_cv.wait_until(p, deadline).timed_out() {
                break;
            }
        }
        true
    }

    /// Group commit: return once every chunk with seq < target is durable. One
    /// media flush serves every caller whose chunks were written before it began.
    pub fn flush_covering(&self, target: u64) -> Result<()> {
        self.flush_covering_log(target, 0).map(|_| ())
    }

    /// `flush_covering` that also waits for every intent log record with seq <
    /// `rec_target` to be durable: written, then covered by a media flush that
    /// began after its write (one flush serves chunks and records alike).
    /// Ok(false): the chunks are durable but the records never will be (every
    /// log device failed, `log_lost`): the caller must seal instead.
    pub fn flush_covering_log(&self, target: u64, rec_target: u64) -> Result<bool> {
        // with no answer to leave, it never parks: always Some
        self.cover(target, rec_target, &mut None)
            .unwrap_or(Ok(true))
    }

    /// `flush_covering_log`, answered through `answer` instead of returned.
    /// Whenever the FLUSH finds a media flush running (or the flusher thread
    /// at work), on entry or after any wait of its own (for its writes, or
    /// for company), it parks and this returns at once: the thread that ends
    /// the flush making it durable answers it, so the caller (an NBD
    /// connection's reader) neither sleeps nor is woken for it. Else it
    /// flushes here and answers before returning (alone, QD1: no hand-off).
    pub fn flush_covering_log_then(&self, target: u64, rec_target: u64, answer: Answer) {
        let mut answer = Some(answer);
        if let Some(r) = self.cover(target, rec_target, &mut answer) {
            if let Some(a) = answer {
                a(r);
            }
        }
    }

    /// Park the FLUSH whose answer is in `answer` (taken) when a media flush
    /// runs or the flusher thread is at work: either answers it once a flush
    /// that began after its writes has ended (`take_answered`), and the
    /// invariant of `Progress::parked` holds. Its chunks and records need
    /// not be written yet: the threads writing them wait for them, and the
    /// flusher waits for them to be written before it flushes. `late`: not
    /// the FLUSH's first look in `cover` (counted apart).
    fn park(
        &self,
        p: &mut Progress,
        target: u64,
        rec_target: u64,
        answer: &mut Option<Answer>,
        late: bool,
    ) -> bool {
        let company = p.flushing > 0 || p.flusher_busy;
        if !company
            || !self.parking.load(Ordering::Acquire)
            || p.failed.is_some()
            || self.log_lost()
        {
            return false;
        }
        // (None: a blocking flush_covering_log, nothing to park)
        let Some(answer) = answer.take() else {
            return false;
        };
        p.parked.push(Parked {
            target,
            rec_target,
            answer,
        });
        Counters::add(&self.counters.flushes_parked, 1);
        if late {
            Counters::add(&self.counters.flushes_parked_late, 1);
        }
        true
    }

    /// The group commit of `flush_covering_log`, parking the FLUSH (`park`)
    /// instead of sleeping when `answer` holds one and a flush runs: None
    /// when parked, else the result (`answer` left in place).
    fn cover(
        &self,
        target: u64,
        rec_target: u64,
        answer: &mut Option<Answer>,
    ) -> Option<Result<bool>> {
        let mut p = self.progress.lock();
        let mut waited = false;
        // not the FLUSH's first look: it slept here (for writes, company or
        // a flush) or ran a flush that did not cover it
        let mut late = false;
        loop {
            if let Some(f) = &p.failed {
                return Some(Err(Error::Failed(f.clone())));
            }
            let lost = self.log_lost() && p.log_durable < rec_target;
            // MUTANT: flush-before-record s|p.log_durable >= rec_target|true|
            if p.durable >= target && (p.log_durable >= rec_target || lost) {
                return Some(Ok(!lost));
            }
            // a flush running (or the flusher busy) answers it: no sleep here,
            // whether this is its first look or a flush began while it slept
            // MUTANT: flush-parks-only-on-entry s|if self.park(&mut p, target, rec_target, answer, late) {|if !late && self.park(&mut p, target, rec_target, answer, late) {|
            if self.park(&mut p, target, rec_target, answer, late) {
                return None;
            }
            if p.written_through < target || (p.log_written < rec_target && !lost) {
                if p.written_through < target {
                    p.wake_written = p.wake_written.min(target);
                }
                if p.log_written < rec_target && !lost {
                    p.wake_log = p.wake_log.min(rec_target);
                }
                self.progress_cv.wait(&mut p);
                late = true;
                continue;
            }
            let most = self.flushes_at_once();
            if p.flushing > 0 && (p.flushing >= most || p.flushing_upto >= target) {
                // a flush in progress covers this target, or as many run
                // as the media takes: each wakes everyone when it ends
                self.flush_cv.wait(&mut p);
                late = true;
                continue;
            }
            if !waited {
                // once per call: then flush whatever has come
                waited = true;
                late |= self.company_wait(&mut p);
                continue;
            }
            p.flushing += 1;
            let upto = p.written_through;
            p.flushing_upto = p.flushing_upto.max(upto);
            // what this flush covers is what is written now, never what
            // is announced (a record still in flight is the next flush's)
            // MUTANT: flush-covers-announced s|let log_upto = p.log_written;|let log_upto = p.log_written.max(p.announced_log);|
            let log_upto = p.log_written;
            // with log devices, the media flush is for chunks and the log
            // devices' for records: each only when it has something to make
            // durable (a FLUSH that only logged needs no media flush)
            let main = self.log_devs.is_empty() || upto > p.durable;
            let logs = !self.log_devs.is_empty() && log_upto > p.log_durable && !lost;
            drop(p);
            let began = std::time::Instant::now();
            let mut r = Ok(());
            if main {
                r = self.media.flush();
                Counters::add(&self.counters.media_flushes, 1);
            }
            let logs_flushed = match r.is_ok() && logs {
                true => match self.flush_log_devices() {
                    Ok(ok) => ok,
                    Err(e) => {
                        p = self.progress.lock();
                        p.flushing -= 1;
                        drop(p);
                        self.wake_all();
                        return Some(Err(e));
                    }
                },
                false => r.is_ok(),
            };
            let took = began.elapsed().as_nanos() as u64;
            p = self.progress.lock();
            p.flushing -= 1;
            if main {
                // a moving average (1/8 weight) of the media flush's time
                p.flush_ns = match p.flush_ns {
                    0 => took,
                    f => f - f / 8 + took / 8,
                };
            }
            match r {
                Ok(()) => {
                    assert!(upto <= p.written_through, "durable passes written");
                    p.durable = p.durable.max(upto);
                    if logs_flushed && (logs || self.log_devs.is_empty()) {
                        p.log_durable = p.log_durable.max(log_upto);
                    }
                }
                Err(e) => {
                    drop(p);
                    return Some(Err(self.fail("media flush", &e)));
                }
            }
            self.flush_cv.notify_all();
            // the parked FLUSHes this flush made durable are answered from
            // here (no wake-up of a thread to answer them); the rest go to
            // the flusher thread when no other flush runs to take them
            let answers = self.take_answered(&mut p);
            self.hand_on(&mut p);
            if !answers.is_empty() {
                drop(p);
                answer_all(answers);
                p = self.progress.lock();
            }
            late = true;
        }
    }

    /// Take the parked FLUSHes that can be answered now: durable (a media
    /// flush that began after their writes ended), or the volume failed, or
    /// their chunks durable and their records lost with the log.
    fn take_answered(&self, p: &mut Progress) -> Vec<(Answer, Result<bool>)> {
        if p.parked.is_empty() {
            return Vec::new();
        }
        let lost = self.log_lost();
        let mut out = Vec::new();
        let mut i = 0;
        while i < p.parked.len() {
            let w = &p.parked[i];
            let res = if let Some(f) = &p.failed {
                Some(Err(Error::Failed(f.clone())))
            } else if p.durable >= w.target
                // MUTANT: parked-answered-before-record s|&& p.log_durable >= w.rec_target|&& true|
                && p.log_durable >= w.rec_target
            {
                Some(Ok(true))
            } else if p.durable >= w.target && lost {
                Some(Ok(false))
            } else {
                None
            };
            match res {
                Some(r) => out.push((p.parked.swap_remove(i).answer, r)),
                None => i += 1,
            }
        }
        out
    }

    /// Parked FLUSHes left and no media flush running to answer them: wake
    /// the flusher thread (once; it stays busy until none is parked).
    fn hand_on(&self, p: &mut Progress) {
        if !p.parked.is_empty() && p.flushing == 0 && !p.flusher_busy {
            p.flusher_busy = true;
            self.flusher_cv.notify_one();
        }
    }

    /// The flusher thread (background mode): makes the parked FLUSHes
    /// durable, one group commit after another, while any is parked, and
    /// answers each from the flush that covers it. Exits when stopped and
    /// nothing is parked.
    fn flusher(&self) {
        let mut p = self.progress.lock();
        loop {
            let answers = self.take_answered(&mut p);
            if !answers.is_empty() {
                drop(p);
                answer_all(answers);
                p = self.progress.lock();
                continue;
            }
            if p.parked.is_empty() {
                p.flusher_busy = false;
                if p.flusher_stop {
                    return;
                }
                self.flusher_cv.wait(&mut p);
                continue;
            }
            p.flusher_busy = true;
            let target = p.parked.iter().map(|w| w.target).max().unwrap_or(0);
            let rec_target = p.parked.iter().map(|w| w.rec_target).max().unwrap_or(0);
            drop(p);
            // its flushes' ends answer the parked FLUSHes they cover; an
            // error is answered to them all by `fail`
            let _ = self.flush_covering_log(target, rec_target);
            p = self.progress.lock();
        }
    }

    /// Wake every waiter of `flush_covering_log` (the volume failed, or the
    /// intent log was lost): each checks its condition again.
    fn wake_all(&self) {
        self.progress_cv.notify_all();
        self.flush_cv.notify_all();
    }

    /// Write the superblock (next generation, alternate copy) and flush it.
    pub fn update_superblock(&self, f: impl FnOnce(&mut Superblock)) -> Result<()> {
        self.check_failed()?;
        let mut sb = self.sb.lock();
        let mut next = sb.clone();
        next.generation += 1;
        f(&mut next);
        assert!(
            next.durable_seq >= sb.durable_seq,
            "superblock durable point falls"
        );
        let r = write_superblock(&*self.media, &next).and_then(|_| self.media.flush());
        if let Err(e) = r {
            // `fail` takes `progress`, which comes before `sb` in the lock order
            drop(sb);
            let what = format!("writing superblock copy {}", next.generation % 2);
            return Err(self.fail(what, &e));
        }
        Counters::add(
            &self.counters.media_superblock_bytes,
            superblock_write_bytes(&next),
        );
        Counters::add(
            &self.counters.media_flushes,
            1 + superblock_write_flushes(&next),
        );
        *sb = next;
        Ok(())
    }

    /// Write a tombstone (`chunk::tombstone`) over the first block of each
    /// segment and flush.
    pub fn wipe(&self, segs: &[u32]) -> Result<()> {
        self.check_failed()?;
        let uuid = self.sb.lock().uuid;
        let mut tomb = AlignedBuf::new(BLOCK_BYTES);
        for &s in segs {
            crate::format::chunk::tombstone(&mut tomb, &uuid, s);
            if let Err(e) = self.store.wipe(s, &tomb) {
                return Err(self.fail(format_args!("wiping segment {s}"), &e));
            }
            Counters::add(&self.counters.media_superblock_bytes, BS);
        }
        if let Err(e) = self.media.flush() {
            return Err(self.fail("media flush", &e));
        }
        Counters::add(&self.counters.media_flushes, 1);
        Ok(())
    }

    /// The media of superblocks and checkpoint slots, for reads only (scrub
    /// of its metadata copies).
    pub fn media(&self) -> &dyn Media {
        &*self.media
    }

    /// Write a checkpoint image (header block + body, built by the engine) to
    /// the slot the superblock does not name, flush it, then make it current.
    /// The caller has made every chunk below `next_seq` durable.
    pub fn write_checkpoint(&self, img: &AlignedBuf, next_seq: u64, clean: bool) -> Result<()> {
        assert!(
            self.durable_seq() >= next_seq,
            "checkpoint before its chunks"
        );
        self.check_failed()?;
        self.check_media_size()?;
        let slot = if self.sb.lock().checkpoint_slot == 0 {
            1
        } else {
            0
        };
        let r = self
            .media
            .write_at(img, self.geo.checkpoint_offset[slot as usize])
            .and_then(|_| self.media.flush());
        if let Err(e) = r {
            return Err(self.fail(format_args!("writing checkpoint slot {slot}"), &e));
        }
        Counters::add(&self.counters.media_checkpoint_bytes, img.len() as u64);
        Counters::add(&self.counters.media_flushes, 1);
        self.update_superblock(|sb| {
            sb.checkpoint_slot = slot;
            sb.checkpoint_next_seq = next_seq;
            sb.durable_seq = sb.durable_seq.max(next_seq);
            if clean {
                sb.flags |= crate::format::superblock::FLAG_CLEAN;
            } else {
                sb.flags &= !crate::format::superblock::FLAG_CLEAN;
            }
        })?;
        Counters::add(&self.counters.checkpoints, 1);
        Ok(())
    }

    /// The media must not have shrunk under the volume (a regular file
    /// truncated under a live server): checked at every checkpoint, and a
    /// shrink stops the volume (EIO) instead of going unnoticed until the next
    /// mount refuses.
    fn check_media_size(&self) -> Result<()> {
        let want = self.media.len();
        match self.media.size_now() {
            Ok(now) if now >= want => Ok(()),
            Ok(now) => Err(self.fail_with(Failure {
                why: format!(
                    "the media shrank under the volume: {} now holds {now} bytes, the volume needs {want}; \
                     do not truncate a served volume (restore its size, then restart)",
                    self.media.describe()
                ),
                errno: libc::EIO,
            })),
            Err(e) => Err(self.fail("reading the media's size", &e)),
        }
    }

    /// Discard is on for this mount (asked for, and the media took it so far).
    pub fn discard_enabled(&self) -> bool {
        self.discard_on.load(Ordering::Relaxed)
    }

    /// Give the space of segments that passed the reuse barrier back to the
    /// host or device: `[segment start + 1 block, segment end)` of each.
    /// (`discard_enabled`: asked for, and the media took it so far.)
    ///
    /// Safety rule: never the first block. A block device may return stale old
    /// data for a discarded range, and the tombstone in the first block is what
    /// stops a stale chunk header there from being read as new data by
    /// recovery. So the caller discards only Free segments, whose tombstone a
    /// barrier (or the mount) wrote and flushed and whose release fenced out
    /// every reader (the reuse lock), taken out of the free stack so that no
    /// stream writes them meanwhile (`Shared::discard_deep`).
    /// Whatever the rest reads as afterwards (zeros or old bytes) is behind the
    /// tombstone. A media that cannot discard (or refuses this range: EINVAL,
    /// ENOTTY, EOPNOTSUPP) turns discard off for this mount; ENOSPC (a file
    /// system that needs space to split an extent) is warned and skipped; any
    /// other error is a media write error like any other and stops the volume
    /// (`fail`): a device that fails a discard is not trusted with data.
    pub fn discard(&self, segs: &[u32]) -> Result<()> {
        for &s in segs {
            if !self.discard_on.load(Ordering::Relaxed) {
                return Ok(());
            }
            self.check_failed()?;
            let len = self.geo.segment_bytes() - BS;
            match self.store.discard_body(s) {
                Ok(true) => Counters::add(&self.counters.discard_bytes, len),
                Ok(false) => {
                    self.discard_on.store(false, Ordering::Relaxed);
                    tracing::info!(
                        "{} cannot discard: freed segments keep their host space",
                        self.store.describe()
                    );
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL) | Some(libc::ENOTTY) | Some(libc::EOPNOTSUPP)
                    ) =>
                {
                    self.discard_on.store(false, Ordering::Relaxed);
                    tracing::warn!(
                        "discarding segment {s} of {}: {e}; discard is off until the next mount (no data depends on it)",
                        self.store.describe()
                    );
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    tracing::warn!(
                        "discarding segment {s} of {}: {e}; its space stays allocated",
                        self.store.describe()
                    );
                }
                Err(e) => return Err(self.fail(format_args!("discarding segment {s}"), &e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The write queue's wake-up protocol (`WriteQueue::room`, `hk_room`),
    //! driven through a segment store whose writes wait at a gate: the test
    //! decides when a writer thread finishes a chunk and pops the next.
    use super::*;
    use crate::media::{MemMedia, UringReads};
    use crate::store::Piece;
    use crate::volume::CreateOptions;
    use std::io;
    use std::time::{Duration, Instant};

    /// Chunk writes wait here until the test lets one through.
    #[derive(Default)]
    struct Gate {
        /// (writes that may pass, writes waiting, writes passed)
        st: std::sync::Mutex<(u64, usize, u64)>,
        cv: std::sync::Condvar,
    }

    impl Gate {
        fn pass(&self, n: u64) {
            self.st.lock().unwrap().0 += n;
            self.cv.notify_all();
        }
        fn waiting(&self) -> usize {
            self.st.lock().unwrap().1
        }
        fn passed(&self) -> u64 {
            self.st.lock().unwrap().2
        }
    }

    struct GatedStore {
        geo: Geometry,
        gate: Arc<Gate>,
    }

    impl SegmentStore for GatedStore {
        fn segment_blocks(&self) -> u32 {
            self.geo.segment_blocks
        }
        fn segment_count(&self) -> u32 {
            self.geo.segment_count
        }
        fn write_unit(&self) -> u64 {
            BS
        }
        fn write(&self, _seg: u32, _block: u32, _buf: &[u8]) -> io::Result<()> {
            let mut st = self.gate.st.lock().unwrap();
            st.1 += 1;
            while st.0 == 0 {
                st = self.gate.cv.wait(st).unwrap();
            }
            st.0 -= 1;
            st.1 -= 1;
            st.2 += 1;
            Ok(())
        }
        fn read(&self, _p: u64, _buf: &mut [u8]) -> io::Result<()> {
            Err(io::Error::other("not in this test"))
        }
        fn read_batch(&self, _reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
            Err(io::Error::other("not in this test"))
        }
        fn wipe(&self, _seg: u32, _tombstone: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn discard_body(&self, _seg: u32) -> io::Result<bool> {
            Ok(false)
        }
        fn locate(&self, _p: u64, _blocks: u32, _f: &mut dyn FnMut(Piece)) {}
        fn uring_reads(&self, _entries: u32) -> Option<io::Result<UringReads>> {
            None
        }
        fn describe(&self) -> String {
            "gated test store".into()
        }
    }

    /// Chunks of 1 MiB (the largest): 32 fill the queue, 24 the housekeeper's share.
    const CHUNK_BLOCKS: u32 = 256;

    struct Rig {
        commit: Arc<Commit>,
        gate: Arc<Gate>,
        writers: Vec<JoinHandle<()>>,
        image: Arc<AlignedBuf>,
        seq: std::sync::atomic::AtomicU64,
    }

    impl Rig {
        /// A commit stage in background mode (two writer threads) over a
        /// closed gate.
        fn new() -> Rig {
            let create = CreateOptions {
                logical_bytes: Some(64 << 20),
                segment_bytes: 2 * CHUNK_BLOCKS as u64 * BS,
                ..Default::default()
            };
            let media: Arc<dyn Media> = Arc::new(MemMedia::new(128 << 20));
            let sb = crate::volume::Volume::format(&*media, &create).unwrap();
            let geo = Geometry::from_superblock(&sb);
            let gate = Arc::new(Gate::default());
            let store = Arc::new(GatedStore {
                geo,
                gate: gate.clone(),
            });
            let opts = OpenOptions {
                background: true,
                ..Default::default()
            };
            let commit = Arc::new(Commit::new(
                Places {
                    media,
                    store,
                    logs: LogDeviceSet {
                        devs: Vec::new(),
                        missing: 0,
                        absent: 0,
                    },
                },
                geo,
                Arc::new(Counters::default()),
                Arc::new(CrcIndex::new(&geo, sb.uuid)),
                Arc::new(ChunkPool::new(CHUNK_BLOCKS as usize * BLOCK_BYTES)),
                sb,
                0,
                &opts,
            ));
            assert!(commit.async_writes);
            let writers = commit.start_writers().unwrap();
            Rig {
                commit,
                gate,
                writers,
                image: Arc::new(AlignedBuf::new(CHUNK_BLOCKS as usize * BLOCK_BYTES)),
                seq: Default::default(),
            }
        }

        /// The next chunk (1 MiB), in seq order.
        fn chunk(&self) -> Sealed {
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            Sealed {
                seq,
                stream: Stream::User,
                segment: (seq / 2) as u32 % self.commit.geo.segment_count,
                start: (seq % 2) as u32 * CHUNK_BLOCKS,
                blocks: CHUNK_BLOCKS,
                image: self.image.clone(),
                placed: None,
            }
        }

        /// Both writer threads wait at the gate and the queue is full: 34
        /// chunks submitted, 2 being written.
        fn fill(&self) {
            for _ in 0..34 {
                self.commit.submit(vec![self.chunk()]).unwrap();
            }
            until("both writers at the gate", || self.gate.waiting() == 2);
            assert_eq!(self.commit.writeq.lock().bytes, WRITE_QUEUE_BYTES);
        }

        /// (request threads, housekeepers) asleep for room.
        fn asleep(&self) -> (usize, usize) {
            let q = self.commit.writeq.lock();
            (q.room.asleep, q.hk_room.asleep)
        }

        /// The protocol's invariant, seen under the queue's lock: nobody
        /// sleeps while the queue is below their limit unless a woken waiter
        /// is on its way.
        fn check_no_lost_wake(&self) {
            let q = self.commit.writeq.lock();
            for (w, limit, who) in [
                (&q.room, WRITE_QUEUE_BYTES, "request thread"),
                (&q.hk_room, HOUSEKEEPER_QUEUE_BYTES, "housekeeper"),
            ] {
                assert!(
                    !(q.bytes < limit && w.asleep > 0 && w.woken == 0),
                    "lost wake-up: {} {who}(s) asleep with {} bytes queued, limit {limit}",
                    w.asleep,
                    q.bytes
                );
            }
        }

        /// Let every write through, and check every chunk was written.
        fn drain(self, threads: Vec<std::thread::JoinHandle<Result<()>>>) {
            self.gate.pass(u64::MAX / 2);
            for t in threads {
                let r = joined(t, "a submitter");
                r.unwrap();
            }
            let n = self.seq.load(Ordering::Relaxed);
            until("every chunk written", || {
                self.commit.progress.lock().written_through == n
            });
            self.commit.stop_writer_threads(self.writers);
            assert_eq!(self.gate.passed(), n);
        }
    }

    /// The harness's watchdog: wait (polling) until `f` holds; a minute
    /// without it is a hang (a lost wake-up), not slowness.
    fn until(what: &str, f: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(60), "hung: never {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn joined<T>(t: std::thread::JoinHandle<T>, who: &str) -> T {
        until(&format!("{who} returned"), || t.is_finished());
        t.join().unwrap()
    }

    /// A waiter woken for room it does not take (`wait_queue_space`, as a
    /// streamed write's after placing its claims) passes the wake on to the
    /// next waiter, which takes the room: one chunk's pop frees room for one
    /// chunk, and wakes one thread, not all.
    #[test]
    fn a_waiter_that_takes_no_room_passes_the_wake_on() {
        let rig = Rig::new();
        rig.fill();
        let c = rig.commit.clone();
        let a = std::thread::spawn(move || c.wait_queue_space());
        until("A asleep", || rig.asleep().0 == 1);
        let mut subs = Vec::new();
        for n in 2..=3 {
            let c = rig.commit.clone();
            let s = rig.chunk();
            subs.push(std::thread::spawn(move || c.submit(vec![s])));
            until("the submitters asleep", || rig.asleep().0 == n);
        }
        rig.check_no_lost_wake();
        // one chunk written: its writer pops the next, room for one chunk
        rig.gate.pass(1);
        joined(a, "the waiter that takes no room").unwrap();
        rig.check_no_lost_wake();
        // the first submitter got that room (parking_lot wakes in the order
        // they slept); the second sleeps on a full queue
        joined(subs.remove(0), "the submitter A passed the wake to").unwrap();
        until("both writers at the gate again", || rig.gate.waiting() == 2);
        assert_eq!(rig.asleep(), (1, 0));
        assert_eq!(rig.commit.writeq.lock().bytes, WRITE_QUEUE_BYTES);
        rig.check_no_lost_wake();
        // two more written: the last submitter goes on, the queue has room
        rig.gate.pass(2);
        joined(subs.remove(0), "the last submitter").unwrap();
        until("writers at the gate", || rig.gate.waiting() == 2);
        assert_eq!(rig.asleep(), (0, 0));
        rig.check_no_lost_wake();
        rig.drain(subs);
    }

    /// The housekeeper waits for its lower limit on a condvar of its own: a
    /// pop that leaves room for a request thread but not for it wakes the
    /// request thread (one shared condvar with one wake would have woken the
    /// housekeeper, which slept again: the request thread's wake lost), and
    /// the housekeeper goes on once the queue is below its share.
    #[test]
    fn the_housekeepers_limit_swallows_no_request_threads_wake() {
        let rig = Rig::new();
        rig.fill();
        let c = rig.commit.clone();
        let s = rig.chunk();
        let hk = std::thread::spawn(move || c.submit_housekeeping(vec![s]));
        until("the housekeeper asleep", || rig.asleep() == (0, 1));
        let c = rig.commit.clone();
        let s = rig.chunk();
        let user = std::thread::spawn(move || c.submit(vec![s]));
        until("the request thread asleep", || rig.asleep() == (1, 1));
        rig.gate.pass(1);
        joined(user, "the request thread").unwrap();
        until("both writers at the gate again", || rig.gate.waiting() == 2);
        assert_eq!(rig.asleep(), (0, 1), "the housekeeper waits for its share");
        rig.check_no_lost_wake();
        // down to the housekeeper's share: 32 MiB queued now, 8 chunks out
        // leave 24 MiB (still its limit), the 9th lets it queue its chunk
        rig.gate.pass(8);
        until("8 more written", || {
            rig.gate.passed() == 9 && rig.gate.waiting() == 2
        });
        assert_eq!(rig.asleep(), (0, 1));
        rig.check_no_lost_wake();
        rig.gate.pass(1);
        joined(hk, "the housekeeper").unwrap();
        rig.check_no_lost_wake();
        rig.drain(Vec::new());
    }

    /// Many threads sealing into a full queue at once, with waiters of
    /// both kinds and ones that take no room: every one finishes, and the
    /// invariant holds whenever the test looks.
    #[test]
    fn many_waiters_of_both_kinds_all_finish() {
        let rig = Arc::new(Rig::new());
        rig.fill();
        let mut threads = Vec::new();
        for i in 0..24 {
            let c = rig.commit.clone();
            if i % 4 == 1 {
                threads.push(std::thread::spawn(move || c.wait_queue_space()));
                continue;
            }
            let chunks: Vec<Sealed> = (0..1 + i % 3).map(|_| rig.chunk()).collect();
            threads.push(std::thread::spawn(move || match i % 4 {
                0 => c.submit_housekeeping(chunks),
                _ => c.submit(chunks),
            }));
        }
        for _ in 0..200 {
            rig.gate.pass(1);
            rig.check_no_lost_wake();
            std::thread::yield_now();
        }
        let rig = Arc::into_inner(rig).expect("only the test holds the rig");
        rig.drain(threads);
    }
}
