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

pub mod media;
pub mod meta;
pub mod open;
mod rows;
pub mod store;

use crate::format::stripe::{hex, StripeIdentity};
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, Media};
use crate::parity;
use crate::stripe::StripeLayout;
use parking_lot::Mutex;
use rows::RowTable;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

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

#[derive(Default)]
struct Counters {
    member_reads: AtomicU64,
    member_writes: AtomicU64,
    reconstructed: AtomicU64,
    rows_loaded: AtomicU64,
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
}

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
            rows: Mutex::new(RowTable::default()),
            counters: Counters::default(),
            formatting: AtomicBool::new(false),
        };
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

    fn down_count(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.media.is_none() || m.failed.load(Ordering::Acquire))
            .count()
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
        self.check_area(off, buf.len())?;
        let l = self.layout;
        let row_bytes = l.write_unit();
        let mut pos = 0usize;
        while pos < buf.len() {
            let a = off + pos as u64;
            let row = a / row_bytes;
            let in_row = a % row_bytes;
            let take = ((row_bytes - in_row) as usize).min(buf.len() - pos);
            self.write_row(row, in_row, &buf[pos..pos + take])?;
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

    fn write_row(&self, row: u64, in_row: u64, data: &[u8]) -> io::Result<()> {
        let l = self.layout;
        if l.parity == 0 || self.formatting.load(Ordering::Acquire) {
            return self.write_data(row, in_row, data);
        }
        if in_row == 0 && data.len() as u64 == l.write_unit() && self.rows.lock().forget(row) {
            // A whole row no state knows: data, then parity from it.
            self.write_data(row, 0, data)?;
            let u = l.unit as usize;
            let units: Vec<&[u8]> = data.chunks(u).collect();
            let mut par: Vec<AlignedBuf> = (0..l.parity).map(|_| AlignedBuf::new(u)).collect();
            let mut refs: Vec<&mut [u8]> = par.iter_mut().map(|p| &mut p[..]).collect();
            parity::encode(&units, &mut refs).map_err(io::Error::other)?;
            let base = l.row_offset(row).expect("row inside the set");
            for (i, p) in par.iter().enumerate() {
                self.mwrite(self.shard_member(row, l.data_members() + i as u32), p, base)?;
            }
            return Ok(());
        }
        loop {
            let state = self.row_state(row)?;
            if self.fill_row(row, &state, in_row, data)? {
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
    ) -> io::Result<bool> {
        let mut st = state.lock();
        if !self.rows.lock().is_current(row, state) {
            return Ok(false);
        }
        st.put(in_row, data);
        self.write_data(row, in_row, data)?;
        if st.full() {
            // MUTANT: full-row-parity-skipped s|self.write_parity(row, &mut st, false)?;|st.dirty = false;|
            self.write_parity(row, &mut st, false)?;
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
            let units: Vec<Vec<u8>> = (0..d).map(|u| st.gather(u * ub + c0, c - c0)).collect();
            let refs: Vec<&[u8]> = units.iter().map(|v| v.as_slice()).collect();
            let mut par: Vec<AlignedBuf> = (0..l.parity).map(|_| AlignedBuf::new(len)).collect();
            let mut prefs: Vec<&mut [u8]> = par.iter_mut().map(|p| &mut p[..]).collect();
            parity::encode(&refs, &mut prefs).map_err(io::Error::other)?;
            for (i, p) in par.iter().enumerate() {
                self.mwrite(
                    self.shard_member(row, (d + i) as u32),
                    p,
                    base + (c0 as u64) * BS,
                )?;
            }
        }
        st.dirty = false;
        Ok(())
    }

    /// Make every completed write durable: the parity of every row a write
    /// left partial, then a flush of every member.
    pub fn flush(&self) -> io::Result<()> {
        let dirty: Vec<u64> = std::mem::take(&mut self.rows.lock().dirty)
            .into_iter()
            .collect();
        for row in dirty {
            let Some(state) = self.rows.lock().get(row) else {
                continue;
            };
            let mut st = state.lock();
            if st.dirty {
                // MUTANT: partial-row-parity-skipped s|self.write_parity(row, &mut st, false)?;|st.dirty = false;|
                self.write_parity(row, &mut st, false)?;
            }
        }
        for m in 0..self.layout.members {
            if let Some(media) = self.up(m) {
                if let Err(e) = media.flush() {
                    self.fail(m, e)?;
                }
            }
        }
        self.rows.lock().evict();
        Ok(())
    }

    /// A segment's life ends (its tombstone is about to be written): what
    /// memory holds of its rows is dead.
    pub fn forget_segment(&self, seg: u32) {
        let rps = self.layout.rows_per_segment;
        let first = seg as u64 * rps;
        self.rows.lock().forget_range(first, first + rps);
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

#[cfg(test)]
mod tests;
