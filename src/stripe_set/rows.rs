//! Rows being filled: for each row of a stripe set that a write left partial,
//! its data blocks as written (so parity is computed without reading), which
//! blocks were zero-padded on the members, and whether its parity waits for
//! the next flush. Owns the table of those rows, the dirty list, and which
//! rows were evicted from memory.
//!
//! Invariant: a row's state, when present, equals the row's data blocks as
//! this mount wrote them (a block neither written nor padded counts as zero
//! and is on no column whose parity was written); a row in `evicted` has data
//! on the members that memory no longer holds, and memory keeps which of its
//! blocks were written or padded (a write to it reads those back into a
//! state equal to the one evicted, so the row is complete only when every
//! block really was written, and parity written later still covers the
//! blocks written before the eviction); a row in neither was not written in
//! this mount and holds no live data.

use crate::format::BLOCK_BYTES;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Most row states kept in memory after a flush (the clean ones beyond it
/// are evicted, least recently used first), unless the set says otherwise
/// (`RowTable::keep`).
pub(super) const KEEP_ROWS: usize = 64;

/// What an evicted row's block was: `Blk` without the data.
const MARK_NONE: u8 = 0;
const MARK_DATA: u8 = 1;
const MARK_ZERO: u8 = 2;

#[derive(Clone)]
enum Blk {
    Data(Box<[u8]>),
    /// Zeros written by a flush's padding.
    Zero,
}

pub(super) struct RowState {
    blocks: Vec<Option<Blk>>,
    /// Data blocks written (not padding).
    written: usize,
    /// Parity not yet written for the data in memory.
    pub dirty: bool,
    /// Only a segment's tombstone is written (see `write_tombstone`).
    pub tomb_only: bool,
    /// The scratch place (0 or 1) of its lane the row's next running
    /// parity goes to (the lane is the table's `row_lane`).
    pub place: u32,
}

impl RowState {
    fn new(blocks: usize) -> RowState {
        RowState {
            blocks: vec![None; blocks],
            written: 0,
            dirty: false,
            tomb_only: false,
            place: 0,
        }
    }

    /// Take `data` (whole blocks) at byte `in_row` of the row's data.
    pub fn put(&mut self, in_row: u64, data: &[u8]) {
        let first = in_row as usize / BLOCK_BYTES;
        for (i, b) in data.chunks(BLOCK_BYTES).enumerate() {
            let slot = &mut self.blocks[first + i];
            if !matches!(slot, Some(Blk::Data(_))) {
                self.written += 1;
            }
            *slot = Some(Blk::Data(b.into()));
        }
    }

    /// Which data blocks of the row are written (a tag's `covered`).
    pub fn covered(&self) -> Vec<bool> {
        self.blocks
            .iter()
            .map(|b| matches!(b, Some(Blk::Data(_))))
            .collect()
    }

    /// Data block `i` as written, None when it was not (or only padded).
    pub fn block(&self, i: usize) -> Option<&[u8]> {
        match self.blocks.get(i) {
            Some(Some(Blk::Data(b))) => Some(b),
            _ => None,
        }
    }

    /// No data block written yet.
    pub fn is_empty(&self) -> bool {
        self.written == 0
    }

    /// Every data block of the row written.
    pub fn full(&self) -> bool {
        self.written == self.blocks.len()
    }

    /// Every data block of the row written, or (`end`: a closed segment's
    /// last row, which the engine writes only below block `end`) every
    /// block below `end`: nothing more will be written into the row.
    pub fn done(&self, end: Option<usize>) -> bool {
        self.full()
            || end.is_some_and(|e| {
                self.blocks[..e.min(self.blocks.len())]
                    .iter()
                    .all(|b| matches!(b, Some(Blk::Data(_))))
            })
    }

    /// Does any data unit hold a block at column `c`?
    pub fn column_used(&self, c: usize, ub: usize, units: usize) -> bool {
        (0..units).any(|u| matches!(self.blocks[u * ub + c], Some(Blk::Data(_))))
    }

    /// Mark block `i` padded; true when it was neither written nor padded
    /// (the caller writes the zeros).
    pub fn pad(&mut self, i: usize) -> bool {
        if self.blocks[i].is_none() {
            self.blocks[i] = Some(Blk::Zero);
            true
        } else {
            false
        }
    }

    /// Each block's mark (`MARK_*`): what an eviction keeps of the row.
    fn marks(&self) -> Box<[u8]> {
        self.blocks
            .iter()
            .map(|b| match b {
                None => MARK_NONE,
                Some(Blk::Data(_)) => MARK_DATA,
                Some(Blk::Zero) => MARK_ZERO,
            })
            .collect()
    }

    /// The state `marks` was taken from, its written blocks read back from
    /// the members (`data`: the whole row).
    fn loaded(data: &[u8], marks: &[u8]) -> RowState {
        let mut st = RowState::new(data.len() / BLOCK_BYTES);
        for (i, b) in data.chunks(BLOCK_BYTES).enumerate() {
            match marks.get(i).copied().unwrap_or(MARK_NONE) {
                // MUTANT: evicted-row-loaded-full s|MARK_DATA => st.put(|_ => st.put(|
                MARK_DATA => st.put((i * BLOCK_BYTES) as u64, b),
                MARK_ZERO => st.blocks[i] = Some(Blk::Zero),
                _ => {}
            }
        }
        st
    }

    /// `n` blocks from block `first`, zeros where none was written.
    pub fn gather(&self, first: usize, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n * BLOCK_BYTES];
        for i in 0..n {
            if let Some(Blk::Data(b)) = &self.blocks[first + i] {
                out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES].copy_from_slice(b);
            }
        }
        out
    }
}

#[derive(Default)]
pub(super) struct RowTable {
    // Lock order: a row's state, then this table; never the other way
    // round blocking (`evict` only try-locks states).
    /// Each row's state and when it was last used (`tick`).
    states: HashMap<u64, (Arc<Mutex<RowState>>, u64)>,
    pub dirty: BTreeSet<u64>,
    /// Rows evicted, and what each of their blocks was (`RowState::marks`).
    evicted: HashMap<u64, Box<[u8]>>,
    tick: u64,
    /// Most states kept after a flush (0: `KEEP_ROWS`).
    pub keep: usize,
    /// Scratch lanes no row holds.
    pub free_lanes: Vec<u32>,
    /// The lane each protected partial row holds.
    pub row_lane: HashMap<u64, u32>,
    /// Lanes of rows completed since the last flush began: free once the
    /// flush has made the rows' own parity durable.
    pub retiring: Vec<u32>,
    /// Rows that held a lane and were completed since the last flush
    /// began: their scratch tags are voided by that flush, after their
    /// parity in place is durable and before it returns.
    pub retired_rows: Vec<u64>,
    /// Which row's tag each scratch place `(member, lane, place)` holds,
    /// and the tag's seq: (row, seq).
    pub place_owner: HashMap<(u32, u32, u32), (u64, u64)>,
    /// Places holding tags of rows whose segment's life ended
    /// (`forget_range`): voided by the next flush, after its first member
    /// flush made the segment's tombstone durable, never before (until
    /// then recovery may read the segment's old chunks, and a block of one
    /// that only the tag protects is rebuilt from it). Their lanes wait in
    /// `retiring` until then.
    pub dead_places: Vec<(u32, u32, u32)>,
    /// Valid tags found at mount, by row: (seq, which, member, lane, place,
    /// covered). Used by degraded reads until a resync makes them moot.
    pub mount_tags: HashMap<u64, Vec<super::MountTag>>,
    /// The last row of each segment the engine closed part way into it
    /// (`StripeSet::segment_closed`): the blocks below which it writes the
    /// row (the rest is never written in this life). The row is finished
    /// (padded, its parity in place) once those blocks are in (`done`).
    pub closing: HashMap<u64, usize>,
    /// Closing rows a flush looks at first: their blocks may all be in
    /// already (they were when their segment closed).
    pub finishing: BTreeSet<u64>,
}

impl RowTable {
    pub fn with_lanes(lanes: u32) -> RowTable {
        RowTable {
            free_lanes: (0..lanes).rev().collect(),
            ..RowTable::default()
        }
    }

    pub fn get(&self, row: u64) -> Option<Arc<Mutex<RowState>>> {
        self.states.get(&row).map(|s| s.0.clone())
    }

    /// Is `s` the state the table holds for `row` (not evicted or dropped
    /// since the caller took it)?
    pub fn is_current(&self, row: u64, s: &Arc<Mutex<RowState>>) -> bool {
        self.states.get(&row).is_some_and(|e| Arc::ptr_eq(&e.0, s))
    }

    /// A whole row is about to be written: true when no state holds it (it
    /// needs none; an evicted mark is dropped), false when one does.
    pub fn forget(&mut self, row: u64) -> bool {
        self.evicted.remove(&row);
        !self.states.contains_key(&row)
    }

    /// The row's state, a fresh one for a row not written in this mount, or
    /// None: it was evicted (the caller reads it back, `insert_loaded`).
    pub fn get_or_fresh(&mut self, row: u64, blocks: usize) -> Option<Arc<Mutex<RowState>>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(s) = self.states.get_mut(&row) {
            s.1 = tick;
            return Some(s.0.clone());
        }
        if self.evicted.contains_key(&row) {
            return None;
        }
        let s = Arc::new(Mutex::new(RowState::new(blocks)));
        self.states.insert(row, (s.clone(), tick));
        Some(s)
    }

    /// An evicted row read back from the members (`data`: all of it): its
    /// state as it was evicted. (A row no longer marked evicted, and with
    /// no state, had its segment's life end meanwhile: counted as all
    /// data, the parity written from it agrees with the members.)
    pub fn insert_loaded(&mut self, row: u64, data: &[u8]) -> Arc<Mutex<RowState>> {
        let marks = self.evicted.remove(&row);
        if let Some(s) = self.states.get(&row) {
            return s.0.clone();
        }
        let st = match marks {
            Some(m) => RowState::loaded(data, &m),
            None => {
                let mut st = RowState::new(data.len() / BLOCK_BYTES);
                st.put(0, data);
                st
            }
        };
        let s = Arc::new(Mutex::new(st));
        self.states.insert(row, (s.clone(), self.tick));
        s
    }

    /// Every data block of `row` is written and so is its parity; its lane
    /// (if any) retires.
    pub fn complete(&mut self, row: u64) {
        self.states.remove(&row);
        self.dirty.remove(&row);
        self.closing.remove(&row);
        self.finishing.remove(&row);
        if let Some(l) = self.row_lane.remove(&row) {
            self.retiring.push(l);
            self.retired_rows.push(row);
        }
    }

    /// The lane `row` holds, or a free one for it; None: none free.
    pub fn lane_for(&mut self, row: u64) -> Option<u32> {
        if let Some(l) = self.row_lane.get(&row) {
            return Some(*l);
        }
        let l = self.free_lanes.pop()?;
        self.row_lane.insert(row, l);
        Some(l)
    }

    /// Rows `first..end` hold nothing live any more (a segment's new life):
    /// their states and mount tags are dropped, and the scratch places
    /// holding their tags go to `dead_places` (the next flush voids them),
    /// their lanes to `retiring` (free after that flush).
    pub fn forget_range(&mut self, first: u64, end: u64) {
        let dead = |r: &u64| (first..end).contains(r);
        let mut lanes: Vec<u64> = self.row_lane.keys().copied().filter(dead).collect();
        // row order, not hash order: the lanes go back to `free_lanes` in
        // this order, and which lane a row takes next decides where its
        // tag is written (a seed of the simulator writes the same bytes)
        lanes.sort_unstable();
        for r in lanes {
            let l = self.row_lane.remove(&r).expect("present");
            self.retiring.push(l);
        }
        self.states.retain(|r, _| !dead(r));
        self.closing.retain(|r, _| !dead(r));
        self.finishing.retain(|r| !dead(r));
        self.retire_mount_lanes(first, end);
        self.mount_tags.retain(|r, _| !dead(r));
        self.void_places(first, end);
        self.evicted.retain(|r, _| !(first..end).contains(r));
        let keep = self.dirty.split_off(&end);
        let _dead = self.dirty.split_off(&first);
        self.dirty.extend(keep);
    }

    /// The scratch places whose tags speak for rows `first..end` go to
    /// `dead_places` (the next flush voids them).
    fn void_places(&mut self, first: u64, end: u64) {
        let places: Vec<(u32, u32, u32)> = self
            .place_owner
            .iter()
            .filter(|(_, (r, _))| (first..end).contains(r))
            .map(|(p, _)| *p)
            .collect();
        for p in &places {
            self.place_owner.remove(p);
        }
        self.dead_places.extend(places);
    }

    /// Tags found at mount for rows `first..end` speak for an older life of
    /// their segment: forget them, and void their places at the next flush
    /// (`dead_places`; their lanes free after it, `retire_mount_lanes`).
    pub fn drop_mount_tags(&mut self, first: u64, end: u64) {
        let dead = |r: &u64| (first..end).contains(r);
        if !self.mount_tags.keys().any(dead) {
            return;
        }
        self.retire_mount_lanes(first, end);
        self.mount_tags.retain(|r, _| !dead(r));
        self.void_places(first, end);
    }

    /// The lanes of tags found at mount for rows `first..end` (about to be
    /// dropped, their places voided by the next flush) go to `retiring`:
    /// free after that flush, as a completed row's. A lane's valid tags
    /// at mount are one row's (a lane is free again only after its
    /// previous row's voids were flushed), so no live row's tag is in
    /// them. Without this a degraded mount (no resync) never got those
    /// lanes back.
    fn retire_mount_lanes(&mut self, first: u64, end: u64) {
        let mut lanes: Vec<u32> = self
            .mount_tags
            .iter()
            // MUTANT: retire-mount-lanes-any-row s|(first..end).contains(*r)|(0..u64::MAX).contains(*r)|
            .filter(|(r, _)| (first..end).contains(*r))
            .flat_map(|(_, tags)| tags.iter().map(|t| t.lane))
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        for l in lanes {
            if !self.free_lanes.contains(&l)
                && !self.retiring.contains(&l)
                && !self.row_lane.values().any(|&x| x == l)
            {
                // MUTANT: retire-mount-lanes-skipped s|self.retiring.push(l);|let _ = l;|
                self.retiring.push(l);
            }
        }
    }

    /// Drop clean states beyond `keep` (`KEEP_ROWS`), least recently used
    /// first, keeping each one's marks.
    pub fn evict(&mut self) {
        let keep = if self.keep == 0 { KEEP_ROWS } else { self.keep };
        if self.states.len() <= keep {
            return;
        }
        let mut clean: Vec<(u64, u64, Box<[u8]>)> = self
            .states
            .iter()
            .filter(|(r, _)| !self.row_lane.contains_key(r))
            .filter_map(|(r, (s, used))| {
                let s = s.try_lock()?;
                (!s.dirty).then(|| (*used, *r, s.marks()))
            })
            .collect();
        clean.sort_unstable_by_key(|c| (c.0, c.1));
        let over = self.states.len() - keep / 2;
        for (_, r, marks) in clean.into_iter().take(over) {
            self.states.remove(&r);
            self.evicted.insert(r, marks);
        }
    }
}
