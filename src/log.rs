//! Log: the open chunk of one stream (user or GC) being filled in arrival order,
//! and the sealed chunk image handed to the media. A chunk reserves its place in
//! its segment when it opens, so every appended block has a final physical address
//! at once and the map can point to it immediately; except the user chunk of a
//! compressed volume, which is *staged* (`staged`: no place until it is packed,
//! docs/compression.md). A GC chunk of a compressed volume takes fragments as
//! they are into its own packed blocks after its raw ones (once a fragment is
//! in, no raw block follows, so every place stays final at append).
//!
//! Invariant: the image of a sealed chunk is exactly header block + data blocks,
//! its header describes every data block in order, and its CRCs are final.
//! With a version 3 intent log (`LOG_INDIRECT`) some data blocks are written
//! at their places before the seal (`Placed`): a bit is set only after that
//! write completed, so the seal writes every block whose bit is clear (a block
//! written twice holds the same bytes both times). A large host write streams
//! its own data blocks to their places (`Shared::append_run`): it *claims*
//! them under the engine lock as it appends them, and the seal's write skips
//! a claimed block but counts its chunk written only once every claim has
//! ended (`Placed::wait_idle`), writing itself any claimed block whose
//! placing write did not complete.
//!
//! Invariant (the image): it holds the bytes of every data block of the
//! chunk except the streamed ones, those whose bit is set in `Placed`'s
//! `claimed` map. A streamed block is appended without a copy
//! (`push_data_streamed`) and claimed in the same engine lock hold, so no
//! one who looks under the lock finds it unclaimed. Its bytes are in the
//! caller's buffer until its placing write completes and on the media after:
//! reads of it wait for that write and read its place (`Core::buffered_data`),
//! a FLUSH's record never copies it from the image (`Ring::plan`), and a seal
//! whose chunk holds one whose placing write failed fails (`write_chunk`:
//! the volume has failed by then) instead of writing the image's slot.
//!
//! Chunk images come from a `ChunkPool` and go back to it when the last holder
//! (the engine's in-flight list or the commit stage's writer) lets go, so a
//! busy volume neither allocates, zeroes nor faults in a 1 MiB buffer per chunk.

use crate::format::chunk::{
    self, Chain, ChunkHeader, Entry, Kind, LsnRange, Stream, MAX_ENTRIES, NO_SRC,
};
use crate::format::intent::RecordEntry;
use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Which data blocks of an open chunk are already on the media at their
/// places (written by a FLUSH's version 3 record, `Commit::write_record`, or
/// streamed by a large host write, `Commit::place`), and which are claimed by
/// a placing write still in flight.
///
/// Invariant: `inflight` counts the claimed blocks whose placing write has not
/// ended (`finish`); claims are taken only under the engine lock hold that
/// appended their blocks (`Claims::claim_pending`), before the chunk can
/// reach a writer (a chunk sealed in that hold is submitted after it ends),
/// so once a writer has the chunk `inflight` only falls, and a seal that
/// waited for it to reach 0 (`wait_idle`) knows every claimed block is placed
/// or must be written by the seal itself.
#[derive(Default)]
pub struct Placed {
    done: [AtomicU64; PLACED_WORDS],
    claimed: [AtomicU64; PLACED_WORDS],
    inflight: AtomicU32,
    idle_lock: parking_lot::Mutex<()>,
    idle: parking_lot::Condvar,
}

const PLACED_WORDS: usize = (chunk::MAX_CHUNK_BLOCKS as usize).div_ceil(64);

impl Placed {
    /// Data blocks `from..to` were written at their places (the write completed).
    pub fn set(&self, from: u32, to: u32) {
        for_words(from, to, |w, bits| {
            self.done[w].fetch_or(bits, Ordering::Release);
        });
    }
    pub fn get(&self, i: u32) -> bool {
        self.done[i as usize / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    }
    /// Data block `i` will be written at its place by the caller (a streamed
    /// host write): the seal skips it and waits for `finish`. Only while the
    /// chunk is open.
    pub fn claim(&self, i: u32) {
        self.claim_range(i, i + 1);
    }
    /// `claim` for data blocks `from..to`: one atomic or per 64 blocks and
    /// one count, instead of two per block (a streamed run claims its
    /// blocks together at the end of its engine lock hold).
    pub fn claim_range(&self, from: u32, to: u32) {
        for_words(from, to, |w, bits| {
            let old = self.claimed[w].fetch_or(bits, Ordering::AcqRel);
            assert!(old & bits == 0, "data blocks {from}..{to} claimed twice");
        });
        if to > from {
            self.inflight.fetch_add(to - from, Ordering::AcqRel);
        }
    }
    pub fn is_claimed(&self, i: u32) -> bool {
        self.claimed[i as usize / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    }
    /// The placing write of claimed blocks `from..to` ended: written (`ok`:
    /// their bits set) or not (the seal writes them).
    pub fn finish(&self, from: u32, to: u32, ok: bool) {
        if ok {
            self.set(from, to);
        }
        let n = to - from;
        let before = self.inflight.fetch_sub(n, Ordering::AcqRel);
        assert!(before >= n, "more placing writes ended than began");
        if before == n {
            // the waiter looks at `inflight` under this lock before it sleeps
            let _g = self.idle_lock.lock();
            self.idle.notify_all();
        }
    }
    /// Wait until no claimed block's placing write is in flight.
    pub fn wait_idle(&self) {
        let mut g = self.idle_lock.lock();
        while self.inflight.load(Ordering::Acquire) > 0 {
            self.idle.wait(&mut g);
        }
    }
    /// Runs `[from, to)` of data indexes below `n` not yet placed.
    pub fn unplaced(&self, n: u32) -> Vec<(u32, u32)> {
        runs(n, |i| !self.get(i))
    }
    /// Runs of data indexes below `n` neither placed nor claimed: what a
    /// seal writes before it waits for the claims (`wait_idle`).
    pub fn unclaimed(&self, n: u32) -> Vec<(u32, u32)> {
        runs(n, |i| !self.get(i) && !self.is_claimed(i))
    }
    /// Runs of data indexes below `n` claimed but not placed: after
    /// `wait_idle`, the blocks whose placing write failed.
    pub fn claimed_unplaced(&self, n: u32) -> Vec<(u32, u32)> {
        runs(n, |i| self.is_claimed(i) && !self.get(i))
    }
}

/// `f(word, bits)` for each 64-bit word of a bitmap that indexes
/// `from..to` touch, with those indexes' bits.
fn for_words(from: u32, to: u32, mut f: impl FnMut(usize, u64)) {
    let mut i = from;
    while i < to {
        let w = i / 64;
        let end = to.min((w + 1) * 64);
        let (lo, hi) = (i % 64, end - w * 64);
        let top = if hi >= 64 { u64::MAX } else { (1u64 << hi) - 1 };
        f(w as usize, top & !((1u64 << lo) - 1));
        i = end;
    }
}

/// Runs `[from, to)` of indexes below `n` where `f` holds.
fn runs(n: u32, f: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for i in (0..n).filter(|&i| f(i)) {
        match out.last_mut() {
            Some(r) if r.1 == i => r.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Idle chunk image buffers of one volume (each `buf_len` bytes). A leaf lock,
/// held only to push or pop.
pub struct ChunkPool {
    buf_len: usize,
    /// Idle bytes kept at most (`POOL_BYTES` unless `with_cap`).
    cap_bytes: usize,
    bufs: Mutex<Vec<AlignedBuf>>,
}

/// Idle buffer bytes kept at most. The write queue holds 32 MiB of chunks,
/// but a GC run seals a victim's worth of chunks before it queues them and
/// the engine keeps written images until `written_through` passes them, so a
/// busy volume peaks near 240 buffers (`bench ceiling`, 1 GiB volume); with a
/// cap of 48 the pool overflowed and ran dry in turns (930 fresh buffers in a
/// 3 s run instead of 240 once).
pub const POOL_BYTES: usize = 256 << 20;

impl ChunkPool {
    pub fn new(buf_len: usize) -> ChunkPool {
        ChunkPool::with_cap(buf_len, POOL_BYTES)
    }

    /// A pool that keeps at most `cap_bytes` of idle buffers.
    pub fn with_cap(buf_len: usize, cap_bytes: usize) -> ChunkPool {
        ChunkPool {
            buf_len,
            cap_bytes,
            bufs: Mutex::new(Vec::new()),
        }
    }

    /// A buffer of `buf_len` bytes with arbitrary content (a fresh one, zeroed,
    /// only when none is idle). Fresh buffers come carved from a 2 MiB
    /// region on huge pages when `buf_len` divides it (`AlignedBuf::carve`):
    /// one is returned, its siblings wait idle here.
    pub fn get(&self) -> AlignedBuf {
        if let Some(b) = self.bufs.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return b;
        }
        let mut fresh = AlignedBuf::carve(self.buf_len);
        let b = fresh.pop().expect("carve gives at least one buffer");
        for s in fresh {
            self.put(s);
        }
        b
    }

    /// Take back a buffer (dropped when the pool is full or it is not ours).
    pub fn put(&self, buf: AlignedBuf) {
        if buf.len() != self.buf_len {
            return;
        }
        let mut bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        if bufs.len() * self.buf_len < self.cap_bytes {
            bufs.push(buf);
        }
    }

    /// Drop one holder of a sealed image; the last holder returns the buffer.
    /// (`Arc::into_inner`: of two holders letting go at once, exactly one gets it.)
    pub fn release(&self, image: Arc<AlignedBuf>) {
        if let Some(buf) = Arc::into_inner(image) {
            self.put(buf);
        }
    }

    /// Idle buffers now (tests).
    pub fn idle(&self) -> usize {
        self.bufs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

pub struct OpenChunk {
    pub stream: Stream,
    pub segment: u32,
    /// Block offset of the header block within the segment.
    pub start: u32,
    pub cap_data: u32,
    pub entries: Vec<Entry>,
    pub crcs: Vec<u32>,
    pub image: AlignedBuf,
    pub opened: Instant,
    /// Format v2: the LSNs of the user block records appended so far (one per
    /// block record, in entry order); GC chunks carry an empty range.
    pub lsn: Option<LsnRange>,
    /// Format v2 `CHAIN`: class and predecessor, set by the engine at seal.
    pub chain: Option<Chain>,
    /// Format v2 `MIXED_HEADER_CHECK`: the header's check is mixed, set by
    /// the engine at seal.
    pub mixed_check: bool,
    /// Block records (and data blocks among them) already carried by an
    /// intent log record: a FLUSH logs only those after them.
    pub logged: u32,
    pub logged_data: u32,
    /// A compressed volume's user chunk: its staged id (no place yet;
    /// `segment` and `start` mean nothing).
    pub staged: Option<u32>,
    /// A GC chunk's packed blocks (fragments moved as they are), after the
    /// raw blocks.
    pub packer: Option<crate::format::packed::Packer>,
    /// Data blocks a version 3 record placed (None: no record did).
    pub placed: Option<Arc<Placed>>,
}

/// The block records of an open chunk not yet in the intent log.
pub struct Unlogged {
    pub first_lsn: u64,
    pub entries: Vec<RecordEntry>,
    /// Their data blocks, as indexes into the chunk's data area.
    pub data: std::ops::Range<u32>,
}

/// A chunk ready for (or being written to) the media.
pub struct Sealed {
    pub seq: u64,
    pub stream: Stream,
    pub segment: u32,
    pub start: u32,
    pub blocks: u32,
    pub image: Arc<AlignedBuf>,
    /// Data blocks already at their places (version 3 records): the write
    /// skips them.
    pub placed: Option<Arc<Placed>>,
}

impl Sealed {
    pub fn bytes(&self) -> &[u8] {
        &self.image[..self.blocks as usize * BLOCK_BYTES]
    }
}

impl OpenChunk {
    /// `image` must hold at least 1 + cap_data blocks; its content is irrelevant
    /// (every byte written out is set first).
    pub fn new(
        stream: Stream,
        segment: u32,
        start: u32,
        cap_data: u32,
        image: AlignedBuf,
    ) -> OpenChunk {
        debug_assert!(image.len() >= (1 + cap_data as usize) * BLOCK_BYTES);
        OpenChunk {
            stream,
            segment,
            start,
            cap_data,
            entries: Vec::new(),
            crcs: Vec::new(),
            image,
            opened: Instant::now(),
            lsn: None,
            chain: None,
            mixed_check: false,
            logged: 0,
            logged_data: 0,
            staged: None,
            packer: None,
            placed: None,
        }
    }

    /// Packed blocks so far (GC chunks of compressed volumes).
    pub fn packed_blocks(&self) -> u32 {
        self.packer.as_ref().map_or(0, |p| p.blocks() as u32)
    }

    /// Count one more user block record (its LSN is `lsn.end()` before the call).
    pub fn count_lsn(&mut self) {
        if let Some(l) = &mut self.lsn {
            l.count += 1;
        }
    }

    /// Block records not yet logged, and how many data blocks they hold.
    pub fn unlogged_counts(&self) -> (u32, u32) {
        let records = self.lsn.map_or(0, |l| l.count);
        (records - self.logged, self.data_blocks() - self.logged_data)
    }

    /// The block records after `logged`, as record entries (a chunk entry
    /// partly logged is split). Every block record of a user chunk is one
    /// block of one entry, in entry order.
    pub fn unlogged(&self) -> Unlogged {
        let lsn = self.lsn.expect("an LSN chunk");
        let mut entries = Vec::new();
        let mut at = 0u32;
        for e in &self.entries {
            let end = at + e.count;
            if end > self.logged {
                let from = self.logged.max(at);
                entries.push(RecordEntry {
                    lba: e.lba + (from - at) as u64,
                    count: end - from,
                    kind: e.kind,
                });
            }
            at = end;
        }
        debug_assert_eq!(at, lsn.count, "one block record per block");
        Unlogged {
            first_lsn: lsn.first + self.logged as u64,
            entries,
            data: self.logged_data..self.data_blocks(),
        }
    }

    /// Everything appended so far is in the intent log.
    pub fn mark_logged(&mut self) {
        self.logged = self.lsn.map_or(0, |l| l.count);
        self.logged_data = self.data_blocks();
    }

    /// The data block at index `i` of the data area.
    pub fn data_block(&self, i: u32) -> &[u8] {
        let off = (1 + i as usize) * BLOCK_BYTES;
        &self.image[off..off + BLOCK_BYTES]
    }

    pub fn data_blocks(&self) -> u32 {
        self.crcs.len() as u32
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn extends(last: &Entry, lba: u64, kind: Kind, src: u32) -> bool {
        last.kind == kind
            && last.lba + last.count as u64 == lba
            && last.count < u32::MAX
            && match (last.src, src) {
                (NO_SRC, NO_SRC) => true,
                (NO_SRC, _) | (_, NO_SRC) => false,
                // data relocations stay contiguous in their source; virtual ones share a segment
                (a, b) => {
                    if kind == Kind::Data {
                        a as u64 + last.count as u64 == b as u64
                    } else {
                        a == b
                    }
                }
            }
    }

    /// Can one more block of this kind be appended?
    pub fn has_room(&self, lba: u64, kind: Kind, src: u32) -> bool {
        // no raw block after a packed one; a fragment may open two blocks
        if kind == Kind::Data && (self.data_blocks() >= self.cap_data || self.packer.is_some()) {
            return false;
        }
        if kind == Kind::Packed && self.data_blocks() + self.packed_blocks() + 2 > self.cap_data {
            return false;
        }
        self.entries.len() < MAX_ENTRIES
            || self
                .entries
                .last()
                .is_some_and(|l| Self::extends(l, lba, kind, src))
    }

    fn push_entry(&mut self, lba: u64, kind: Kind, src: u32) {
        match self.entries.last_mut() {
            Some(l) if Self::extends(l, lba, kind, src) => l.count += 1,
            _ => self.entries.push(Entry {
                lba,
                count: 1,
                kind,
                src,
            }),
        }
    }

    /// Append a data block; returns its block offset within the segment.
    pub fn push_data(&mut self, lba: u64, block: &[u8], src: u32) -> u32 {
        self.push_data_crc(lba, block, chunk::block_crc(block), src)
    }

    /// A data block whose bytes stay in its host write's buffer: that write
    /// claims it at the end of this engine lock hold (`Placed::claim_range`)
    /// and writes it at its place itself, so nothing is copied into the
    /// image (its slot there holds stale bytes, never read: see the module
    /// invariant). Returns its block offset within the segment.
    pub fn push_data_streamed(&mut self, lba: u64, crc: u32, src: u32) -> u32 {
        assert!(self.has_room(lba, Kind::Data, src), "chunk overflow");
        assert!(
            self.staged.is_none(),
            "a staged chunk's blocks have no place"
        );
        let idx = self.data_blocks();
        self.crcs.push(crc);
        self.push_entry(lba, Kind::Data, src);
        self.start + 1 + idx
    }

    /// Data block `i` (index into the data area) is not in the image: a
    /// streamed host write claimed it (`push_data_streamed`).
    pub fn is_streamed(&self, i: u32) -> bool {
        self.placed.as_ref().is_some_and(|p| p.is_claimed(i))
    }

    /// As `push_data`, for a block whose CRC32C is already known: a host write
    /// computed it before taking the engine lock, GC verified the block against
    /// its old chunk's CRC. Under the lock this is one 4 KiB copy.
    pub fn push_data_crc(&mut self, lba: u64, block: &[u8], crc: u32, src: u32) -> u32 {
        assert!(self.has_room(lba, Kind::Data, src), "chunk overflow");
        debug_assert_eq!(crc, chunk::block_crc(block));
        let idx = self.data_blocks() as usize;
        let off = (1 + idx) * BLOCK_BYTES;
        self.image[off..off + BLOCK_BYTES].copy_from_slice(block);
        self.crcs.push(crc);
        self.push_entry(lba, Kind::Data, src);
        self.start + 1 + idx as u32
    }

    pub fn push_virtual(&mut self, lba: u64, kind: Kind, src: u32) {
        debug_assert!(kind != Kind::Data && kind != Kind::Packed && self.has_room(lba, kind, src));
        self.push_entry(lba, kind, src);
    }

    /// Append a fragment as it is (GC of a compressed volume) with the CRC32C
    /// of its 4 KiB; returns its packed block's offset within the segment and
    /// its place there.
    pub fn push_fragment(
        &mut self,
        lba: u64,
        fragment: &[u8],
        raw_crc: u32,
        src: u32,
    ) -> (u32, crate::format::packed::Place) {
        assert!(
            self.staged.is_none() && self.has_room(lba, Kind::Packed, src),
            "chunk overflow"
        );
        let raw = self.data_blocks();
        let place = self
            .packer
            .get_or_insert_with(crate::format::packed::Packer::new)
            .push(fragment, raw_crc);
        self.push_entry(lba, Kind::Packed, src);
        (self.start + 1 + raw + place.block, place)
    }

    /// The buffered content of the block at `seg_off` (block offset in the segment), if it is here.
    pub fn block_at(&self, seg_off: u32) -> Option<&[u8]> {
        if self.staged.is_some() {
            return None;
        }
        let i = seg_off.checked_sub(self.start + 1)? as usize;
        if i < self.crcs.len() {
            return Some(&self.image[(1 + i) * BLOCK_BYTES..(2 + i) * BLOCK_BYTES]);
        }
        let p = self.packer.as_ref()?;
        let j = i - self.crcs.len();
        (j < p.blocks()).then(|| p.block(j))
    }

    /// Encode the header, compute the chunk CRC and hand back the image.
    pub fn seal(mut self, seq: u64, durable_seq: u64, uuid: [u8; 16], timestamp_ns: u64) -> Sealed {
        assert!(
            self.staged.is_none(),
            "a staged chunk is placed, not sealed in place"
        );
        if let Some(p) = self.packer.take() {
            // the packed blocks follow the raw ones
            let raw = self.data_blocks() as usize;
            let packed = p.finish();
            let at = (1 + raw) * BLOCK_BYTES;
            self.image[at..at + packed.len()].copy_from_slice(&packed);
            for b in packed.chunks_exact(BLOCK_BYTES) {
                self.crcs.push(chunk::block_crc(b));
            }
        }
        let data_blocks = self.data_blocks();
        let header = ChunkHeader {
            uuid,
            seq,
            segment: self.segment,
            stream: self.stream,
            timestamp_ns,
            durable_seq,
            data_blocks,
            entries: std::mem::take(&mut self.entries),
            block_crcs: std::mem::take(&mut self.crcs),
            lsn: self.lsn,
            chain: self.chain,
            mixed_check: self.mixed_check,
        };
        header.encode_into(&mut self.image[..BLOCK_BYTES]);
        let blocks = 1 + data_blocks;
        // Block CRCs were computed at append; only the header CRC remains.
        chunk::seal_crc(&mut self.image[..BLOCK_BYTES]);
        // (streamed blocks are not in the image: only a chunk without them verifies whole)
        debug_assert!(
            self.placed.is_some()
                || chunk::verify(&self.image[..blocks as usize * BLOCK_BYTES], &uuid).is_ok()
        );
        Sealed {
            seq,
            stream: self.stream,
            segment: self.segment,
            start: self.start,
            blocks,
            image: Arc::new(self.image),
            placed: self.placed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claiming and placing runs word by word sets exactly their bits,
    /// across word boundaries, and counts every claimed block in flight.
    #[test]
    fn runs_claim_and_place_exactly_their_blocks() {
        let p = Placed::default();
        p.claim_range(3, 70);
        p.claim_range(70, 71);
        p.claim_range(128, 192);
        p.claim(200);
        assert_eq!(p.inflight.load(Ordering::Acquire), 67 + 1 + 64 + 1);
        let claimed = |i| p.is_claimed(i);
        assert_eq!(runs(256, claimed), vec![(3, 71), (128, 192), (200, 201)]);
        p.finish(3, 71, true);
        p.finish(128, 192, false);
        p.finish(200, 201, true);
        assert_eq!(p.inflight.load(Ordering::Acquire), 0);
        assert_eq!(p.unplaced(256)[..2], [(0, 3), (71, 200)]);
        assert_eq!(p.claimed_unplaced(256), vec![(128, 192)]);
        assert_eq!(
            p.unclaimed(256),
            vec![(0, 3), (71, 128), (192, 200), (201, 256)]
        );
    }

    #[test]
    #[should_panic(expected = "claimed twice")]
    fn a_block_claimed_twice_panics() {
        let p = Placed::default();
        p.claim_range(60, 66);
        p.claim_range(65, 67);
    }
}
