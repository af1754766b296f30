//! Volume: the public block-device API (read / write / write_zeroes / trim / flush /
//! block_status / stats / close), mount, and the append path of request
//! threads. The engine state is in `core`, every media write of the write side
//! in `commit`, GC, reuse barriers (with discard) and checkpoints in
//! `housekeeper` (its thread, or inline in deterministic mode).
//!
//! Write path, top to bottom: accept -> classify (data / all-zero / all-0xFF) ->
//! append to the open user chunk (map points at the block's final place at once)
//! -> seal when full / on flush / FUA / idle -> a writer thread (background mode)
//! or the sealing thread writes the chunk -> FLUSH waits for every chunk sealed
//! before it and shares one media flush.
//!
//! Locks, always taken in this order: rmw -> hk.round -> reuse -> core ->
//! progress -> sb (ARCHITECTURE.md, "Every lock, in lock order"). Media IO is
//! never done with `core` held (GC reads its victim without it: a Victim segment
//! is never reused); `sb` is held across the superblock's write and flush.
//!
//! A volume whose media write fails stops (commit.rs `fail`): changes answer
//! `Error::Failed` (ENOSPC or EIO, from the cause), reads go on.

mod commit;
mod core;
mod fill;
mod gcread;
mod housekeeper;
mod intent;
mod logdev;
mod packer;
mod read;
mod scrub;
mod striped;
mod tune;

pub use self::logdev::{add_log_device, remove_log_device};
pub use self::packer::{DIRECT_AFTER, SAMPLE_EVERY};
pub use self::read::{ReadRing, RING_SLOTS};
pub use self::scrub::ScrubOutcome;
pub use self::tune::set_compression;

pub use self::core::GC_CLASSES;

use self::commit::Commit;
use self::core::{Core, NeedSpace, What};
use self::housekeeper::Housekeeper;
use crate::error::{Error, Result};
use crate::format::checkpoint::Lifetime;
use crate::format::chunk::{Stream, NO_SRC};
use crate::format::superblock::{LogStart, Superblock, FLAG_CLEAN, NO_CHECKPOINT};
use crate::format::{is_filled_with, BLOCK_BYTES};
use crate::gc::{self, GcPolicy};
use crate::geometry::{self, Geometry};
use crate::map::{Loc, Map, Virt};
use crate::media::{AlignedBuf, Media};
use crate::recovery;
use crate::segments::SegState;
use crate::stats::{Counters, Stats};
use crate::store::{FlatStore, SegmentStore};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

const BS: u64 = BLOCK_BYTES as u64;

/// Where the wall-clock times the engine writes to the media come from: the
/// superblock's creation time, every chunk header's and checkpoint header's
/// timestamp, the lifetime counters' start. They are for people and tools
/// (`sluice info`); no decision of the engine or of recovery reads them.
/// `Fixed` is for the deterministic simulator (tests/dst.rs): with the system
/// clock, two runs of one seed write different bytes into those fields, and a
/// sweep that picks what to damage by looking at the bytes no longer replays
/// the seed exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WallClock {
    #[default]
    System,
    /// Every timestamp is this many nanoseconds since the Unix epoch.
    Fixed(u64),
}

impl WallClock {
    pub fn unix_ns(self) -> u64 {
        match self {
            WallClock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            WallClock::Fixed(ns) => ns,
        }
    }

    pub fn unix_s(self) -> u64 {
        self.unix_ns() / 1_000_000_000
    }
}

/// A separate intent log device (docs/format-v2.md §4.3): a fast device or
/// partition (NVMe, Optane, pmem, a file in tests) the log ring lives on, as
/// given to `CreateOptions::log_devices` and `OpenOptions::log_devices`.
#[derive(Clone)]
pub struct LogDevice(pub Arc<dyn Media>);

impl std::fmt::Debug for LogDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogDevice({})", self.0.describe())
    }
}

/// Options fixed at create time.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Exported size; None = as large as the media allows.
    pub logical_bytes: Option<u64>,
    /// Fraction of the segment area kept free (0.10 = 10%).
    pub overprovision: f64,
    pub segment_bytes: u64,
    pub gc_policy: GcPolicy,
    /// The volume's uuid; None = random. Like `clock`, set by the deterministic
    /// simulator so that one seed writes the same bytes every run.
    pub uuid: Option<[u8; 16]>,
    /// Source of the superblock's creation time.
    pub clock: WallClock,
    /// An intent log ring of this many bytes in the volume (format v2,
    /// docs/format-v2.md §4; `DEFAULT_INTENT_LOG_BYTES` from the CLI), or
    /// None: a version 1 volume without one (the default until the
    /// simulator has proven it on more seeds).
    pub intent_log: Option<u64>,
    /// Put the intent log on these devices instead of in the volume (one, or
    /// two mirrored); the ring is `intent_log` bytes (default
    /// `DEFAULT_INTENT_LOG_BYTES`), at most what the smallest device holds.
    /// Each device gets its own superblock; whatever it held is overwritten
    /// (the caller has locked and probed it).
    pub log_devices: Vec<LogDevice>,
    /// Compression (format v2 `COMPRESSION`, docs/compression.md): sets the
    /// feature bit and gives the map 5-byte values. Off: a volume exactly as
    /// before.
    pub compression: crate::compress::Compression,
    /// The in-volume ring takes version 2 records (data copied into the
    /// ring, no `LOG_INDIRECT`), as volumes made before version 3: for tests
    /// that such volumes keep working. Off: version 3 records.
    pub log_v2_records: bool,
}

/// The ring `sluice create --intent-log` makes: 16 MiB. The ring holds the
/// records of blocks not yet in a durable main-log chunk (at most the open
/// user chunk's 255 blocks, each logged at worst in a record of its own: 2 MiB
/// with the headers) plus what waits for the next persisted start, which a
/// flush moves once the ring is half used: 8 MiB of records between two
/// superblock writes, over 1000 4 KiB synchronous writes.
pub const DEFAULT_INTENT_LOG_BYTES: u64 = 16 << 20;

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            logical_bytes: None,
            overprovision: geometry::DEFAULT_OVERPROVISION,
            segment_bytes: geometry::DEFAULT_SEGMENT_BYTES,
            gc_policy: gc::DEFAULT_POLICY,
            uuid: None,
            clock: WallClock::System,
            intent_log: None,
            log_devices: Vec::new(),
            compression: crate::compress::Compression::Off,
            log_v2_records: false,
        }
    }
}

/// Options of one mount.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub read_only: bool,
    /// Run the housekeeper thread (idle seal, clean-ahead GC, checkpoints). Tests
    /// turn it off to make every media write deterministic.
    pub background: bool,
    /// Seal and write a partly filled user chunk after this long.
    pub idle_seal_ms: u64,
    /// Write a checkpoint after this many bytes of chunks; None = automatic.
    pub checkpoint_interval_bytes: Option<u64>,
    /// Override the GC policy recorded in the superblock.
    pub gc_policy: Option<GcPolicy>,
    /// Check every data block read from the media against its CRC32C (a
    /// mismatch answers EIO). Off only to measure what verification costs.
    pub verify_reads: bool,
    /// Background scrub rate in bytes per second (None: no scrub thread).
    pub scrub_rate: Option<u64>,
    /// Source of the timestamps this mount writes (chunk and checkpoint
    /// headers, lifetime counters' start); see `WallClock`.
    pub clock: WallClock,
    /// Give segments freed by GC back to the host (hole punching in a file) or
    /// the device (BLKDISCARD, where its queue advertises discard) once they
    /// pass the reuse barrier. Never the segment's first block (its tombstone).
    /// Only segments deep in the free stack, behind the free segments writes
    /// need soon, that no write reached since the previous pass, each once
    /// since it was freed (see `Shared::discard_deep`), unless
    /// `discard_every_segment`.
    pub discard: bool,
    /// Discard every free segment not given back since it was freed, also
    /// those writes take again at once: the simulator's setting (every
    /// barrier meets a discard).
    pub discard_every_segment: bool,
    /// Salvage (read-only only): mount even with damage below the durable
    /// point, answering EIO for every block whose newest record may lie in a
    /// damaged chunk (`recovery::mount_salvage`, docs/salvage.md).
    pub salvage: bool,
    /// The volume's intent log devices (any order), for a volume created with
    /// `CreateOptions::log_devices`; ignored otherwise.
    pub log_devices: Vec<LogDevice>,
    /// Mount a volume whose log device(s) are all missing or unusable,
    /// without the log (`recovery::mount_logs_missing_ok`): what only the log
    /// held is lost (the mount report says what the format can tell), FLUSH
    /// seals, and the log's start gets a fresh chain so the old device's
    /// records are never replayed later. A device of another volume is still
    /// refused.
    pub log_device_missing_ok: bool,
    /// The stripe set the volume's media shows (`stripe_set::media::SetMedia`
    /// over it): its segment data goes through a `StripeStore` on it.
    pub stripe_set: Option<Arc<crate::stripe_set::StripeSet>>,
    /// Where segment data lives, when not in the media's own segment area
    /// (None: `FlatStore` over the media). The store must have the volume's
    /// geometry; the metadata stays on the media (objseg::ObjSegStore).
    pub store: Option<StoreHandle>,
    /// Host FLUSHes that arrive while a FLUSH group is in flight join the
    /// next group (`fill.rs`, the default). Off: each FLUSH plans its own
    /// record and shares media flushes through the group commit alone (the
    /// path before the fill; tests of that path's parking turn it off).
    pub flush_fill: bool,
}

/// A segment store given to `Volume::open` (`OpenOptions::store`).
#[derive(Clone)]
pub struct StoreHandle(pub Arc<dyn SegmentStore>);

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreHandle({})", self.0.describe())
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            background: true,
            idle_seal_ms: 200,
            checkpoint_interval_bytes: None,
            gc_policy: None,
            verify_reads: true,
            scrub_rate: None,
            clock: WallClock::System,
            discard: true,
            discard_every_segment: false,
            salvage: false,
            log_devices: Vec::new(),
            log_device_missing_ok: false,
            store: None,
            stripe_set: None,
            flush_fill: true,
        }
    }
}

/// One run of `block_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Extent {
    pub length: u64,
    /// No data stored (never written or trimmed).
    pub hole: bool,
    /// Reads as zeros.
    pub zero: bool,
}

pub use crate::recovery::MountReport;

/// The bytes of one range read by `Volume::read_batch` (an aligned buffer of
/// whole blocks and where the range sits in it).
pub struct ReadBuf {
    buf: AlignedBuf,
    skip: usize,
    len: usize,
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.skip..self.skip + self.len]
    }
}

/// What a request appends, block by block (`Shared::append_run`).
trait Records<'a> {
    /// Blocks appended per hold of the engine lock.
    fn per_lock(&self) -> u64;
    /// Work for blocks [from, to) that needs no lock, done before taking it.
    fn prepare(&mut self, _from: u64, _to: u64) {}
    /// The record for block i (None: nothing to record), under the engine lock.
    fn what(&self, map: &Map, i: u64) -> Option<What<'a>>;
    /// The logical block record i is for: `lba0 + i` for a request's run of
    /// blocks; a batch of requests (`ManyBlocks`) names each block's own.
    fn lba(&self, lba0: u64, i: u64) -> u64 {
        lba0 + i
    }
    /// The caller's bytes of records `from..to` when they are one request's
    /// host data (`HostBlocks`: a large one streams its data blocks to their
    /// places, `Shared::append_run`); None for every other kind.
    fn host_bytes(&self, _from: u64, _to: u64) -> Option<&'a [u8]> {
        None
    }
}

/// Host data blocks: zeros and ones become virtual records, the rest data with
/// its CRC32C; both found in `prepare`, outside the engine lock.
struct HostBlocks<'a> {
    data: &'a [u8],
    /// Blocks [from, from + HOST_BATCH) as classified by the last `prepare`.
    from: u64,
    class: [Class; HOST_BATCH],
}

/// Host data blocks per hold of the engine lock: 256 KiB of copies (tens of
/// microseconds), where a request could hold it for 32 MiB before.
const HOST_BATCH: usize = 64;
/// Virtual records per hold (a map update each, no copy).
const VIRTUAL_BATCH: u64 = 1024;

#[derive(Clone, Copy)]
enum Class {
    Zero,
    Ones,
    Data(u32),
}

impl<'a> HostBlocks<'a> {
    fn new(data: &'a [u8]) -> Self {
        HostBlocks {
            data,
            from: 0,
            class: [Class::Zero; HOST_BATCH],
        }
    }
    fn block(&self, i: u64) -> &'a [u8] {
        &self.data[i as usize * BLOCK_BYTES..(i as usize + 1) * BLOCK_BYTES]
    }
}

impl<'a> Records<'a> for HostBlocks<'a> {
    fn per_lock(&self) -> u64 {
        HOST_BATCH as u64
    }
    fn prepare(&mut self, from: u64, to: u64) {
        debug_assert!(to - from <= HOST_BATCH as u64);
        self.from = from;
        for i in from..to {
            // MUTANT: host-crc-of-wrong-block s|Class::of(self.block(i))|Class::of(self.block(from))|
            self.class[(i - from) as usize] = Class::of(self.block(i));
        }
    }
    fn what(&self, _map: &Map, i: u64) -> Option<What<'a>> {
        Some(self.class[(i - self.from) as usize].what(self.block(i)))
    }
    fn host_bytes(&self, from: u64, to: u64) -> Option<&'a [u8]> {
        Some(&self.data[from as usize * BLOCK_BYTES..to as usize * BLOCK_BYTES])
    }
}

/// A host write of at least this many blocks streams its data blocks to
/// their places itself (`Shared::append_run`): 64 KiB, twice ZFS's
/// `zfs_immediate_write_sz`. Smaller ones stay in the chunk until its seal
/// (a request per 4 KiB write costs more than it saves: docs/intent-log.md
/// §4.3, write-behind).
pub const STREAM_MIN_BLOCKS: u64 = 16;
/// Streamed blocks one request claims before it writes them (and hands on
/// the chunks it sealed meanwhile): 1 MiB.
const STREAM_BATCH_BLOCKS: u32 = 256;
/// A large host write streams only while a FLUSH is near: fewer than this
/// many host bytes were written since the last FLUSH or FUA (the mount
/// counts as one). Streaming pays when a FLUSH waits for the data (its
/// blocks are on the media by then, docs/intent-log.md §4.4); without one,
/// the request waiting for its own IO is all it does: one 1 MiB request at
/// a time ran at 0.5-0.6x the write-behind of whole chunks, whose writer
/// threads give the device one 1 MiB write per chunk, header included
/// (docs/benchmarks.md, "Sequential writes behind"). A write queue's worth:
/// what a FLUSH may find queued anyway.
pub const STREAM_NEAR_FLUSH_BYTES: u64 = commit::WRITE_QUEUE_BYTES;

/// A streamed run being gathered: data indexes `from..to` of one open
/// chunk's `placed`, the first at `block` of `segment`, the caller's records
/// `host_from..` holding their bytes (contiguous). Indexes `from..claimed`
/// are claimed in `placed` (`Claims::claim_pending`, before the engine lock
/// hold that appended them ends).
struct StreamRun {
    placed: Arc<crate::log::Placed>,
    segment: u32,
    block: u32,
    from: u32,
    to: u32,
    claimed: u32,
    host_from: u64,
}

/// Claimed runs not yet written. Dropped with runs in it (an error ended the
/// request between claim and write: the volume had failed), it ends their
/// claims unwritten, so the seals waiting for them go on (and fail: those
/// blocks are in no image, log.rs) and reads of them answer the failure.
#[derive(Default)]
struct Claims(Vec<StreamRun>);

impl Claims {
    fn blocks(&self) -> u32 {
        self.0.iter().map(|r| r.to - r.from).sum()
    }
    /// Data block `i` of the chunk whose map is `placed` is claimed here
    /// (not yet written).
    fn owns(&self, placed: &Arc<crate::log::Placed>, i: u32) -> bool {
        self.0
            .iter()
            .any(|r| Arc::ptr_eq(&r.placed, placed) && (r.from..r.to).contains(&i))
    }
    /// Record data block `idx` of `placed` (at `block` of `segment`), the
    /// caller's record `host`.
    fn push(&mut self, c: (&Arc<crate::log::Placed>, u32, u32, u32), host: u64) {
        let (placed, segment, block, idx) = c;
        if let Some(r) = self.0.last_mut() {
            let n = r.to - r.from;
            if Arc::ptr_eq(&r.placed, placed)
                && r.segment == segment
                && r.to == idx
                && r.block + n == block
                // MUTANT: stream-run-ignores-holes s|r.host_from + n as u64 == host|r.host_from <= host|
                && r.host_from + n as u64 == host
            {
                r.to += 1;
                return;
            }
        }
        self.0.push(StreamRun {
            placed: placed.clone(),
            segment,
            block,
            from: idx,
            to: idx + 1,
            claimed: idx,
            host_from: host,
        });
    }
    /// Claim the blocks pushed since the last call (`Placed::claim_range`,
    /// one call per run): under the engine lock hold that appended them,
    /// while their chunk cannot yet have reached a writer, so its seal
    /// skips them and waits for their placing write.
    fn claim_pending(&mut self) {
        for r in self.0.iter_mut().filter(|r| r.claimed < r.to) {
            r.placed.claim_range(r.claimed, r.to);
            r.claimed = r.to;
        }
    }
}

/// One host write in `append_run` (`Shared::host_writes`), for as long as
/// it lives.
struct HostWrite<'a>(&'a std::sync::atomic::AtomicU32);

impl<'a> HostWrite<'a> {
    fn enter(n: &'a std::sync::atomic::AtomicU32) -> Self {
        n.fetch_add(1, Ordering::AcqRel);
        HostWrite(n)
    }
}

impl Drop for HostWrite<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        for r in self.0.drain(..).filter(|r| r.claimed > r.from) {
            r.placed.finish(r.from, r.claimed, false);
        }
    }
}

impl Class {
    /// Zeros, ones, or data with its CRC32C (outside the engine lock).
    fn of(b: &[u8]) -> Class {
        if is_filled_with(b, 0) {
            Class::Zero
        } else if is_filled_with(b, 0xff) {
            Class::Ones
        } else {
            Class::Data(crate::format::chunk::block_crc(b))
        }
    }
    fn what(self, b: &[u8]) -> What<'_> {
        match self {
            Class::Zero => What::Virtual(Virt::Zero),
            Class::Ones => What::Virtual(Virt::Ones),
            Class::Data(crc) => What::Data(b, crc),
        }
    }
}

/// The blocks of a batch of whole-block writes (`Volume::write_many`), in
/// the order the writes were given: each with its own logical block, so one
/// hold of the engine lock appends blocks of many requests. Classified and
/// checksummed in `prepare`, outside the lock, like `HostBlocks`.
struct ManyBlocks<'a> {
    /// (logical block, its 4 KiB) for every block of every write, in order.
    blocks: Vec<(u64, &'a [u8])>,
    from: u64,
    class: [Class; HOST_BATCH],
}

impl<'a> ManyBlocks<'a> {
    /// `writes` are whole-block and in range (checked by the caller).
    fn new(writes: &[(u64, &'a [u8])]) -> Self {
        let n = writes.iter().map(|w| w.1.len() / BLOCK_BYTES).sum();
        let mut blocks = Vec::with_capacity(n);
        // the batch's writes enter the user stream in the order given: a
        // later write of the same block wins, as with separate calls
        // MUTANT: write-many-order s|writes.iter()|writes.iter().rev()|
        for &(offset, data) in writes.iter() {
            let lba0 = offset / BS;
            for (k, b) in data.chunks_exact(BLOCK_BYTES).enumerate() {
                blocks.push((lba0 + k as u64, b));
            }
        }
        ManyBlocks {
            blocks,
            from: 0,
            class: [Class::Zero; HOST_BATCH],
        }
    }
    fn len(&self) -> u64 {
        self.blocks.len() as u64
    }
}

impl<'a> Records<'a> for ManyBlocks<'a> {
    fn per_lock(&self) -> u64 {
        HOST_BATCH as u64
    }
    fn prepare(&mut self, from: u64, to: u64) {
        debug_assert!(to - from <= HOST_BATCH as u64);
        self.from = from;
        for i in from..to {
            self.class[(i - from) as usize] = Class::of(self.blocks[i as usize].1);
        }
    }
    fn what(&self, _map: &Map, i: u64) -> Option<What<'a>> {
        let b = self.blocks[i as usize].1;
        Some(self.class[(i - self.from) as usize].what(b))
    }
    fn lba(&self, _lba0: u64, i: u64) -> u64 {
        self.blocks[i as usize].0
    }
}

/// WRITE_ZEROES and TRIM: a virtual record per block, none where the block
/// already reads so (the map says, under the lock).
struct VirtualRecords {
    lba0: u64,
    v: Virt,
}

impl<'a> Records<'a> for VirtualRecords {
    fn per_lock(&self) -> u64 {
        VIRTUAL_BATCH
    }
    fn what(&self, map: &Map, i: u64) -> Option<What<'a>> {
        let cur = map.get(self.lba0 + i);
        let redundant = match (cur, self.v) {
            // never written since create: nothing on the media to hide
            (Loc::Unmapped, Virt::Trim) => true,
            (Loc::Virtual(k, _), _) => k == self.v,
            _ => false,
        };
        (!redundant).then_some(What::Virtual(self.v))
    }
}

/// What a FLUSH wrote and waits for (`Shared::flush_write`): every chunk
/// below `target` and every record below `rec_target` durable.
struct FlushWrite {
    target: u64,
    rec_target: u64,
    path: crate::stats::FlushPath,
    /// The ring was past half its space: look for a new start after.
    start_wanted: bool,
}

/// The engine lock: std's futex mutex, which spins briefly and then sleeps.
/// parking_lot's (used elsewhere) calls `sched_yield` up to seven times
/// before it parks, and with 32 request threads on 2 cores that was 7% of a
/// write profile (issue 22). Poison is ignored, as parking_lot does.
pub(crate) struct EngineLock(std::sync::Mutex<Core>);

impl EngineLock {
    fn new(core: Core) -> Self {
        EngineLock(std::sync::Mutex::new(core))
    }
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct Shared {
    /// Segment data (chunks, tombstones, discards, every segment read);
    /// the metadata (superblocks, checkpoint slots, the intent log ring) is
    /// the commit stage's, on the media.
    pub store: Arc<dyn SegmentStore>,
    pub geo: Geometry,
    pub opts: OpenOptions,
    pub policy: GcPolicy,
    /// The engine: map, segment table, open chunks (memory only).
    pub core: EngineLock,
    /// Readers hold it shared while they read the media; a segment becomes
    /// Free only under it exclusively (`barrier`).
    pub reuse: RwLock<()>,
    rmw: Mutex<()>,
    pub counters: Arc<Counters>,
    /// CRC32C of every physical data block (verified reads; crc_index.rs).
    /// The commit stage records each chunk into it just before writing it.
    pub crc_index: Arc<crate::crc_index::CrcIndex>,
    /// Segments queued for scrub and the scrub walk (scrub.rs).
    scrub: scrub::Scrub,
    closed: AtomicBool,
    /// The commit stage: all media writes of the write side.
    pub(in crate::volume) commit: Arc<Commit>,
    /// The housekeeper stage: GC, barriers, checkpoints, and the credit
    /// request threads wait on.
    pub(in crate::volume) hk: Housekeeper,
    /// Large host writes stream their data blocks to their places
    /// (`append_run`): the segments are a flat store on the volume's media
    /// (a stripe set writes rows, an object store whole segments).
    stream_places: bool,
    /// `counters.host_write_bytes` when the last host FLUSH (or FUA) began,
    /// 0 from the mount: large writes stream only within
    /// `STREAM_NEAR_FLUSH_BYTES` of it (`flush_near`).
    flush_mark: std::sync::atomic::AtomicU64,
    /// Host writes in `append_run` now: a streamed write that is the only
    /// one writes the intent log record of its blocks with its data
    /// (`Core::plan_streamed_record`), so the FLUSH after it writes none.
    host_writes: std::sync::atomic::AtomicU32,
    /// Host writes begun since the last host FLUSH or FUA began, and how
    /// many the interval before it held: a streamed write writes its own
    /// record alone only after an interval of at most one (a lone write and
    /// its FLUSH, at any size), not where several requests share each FLUSH
    /// (the bench's 128 KiB pieces of a 1 MiB write: the first of them is
    /// alone when it plans, the others come just after); there the write
    /// that makes this interval as long as the last one writes it, naming
    /// the others' blocks too (`Ring::plan_streamed` with company).
    writes_since_flush: std::sync::atomic::AtomicU32,
    writes_last_interval: std::sync::atomic::AtomicU32,
    /// Buffers for the packed blocks of fragment reads (read.rs).
    packed_bufs: read::PackedBufs,
    /// Host FLUSHes that come while a FLUSH group is in flight join the
    /// next group (`fill.rs`; None: `OpenOptions::flush_fill` off). Used
    /// only while the commit stage runs one media flush at a time
    /// (`Shared::filling`): where it overlaps several (the store-durable
    /// log's PUTs, a window that may change while open) groups overlap.
    fill: Option<fill::Fill>,
}

pub struct Volume {
    sh: Arc<Shared>,
    housekeeper: Mutex<Option<JoinHandle<()>>>,
    scrubber: Mutex<Option<JoinHandle<()>>>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    /// The fill thread (`sluice-fill`, background mode): leads FLUSH groups
    /// of parked FLUSHes alone (`fill.rs`).
    filler: Mutex<Option<JoinHandle<()>>>,
    report: MountReport,
    /// Salvage mounts: sorted logical block ranges `[start, end)` that answer EIO.
    unvouched: Vec<(u64, u64)>,
    /// The stripe set under the media (`OpenOptions::stripe_set`).
    stripe: Option<Arc<crate::stripe_set::StripeSet>>,
    /// The member rebuild running while the volume serves (`striped.rs`).
    rebuilder: striped::Rebuilder,
}

impl Volume {
    /// Write a fresh, empty volume onto `media` (destroying what was there).
    pub fn format(media: &dyn Media, opts: &CreateOptions) -> Result<Superblock> {
        Self::format_with(media, opts, false)
    }

    /// `format`, with `mixed_check`: the volume gets format v2
    /// `MIXED_HEADER_CHECK` (its chunk headers' check is not linear over
    /// XOR; `format_striped` asks for it, docs/stripes.md §0).
    pub(crate) fn format_with(
        media: &dyn Media,
        opts: &CreateOptions,
        mixed_check: bool,
    ) -> Result<Superblock> {
        if !(-4.0..=0.9).contains(&opts.overprovision) {
            return Err(Error::InvalidArgument(format!(
                "over-provisioning {} is outside -4..0.9",
                opts.overprovision
            )));
        }
        if !opts.segment_bytes.is_multiple_of(BS)
            || opts.segment_bytes < crate::format::chunk::MIN_SEGMENT_BLOCKS as u64 * BS
            || opts.segment_bytes > (1 << 30)
        {
            return Err(Error::InvalidArgument(format!(
                "segment size {} must be a multiple of 4 KiB between 32 KiB and 1 GiB",
                opts.segment_bytes
            )));
        }
        let seg_blocks = (opts.segment_bytes / BS) as u32;
        let device_ring = Self::device_ring_bytes(opts)?;
        let log_bytes = match opts.intent_log {
            _ if device_ring.is_some() => 0,
            None => 0,
            Some(b)
                if b >= crate::format::superblock::MIN_LOG_BYTES
                    && b.is_multiple_of(BS)
                    && b <= 1 << 30 =>
            {
                b
            }
            Some(b) => {
                return Err(Error::InvalidArgument(format!(
                    "intent log size {b} must be a multiple of 4 KiB between 64 KiB and 1 GiB"
                )))
            }
        };
        let compressed = opts.compression == crate::compress::Compression::Lz4;
        let value_bytes = if compressed {
            crate::format::checkpoint::MAP_VALUE_BYTES_COMPRESSED
        } else {
            crate::format::checkpoint::MAP_VALUE_BYTES
        };
        let geo = match opts.logical_bytes {
            Some(l) => {
                if l == 0 || l % BS != 0 {
                    return Err(Error::InvalidArgument(format!(
                        "volume size {l} must be a positive multiple of 4 KiB"
                    )));
                }
                let g = Geometry::for_logical_with(
                    l / BS,
                    seg_blocks,
                    opts.overprovision,
                    log_bytes,
                    value_bytes,
                );
                if g.media_bytes() > media.len() {
                    return Err(Error::InvalidArgument(format!(
                        "media holds {} bytes but a {} byte volume at {:.0}% over-provisioning needs {}",
                        media.len(),
                        l,
                        opts.overprovision * 100.0,
                        g.media_bytes()
                    )));
                }
                g
            }
            None => Geometry::for_media_with(
                media.len(),
                seg_blocks,
                opts.overprovision,
                log_bytes,
                value_bytes,
            )
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "media of {} bytes is too small for a volume",
                    media.len()
                ))
            })?,
        };
        if geo.logical_blocks > crate::map::MAX_LOGICAL_BLOCKS
            || geo.segment_count as u64 * seg_blocks as u64 >= crate::map::MAX_PHYS_BLOCKS
        {
            return Err(Error::InvalidArgument(
                "volume too large for format version 1 (8 TiB of segments)".into(),
            ));
        }
        // The tail copies go at the very end of the media (where a mount whose
        // head copies are lost looks for them), not just after the segments.
        let mut geo = geo;
        geo.tail_offset = media.len() / BS * BS - crate::format::superblock::TAIL_AREA_BYTES;
        let uuid = opts.uuid.unwrap_or_else(rand::random);
        let sb = Superblock {
            uuid,
            generation: 1,
            logical_blocks: geo.logical_blocks,
            segment_blocks: geo.segment_blocks,
            segment_count: geo.segment_count,
            data_offset: geo.data_offset,
            checkpoint_offset: geo.checkpoint_offset,
            checkpoint_slot_bytes: geo.checkpoint_slot_bytes,
            overprovision_bp: (opts.overprovision * 10000.0).round() as i32 as u32,
            flags: FLAG_CLEAN,
            checkpoint_slot: NO_CHECKPOINT,
            checkpoint_next_seq: 1,
            durable_seq: 1,
            created_unix_s: opts.clock.unix_s(),
            gc_policy: opts.gc_policy.id(),
            tail_offset: geo.tail_offset,
            // a v2 superblock only when a v2 feature is asked for
            v2: (geo.log_bytes > 0 || device_ring.is_some() || compressed || mixed_check).then(
                || {
                    use crate::format::superblock::{incompat, LogStart, SbV2};
                    let logged = geo.log_bytes > 0 || device_ring.is_some();
                    let mut v2 = if !logged {
                        SbV2::default()
                    } else {
                        SbV2 {
                            features_incompat: incompat::INTENT_LOG
                                | incompat::LSN
                                | incompat::CHAIN
                                | if device_ring.is_some() {
                                    incompat::LOG_DEVICE
                                } else {
                                    0
                                },
                            // an in-volume log has no identity of its own; a log
                            // device's is random (derived when the uuid is fixed,
                            // for the simulator)
                            log_uuid: match (device_ring, opts.uuid) {
                                (Some(_), None) => rand::random(),
                                _ => uuid.map(|b| b ^ 0x5a),
                            },
                            log_offset: geo.log_offset,
                            log_bytes: device_ring.unwrap_or(geo.log_bytes),
                            log_start: LogStart {
                                offset: 0,
                                seq: 1,
                                chain: crate::format::intent::chain_seed(&uuid, 0),
                            },
                            ..SbV2::default()
                        }
                    };
                    if compressed {
                        v2.features_incompat |= incompat::COMPRESSION;
                    } else if geo.log_bytes > 0 && device_ring.is_none() && !opts.log_v2_records {
                        // the in-volume ring takes version 3 records (data in place)
                        v2.features_incompat |= incompat::LOG_INDIRECT;
                    }
                    if mixed_check {
                        v2.features_incompat |= incompat::MIXED_HEADER_CHECK;
                    }
                    v2
                },
            ),
        };
        // Host space for the metadata area first, so no later mount needs any.
        media.allocate(&metadata_ranges(&geo))?;
        // Wipe the superblocks and the first block of every segment so no stale
        // structure of an earlier volume on this media can be mistaken for ours.
        let zero = AlignedBuf::new(BLOCK_BYTES);
        let store = FlatStore::new(media, &geo);
        for seg in 0..geo.segment_count {
            store.write(seg, 0, &zero)?;
        }
        if geo.log_bytes > 0 {
            // the ring's first record place (stale records of another volume
            // are refused by uuid anyway)
            media.write_at(&zero, geo.log_offset)?;
        }
        if let Some(ring) = device_ring {
            // the devices first: a volume superblock naming a log device is
            // never on the media before the device says whose it is
            debug_assert_eq!(sb.log_device().map(|l| l.1), Some(ring));
            let n = opts.log_devices.len() as u16;
            for (i, d) in opts.log_devices.iter().enumerate() {
                format_log_device(&*d.0, &sb, i as u16, n, sb.created_unix_s)?;
            }
        }
        let mut second = sb.clone();
        second.generation = 0;
        commit::write_superblock(media, &second)?;
        commit::write_superblock(media, &sb)?;
        media.flush()?;
        Ok(sb)
    }

    /// The ring size on the log devices of `opts` (None: no log device):
    /// `intent_log` or the default, capped by the smallest device.
    fn device_ring_bytes(opts: &CreateOptions) -> Result<Option<u64>> {
        use crate::format::logdev::{LOGDEV_RING_OFFSET, MAX_LOG_MIRRORS};
        use crate::format::superblock::{MAX_DEVICE_LOG_BYTES, MIN_LOG_BYTES};
        if opts.log_devices.is_empty() {
            return Ok(None);
        }
        if opts.log_devices.len() > MAX_LOG_MIRRORS as usize {
            return Err(Error::InvalidArgument(format!(
                "{} log devices given: at most {MAX_LOG_MIRRORS} (a mirrored pair)",
                opts.log_devices.len()
            )));
        }
        let want = opts.intent_log.unwrap_or(DEFAULT_INTENT_LOG_BYTES);
        let room = opts
            .log_devices
            .iter()
            .map(|d| d.0.len().saturating_sub(LOGDEV_RING_OFFSET) / BS * BS)
            .min()
            .unwrap_or(0);
        let ring = want.min(room);
        if ring < MIN_LOG_BYTES || !ring.is_multiple_of(BS) || ring > MAX_DEVICE_LOG_BYTES {
            return Err(Error::InvalidArgument(format!(
                "log device ring of {ring} bytes: a log device must hold at least {} bytes ({} of ring after its superblocks), and the ring size be a multiple of 4 KiB",
                LOGDEV_RING_OFFSET + MIN_LOG_BYTES,
                MIN_LOG_BYTES
            )));
        }
        Ok(Some(ring))
    }

    /// Format and mount.
    pub fn create(
        media: Arc<dyn Media>,
        create: &CreateOptions,
        open: &OpenOptions,
    ) -> Result<Volume> {
        Volume::format(&*media, create)?;
        Volume::open(media, open)
    }

    /// Mount an existing volume: newest valid checkpoint + replay of newer chunks.
    pub fn open(media: Arc<dyn Media>, opts: &OpenOptions) -> Result<Volume> {
        let t0 = std::time::Instant::now();
        if opts.salvage && !opts.read_only {
            return Err(Error::InvalidArgument(
                "a salvage mount is read-only only (it never writes): add read_only".into(),
            ));
        }
        let logs: Vec<&dyn Media> = opts.log_devices.iter().map(|d| &*d.0).collect();
        let mut rep = MountReport::default();
        let given = opts.store.as_ref().map(|h| &*h.0);
        // a stripe set's recovery reads segments through the set's store,
        // which reads a block that fails its check right from its row
        let scan = opts.stripe_set.as_ref().map(striped::scan_store);
        let m = recovery::mount_store(
            &*media,
            given,
            scan.as_deref(),
            &logs,
            &mut rep,
            opts.salvage,
            opts.log_device_missing_ok,
        )?;
        for w in &m.log_missing {
            tracing::warn!(
                "{}: intent log degraded, running without {w} (records go to the other device only)",
                media.describe()
            );
        }
        let log_media: Vec<(Arc<dyn Media>, u16)> = m
            .log_devices
            .iter()
            .zip(&m.log_mirrors)
            .map(|(&i, &mirror)| (opts.log_devices[i].0.clone(), mirror))
            .collect();
        let unvouched = m.unvouched.clone();
        let geo = m.geo;
        if !opts.read_only {
            // volumes created before the metadata area was allocated at create
            if let Err(e) = media.allocate(&metadata_ranges(&geo)) {
                tracing::warn!(
                    "{}: cannot reserve host space for the superblocks and checkpoint slots ({e}); a checkpoint may fail if the host file system fills",
                    media.describe()
                );
            }
        }
        let policy = opts
            .gc_policy
            .or_else(|| GcPolicy::from_id(m.sb.gc_policy))
            .unwrap_or(GcPolicy::Greedy);
        let slot_bytes = geo.checkpoint_slot_bytes;
        // Never more often than every two segments: each checkpoint seals the open
        // chunks, and sealing more often than that wastes space in headers.
        let checkpoint_interval = opts
            .checkpoint_interval_bytes
            .unwrap_or((64u64 << 20).max(32 * slot_bytes))
            .max(2 * geo.segment_bytes());
        if let Some(v) = m.sb.v2 {
            if v.features_ro_compat != 0 && !opts.read_only {
                return Err(Error::InvalidArgument(format!(
                    "{}: the volume uses read-only-compatible features this build does not know (bits {:#x}); mount it read-only",
                    media.describe(),
                    v.features_ro_compat
                )));
            }
        }
        let next_seq = m.next_seq;
        let needs_checkpoint = m.needs_checkpoint;
        let mut report = m.report.clone();
        let uuid = m.sb.uuid;
        let compress_new = m.sb.compresses_new_writes();
        let mut core = Core::new(geo, uuid, m.map, m.segs, next_seq);
        core.policy = policy;
        core.clock = opts.clock;
        // A compressed volume keeps its 5-byte map (and reads, moves and
        // checks its fragments) whatever its setting; with compression
        // switched off (`compat::COMPRESS_OFF`, `sluice tune`) its user
        // chunks are placed at open, as an uncompressed volume's are.
        // MUTANT: tune-off-ignored s|core.map.is_wide() && compress_new|core.map.is_wide()|
        core.compressed = core.map.is_wide() && compress_new;
        core.gc_classes = policy.gc_classes();
        core.hot_lifetime = policy.hot_lifetime(geo.logical_blocks);
        if policy.decay_hints() {
            core.segs.mean_life = geo.logical_blocks;
            core.segs.half_life = ((geo.logical_blocks as f64 * gc::DECAY_HALF_LIFE) as u64).max(1);
        }
        if core.hot_lifetime > 0 {
            core.last_write = vec![0; geo.logical_blocks as usize];
        }
        if m.sb
            .v2
            .is_some_and(|v| v.has(crate::format::superblock::incompat::LSN))
        {
            core.start_lsn(m.next_lsn);
        }
        // every chain starts unknown: this life's first chunk of a class
        // names no predecessor (recovery::chain says why that is enough)
        core.chain_on =
            m.sb.v2
                .is_some_and(|v| v.has(crate::format::superblock::incompat::CHAIN));
        core.mixed_check =
            m.sb.v2
                .is_some_and(|v| v.has(crate::format::superblock::incompat::MIXED_HEADER_CHECK));
        let log_start = m.log.as_ref().map(|l| l.start);
        if let (Some(start), Some((at, bytes))) = (log_start, m.log_ring) {
            let mut ring = intent::Ring::new(at, bytes, start);
            // version 3 records place data through the flat store only (a
            // stripe set or an object store writes whole rows or segments)
            if m.sb.log_indirect() && opts.store.is_none() && opts.stripe_set.is_none() {
                ring = ring.indirect(media.direct_unit().clamp(512, BS));
            }
            core.ring = Some(ring);
        }
        // lifetime counters: the checkpoint's, or (none recorded) counting
        // starts at create when no checkpoint was ever written, else now
        let mut lifetime = m.lifetime.unwrap_or_else(|| Lifetime {
            since_unix_s: if m.sb.checkpoint_slot == NO_CHECKPOINT {
                m.sb.created_unix_s
            } else {
                opts.clock.unix_s()
            },
            ..Lifetime::default()
        });
        if !opts.read_only {
            lifetime.mounts += 1;
        }
        let counters = Arc::new(Counters::with_lifetime(lifetime));
        let crc_index = Arc::new(crate::crc_index::CrcIndex::new(&geo, uuid));
        let store: Arc<dyn SegmentStore> = match (&opts.store, &opts.stripe_set) {
            (Some(h), _) => {
                if h.0.segment_count() != geo.segment_count
                    || h.0.segment_blocks() != geo.segment_blocks
                {
                    return Err(Error::InvalidArgument(format!(
                        "{}: the segment store given has {} segments of {} blocks, the volume {} of {}",
                        media.describe(),
                        h.0.segment_count(),
                        h.0.segment_blocks(),
                        geo.segment_count,
                        geo.segment_blocks
                    )));
                }
                h.0.clone()
            }
            (None, Some(set)) => striped::store(set, &geo)?,
            (None, None) => Arc::new(FlatStore::new(media.clone(), &geo)),
        };
        core.closes = Some(store.clone());
        let commit = Arc::new(Commit::new(
            commit::Places {
                media: media.clone(),
                store: store.clone(),
                logs: commit::LogDeviceSet {
                    devs: log_media,
                    missing: m.log_missing.len(),
                    absent: m.log_absent,
                },
            },
            geo,
            counters.clone(),
            crc_index.clone(),
            core.pool.clone(),
            m.sb.clone(),
            next_seq,
            opts,
        ));
        let threaded = opts.background && !opts.read_only;
        let sh = Arc::new(Shared {
            store,
            geo,
            opts: opts.clone(),
            policy,
            core: EngineLock::new(core),
            reuse: RwLock::new(()),
            rmw: Mutex::new(()),
            counters,
            crc_index,
            scrub: scrub::Scrub::new(),
            closed: AtomicBool::new(false),
            commit,
            hk: Housekeeper::new(
                geo.reserve(),
                (geo.segment_count / 64).max(3),
                geo.segment_blocks,
                checkpoint_interval,
                threaded,
            ),
            stream_places: opts.store.is_none() && opts.stripe_set.is_none(),
            flush_mark: std::sync::atomic::AtomicU64::new(0),
            host_writes: std::sync::atomic::AtomicU32::new(0),
            writes_since_flush: std::sync::atomic::AtomicU32::new(0),
            writes_last_interval: std::sync::atomic::AtomicU32::new(0),
            packed_bufs: read::PackedBufs::new(),
            fill: opts.flush_fill.then(fill::Fill::new),
        });
        // Writers first: the mount's own checkpoint may queue chunks for them.
        let writers = sh.commit.start_writers()?;
        if let Some(start) = log_start {
            sh.commit.start_log(start.seq);
        }
        let t_finish = std::time::Instant::now();
        if !opts.read_only {
            // before anything else is written (the mount's wipes could
            // otherwise be undone by a rewrite of an old block 0)
            sh.repair_healed(&m.healed, &uuid);
        }
        let r = sh
            .resync_after_mount(&m.replayed)
            .and_then(|_| sh.finish_mount(&m.wipe, needs_checkpoint, m.superblock_repair))
            .and_then(|_| match (&m.log, log_start) {
                (Some(log), Some(start)) => sh.finish_log(log, start),
                _ => Ok(()),
            })
            .and_then(|_| sh.mount_clean());
        if let Err(e) = r {
            sh.commit.stop_writer_threads(writers);
            return Err(e);
        }
        report
            .steps
            .push(("finish", t_finish.elapsed().as_micros() as u64));
        report.mount_ms = t0.elapsed().as_millis() as u64;
        let vol = Volume {
            sh: sh.clone(),
            housekeeper: Mutex::new(None),
            scrubber: Mutex::new(None),
            writers: Mutex::new(writers),
            filler: Mutex::new(None),
            report,
            unvouched,
            stripe: opts.stripe_set.clone(),
            rebuilder: Default::default(),
        };
        if let (true, Some(fill)) = (threaded, &sh.fill) {
            let f = sh.clone();
            fill.thread_started();
            match std::thread::Builder::new()
                .name("sluice-fill".into())
                .spawn(move || {
                    if let Some(fill) = &f.fill {
                        fill.thread(&|n| f.flush_group(false, n));
                    }
                }) {
                Ok(h) => *vol.filler.lock() = Some(h),
                Err(e) => {
                    fill.stop_thread();
                    return Err(Error::Io(e));
                }
            }
        }
        if opts.background && !opts.read_only {
            let hk = sh.clone();
            *vol.housekeeper.lock() = Some(
                std::thread::Builder::new()
                    .name("sluice-housekeeper".into())
                    .spawn(move || hk.housekeeper_thread())
                    .map_err(Error::Io)?,
            );
        }
        if let Some(rate) = opts.scrub_rate {
            let sc = sh.clone();
            *vol.scrubber.lock() = Some(
                std::thread::Builder::new()
                    .name("sluice-scrub".into())
                    .spawn(move || sc.scrubber(rate))
                    .map_err(Error::Io)?,
            );
        }
        Ok(vol)
    }

    pub fn size_bytes(&self) -> u64 {
        self.sh.geo.logical_bytes()
    }
    pub fn geometry(&self) -> Geometry {
        self.sh.geo
    }
    pub fn uuid(&self) -> [u8; 16] {
        self.sh.commit.sb.lock().uuid
    }
    pub fn gc_policy(&self) -> GcPolicy {
        self.sh.policy
    }
    pub fn mount_report(&self) -> &MountReport {
        &self.report
    }
    /// Salvage mounts: the logical block ranges `[start, end)` that answer EIO.
    pub fn unvouched(&self) -> &[(u64, u64)] {
        &self.unvouched
    }

    /// EIO when a salvage mount cannot vouch for a block of `first..=last`.
    fn check_vouched(&self, first: u64, last: u64) -> Result<()> {
        let i = self.unvouched.partition_point(|&(_, e)| e <= first);
        match self.unvouched.get(i) {
            // EIO to clients, like any unreadable block
            Some(&(s, _)) if s <= last => Err(Error::Corrupt(format!(
                "logical block {}: a salvage mount cannot vouch for it (its newest record may lie in a damaged chunk; `sluice check` lists the ranges)",
                s.max(first)
            ))),
            _ => Ok(()),
        }
    }
    pub fn is_read_only(&self) -> bool {
        self.sh.opts.read_only
    }
    /// The intent log's devices this mount uses, in mirror order, each with
    /// whether it is still in use (a write or flush error takes one out).
    /// Devices missing at mount are in `mount_report().notes`; how many the
    /// volume runs without, in `stats().log_devices_degraded`.
    pub fn log_devices(&self) -> Vec<(String, bool)> {
        self.sh.commit.log_device_state()
    }
    pub fn superblock(&self) -> Superblock {
        self.sh.commit.sb.lock().clone()
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.size_bytes();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfRange { offset, len, size }),
        }
    }

    /// `write`: the call changes the volume or its media (write, trim, zero,
    /// flush, housekeeping); those fail on a stopped volume. Reads do not:
    /// a stopped volume keeps serving what it holds (see `failure`).
    fn check_usable(&self, write: bool) -> Result<()> {
        if self.sh.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if !write {
            return Ok(());
        }
        if self.sh.opts.read_only {
            return Err(Error::ReadOnly);
        }
        self.sh.check_failed()
    }

    /// Why the volume stopped, if it did. A stopped volume (a media write or
    /// flush error, a full host file system, media that shrank) answers every
    /// write, trim, zero and flush with `Error::Failed` (errno ENOSPC when the
    /// host file system is full, else EIO), and keeps answering reads: blocks
    /// on the media are verified as always, and blocks acknowledged but never
    /// written (their chunk's write failed or never started) are served from
    /// the memory that still holds them, so no read is ever wrong. A restart
    /// mounts what was flushed.
    pub fn failure(&self) -> Option<crate::error::Failure> {
        self.sh.commit.failure()
    }

    /// Read `buf.len()` bytes at byte `offset` (any alignment).
    /// Read several byte ranges `(offset, length)` at once: the media reads of all
    /// of them are issued together (io_uring on files and block devices), which
    /// is how the NBD server serves a burst of pipelined READs. Each range gets its
    /// own result; a media error fails every range of the batch.
    pub fn read_batch(&self, ranges: &[(u64, u32)]) -> Vec<Result<ReadBuf>> {
        let mut out: Vec<Result<ReadBuf>> = Vec::with_capacity(ranges.len());
        let mut todo: Vec<(u64, &mut [u8])> = Vec::new();
        for &(offset, len) in ranges {
            out.push(
                self.check_usable(false)
                    .and_then(|_| self.check_range(offset, len as u64))
                    .and_then(|_| {
                        self.check_vouched(offset / BS, (offset + (len as u64).max(1) - 1) / BS)
                    })
                    .map(|_| {
                        let first = offset / BS;
                        let last = (offset + (len as u64).max(1) - 1) / BS;
                        ReadBuf {
                            buf: AlignedBuf::new((last - first + 1) as usize * BLOCK_BYTES),
                            skip: (offset % BS) as usize,
                            len: len as usize,
                        }
                    }),
            );
        }
        for (r, &(offset, len)) in out.iter_mut().zip(ranges) {
            if let Ok(rb) = r {
                if len > 0 {
                    todo.push((offset / BS, &mut rb.buf[..]));
                }
            }
        }
        let mut res: Vec<Result<()>> = todo.iter().map(|_| Ok(())).collect();
        let batch = self.sh.read_blocks_batch(&mut todo, &mut res);
        drop(todo);
        if let Err(e) = batch {
            let msg = e.to_string();
            for r in out.iter_mut() {
                if r.is_ok() {
                    *r = Err(Error::Io(std::io::Error::other(msg.clone())));
                }
            }
        } else {
            // a range that failed verification gets its own error
            let mut res = res.into_iter();
            for (r, &(_, len)) in out.iter_mut().zip(ranges) {
                if r.is_ok() && len > 0 {
                    if let Some(Err(e)) = res.next() {
                        *r = Err(e);
                    }
                }
            }
            let n: u64 = out.iter().flatten().map(|r| r.len as u64).sum();
            Counters::add(&self.sh.counters.host_read_bytes, n);
        }
        out
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_usable(false)?;
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let first = offset / BS;
        let last = (offset + buf.len() as u64 - 1) / BS;
        self.check_vouched(first, last)?;
        let n = (last - first + 1) as usize;
        if offset.is_multiple_of(BS)
            && buf.len().is_multiple_of(BLOCK_BYTES)
            && (buf.as_ptr() as usize).is_multiple_of(BLOCK_BYTES)
        {
            // aligned for O_DIRECT: read straight into the caller's buffer
            self.sh.read_blocks(first, buf)?;
        } else {
            let mut tmp = AlignedBuf::new(n * BLOCK_BYTES);
            self.sh.read_blocks(first, &mut tmp)?;
            let skip = (offset % BS) as usize;
            buf.copy_from_slice(&tmp[skip..skip + buf.len()]);
        }
        Counters::add(&self.sh.counters.host_read_bytes, buf.len() as u64);
        Ok(())
    }

    /// Write `data` at byte `offset` (any alignment; sub-block writes read-modify-write).
    /// With `fua`, returns only once the data is durable.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.check_usable(true)?;
        self.check_range(offset, data.len() as u64)?;
        if !data.is_empty() {
            if offset.is_multiple_of(BS) && (data.len() as u64).is_multiple_of(BS) {
                self.sh.write_blocks(offset / BS, data)?;
            } else {
                let _g = self.sh.rmw.lock();
                let first = offset / BS;
                let last = (offset + data.len() as u64 - 1) / BS;
                let mut tmp = AlignedBuf::new((last - first + 1) as usize * BLOCK_BYTES);
                let head = (offset % BS) as usize;
                let tail_end = head + data.len();
                if head != 0 {
                    self.sh.read_blocks(first, &mut tmp[..BLOCK_BYTES])?;
                }
                if !tail_end.is_multiple_of(BLOCK_BYTES) && (last > first || head == 0) {
                    let t = tmp.len() - BLOCK_BYTES;
                    self.sh.read_blocks(last, &mut tmp[t..])?;
                }
                tmp[head..tail_end].copy_from_slice(data);
                self.sh.write_blocks(first, &tmp)?;
            }
            Counters::add(&self.sh.counters.host_write_bytes, data.len() as u64);
        }
        if fua {
            self.sh.flush()?;
        }
        Ok(())
    }

    /// Several writes in one call (`(offset, data)` each), as if `write` were
    /// called for each in turn without FUA, for less CPU per write: the
    /// blocks of consecutive whole-block writes are classified and
    /// checksummed together and appended under one hold of the engine lock
    /// per 64 blocks (one look at the commit stage, one pacing slot), so one
    /// thread can keep many writes in flight without a thread each. Writes
    /// that are not whole blocks (or are out of range) run as `write` does,
    /// in their place in the order.
    ///
    /// Returns how many writes, from the first, were appended (acknowledged:
    /// readable at once, covered by any later FLUSH), and the error of the
    /// next one if they were not all: that write, and any after it, may
    /// have been appended in part, as a failed `write` may. A later write of
    /// a block in the batch wins over an earlier one, as with separate calls.
    pub fn write_many(&self, writes: &[(u64, &[u8])]) -> (usize, Result<()>) {
        let whole = |&(offset, data): &(u64, &[u8])| {
            !data.is_empty()
                && offset.is_multiple_of(BS)
                && (data.len() as u64).is_multiple_of(BS)
                && self.check_range(offset, data.len() as u64).is_ok()
        };
        let mut done = 0;
        while done < writes.len() {
            let run = writes[done..].iter().take_while(|w| whole(w)).count();
            if run == 0 {
                // on its own: sub-block, empty, or the range error
                let (offset, data) = writes[done];
                if let Err(e) = self.write(offset, data, false) {
                    return (done, Err(e));
                }
                done += 1;
                continue;
            }
            let batch = &writes[done..done + run];
            if let Err(e) = self
                .check_usable(true)
                .and_then(|()| self.sh.write_many_blocks(batch))
            {
                return (done, Err(e));
            }
            let bytes = batch.iter().map(|w| w.1.len() as u64).sum();
            Counters::add(&self.sh.counters.host_write_bytes, bytes);
            done += run;
        }
        (done, Ok(()))
    }

    /// Make `len` bytes at `offset` read as zeros. Whole blocks cost no data on the
    /// media; with `may_trim` they become holes (as NBD WRITE_ZEROES without NO_HOLE).
    pub fn write_zeroes(&self, offset: u64, len: u64, fua: bool, may_trim: bool) -> Result<()> {
        self.check_usable(true)?;
        self.check_range(offset, len)?;
        let (first_full, end_full) = (offset.div_ceil(BS), (offset + len) / BS);
        if first_full >= end_full {
            if len > 0 {
                self.write(offset, &vec![0u8; len as usize], false)?;
            }
        } else {
            let head = first_full * BS - offset;
            if head > 0 {
                self.write(offset, &vec![0u8; head as usize], false)?;
            }
            // in ascending block order, like every other request
            let v = if may_trim { Virt::Trim } else { Virt::Zero };
            self.sh
                .write_virtual(first_full, end_full - first_full, v)?;
            let tail = offset + len - end_full * BS;
            if tail > 0 {
                self.write(end_full * BS, &vec![0u8; tail as usize], false)?;
            }
        }
        Counters::add(&self.sh.counters.host_zero_bytes, len);
        if fua {
            self.sh.flush()?;
        }
        Ok(())
    }

    /// Discard whole blocks inside the range (partial blocks are left as they are:
    /// TRIM is advisory). Trimmed blocks read as zeros and free their space.
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.check_usable(true)?;
        self.check_range(offset, len)?;
        let (first, end) = (offset.div_ceil(BS), (offset + len) / BS);
        if first < end {
            self.sh.write_virtual(first, end - first, Virt::Trim)?;
        }
        Counters::add(&self.sh.counters.host_trim_bytes, len);
        if fua {
            self.sh.flush()?;
        }
        Ok(())
    }

    /// Return once every write acknowledged before this call is durable.
    /// Its time from here to the acknowledgement goes into the FLUSH latency
    /// histogram of the path it took (`flush_latency`).
    pub fn flush(&self) -> Result<()> {
        let t0 = std::time::Instant::now();
        self.check_usable(false)?;
        Counters::add(&self.sh.counters.host_flushes, 1);
        if self.sh.opts.read_only {
            return Ok(());
        }
        self.sh.check_failed()?;
        let path = self.sh.flush_path(false)?;
        let us = t0.elapsed().as_micros() as u64;
        // MUTANT: flush-latency-unobserved s|self.sh.counters.flush_latency_us[path as usize].observe(us);|let _ = (path, us);|
        self.sh.counters.flush_latency_us[path as usize].observe(us);
        Ok(())
    }

    /// `flush`, answered through `done`: right here (before this returns)
    /// when it does its own media flush, as a lone FLUSH does; else, when a
    /// media flush is already running, by the thread that ends the one
    /// covering it (the writes this FLUSH must make durable are written
    /// before it parks). The same durability as `flush` when `done` runs
    /// with Ok; `done` runs exactly once.
    pub fn flush_then(&self, done: Box<dyn FnOnce(Result<()>) + Send>) {
        let t0 = std::time::Instant::now();
        if let Err(e) = self.check_usable(false) {
            return done(Err(e));
        }
        Counters::add(&self.sh.counters.host_flushes, 1);
        if self.sh.opts.read_only {
            return done(Ok(()));
        }
        if let Err(e) = self.sh.check_failed() {
            return done(Err(e));
        }
        let counters = self.sh.counters.clone();
        self.sh.flush_then(Box::new(move |r| {
            done(r.map(|path| {
                let us = t0.elapsed().as_micros() as u64;
                counters.flush_latency_us[path as usize].observe(us);
            }))
        }));
    }

    /// The FLUSH latency histogram (microseconds) of one durability path:
    /// every `flush` that succeeded, from its call to its return.
    pub fn flush_latency(&self, path: crate::stats::FlushPath) -> &crate::stats::Log2Hist {
        &self.sh.counters.flush_latency_us[path as usize]
    }

    /// Allocation status of `[offset, offset+len)`, as runs (at most 64 Ki blocks
    /// are examined per call; the runs may cover less than asked).
    pub fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.check_usable(false)?;
        self.check_range(offset, len)?;
        let mut out: Vec<Extent> = Vec::new();
        if len == 0 {
            return Ok(out);
        }
        let first = offset / BS;
        let last = ((offset + len - 1) / BS).min(first + 65535);
        let c = self.sh.core.lock();
        for b in first..=last {
            let (hole, zero) = match c.map.get(b) {
                Loc::Unmapped | Loc::Virtual(Virt::Trim, _) => (true, true),
                Loc::Virtual(Virt::Zero, _) => (false, true),
                _ => (false, false),
            };
            let start = (b * BS).max(offset);
            let end = ((b + 1) * BS).min(offset + len);
            match out.last_mut() {
                Some(e) if e.hole == hole && e.zero == zero => e.length += end - start,
                _ => out.push(Extent {
                    length: end - start,
                    hole,
                    zero,
                }),
            }
        }
        Ok(out)
    }

    /// The segment table as text, for a test that hit `NoSpace` to print
    /// (state, fill, live and estimated live blocks of every segment, the
    /// free list, the reserve, the open and staged user chunks). Not an
    /// interface: its lines may change.
    #[doc(hidden)]
    pub fn debug_segments(&self) -> String {
        use std::fmt::Write;
        let c = self.sh.core.lock();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "free {:?} reserve {} open_seg {:?} user_spare {:?} staged {} unplanned_takes {} gc_class_fallbacks {}",
            c.segs.free,
            self.sh.hk.reserve,
            c.open_seg,
            c.user_spare,
            c.staged.len(),
            c.unplanned_takes,
            c.gc_class_fallbacks
        );
        for (i, s) in c.segs.segs.iter().enumerate() {
            let _ = writeln!(
                o,
                "seg {i:3} {:?} fill {} live {} data_live {} frag_live {} frag_mean {} live_blocks {}",
                s.state,
                s.fill,
                s.live,
                s.data_live,
                s.frag_live,
                s.frag_mean,
                s.live_blocks()
            );
        }
        o
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.sh.stats();
        if let Some(set) = &self.stripe {
            let st = set.status();
            s.stripe_members_down = st.down.len() as u64;
            s.stripe_reconstructed = st.reconstructed;
            s.stripe_member_reads = st.member_reads;
            s.stripe_healed = st.healed;
            s.stripe_meta_copies_bad = st.meta_copies_bad;
            s.stripe_meta_copies_rewritten = st.meta_copies_rewritten;
            if let Some(p) = st.rebuild {
                s.stripe_rebuild_done = p.next_segment as u64;
                s.stripe_rebuild_total = p.segment_count as u64;
            }
        }
        s
    }

    /// Run GC until at least `segments` are free beyond the reserve, or no victim
    /// can be cleaned. Returns how many segments were cleaned.
    pub fn gc_until_free(&self, segments: u32) -> Result<u64> {
        self.check_usable(true)?;
        self.sh.gc_until_free(segments)
    }

    /// Scrub one segment now (the oldest one a failed read marked, else the next
    /// of the scrub walk) and say what it found (also counted in `stats`).
    pub fn scrub_step(&self) -> Result<ScrubOutcome> {
        self.check_usable(false)?;
        self.sh.scrub_step()
    }

    /// Write a checkpoint now.
    pub fn checkpoint(&self) -> Result<()> {
        self.check_usable(true)?;
        self.sh.checkpoint_now(false)
    }

    /// One round of what the housekeeper thread does (seal and write an idle
    /// user chunk, clean ahead / GC and the reuse barrier, checkpoint when due),
    /// synchronously on the caller's thread. Tests drive the schedule with it.
    pub fn housekeeper_step(&self) -> Result<()> {
        self.check_usable(true)?;
        self.sh.housekeeper_step().map(|_| ())
    }

    /// Stop the housekeeper, write a clean checkpoint. Further calls fail with Closed.
    pub fn close(&self) -> Result<()> {
        if self.sh.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_housekeeper();
        if self.sh.opts.read_only {
            return Ok(());
        }
        self.sh.check_failed()?;
        let r = self.sh.checkpoint_now(true);
        self.stop_writers();
        r
    }

    /// Writer threads finish what is queued, then exit (the fill thread
    /// first: a group it leads waits for them).
    fn stop_writers(&self) {
        if let (Some(fill), Some(h)) = (&self.sh.fill, self.filler.lock().take()) {
            fill.stop_thread();
            let _ = h.join();
        }
        let writers: Vec<_> = self.writers.lock().drain(..).collect();
        self.sh.commit.stop_writer_threads(writers);
    }

    fn stop_housekeeper(&self) {
        // the rebuild first: it stops between two batches, its record at
        // its last mark (the checkpoint `close` writes next is not its)
        self.rebuilder.stop();
        self.sh.hk.stop();
        if let Some(h) = self.housekeeper.lock().take() {
            let _ = h.join();
        }
        self.sh.scrub.stop();
        if let Some(h) = self.scrubber.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Volume {
    /// Dropping without `close` is a crash as far as the media is concerned: no
    /// checkpoint is written and unflushed data may be lost (flushed data never is).
    fn drop(&mut self) {
        self.stop_housekeeper();
        self.stop_writers();
    }
}

impl Shared {
    /// Last step of a read-write mount (`finish`): checkpoint what replay found (or
    /// just mark the volume open), then wipe the first block of segments found free.
    fn finish_mount(&self, wipe: &[u32], needs_checkpoint: bool, sb_repair: bool) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        // The reuse barrier's order: first persist the durable point (a checkpoint
        // of what replay found, whose next_seq lies above every chunk seen), and
        // only then tombstone the segments found free. Wiping first would let a
        // power cut in between end the next mount's log at a wiped chunk.
        if needs_checkpoint {
            self.checkpoint_now(false)?;
        } else {
            self.commit
                .update_superblock(|sb| sb.flags &= !FLAG_CLEAN)?;
        }
        if sb_repair {
            // A superblock copy is lost: the write above renewed one index at
            // both ends, this one renews the other (same content, next generation).
            self.commit.update_superblock(|_| {})?;
        }
        if !wipe.is_empty() {
            self.commit.wipe(wipe)?;
            self.core.lock().segs.wiped(wipe);
        }
        // the free segments after the wipes: give back what waits deep
        self.discard_deep()
    }

    pub(crate) fn check_failed(&self) -> Result<()> {
        self.commit.check_failed()
    }

    pub(crate) fn durable_seq(&self) -> u64 {
        self.commit.durable_seq()
    }

    fn write_blocks(&self, lba0: u64, data: &[u8]) -> Result<()> {
        let n = (data.len() / BLOCK_BYTES) as u64;
        self.append_run(lba0, n, &mut HostBlocks::new(data))
    }

    /// Append the blocks of whole-block, in-range writes, in order.
    fn write_many_blocks(&self, writes: &[(u64, &[u8])]) -> Result<()> {
        let mut recs = ManyBlocks::new(writes);
        let n = recs.len();
        self.append_run(0, n, &mut recs)
    }

    fn write_virtual(&self, lba0: u64, n: u64, v: Virt) -> Result<()> {
        self.append_run(lba0, n, &mut VirtualRecords { lba0, v })
    }

    /// Append records for blocks lba0..lba0+n to the user stream; `recs` says
    /// what to record for each block. The engine lock is held for at most
    /// `recs.per_lock()` blocks at a time, after `recs.prepare` did the work
    /// that needs no lock for them (classification and CRCs of host data), so
    /// under the lock a data block costs one 4 KiB copy (none when streamed:
    /// log.rs, the image invariant). The blocks of one
    /// request still enter the user stream in ascending order; another
    /// request's may come between two batches, as between two chunks.
    fn append_run<'a>(&self, lba0: u64, n: u64, recs: &mut dyn Records<'a>) -> Result<()> {
        self.hk.note_write();
        let reserve = self.hk.reserve;
        let per_lock = recs.per_lock();
        // a large host write streams its data blocks to their places itself,
        // while other requests fill the chunk, instead of leaving them all
        // to the chunk's one write after its seal (docs/intent-log.md §4.4)
        let host = recs.host_bytes(0, 0).is_some();
        // MUTANT: streaming-off s|self.stream_places && host|false && host|
        let stream = self.stream_places && host && n >= STREAM_MIN_BLOCKS && self.flush_near();
        let _writing = host.then(|| {
            self.writes_since_flush.fetch_add(1, Ordering::Relaxed);
            HostWrite::enter(&self.host_writes)
        });
        let mut claims = Claims::default();
        let mut sealed = Vec::new();
        let mut since_checkpoint = 0;
        let mut i = 0;
        while i < n {
            let mut out = Vec::new();
            let start = i;
            let end = (i + per_lock).min(n);
            recs.prepare(i, end);
            let (need_space, level, headroom, log_bytes, pack_due, mut rec) = {
                let mut c = self.core.lock();
                // one look at progress per batch: failure, durable and written marks
                let durable = {
                    let p = self.commit.progress.lock();
                    if let Some(f) = &p.failed {
                        return Err(Error::Failed(f.clone()));
                    }
                    c.prune_inflight(&p);
                    p.durable
                };
                let level = (c.segs.free.len() + c.segs.pending.len()) as u32;
                let level = level.saturating_sub(reserve);
                if self.commit.async_writes && level < self.hk.clean_mark {
                    // below the clean-ahead mark: let the housekeeper clean now
                    self.hk.wake();
                }
                let mut need = false;
                while i < end {
                    let Some(w) = recs.what(&c.map, i) else {
                        i += 1;
                        continue;
                    };
                    let data = matches!(w, What::Data(..));
                    // a streamed block is not copied into the chunk image
                    // (log.rs): its claim below, in this hold, says so
                    let w = match w {
                        What::Data(b, crc) if stream => What::Streamed(b, crc),
                        w => w,
                    };
                    match c.append(
                        Stream::User,
                        recs.lba(lba0, i),
                        w,
                        NO_SRC,
                        reserve,
                        durable,
                        &mut out,
                    ) {
                        Ok(()) => {
                            if stream && data {
                                // None: a staged chunk (no place), which
                                // took the block's copy
                                if let Some(block) = c.last_user_data() {
                                    claims.push(block, i);
                                }
                            }
                            i += 1
                        }
                        Err(NeedSpace) => {
                            need = true;
                            break;
                        }
                    }
                }
                // MUTANT: stream-claims-untaken s|claims.claim_pending();|();|
                claims.claim_pending();
                // the request's last blocks are in, no other host write is
                // under way and none came between the last two FLUSHes: with a version 3 ring, a record naming what
                // the open chunk holds unlogged goes out with its data, so
                // the FLUSH after it writes nothing but the media flush
                // (docs/intent-log.md §4.5, §4.11). With company (the
                // bench's pieces of one large write, 8 jobs) each request
                // would write a record where their FLUSH writes one.
                // MUTANT: streamed-record-with-company s|Ordering::Acquire) == 1|Ordering::Acquire) >= 1|
                let alone = self.host_writes.load(Ordering::Acquire) == 1
                    && self.writes_last_interval.load(Ordering::Relaxed) <= 1;
                // or it is the last write of a burst as long as the last
                // interval's (the 8th of 8 pieces): its record names the
                // blocks the burst's other writes are still placing too, and
                // counts written once they are placed (`Commit::place`), so
                // their FLUSH finds nothing to log (docs/intent-log.md §4.13)
                let last = self.writes_last_interval.load(Ordering::Relaxed);
                let burst_end =
                    last >= 2 && self.writes_since_flush.load(Ordering::Relaxed) >= last;
                let rec =
                    match stream && (alone || burst_end) && i >= n && !need && !claims.0.is_empty()
                    {
                        true if self.commit.streams_records() => {
                            c.plan_streamed_record(&|p, idx| claims.owns(p, idx), !alone)
                        }
                        _ => None,
                    };
                let log_bytes = c.bytes_since_checkpoint;
                (
                    need,
                    level,
                    c.headroom_blocks(reserve),
                    log_bytes,
                    c.pack_due(),
                    rec,
                )
            };
            since_checkpoint = log_bytes;
            if pack_due {
                self.pack_staged(&mut out)?;
            }
            if !stream {
                self.commit.submit(out)?;
            } else {
                sealed.append(&mut out);
                if claims.0.is_empty()
                    || need_space
                    || i >= n
                    || claims.blocks() >= STREAM_BATCH_BLOCKS
                {
                    if self.commit.async_writes {
                        // the chunks sealed meanwhile go to the writer
                        // threads first, so their headers are written beside
                        // the claimed blocks rather than after them (a seal
                        // still counts its chunk written only once the claims
                        // in it ended, `Placed::wait_idle`)
                        self.commit.submit_now(std::mem::take(&mut sealed))?;
                        self.place_claims(&mut claims, recs, rec.take())?;
                        self.commit.wait_queue_space()?;
                    } else {
                        // deterministic mode: `submit` writes on this thread,
                        // and its seal would wait for claims nobody writes
                        self.place_claims(&mut claims, recs, rec.take())?;
                        self.commit.submit(std::mem::take(&mut sealed))?;
                    }
                }
            }
            assert!(rec.is_none(), "a streamed write's record left unwritten");
            let slept = self.hk.pace(i - start, level, headroom);
            if slept > 0 {
                Counters::add(&self.counters.pace_sleeps, 1);
                Counters::add(&self.counters.pace_sleep_us, slept / 1000);
            }
            if need_space {
                self.wait_for_space()?;
            }
        }
        if stream {
            self.place_claims(&mut claims, recs, None)?;
            self.commit.submit(sealed)?;
        }
        self.after_append(since_checkpoint)
    }

    /// A FLUSH is near: fewer than `STREAM_NEAR_FLUSH_BYTES` host bytes were
    /// written since the last one began (or the mount), so a large write
    /// streams its blocks for the FLUSH to find on the media; far from one,
    /// its blocks wait in their chunk for the writer threads (write-behind).
    fn flush_near(&self) -> bool {
        let written = self.counters.host_write_bytes.load(Ordering::Relaxed);
        let mark = self.flush_mark.load(Ordering::Relaxed);
        written.saturating_sub(mark) < STREAM_NEAR_FLUSH_BYTES
    }

    /// Write the claimed runs of a streamed host write at their places, in
    /// one submission (`Commit::place`), from the caller's buffer when it
    /// is aligned for direct IO, else from a copy in a pool buffer. A share
    /// of the reuse lock is held across the write, as a FLUSH's placing
    /// write holds one (`flush_path`).
    fn place_claims<'a>(
        &self,
        claims: &mut Claims,
        recs: &dyn Records<'a>,
        rec: Option<intent::PlannedRecord>,
    ) -> Result<()> {
        if claims.0.is_empty() {
            assert!(rec.is_none(), "a streamed record without streamed data");
            return Ok(());
        }
        let runs = std::mem::take(&mut claims.0);
        let mut copies = Vec::new();
        let mut bytes = Vec::with_capacity(runs.len());
        for r in &runs {
            let n = (r.to - r.from) as u64;
            let host = recs
                .host_bytes(r.host_from, r.host_from + n)
                .expect("claims come from host data");
            if (host.as_ptr() as usize).is_multiple_of(BLOCK_BYTES) {
                bytes.push(None);
            } else {
                let mut b = self.commit.pool_buf();
                if b.len() < host.len() {
                    b = AlignedBuf::new(host.len());
                }
                b[..host.len()].copy_from_slice(host);
                self.commit.count_streamed_copy(n);
                bytes.push(Some(copies.len()));
                copies.push(b);
            }
        }
        let place: Vec<commit::PlaceRun> = runs
            .iter()
            .zip(&bytes)
            .map(|(r, c)| {
                let len = (r.to - r.from) as usize * BLOCK_BYTES;
                commit::PlaceRun {
                    placed: r.placed.clone(),
                    segment: r.segment,
                    block: r.block,
                    from: r.from,
                    to: r.to,
                    bytes: match c {
                        Some(k) => &copies[*k][..len],
                        None => recs
                            .host_bytes(r.host_from, r.host_from + (r.to - r.from) as u64)
                            .expect("claims come from host data"),
                    },
                }
            })
            .collect();
        let res = {
            // recursive: a reader of these claimed blocks waits for this write
            // under its own share (`read_once`), so this take must not queue
            // behind a barrier that waits for that share
            let _r = self.reuse.read_recursive();
            self.commit.place(&place, rec.as_ref())
        };
        drop(place);
        for b in copies {
            self.commit.recycle(b);
        }
        res
    }

    /// Return once every write acknowledged before this call is durable: the
    /// open user chunk's unlogged records go to the intent log as one record
    /// when they are few (`Core::flush_plan`), else the chunk is sealed; either
    /// way every chunk sealed before and every record built before is covered
    /// by the one media flush this waits for.
    pub(crate) fn flush(&self) -> Result<()> {
        self.flush_sealing(false)
    }

    /// `flush`; with `seal`, the open user chunk is sealed even when the
    /// intent log could take its records (the idle seal).
    pub(crate) fn flush_sealing(&self, seal: bool) -> Result<()> {
        self.flush_path(seal).map(|_| ())
    }

    /// `flush_sealing`, saying how it made the writes durable: `Seal` when it
    /// sealed a chunk (or fell back to sealing), `Log` when it sealed none
    /// with an intent log in use.
    /// A host FLUSH (`seal` false) goes through the fill (`fill.rs`): when
    /// a FLUSH group is in flight it joins the next group, whose leader
    /// plans one record (or seal) and one media flush for all of it.
    pub(crate) fn flush_path(&self, seal: bool) -> Result<crate::stats::FlushPath> {
        match (self.filling(), seal) {
            (Some(fill), false) => fill.flush(&|n| self.flush_group(false, n), &|| {
                self.note_host_flush();
                Counters::add(&self.counters.flushes_joined, 1)
            }),
            _ => self.flush_group(seal, 1),
        }
    }

    /// The fill, when FLUSHes go through it now: while the commit stage
    /// runs one media flush at a time (it serialises FLUSH groups, which
    /// would stop PUTs overlapping where the media allows several).
    fn filling(&self) -> Option<&fill::Fill> {
        // MUTANT: fill-never-joins s|self.commit.flushes_at_once() <= 1|false|
        let one = self.commit.flushes_at_once() <= 1;
        self.fill.as_ref().filter(|_| one)
    }

    /// One FLUSH group of `members` host FLUSHes: the FLUSH's writes
    /// (`flush_write`: a record of every block not yet logged, or a seal),
    /// then the group commit's media flush covering them.
    fn flush_group(&self, seal: bool, members: u32) -> Result<crate::stats::FlushPath> {
        let w = self.flush_write(seal, members)?;
        if !self.commit.flush_covering_log(w.target, w.rec_target)? {
            // a record this waits for was lost with the last log device:
            // seal everything appended so far into the main log instead
            return self.flush_group(true, members);
        }
        self.flush_done(&w)
    }

    /// `flush_path` answered through `done` instead of returned: when its
    /// chunks and record are written and a media flush is already running,
    /// it parks (`Commit::flush_covering_log_then`) and the thread that
    /// ends the flush covering it runs `done`; else `done` runs here before
    /// this returns.
    pub(crate) fn flush_then(
        self: &Arc<Self>,
        done: Box<dyn FnOnce(Result<crate::stats::FlushPath>) + Send>,
    ) {
        if let Some(fill) = self.filling() {
            // a group in flight: park in the open group (its leader answers);
            // else lead here, as a blocking FLUSH
            return fill.flush_then(
                done,
                &|n| self.flush_group(false, n),
                &|| {
                    self.note_host_flush();
                    Counters::add(&self.counters.flushes_joined, 1)
                },
                &|| Counters::add(&self.counters.flushes_parked, 1),
            );
        }
        self.flush_then_parking(done)
    }

    /// `flush_then` without the fill: the FLUSH plans and writes its own
    /// record, then parks in the commit stage when a media flush runs.
    fn flush_then_parking(
        self: &Arc<Self>,
        done: Box<dyn FnOnce(Result<crate::stats::FlushPath>) + Send>,
    ) {
        let w = match self.flush_write(false, 1) {
            Ok(w) => w,
            Err(e) => return done(Err(e)),
        };
        let (target, rec_target) = (w.target, w.rec_target);
        let sh = self.clone();
        let answer: commit::Answer = Box::new(move |r| {
            done(match r {
                Ok(true) => sh.flush_done(&w),
                // the record was lost with the log: seal instead
                Ok(false) => sh.flush_path(true),
                Err(e) => Err(e),
            })
        });
        self.commit
            .flush_covering_log_then(target, rec_target, answer);
    }

    /// After the media flush that made a FLUSH's writes durable: a new
    /// intent log start when the ring wants one.
    fn flush_done(&self, w: &FlushWrite) -> Result<crate::stats::FlushPath> {
        if w.rec_target > 0 && w.start_wanted {
            self.persist_log_start(false)?;
        }
        Ok(w.path)
    }

    /// A host FLUSH or FUA (the idle seal is not one) begins, whether it
    /// plans its writes or joins a FLUSH group: large writes stream again
    /// for a while (`flush_near`), and a FLUSH interval ends.
    fn note_host_flush(&self) {
        let written = self.counters.host_write_bytes.load(Ordering::Relaxed);
        self.flush_mark.store(written, Ordering::Relaxed);
        let n = self.writes_since_flush.swap(0, Ordering::Relaxed);
        self.writes_last_interval.store(n, Ordering::Relaxed);
    }

    /// A FLUSH's writes: the open user chunk's unlogged records as one
    /// intent log record, or the chunk sealed (and every chunk sealed
    /// before); what it must then wait for.
    fn flush_write(&self, seal: bool, members: u32) -> Result<FlushWrite> {
        if !seal {
            self.note_host_flush();
        }
        let mut out = Vec::new();
        let (target, rec, rec_target, logged, start_wanted) = {
            let mut c = self.core.lock();
            if c.ring.is_some() && self.commit.log_lost() {
                // every log device failed: no more records, FLUSH seals
                c.ring = None;
            }
            let d = self.durable_seq();
            let rec = if seal {
                c.seal(Stream::User, d, &mut out);
                None
            } else {
                c.flush_plan(d, members, &mut out)
            };
            let logged = c.ring.is_some() && out.is_empty();
            // only a ring past half its space is worth a new start: the
            // others skip `persist_log_start` and its two locks
            let start_wanted = c.ring.as_ref().is_some_and(|r| r.wants_new_start());
            (
                c.next_seq,
                rec,
                c.ring.as_ref().map_or(0, |r| r.next_seq),
                logged,
                start_wanted,
            )
        };
        let path = if logged {
            crate::stats::FlushPath::Log
        } else {
            crate::stats::FlushPath::Seal
        };
        // Write the sealed chunk here rather than through the queue: the caller
        // waits for it anyway, and a hand-off to a writer thread costs two wakeups.
        // (A compressed volume's chunk is packed and placed here first.)
        // about to write: a FLUSH starting a media flush meanwhile may wait
        // for this one's writes so its flush covers them (group commit)
        if !out.is_empty() || rec.is_some() {
            self.commit.announce(target, rec_target);
        }
        self.pack_staged(&mut out)?;
        self.commit.write_sealed(out)?;
        if let Some(r) = &rec {
            // a version 3 record writes its data at its places: a share of the
            // reuse lock across that write keeps its segment from passing a
            // reuse barrier (and taking its next life's writes) while the
            // write is in flight (docs/intent-log.md §3)
            let _r = r.data.is_some().then(|| self.reuse.read());
            self.commit.write_record(r)?;
        }
        if let Some(d) = rec.and_then(|r| r.data) {
            // written (or given up): the buffer goes back to the pool
            self.commit.recycle(d.buf);
        }
        Ok(FlushWrite {
            target,
            rec_target,
            path,
            start_wanted,
        })
    }

    /// Persist a new intent log start when half the ring is taken (or
    /// `always`) and records before it have their blocks durable in the main
    /// log: one superblock write, after which their space is free.
    fn persist_log_start(&self, always: bool) -> Result<()> {
        let start = {
            let mut c = self.core.lock();
            let d = self.durable_seq();
            let dl = c.note_durable(d);
            let Some(ring) = c.ring.as_mut() else {
                return Ok(());
            };
            if !ring.claimed || ring.persisting || !(always || ring.wants_new_start()) {
                return Ok(());
            }
            let s = ring.candidate_start(dl);
            if s.seq <= ring.persisted.seq {
                return Ok(());
            }
            ring.persisting = true;
            s
        };
        let r = commit::persist_start(&self.commit, start);
        let mut c = self.core.lock();
        let dl = c.durable_lsn;
        if let Some(ring) = c.ring.as_mut() {
            ring.persisting = false;
            if r.is_ok() {
                ring.advance(start, dl);
            }
        }
        r
    }

    /// Last mount step of a volume with an intent log, after `finish` (whose
    /// wipes must precede any new chunk in the segments they tombstone):
    /// re-home the replayed blocks into the main log and checkpoint them
    /// (claim before reuse), then persist the mount's new start, whose fresh
    /// chain seed no record of the ring's earlier life follows. A read-only
    /// mount keeps the blocks in memory (served from the open chunk).
    fn finish_log(&self, log: &recovery::LogReplay, start: LogStart) -> Result<()> {
        // Re-homing appends to the user stream, which needs a segment. A
        // power cut leaves the segments the open chunks had (user, spare,
        // GC classes) Closed with their room unused, and mount after mount
        // with no write in between that needed a segment (and cleaned) ate
        // the free segments down to none (compress_stress seed 1055): clean
        // first, as a writer's foreground clean would, so more than the
        // reserve is free. The segments replayed records name are held
        // from GC until the new start has passed them.
        if !self.opts.read_only && !log.blocks.is_empty() {
            self.mount_clean()?;
        }
        self.rehome(log)?;
        if self.opts.read_only {
            return Ok(());
        }
        if !log.blocks.is_empty() {
            self.checkpoint_now(false)?;
        }
        // unconditionally: the fresh chain seed must reach the media even
        // when no record was replayed (same seq as before)
        commit::persist_start(&self.commit, start)?;
        let mut c = self.core.lock();
        if let Some(r) = c.ring.as_mut() {
            r.claimed = true;
        }
        // the start has passed the version 3 records: the segments held for
        // their places (`recovery::mount`) are GC's again, and an empty one
        // goes the way of any empty one
        for &(seg, _) in &log.placed {
            c.segs.unhold(seg);
        }
        Ok(())
    }

    fn rehome(&self, log: &recovery::LogReplay) -> Result<()> {
        if log.blocks.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        {
            let mut c = self.core.lock();
            assert_eq!(
                c.next_lsn + log.blocks.len() as u64,
                log.next_lsn,
                "re-homed blocks keep their LSNs"
            );
            let d = self.durable_seq();
            // MUTANT: rehome-copies-nothing s|in &log.blocks {|in &log.blocks[..0] {|
            for &(lba, kind, data) in &log.blocks {
                let what = match data {
                    Some(i) => {
                        // (verified against its record's CRC when replayed)
                        let b = log.data_block(i);
                        What::Data(b, crc32c::crc32c(b))
                    }
                    None => What::Virtual(crate::map::virt_of(kind).expect("virtual kind")),
                };
                // may dip into the GC reserve: these blocks were in the open
                // chunk's reserved place before the crash
                c.append(Stream::User, lba, what, NO_SRC, 0, d, &mut out)
                    .map_err(|NeedSpace| {
                        Error::Corrupt(format!(
                            "no free segment to re-home {} block(s) of the intent log",
                            log.blocks.len()
                        ))
                    })?;
            }
        }
        if self.opts.read_only {
            return Ok(());
        }
        self.pack_staged(&mut out)?;
        self.commit.submit(out)
    }

    /// Compressed volumes: pack every staged chunk nobody packs yet, off the
    /// engine lock, and place what is ready at the head of the queue (in seq
    /// order) into `out`, for the commit stage. The thread that sealed a
    /// chunk calls this right after, so every staged chunk is taken; a chunk
    /// packed while an earlier one is still being packed elsewhere is placed
    /// by that other thread. Uncompressed volumes: one branch, nothing else.
    pub(in crate::volume) fn pack_staged(&self, out: &mut Vec<crate::log::Sealed>) -> Result<()> {
        if self.geo.map_value_bytes != crate::map::VALUE_BYTES_COMPRESSED {
            return Ok(());
        }
        let mut c = self.core.lock();
        loop {
            // direct chunks sealed meanwhile are sampled here too (off the
            // lock): one LZ4 keeps stages the stream's next chunks again
            let samples = std::mem::take(&mut c.to_sample);
            let job = c.take_pack_job();
            if samples.is_empty() && job.is_none() {
                return Ok(());
            }
            let pool = c.pool.clone();
            drop(c);
            let compressible = samples
                .iter()
                .any(|(image, n)| packer::sample_here(image, *n));
            for (image, _) in samples {
                pool.release(image);
            }
            let packed = job.map(|job| {
                let p = packer::pack_here(&job);
                (job, p)
            });
            c = self.core.lock();
            if compressible {
                c.note_compressible();
            }
            if let Some((job, p)) = packed {
                c.finish_pack(job, p);
                c.place_ready(out).map_err(|NeedSpace| Error::NoSpace)?;
            }
        }
    }

    fn stats(&self) -> Stats {
        let c = self.core.lock();
        let seg = |f: fn(SegState) -> bool| c.segs.count_state(f);
        let live: u64 = c.segs.segs.iter().map(|s| s.data_live as u64).sum();
        let base = Stats {
            logical_bytes: self.geo.logical_bytes(),
            host_write_bytes: 0,
            host_read_bytes: 0,
            host_zero_bytes: 0,
            host_trim_bytes: 0,
            host_flushes: 0,
            media_user_data_bytes: 0,
            media_gc_data_bytes: 0,
            media_metadata_bytes: 0,
            media_chunk_header_bytes: 0,
            media_checkpoint_bytes: 0,
            media_superblock_bytes: 0,
            media_write_bytes: 0,
            media_flushes: 0,
            write_amplification: 0.0,
            chunks_sealed: 0,
            gc_runs: 0,
            gc_blocks_moved: 0,
            gc_virtual_moved: 0,
            gc_bytes_read: 0,
            gc_victims_read_runs: 0,
            gc_victims_read_whole: 0,
            gc_class_runs: [0; crate::format::checkpoint::LIFETIME_GC_CLASSES],
            gc_class_blocks_moved: [0; crate::format::checkpoint::LIFETIME_GC_CLASSES],
            checkpoints: 0,
            reuse_barriers: 0,
            barrier_flushes: 0,
            barrier_partial_seals: 0,
            hk_gc_read_us: 0,
            hk_gc_submit_us: 0,
            hk_barrier_us: 0,
            hk_checkpoint_us: 0,
            hk_tail_wait_us: 0,
            hk_tails_overlapped: 0,
            hk_victims_beside_tails: 0,
            pace_sleep_us: 0,
            pace_sleeps: 0,
            space_wait_us: 0,
            space_waits: 0,
            checkpoint_wait_us: 0,
            checkpoint_waits: 0,
            segments_total: c.segs.count(),
            segments_free: seg(|s| s == SegState::Free),
            segments_open: seg(|s| matches!(s, SegState::Open(_))),
            segments_closed: seg(|s| s == SegState::Closed),
            segments_pending: seg(|s| s == SegState::Pending),
            segments_damaged: seg(|s| s == SegState::Damaged),
            live_data_blocks: live,
            map_bytes: c.map.memory_bytes(),
            map_bytes_per_block: c.map.memory_bytes() as f64 / self.geo.logical_blocks as f64,
            segment_table_bytes: c.segs.count() as u64
                * std::mem::size_of::<crate::segments::SegInfo>() as u64,
            crc_errors: 0,
            scrub_segments: 0,
            scrub_bytes: 0,
            scrub_errors: 0,
            crc_index_bytes: self.crc_index.memory_bytes(),
            discarded_bytes: 0,
            log_records: 0,
            media_log_bytes: 0,
            log_flushes: 0,
            group_commit_waits: 0,
            flushes_parked: 0,
            flushes_parked_late: 0,
            flushes_joined: 0,
            streamed_blocks: 0,
            streamed_records: 0,
            streamed_copied_blocks: 0,
            image_copied_blocks: c.image_copied_blocks,
            log_device_errors: 0,
            log_devices_degraded: 0,
            log_fallbacks: 0,
            stripe_members_down: 0,
            stripe_reconstructed: 0,
            stripe_member_reads: 0,
            stripe_healed: 0,
            stripe_meta_copies_bad: 0,
            stripe_meta_copies_rewritten: 0,
            stripe_rebuild_done: 0,
            stripe_rebuild_total: 0,
            failed: false,
            failure: None,
            lifetime: Default::default(),
            lifetime_write_amplification: 0.0,
            compress: {
                let t = c.packed_tally;
                let bs = BLOCK_BYTES as u64;
                crate::stats::CompressStats {
                    host_bytes: t.blocks * bs,
                    stored_bytes: t.stored_blocks * bs,
                    ratio: if t.blocks == 0 {
                        1.0
                    } else {
                        t.stored_blocks as f64 / t.blocks as f64
                    },
                    fragments: t.fragments,
                    skipped_share: if t.blocks == 0 {
                        0.0
                    } else {
                        t.skipped as f64 / t.blocks as f64
                    },
                    skipped_blocks: t.skipped,
                    direct_blocks: t.untested,
                    live_fragments: c.segs.segs.iter().map(|s| s.frag_live as u64).sum(),
                }
            },
        };
        drop(c);
        let mut s = self.counters.snapshot(base);
        if let Some(f) = self.commit.failure() {
            s.failed = true;
            s.failure = Some(f.why);
        }
        s
    }
}

/// Make `dev` log device mirror `index` of `count` of the volume whose
/// superblock is `sb` (it must have `LOG_DEVICE`): both superblock copies and
/// a zeroed first ring block, flushed. Used by `Volume::format` and by
/// `replace_log_device`; whatever `dev` held is overwritten (the caller has
/// locked and probed it).
pub fn format_log_device(
    dev: &dyn Media,
    sb: &Superblock,
    index: u16,
    count: u16,
    created_unix_s: u64,
) -> Result<()> {
    let (log_uuid, ring) = sb.log_device().ok_or_else(|| {
        Error::InvalidArgument("the volume keeps no intent log on a log device".into())
    })?;
    if index >= count || count > crate::format::logdev::MAX_LOG_MIRRORS {
        return Err(Error::InvalidArgument(format!(
            "log device mirror {index} of {count}: the index must be below the count (at most 2)"
        )));
    }
    let ls = crate::format::logdev::LogDevSuperblock {
        volume_uuid: sb.uuid,
        log_uuid,
        ring_offset: crate::format::logdev::LOGDEV_RING_OFFSET,
        ring_bytes: ring,
        mirror_index: index,
        mirror_count: count,
        created_unix_s,
    };
    if dev.len() < ls.device_bytes() {
        return Err(Error::InvalidArgument(format!(
            "{} holds {} bytes; the volume's log ring needs {}",
            dev.describe(),
            dev.len(),
            ls.device_bytes()
        )));
    }
    dev.allocate(&[(0, ls.device_bytes())])?;
    let b = ls.encode();
    commit::write_block(dev, &b, 0)?;
    commit::write_block(dev, &b, BS)?;
    dev.write_at(&AlignedBuf::new(BLOCK_BYTES), ls.ring_offset)?;
    dev.flush()?;
    Ok(())
}

/// Replace log device mirror `index` of a volume that is not mounted: `new`
/// becomes that mirror (`format_log_device`), then the volume is mounted
/// with `new` and `others` (its other devices, if any) and closed cleanly.
/// The mount replays the longest chain among the others (a new device's is
/// empty); writes to every device again from there, and clears the stale
/// mark. Refused when the volume was not closed cleanly and no other device
/// is given (the replaced device's records would be lost) unless
/// `missing_ok`, which mounts without them and reports it
/// (`MountReport::notes`, returned).
pub fn replace_log_device(
    media: Arc<dyn Media>,
    new: LogDevice,
    index: u16,
    others: Vec<LogDevice>,
    missing_ok: bool,
) -> Result<Vec<String>> {
    let mut sb = recovery::read_superblocks(&*media)?.sb;
    let Some(_) = sb.log_device() else {
        return Err(Error::InvalidArgument(format!(
            "{} keeps no intent log on a log device",
            media.describe()
        )));
    };
    let mut count = index + 1;
    for o in &others {
        match recovery::identify_log_device(&*o.0, &sb) {
            Ok(s) if s.mirror_index != index => count = count.max(s.mirror_count),
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{} is log device mirror {index} itself: give the other mirror with it",
                    o.0.describe()
                )))
            }
            Err(why) => {
                return Err(Error::InvalidArgument(format!(
                    "log device {}: {why}",
                    o.0.describe()
                )))
            }
        }
    }
    let mut notes = Vec::new();
    // MUTANT: replace-loses-unclean-log s|!sb.is_clean() && others.is_empty()|false|
    if !sb.is_clean() && others.is_empty() {
        if !missing_ok {
            return Err(Error::InvalidArgument(format!(
                "{} was not closed cleanly and its log device may hold acknowledged writes: mount it with that device first (serve --log-device OLD), or give the other mirror, or accept losing them (--log-device-missing-ok)",
                media.describe()
            )));
        }
        // mount without the log first: it says what is lost and leaves the
        // volume closed cleanly, with nothing in any log
        let vol = Volume::open(
            media.clone(),
            &OpenOptions {
                background: false,
                log_device_missing_ok: true,
                ..OpenOptions::default()
            },
        )?;
        notes.extend(vol.mount_report().notes.iter().cloned());
        vol.close()?;
        drop(vol);
        sb = recovery::read_superblocks(&*media)?.sb;
    }
    format_log_device(&*new.0, &sb, index, count, sb.created_unix_s)?;
    let mut devs = others;
    devs.push(new);
    let vol = Volume::open(
        media,
        &OpenOptions {
            background: false,
            log_devices: devs,
            log_device_missing_ok: missing_ok,
            ..OpenOptions::default()
        },
    )?;
    notes.extend(vol.mount_report().notes.iter().cloned());
    vol.close()?;
    Ok(notes)
}

/// The byte ranges of the metadata area (superblock copies, both checkpoint
/// slots and the intent log ring, if any: everything before the segments), which `Volume::format`
/// allocates on the host (`Media::allocate`) so that a mount, a checkpoint or a
/// superblock write never needs new host space: a full host file system can
/// stop the volume's writes but never its restart. Tombstone blocks need none
/// either: format writes every segment's first block, and discard never
/// punches it.
pub fn metadata_ranges(geo: &Geometry) -> Vec<(u64, u64)> {
    let mut r = vec![(0, geo.data_offset)];
    // the superblock copies at the tail (volumes created since they exist)
    if geo.tail_offset != 0 {
        r.push((geo.tail_offset, crate::format::superblock::TAIL_AREA_BYTES));
    }
    r
}

/// The chunks of a victim segment's image, each verified (header CRC, uuid,
/// every data block's CRC), with their block positions; Err names the first
/// damage. Pure computation: GC runs it without the engine lock.
pub(crate) fn parse_victim(
    img: &[u8],
    uuid: &[u8; 16],
    seg: u32,
) -> std::result::Result<Vec<(usize, crate::format::chunk::ChunkHeader)>, String> {
    // The log's chunk walker (recovery's); a victim up to its fill must be all
    // verified chunks.
    let mut rules = crate::recovery::RecoveryRules::default();
    let w = crate::recovery::walk_image(img, 0, uuid, seg, 0, &mut rules);
    if let Some(b) = w.bad.first() {
        return Err(format!("chunk at {}: {}", b.place(), b.why));
    }
    if w.stop != crate::recovery::Stop::End {
        return Err(format!(
            "chunk walk ends at block {} before the segment's fill {}",
            w.valid_end,
            img.len() / BLOCK_BYTES
        ));
    }
    Ok(w.chunks
        .into_iter()
        .map(|f| (f.pos as usize, f.header))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::MemMedia;

    /// Placement re-points only what the map still stages: a block written
    /// again while its chunk was being packed (by another thread: here the
    /// test plays it) keeps the newer write, before and after a remount.
    #[test]
    fn placement_leaves_a_record_overwritten_while_its_chunk_was_packed() {
        let blocks = 256u64;
        let geo = Geometry::for_logical_with(blocks, 32, 0.10, 0, 5);
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.10,
            segment_bytes: 32 * BS,
            compression: crate::compress::Compression::Lz4,
            ..Default::default()
        };
        let open = OpenOptions {
            background: false,
            ..Default::default()
        };
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media.clone(), &create, &open).unwrap();
        let bs = BS as usize;
        // block 5 incompressible (raw), blocks 6-8 compressible (fragments,
        // one packed block: the chunk saves two blocks)
        let mut old = vec![0u8; 4 * bs];
        let mut x = 0x1234_5678u32;
        for b in &mut old[..bs] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        old[bs..].fill(b'a');
        let mut new = old.clone();
        new[0] ^= 1;
        new[bs..].fill(b'b');
        vol.write(5 * BS, &old, false).unwrap();
        // another thread seals the user chunk and packs it off the lock...
        let job = {
            let mut c = vol.sh.core.lock();
            let mut out = Vec::new();
            c.seal(Stream::User, 0, &mut out);
            assert!(out.is_empty(), "a staged chunk is not handed out at seal");
            c.take_pack_job().expect("the staged chunk")
        };
        // ...while both blocks are written again (into the next chunk)
        vol.write(5 * BS, &new, false).unwrap();
        let packed = packer::pack_here(&job);
        assert_eq!(packed.tally.fragments, 3);
        let mut out = Vec::new();
        {
            let mut c = vol.sh.core.lock();
            c.finish_pack(job, packed);
            c.place_ready(&mut out).unwrap();
        }
        assert_eq!(out.len(), 1);
        vol.sh.commit.write_sealed(out).unwrap();
        let mut buf = vec![0u8; 4 * bs];
        vol.read(5 * BS, &mut buf).unwrap();
        assert!(
            buf == new,
            "the placed chunk re-pointed an overwritten block"
        );
        vol.flush().unwrap();
        vol.read(5 * BS, &mut buf).unwrap();
        assert!(buf == new, "after flush");
        drop(vol); // crash: replay applies both chunks in seq order
        let vol = Volume::open(media, &open).unwrap();
        vol.read(5 * BS, &mut buf).unwrap();
        assert!(buf == new, "after a remount");
    }

    /// `open_staged` plans the staged chunks as `place` places them: a
    /// segment left with one block is closed as full, so a chunk of one
    /// trim after another does not fit there. Planned into that last block,
    /// the next chunk was capped to a whole spare segment that the trim
    /// chunk then shared, and placement took a segment nobody had promised.
    #[test]
    fn staged_chunks_take_only_the_segments_their_plan_promised() {
        let blocks = 256u64;
        let geo = Geometry::for_logical_with(blocks, 32, 0.25, 0, 5);
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.25,
            segment_bytes: 32 * BS,
            compression: crate::compress::Compression::Lz4,
            ..Default::default()
        };
        let open = OpenOptions {
            background: false,
            ..Default::default()
        };
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media, &create, &open).unwrap();
        let bs = BS as usize;
        let mut x = 0x9e37_79b9u32;
        let mut random = |n: usize| {
            (0..n * bs)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect::<Vec<u8>>()
        };
        // the user segment: a header and 29 raw blocks, 2 blocks left
        let first = random(29);
        vol.write(0, &first, false).unwrap();
        vol.flush().unwrap();
        let reserve = vol.sh.hk.reserve;
        let w = random(31);
        let mut out = Vec::new();
        {
            let mut c = vol.sh.core.lock();
            let s = c.open_seg[0].expect("a user segment");
            assert_eq!(c.segs.segs[s as usize].fill, 30);
            // two chunks of one trim each, staged and not yet packed
            for lba in [100u64, 101] {
                c.append(
                    Stream::User,
                    lba,
                    What::Virtual(Virt::Trim),
                    NO_SRC,
                    reserve,
                    0,
                    &mut out,
                )
                .unwrap();
                c.seal(Stream::User, 0, &mut out);
            }
            // then 31 raw blocks, as many chunks as the plan allows
            for (k, b) in w.chunks(bs).enumerate() {
                let crc = crate::format::chunk::block_crc(b);
                c.append(
                    Stream::User,
                    40 + k as u64,
                    What::Data(b, crc),
                    NO_SRC,
                    reserve,
                    0,
                    &mut out,
                )
                .unwrap();
            }
            c.seal(Stream::User, 0, &mut out);
            c.pack_inline();
            c.place_ready(&mut out).unwrap();
            assert!(c.staged.is_empty());
            assert_eq!(c.unplanned_takes, 0, "placement took an unpromised segment");
        }
        vol.sh.commit.write_sealed(out).unwrap();
        let mut buf = vec![0u8; 31 * bs];
        vol.read(40 * BS, &mut buf).unwrap();
        assert!(buf == w);
        let mut buf = vec![0u8; 29 * bs];
        vol.read(0, &mut buf).unwrap();
        assert!(buf == first);
    }

    /// A chunk written before the chunk at block 0 of its segment (two
    /// writer threads finish out of order) keeps its image in memory until
    /// that first chunk is written: the CRC index learns the segment's new
    /// incarnation from the first chunk, so a read sent to the media before
    /// then found no header at block 0 and answered EIO for a good block.
    #[test]
    fn a_chunk_written_before_its_segments_first_is_read_from_memory() {
        let blocks = 256u64;
        let geo = Geometry::for_logical(blocks, 32, 0.10);
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.10,
            segment_bytes: 32 * BS,
            ..Default::default()
        };
        let open = OpenOptions {
            background: false,
            ..Default::default()
        };
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media, &create, &open).unwrap();
        let bs = BS as usize;
        let block = |i: u64| vec![i as u8 + 1; bs];
        // twelve chunks of one block each, sealed and held back
        let mut sealed = Vec::new();
        for i in 0..12u64 {
            vol.write(i * BS, &block(i), false).unwrap();
            let mut c = vol.sh.core.lock();
            c.seal(Stream::User, 0, &mut sealed);
        }
        assert_eq!(sealed.len(), 12);
        assert_eq!(sealed[0].start, 0, "the first chunk opens its segment");
        assert!(sealed.iter().all(|s| s.segment == sealed[0].segment));
        // every chunk but the segment's first reaches the media
        let first = sealed.remove(0);
        vol.sh.commit.write_sealed(sealed).unwrap();
        {
            let mut c = vol.sh.core.lock();
            let p = vol.sh.commit.progress.lock();
            c.prune_inflight(&p);
        }
        let mut buf = vec![0u8; bs];
        for i in 0..12u64 {
            vol.read(i * BS, &mut buf)
                .unwrap_or_else(|e| panic!("block {i} before the first chunk is written: {e}"));
            assert!(buf == block(i), "block {i}");
        }
        vol.sh.commit.write_sealed(vec![first]).unwrap();
        {
            let mut c = vol.sh.core.lock();
            let p = vol.sh.commit.progress.lock();
            c.prune_inflight(&p);
            assert!(
                c.inflight.is_empty(),
                "every image goes once all are written"
            );
        }
        for i in 0..12u64 {
            vol.read(i * BS, &mut buf).unwrap();
            assert!(buf == block(i), "block {i} from the media");
        }
    }

    /// A volume in memory of `blocks` logical blocks in segments of
    /// `segment_blocks`, 25% over-provisioned, GC by `gc_policy`, opened
    /// with `open`; its media too (for remounts and looks at the slots).
    pub(in crate::volume) fn volume_in_memory(
        blocks: u64,
        segment_blocks: u32,
        gc_policy: GcPolicy,
        open: &OpenOptions,
    ) -> (Volume, Arc<MemMedia>) {
        let geo = Geometry::for_logical(blocks, segment_blocks, 0.25);
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.25,
            segment_bytes: segment_blocks as u64 * BS,
            gc_policy,
            ..Default::default()
        };
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, open).unwrap();
        (vol, media)
    }

    /// No background threads (tests drive `housekeeper_step`) and
    /// checkpoints only when asked.
    pub(in crate::volume) fn driven_open() -> OpenOptions {
        OpenOptions {
            background: false,
            checkpoint_interval_bytes: Some(1 << 40),
            ..Default::default()
        }
    }

    /// `volume_in_memory` with greedy GC, opened `driven_open`.
    pub(in crate::volume) fn driven_greedy_volume(blocks: u64, segment_blocks: u32) -> Volume {
        volume_in_memory(blocks, segment_blocks, GcPolicy::Greedy, &driven_open()).0
    }

    /// GC output whose class has no open segment, with no free segment
    /// left, goes to another class's open segment (`Core::append`'s
    /// fallback) and the victim empties. Without it the relocation needs a
    /// free segment and the clean fails with NoSpace while victims are
    /// nearly empty: a 64-block compressed volume under threaded clients
    /// refused writes so (docs/gc.md "GC classes and the reserve").
    #[test]
    fn gc_output_takes_another_class_segment_when_none_is_free() {
        use crate::format::chunk::Stream;
        let blocks = 256u64;
        let vol = driven_greedy_volume(blocks, 32);
        for lba in 0..blocks {
            vol.write(lba * BS, &[(lba % 251) as u8 + 1; BLOCK_BYTES], false)
                .unwrap();
        }
        // most of the first segment's blocks die
        for lba in 0..24 {
            vol.write(lba * BS, &[0xee; BLOCK_BYTES], false).unwrap();
        }
        vol.flush().unwrap();
        let (a, b) = (self::core::GC0, self::core::GC0 + 1);
        let mut taken = Vec::new();
        {
            let mut c = vol.sh.core.lock();
            assert!(
                c.open_seg[a..].iter().all(|s| s.is_none()),
                "no GC ran before the test's state is set"
            );
            // another class has a segment open; every other free one is
            // taken (as other classes' open segments would hold them)
            let s = c.segs.take_free(Stream::Gc).unwrap();
            c.open_seg[b] = Some(s);
            while let Some(s) = c.segs.take_free(Stream::Gc) {
                taken.push(s);
            }
        }
        // a host-written victim's data joins the first class: slot `a`
        assert!(vol
            .sh
            .gc_one(1)
            .expect("the victim's data fits the open GC segment"));
        {
            let mut c = vol.sh.core.lock();
            assert!(c.gc_class_fallbacks > 0, "GC output went to another class");
            assert!(
                c.open_seg[a].is_none(),
                "no segment taken for the first class"
            );
            for s in taken {
                c.segs.segs[s as usize].state = SegState::Free;
                c.segs.free.push_back(s);
            }
        }
        vol.flush().unwrap();
        let mut buf = vec![0u8; BLOCK_BYTES];
        for lba in 0..blocks {
            vol.read(lba * BS, &mut buf).unwrap();
            let want = if lba < 24 {
                0xee
            } else {
                (lba % 251) as u8 + 1
            };
            assert!(buf.iter().all(|&x| x == want), "block {lba}");
        }
        vol.close().unwrap();
    }

    /// A driven housekeeper step is the whole round: with writes pausing
    /// short of the reserve (no inline cleaning) it cleans (ahead to the mark)
    /// through the reuse barrier, and writes the checkpoint that fell due.
    #[test]
    fn housekeeper_step_cleans_ahead_and_checkpoints() {
        let blocks = 1024u64;
        let vol = driven_greedy_volume(blocks, 32);
        let reserve = vol.sh.hk.reserve;
        let mark = vol.sh.hk.clean_mark;
        let mut x = 1u8;
        let mut lba = 0u64;
        // overwrite until the free segments are below the mark but above the
        // reserve (the append path would clean only at the reserve)
        loop {
            let (free, pending) = vol.sh.free_pending();
            if free + pending < reserve + mark || free <= reserve + 1 {
                break;
            }
            vol.write(lba * BS, &[x; BLOCK_BYTES], false).unwrap();
            lba = (lba + 7) % blocks;
            x = x.wrapping_add(1).max(1);
        }
        vol.flush().unwrap();
        let before = vol.stats();
        vol.sh.core.lock().bytes_since_checkpoint = vol.sh.hk.checkpoint_interval;
        vol.housekeeper_step().unwrap();
        let after = vol.stats();
        assert!(
            after.reuse_barriers > before.reuse_barriers,
            "the step freed"
        );
        assert!(after.segments_free > before.segments_free);
        assert_eq!(after.checkpoints, before.checkpoints + 1, "checkpoint due");
    }

    /// decay-cb: relocated data keeps its victim's estimated life (the GC
    /// output segment's prior) and joins the GC class of that life.
    #[test]
    fn relocation_carries_the_victims_life() {
        let blocks = 256u64;
        let geo = Geometry::for_logical(blocks, 32, 0.10);
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.10,
            segment_bytes: 32 * BS,
            gc_policy: GcPolicy::DecayCb,
            ..Default::default()
        };
        let open = OpenOptions {
            background: false,
            ..Default::default()
        };
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media, &create, &open).unwrap();
        let data = vec![0x5au8; (blocks * BS) as usize];
        vol.write(0, &data, false).unwrap();
        vol.flush().unwrap();
        let victim = {
            let mut c = vol.sh.core.lock();
            let v = c.map.get(20).segment(32).unwrap();
            // pretend this segment holds data GC moved before, estimated cold
            c.segs.segs[v as usize].prior = 5.0 * blocks as f32;
            v
        };
        // overwrite the first half of the victim's blocks: it is now the only
        // segment whose cleaning gains space
        vol.write(0, &data[..16 * BS as usize], false).unwrap();
        vol.flush().unwrap();
        let life = {
            let c = vol.sh.core.lock();
            assert_eq!(c.map.get(20).segment(32), Some(victim));
            crate::gc::est_life(&c.segs.segs[victim as usize], &c.segs)
        };
        assert!(
            life > 2.0 * blocks as f64,
            "cold prior survives 16 kills: {life}"
        );
        assert!(vol.sh.gc_one(1).unwrap());
        let c = vol.sh.core.lock();
        let out = c.map.get(20).segment(32).unwrap();
        assert_ne!(out, victim, "block 20 was relocated");
        assert_eq!(c.segs.segs[out as usize].prior, life as f32);
        let class = crate::gc::decay_class(life, blocks);
        assert_eq!(class, 1, "cold class");
        assert_eq!(c.open_seg[self::core::GC0 + class], Some(out));
    }
}
