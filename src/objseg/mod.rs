//! ObjSegStore: the segment store of a volume in an object store (issue 21;
//! docs/objects.md §5.1). The engine's segment slots stay its addresses; each
//! life of a slot that fills up is uploaded once as a write-once object
//! `seg/S-E` (S a fresh sequence number, E this writer's epoch) and never
//! overwritten. While a slot is being filled its bytes live in the local
//! staging file: the segment area of the volume's local metadata file in the
//! cache directory (a sparse file, written exactly like a flat volume, so a
//! FLUSH is durable at local speed under the engine's one media flush).
//!
//! Life of a slot here: `local` (staging holds it; the table says nothing) ->
//! full (every block of `[0, end)` written in this life, `end` reaching the
//! segment's last block or the one before: the engine closes a segment with
//! fewer than two blocks left) -> queued -> uploaded by a background worker
//! (bounded in flight, retried with backoff while the store fails) ->
//! `stored` (the slot table says which object, durably) -> its staging copy
//! stays as cache until more than `cache_segments` are cached, then its body
//! is punched and reads become one ranged GET. A write or a tombstone to a
//! slot starts its next life: the table is cleared for it durably *before*
//! that write, and only then is the old object deleted.
//!
//! Invariants:
//! - every slot is local or stored (or both, cached): its current content is
//!   always somewhere; a staging copy is freed only after its object is
//!   stored and the table says so durably;
//! - an object is deleted only after the table durably stops naming it
//!   (the table is this store's checkpoint of slot -> object; the engine's
//!   own checkpoints never name objects), and only by the epoch that wrote
//!   it or a later one;
//! - the table names an object only while it holds the slot's current life:
//!   an upload that finishes after its slot moved on is deleted, never
//!   recorded.
//! - after a mount, a stored slot's staging copy is read only once the
//!   cache check found it whole: its CRC32C over the whole segment is the
//!   object's (`check_cache`, in the background after the attach; reads go
//!   to the object until then); a punched, half-punched or stale copy is
//!   never served. The check holds the eviction lock shared from its read
//!   to its switch and switches only while the slot still names the object
//!   it read for (a sequence number no other life gets).
//!
//! Not in this slice: the superblock, checkpoints and intent ring stay in
//! the local metadata file (a host that loses its cache loses the volume);
//! no segment footer; the cache is whole segments, not lines.

mod ckpt;
pub mod durable;
pub mod fence;
pub mod recover;
pub mod table;

use crate::format::chunk;
use crate::format::objname::{ObjKind, ObjName};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::lease::{self, Holder, Lease, LeaseError};
use crate::media::objects::{ObjError, ObjectStore};
use crate::media::{AlignedBuf, Media, UringReads};
use crate::store::{FlatStore, Piece, SegmentStore};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
pub use table::{ObjRef, Table};

const BS: u64 = BLOCK_BYTES as u64;
/// Sequence numbers reserved per write of the table's floor.
const SEQ_STEP: u64 = 1024;
/// How often an idle upload worker looks for a new checkpoint to store.
const CKPT_TICK: Duration = Duration::from_secs(1);

/// The slot table's file name in the cache directory.
pub const TABLE_FILE: &str = "objects.tab";

#[derive(Debug, Clone)]
pub struct ObjSegOptions {
    /// Uploads in flight at once (worker threads). 0: no threads, every
    /// upload and delete runs on the thread whose write filled the segment
    /// or started its new life (deterministic: the simulator's and the
    /// crash tests' mode; a failing job waits for the next write).
    pub uploads: usize,
    /// Stored segments whose staging copy is kept as a read cache.
    pub cache_segments: usize,
    /// Longest wait between two tries of a failing upload or delete.
    pub retry_max: Duration,
    /// How long dropping the store waits for queued uploads before it stops
    /// (what is left stays in staging and is queued at the next attach).
    pub close_wait: Duration,
    /// Store the engine's newest checkpoint as an object after this many
    /// segment uploads (and when idle, and at a clean close).
    pub ckpt_every: usize,
    /// The bound on local staging while uploads do not keep up (the store
    /// down or slow): at most this many full segments wait for their
    /// upload. A write that opens another segment then waits for an upload
    /// (back-pressure), up to `staging_wait`, and fails after it
    /// (`staging_room`). 0: no bound.
    pub staging_max: usize,
    /// How long a write waits for room in staging before it fails.
    pub staging_wait: Duration,
    /// Called once by the cache check (`check_cache`) when it is done, on
    /// its thread (`serve`'s log line).
    pub on_cache_checked: Option<OnChecked>,
    /// Tests: called by the cache check with a slot whose copy it found
    /// whole, between that and marking it local (a punch, a write or a
    /// close ordered into that gap).
    pub check_gap: Option<CheckGap>,
}

/// `ObjSegOptions::on_cache_checked`.
#[derive(Clone)]
pub struct OnChecked(pub Arc<dyn Fn(&CacheCheck) + Send + Sync>);

/// `ObjSegOptions::check_gap`.
#[derive(Clone)]
pub struct CheckGap(pub Arc<dyn Fn(u32) + Send + Sync>);

impl std::fmt::Debug for OnChecked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnChecked")
    }
}

impl std::fmt::Debug for CheckGap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckGap")
    }
}

/// What the cache check (`check_cache`) did, once it is done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheCheck {
    /// Stored segments of an earlier mount: each read from its object
    /// until its staging copy is found whole.
    pub stored: usize,
    /// Copies read (whole, or up to a first block of zeros).
    pub checked: usize,
    /// Copies found whole and read locally again.
    pub kept: usize,
    /// `stored - kept`: read from their objects.
    pub dropped: usize,
    pub ms: u64,
    /// Why the check stopped before its last copy, if it did.
    pub cut_short: Option<&'static str>,
}

/// `staging_max` by default: 256 segments (1 GiB of 4 MiB segments) of
/// the cache directory's disk may wait for the store.
pub const STAGING_MAX: usize = 256;

impl Default for ObjSegOptions {
    fn default() -> Self {
        ObjSegOptions {
            uploads: 2,
            cache_segments: 64,
            retry_max: Duration::from_secs(5),
            close_wait: Duration::from_secs(30),
            ckpt_every: 16,
            staging_max: STAGING_MAX,
            staging_wait: Duration::from_secs(30),
            on_cache_checked: None,
            check_gap: None,
        }
    }
}

/// Counters (monotonic unless said otherwise).
#[derive(Debug, Default)]
pub struct ObjStats {
    /// Gauge: uploads running now.
    pub uploads_in_flight: AtomicU64,
    pub uploaded_objects: AtomicU64,
    pub uploaded_bytes: AtomicU64,
    /// Of those, the blocks the engine wrote in each uploaded life (the
    /// rest of a segment object is space the engine left unwritten).
    pub uploaded_written_bytes: AtomicU64,
    pub upload_retries: AtomicU64,
    pub deleted_objects: AtomicU64,
    pub deleted_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub get_us: AtomicU64,
    /// Reads served by the staging file / cache.
    pub local_reads: AtomicU64,
    /// GC victims (the engine asks `gc_read_cost_blocks` once before it
    /// reads one) whose staging copy was there: read locally.
    pub gc_victims_cached: AtomicU64,
    /// GC victims only in the store: read with one whole-object GET.
    pub gc_victims_fetched: AtomicU64,
    /// Checkpoint objects stored (`ckpt.rs`).
    pub checkpoints_stored: AtomicU64,
    /// Their bytes.
    pub checkpoint_bytes: AtomicU64,
    /// Captures dropped because the engine wrote a superblock under their
    /// reads (`ckpt.rs`; taken again at the next try).
    pub checkpoint_races: AtomicU64,
    /// Captures dropped while waiting for a full segment's upload, its
    /// slot having started another life first.
    pub checkpoint_waits_dropped: AtomicU64,
    /// Full segments a pending capture carried because the engine reused
    /// them before their upload landed.
    pub checkpoint_rescued: AtomicU64,
    /// Writes that waited for room in staging (`staging_max` reached).
    pub staging_waits: AtomicU64,
    /// Writes refused after `staging_wait` without room (the volume stops).
    pub staging_full: AtomicU64,
    /// Gauge: copies of an earlier mount the cache check has still to read
    /// (0 once it is done).
    pub cache_check_left: AtomicU64,
    /// Copies the cache check read, and of them found whole (kept).
    pub cache_checked: AtomicU64,
    pub cache_kept: AtomicU64,
    /// How long the cache check took (set when it is done).
    pub cache_check_ms: AtomicU64,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// Bumped at each new life (a write or tombstone after the last upload).
    life: u64,
    /// Blocks written in this life (bitmap).
    written: Vec<u64>,
    /// End of the write reaching the segment's last two blocks (0: none yet).
    end: u32,
    /// The staging file holds this life's content.
    local: bool,
    /// The object holding this life (table says so durably).
    stored: Option<ObjRef>,
    queued: bool,
    /// The sequence number this life's upload tries (the same name on every
    /// try, so a create that landed unanswered is found as ours).
    try_seq: Option<u64>,
    /// The last life stored and its object, kept across new lives: a
    /// checkpoint capture waiting for that life's upload names it
    /// (`ckpt.rs`) even when the slot moved on before it looked.
    last_stored: Option<(u64, ObjRef)>,
}

impl Slot {
    /// Its staging copy may be punched: an object holds this life.
    fn evictable(&self) -> bool {
        // MUTANT: staging-freed-early s|self.stored.is_some()|self.local|
        self.stored.is_some()
    }

    /// Every block of `[0, end)` written in this life.
    fn covered(&self, end: u32) -> bool {
        let full = (end / 64) as usize;
        let mask = (1u64 << (end % 64)) - 1;
        self.written[..full].iter().all(|&w| w == u64::MAX)
            && (mask == 0 || self.written[full] & mask == mask)
    }
}

enum Job {
    Upload { seg: u32, life: u64 },
    Delete { name: String, bytes: u64 },
}

struct State {
    slots: Vec<Slot>,
    jobs: VecDeque<Job>,
    busy: usize,
    /// Stored slots whose staging copy is kept, oldest first.
    cached: VecDeque<u32>,
    table: Table,
    failed: Option<String>,
    /// Deletes waiting for checkpoint objects that no longer need them.
    deferred: Vec<ckpt::Deferred>,
    /// Slot -> (life, its object once stored) a pending checkpoint
    /// capture waits for (`ckpt.rs`): the upload of that life records its
    /// object here; a new life of the slot before that first copies the
    /// old life's blocks into `rescued`, which the capture then carries.
    ckpt_waits: HashMap<u32, (u64, Option<ObjRef>)>,
    rescued: Vec<(u32, u64, Vec<u8>)>,
}

struct Inner {
    local: FlatStore<Arc<dyn Media>>,
    /// The media under `local` (its flush makes a tombstone durable); the
    /// FLUSH log over the file in the store-durable mode.
    media: Arc<dyn Media>,
    /// The store-durable mode's FLUSH log (`durable.rs`): `media` is it.
    log: Option<Arc<durable::ObjLog>>,
    objects: Arc<dyn ObjectStore>,
    geo: Geometry,
    lease: Lease,
    /// Every mutation of the store is sent under a fresh lease check; a
    /// superseded writer stops (`fence.rs`, §5.6).
    clock: Arc<fence::LeaseClock>,
    opts: ObjSegOptions,
    state: Mutex<State>,
    work: Condvar,
    idle: Condvar,
    /// Signalled when an upload is done (room in staging, `staging_room`).
    room: Condvar,
    /// Held shared by whoever touches the staging file's content of a slot
    /// (reads, writes, tombstones, and the cache check from its read of a
    /// copy to marking it local); exclusively to punch a copy.
    evict: RwLock<()>,
    next_seq: AtomicU64,
    /// Checkpoint objects: captures, the stored ones (`ckpt.rs`).
    ckpt: Mutex<ckpt::CkptState>,
    /// The name number of the next checkpoint capture.
    ckpt_next: AtomicU64,
    stop: AtomicBool,
    /// Attached for `check`: no lease, no uploads, no deletes, no writes.
    read_only: bool,
    /// The lease was released (`close`) or must not be (read-only).
    released: AtomicBool,
    stats: ObjStats,
    /// The cache check's result, once it is done.
    check: Mutex<Option<CacheCheck>>,
    /// Signalled when it is.
    checked: Condvar,
}

pub struct ObjSegStore {
    inner: Arc<Inner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// What `attach` found in the store and did about it.
#[derive(Debug, Default, Clone)]
pub struct AttachReport {
    pub epoch: u64,
    pub objects: usize,
    /// Segment objects no slot names, queued for deletion once two later
    /// checkpoint objects are stored (never deleted at attach).
    pub orphans_deferred: usize,
    pub uploads_queued: usize,
    /// The cache check, when it ran in the attach (inline mode,
    /// `uploads == 0`): stored segments of an earlier mount whose staging
    /// copy was found whole (its CRC32C is the object's) and is read from
    /// again. Otherwise 0: the check runs in the background
    /// (`ObjSegStore::cache_check`).
    pub cache_kept: usize,
    /// Stored segments read from their objects: their copy was punched,
    /// partly punched, never made durable, or beyond the cache's size
    /// (inline mode; otherwise every stored segment until the check).
    pub cache_dropped: usize,
    /// How long reading and checking the copies took (inline mode).
    pub cache_check_ms: u64,
    /// Copies the background check will read (0 in inline mode).
    pub cache_checking: usize,
    pub notes: Vec<String>,
}

/// The stored slots whose staging copy the cache check reads, newest
/// object first (the order reads most likely want), at most `limit`.
fn copies_to_check(table: &Table, limit: usize) -> Vec<(u32, ObjRef)> {
    let mut stored: Vec<(u32, ObjRef)> = table
        .slots
        .iter()
        .enumerate()
        .filter_map(|(s, r)| r.map(|r| (s as u32, r)))
        .collect();
    stored.sort_unstable_by_key(|x| std::cmp::Reverse(x.1.seq));
    stored.truncate(limit);
    stored
}

/// One copy's fate in the cache check.
enum Fate {
    /// Whole (its CRC32C the object's): marked local, cached.
    Kept,
    /// Punched, half punched, stale, or unreadable: read from its object.
    NotWhole,
    /// The slot moved on (a new life) before the check got to it.
    Moved,
    /// The cache is full (this mount's own segments): the check stops.
    Full,
}

/// The writer lease for a volume whose cache holds `table`: our own last
/// epoch, not released (a crash of this cache's writer: the caller holds the
/// local volume lock, so it is gone), is taken over; a newer epoch than the
/// table's means another writer used the volume since: refused (this cache's
/// metadata is stale), unless `takeover`.
pub fn take_lease(
    objects: &dyn ObjectStore,
    table: &Table,
    takeover: bool,
) -> Result<Lease, LeaseError> {
    let newest = lease::epochs(objects)?.last().copied().unwrap_or(0);
    if newest > table.epoch && !takeover {
        return Err(LeaseError::Held {
            epoch: newest,
            holder: lease::holder_of(objects, newest)?,
        });
    }
    lease::take(
        objects,
        &Holder::this_process(),
        takeover || (newest == table.epoch && newest > 0),
    )
}

/// Refuse a prefix that holds objects already (another volume, or data),
/// unless `force`.
pub fn check_empty(objects: &dyn ObjectStore, force: bool) -> io::Result<()> {
    let found = objects.list("").map_err(io_err)?;
    if !found.is_empty() && !force {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} holds {} object(s) already (first: {}); it may be another volume: refusing (--force to create over it; its segment objects are then deleted as orphans)",
                objects.describe(),
                found.len(),
                found[0].name
            ),
        ));
    }
    Ok(())
}

impl ObjSegStore {
    /// Attach to the objects of the volume whose local metadata file is
    /// `media` (geometry `geo`, uuid `uuid`) and whose slot table is `table`;
    /// `lease` was taken for it (`take_lease`). Every object the table names
    /// must be in the store at its size (else an error naming it); segment
    /// objects the table does not name (uploads a crash cut off, the slots'
    /// earlier lives) are deleted; slots whose staging copy holds chunks and
    /// no object are queued for upload.
    pub fn attach(
        media: Arc<dyn Media>,
        geo: &Geometry,
        uuid: [u8; 16],
        objects: Arc<dyn ObjectStore>,
        table: Table,
        lease: Lease,
        opts: ObjSegOptions,
    ) -> io::Result<(Arc<ObjSegStore>, AttachReport)> {
        Self::attach_inner(media, geo, uuid, objects, table, lease, opts, false)
    }

    /// Attach for reading only (`sluice check`): no lease is taken and
    /// nothing is written, uploaded or deleted; objects the table names that
    /// are missing or of the wrong size are reported in `AttachReport::notes`
    /// (a read of them fails naming them) instead of refusing.
    pub fn attach_read_only(
        media: Arc<dyn Media>,
        geo: &Geometry,
        uuid: [u8; 16],
        objects: Arc<dyn ObjectStore>,
        table: Table,
    ) -> io::Result<(Arc<ObjSegStore>, AttachReport)> {
        let lease = Lease {
            epoch: table.epoch.max(1),
            holder: Holder::this_process(),
        };
        Self::attach_inner(
            media,
            geo,
            uuid,
            objects,
            table,
            lease,
            ObjSegOptions::default(),
            true,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn attach_inner(
        media: Arc<dyn Media>,
        geo: &Geometry,
        uuid: [u8; 16],
        objects: Arc<dyn ObjectStore>,
        mut table: Table,
        lease: Lease,
        opts: ObjSegOptions,
        read_only: bool,
    ) -> io::Result<(Arc<ObjSegStore>, AttachReport)> {
        if table.uuid != uuid
            || table.segment_count != geo.segment_count
            || table.segment_blocks != geo.segment_blocks
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the slot table is not this volume's ({} slots of {} blocks, the volume has {} of {})",
                    table.path().display(),
                    table.segment_count,
                    table.segment_blocks,
                    geo.segment_count,
                    geo.segment_blocks
                ),
            ));
        }
        // the newest epoch that wrote through this cache: objects of later
        // epochs are another writer's (a --takeover), never ours to delete
        let cache_epoch = table.epoch;
        if !read_only {
            table.set_epoch(lease.epoch)?;
        }
        // the store-durable mode: every write to the local metadata file
        // goes through the FLUSH log, the store's tombstones included
        let clock = fence::LeaseClock::new(lease.clone(), objects.clone());
        let (media, log) = if table.store_durable && !read_only {
            let l = durable::ObjLog::new(media, objects.clone(), uuid, clock.clone())?;
            (l.clone() as Arc<dyn Media>, Some(l))
        } else if !read_only {
            // the local-log mode: a FLUSH is answered only while not
            // superseded
            let g = fence::FlushGate {
                inner: media,
                clock: clock.clone(),
            };
            (Arc::new(g) as Arc<dyn Media>, None)
        } else {
            (media, None)
        };
        let mut rep = AttachReport {
            epoch: lease.epoch,
            ..AttachReport::default()
        };
        let seg_bytes = geo.segment_bytes();
        let listed = objects.list(ObjKind::Segment.dir()).map_err(io_err)?;
        rep.objects = listed.len();
        let mut max_seq = table.seq_floor.saturating_sub(1);
        let mut have: HashMap<(u64, u64), u64> = HashMap::new();
        for o in &listed {
            match ObjName::parse(&o.name) {
                Ok(ObjName::Segment { seq, epoch }) => {
                    max_seq = max_seq.max(seq);
                    have.insert((seq, epoch), o.len);
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: {} is not a segment object name: something else writes under seg/",
                            objects.describe(),
                            o.name
                        ),
                    ))
                }
            }
        }
        let mut named = std::collections::HashSet::new();
        let mut missing = Vec::new();
        for (s, r) in table.slots.iter().enumerate() {
            if let Some(r) = r {
                max_seq = max_seq.max(r.seq);
                named.insert((r.seq, r.epoch));
                let name = ObjName::Segment {
                    seq: r.seq,
                    epoch: r.epoch,
                }
                .encode();
                match have.get(&(r.seq, r.epoch)) {
                    None => missing.push(format!("{name} (segment {s}) is missing")),
                    Some(&l) if l != seg_bytes => missing.push(format!(
                        "{name} (segment {s}) has {l} bytes, a segment {seg_bytes}"
                    )),
                    _ => {}
                }
            }
        }
        if read_only {
            rep.notes.append(&mut missing);
        }
        if !missing.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {}", objects.describe(), missing.join("; ")),
            ));
        }
        let mut jobs = VecDeque::new();
        let (ck, ckpt_next) = if read_only {
            (ckpt::CkptState::default(), 1)
        } else {
            ckpt::load_stored(&*objects, &uuid, &mut jobs, &mut rep)?
        };
        let mut deferred = Vec::new();
        for o in &listed {
            if let Ok(ObjName::Segment { seq, epoch }) = ObjName::parse(&o.name) {
                if read_only || named.contains(&(seq, epoch)) {
                    continue;
                }
                if epoch <= cache_epoch {
                    // deleted once checkpoint objects taken from now on are
                    // stored: a mount from the store may still roll over it
                    deferred.push(ckpt::Deferred {
                        name: o.name.clone(),
                        bytes: o.len,
                        after: ckpt_next,
                    });
                    rep.orphans_deferred += 1;
                } else {
                    rep.notes.push(format!(
                        "{} is of epoch {epoch}, which this cache never held: kept",
                        o.name
                    ));
                }
            }
        }
        let words = (geo.segment_blocks as usize).div_ceil(64);
        let local = FlatStore::new(media.clone(), geo);
        let mut slots = Vec::with_capacity(geo.segment_count as usize);
        let mut first = AlignedBuf::new(BLOCK_BYTES);
        let mut cached = VecDeque::new();
        for s in 0..geo.segment_count {
            let stored = table.slots[s as usize];
            let mut slot = Slot {
                written: vec![0; words],
                local: stored.is_none(),
                stored,
                ..Slot::default()
            };
            if stored.is_none() {
                // a slot whose staging copy holds a chunk of ours and has no
                // object: the engine never appends to a segment of an earlier
                // mount, so it is as full as it will get (or free, and then
                // its next life's first write makes this upload moot).
                // Read-only (`info`, `check`): counted, never uploaded.
                local.read_segment(s, 0, &mut first)?;
                if chunk::peek_seq(&first, &uuid, s).is_some() {
                    slot.queued = true;
                    rep.uploads_queued += 1;
                    if !read_only {
                        cached.push_back(s);
                        jobs.push_back(Job::Upload { seg: s, life: 0 });
                    }
                }
            }
            slots.push(slot);
        }
        // every stored slot starts read from its object: the cache check
        // marks the whole copies local (`check_cache`)
        let stored = table.slots.iter().flatten().count();
        let to_check = if read_only {
            Vec::new()
        } else {
            copies_to_check(&table, opts.cache_segments)
        };
        let inner = Arc::new(Inner {
            local,
            media,
            log,
            objects,
            geo: *geo,
            lease,
            clock,
            opts,
            state: Mutex::new(State {
                slots,
                jobs,
                busy: 0,
                cached,
                table,
                failed: None,
                deferred,
                ckpt_waits: HashMap::new(),
                rescued: Vec::new(),
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            room: Condvar::new(),
            evict: RwLock::new(()),
            next_seq: AtomicU64::new(max_seq + 1),
            ckpt: Mutex::new(ck),
            ckpt_next: AtomicU64::new(ckpt_next),
            stop: AtomicBool::new(false),
            read_only,
            released: AtomicBool::new(read_only),
            stats: ObjStats::default(),
            check: Mutex::new(None),
            checked: Condvar::new(),
        });
        let mut workers = Vec::new();
        if read_only {
            *inner.check.lock() = Some(CacheCheck {
                stored,
                dropped: stored,
                ..CacheCheck::default()
            });
        } else if inner.opts.uploads == 0 || to_check.is_empty() {
            // inline mode (deterministic: no thread), or nothing to read
            let c = inner.check_cache(to_check, stored)?;
            (rep.cache_kept, rep.cache_dropped) = (c.kept, c.dropped);
            rep.cache_check_ms = c.ms;
        } else {
            rep.cache_checking = to_check.len();
            inner
                .stats
                .cache_check_left
                .store(to_check.len() as u64, Ordering::Relaxed);
            let w = inner.clone();
            workers.push(
                std::thread::Builder::new()
                    .name("sluice-cache-check".into())
                    .spawn(move || {
                        if let Err(e) = w.check_cache(to_check, stored) {
                            tracing::warn!("cache: the check stopped: {e}");
                            w.check_done(CacheCheck {
                                stored,
                                cut_short: Some("an error"),
                                ..CacheCheck::default()
                            });
                        }
                    })?,
            );
        }
        for i in 0..if read_only { 0 } else { inner.opts.uploads } {
            let w = inner.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("sluice-upload-{i}"))
                    .spawn(move || w.worker())?,
            );
        }
        Ok((
            Arc::new(ObjSegStore {
                inner,
                workers: Mutex::new(workers),
            }),
            rep,
        ))
    }

    pub fn stats(&self) -> &ObjStats {
        &self.inner.stats
    }

    /// The cache check's result once it is done (`check_cache`); None while
    /// it runs.
    pub fn cache_check(&self) -> Option<CacheCheck> {
        self.inner.check.lock().clone()
    }

    /// Wait for the cache check's result, at most `timeout`.
    pub fn wait_cache_check(&self, timeout: Duration) -> Option<CacheCheck> {
        let end = Instant::now() + timeout;
        let mut c = self.inner.check.lock();
        while c.is_none() {
            if self.inner.checked.wait_until(&mut c, end).timed_out() {
                break;
            }
        }
        c.clone()
    }

    pub fn epoch(&self) -> u64 {
        self.inner.lease.epoch
    }

    /// The media the volume must be opened on: the local metadata file, or
    /// in the store-durable mode the FLUSH log over it (`durable.rs`).
    pub fn media(&self) -> Arc<dyn Media> {
        self.inner.media.clone()
    }

    /// Bytes put into the store so far: segment objects, FLUSH log objects
    /// and checkpoint objects.
    pub fn bytes_put(&self) -> (u64, u64, u64) {
        let st = &self.inner.stats;
        (
            st.uploaded_bytes.load(Ordering::Relaxed),
            self.inner
                .log
                .as_ref()
                .map_or(0, |l| l.stats.bytes_put.load(Ordering::Relaxed)),
            st.checkpoint_bytes.load(Ordering::Relaxed),
        )
    }

    /// The writer's lease clock (`fence.rs`).
    pub fn lease_clock(&self) -> &Arc<fence::LeaseClock> {
        &self.inner.clock
    }

    /// The store-durable mode's FLUSH log, if the volume is in that mode.
    pub fn flush_log(&self) -> Option<&Arc<durable::ObjLog>> {
        self.inner.log.as_ref()
    }

    /// Store a checkpoint object of the local metadata file as it is now,
    /// even if the engine made no checkpoint since the last one (the
    /// store-durable mode's first act after a mount: a checkpoint object
    /// of this epoch, whose log the next mount from the store replays).
    /// Tries a few times (a capture the engine overlaps is dropped).
    pub fn checkpoint_now(&self) -> io::Result<()> {
        for _ in 0..20 {
            if self.inner.try_checkpoint_fresh() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(io_err(format!(
            "{}: could not store a checkpoint object (see the warnings above)",
            self.inner.objects.describe()
        )))
    }

    /// Where slot `seg`'s current life is stored, if it is.
    pub fn stored(&self, seg: u32) -> Option<ObjRef> {
        self.inner.state.lock().slots[seg as usize].stored
    }

    /// Slots full and waiting for their upload (or in it).
    pub fn uploads_pending(&self) -> usize {
        Inner::pending(&self.inner.state.lock())
    }

    /// The bound on `uploads_pending` (segments; 0: none) and the segment
    /// size, for `info` and the metrics.
    pub fn staging_bound(&self) -> (usize, u64) {
        (self.inner.opts.staging_max, self.inner.geo.segment_bytes())
    }

    /// Wait until no upload or delete is queued or running (true), at most
    /// `timeout` (false). A store that keeps failing keeps this false.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        if self.inner.opts.uploads == 0 {
            // inline mode: nobody else runs the queue
            loop {
                self.inner.run_inline();
                if self.inner.state.lock().jobs.is_empty() {
                    return true;
                }
                if Instant::now() >= end {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let mut st = self.inner.state.lock();
        while !(st.jobs.is_empty() && st.busy == 0) {
            if self.inner.idle.wait_until(&mut st, end).timed_out() {
                return st.jobs.is_empty() && st.busy == 0;
            }
        }
        true
    }

    /// Stop the workers (what is queued stays local and is queued again at
    /// the next attach) and, when nothing failed, release the lease.
    pub fn close(&self) -> io::Result<()> {
        self.stop_workers();
        let failed = self.inner.state.lock().failed.clone();
        if let Some(f) = failed {
            return Err(io_err(f));
        }
        if self.inner.released.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner
            .lease
            .clone()
            .release(&*self.inner.objects)
            .map_err(io_err)
    }

    /// Stop as a killed process would (tests): the workers stop, nothing
    /// queued is waited for, the lease is not released.
    pub fn halt(&self) {
        self.inner.released.store(true, Ordering::SeqCst);
        self.stop_workers();
    }

    fn stop_workers(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        {
            let _st = self.inner.state.lock();
            self.inner.work.notify_all();
        }
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
    }

    /// Read every object the table names whole and compare its CRC32C:
    /// one line per object missing, short or damaged (`sluice check`).
    pub fn verify_objects(&self) -> Vec<String> {
        let refs: Vec<(u32, ObjRef)> = {
            let st = self.inner.state.lock();
            st.slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.stored.map(|r| (i as u32, r)))
                .collect()
        };
        let mut out = Vec::new();
        for (seg, r) in refs {
            let name = ObjName::Segment {
                seq: r.seq,
                epoch: r.epoch,
            }
            .encode();
            match self.inner.objects.get(&name) {
                Ok(b) if b.len() as u64 != self.inner.geo.segment_bytes() => out.push(format!(
                    "object {name} (segment {seg}) has {} bytes, a segment {}",
                    b.len(),
                    self.inner.geo.segment_bytes()
                )),
                Ok(b) if crc32c::crc32c(&b) != r.crc => out.push(format!(
                    "object {name} (segment {seg}) is damaged: its CRC32C is {:08x}, {:08x} was uploaded",
                    crc32c::crc32c(&b),
                    r.crc
                )),
                Ok(_) => {}
                Err(e) => out.push(format!("object {name} (segment {seg}): {e}")),
            }
        }
        out
    }
}

impl ObjSegStore {
    /// After the volume closed: queued uploads get `close_wait`, then the
    /// workers stop and the lease is released unless something failed.
    /// Ok(n): n uploads were still pending (they stay in the cache and are
    /// queued at the next attach).
    pub fn finish(&self) -> io::Result<usize> {
        if self.inner.read_only || self.inner.released.load(Ordering::SeqCst) {
            return Ok(0);
        }
        // The engine closed: no slot grows any more (a mount never appends
        // to a segment of an earlier one), so the partly filled ones are
        // uploaded too and the closing checkpoint can be stored as an
        // object: a clean close leaves nothing only in this cache.
        self.inner.queue_partial();
        let end = Instant::now() + self.inner.opts.close_wait;
        let mut left = 0;
        loop {
            let rest = end.saturating_duration_since(Instant::now());
            if !self.wait_idle(rest) {
                left = self.uploads_pending();
                break;
            }
            // the closing checkpoint; then the deletes it allows
            if self.inner.try_checkpoint(true) && self.inner.state.lock().jobs.is_empty() {
                break;
            }
            if Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.close().map(|_| left)
    }
}

impl Drop for ObjSegStore {
    /// The last holder let go without `finish` (its owner failed, or a
    /// library caller): the same. A process killed never gets here: its
    /// next attach takes its own epoch over (`take_lease`).
    fn drop(&mut self) {
        match self.finish() {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                "{}: {n} segment upload(s) still pending at close; they stay in the cache and are uploaded at the next mount",
                self.inner.objects.describe()
            ),
            Err(e) => tracing::warn!(
                "{}: closing the segment store: {e}",
                self.inner.objects.describe()
            ),
        }
        self.stop_workers();
    }
}

impl Inner {
    fn name(r: &ObjRef) -> String {
        ObjName::Segment {
            seq: r.seq,
            epoch: r.epoch,
        }
        .encode()
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "segment store attached read-only",
            ));
        }
        Ok(())
    }

    /// A store mutation may be sent now (`fence.rs`): false when the lease
    /// check fails; superseded, the store stops here for good (`failed`:
    /// writes and FLUSHes fail, nothing more is uploaded or deleted).
    fn lease_fresh(&self) -> bool {
        // MUTANT: mutation-without-lease-check s|match self.clock.fresh() {|match Ok::<(), io::Error>(()) {|
        match self.clock.fresh() {
            Ok(()) => true,
            Err(e) => {
                if self.clock.superseded().is_some() {
                    let mut st = self.state.lock();
                    if st.failed.is_none() {
                        st.failed = Some(e.to_string());
                    }
                } else {
                    tracing::warn!("{e}; the store's mutations wait");
                }
                false
            }
        }
    }

    /// Full segments waiting for (or in) their upload.
    fn pending(st: &State) -> usize {
        st.slots.iter().filter(|s| s.queued).count()
    }

    /// Room in local staging for a write that opens segment `seg` (its
    /// current life holds nothing yet, or is stored or queued: the write
    /// starts another segment that will wait for an upload). While
    /// `staging_max` full segments wait for the store, the write waits for
    /// an upload to finish (back-pressure; inline mode runs the queue once
    /// instead), up to `staging_wait`; then it fails with a clear error.
    /// The engine cannot take back a chunk write, so the volume stops
    /// (EIO) on it: every FLUSH it answered is in the local file, and the
    /// next mount uploads the segments once the store answers.
    fn staging_room(&self, seg: u32) -> io::Result<()> {
        let max = self.opts.staging_max;
        if max == 0 {
            return Ok(());
        }
        let opens = |st: &State| {
            let s = &st.slots[seg as usize];
            s.stored.is_some() || s.queued || s.written.iter().all(|&w| w == 0)
        };
        let mut st = self.state.lock();
        // MUTANT: staging-unbounded s|Inner::pending(&st) < max {|true {|
        if !opens(&st) || Inner::pending(&st) < max {
            return Ok(());
        }
        self.stats.staging_waits.fetch_add(1, Ordering::Relaxed);
        let end = Instant::now() + self.opts.staging_wait;
        if self.opts.uploads == 0 {
            drop(st);
            self.run_inline();
            st = self.state.lock();
        } else {
            while Inner::pending(&st) >= max && st.failed.is_none() {
                if self.room.wait_until(&mut st, end).timed_out() {
                    break;
                }
            }
        }
        Inner::check_failed(&st)?;
        let n = Inner::pending(&st);
        if n < max {
            return Ok(());
        }
        self.stats.staging_full.fetch_add(1, Ordering::Relaxed);
        Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{}: local staging is full: {n} segments ({} MiB) wait for their upload, the bound (--staging-max {max}); the store took none for {:?}. This write fails and the volume stops; every FLUSH answered before is durable in the cache directory, and the next mount uploads them once the store answers",
                self.objects.describe(),
                (n as u64 * self.geo.segment_bytes()) >> 20,
                self.opts.staging_wait
            ),
        ))
    }

    fn check_failed(st: &State) -> io::Result<()> {
        match &st.failed {
            Some(f) => Err(io_err(f)),
            None => Ok(()),
        }
    }

    /// Start slot `seg`'s next life (a write or tombstone is about to reach
    /// its staging copy): if an object holds its last life, the table stops
    /// naming it durably, and only then is the object queued for deletion.
    fn new_life(&self, st: &mut State, seg: u32) -> io::Result<()> {
        let s = &st.slots[seg as usize];
        let waited = matches!(st.ckpt_waits.get(&seg), Some(&(l, None)) if l == s.life);
        // MUTANT: waited-life-not-rescued s|if waited|if false|
        if waited && s.stored.is_none() && s.local && st.rescued.len() < ckpt::RESCUE_MAX {
            // a pending capture needs this life and its upload has not
            // landed: its blocks (still in staging: nothing of the next
            // life is written yet) go with the capture instead
            let mut buf = AlignedBuf::new(self.geo.segment_bytes() as usize);
            self.local.read_segment(seg, 0, &mut buf)?;
            let life = s.life;
            st.rescued.push((seg, life, buf.to_vec()));
        }
        let s = &mut st.slots[seg as usize];
        s.life += 1;
        s.written.iter_mut().for_each(|w| *w = 0);
        s.end = 0;
        s.queued = false;
        if let Some(t) = s.try_seq.take() {
            // an upload of the last life may have landed under this name
            let name = Inner::name(&ObjRef {
                seq: t,
                epoch: self.lease.epoch,
                crc: 0,
            });
            self.defer_delete(st, name, self.geo.segment_bytes());
        }
        st.cached.retain(|&c| c != seg);
        if let Some(old) = st.slots[seg as usize].stored {
            if !st.slots[seg as usize].local {
                // The staging copy was punched behind its old chunk header
                // at block 0: once the table says "local", a crash must not
                // find that header over a body it no longer has (recovery
                // would call it damage below the durable point). A
                // tombstone goes there durably first, as the engine's own
                // discard keeps one before it punches a body.
                let mut tomb = AlignedBuf::new(BLOCK_BYTES);
                chunk::tombstone(&mut tomb, &st.table.uuid, seg);
                // MUTANT: evicted-header-kept s|self.local.wipe(seg, &tomb)?;|let _ = &tomb;|
                self.local.wipe(seg, &tomb)?;
                self.media.flush()?;
            }
            // MUTANT: object-deleted-before-table s|if let Err(e) = st.table.set(seg, None) {|if let Err(e) = Ok::<(), io::Error>(()) {|
            if let Err(e) = st.table.set(seg, None) {
                let f = format!(
                    "{}: cannot record segment {seg}'s new life: {e}",
                    st.table.path().display()
                );
                st.failed = Some(f.clone());
                return Err(io_err(f));
            }
            let s = &mut st.slots[seg as usize];
            s.stored = None;
            // (a punched body reads as anything behind the tombstone)
            s.local = true;
            self.defer_delete(st, Inner::name(&old), self.geo.segment_bytes());
        }
        Ok(())
    }

    /// Queue the upload of every slot that holds data of its current life
    /// and has no object (only once the engine stopped writing: `finish`).
    fn queue_partial(&self) {
        let mut st = self.state.lock();
        let st = &mut *st;
        for (i, s) in st.slots.iter_mut().enumerate() {
            if s.stored.is_none() && !s.queued && s.written.iter().any(|&w| w != 0) {
                s.queued = true;
                st.cached.push_back(i as u32);
                st.jobs.push_back(Job::Upload {
                    seg: i as u32,
                    life: s.life,
                });
            }
        }
        self.work.notify_all();
    }

    /// Delete object `name` once checkpoint objects taken after now are
    /// stored and none that is kept names it (`ckpt.rs`): a checkpoint
    /// object stored before this life began may still name it, and a mount
    /// from the store may roll forward over it.
    fn defer_delete(&self, st: &mut State, name: String, bytes: u64) {
        let after = self.ckpt_next.load(Ordering::SeqCst);
        // MUTANT: object-deleted-before-ckpt-object s|st.deferred.push(ckpt::Deferred { name, bytes, after });|let _ = after; st.jobs.push_back(Job::Delete { name, bytes });|
        st.deferred.push(ckpt::Deferred { name, bytes, after });
    }

    fn worker(self: Arc<Inner>) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let job = {
                let mut st = self.state.lock();
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Some(j) = st.jobs.pop_front() {
                        st.busy += 1;
                        break j;
                    }
                    if self.work.wait_for(&mut st, CKPT_TICK).timed_out() {
                        // idle: a checkpoint the engine made since may be
                        // ready to store
                        drop(st);
                        self.try_checkpoint(true);
                        st = self.state.lock();
                    }
                }
            };
            // evicts before this job stops counting as busy (`wait_idle`)
            let ok = self.run_job(&job);
            let mut st = self.state.lock();
            st.busy -= 1;
            if ok {
                backoff = Duration::from_millis(50);
                self.room.notify_all();
            } else {
                // again later, behind what else is queued
                st.jobs.push_back(job);
                self.stats.upload_retries.fetch_add(1, Ordering::Relaxed);
                let _ = self.work.wait_for(&mut st, backoff);
                backoff = (backoff * 2).min(self.opts.retry_max);
            }
            if st.jobs.is_empty() && st.busy == 0 {
                self.idle.notify_all();
            }
        }
    }

    /// One job; true: done (then the cache is trimmed), false: try again.
    fn run_job(&self, job: &Job) -> bool {
        let ok = match job {
            Job::Delete { .. } | Job::Upload { .. } if !self.lease_fresh() => {
                // superseded: dropped (the next writer owns the store);
                // the store not answering: tried again later
                self.state.lock().failed.is_some()
            }
            Job::Delete { name, bytes } => match self.objects.delete(name) {
                Ok(()) => {
                    self.stats.deleted_objects.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .deleted_bytes
                        .fetch_add(*bytes, Ordering::Relaxed);
                    true
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: delete of {name} failed ({e}); retrying",
                        self.objects.describe()
                    );
                    false
                }
            },
            Job::Upload { seg, life } => self.upload(*seg, *life),
        };
        if ok {
            self.evict_over();
            if matches!(job, Job::Upload { .. }) {
                self.try_checkpoint(false);
            }
        }
        ok
    }

    /// Inline mode (`uploads == 0`): run what is queued now, on this thread;
    /// what fails stays queued for the next call.
    fn run_inline(&self) {
        if self.opts.uploads > 0 || self.read_only {
            return;
        }
        let n = self.state.lock().jobs.len();
        for _ in 0..n {
            let Some(job) = self.state.lock().jobs.pop_front() else {
                return;
            };
            if !self.run_job(&job) {
                self.stats.upload_retries.fetch_add(1, Ordering::Relaxed);
                self.state.lock().jobs.push_back(job);
            }
        }
    }

    /// Upload slot `seg`'s life `life`. true: done (stored, or moot because
    /// the slot moved on); false: try again later.
    fn upload(&self, seg: u32, life: u64) -> bool {
        {
            let st = self.state.lock();
            let s = &st.slots[seg as usize];
            if s.life != life || s.stored.is_some() || st.failed.is_some() {
                return true;
            }
        }
        self.stats.uploads_in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.upload_inner(seg, life);
        self.stats.uploads_in_flight.fetch_sub(1, Ordering::Relaxed);
        r
    }

    fn upload_inner(&self, seg: u32, life: u64) -> bool {
        let bytes = self.geo.segment_bytes();
        let mut buf = AlignedBuf::new(bytes as usize);
        {
            // a slot not yet stored is never punched; a new life may start
            // under this read (then the result is dropped below)
            let _g = self.evict.read();
            if let Err(e) = self.local.read_segment(seg, 0, &mut buf) {
                tracing::warn!("reading segment {seg} from the staging file for upload: {e}");
                return false;
            }
        }
        let crc = crc32c::crc32c(&buf);
        let seq = {
            let mut st = self.state.lock();
            let s = &mut st.slots[seg as usize];
            if s.life != life {
                return true;
            }
            let written: u64 = s.written.iter().map(|w| w.count_ones() as u64).sum();
            self.stats
                .uploaded_written_bytes
                .fetch_add(written * BLOCK_BYTES as u64, Ordering::Relaxed);
            let seq = *s
                .try_seq
                .get_or_insert_with(|| self.next_seq.fetch_add(1, Ordering::SeqCst));
            if seq >= st.table.seq_floor {
                // numbers stay monotonic across crashes even when every
                // object that had them is deleted (one table write per 1024)
                if let Err(e) = st.table.set_floor(seq + SEQ_STEP) {
                    st.failed = Some(format!(
                        "{}: cannot record the sequence floor: {e}",
                        st.table.path().display()
                    ));
                    return true;
                }
            }
            seq
        };
        let r = ObjRef {
            seq,
            epoch: self.lease.epoch,
            crc,
        };
        let name = Inner::name(&r);
        if !self.lease_fresh() {
            // superseded: dropped; the store not answering: again later
            return self.state.lock().failed.is_some();
        }
        if let Err(e) = self.objects.put_new(&name, &buf) {
            tracing::warn!(
                "{}: upload of segment {seg} as {name} failed ({e}); retrying",
                self.objects.describe()
            );
            if matches!(e, ObjError::Exists(_)) {
                // other bytes under our own name: never ours to reuse
                let mut st = self.state.lock();
                if st.slots[seg as usize].life == life {
                    st.slots[seg as usize].try_seq = None;
                }
            }
            return false;
        }
        self.stats.uploaded_objects.fetch_add(1, Ordering::Relaxed);
        self.stats
            .uploaded_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        let mut st = self.state.lock();
        if st.slots[seg as usize].life != life || st.failed.is_some() {
            // the slot moved on while we uploaded: never recorded
            self.defer_delete(&mut st, name, bytes);
            return true;
        }
        if let Err(e) = st.table.set(seg, Some(r)) {
            st.failed = Some(format!(
                "{}: cannot record segment {seg} stored as {name}: {e}",
                st.table.path().display()
            ));
            return true;
        }
        if let Some(w) = st.ckpt_waits.get_mut(&seg) {
            // MUTANT: pending-ckpt-names-another-life s|if w.0 == life {|if w.0 <= life {|
            if w.0 == life {
                w.1 = Some(r);
            }
        }
        let s = &mut st.slots[seg as usize];
        s.stored = Some(r);
        s.last_stored = Some((life, r));
        s.queued = false;
        s.try_seq = None;
        true
    }

    /// The cache check (docs/objects.md §5.7): read the staging copy of
    /// each stored slot of `list` (newest object first), and mark local
    /// exactly those whose CRC32C over the whole segment is their object's
    /// (recorded in the table with the object). A copy punched or half
    /// punched before a crash (`evict_over`), or one whose writes never
    /// reached the disk, does not match: its reads stay ranged GETs. Reads
    /// of a kept copy are still verified by the blocks' CRCs in the engine.
    /// Stops at `stop` (close) and when the cache is full of this mount's
    /// own segments; records its result (`check_done`).
    fn check_cache(&self, list: Vec<(u32, ObjRef)>, stored: usize) -> io::Result<CacheCheck> {
        let t = Instant::now();
        let mut c = CacheCheck {
            stored,
            ..CacheCheck::default()
        };
        let mut buf = AlignedBuf::new(self.geo.segment_bytes() as usize);
        for (seg, r) in list {
            if self.stop.load(Ordering::SeqCst) {
                c.cut_short = Some("the store closed");
                break;
            }
            match self.check_copy(seg, r, &mut buf)? {
                Fate::Kept => {
                    c.checked += 1;
                    c.kept += 1;
                    self.stats.cache_checked.fetch_add(1, Ordering::Relaxed);
                    self.stats.cache_kept.fetch_add(1, Ordering::Relaxed);
                }
                Fate::NotWhole => {
                    c.checked += 1;
                    self.stats.cache_checked.fetch_add(1, Ordering::Relaxed);
                }
                Fate::Moved => {}
                Fate::Full => {
                    c.cut_short = Some("the cache is full of this mount's segments");
                    break;
                }
            }
            let _ = self.stats.cache_check_left.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |n| n.checked_sub(1),
            );
        }
        c.dropped = stored - c.kept;
        c.ms = t.elapsed().as_millis() as u64;
        self.check_done(c.clone());
        Ok(c)
    }

    /// Record the cache check's result; say it (`on_cache_checked`).
    fn check_done(&self, c: CacheCheck) {
        self.stats.cache_check_left.store(0, Ordering::Relaxed);
        self.stats.cache_check_ms.store(c.ms, Ordering::Relaxed);
        if let Some(f) = &self.opts.on_cache_checked {
            (f.0)(&c);
        }
        *self.check.lock() = Some(c);
        self.checked.notify_all();
    }

    /// Check slot `seg`'s staging copy against object `r` and mark it local
    /// if whole. The eviction lock is held shared from before the read to
    /// the switch: a punch (`discard_body`, `evict_over`) takes it
    /// exclusively, so it comes wholly before the read (which then sees the
    /// punched body) or wholly after the switch (which it undoes). A write
    /// to the slot meanwhile starts a new life first (`new_life`, under the
    /// state lock), which stops naming `r`: the switch requires the slot to
    /// still name `r`, whose sequence number no other life ever gets, so a
    /// copy read for an earlier life is never marked local for a later one.
    fn check_copy(&self, seg: u32, r: ObjRef, buf: &mut AlignedBuf) -> io::Result<Fate> {
        let _held = self.evict.read();
        {
            let st = self.state.lock();
            if st.slots[seg as usize].stored != Some(r) || st.slots[seg as usize].local {
                return Ok(Fate::Moved);
            }
            if st.cached.len() >= self.opts.cache_segments {
                return Ok(Fate::Full);
            }
        }
        // a copy whose first block is zeros (a cache rebuilt from the store
        // has only holes there) is not read further
        let read = self
            .local
            .read_segment(seg, 0, &mut buf[..BLOCK_BYTES])
            .and_then(|()| match buf[..BLOCK_BYTES].iter().all(|&b| b == 0) {
                true => Ok(false),
                false => self.local.read_segment(seg, 0, buf).map(|()| true),
            });
        match read {
            Ok(true) => {}
            Ok(false) => return Ok(Fate::NotWhole),
            Err(e) => {
                // a copy the cache disk cannot read is not trusted: its
                // object serves it (the store holds every stored segment),
                // the mount and the check go on
                tracing::warn!(
                    "cache: segment slot {seg}'s local copy unreadable ({e}); read from the store"
                );
                // MUTANT: cache-read-error-fatal s|return Ok(Fate::NotWhole);|return Err(e);|
                return Ok(Fate::NotWhole);
            }
        }
        // MUTANT: cache-trust-unverified s|crc32c::crc32c(buf) != r.crc|false|
        if crc32c::crc32c(buf) != r.crc {
            return Ok(Fate::NotWhole);
        }
        // MUTANT: cache-check-unlocked s|let gap = &self.opts.check_gap;|drop(_held); let gap = &self.opts.check_gap;|
        let gap = &self.opts.check_gap;
        if let Some(g) = gap {
            (g.0)(seg);
        }
        let mut st = self.state.lock();
        let st = &mut *st;
        if st.cached.len() >= self.opts.cache_segments {
            return Ok(Fate::Full);
        }
        let s = &mut st.slots[seg as usize];
        let same = s.stored == Some(r) && !s.local;
        // MUTANT: cache-check-stale-life s|if !same {|if false {|
        if !same {
            return Ok(Fate::Moved);
        }
        s.local = true;
        // oldest first, before this mount's own segments
        st.cached.push_front(seg);
        Ok(Fate::Kept)
    }

    /// Punch the staging copies of the oldest cached segments beyond the
    /// cache's size: their reads become ranged GETs.
    fn evict_over(&self) {
        loop {
            let (seg, life) = {
                let mut st = self.state.lock();
                // MUTANT: cache-bound-ignored s|st.cached.len() <= self.opts.cache_segments|st.cached.is_empty()|
                if st.cached.len() <= self.opts.cache_segments {
                    return;
                }
                // the oldest filled segment whose object is stored; one still
                // waiting for its upload keeps its staging copy (its only one)
                let slots = &st.slots;
                let pick = st
                    .cached
                    .iter()
                    .position(|&c| slots[c as usize].evictable());
                let Some(i) = pick else {
                    return;
                };
                let seg = st.cached.remove(i).unwrap();
                (seg, st.slots[seg as usize].life)
            };
            let _w = self.evict.write();
            {
                let mut st = self.state.lock();
                let s = &mut st.slots[seg as usize];
                if s.life != life || !s.local {
                    continue;
                }
                s.local = false;
            }
            // advisory: where the media cannot punch, the bytes stay unused
            if let Err(e) = self.local.discard_body(seg) {
                tracing::warn!("punching segment {seg}'s staging copy: {e}");
            }
        }
    }

    /// Read from one segment: the staging copy, or a ranged GET.
    fn read_in(&self, seg: u32, block: u32, buf: &mut [u8]) -> io::Result<()> {
        let g = self.evict.read();
        let obj = {
            let st = self.state.lock();
            let s = &st.slots[seg as usize];
            assert!(
                s.local || s.stored.is_some(),
                "segment {seg} is neither local nor stored"
            );
            if s.local {
                None
            } else {
                s.stored
            }
        };
        match obj {
            None => {
                self.stats.local_reads.fetch_add(1, Ordering::Relaxed);
                self.local.read_segment(seg, block, buf)
            }
            Some(r) => {
                drop(g);
                let name = Inner::name(&r);
                let a = block as u64 * BS;
                let t = Instant::now();
                let got = self
                    .objects
                    .get_range(&name, a..a + buf.len() as u64)
                    .map_err(|e| {
                        io::Error::new(
                            io::Error::from(e).kind(),
                            format!("segment {seg} block {block}: object {name}: read failed"),
                        )
                    })?;
                self.stats.gets.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .get_us
                    .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                self.stats
                    .get_bytes
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
                buf.copy_from_slice(&got);
                Ok(())
            }
        }
    }
}

impl SegmentStore for ObjSegStore {
    fn segment_blocks(&self) -> u32 {
        self.inner.geo.segment_blocks
    }
    fn segment_count(&self) -> u32 {
        self.inner.geo.segment_count
    }
    fn write_unit(&self) -> u64 {
        BS
    }
    fn write(&self, seg: u32, block: u32, buf: &[u8]) -> io::Result<()> {
        let i = &self.inner;
        if seg >= i.geo.segment_count {
            return i.local.write(seg, block, buf); // refused there
        }
        i.check_writable()?;
        i.staging_room(seg)?;
        let g = i.evict.read();
        let life = {
            let mut st = i.state.lock();
            Inner::check_failed(&st)?;
            let s = &st.slots[seg as usize];
            if s.stored.is_some() || s.queued {
                i.new_life(&mut st, seg)?;
            }
            st.slots[seg as usize].life
        };
        // outside the state lock: chunk writes of two writer threads overlap
        i.local.write(seg, block, buf)?;
        let sb = i.geo.segment_blocks;
        let n = (buf.len() as u64 / BS) as u32;
        let mut st = i.state.lock();
        let s = &mut st.slots[seg as usize];
        // (the engine never starts a segment's next life under a chunk write
        // to it; if something did, this write belongs to no life we track)
        assert_eq!(
            s.life, life,
            "segment {seg}: a new life began under a write"
        );
        for b in block..block + n {
            s.written[(b / 64) as usize] |= 1 << (b % 64);
        }
        if block + n + 1 >= sb {
            s.end = s.end.max(block + n);
        }
        if s.end > 0 && !s.queued && s.covered(s.end) {
            s.queued = true;
            let life = s.life;
            st.cached.push_back(seg);
            st.jobs.push_back(Job::Upload { seg, life });
            i.work.notify_one();
        }
        drop(st);
        drop(g);
        i.run_inline();
        Ok(())
    }
    fn read(&self, p: u64, buf: &mut [u8]) -> io::Result<()> {
        let sb = self.inner.geo.segment_blocks as u64;
        if !(buf.len() as u64).is_multiple_of(BS)
            || p.checked_add(buf.len() as u64 / BS)
                .is_none_or(|e| e > sb * self.inner.geo.segment_count as u64)
        {
            return self.inner.local.read(p, buf); // refused there
        }
        let mut p = p;
        let mut rest = buf;
        while !rest.is_empty() {
            let (seg, block) = ((p / sb) as u32, (p % sb) as u32);
            let n = ((sb - block as u64) * BS).min(rest.len() as u64) as usize;
            let (now, later) = rest.split_at_mut(n);
            self.inner.read_in(seg, block, now)?;
            rest = later;
            p += n as u64 / BS;
        }
        Ok(())
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, p) in reads.iter_mut() {
            self.read(*p, buf)?;
        }
        Ok(())
    }
    fn wipe(&self, seg: u32, tombstone: &[u8]) -> io::Result<()> {
        let i = &self.inner;
        assert_eq!(tombstone.len(), BLOCK_BYTES, "a tombstone is one block");
        if seg >= i.geo.segment_count {
            return i.local.wipe(seg, tombstone);
        }
        i.check_writable()?;
        let g = i.evict.read();
        let mut st = i.state.lock();
        Inner::check_failed(&st)?;
        i.new_life(&mut st, seg)?;
        i.local.wipe(seg, tombstone)?;
        drop(st);
        drop(g);
        i.run_inline();
        Ok(())
    }
    fn discard_body(&self, seg: u32) -> io::Result<bool> {
        let i = &self.inner;
        if seg >= i.geo.segment_count {
            return i.local.discard_body(seg);
        }
        i.check_writable()?;
        // the engine discards only free (wiped, so local) segments; a stored
        // one keeps its object and reads from it from now on
        let _w = i.evict.write();
        let mut st = i.state.lock();
        if st.slots[seg as usize].stored.is_some() {
            st.slots[seg as usize].local = false;
            st.cached.retain(|&c| c != seg);
        }
        drop(st);
        i.local.discard_body(seg)
    }
    fn locate(&self, p: u64, blocks: u32, f: &mut dyn FnMut(Piece)) {
        self.inner.local.locate(p, blocks, f)
    }
    fn uring_reads(&self, _entries: u32) -> Option<io::Result<UringReads>> {
        // reads may go to the object store: no ring over the staging file
        None
    }
    fn gc_read_cost_blocks(&self, seg: u32) -> u32 {
        let i = &self.inner;
        if seg >= i.geo.segment_count {
            return i.local.gc_read_cost_blocks(seg);
        }
        let local = i.state.lock().slots[seg as usize].local;
        // the engine asks once per victim, just before reading it: count
        // where GC's reads go (docs/objects.md §5.7)
        let n = match local {
            true => &i.stats.gc_victims_cached,
            false => &i.stats.gc_victims_fetched,
        };
        n.fetch_add(1, Ordering::Relaxed);
        if local {
            i.local.gc_read_cost_blocks(seg)
        } else {
            // every ranged read of an object is a round trip: GC reads a
            // stored victim in one (issue 21 item 4)
            i.geo.segment_blocks
        }
    }
    fn describe(&self) -> String {
        format!(
            "{} (segments in {}, epoch {})",
            self.inner.local.describe(),
            self.inner.objects.describe(),
            self.inner.lease.epoch
        )
    }
}

/// `create` in the store-durable mode or not (`durable.rs`): recorded in
/// the slot table, so every serve honours it.
pub fn create_in_mode(
    media: Arc<dyn Media>,
    place: Place<'_>,
    force: bool,
    store_durable: bool,
) -> crate::Result<(Arc<ObjSegStore>, AttachReport)> {
    let read = crate::recovery::read_superblocks(&*media)?;
    if store_durable && (read.sb.log_device().is_some() || read.sb.has_intent_log()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the store-durable mode with an intent log is not built (the FLUSH log in the store is the volume's log)",
        )
        .into());
    }
    create_inner(media, place, force, store_durable)
}

/// Create the slot table of a new volume in `dir` (every slot local).
pub fn create_table(dir: &Path, uuid: [u8; 16], geo: &Geometry, epoch: u64) -> io::Result<Table> {
    Table::create(
        &dir.join(TABLE_FILE),
        uuid,
        geo.segment_count,
        geo.segment_blocks,
        epoch,
    )
}

/// Everything `open` needs besides the media.
pub struct Place<'a> {
    pub objects: Arc<dyn ObjectStore>,
    /// The cache directory (the slot table lives there).
    pub dir: &'a Path,
    pub takeover: bool,
    pub opts: ObjSegOptions,
}

/// The segment store of the volume whose freshly formatted local metadata
/// file is `media` (`Volume::format` ran on it): refuses a prefix holding
/// objects unless `force`, takes the first lease, checks the store creates
/// conditionally, writes a new slot table.
pub fn create(
    media: Arc<dyn Media>,
    place: Place<'_>,
    force: bool,
) -> crate::Result<(Arc<ObjSegStore>, AttachReport)> {
    create_inner(media, place, force, false)
}

fn create_inner(
    media: Arc<dyn Media>,
    place: Place<'_>,
    force: bool,
    store_durable: bool,
) -> crate::Result<(Arc<ObjSegStore>, AttachReport)> {
    let read = crate::recovery::read_superblocks(&*media)?;
    let geo = Geometry::from_superblock(&read.sb);
    check_empty(&*place.objects, force)?;
    let lease = lease::take(&*place.objects, &Holder::this_process(), force).map_err(io_err)?;
    fence::take_over(&*place.objects, &lease, false)?;
    crate::media::objects::verify_write_once(
        &*place.objects,
        &format!("probe/write-once-{}", lease.epoch),
    )
    .map_err(io_err)?;
    let mut table = create_table(place.dir, read.sb.uuid, &geo, lease.epoch)?;
    if store_durable {
        table.set_store_durable(true)?;
    }
    Ok(ObjSegStore::attach(
        media,
        &geo,
        read.sb.uuid,
        place.objects,
        table,
        lease,
        place.opts,
    )?)
}

/// The segment store of an existing volume, for reading only (`check`).
pub fn open_read_only(
    media: Arc<dyn Media>,
    objects: Arc<dyn ObjectStore>,
    dir: &Path,
) -> crate::Result<(Arc<ObjSegStore>, AttachReport)> {
    let read = crate::recovery::read_superblocks(&*media)?;
    let geo = Geometry::from_superblock(&read.sb);
    let table = Table::open(&dir.join(TABLE_FILE))?;
    Ok(ObjSegStore::attach_read_only(
        media,
        &geo,
        read.sb.uuid,
        objects,
        table,
    )?)
}

/// The segment store of an existing volume whose local metadata file is
/// `media` (locked by the caller): its slot table, the lease (`take_lease`),
/// the objects checked (`ObjSegStore::attach`).
pub fn open(
    media: Arc<dyn Media>,
    place: Place<'_>,
) -> crate::Result<(Arc<ObjSegStore>, AttachReport)> {
    let read = crate::recovery::read_superblocks(&*media)?;
    let geo = Geometry::from_superblock(&read.sb);
    let table = Table::open(&place.dir.join(TABLE_FILE))?;
    let lease = take_lease(&*place.objects, &table, place.takeover).map_err(|e| {
        io_err(format!(
            "{}: {e}{}",
            place.objects.describe(),
            if matches!(e, LeaseError::Held { .. }) {
                " (--takeover if that writer is gone; this cache's metadata may then be older than the volume)"
            } else {
                ""
            }
        ))
    })?;
    // a live writer of an earlier epoch is fenced before anything is listed
    // (§5.6); this cache's own crashed writer needs no wait
    fence::take_over(&*place.objects, &lease, lease.epoch == table.epoch + 1)?;
    Ok(ObjSegStore::attach(
        media,
        &geo,
        read.sb.uuid,
        place.objects,
        table,
        lease,
        place.opts,
    )?)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_check;
#[cfg(test)]
mod tests_cost;
#[cfg(test)]
mod tests_durable;
#[cfg(test)]
mod tests_recover;
