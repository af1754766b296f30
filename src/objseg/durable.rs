//! The store-durable mode of a volume in an object store (issue 21 item 2;
//! docs/objects.md §5.4): a FLUSH is durable in the object store itself, so
//! that losing the whole host loses nothing acknowledged.
//!
//! `ObjLog` is the local metadata file's media seen through a FLUSH log: it
//! passes every call to the file, and remembers every write (byte offset,
//! bytes) in order, numbered per epoch from 0. Its `flush` flushes the file,
//! then puts the writes made since the last log object as one write-once
//! object `log/L-E` (`format::objlog`: numbered, chained by CRC32C; since
//! version 2 one record table a group and no zero padding, each record's
//! CRC checked over the bytes replay rebuilds) and
//! returns only once that PUT and the PUTs of every lower-numbered object
//! returned: the engine's group commit (one media flush serves every FLUSH
//! waiting) is the log's group commit, one PUT per media flush. The engine
//! runs up to `window` (`PUTS_IN_FLIGHT`) such flushes at once
//! (`Media::flush_parallelism`), so up to that many PUTs are in flight and
//! a later object may be stored before an earlier one; no FLUSH is answered
//! past an object not yet stored, and replay stops at the first missing
//! number, so a crash between leaves the store a prefix of what was
//! answered plus objects past a gap that nothing ever reads.
//!
//! Mounting from the store (`recover.rs`): the newest checkpoint object
//! names `log_start`, the first record its capture may not reflect (taken
//! before the capture read anything); the log objects of its epoch replay
//! over the rebuilt file from that record on, in number order, up to the
//! first missing or bad one (`replay`, ZFS's `zil_parse` rule). The rebuilt
//! file then holds, at every offset written since `log_start`, what the
//! host's file held at its last FLUSH the store acknowledged, and the
//! engine's own recovery runs on it unchanged.
//!
//! Invariants:
//! - `flush` returns Ok only after every write that returned before it was
//!   called is in a log object the store acknowledged (or the inner flush
//!   and a PUT failed: Err, and the volume stops);
//! - `flush` answers Ok only once every log object numbered up to the one
//!   holding its writes is stored (`stored_through`), never for an object
//!   stored past a lower one still in flight or failed (then every later
//!   FLUSH fails: the volume stops);
//! - `flush` answers Ok only under a fresh lease check (one that found no
//!   newer epoch started less than T/2 before the answer: `answer_gate`),
//!   so no FLUSH is answered more than T/2 after a taker's epoch exists;
//! - a fence object met before the chain's first object is passed over by
//!   `replay` (a taker's fence at a number this writer had trimmed; the
//!   taker fenced again above the chain, `fence::fence_log`), one met after
//!   it ends the replay;
//! - record numbers rise by one per write, in the order the writes returned;
//!   objects are sealed (numbered, chained by CRC) in that order, each
//!   naming its first record (a FLUSH group may be sealed as several
//!   pieces, `SLUICE_LOG_PIECE_KIB`, put at once: its FLUSH waits for every
//!   one, and replay reads them as any consecutive objects); the PUT
//!   of object L is sent only while L < stored_through + window, and at
//!   most `window` PUTs are in flight;
//! - the newest `MAX_PUTS_IN_FLIGHT` stored objects are never deleted (a
//!   taker's fence reads a gap within that many below the newest object
//!   as a PUT in flight: `fence::fence_log`);
//! - a log object is deleted only once the older of the two kept
//!   checkpoint objects (the one a damaged newest falls back to) is of this
//!   epoch and its `log_start` is past the object's last record
//!   (`deletable`): every mount from a kept checkpoint object still finds
//!   every record it replays.

use super::fence::LeaseClock;
use super::io_err;
use crate::format::objlog::{fence_by, LogObject};
use crate::format::objname::{ObjKind, ObjName};
use crate::media::objects::{ObjError, ObjectStore};
use crate::media::{Media, UringReads};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of unlogged writes that make a writer put them itself (the log's
/// memory bound between FLUSHes).
pub const PENDING_LIMIT: usize = 32 << 20;

/// The most log PUTs any writer has in flight (`SLUICE_LOG_PUTS` is
/// clamped to it), and how many of its newest stored log objects a writer
/// always keeps: a taker's fence (`fence::fence_log`) reads a missing
/// number within this many below the newest listed object as a PUT that
/// may still land, never as a deleted object.
pub const MAX_PUTS_IN_FLIGHT: usize = 16;

/// Log objects whose PUTs may be in flight at once by default
/// (`SLUICE_LOG_PUTS` overrides it, 1..=MAX_PUTS_IN_FLIGHT). Several in
/// flight hide the PUT round trip (a FLUSH need not wait for the PUT
/// before its own), but they split the same writers into more, smaller
/// groups: one PUT per group, and the store spends its CPU per request.
/// Measured on this machine (one OSD, or `weed mini`, on 2 shared cores:
/// docs/objects.md §4.5) the store's CPU, not the round trip, bounded the
/// mode, and K=8 was slower than K=1 in most same-run pairs (SeaweedFS
/// alternating: 2088, 1593 against 2286, 2403 durable writes/s). So the
/// default stays 1 (serial PUTs); a store whose round trip dominates (a
/// remote cluster with idle servers; radosgw here gained 2.5x in one run)
/// is where `SLUICE_LOG_PUTS=4..8` is worth trying.
pub const PUTS_IN_FLIGHT: usize = 1;

/// `SLUICE_LOG_PIECE_KIB`: the log bytes one object of a FLUSH group
/// holds at most, the pieces put at once; unset or 0, the whole group is
/// one object. Off by default: on one BlueStore OSD on a rotational
/// device a create under 64 KiB (deferred into RocksDB's WAL) took a
/// fraction of a 100 KiB one's time in a quiet probe, but durable fsync32
/// through sluice gained nothing in 9 same-run pairs on this loaded
/// machine (median ratio 0.97) while the OSD's CPU per GiB rose ~40%
/// (docs/objects.md §4.6).
fn piece_bytes() -> usize {
    std::env::var("SLUICE_LOG_PIECE_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map(|k| k << 10)
        .unwrap_or(0)
}

/// Cut one FLUSH group's records (in order) into pieces of about `piece`
/// encoded bytes each (whole records: a record is never split, so one
/// larger than `piece` is a piece of its own), at most `most` pieces (the
/// last takes the rest). `piece == 0`: one piece.
fn pieces(records: Vec<(u64, Vec<u8>)>, piece: usize, most: usize) -> Vec<Vec<(u64, Vec<u8>)>> {
    let mut out: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new()];
    let mut bytes = crate::format::objlog::HEADER + 4;
    for r in records {
        let add = if piece > 0 {
            LogObject::record_len(&r.1)
        } else {
            0
        };
        let cur = out.last().expect("never empty");
        if piece > 0 && !cur.is_empty() && bytes + add > piece && out.len() < most {
            // MUTANT: log-piece-record-dropped s|out.push(Vec::new());|out.push(Vec::new()); continue;|
            out.push(Vec::new());
            bytes = crate::format::objlog::HEADER + 4;
        }
        bytes += add;
        out.last_mut().expect("never empty").push(r);
    }
    out
}

fn puts_in_flight() -> usize {
    std::env::var("SLUICE_LOG_PUTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map(|k| k.clamp(1, MAX_PUTS_IN_FLIGHT))
        .unwrap_or(PUTS_IN_FLIGHT)
}

/// Counters.
#[derive(Debug, Default)]
pub struct LogStats {
    pub objects_put: AtomicU64,
    pub bytes_put: AtomicU64,
    pub records: AtomicU64,
    /// Bytes of the records sealed into log objects (what the media
    /// writes held; the objects' own bytes are `bytes_put`).
    pub record_bytes: AtomicU64,
    pub put_us: AtomicU64,
    pub put_retries: AtomicU64,
    pub objects_deleted: AtomicU64,
    /// The most log PUTs seen in flight at once.
    pub most_in_flight: AtomicU64,
}

#[derive(Default)]
struct Pending {
    records: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    /// The number the next write's record gets.
    next_record: u64,
}

#[derive(Default)]
struct Put {
    /// The next log object's number (the next one sealed).
    next_index: u64,
    /// CRC32C of the last log object sealed (0 before the first).
    prev_crc: u32,
    /// Every log object numbered below this is stored (acknowledged).
    stored_through: u64,
    /// Objects stored ahead of a lower one still in flight: index -> the
    /// first record past it.
    ahead: std::collections::BTreeMap<u64, u64>,
    /// PUTs sent and not yet answered.
    in_flight: usize,
    /// A log object that could not be stored: no FLUSH from then on.
    broken: Option<String>,
    /// Stored objects of this epoch, every one below `stored_through`:
    /// (index, first record past it), oldest first.
    done: VecDeque<(u64, u64)>,
}

/// The local metadata file of a store-durable volume (see the module doc).
pub struct ObjLog {
    inner: Arc<dyn Media>,
    objects: Arc<dyn ObjectStore>,
    uuid: [u8; 16],
    epoch: u64,
    /// Every log PUT is sent under a fresh lease check (`fence.rs`).
    clock: Arc<LeaseClock>,
    pending: Mutex<Pending>,
    put: Mutex<Put>,
    /// Signalled when a log object is stored or the log breaks.
    stored: Condvar,
    /// Log PUTs in flight at most (`PUTS_IN_FLIGHT`).
    window: AtomicUsize,
    /// Log objects of earlier epochs found at attach (deletable once a
    /// kept checkpoint object of this epoch is the older of the two).
    older: Mutex<Vec<String>>,
    /// How long one log object's PUT is tried before the FLUSH fails (ms).
    put_timeout_ms: AtomicU64,
    /// Log bytes one object holds at most (0: a FLUSH group is one object;
    /// `piece_bytes`).
    piece: AtomicUsize,
    pub stats: LogStats,
}

impl ObjLog {
    /// The FLUSH log of epoch `epoch` over `inner`; lists `log/` once to
    /// find the earlier epochs' objects (deleted later, `deletable`).
    pub fn new(
        inner: Arc<dyn Media>,
        objects: Arc<dyn ObjectStore>,
        uuid: [u8; 16],
        clock: Arc<LeaseClock>,
    ) -> io::Result<Arc<ObjLog>> {
        let epoch = clock.lease().epoch;
        let mut older = Vec::new();
        for o in objects.list(ObjKind::Log.dir()).map_err(io_err)? {
            match ObjName::parse(&o.name) {
                Ok(ObjName::Log { epoch: e, .. }) if e < epoch => older.push(o.name),
                Ok(ObjName::Log { .. }) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: {} is a log object of epoch {epoch} or later: another writer holds the volume",
                            objects.describe(),
                            o.name
                        ),
                    ))
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: {} is not a log object name: something else writes under log/",
                            objects.describe(),
                            o.name
                        ),
                    ))
                }
            }
        }
        Ok(Arc::new(ObjLog {
            inner,
            uuid,
            epoch,
            clock,
            pending: Mutex::new(Pending::default()),
            put: Mutex::new(Put::default()),
            stored: Condvar::new(),
            window: AtomicUsize::new(puts_in_flight()),
            older: Mutex::new(older),
            put_timeout_ms: AtomicU64::new(60_000),
            piece: AtomicUsize::new(piece_bytes()),
            objects,
            stats: LogStats::default(),
        }))
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many log PUTs may be in flight at once.
    pub fn window(&self) -> usize {
        self.window.load(Ordering::Relaxed)
    }

    /// Set how many log PUTs may be in flight at once (1..=
    /// `MAX_PUTS_IN_FLIGHT`; tests, before the volume's first FLUSH).
    pub fn set_window(&self, k: usize) {
        self.window
            .store(k.clamp(1, MAX_PUTS_IN_FLIGHT), Ordering::Relaxed);
    }

    /// The log bytes one object of a FLUSH group holds at most (0: the
    /// whole group in one object).
    pub fn piece_bytes(&self) -> usize {
        self.piece.load(Ordering::Relaxed)
    }

    /// Set `piece_bytes` (tests, before the volume's first FLUSH).
    pub fn set_piece_bytes(&self, b: usize) {
        self.piece.store(b, Ordering::Relaxed);
    }

    /// How long a log object's PUT is tried before its FLUSH fails
    /// (default 60 s).
    pub fn set_put_timeout(&self, d: Duration) {
        self.put_timeout_ms
            .store(d.as_millis() as u64, Ordering::Relaxed);
    }

    /// The number the next write's record gets: every write numbered below
    /// it returned before this call (a checkpoint capture's `log_start`).
    pub fn mark(&self) -> u64 {
        self.pending.lock().next_record
    }

    /// Records written and not yet in a stored log object.
    pub fn unlogged(&self) -> usize {
        self.pending.lock().records.len()
    }

    /// Put every write made so far as log objects (one, or several
    /// pieces of at most `piece_bytes` put at once; several callers' PUTs
    /// run at once, up to `window`); returns once the store acknowledged
    /// those objects and every one numbered below them, i.e. once every
    /// write that returned before this call is in the store's unbroken
    /// chain.
    pub fn put_pending(&self) -> io::Result<()> {
        // seal: the records so far become objects `index..target`, each
        // chained to the one sealed before it (sealing is in number order,
        // the PUTs are not)
        let (sealed, target) = {
            let mut p = self.put.lock();
            if let Some(b) = &p.broken {
                return Err(io::Error::other(b.clone()));
            }
            let mut q = self.pending.lock();
            if q.records.is_empty() {
                // our writes (if any) are in objects sealed already
                (Vec::new(), p.next_index)
            } else {
                let records = std::mem::take(&mut q.records);
                self.stats
                    .record_bytes
                    .fetch_add(q.bytes as u64, Ordering::Relaxed);
                q.bytes = 0;
                let mut first = q.next_record - records.len() as u64;
                drop(q);
                let mut sealed = Vec::new();
                for records in pieces(records, self.piece_bytes(), MAX_PUTS_IN_FLIGHT) {
                    let n = records.len() as u64;
                    let index = p.next_index;
                    let obj = LogObject {
                        uuid: self.uuid,
                        epoch: self.epoch,
                        index,
                        first_record: first,
                        prev_crc: p.prev_crc,
                        records,
                    };
                    let bytes = obj.encode();
                    p.prev_crc = crc32c::crc32c(&bytes);
                    p.next_index = index + 1;
                    first += n;
                    sealed.push((index, first, bytes));
                }
                (sealed, p.next_index)
            }
        };
        // the pieces of one group go out at once (each its own PUT in the
        // window: at most MAX_PUTS_IN_FLIGHT, `pieces`)
        let window = self.window().max(sealed.len()).min(MAX_PUTS_IN_FLIGHT);
        match sealed.len() {
            0 => {}
            1 => {
                let (index, end, bytes) = &sealed[0];
                self.send(*index, *end, bytes, window)?;
            }
            _ => {
                let results: Vec<io::Result<()>> = std::thread::scope(|sc| {
                    let hs: Vec<_> = sealed
                        .iter()
                        .map(|(index, end, bytes)| {
                            sc.spawn(move || self.send(*index, *end, bytes, window))
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| {
                            h.join()
                                .unwrap_or_else(|_| Err(io::Error::other("a log PUT panicked")))
                        })
                        .collect()
                });
                for r in results {
                    r?;
                }
            }
        }
        {
            let mut p = self.put.lock();
            loop {
                // MUTANT: log-acked-past-gap s|p.stored_through >= target|p.ahead.contains_key(&target.saturating_sub(1)).then_some(target).unwrap_or(p.stored_through) >= target|
                if p.stored_through >= target {
                    break;
                }
                if let Some(b) = &p.broken {
                    return Err(io::Error::other(b.clone()));
                }
                self.stored.wait(&mut p);
            }
        }
        // MUTANT: flush-answered-on-a-stale-lease s|self.answer_gate()|Ok::<(), io::Error>(())|
        self.answer_gate()
    }

    /// Put sealed object `index` (records up to `end`) once it is within
    /// `window` of the lowest object not stored and fewer than `window`
    /// PUTs are out; on success it joins `stored_through` when every lower
    /// one has; a failure breaks the log (no FLUSH from then on).
    fn send(&self, index: u64, end: u64, bytes: &[u8], window: usize) -> io::Result<()> {
        {
            let mut p = self.put.lock();
            while p.broken.is_none()
                && (p.in_flight >= window || index >= p.stored_through + window as u64)
            {
                self.stored.wait(&mut p);
            }
            if let Some(b) = &p.broken {
                return Err(io::Error::other(b.clone()));
            }
            p.in_flight += 1;
            self.stats
                .most_in_flight
                .fetch_max(p.in_flight as u64, Ordering::Relaxed);
        }
        let r = self.put_one(index, bytes);
        let mut p = self.put.lock();
        p.in_flight -= 1;
        match r {
            Ok(()) => {
                p.ahead.insert(index, end);
                loop {
                    let i = p.stored_through;
                    let Some(e) = p.ahead.remove(&i) else { break };
                    p.done.push_back((i, e));
                    p.stored_through += 1;
                }
                self.stored.notify_all();
                Ok(())
            }
            Err(e) => {
                // every later object waits for this one: none of their
                // FLUSHes can be answered now (the volume stops)
                if p.broken.is_none() {
                    p.broken = Some(e.to_string());
                }
                self.stored.notify_all();
                Err(e)
            }
        }
    }

    /// A FLUSH is answered only under a fresh lease check (one that found
    /// no newer epoch and started less than T/2 ago; a check is run when
    /// the last is older), so none is answered later than T/2 after a
    /// taker's epoch exists, whenever its PUT returned; the taker lists
    /// 2T after its epoch, so it sees every object behind an answered
    /// FLUSH by name, without any bound on how late a PUT lands
    /// (docs/objects.md §5.6). A check the store does not answer is tried
    /// again up to the PUT timeout.
    fn answer_gate(&self) -> io::Result<()> {
        let t = Instant::now();
        let timeout = Duration::from_millis(self.put_timeout_ms.load(Ordering::Relaxed));
        let mut wait = Duration::from_millis(20);
        loop {
            match self.clock.fresh() {
                Ok(()) => return Ok(()),
                Err(e) if self.clock.superseded().is_some() || t.elapsed() >= timeout => {
                    let mut p = self.put.lock();
                    if p.broken.is_none() {
                        p.broken = Some(e.to_string());
                    }
                    self.stored.notify_all();
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!("{e}; a FLUSH waits for its lease check");
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// One log object's conditional create, under a fresh lease check,
    /// tried again until the PUT timeout.
    fn put_one(&self, index: u64, bytes: &[u8]) -> io::Result<()> {
        let name = ObjName::Log {
            seq: index,
            epoch: self.epoch,
        }
        .encode();
        let t = Instant::now();
        let timeout = Duration::from_millis(self.put_timeout_ms.load(Ordering::Relaxed));
        let mut wait = Duration::from_millis(20);
        loop {
            // sent only under a fresh lease check (§5.6); superseded:
            // the FLUSH fails for good
            let r = match self.clock.fresh() {
                Err(e) if self.clock.superseded().is_some() => return Err(e),
                Err(e) => Err(e.to_string()),
                Ok(()) => match self.objects.put_new(&name, bytes) {
                    Ok(()) => Ok(()),
                    // MUTANT: fenced-put-taken-as-ok s|Err(ObjError::Exists(_)) => {|Err(ObjError::Exists(_)) => { if true { break; }|
                    Err(ObjError::Exists(_)) => {
                        // another writer's object under our name: a
                        // taker's fence (fence.rs). Our PUT never landed;
                        // nothing from here on is answered.
                        self.clock.supersede(format!(
                            "{name} is another writer's: a takeover fenced epoch {}'s FLUSH log",
                            self.epoch
                        ));
                        return Err(self.clock.gate_write().expect_err("superseded"));
                    }
                    Err(e) => Err(e.to_string()),
                },
            };
            match r {
                Ok(()) => break,
                Err(e) if t.elapsed() < timeout => {
                    tracing::warn!(
                        "{}: log object {name}: {e}; trying again",
                        self.objects.describe()
                    );
                    self.stats.put_retries.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(2)).min(timeout);
                }
                Err(e) => {
                    return Err(io::Error::other(format!(
                        "{}: log object {name} not stored after {:?} ({e}): a FLUSH cannot be made durable in the store",
                        self.objects.describe(),
                        timeout
                    )))
                }
            }
        }
        self.stats
            .put_us
            .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.stats.objects_put.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_put
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The log objects no kept checkpoint object needs once the older of
    /// the two kept ones is of `epoch` with `log_start` (removed from this
    /// log's memory: the caller deletes them). The newest
    /// `MAX_PUTS_IN_FLIGHT` stored objects are always kept (see there).
    pub fn deletable(&self, epoch: u64, log_start: u64) -> Vec<String> {
        if epoch != self.epoch {
            return Vec::new();
        }
        let mut out = std::mem::take(&mut *self.older.lock());
        let mut p = self.put.lock();
        let keep_from = p.stored_through.saturating_sub(MAX_PUTS_IN_FLIGHT as u64);
        while p
            .done
            .front()
            .is_some_and(|&(i, end)| end <= log_start && i < keep_from)
        {
            let (i, _) = p.done.pop_front().expect("checked");
            out.push(
                ObjName::Log {
                    seq: i,
                    epoch: self.epoch,
                }
                .encode(),
            );
        }
        out
    }
}

impl Media for ObjLog {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        self.inner.read_batch(reads)
    }
    fn uring_reads(&self, entries: u32) -> Option<io::Result<UringReads>> {
        self.inner.uring_reads(entries)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.clock.gate_write()?;
        self.inner.write_at(buf, offset)?;
        let over = {
            let mut q = self.pending.lock();
            q.records.push((offset, buf.to_vec()));
            q.bytes += buf.len();
            q.next_record += 1;
            q.bytes > PENDING_LIMIT
        };
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        if over {
            self.put_pending()?;
        }
        Ok(())
    }
    fn flush_parallelism(&self) -> usize {
        self.window()
    }
    fn flush(&self) -> io::Result<()> {
        self.clock.gate_write()?;
        self.inner.flush()?;
        // MUTANT: flush-acked-before-log-put s|self.put_pending()|Ok::<(), io::Error>(())|
        self.put_pending()
    }
    fn describe(&self) -> String {
        format!(
            "{} (FLUSH log in {}, epoch {})",
            self.inner.describe(),
            self.objects.describe(),
            self.epoch
        )
    }
    fn size_now(&self) -> io::Result<u64> {
        self.inner.size_now()
    }
    fn allocate(&self, ranges: &[(u64, u64)]) -> io::Result<()> {
        self.inner.allocate(ranges)
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        // not logged: the engine and the store punch only bytes nothing
        // reads again before a logged write covers them (a free segment's
        // body behind its tombstone, a stored segment's cached copy)
        self.inner.discard(offset, len)
    }
}

/// What `replay` applied.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    pub objects: usize,
    pub records: usize,
    /// The number of the last log object applied.
    pub last_applied: Option<u64>,
    /// Why it ended.
    pub stop: String,
    /// It ended at a fence object put by this epoch (a takeover, fence.rs).
    pub fenced_by: Option<u64>,
    /// Fence objects met before the chain's first object and passed over
    /// (a fence at a number the writer had trimmed already).
    pub passed_fences: usize,
}

/// Replay the log of epoch `epoch` from record `from` on: each record's
/// bytes go to `apply(offset, bytes)`, in order, over consecutive log
/// objects (number +1, chained CRC, records following on) up to the first
/// missing or bad one.
pub fn replay(
    objects: &dyn ObjectStore,
    uuid: &[u8; 16],
    epoch: u64,
    from: u64,
    apply: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<Replayed> {
    let mut idx: Vec<u64> = Vec::new();
    for o in objects.list(ObjKind::Log.dir()).map_err(io_err)? {
        if let Ok(ObjName::Log { seq, epoch: e }) = ObjName::parse(&o.name) {
            if e == epoch {
                idx.push(seq);
            }
        }
    }
    idx.sort_unstable();
    let mut out = Replayed::default();
    // (index, crc, next record) of the last object read
    let mut last: Option<(u64, u32, u64)> = None;
    let mut listed = idx.into_iter();
    loop {
        // the listed objects, then (past the listing's end) the next
        // numbers asked for one by one: an object that landed after the
        // listing is read all the same (a GET sees every create that
        // returned before it; the listing need not)
        let (i, probe) = match (listed.next(), last) {
            (Some(i), _) => (i, false),
            (None, Some((li, _, _))) => (li + 1, true),
            (None, None) => break,
        };
        // a number the listing skipped is asked for all the same (a PUT
        // that landed after the listing, G2); missing, it ends the replay:
        // nothing past a gap is ever applied
        let (i, probe, listed_next) = match last {
            Some((li, _, _)) if i != li + 1 => (li + 1, true, Some(i)),
            _ => (i, probe, None),
        };
        let name = ObjName::Log { seq: i, epoch }.encode();
        let bytes = match objects.get(&name) {
            Ok(b) => b,
            Err(ObjError::NotFound(_)) if listed_next.is_some() => {
                out.stop = format!("log object {i} is missing: replay ends");
                return Ok(out);
            }
            Err(ObjError::NotFound(_)) if probe => break,
            Err(e) => {
                out.stop = format!("{name} is unreadable ({e}): replay ends");
                return Ok(out);
            }
        };
        if let Some(by) = fence_by(&bytes) {
            // a fence before the chain's first object: a taker fenced a
            // number the writer had stored and trimmed already, then fenced
            // again above its chain (fence.rs `fence_log`): it ends nothing
            // MUTANT: fence-at-chain-start-ends-replay s|if last.is_none() {|if false {|
            if last.is_none() {
                out.passed_fences += 1;
                continue;
            }
            out.fenced_by = Some(by);
            out.stop = format!("{name} is epoch {by}'s fence: the log of epoch {epoch} ends there");
            return Ok(out);
        }
        let o = match LogObject::decode(&bytes) {
            Ok(o) if o.uuid == *uuid && o.epoch == epoch && o.index == i => o,
            Ok(_) => {
                out.stop = format!("{name} is another volume's or another name's: replay ends");
                return Ok(out);
            }
            Err(e) => {
                out.stop = format!("{name} is damaged ({e}): replay ends");
                return Ok(out);
            }
        };
        let end = o.first_record + o.records.len() as u64;
        match last {
            None if end <= from => {
                // wholly before the capture: not replayed, but the chain
                // starts here
                last = Some((i, crc32c::crc32c(&bytes), end));
                continue;
            }
            None if o.first_record > from => {
                out.stop = format!(
                    "{name} starts at record {}, the checkpoint needs {from}: replay ends",
                    o.first_record
                );
                return Ok(out);
            }
            Some((_, crc, next)) if o.prev_crc != crc || o.first_record != next => {
                out.stop = format!("{name} does not follow the log object before it: replay ends");
                return Ok(out);
            }
            _ if end <= from => {
                last = Some((i, crc32c::crc32c(&bytes), end));
                continue;
            }
            _ => {}
        }
        for (k, (at, d)) in o.records.iter().enumerate() {
            if o.first_record + k as u64 >= from {
                apply(*at, d)?;
                out.records += 1;
            }
        }
        out.objects += 1;
        out.last_applied = Some(i);
        last = Some((i, crc32c::crc32c(&bytes), end));
    }
    out.stop = match last {
        Some((i, _, next)) => format!("the log ends after object {i} (record {next})"),
        None => "no log object".into(),
    };
    Ok(out)
}
