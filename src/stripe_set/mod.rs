//! Stripe set (issue 20): N member `Media` holding one volume, with P (RAID-5)
//! or P and Q (RAID-6) parity computed here, or none (RAID-0). Owns the
//! member IO of the segment area (`write_area`, `read_area`, `flush`), the
//! rows being filled (`rows`), degraded reads, and member failure.
//! `media::SetMedia` shows the set to the engine as one flat `Media` (the
//! metadata mirrored on every member, `meta`), `store::StripeStore` as a
//! `SegmentStore`; `open` reads members' identities and assembles them.
//!
//! Writes never read. A write that completes a row writes the row's data and
//! its parity; a write that leaves a row partial writes its data, keeps the
//! row's data in memory (`rows::RowState`) and marks the row dirty. `flush`
//! first writes, for every dirty row, zeros into the row's unwritten blocks at
//! every column some data block occupies and the row's parity at those
//! columns (bytes never written counted as zero, and made zero on the members,
//! so no fill has to be remembered), then flushes every member.
//!
//! Invariant: after `flush` returns Ok, for every row with data written
//! before it began, every member byte of the row at a column holding written
//! data equals what reconstruction from the other members of the row gives
//! (data + zero padding agree with P and Q), unless a later write to the row
//! was cut short by a power failure before the next flush: that window is
//! the write hole docs/stripes.md §4 describes, not closed here.

mod bufs;
mod fence;
mod heal;
pub mod media;
pub mod meta;
pub mod open;
pub mod rebuild;
mod record;
mod rows;
pub mod scratch;
pub mod store;

use crate::format::stripe::{hex, StripeIdentity};
use crate::format::superblock::TAIL_AREA_BYTES;
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, Media};
use crate::parity;
use crate::stripe::StripeLayout;
use parking_lot::Mutex;
use rows::RowTable;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;
/// Bytes of a member's scratch area `load_scratch` reads at once at most.
const SCRATCH_READ_BYTES: usize = 4 << 20;

/// One slot of the set.
pub struct Member {
    /// The device as the user named it (messages, `info`).
    pub name: String,
    /// None: missing (the set runs degraded without it).
    pub media: Option<Arc<dyn Media>>,
    /// What this member's superblocks say about it.
    pub ident: StripeIdentity,
    failed: AtomicBool,
}

impl Member {
    pub fn new(name: String, media: Option<Arc<dyn Media>>, ident: StripeIdentity) -> Member {
        Member {
            name,
            media,
            ident,
            failed: AtomicBool::new(false),
        }
    }
}

/// Where the volume's regions are in the flat view the engine sees (the
/// superblock's geometry): metadata below `data_offset`, `segment_count`
/// segments of `segment_bytes`, the tail area at `tail_offset`, `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub data_offset: u64,
    pub segment_bytes: u64,
    pub segment_count: u32,
    pub tail_offset: u64,
    pub len: u64,
}

impl Shape {
    pub fn area_bytes(&self) -> u64 {
        self.segment_count as u64 * self.segment_bytes
    }
}

/// What `info`, `check`, metrics and `top` show about a set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetStatus {
    pub members: u32,
    pub parity: u32,
    pub unit: u64,
    /// Slots without a device, or whose device failed: (slot, name, why).
    pub down: Vec<(u32, String, &'static str)>,
    pub member_reads: u64,
    pub member_writes: u64,
    /// Pieces rebuilt from the other members of their row.
    pub reconstructed: u64,
    /// Rows whose data was read back from the members to take a write
    /// (only after the row's state was evicted from memory).
    pub rows_loaded: u64,
    /// Partial rows a flush found no free scratch lane for: their running
    /// parity went in place (the write hole stays open for them).
    pub unprotected_flushes: u64,
    /// Blocks that failed their CRC while every member answered, found
    /// right from the rest of their row and rewritten (`heal`).
    pub healed: u64,
    /// Such blocks for which no candidate verified (answered EIO).
    pub heal_failed: u64,
    /// Rows whose parity disagreed with their data in a parity scrub.
    pub parity_mismatches: u64,
    /// Members' copies of a checkpoint or intent-log record that failed
    /// their check while another member's passed (`SetMedia::read_checked`).
    pub meta_copies_bad: u64,
    /// Of those, copies rewritten from the good one (a writable mount
    /// with every member up).
    pub meta_copies_rewritten: u64,
    /// A member being rebuilt: (slot, segments done, segments in the set,
    /// segments copied, segments only marked because they were free).
    pub rebuild: Option<rebuild::Progress>,
}

impl SetStatus {
    pub fn degraded(&self) -> bool {
        !self.down.is_empty()
    }
    /// "healthy", or "degraded (member 2 missing: /dev/sdc)".
    pub fn describe(&self) -> String {
        if self.down.is_empty() {
            return "healthy".into();
        }
        let d: Vec<String> = self
            .down
            .iter()
            .map(|(s, n, why)| format!("member {s} {why}: {n}"))
            .collect();
        format!("degraded ({})", d.join(", "))
    }
}

/// A scratch place `(member, lane, place)` and the (row, seq) of the tag it
/// holds (None: a dead segment's, voided in any order).
type Owned = ((u32, u32, u32), Option<(u64, u64)>);

/// A valid scratch tag found at mount (`scratch`).
#[derive(Debug, Clone)]
pub struct MountTag {
    pub seq: u64,
    pub which: u8,
    pub member: u32,
    pub lane: u32,
    pub place: u32,
    pub covered: Vec<bool>,
}

#[derive(Default)]
struct Counters {
    member_reads: AtomicU64,
    member_writes: AtomicU64,
    reconstructed: AtomicU64,
    rows_loaded: AtomicU64,
    unprotected: AtomicU64,
    healed: AtomicU64,
    heal_failed: AtomicU64,
    parity_mismatches: AtomicU64,
    meta_bad: AtomicU64,
    meta_rewritten: AtomicU64,
    rebuild_copied: AtomicU64,
    rebuild_skipped: AtomicU64,
}

pub struct StripeSet {
    pub layout: StripeLayout,
    pub shape: Shape,
    members: Vec<Member>,
    rows: Mutex<RowTable>,
    counters: Counters,
    /// While `Volume::format` writes the first block of every segment: no
    /// row state and no parity for those writes (a member lost before the
    /// segment is used reconstructs garbage there, which no chunk header
    /// check accepts: the same as a never-written device).
    formatting: AtomicBool,
    /// Sequence of the next scratch tag.
    seq: AtomicU64,
    /// The slot being rebuilt + 1 (0: none). Its member takes every write
    /// but is read only below `rebuilt_rows` (`rebuild`).
    rebuilding: std::sync::atomic::AtomicU32,
    /// Rows (from the set's first) whose pieces on the member being rebuilt
    /// are written and flushed.
    rebuilt_rows: AtomicU64,
    /// The membership generation superblocks are written with (raised once
    /// when the set first writes degraded, and kept).
    gen: AtomicU64,
    /// A member failed since the set last recorded its generation on the
    /// others (`record`): `flush` records it before it returns.
    unrecorded: AtomicBool,
    /// Metadata copies that fail their check may be rewritten from a good
    /// one (`SetMedia::read_checked`): set by a writable mount
    /// (`Volume::open_set`); `check` and read-only mounts leave it off.
    meta_repair: AtomicBool,
    /// Held across a superblock write (`SetMedia`) and across `record`'s
    /// read-modify-write of the copies, so neither undoes the other.
    sb_lock: Mutex<()>,
    /// While a member is being rebuilt: writes into a segment's rows hold
    /// its slot shared, a rebuild batch holds its segments' exclusively
    /// (`fence`).
    fence: fence::Fence,
    /// Parity buffers reused from row to row.
    bufs: bufs::BufPool,
    /// A flushing thread per member slot, started on first use and kept
    /// (`flush_together`).
    flushers: Mutex<Vec<Option<std::sync::mpsc::Sender<FlushJob>>>>,
}

/// A member flush handed to a member's flushing thread: the media, the
/// slot, and where the result goes.
type FlushJob = (
    Arc<dyn Media>,
    u32,
    std::sync::mpsc::Sender<(u32, io::Result<()>)>,
);

impl std::fmt::Debug for StripeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StripeSet({})", self.describe())
    }
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

impl StripeSet {
    /// A set over `members` (one per slot, in slot order) in `layout`,
    /// showing the engine `shape`.
    pub fn new(layout: StripeLayout, shape: Shape, members: Vec<Member>) -> io::Result<StripeSet> {
        if members.len() != layout.members as usize
            || shape.segment_bytes != layout.segment_bytes()
            || shape.data_offset != layout.member_offset
        {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!(
                    "stripe set: {} members, shape {shape:?} do not fit layout {layout:?}",
                    members.len()
                ),
            ));
        }
        let set = StripeSet {
            layout,
            shape,
            members,
            rows: Mutex::new(RowTable::with_lanes(scratch::LANES)),
            counters: Counters::default(),
            formatting: AtomicBool::new(false),
            seq: AtomicU64::new(1),
            rebuilding: Default::default(),
            rebuilt_rows: AtomicU64::new(0),
            gen: AtomicU64::new(0),
            unrecorded: AtomicBool::new(false),
            meta_repair: AtomicBool::new(false),
            sb_lock: Mutex::new(()),
            fence: fence::Fence::default(),
            bufs: bufs::BufPool::new(layout.unit),
            flushers: Mutex::new(Vec::new()),
        };
        set.gen.store(set.generation(), Ordering::Relaxed);
        if set.down_count() > layout.parity as usize {
            return Err(err(
                io::ErrorKind::NotFound,
                format!(
                    "stripe set: {}; {} parity",
                    set.status().describe(),
                    layout.parity
                ),
            ));
        }
        Ok(set)
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Member byte offset of the flat view's tail area.
    pub fn member_tail_offset(&self) -> u64 {
        self.layout.member_offset
            + self.shape.segment_count as u64 * self.layout.rows_per_segment * self.layout.unit
    }

    /// Rows whose running parity a scratch tag found at mount holds (rows
    /// partial at the last shutdown, not resynced yet).
    pub fn rows_tagged(&self) -> usize {
        self.rows.lock().mount_tags.len()
    }

    /// The rows `rows_tagged` counts.
    pub fn tagged_rows(&self) -> Vec<u64> {
        self.rows.lock().mount_tags.keys().copied().collect()
    }

    /// Member offset of the scratch area (after the tail area).
    pub fn scratch_base(&self) -> u64 {
        self.member_tail_offset() + TAIL_AREA_BYTES
    }

    /// Bytes every member needs.
    pub fn member_bytes(&self) -> u64 {
        self.scratch_base() + scratch::area_bytes(self.layout.unit)
    }

    /// Keep at most `rows` row states in memory after a flush (0: the
    /// default, `rows::KEEP_ROWS`); the simulator and tests use a few, so
    /// rows are evicted and read back.
    pub fn set_row_cache(&self, rows: usize) {
        self.rows.lock().keep = rows;
    }

    /// May `SetMedia::read_checked` rewrite a member's metadata copy that
    /// fails its check (a writable mount: yes; `check`, read-only: no)?
    pub fn set_meta_repair(&self, on: bool) {
        self.meta_repair.store(on, Ordering::Release);
    }

    pub fn set_formatting(&self, on: bool) {
        self.formatting.store(on, Ordering::Release);
    }

    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        format!(
            "stripe set {} of {} members, parity {}, unit {} KiB [{}]",
            hex(&self.members[0].ident.set_uuid),
            self.layout.members,
            self.layout.parity,
            self.layout.unit >> 10,
            names.join(", ")
        )
    }

    pub fn status(&self) -> SetStatus {
        let c = &self.counters;
        SetStatus {
            members: self.layout.members,
            parity: self.layout.parity,
            unit: self.layout.unit,
            down: self
                .members
                .iter()
                .enumerate()
                .filter_map(|(i, m)| {
                    let why = if m.media.is_none() {
                        "missing"
                    } else if m.failed.load(Ordering::Acquire) {
                        "failed"
                    } else if self.rebuilding_slot() == Some(i as u32) {
                        "rebuilding"
                    } else {
                        return None;
                    };
                    Some((i as u32, m.name.clone(), why))
                })
                .collect(),
            member_reads: c.member_reads.load(Ordering::Relaxed),
            member_writes: c.member_writes.load(Ordering::Relaxed),
            reconstructed: c.reconstructed.load(Ordering::Relaxed),
            rows_loaded: c.rows_loaded.load(Ordering::Relaxed),
            unprotected_flushes: c.unprotected.load(Ordering::Relaxed),
            rebuild: self.progress(),
            healed: c.healed.load(Ordering::Relaxed),
            heal_failed: c.heal_failed.load(Ordering::Relaxed),
            parity_mismatches: c.parity_mismatches.load(Ordering::Relaxed),
            meta_copies_bad: c.meta_bad.load(Ordering::Relaxed),
            meta_copies_rewritten: c.meta_rewritten.load(Ordering::Relaxed),
        }
    }

    /// The membership generation the set was assembled at (the highest of
    /// its members').
    pub fn generation(&self) -> u64 {
        self.members
            .iter()
            .map(|m| m.ident.generation)
            .max()
            .unwrap_or(0)
    }

    /// Members missing, failed, or being rebuilt (not all of whose pieces
    /// may be read).
    fn down_count(&self) -> usize {
        self.members
            .iter()
            .enumerate()
            .filter(|(i, m)| {
                m.media.is_none()
                    || m.failed.load(Ordering::Acquire)
                    || self.rebuilding_slot() == Some(*i as u32)
            })
            .count()
    }

    /// The generation superblocks are written with now: the assembled one,
    /// one more from the first write of a set with a member down on.
    pub fn write_generation(&self) -> u64 {
        if self.down_count() > 0 {
            self.gen.fetch_max(self.generation() + 1, Ordering::AcqRel);
        }
        self.gen.load(Ordering::Acquire)
    }

    /// The member's media, None when it is missing or failed.
    fn up(&self, m: u32) -> Option<&Arc<dyn Media>> {
        let mb = &self.members[m as usize];
        mb.media
            .as_ref()
            .filter(|_| !mb.failed.load(Ordering::Acquire))
    }

    /// Take member `m` out of use after an IO error; the error stands when
    /// more members are now down than the parity covers.
    fn fail(&self, m: u32, e: io::Error) -> io::Result<()> {
        let mb = &self.members[m as usize];
        if !mb.failed.swap(true, Ordering::AcqRel) {
            self.unrecorded.store(true, Ordering::Release);
            tracing::error!(
                "stripe set: member {m} ({}) failed and is out of use: {e}",
                mb.name
            );
        }
        if self.down_count() > self.layout.parity as usize {
            return Err(err(
                e.kind(),
                format!(
                    "stripe set: member {m} ({}) failed ({e}) and {} members are down, more than parity {} covers",
                    mb.name,
                    self.down_count(),
                    self.layout.parity
                ),
            ));
        }
        Ok(())
    }

    /// Write to one member; a missing or failed member is skipped (its bytes
    /// are what its row's parity rebuilds).
    fn mwrite(&self, m: u32, buf: &[u8], off: u64) -> io::Result<()> {
        let Some(media) = self.up(m) else {
            return Ok(());
        };
        self.counters.member_writes.fetch_add(1, Ordering::Relaxed);
        match media.write_at(buf, off) {
            Ok(()) => Ok(()),
            Err(e) => self.fail(m, e),
        }
    }

    /// Read from one member; Err when it is missing, failed, or fails now.
    fn mread(&self, m: u32, buf: &mut [u8], off: u64) -> io::Result<()> {
        // MUTANT: degraded-read-uses-failed-member s|self.up(m)|self.members[m as usize].media.as_ref()|
        let Some(media) = self.up(m) else {
            return Err(err(io::ErrorKind::NotFound, format!("member {m} is down")));
        };
        if !self.readable(m, off, buf.len()) {
            return Err(err(
                io::ErrorKind::NotFound,
                format!("member {m} is being rebuilt and does not hold these bytes yet"),
            ));
        }
        self.counters.member_reads.fetch_add(1, Ordering::Relaxed);
        match media.read_at(buf, off) {
            Ok(()) => Ok(()),
            Err(e) => {
                let msg = e.to_string();
                self.fail(m, e)?;
                Err(err(io::ErrorKind::Other, msg))
            }
        }
    }

    /// Member of shard `i` of `row` (data 0..d, then P, then Q).
    fn shard_member(&self, row: u64, i: u32) -> u32 {
        let d = self.layout.data_members();
        if i < d {
            self.layout.data_member(row, i)
        } else {
            self.layout.parity_member(row, i - d).expect("parity shard")
        }
    }

    fn check_area(&self, off: u64, len: usize) -> io::Result<()> {
        if !off.is_multiple_of(BS)
            || !(len as u64).is_multiple_of(BS)
            || off
                .checked_add(len as u64)
                .is_none_or(|e| e > self.shape.area_bytes())
        {
            return Err(err(
                io::ErrorKind::InvalidInput,
                format!(
                    "stripe set: {len} bytes at segment-area offset {off} are not whole blocks inside its {} bytes",
                    self.shape.area_bytes()
                ),
            ));
        }
        Ok(())
    }

    /// Write `buf` at byte `off` of the segment area (whole blocks).
    pub fn write_area(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.write_area_as(off, buf, false)
    }

    /// Write a segment's tombstone (one block at its start, `StripeStore::
    /// wipe`): a row holding nothing else holds no scratch lane past the
    /// flush (its only content is that block, which the segment's next life
    /// overwrites first; a reuse barrier wiping many segments would
    /// otherwise take every lane from user rows): the flush writes its
    /// parity through a lane it frees again before it returns
    /// (`write_tombstones`).
    pub fn write_tombstone(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        let _fence = self.fenced(off, buf.len());
        self.write_area_as(off, buf, true)
    }

    /// Write a segment's tombstone at its wipe: what memory holds of its
    /// rows is forgotten (`forget_segment`) and the tombstone written with
    /// no rebuild batch of the segment between the two (`fence`).
    pub fn wipe_segment(&self, seg: u32, tombstone: &[u8]) -> io::Result<()> {
        let _fence = self.fenced(seg as u64 * self.shape.segment_bytes, BLOCK_BYTES);
        self.forget_segment(seg)?;
        self.write_area_as(seg as u64 * self.shape.segment_bytes, tombstone, true)
    }

    /// While a member is being rebuilt: hold the fence of the segments
    /// bytes `off..off + len` of the area lie in, shared (nothing when no
    /// member is: the flag is set only at assembly, before any write, and
    /// cleared only when the rebuild has ended).
    fn fenced(&self, off: u64, len: usize) -> Vec<parking_lot::RwLockReadGuard<'_, ()>> {
        if self.rebuilding.load(Ordering::Acquire) == 0 || len == 0 {
            return Vec::new();
        }
        let sb = self.shape.segment_bytes;
        self.fence.shared(off / sb, (off + len as u64 - 1) / sb)
    }

    fn write_area_as(&self, off: u64, buf: &[u8], tomb: bool) -> io::Result<()> {
        self.check_area(off, buf.len())?;
        // (a tombstone's caller, `wipe_segment`, holds the fence already)
        let _fence = if tomb {
            Vec::new()
        } else {
            self.fenced(off, buf.len())
        };
        let l = self.layout;
        if off.is_multiple_of(self.shape.segment_bytes) && !self.rows.lock().mount_tags.is_empty() {
            // A segment's block 0 is written only when a life of it starts
            // (or ends: its tombstone): tags found at mount for its rows are
            // an older life's, whose voids a power cut lost (they are voided
            // by the flush after the wipe, `forget_segment`). Dropped here,
            // and voided by the next flush, before it acknowledges anything
            // of the new life; else a degraded read of a new block in such
            // a row would rebuild the old life's block from the stale copy.
            let first = off / l.write_unit();
            let end = first + l.rows_per_segment;
            // MUTANT: stale-mount-tags-kept s|self.rows.lock().drop_mount_tags(first, end);|let _ = end;|
            self.rows.lock().drop_mount_tags(first, end);
        }
        let row_bytes = l.write_unit();
        let mut pos = 0usize;
        while pos < buf.len() {
            let a = off + pos as u64;
            let row = a / row_bytes;
            let in_row = a % row_bytes;
            let take = ((row_bytes - in_row) as usize).min(buf.len() - pos);
            self.write_row(row, in_row, &buf[pos..pos + take], tomb)?;
            pos += take;
        }
        Ok(())
    }

    /// Write the data units of `row` from byte `in_row` of its data.
    fn write_data(&self, row: u64, in_row: u64, data: &[u8]) -> io::Result<()> {
        let l = self.layout;
        let base = l.row_offset(row).expect("row inside the set");
        let mut pos = 0usize;
        while pos < data.len() {
            let b = in_row + pos as u64;
            let d = (b / l.unit) as u32;
            let col = b % l.unit;
            let take = ((l.unit - col) as usize).min(data.len() - pos);
            self.mwrite(l.data_member(row, d), &data[pos..pos + take], base + col)?;
            pos += take;
        }
        Ok(())
    }

    fn write_row(&self, row: u64, in_row: u64, data: &[u8], tomb: bool) -> io::Result<()> {
        let l = self.layout;
        if l.parity == 0 || self.formatting.load(Ordering::Acquire) {
            return self.write_data(row, in_row, data);
        }
        if in_row == 0 && data.len() as u64 == l.write_unit() && self.rows.lock().forget(row) {
            // A whole row no state knows: data, then parity from it.
            self.write_data(row, 0, data)?;
            let u = l.unit as usize;
            let units: Vec<&[u8]> = data.chunks(u).collect();
            let mut par: Vec<bufs::PoolBuf> = (0..l.parity).map(|_| self.bufs.take()).collect();
            encode_into(&units, &mut par, 0..u)?;
            let base = l.row_offset(row).expect("row inside the set");
            for (i, p) in par.iter().enumerate() {
                self.mwrite(
                    self.shard_member(row, l.data_members() + i as u32),
                    &p[..u],
                    base,
                )?;
            }
            return Ok(());
        }
        loop {
            let state = self.row_state(row)?;
            if self.fill_row(row, &state, in_row, data, tomb)? {
                return Ok(());
            }
            // evicted or completed between taking it and locking it: again
        }
    }

    /// Write `data` into `row` through its state; false (nothing done) when
    /// the table no longer holds `state`.
    fn fill_row(
        &self,
        row: u64,
        state: &Arc<Mutex<rows::RowState>>,
        in_row: u64,
        data: &[u8],
        tomb: bool,
    ) -> io::Result<bool> {
        let mut st = state.lock();
        let end = {
            let t = self.rows.lock();
            if !t.is_current(row, state) {
                return Ok(false);
            }
            t.closing.get(&row).copied()
        };
        // a tombstone into a row holding nothing else keeps it tombstone-only
        st.tomb_only = tomb && st.is_empty();
        st.put(in_row, data);
        self.write_data(row, in_row, data)?;
        // whole, or the last write into a closed segment's last row: the
        // rest of it padded, its parity in place, its lane retired (its
        // tags voided by the next flush, after that parity is durable)
        if st.done(end) {
            // MUTANT: full-row-parity-skipped s|self.write_parity(row, &mut st, true)?;|st.dirty = false;|
            self.write_parity(row, &mut st, true)?;
            self.rows.lock().complete(row);
        } else {
            st.dirty = true;
            self.rows.lock().dirty.insert(row);
        }
        Ok(true)
    }

    /// The row's state: the one in memory, a fresh one (a row this mount
    /// never wrote holds no live data: the engine writes only segments it
    /// took free in this mount), or (evicted earlier) its data read back.
    fn row_state(&self, row: u64) -> io::Result<Arc<Mutex<rows::RowState>>> {
        let blocks = (self.layout.write_unit() / BS) as usize;
        if let Some(s) = self.rows.lock().get_or_fresh(row, blocks) {
            return Ok(s);
        }
        // Evicted: read the row's data back (a read in the write path; only
        // rows evicted for memory, never in a steady write-only workload).
        self.counters.rows_loaded.fetch_add(1, Ordering::Relaxed);
        let mut data = AlignedBuf::new(self.layout.write_unit() as usize);
        self.read_area(row * self.layout.write_unit(), &mut data)?;
        Ok(self.rows.lock().insert_loaded(row, &data))
    }

    /// Write `st`'s padding and parity: every column when `all`, else the
    /// columns some data block of the row occupies.
    fn write_parity(&self, row: u64, st: &mut rows::RowState, all: bool) -> io::Result<()> {
        let l = self.layout;
        let ub = (l.unit / BS) as usize;
        let d = l.data_members() as usize;
        let base = l.row_offset(row).expect("row inside the set");
        let zero = AlignedBuf::new(BLOCK_BYTES);
        let used: Vec<bool> = (0..ub).map(|c| all || st.column_used(c, ub, d)).collect();
        // padding: zeros where the row's used columns have no data yet
        for c in (0..ub).filter(|&c| used[c]) {
            for u in 0..d {
                if st.pad(u * ub + c) {
                    self.mwrite(l.data_member(row, u as u32), &zero, base + (c as u64) * BS)?;
                }
            }
        }
        // parity of each run of used columns
        let mut c = 0;
        while c < ub {
            if !used[c] {
                c += 1;
                continue;
            }
            let c0 = c;
            while c < ub && used[c] {
                c += 1;
            }
            let len = (c - c0) * BLOCK_BYTES;
            let mut par: Vec<bufs::PoolBuf> = (0..l.parity).map(|_| self.bufs.take()).collect();
            encode_columns(st, d, ub, c0..c, &mut par, 0)?;
            for (i, p) in par.iter().enumerate() {
                self.mwrite(
                    self.shard_member(row, (d + i) as u32),
                    &p[..len],
                    base + (c0 as u64) * BS,
                )?;
            }
        }
        st.dirty = false;
        Ok(())
    }

    /// Flush every member up. When every one of them can flush beside the
    /// others (`Media::flush_overlaps`: files and devices), all at once,
    /// one thread each, so a FLUSH waits for the slowest member's
    /// `fdatasync`, not for their sum; else (the simulator's members, whose
    /// operations are numbered in one order that a seed must repeat) one
    /// after another in member order, stopping at the first error the
    /// parity cannot cover. Either way the errors are then taken in member
    /// order: each failing member is taken out of use (`fail`), and the
    /// flush fails only when more members are down than the parity covers
    /// (the rest's flush counts: the set's data is on them).
    fn flush_members(&self) -> io::Result<()> {
        let up: Vec<(u32, &Arc<dyn Media>)> = (0..self.layout.members)
            .filter_map(|m| self.up(m).map(|media| (m, media)))
            .collect();
        // MUTANT: member-flushes-serial s|up.len() < 2 |up.len() > 0 |
        if up.len() < 2 || !up.iter().all(|(_, media)| media.flush_overlaps()) {
            for (m, media) in up {
                if let Err(e) = media.flush() {
                    self.fail(m, e)?;
                }
            }
            return Ok(());
        }
        let results = self.flush_together(&up);
        let mut first = None;
        for ((m, _), r) in up.iter().zip(results) {
            if let Err(e) = r {
                // MUTANT: parallel-flush-error-dropped s|self.fail(*m, e)|Ok::<(), io::Error>(())|
                if let Err(e) = self.fail(*m, e) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Make every completed write durable. Rows a write left partial get
    /// their running parity: first a flush of every member (their data is
    /// durable before any tag names it), then the parity with its tag into
    /// the row's scratch lane (or, with no lane free, in place, counted),
    /// then a second flush. Rows completed since the last flush began have
    /// their tags voided after the first flush (their parity in place is
    /// durable then), before the second: older tags first, a flush, then
    /// each row's newest (`void_oldest_first`).
    pub fn flush(&self) -> io::Result<()> {
        // Closed segments' last rows whose blocks are all in: finished
        // first, so that this flush makes their parity in place durable
        // and voids their tags before it returns (it may acknowledge their
        // last blocks, which their tags do not cover)
        // MUTANT: closed-rows-unfinished-at-flush s|self.finish_closed_rows()?;|();|
        self.finish_closed_rows()?;
        let (dirty, retiring, retired, dead) = {
            let mut t = self.rows.lock();
            (
                std::mem::take(&mut t.dirty)
                    .into_iter()
                    .collect::<Vec<u64>>(),
                std::mem::take(&mut t.retiring),
                std::mem::take(&mut t.retired_rows),
                std::mem::take(&mut t.dead_places),
            )
        };
        // MUTANT: scratch-before-data-durable
        self.flush_members()?;
        // Rows completed since the last flush began: their parity in place
        // is durable now, so their scratch tags go (a degraded read of a
        // tagged row rebuilds a block no tag covers as zeros, see
        // `reconstruct`: their blocks written after the last tag are
        // acknowledged by this flush and must be rebuilt from the parity
        // in place). So do the tags of segments wiped since the last flush
        // began (`dead`): their tombstones are durable now, so recovery no
        // longer reads the old chunks those tags protect.
        let voids: Vec<Owned> = {
            let mut t = self.rows.lock();
            let places: Vec<Owned> = t
                .place_owner
                .iter()
                .filter(|(_, (r, _))| retired.contains(r))
                .map(|(p, o)| (*p, Some(*o)))
                .collect();
            for (p, _) in &places {
                t.place_owner.remove(p);
            }
            places
                .into_iter()
                .chain(dead.into_iter().map(|p| (p, None)))
                .collect()
        };
        // MUTANT: completed-row-tags-kept s|self.void_oldest_first(&voids)?;|let _ = &voids;|
        self.void_oldest_first(&voids)?;
        let l = self.layout;
        let protect = l.parity > 0 && (l.write_unit() / BS) as usize <= scratch::MAX_ROW_BLOCKS;
        let mut wrote = !voids.is_empty();
        let mut tombs = Vec::new();
        for row in dirty {
            let _fence = self.fenced(row * l.write_unit(), BLOCK_BYTES);
            let Some(state) = self.rows.lock().get(row) else {
                continue;
            };
            let mut st = state.lock();
            if !st.dirty {
                continue;
            }
            if st.tomb_only && protect {
                // (after the user rows: `write_tombstones`)
                tombs.push(row);
                continue;
            }
            let lane = if protect {
                self.rows.lock().lane_for(row)
            } else {
                None
            };
            match lane {
                // MUTANT: partial-row-parity-skipped s|self.write_scratch(row, &mut st, lane)?|st.dirty = false|
                Some(lane) => self.write_scratch(row, &mut st, lane)?,
                None => {
                    if !st.tomb_only {
                        self.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                    }
                    self.write_parity(row, &mut st, false)?;
                }
            }
            wrote = true;
        }
        if wrote {
            self.flush_members()?;
        }
        self.write_tombstones(&tombs)?;
        {
            let mut t = self.rows.lock();
            t.free_lanes.extend(retiring);
            t.evict();
        }
        // a member that failed (this flush's, or any op's since the last
        // record) is stale on the others before anything is acknowledged
        // MUTANT: member-failure-unrecorded s|self.record_failures()|Ok::<(), io::Error>(())|
        self.record_failures()
    }

    /// The parity of rows holding only a segment's tombstone (`flush`,
    /// after the member flush that made the tombstones durable), in batches
    /// of as many rows as lanes are free: each row's running parity with
    /// its tag into a lane (the tombstone, the rest zero), a member flush,
    /// the row's padding and parity in place, a member flush, the tags
    /// voided, a member flush, the lanes free again. So a tombstone row
    /// holds no lane past the flush (a reuse barrier wiping many segments
    /// does not take them from user rows), and at every power cut a
    /// degraded read of its block 0 rebuilds the old life's block whole (no
    /// valid tag yet, parity in place untouched), the tombstone (from the
    /// tag, whatever the writes in place left), or, once those are durable
    /// and the tag voided, the tombstone from the parity in place.
    /// Written in place directly, a cut tore the padding and parity into a
    /// mix of the old header's sectors (its seq intact) and garbage that
    /// recovery took for a durable header failing its check, and refused
    /// the mount (docs/stripes.md §0, finding 11). With no lane free at
    /// all (a concurrent flush holds them) the rest goes in place, counted
    /// as unprotected.
    fn write_tombstones(&self, rows: &[u64]) -> io::Result<()> {
        let l = self.layout;
        let mut rest = rows;
        while !rest.is_empty() {
            let lanes: Vec<u32> = {
                let mut t = self.rows.lock();
                let n = rest.len().min(t.free_lanes.len());
                let at = t.free_lanes.len() - n;
                t.free_lanes.split_off(at)
            };
            // MUTANT: tomb-parity-in-place s|if lanes.is_empty() {|if true {|
            if lanes.is_empty() {
                for &row in rest {
                    let _fence = self.fenced(row * l.write_unit(), BLOCK_BYTES);
                    if let Some(state) = self.rows.lock().get(row) {
                        self.counters.unprotected.fetch_add(1, Ordering::Relaxed);
                        self.write_parity(row, &mut state.lock(), false)?;
                    }
                }
                return self.flush_members();
            }
            let (batch, later) = rest.split_at(lanes.len());
            rest = later;
            let states: Vec<(u64, Arc<Mutex<rows::RowState>>, u32)> = batch
                .iter()
                .zip(&lanes)
                .filter_map(|(&row, &lane)| self.rows.lock().get(row).map(|s| (row, s, lane)))
                .collect();
            for (row, state, lane) in &states {
                let _fence = self.fenced(row * l.write_unit(), BLOCK_BYTES);
                self.write_scratch(*row, &mut state.lock(), *lane)?;
            }
            self.flush_members()?;
            for (row, state, _) in &states {
                let _fence = self.fenced(row * l.write_unit(), BLOCK_BYTES);
                self.write_parity(*row, &mut state.lock(), false)?;
            }
            self.flush_members()?;
            let places: Vec<(u32, u32, u32)> = {
                let mut t = self.rows.lock();
                let places: Vec<(u32, u32, u32)> = t
                    .place_owner
                    .iter()
                    .filter(|(p, (r, _))| lanes.contains(&p.1) && batch.contains(r))
                    .map(|(p, _)| *p)
                    .collect();
                for p in &places {
                    t.place_owner.remove(p);
                }
                places
            };
            let mut places = places;
            places.sort_unstable();
            self.void_places(&places)?;
            self.flush_members()?;
            self.rows.lock().free_lanes.extend(lanes);
        }
        Ok(())
    }

    /// The engine closed segment `seg` with its first `fill` blocks
    /// written or on their way (`SegmentStore::closed`; memory only: called
    /// under the engine lock). The segment's last row, when `fill` ends
    /// inside it, will get no more blocks: it is finished (blocks past
    /// `fill` padded with zeros, its parity in place: `write_parity` of
    /// every column) by the write that brings its last block below `fill`
    /// (`fill_row`), or, when they are all in already, by the next flush
    /// (`finish_closed_rows`), and its lane retires as a full row's does.
    /// Without this such a row kept its scratch lane until the segment's
    /// wipe, and a volume closing more than `LANES` segments between
    /// wipes flushed partial rows unprotected (docs/stripes.md §0,
    /// finding 8).
    pub fn segment_closed(&self, seg: u32, fill: u32) {
        let l = self.layout;
        if l.parity == 0 || fill == 0 {
            return;
        }
        let rb = l.write_unit() / BS;
        let last = seg as u64 * (self.shape.segment_bytes / BS) + fill as u64 - 1;
        let row = last / rb;
        let end = (last + 1 - row * rb) as usize;
        if end as u64 == rb {
            return;
        }
        let mut t = self.rows.lock();
        t.closing.insert(row, end);
        if t.get(row).is_some() {
            t.finishing.insert(row);
        }
    }

    /// Finish the closing rows (`segment_closed`) whose blocks below their
    /// segment's fill are all in: pad, parity in place, complete (their
    /// lanes retire, their tags are voided once that parity is durable).
    fn finish_closed_rows(&self) -> io::Result<()> {
        let rows = std::mem::take(&mut self.rows.lock().finishing);
        for row in rows {
            let _fence = self.fenced(row * self.layout.write_unit(), BLOCK_BYTES);
            let Some(state) = self.rows.lock().get(row) else {
                continue;
            };
            let mut st = state.lock();
            let end = {
                let t = self.rows.lock();
                if !t.is_current(row, &state) {
                    continue;
                }
                t.closing.get(&row).copied()
            };
            if end.is_some() && st.done(end) {
                self.write_parity(row, &mut st, true)?;
                self.rows.lock().complete(row);
            }
        }
        Ok(())
    }

    /// Write `st`'s running parity (every column; blocks not written count
    /// as zero) with its tag into the place of `lane` it did not use last.
    fn write_scratch(&self, row: u64, st: &mut rows::RowState, lane: u32) -> io::Result<()> {
        let l = self.layout;
        let u = l.unit as usize;
        let ub = u / BLOCK_BYTES;
        let d = l.data_members() as usize;
        let mut places: Vec<bufs::PoolBuf> = (0..l.parity).map(|_| self.bufs.take()).collect();
        // MUTANT: scratch-copy-column-stale s|0..ub,|0..ub - 1,|
        encode_columns(st, d, ub, 0..ub, &mut places, BLOCK_BYTES)?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let covered = st.covered();
        let set_uuid = self.members[0].ident.set_uuid;
        let at = scratch::place_offset(self.scratch_base(), l.unit, lane, st.place);
        for (i, buf) in places.iter_mut().enumerate() {
            scratch::Tag {
                set_uuid,
                row,
                seq,
                which: i as u8,
                covered: covered.clone(),
            }
            .seal(buf);
            let m = self.shard_member(row, (d + i) as u32);
            self.mwrite(m, &buf[..BLOCK_BYTES + u], at)?;
            self.rows
                .lock()
                .place_owner
                .insert((m, lane, st.place), (row, seq));
        }
        st.place ^= 1;
        st.dirty = false;
        Ok(())
    }

    /// Read every scratch place of the members present; the valid tags are
    /// what degraded reads of the rows partial at the last shutdown use
    /// until `resync`. Their lanes stay taken. Each member's area is read
    /// in a few large reads (whole places, up to `SCRATCH_READ_BYTES`):
    /// one read per place cost a mount 32 small reads per member, 0.3 s
    /// of a `replace` on members with a few ms of latency each
    /// (docs/stripes.md §0, fifth pass). The members are read one after
    /// another, on this thread, so the simulator's op order stays the
    /// seed's. A read that fails fails its member (`mread`), as one
    /// place's did, and its places after it are not read.
    pub fn load_scratch(&self) -> io::Result<()> {
        self.load_scratch_in(SCRATCH_READ_BYTES)
    }

    /// `load_scratch` reading at most `read_bytes` at once (whole places,
    /// at least one).
    fn load_scratch_in(&self, read_bytes: usize) -> io::Result<()> {
        let l = self.layout;
        let set_uuid = self.members[0].ident.set_uuid;
        let place_bytes = BLOCK_BYTES + l.unit as usize;
        let places = scratch::LANES as usize * 2;
        let per = (read_bytes / place_bytes).clamp(1, places);
        let mut buf = AlignedBuf::new(per * place_bytes);
        let mut t = self.rows.lock();
        let mut max_seq = 0;
        for m in 0..l.members {
            for first in (0..places).step_by(per) {
                let n = per.min(places - first);
                let b = &mut buf[..n * place_bytes];
                let (lane, place) = (first as u32 / 2, first as u32 % 2);
                let at = scratch::place_offset(self.scratch_base(), l.unit, lane, place);
                if self.mread(m, b, at).is_err() {
                    break; // the member is down, or failed now
                }
                for (i, p) in b.chunks(place_bytes).enumerate() {
                    let k = (first + i) as u32;
                    // MUTANT: scratch-read-place-misnamed s|(k / 2, k % 2)|(k / 2, 0)|
                    let (lane, place) = (k / 2, k % 2);
                    let Some(tag) = scratch::Tag::open(p, &set_uuid) else {
                        continue;
                    };
                    max_seq = max_seq.max(tag.seq);
                    t.place_owner.insert((m, lane, place), (tag.row, tag.seq));
                    t.mount_tags.entry(tag.row).or_default().push(MountTag {
                        seq: tag.seq,
                        which: tag.which,
                        member: m,
                        lane,
                        place,
                        covered: tag.covered,
                    });
                }
            }
        }
        let taken: HashSet<u32> = t.place_owner.keys().map(|k| k.1).collect();
        t.free_lanes.retain(|l| !taken.contains(l));
        self.seq.store(max_seq + 1, Ordering::Relaxed);
        Ok(())
    }

    /// With every member present: make the parity of every row a scratch tag
    /// names, and of every row holding a block of `blocks` (physical
    /// extents of the segment area: the chunks recovery found past the
    /// checkpoint), agree with its data in place (read the row, write its
    /// parity), flush, void the tags, flush; every lane is free again.
    /// Degraded: nothing (the tags stay, reads need them). Not for
    /// read-only mounts.
    ///
    /// A set whose one member down is the member being rebuilt (up, taking
    /// every write) is resynced too (docs/stripes.md §0, finding 7): each
    /// row's data is read as any read gives it (the new member's unit at
    /// or past the rebuild's cursor rebuilt from the rest of the row, as
    /// the walk will rebuild it from the parity written here), its parity
    /// written to its parity members, the new one among them. Without it
    /// a power cut during an online rebuild left a chunk no FLUSH
    /// acknowledged, whole on the members, adopted by the resumed mount
    /// while the tags of its row (which do not cover it) stayed valid, or
    /// its row's parity in place stale; after the rebuild, with another
    /// member lost, its blocks were rebuilt as zeros or from the stale
    /// parity (EIO).
    ///
    /// Why the untagged rows (docs/stripes.md §0, finding 4): a crash can
    /// leave a chunk no FLUSH acknowledged whole on the members while its
    /// row's new parity in place was lost (the write hole, for data never
    /// acknowledged). A mount with every member present reads it right,
    /// replays it and its checkpoint adopts it: from then on it is the
    /// volume's data, and a member lost later rebuilt it from the stale
    /// parity (EIO; DST seed 2^20+1 after two cut recovery mounts).
    ///
    /// `keep`: rows of `blocks` to leave as they are (the volume found a
    /// block in them failing its check that it could not heal: parity
    /// recomputed from it would bake it in). Rows tags name are resynced
    /// whatever `keep` says.
    pub fn resync(&self, blocks: &[(u64, u32)], keep: &[u64]) -> io::Result<()> {
        let l = self.layout;
        let tagged: std::collections::BTreeSet<u64> =
            self.rows.lock().mount_tags.keys().copied().collect();
        let mut rows = self.replayed_rows(blocks);
        rows.retain(|r| !keep.contains(r));
        rows.extend(tagged);
        // the member being rebuilt, when it is the only one down, counts
        // as present (below)
        let rebuilding = self.rebuilding_alone().is_some() as usize;
        // MUTANT: rebuilding-mount-not-resynced s|self.down_count() > rebuilding|self.down_count() > 0|
        if self.down_count() > rebuilding
            || (self.rows.lock().place_owner.is_empty() && rows.is_empty())
        {
            return Ok(());
        }
        for row in rows {
            let par = self.parity_of_row(row)?;
            let base = l.row_offset(row).expect("row inside the set");
            for (i, p) in par.iter().enumerate() {
                self.mwrite(self.shard_member(row, l.data_members() + i as u32), p, base)?;
            }
        }
        self.flush_members()?;
        let places: Vec<Owned> = {
            let t = self.rows.lock();
            t.place_owner
                .iter()
                .map(|(p, o)| (*p, Some(*o)))
                .chain(t.dead_places.iter().map(|p| (*p, None)))
                .collect()
        };
        self.void_oldest_first(&places)?;
        self.flush_members()?;
        let mut t = self.rows.lock();
        t.place_owner.clear();
        t.dead_places.clear();
        t.retiring.clear();
        t.mount_tags.clear();
        t.free_lanes = (0..scratch::LANES).rev().collect();
        Ok(())
    }

    /// Void the scratch places `places` of rows whose tags are moot (their
    /// parity in place is durable, or their segment's life ended): every
    /// place but the newest tag of its row first (and places of dead
    /// segments, `None`), a member flush, then the newest. A row's valid
    /// tags are thus always all of them, its newest alone, or none, never
    /// an older one alone: a degraded read takes a block no valid tag covers
    /// for one no FLUSH acknowledged (`reconstruct`: zeros), and the older
    /// tag of a completed row does not cover blocks its newer one and the
    /// completing writes made acknowledged (docs/stripes.md §0, finding 6:
    /// the voids in hash order lost a flushed block on a degraded set).
    fn void_oldest_first(&self, places: &[Owned]) -> io::Result<()> {
        let mut newest: std::collections::HashMap<u64, u64> = Default::default();
        for (_, o) in places {
            if let Some((row, seq)) = *o {
                let n = newest.entry(row).or_insert(seq);
                *n = (*n).max(seq);
            }
        }
        let is_newest = |o: &Option<(u64, u64)>| o.is_some_and(|(row, seq)| newest[&row] == seq);
        let older = |o: &Option<(u64, u64)>| !is_newest(o);
        // in place order, not the order of the `HashMap`s the places come
        // from: one run writes the same member ops in the same order (the
        // simulator fails, cuts and replays by op number; finding 9)
        let mut places = places.to_vec();
        // MUTANT: scratch-voids-in-hash-order s|places.sort_unstable();|();|
        places.sort_unstable();
        let first: Vec<(u32, u32, u32)> = places
            .iter()
            // MUTANT: tag-voids-unordered s|older(o)|true|
            .filter(|(_, o)| older(o))
            .map(|(p, _)| *p)
            .collect();
        let last: Vec<(u32, u32, u32)> = places
            .iter()
            .filter(|(p, o)| is_newest(o) && !first.contains(p))
            .map(|(p, _)| *p)
            .collect();
        self.void_places(&first)?;
        if !first.is_empty() && !last.is_empty() {
            self.flush_members()?;
        }
        self.void_places(&last)
    }

    /// The rows holding a block of `blocks` (physical extents of the
    /// segment area: the chunks recovery found past the checkpoint), which
    /// a writable mount with every member present resyncs (`resync`).
    pub fn replayed_rows(&self, blocks: &[(u64, u32)]) -> std::collections::BTreeSet<u64> {
        let area_blocks = self.shape.area_bytes() / BS;
        let row_blocks = self.layout.write_unit() / BS;
        let mut rows = std::collections::BTreeSet::new();
        // MUTANT: replayed-rows-not-resynced s|for &(p, n) in blocks {|for &(p, n) in &blocks[..0] {|
        for &(p, n) in blocks {
            let end = p.saturating_add(n as u64).min(area_blocks);
            if p < end {
                rows.extend(p / row_blocks..=(end - 1) / row_blocks);
            }
        }
        rows
    }

    fn void_places(&self, places: &[(u32, u32, u32)]) -> io::Result<()> {
        let zero = AlignedBuf::new(BLOCK_BYTES);
        for &(m, lane, place) in places {
            let at = scratch::place_offset(self.scratch_base(), self.layout.unit, lane, place);
            self.mwrite(m, &zero, at)?;
        }
        Ok(())
    }

    /// A segment's life ends (its tombstone is about to be written): what
    /// memory holds of its rows is dead. The scratch tags of its rows are
    /// voided by the next flush, not now: until the tombstone is durable,
    /// recovery reads the segment's chunks (some durable, below the
    /// watermark), and a block of a partial row that only a tag protects
    /// (its parity in place is a previous life's) is rebuilt from the tag.
    /// Voided first, a power cut before the tombstone left a durable block
    /// that a lost member rebuilt wrong (DST seed 2^20+8, docs/stripes.md
    /// §0 finding 5). Left until the flush, a tag speaks only for the old
    /// life's blocks: a new-life block it covers was written after the
    /// wipe, and the flush that acknowledges it voids the tag first.
    pub fn forget_segment(&self, seg: u32) -> io::Result<()> {
        let rps = self.layout.rows_per_segment;
        let first = seg as u64 * rps;
        // MUTANT: dead-tags-voided-before-tombstone s|self.rows.lock().forget_range(first, first + rps);|let places = { let mut t = self.rows.lock(); t.forget_range(first, first + rps); std::mem::take(&mut t.dead_places) }; self.void_places(&places)?;|
        self.rows.lock().forget_range(first, first + rps);
        Ok(())
    }

    /// Read `buf.len()` bytes at byte `off` of the segment area: from the
    /// members holding them, or, for a piece on a member that is down or
    /// fails, rebuilt from the rest of its row.
    pub fn read_area(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_area(off, buf.len())?;
        let l = self.layout;
        let row_bytes = l.write_unit();
        let mut pos = 0usize;
        while pos < buf.len() {
            let a = off + pos as u64;
            let row = a / row_bytes;
            let in_row = a % row_bytes;
            let d = (in_row / l.unit) as u32;
            let col = in_row % l.unit;
            let take = ((l.unit - col) as usize).min(buf.len() - pos);
            let piece = &mut buf[pos..pos + take];
            let at = l.row_offset(row).expect("row inside the set") + col;
            if self.mread(l.data_member(row, d), piece, at).is_err() {
                if l.parity == 0 {
                    return Err(err(
                        io::ErrorKind::Other,
                        format!(
                            "stripe set (RAID-0): member {} ({}) cannot be read and there is no parity",
                            l.data_member(row, d),
                            self.members[l.data_member(row, d) as usize].name
                        ),
                    ));
                }
                self.reconstruct(row, d, col, piece)?;
            }
            pos += take;
        }
        Ok(())
    }

    /// Rebuild `out.len()` bytes of data unit `d` of `row` from column `col`:
    /// from the row's state when memory holds it (a row being filled, whose
    /// parity may wait for the next flush), else from the same byte range of
    /// the row's other members.
    fn reconstruct(&self, row: u64, d: u32, col: u64, out: &mut [u8]) -> io::Result<()> {
        let l = self.layout;
        self.counters.reconstructed.fetch_add(1, Ordering::Relaxed);
        let state = self.rows.lock().get(row);
        if let Some(state) = state {
            let st = state.lock();
            let ub = (l.unit / BS) as usize;
            let first = d as usize * ub + (col / BS) as usize;
            out.copy_from_slice(&st.gather(first, out.len() / BLOCK_BYTES));
            return Ok(());
        }
        let tags = self.rows.lock().mount_tags.get(&row).cloned();
        if let Some(tags) = tags {
            for (i, blk) in out.chunks_mut(BLOCK_BYTES).enumerate() {
                let c = col / BS + i as u64;
                if !self.reconstruct_tagged(row, d, c, blk, &tags)? {
                    // No valid tag covers the block (or none can rebuild
                    // it): it was written after the row's last tag and no
                    // FLUSH acknowledged it (the flush that would voids the
                    // row's tags first), and the parity in place may be
                    // older than it,
                    // even a previous life's. Rebuilt from that parity it
                    // would be an XOR of stale blocks, and CRC32C is
                    // linear: three headers of one segment XOR to a header
                    // whose CRC verifies (found by the DST: seq 110 ^ 111 ^
                    // 136 = 137). Zeros, which no check accepts.
                    // MUTANT: uncovered-block-from-stale-parity s|blk.fill(0);|self.reconstruct_in_place(row, d, c * BS, blk)?;|
                    blk.fill(0);
                }
            }
            return Ok(());
        }
        self.reconstruct_in_place(row, d, col, out)
    }

    /// Rebuild block column `c` of data unit `d` from the newest scratch
    /// copy found at mount that covers it (blocks it does not cover count as
    /// zero); false when none does (or none can: too many shards down).
    fn reconstruct_tagged(
        &self,
        row: u64,
        d: u32,
        c: u64,
        out: &mut [u8],
        tags: &[MountTag],
    ) -> io::Result<bool> {
        let l = self.layout;
        let ub = (l.unit / BS) as usize;
        let dn = l.data_members() as usize;
        let me = d as usize * ub + c as usize;
        let mut seqs: Vec<u64> = tags
            .iter()
            .filter(|t| t.covered.get(me) == Some(&true))
            .map(|t| t.seq)
            .collect();
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.dedup();
        let base = l.row_offset(row).expect("row inside the set");
        for seq in seqs {
            let covered = &tags.iter().find(|t| t.seq == seq).expect("a tag").covered;
            let mut shards: Vec<AlignedBuf> = (0..l.members)
                .map(|_| AlignedBuf::new(BLOCK_BYTES))
                .collect();
            let mut lost = vec![d as usize];
            for (i, s) in shards.iter_mut().enumerate() {
                if i == d as usize {
                    continue;
                }
                let ok = if i < dn {
                    // a block the copy does not cover counts as zero
                    !covered[i * ub + c as usize]
                        || self
                            .mread(l.data_member(row, i as u32), s, base + c * BS)
                            .is_ok()
                } else {
                    let which = (i - dn) as u8;
                    let m = self.shard_member(row, i as u32);
                    tags.iter()
                        .find(|t| t.seq == seq && t.which == which && t.member == m)
                        .is_some_and(|t| {
                            let at =
                                scratch::place_offset(self.scratch_base(), l.unit, t.lane, t.place);
                            self.mread(m, s, at + BS + c * BS).is_ok()
                        })
                };
                if !ok {
                    lost.push(i);
                }
            }
            if lost.len() > l.parity as usize {
                continue;
            }
            let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
            parity::reconstruct(&mut refs, dn, &lost).map_err(io::Error::other)?;
            out.copy_from_slice(&shards[d as usize]);
            return Ok(true);
        }
        Ok(false)
    }

    /// Rebuild from the row's own parity units.
    fn reconstruct_in_place(&self, row: u64, d: u32, col: u64, out: &mut [u8]) -> io::Result<()> {
        let l = self.layout;
        let n = l.members as usize;
        let at = l.row_offset(row).expect("row inside the set") + col;
        let mut shards: Vec<AlignedBuf> = (0..n).map(|_| AlignedBuf::new(out.len())).collect();
        let mut lost = vec![d as usize];
        for (i, s) in shards.iter_mut().enumerate() {
            if i != d as usize && self.mread(self.shard_member(row, i as u32), s, at).is_err() {
                lost.push(i);
            }
        }
        if lost.len() > l.parity as usize {
            let names: Vec<String> = lost
                .iter()
                .map(|&i| {
                    let m = self.shard_member(row, i as u32);
                    format!("{m} ({})", self.members[m as usize].name)
                })
                .collect();
            return Err(err(
                io::ErrorKind::Other,
                format!(
                    "stripe set: row {row} cannot be rebuilt: members {} are down, parity {}",
                    names.join(", "),
                    l.parity
                ),
            ));
        }
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(|s| &mut s[..]).collect();
        parity::reconstruct(&mut refs, l.data_members() as usize, &lost)
            .map_err(io::Error::other)?;
        out.copy_from_slice(&shards[d as usize]);
        Ok(())
    }
}

/// The parity of `data` (one slice per data unit, `range.len()` bytes each)
/// into `range` of each of `par` (P, then Q when there are two).
fn encode_into(
    data: &[&[u8]],
    par: &mut [bufs::PoolBuf],
    range: std::ops::Range<usize>,
) -> io::Result<()> {
    match par {
        [p] => parity::encode_p(data, &mut p[range]),
        [p, q] => parity::encode_pq(data, &mut p[range.clone()], &mut q[range]),
        _ => parity::encode(data, &mut []),
    }
    .map_err(io::Error::other)
}

/// The parity of the row `st` holds (`d` data units of `ub` blocks; a block
/// not written, or only padded, counts as zero) at block columns `cols`,
/// each column's into `par` from byte `at` on, one block after another:
/// from the blocks as memory holds them, nothing gathered or zeroed.
fn encode_columns(
    st: &rows::RowState,
    d: usize,
    ub: usize,
    cols: std::ops::Range<usize>,
    par: &mut [bufs::PoolBuf],
    at: usize,
) -> io::Result<()> {
    static ZERO: [u8; BLOCK_BYTES] = [0; BLOCK_BYTES];
    let mut refs: Vec<&[u8]> = Vec::with_capacity(d);
    for (k, c) in cols.enumerate() {
        refs.clear();
        refs.extend((0..d).map(|u| st.block(u * ub + c).unwrap_or(&ZERO)));
        let o = at + k * BLOCK_BYTES;
        encode_into(&refs, par, o..o + BLOCK_BYTES)?;
    }
    Ok(())
}

impl StripeSet {
    /// Flush each of `members` at once: the first on this thread, each
    /// other on its slot's flushing thread (started on first use and kept:
    /// on ext4 here, `fdatasync`s of five files from threads kept were
    /// several times quicker than from a new thread each per flush, which
    /// the first version did; docs/benchmarks.md, last section); every
    /// result in the order given. A thread that cannot be started, or is
    /// gone, is replaced by a flush on this thread.
    fn flush_together(&self, members: &[(u32, &Arc<dyn Media>)]) -> Vec<io::Result<()>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut sent = Vec::new();
        let mut out: Vec<Option<io::Result<()>>> = (0..members.len()).map(|_| None).collect();
        for (i, &(m, media)) in members.iter().enumerate().skip(1) {
            match self.flusher(m) {
                Some(f) if f.send((media.clone(), m, tx.clone())).is_ok() => sent.push(i),
                _ => out[i] = Some(media.flush()),
            }
        }
        drop(tx);
        out[0] = Some(members[0].1.flush());
        for _ in 0..sent.len() {
            let Ok((m, r)) = rx.recv() else {
                break;
            };
            if let Some(i) = members.iter().position(|&(x, _)| x == m) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::Error::other("a member flush thread ended"))))
            .collect()
    }

    /// Slot `m`'s flushing thread, started now if it is not yet; None when
    /// it cannot be.
    fn flusher(&self, m: u32) -> Option<std::sync::mpsc::Sender<FlushJob>> {
        let mut f = self.flushers.lock();
        if f.len() <= m as usize {
            f.resize(m as usize + 1, None);
        }
        if f[m as usize].is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<FlushJob>();
            std::thread::Builder::new()
                .name(format!("sluice-flush-{m}"))
                .spawn(move || {
                    for (media, m, reply) in rx {
                        let r = media.flush();
                        // the member's handle goes before the answer: once
                        // the caller has every answer, no thread holds a
                        // member (its lock), so a close then a reopen finds
                        // it free
                        drop(media);
                        let _ = reply.send((m, r));
                    }
                })
                .ok()?;
            f[m as usize] = Some(tx);
        }
        f[m as usize].clone()
    }
}

#[cfg(test)]
mod tests;
