//! CRC index: the CRC32C of every physical data block, in RAM, so a read verifies
//! the bytes it got from the media without reading their chunk header (no extra
//! media IO on the common path). 4 bytes per physical block of the segment area
//! (1 MiB of RAM per GiB of segments; pages of never-used segments are never
//! touched) plus 8 bytes per segment. It is not the map and not on the media.
//!
//! How entries get here:
//! - `record_chunk`: every chunk the engine writes, from its own header block,
//!   just before the media write (so before any read can go to the media for it:
//!   reads are served from the chunk's buffer until the chunk is written);
//! - `load_segment`: lazily, the first time a read needs a segment that was
//!   written before this mount, by walking its chunk headers on the media.
//!
//! Invariant (the reader's side, with the reuse lock held shared for the whole
//! read): when `expected(p)` returns Some(crc), `crc` is the CRC the chunk that
//! wrote block `p` in the segment's *current* incarnation recorded for it.
//! Why it holds: a segment is reused only under the reuse lock held exclusively
//! (so not during a read or a load), a reused segment is filled again from its
//! block 0, and recording its chunk at block 0 resets the segment's state (and
//! each later chunk's record overwrites its blocks' entries) before any read of
//! the new incarnation can reach the media. Entries of a freed segment are simply
//! left stale: no map value points there until new chunks overwrite them.

use crate::format::chunk::{self, ChunkHeader};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::media::AlignedBuf;
use crate::store::SegmentStore;
use std::sync::atomic::{AtomicU32, Ordering};

/// Segment state: entries not known (written before this mount; load first).
const UNKNOWN: u32 = 0;
const _: () = assert!(UNKNOWN == 0, "zeroed() makes every segment UNKNOWN");
/// Entries are valid for every block below `bad_from`.
const LOADED: u32 = 1;
/// `bad_from` value: every block of the segment has a known CRC.
const ALL: u32 = u32::MAX;

/// What the index knows about one physical block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The block's recorded CRC32C.
    Crc(u32),
    /// The segment was written before this mount and is not loaded yet.
    NotLoaded,
    /// The chunk header that would describe the block did not verify on the
    /// media: the block cannot be verified (it is damage).
    Unverifiable,
}

/// One chunk found by `walk`: its first block in the segment and its seq.
#[derive(Debug, Clone, Copy)]
pub struct ChunkAt {
    pub pos: u32,
    pub blocks: u32,
    pub seq: u64,
}

pub struct CrcIndex {
    seg_blocks: u32,
    uuid: [u8; 16],
    /// Per physical block (index = physical block number).
    crcs: Box<[AtomicU32]>,
    /// Per segment: UNKNOWN or LOADED.
    state: Box<[AtomicU32]>,
    /// Per segment: first block offset whose CRC is unknown (damaged header), or ALL.
    bad_from: Box<[AtomicU32]>,
}

/// A zeroed slice of atomics from one calloc'd allocation (pages the index
/// never touches cost no RSS).
fn zeroed(n: usize) -> Box<[AtomicU32]> {
    let v: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    // SAFETY: AtomicU32 has the same size, alignment and bit validity as u32,
    // and the box owns the allocation exclusively.
    unsafe { Box::from_raw(Box::into_raw(v) as *mut [AtomicU32]) }
}

impl CrcIndex {
    pub fn new(geo: &Geometry, uuid: [u8; 16]) -> CrcIndex {
        let segs = geo.segment_count as usize;
        let bad_from: Box<[AtomicU32]> = (0..segs).map(|_| AtomicU32::new(ALL)).collect();
        CrcIndex {
            seg_blocks: geo.segment_blocks,
            uuid,
            crcs: zeroed(segs * geo.segment_blocks as usize),
            state: zeroed(segs),
            bad_from,
        }
    }

    /// RAM the index holds (whether touched or not).
    pub fn memory_bytes(&self) -> u64 {
        (self.crcs.len() * 4 + self.state.len() * 8) as u64
    }

    /// Record the block CRCs of a chunk about to be written at block `start` of
    /// `segment`; `image` is the chunk (header block first).
    pub fn record_chunk(&self, segment: u32, start: u32, image: &[u8]) {
        let data = (image.len() / BLOCK_BYTES).saturating_sub(1);
        let base = segment as usize * self.seg_blocks as usize + start as usize + 1;
        for i in 0..data {
            let crc = chunk::stored_block_crc(image, i);
            self.crcs[base + i].store(crc, Ordering::Relaxed);
        }
        if start == 0 {
            // a new incarnation of the segment starts here: everything it will
            // hold is recorded by this and later `record_chunk` calls
            self.bad_from[segment as usize].store(ALL, Ordering::Relaxed);
            self.state[segment as usize].store(LOADED, Ordering::Release);
        }
    }

    /// What the index says about physical block `p`.
    #[inline]
    pub fn expected(&self, p: u32) -> Expect {
        let seg = (p / self.seg_blocks) as usize;
        if self.state[seg].load(Ordering::Acquire) != LOADED {
            return Expect::NotLoaded;
        }
        if p % self.seg_blocks >= self.bad_from[seg].load(Ordering::Relaxed) {
            return Expect::Unverifiable;
        }
        Expect::Crc(self.crcs[p as usize].load(Ordering::Relaxed))
    }

    /// Bring block `p`'s entry into the cache (a read whose verification
    /// comes later, on another thread: the NBD read ring looks up at
    /// submission and verifies at completion, where the miss would delay
    /// the reply).
    #[inline]
    pub fn touch(&self, p: u32) {
        if let Some(c) = self.crcs.get(p as usize) {
            std::hint::black_box(c.load(Ordering::Relaxed));
        }
    }

    pub fn is_loaded(&self, seg: u32) -> bool {
        self.state[seg as usize].load(Ordering::Acquire) == LOADED
    }

    /// Fill the entries of `seg` (blocks below `fill`) from its chunk headers on
    /// the media. The caller holds the reuse lock shared, so the segment is the
    /// incarnation the map points into. Returns where the walk stopped: `fill`
    /// when every chunk was found, and then the segment is Loaded; otherwise a
    /// header there does not verify, and the caller decides (it may have been
    /// wiped by a barrier because the segment was emptied meanwhile) whether to
    /// call `set_unverifiable_from`. Err only for a media error.
    pub fn load_segment(
        &self,
        store: &dyn SegmentStore,
        seg: u32,
        fill: u32,
    ) -> std::io::Result<u32> {
        let base = seg as u64 * self.seg_blocks as u64;
        let end = walk(store, &self.uuid, seg, fill, |at, h| {
            // every data block of the chunk, raw or packed (compressed
            // volumes' packed blocks follow the raw ones), as `record_chunk`
            // records them: data block i is chunk block 1 + i
            // MUTANT: crc-load-off-by-one s|at.pos as usize + 1;|at.pos as usize;|
            let first = base as usize + at.pos as usize + 1;
            for (i, &crc) in h.block_crcs.iter().enumerate() {
                self.crcs[first + i].store(crc, Ordering::Relaxed);
            }
        })?;
        if end >= fill {
            self.bad_from[seg as usize].store(ALL, Ordering::Relaxed);
            self.state[seg as usize].store(LOADED, Ordering::Release);
        }
        Ok(end)
    }

    /// The chunk header at block `end` of `seg` (which still holds live data)
    /// does not verify: blocks from there to `fill` cannot be verified.
    pub fn set_unverifiable_from(&self, seg: u32, end: u32, fill: u32) {
        self.bad_from[seg as usize].store(end, Ordering::Relaxed);
        self.state[seg as usize].store(LOADED, Ordering::Release);
        tracing::warn!(
            "segment {seg}: chunk header at block {end} does not verify; \
             blocks from there to the segment's fill ({fill}) cannot be verified"
        );
    }
}

/// Walk the chunk headers of segment `seg` on the media from block 0 up to
/// `fill`, calling `f` for each chunk whose header decodes, belongs to this
/// volume and segment and lies inside `fill`. Returns where the walk stopped
/// (== fill when every chunk was found). Reads one header block per chunk.
pub fn walk(
    store: &dyn SegmentStore,
    uuid: &[u8; 16],
    seg: u32,
    fill: u32,
    mut f: impl FnMut(ChunkAt, &ChunkHeader),
) -> std::io::Result<u32> {
    let mut buf = AlignedBuf::new(BLOCK_BYTES);
    let mut pos = 0u32;
    let mut last_seq = 0u64;
    while pos < fill {
        store.read_segment(seg, pos, &mut buf)?;
        let Ok(h) = ChunkHeader::decode(&buf) else {
            break;
        };
        let total = h.total_blocks();
        if &h.uuid != uuid || h.segment != seg || pos + total > fill || h.seq <= last_seq {
            break;
        }
        last_seq = h.seq;
        f(
            ChunkAt {
                pos,
                blocks: total,
                seq: h.seq,
            },
            &h,
        );
        pos += total;
    }
    Ok(pos)
}
