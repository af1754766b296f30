//! Rebuilding a member onto a replacement (issue 20 item 5, docs/stripes.md
//! §6). `attach` puts a blank device into a missing slot: a rebuild record
//! (`format::stripe::RebuildRecord`, blocks 2 and 3 of the member's own tail area, alternating)
//! first, then the mirrored metadata with the slot's identity. Assembly
//! (`open`) finds the record and marks the slot *rebuilding*: the member
//! takes every write, but is read only below `rebuilt_rows`; everything
//! else on it is served degraded (rebuilt from the rest of the row). The
//! volume (`Volume::rebuild_member`) walks the segments from the record's
//! cursor, has the live ones rebuilt here (`rebuild_segment`) and only marks
//! the free ones, and persists the cursor (`mark_rebuilt`) after each.
//!
//! Invariant: the record's cursor never passes a segment whose pieces on the
//! new member are not written *and flushed*: `rebuild_segment` flushes the
//! member before it returns, `mark_rebuilt` writes the record after that and
//! flushes it before raising `rebuilt_rows`. So after a power cut the
//! record names only durable pieces, and a resumed rebuild starts where it
//! stops. The record is written before any metadata on attach, so a member
//! that carries the set's identity but was never rebuilt is never taken as
//! whole; it is voided only after the last segment.

use super::{StripeSet, BS};
use crate::format::stripe::{RebuildRecord, StripeIdentity, REBUILD_RECORD_BLOCK};
use crate::format::superblock::TAIL_AREA_BYTES;
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, Media};
use crate::parity;
use crate::stripe::Role;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bytes of one member a rebuild batch reads at most (`rebuild_segments`):
/// 8 MiB, 8 segments of a 4+1 set at the default unit; the buffers of a
/// batch then hold `members + 1` times that.
pub const REBUILD_BATCH_BYTES: u64 = 8 << 20;

/// Bytes of one member a bulk rebuild reads, rebuilds and writes as one
/// piece of its pipeline (`rebuild_rows_bulk`) at most: 1 MiB, whole rows
/// (and at most a quarter of the run).
pub const REBUILD_PIPE_BYTES: u64 = 1 << 20;

/// Buffers a rebuild reuses from batch to batch: a span per member, the
/// new member's span, and one unit per parity unit for other pieces
/// lost. (Fresh buffers for every segment spent more time on page faults
/// and zeroing than the copy itself: the first profile, docs/stripes.md §0.)
pub struct RebuildBufs {
    spans: Vec<AlignedBuf>,
    out: AlignedBuf,
    spare: Vec<AlignedBuf>,
}

impl Default for RebuildBufs {
    fn default() -> RebuildBufs {
        RebuildBufs {
            spans: Vec::new(),
            out: AlignedBuf::new(0),
            spare: Vec::new(),
        }
    }
}

impl RebuildBufs {
    /// Make room for `n` members' spans of `span` bytes (none for member
    /// `skip`, the one rebuilt: it is not read) and `p` spare units.
    fn fit(&mut self, n: usize, skip: usize, p: usize, span: usize, unit: usize) {
        if self.spans.len() != n || self.out.len() < span {
            self.spans = (0..n)
                .map(|m| AlignedBuf::new(if m == skip { 0 } else { span }))
                .collect();
            self.out = AlignedBuf::new(span);
        }
        if self.spare.len() != p || self.spare.first().is_some_and(|b| b.len() < unit) {
            self.spare = (0..p).map(|_| AlignedBuf::new(unit)).collect();
        }
    }
}

/// How far a rebuild is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Progress {
    pub slot: u32,
    /// Segments below this one are rebuilt (or were free).
    pub next_segment: u32,
    pub segment_count: u32,
    /// Segments of this mount's walk that were live and copied.
    pub copied: u64,
    /// Segments of this mount's walk that were free and only marked.
    pub skipped: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl StripeSet {
    /// The slot being rebuilt.
    pub fn rebuilding_slot(&self) -> Option<u32> {
        self.rebuilding.load(Ordering::Acquire).checked_sub(1)
    }

    /// The slot being rebuilt when it is up and no other member is down
    /// (a writable mount then resyncs as with every member present:
    /// `resync`, docs/stripes.md §0 finding 7).
    pub fn rebuilding_alone(&self) -> Option<u32> {
        self.rebuilding_slot()
            .filter(|&s| self.up(s).is_some() && self.down_count() == 1)
    }

    pub(super) fn progress(&self) -> Option<Progress> {
        let slot = self.rebuilding_slot()?;
        let rps = self.layout.rows_per_segment;
        Some(Progress {
            slot,
            next_segment: (self.rebuilt_rows.load(Ordering::Acquire) / rps) as u32,
            segment_count: self.shape.segment_count,
            copied: self.counters.rebuild_copied.load(Ordering::Relaxed),
            skipped: self.counters.rebuild_skipped.load(Ordering::Relaxed),
        })
    }

    /// May `len` bytes at member offset `off` of member `m` be read? Not on
    /// the member being rebuilt, outside the rows already rebuilt.
    pub(super) fn readable(&self, m: u32, off: u64, len: usize) -> bool {
        // MUTANT: rebuilding-member-read-early s|!= m + 1 {|!= u32::MAX {|
        if self.rebuilding.load(Ordering::Acquire) != m + 1 {
            return true;
        }
        // Its scratch places: zeroed by `attach` and flushed before any
        // metadata made the device a member, and written since only as on
        // every member (running parity with its tag, voids). A tag a flush
        // wrote there while the volume served during the rebuild is as
        // valid as any: unread, a power cut left it on the member unknown
        // to the lanes, never voided, and after the rebuild a degraded
        // read rebuilt blocks from its stale copy (the online power-cut
        // test, docs/stripes.md §6).
        if off >= self.scratch_base() {
            return true;
        }
        let start = self.layout.member_offset;
        let end = start + self.rebuilt_rows.load(Ordering::Acquire) * self.layout.unit;
        off >= start && off.saturating_add(len as u64) <= end
    }

    /// Member offset of rebuild record place `i` (0 or 1).
    fn record_offset(&self, i: u64) -> u64 {
        self.member_tail_offset() + (REBUILD_RECORD_BLOCK + i) * BS
    }

    /// The valid rebuild record of `media` for member `member_uuid` with
    /// the highest cursor (either place: the other may be torn).
    fn read_record(&self, media: &dyn Media, member_uuid: &[u8; 16]) -> Option<RebuildRecord> {
        let set_uuid = self.members[0].ident.set_uuid;
        let mut buf = AlignedBuf::new(BLOCK_BYTES);
        let mut best: Option<RebuildRecord> = None;
        for i in 0..2 {
            if media.read_at(&mut buf, self.record_offset(i)).is_err() {
                continue;
            }
            let Some(r) = RebuildRecord::decode(&buf) else {
                continue;
            };
            if r.set_uuid == set_uuid
                && &r.member_uuid == member_uuid
                && r.segment_count == self.shape.segment_count
                && best.is_none_or(|b| r.next_segment > b.next_segment)
            {
                best = Some(r);
            }
        }
        best
    }

    /// At assembly: a present member carrying a rebuild record of this set
    /// and of itself is being rebuilt from the record's cursor on.
    pub(super) fn find_rebuild(&self) -> io::Result<()> {
        for (i, m) in self.members.iter().enumerate() {
            let Some(media) = &m.media else { continue };
            let Some(r) = self.read_record(&**media, &m.ident.member_uuid) else {
                continue;
            };
            if self.rebuilding_slot().is_some() {
                return Err(invalid(format!(
                    "stripe set: members {} and {i} are both being rebuilt; rebuild one at a time",
                    self.rebuilding_slot().expect("some")
                )));
            }
            self.rebuilt_rows.store(
                r.next_segment as u64 * self.layout.rows_per_segment,
                Ordering::Release,
            );
            self.rebuilding.store(i as u32 + 1, Ordering::Release);
            tracing::warn!(
                "stripe set: member {i} ({}) is being rebuilt: {} of {} segments done",
                m.name,
                r.next_segment,
                r.segment_count
            );
        }
        Ok(())
    }

    /// Make `media` the member of missing slot `slot` of this (degraded,
    /// just assembled) set, to be rebuilt: its rebuild record (cursor 0)
    /// and void scratch tags first, flushed; then the mirrored metadata
    /// (head and tail area) copied from a member present, each superblock
    /// copy carrying the new member's identity; flushed. Reassemble the set
    /// with the new member to rebuild it. Nothing is written to the others.
    pub fn attach(&self, slot: u32, name: &str, media: &Arc<dyn Media>) -> io::Result<()> {
        let l = self.layout;
        if slot >= l.members {
            return Err(invalid(format!(
                "stripe set: no slot {slot} in {} members",
                l.members
            )));
        }
        if l.parity == 0 {
            return Err(invalid(
                "stripe set: a RAID-0 set has nothing to rebuild a member from".into(),
            ));
        }
        if self.members[slot as usize].media.is_some() {
            return Err(invalid(format!(
                "stripe set: slot {slot} is held by {}; leave the member to replace out of the devices given",
                self.members[slot as usize].name
            )));
        }
        if media.len() < self.member_bytes() {
            return Err(invalid(format!(
                "{name} holds {} bytes, a member of this set needs {}",
                media.len(),
                self.member_bytes()
            )));
        }
        let src = (0..l.members)
            .find(|&m| self.up(m).is_some())
            .ok_or_else(|| invalid("stripe set: no member present to copy from".into()))?;
        let mut ident: StripeIdentity = self.members[slot as usize].ident;
        ident.member_index = slot as u16;
        ident.member_uuid = rand::random();
        ident.generation = self.generation();
        // 1. the record (the member is not whole) and void scratch places
        let rec = RebuildRecord {
            set_uuid: ident.set_uuid,
            member_uuid: ident.member_uuid,
            next_segment: 0,
            segment_count: self.shape.segment_count,
        };
        let mut b = AlignedBuf::new(BLOCK_BYTES);
        b.copy_from_slice(&rec.encode());
        media.write_at(&b, self.record_offset(0))?;
        let zero = AlignedBuf::new(BLOCK_BYTES);
        media.write_at(&zero, self.record_offset(1))?;
        for lane in 0..super::scratch::LANES {
            for place in 0..2 {
                let at = super::scratch::place_offset(self.scratch_base(), l.unit, lane, place);
                media.write_at(&zero, at)?;
            }
        }
        media.flush()?;
        // 2. the metadata, with the new identity in its superblock copies
        let tail = self.member_tail_offset();
        let mut ranges: Vec<(u64, u64)> = vec![(0, l.member_offset)];
        ranges.push((tail, tail + REBUILD_RECORD_BLOCK * BS));
        ranges.push((
            tail + (REBUILD_RECORD_BLOCK + 2) * BS,
            tail + TAIL_AREA_BYTES,
        ));
        let sb_at = [0, BS, tail, tail + BS];
        for (start, end) in ranges {
            let mut at = start;
            while at < end {
                let n = (end - at).min(1 << 20) as usize;
                let mut buf = AlignedBuf::new(n);
                self.mread(src, &mut buf, at)?;
                for (i, blk) in buf.chunks_mut(BLOCK_BYTES).enumerate() {
                    if sb_at.contains(&(at + (i * BLOCK_BYTES) as u64))
                        && super::meta::is_superblock(blk)
                    {
                        super::meta::from_member(blk);
                        super::meta::to_member(blk, &ident);
                    }
                }
                media.write_at(&buf, at)?;
                at += n as u64;
            }
        }
        media.flush()?;
        tracing::warn!(
            "stripe set: {name} attached as member {slot} (uuid {}), to be rebuilt",
            crate::format::stripe::hex(&ident.member_uuid)
        );
        Ok(())
    }

    /// Write the rebuilt member's pieces of every row of `seg` (data units
    /// rebuilt from the rest of their row, as a degraded read would; parity
    /// units recomputed from the row's data). Not flushed: `mark_rebuilt`
    /// flushes before it writes the record. The caller holds the segment's
    /// fence exclusively (`rebuild_segments`).
    fn rebuild_segment(&self, seg: u32) -> io::Result<()> {
        let slot = self
            .rebuilding_slot()
            .ok_or_else(|| invalid("stripe set: no member is being rebuilt".into()))?;
        let l = self.layout;
        let u = l.unit as usize;
        let rps = l.rows_per_segment;
        let (first, end) = (seg as u64 * rps, (seg as u64 + 1) * rps);
        if !self.rows_busy(first, end) {
            return self.rebuild_rows_bulk(slot, first, end, &mut RebuildBufs::default());
        }
        // rows in memory or named by a scratch tag: row by row, as a
        // degraded read rebuilds them
        for row in first..end {
            let mut piece = AlignedBuf::new(u);
            match l.role(row, slot) {
                Role::Data(d) => self.reconstruct(row, d, 0, &mut piece)?,
                which => {
                    let par = self.parity_of_row(row)?;
                    let k = if which == Role::P { 0 } else { 1 };
                    piece.copy_from_slice(&par[k]);
                }
            }
            self.mwrite(slot, &piece, l.row_offset(row).expect("row inside the set"))?;
            if let Role::P | Role::Q = l.role(row, slot) {
                // MUTANT: rebuild-scratch-copies-skipped s|self.rebuild_scratch(row, slot)?;|let _ = row;|
                self.rebuild_scratch(row, slot)?;
            }
        }
        self.still_up(slot)
    }

    /// The parity units of `row` computed from its data as a read gives
    /// it (each data unit from its member, or rebuilt when that member may
    /// not be read).
    pub(super) fn parity_of_row(&self, row: u64) -> io::Result<Vec<AlignedBuf>> {
        let l = self.layout;
        let u = l.unit as usize;
        let mut data = AlignedBuf::new(l.write_unit() as usize);
        self.read_area(row * l.write_unit(), &mut data)?;
        let units: Vec<&[u8]> = data.chunks(u).collect();
        let mut par: Vec<AlignedBuf> = (0..l.parity).map(|_| AlignedBuf::new(u)).collect();
        let mut refs: Vec<&mut [u8]> = par.iter_mut().map(|p| &mut p[..]).collect();
        parity::encode(&units, &mut refs).map_err(io::Error::other)?;
        Ok(par)
    }

    /// A row partial at the last shutdown (scratch tags found at mount)
    /// whose P or Q member is `slot`: the running parity copy that lived
    /// on the member replaced (the attach voided the new member's scratch
    /// places) is written on the new one, for each tag of the row, with
    /// the same tag at the same lane and place: the running parity of the
    /// blocks the tag covers (the others as zero). Without it the row had
    /// one copy fewer, and with two more members lost on a RAID-6 (the
    /// set still degraded, so never resynced) a covered block could not be
    /// rebuilt (docs/stripes.md §0, "Windows that remain" (4)).
    fn rebuild_scratch(&self, row: u64, slot: u32) -> io::Result<()> {
        let l = self.layout;
        let which: u8 = match l.role(row, slot) {
            Role::P => 0,
            Role::Q => 1,
            _ => return Ok(()),
        };
        let Some(tags) = self.rows.lock().mount_tags.get(&row).cloned() else {
            return Ok(());
        };
        let u = l.unit as usize;
        let ub = u / BLOCK_BYTES;
        let dn = l.data_members() as usize;
        let mut seqs: Vec<u64> = tags.iter().map(|t| t.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let set_uuid = self.members()[0].ident.set_uuid;
        for seq in seqs {
            let t = tags.iter().find(|t| t.seq == seq).expect("a tag");
            if tags
                .iter()
                .any(|x| x.seq == seq && x.which == which && x.member == slot)
            {
                continue;
            }
            // the covered blocks, as a degraded read gives them (from this
            // tag's copy where their member is down), the rest zero
            let mut units: Vec<AlignedBuf> = (0..dn).map(|_| AlignedBuf::new(u)).collect();
            for (k, unit) in units.iter_mut().enumerate() {
                for c in 0..ub {
                    if t.covered.get(k * ub + c) == Some(&true) {
                        let off = row * l.write_unit() + (k * u + c * BLOCK_BYTES) as u64;
                        self.read_area(off, &mut unit[c * BLOCK_BYTES..(c + 1) * BLOCK_BYTES])?;
                    }
                }
            }
            let refs: Vec<&[u8]> = units.iter().map(|x| &x[..]).collect();
            let mut par: Vec<AlignedBuf> = (0..l.parity).map(|_| AlignedBuf::new(u)).collect();
            {
                let mut prefs: Vec<&mut [u8]> = par.iter_mut().map(|p| &mut p[..]).collect();
                parity::encode(&refs, &mut prefs).map_err(io::Error::other)?;
            }
            let mut buf = AlignedBuf::new(BLOCK_BYTES + u);
            buf[BLOCK_BYTES..].copy_from_slice(&par[which as usize]);
            super::scratch::Tag {
                set_uuid,
                row,
                seq,
                which,
                covered: t.covered.clone(),
            }
            .seal(&mut buf);
            let at = super::scratch::place_offset(self.scratch_base(), l.unit, t.lane, t.place);
            self.mwrite(slot, &buf, at)?;
            let mut tt = self.rows.lock();
            tt.place_owner.insert((slot, t.lane, t.place), (row, seq));
            tt.mount_tags.entry(row).or_default().push(super::MountTag {
                seq,
                which,
                member: slot,
                lane: t.lane,
                place: t.place,
                covered: t.covered.clone(),
            });
        }
        Ok(())
    }

    /// Rebuild segments `first..end` (docs/stripes.md §6): when no row of
    /// them has state in memory or a scratch tag, in one batch
    /// (`rebuild_rows_bulk`, the buffers in `bufs` reused from batch to
    /// batch); otherwise segment by segment (`rebuild_segment`). Not
    /// flushed: `mark_rebuilt` flushes before it writes the record.
    ///
    /// Safe while writes go on (docs/stripes.md §6, "Online"): the
    /// segments' fence is held exclusively from before the busy check to
    /// after the write of the new member's pieces, so no write, flush
    /// padding, parity or tombstone lands in these rows between the reads
    /// of the other members and the write of the piece rebuilt from them.
    /// What is written into the rows afterwards reaches the new member as
    /// every write does (a rebuilding slot takes every write).
    pub fn rebuild_segments(&self, first: u32, end: u32, bufs: &mut RebuildBufs) -> io::Result<()> {
        let slot = self
            .rebuilding_slot()
            .ok_or_else(|| invalid("stripe set: no member is being rebuilt".into()))?;
        if end <= first {
            return Ok(());
        }
        // MUTANT: rebuild-unfenced s|self.fence.exclusive(first as u64, end as u64 - 1)|Vec::<()>::new()|
        let _fence = self.fence.exclusive(first as u64, end as u64 - 1);
        let rps = self.layout.rows_per_segment;
        let (r0, r1) = (first as u64 * rps, end as u64 * rps);
        if self.rows_busy(r0, r1) {
            for seg in first..end {
                self.rebuild_segment(seg)?;
            }
            return Ok(());
        }
        self.rebuild_rows_bulk(slot, r0, r1, bufs)
    }

    /// How many consecutive segments one `rebuild_segments` batch takes:
    /// a member's span of them up to `REBUILD_BATCH_BYTES`, at least one.
    pub fn rebuild_batch_segments(&self) -> u32 {
        let per = self.layout.rows_per_segment * self.layout.unit;
        (REBUILD_BATCH_BYTES / per.max(1)).clamp(1, u32::MAX as u64) as u32
    }

    /// Does any row of `first..end` have state in memory or a scratch tag?
    fn rows_busy(&self, first: u64, end: u64) -> bool {
        let t = self.rows.lock();
        (first..end).any(|r| t.get(r).is_some() || t.mount_tags.contains_key(&r))
    }

    /// `rebuild_segment` of rows `first..end` when no row has state in
    /// memory or a scratch tag: the rows' span (contiguous on every
    /// member) read from every other member at once (one thread each, so
    /// members on separate devices are read in parallel), each row's piece
    /// rebuilt from the rest of the row in place in the buffers
    /// (parity::reconstruct: the same for a data, P or Q piece), and
    /// written. Pipelined in pieces of `REBUILD_PIPE_BYTES` per member:
    /// each reader hands a piece over as soon as it is read and goes on
    /// with the next, so a piece is rebuilt and written to the new member
    /// while the next ones are read (one batch read, then rebuilt, then
    /// written, left the members idle for a third of the time: the
    /// profile in docs/stripes.md §0). The whole span stays under the
    /// caller's fence until the last piece is written.
    fn rebuild_rows_bulk(
        &self,
        slot: u32,
        first: u64,
        end: u64,
        bufs: &mut RebuildBufs,
    ) -> io::Result<()> {
        let l = self.layout;
        let u = l.unit as usize;
        let n = l.members as usize;
        let dn = l.data_members() as usize;
        let span = ((end - first) * l.unit) as usize;
        let base = l.row_offset(first).expect("row inside the set");
        // rows per piece: whole rows, at most REBUILD_PIPE_BYTES and at
        // most a quarter of the run, so a short run (a small set's, the
        // tests') is pipelined too; at least one
        let rows = (end - first) as usize;
        let rpp = ((REBUILD_PIPE_BYTES / l.unit) as usize)
            .min(rows.div_ceil(4))
            .max(1);
        let piece = rpp * u;
        let pieces = span.div_ceil(piece);
        bufs.fit(n, slot as usize, l.parity as usize, span, u);
        let RebuildBufs { spans, out, spare } = bufs;
        std::thread::scope(|s| -> io::Result<()> {
            // (member, piece index, the piece read or None when the read failed)
            let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, Option<&mut [u8]>)>();
            let mut readers = 0usize;
            for (m, b) in spans.iter_mut().enumerate() {
                if m == slot as usize || self.up(m as u32).is_none() {
                    continue;
                }
                readers += 1;
                let tx = tx.clone();
                s.spawn(move || {
                    for (j, p) in b[..span].chunks_mut(piece).enumerate() {
                        let ok = self.mread(m as u32, p, base + (j * piece) as u64).is_ok();
                        if tx.send((m, j, ok.then_some(p))).is_err() {
                            return; // the writer gave up (an error): stop reading
                        }
                    }
                });
            }
            drop(tx);
            let mut got: Vec<Vec<Option<&mut [u8]>>> = (0..pieces)
                .map(|_| (0..n).map(|_| None).collect())
                .collect();
            let mut arrived = vec![0usize; pieces];
            let mut outs = out[..span].chunks_mut(piece);
            let mut next = 0usize;
            let mut lost = Vec::with_capacity(n);
            while next < pieces {
                // MUTANT: rebuild-pipe-piece-early s|if arrived[next] < readers {|if arrived[next] + 1 < readers {|
                if arrived[next] < readers {
                    let (m, j, p) = rx.recv().map_err(|_| {
                        io::Error::other("stripe set: a rebuild reader stopped early")
                    })?;
                    got[j][m] = p;
                    arrived[j] += 1;
                    continue;
                }
                let j = next;
                next += 1;
                let o = outs.next().expect("an output piece per piece");
                let members_lost = (0..n)
                    .filter(|&m| m != slot as usize && got[j][m].is_none())
                    .count()
                    + 1;
                if members_lost > l.parity as usize {
                    let r0 = first + (j * rpp) as u64;
                    return Err(io::Error::other(format!(
                        "stripe set: rows {r0}..{} cannot be rebuilt: {members_lost} of their members are down, parity {}",
                        (r0 + rpp as u64).min(end),
                        l.parity
                    )));
                }
                for (k, at) in (0..o.len()).step_by(u).enumerate() {
                    let row = first + (j * rpp + k) as u64;
                    let mut by_member: Vec<Option<&mut [u8]>> = got[j]
                        .iter_mut()
                        .map(|p| p.as_deref_mut().map(|p| &mut p[at..at + u]))
                        .collect();
                    let mut mine = Some(&mut o[at..at + u]);
                    let mut spare = spare.iter_mut();
                    lost.clear();
                    let mut shards: Vec<&mut [u8]> = Vec::with_capacity(n);
                    for i in 0..n {
                        let m = self.shard_member(row, i as u32) as usize;
                        match by_member[m].take() {
                            Some(p) => shards.push(p),
                            None => {
                                lost.push(i);
                                // MUTANT: rebuild-bulk-piece-misplaced s|if m == slot as usize {|if mine.is_some() {|
                                let to = if m == slot as usize {
                                    mine.take().expect("one piece of the row on the new member")
                                } else {
                                    &mut spare.next().expect("a spare per parity unit")[..u]
                                };
                                shards.push(to);
                            }
                        }
                    }
                    parity::reconstruct(&mut shards, dn, &lost).map_err(io::Error::other)?;
                }
                self.mwrite(slot, o, base + (j * piece) as u64)?;
            }
            Ok(())
        })?;
        self.still_up(slot)
    }

    /// Err when the member being rebuilt failed (a write to it that failed
    /// took it out of use: `mwrite` then skips it without an error).
    fn still_up(&self, slot: u32) -> io::Result<()> {
        match self.up(slot) {
            Some(_) => Ok(()),
            None => Err(io::Error::other(format!(
                "stripe set: member {slot} being rebuilt failed"
            ))),
        }
    }

    /// Flush the member being rebuilt; Err when it failed.
    fn flush_rebuilt(&self, slot: u32) -> io::Result<()> {
        let media = self.up(slot).ok_or_else(|| {
            io::Error::other(format!("stripe set: member {slot} being rebuilt failed"))
        })?;
        // MUTANT: rebuild-data-unflushed s|media.flush()|Ok::<(), io::Error>(())|
        if let Err(e) = media.flush() {
            self.fail(slot, e)?;
        }
        if self.up(slot).is_none() {
            return Err(io::Error::other(format!(
                "stripe set: member {slot} being rebuilt failed"
            )));
        }
        Ok(())
    }

    /// Segments below `next` are rebuilt: flush the member (their pieces
    /// durable), persist that in the record, flush, and read them from the
    /// member from now on. `copied` and `skipped`: how many of them since
    /// the last mark were copied, and were free (counted for progress).
    pub fn mark_rebuilt(&self, next: u32, copied: u32, skipped: u32) -> io::Result<()> {
        let slot = self
            .rebuilding_slot()
            .ok_or_else(|| invalid("stripe set: no member is being rebuilt".into()))?;
        // the pieces first: the record may only name durable ones
        self.flush_rebuilt(slot)?;
        let rec = RebuildRecord {
            set_uuid: self.members[0].ident.set_uuid,
            member_uuid: self.members[slot as usize].ident.member_uuid,
            next_segment: next,
            segment_count: self.shape.segment_count,
        };
        let mut b = AlignedBuf::new(BLOCK_BYTES);
        b.copy_from_slice(&rec.encode());
        // MUTANT: rebuild-record-one-place s|next as u64 % 2|0|
        self.write_record(slot, &b, next as u64 % 2)?;
        self.rebuilt_rows.store(
            next as u64 * self.layout.rows_per_segment,
            Ordering::Release,
        );
        self.counters
            .rebuild_copied
            .fetch_add(copied as u64, Ordering::Relaxed);
        self.counters
            .rebuild_skipped
            .fetch_add(skipped as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Every segment is rebuilt: void the record; the member is whole.
    pub fn finish_rebuild(&self) -> io::Result<()> {
        let Some(slot) = self.rebuilding_slot() else {
            return Ok(());
        };
        if self.rebuilt_rows.load(Ordering::Acquire)
            < self.shape.segment_count as u64 * self.layout.rows_per_segment
        {
            return Err(invalid(format!(
                "stripe set: member {slot} is not rebuilt to the end"
            )));
        }
        // (a torn void of one place leaves the other, valid: a later mount
        // resumes from it and copies again, nothing worse)
        self.write_record(slot, &AlignedBuf::new(BLOCK_BYTES), 0)?;
        self.write_record(slot, &AlignedBuf::new(BLOCK_BYTES), 1)?;
        self.rebuilding.store(0, Ordering::Release);
        tracing::warn!(
            "stripe set: member {slot} ({}) is rebuilt",
            self.members[slot as usize].name
        );
        Ok(())
    }

    fn write_record(&self, slot: u32, b: &[u8], place: u64) -> io::Result<()> {
        let media = self
            .up(slot)
            .ok_or_else(|| {
                io::Error::other(format!("stripe set: member {slot} being rebuilt failed"))
            })?
            .clone();
        media.write_at(b, self.record_offset(place))?;
        media.flush()
    }
}
