//! Core: the engine state guarded by the volume's one mutex: the map, the segment
//! table, the open chunk of each stream, and sealed chunks not yet known written.
//! Everything here is in-memory bookkeeping; the volume does the IO.
//!
//! Invariants kept here:
//! - every map value points at a block of a chunk that is open, in flight or written;
//! - a user record that supersedes a block held by the open GC chunk seals that GC
//!   chunk first, so a relocation always has a lower sequence number than any user
//!   record that overwrites it (replay then applies relocations unconditionally).

use crate::format::chunk::{Kind, Stream, MAX_CHUNK_BLOCKS, MAX_DATA_BLOCKS};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::log::{OpenChunk, Sealed};
use crate::map::{Loc, Map, Virt};
use crate::media::AlignedBuf;
use crate::segments::SegmentTable;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What to store for one logical block.
#[derive(Clone, Copy)]
pub enum What<'a> {
    Data(&'a [u8]),
    Virtual(Virt),
}

/// The stream has no segment to append to: GC (or a reuse barrier) must run first.
#[derive(Debug)]
pub struct NeedSpace;

pub struct InFlight {
    pub seq: u64,
    pub blocks: u32,
    pub image: Arc<AlignedBuf>,
}

pub struct Core {
    pub geo: Geometry,
    pub uuid: [u8; 16],
    pub map: Map,
    pub segs: SegmentTable,
    pub open: [Option<OpenChunk>; 2],
    pub open_seg: [Option<u32>; 2],
    pub next_seq: u64,
    /// Sealed chunks by first physical block; pruned once written.
    pub inflight: BTreeMap<u64, InFlight>,
    pub bytes_since_checkpoint: u64,
    /// The open chunk of this stream holds a record that emptied a segment now
    /// Pending: a reuse barrier must seal it (and only then) to free that segment.
    pub killed_pending: [bool; 2],
    /// Recycled chunk image buffers (each MAX_CHUNK_BLOCKS blocks).
    pool: Vec<AlignedBuf>,
}

const POOL_BUFFERS: usize = 32;

pub fn kind_of(v: Virt) -> Kind {
    match v {
        Virt::Trim => Kind::Trim,
        Virt::Zero => Kind::Zero,
        Virt::Ones => Kind::Ones,
    }
}

pub fn virt_of(k: Kind) -> Option<Virt> {
    match k {
        Kind::Data => None,
        Kind::Trim => Some(Virt::Trim),
        Kind::Zero => Some(Virt::Zero),
        Kind::Ones => Some(Virt::Ones),
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Core {
    pub fn new(geo: Geometry, uuid: [u8; 16], map: Map, segs: SegmentTable, next_seq: u64) -> Core {
        Core {
            geo,
            uuid,
            map,
            segs,
            open: [None, None],
            open_seg: [None, None],
            next_seq,
            inflight: BTreeMap::new(),
            bytes_since_checkpoint: 0,
            killed_pending: [false; 2],
            pool: Vec::new(),
        }
    }

    fn seg_blocks(&self) -> u32 {
        self.geo.segment_blocks
    }

    /// Close the chunk of `stream` (if it holds anything) and queue it for writing.
    /// `durable_seq`: every chunk below it is known flushed (recorded in the header).
    pub fn seal(&mut self, stream: Stream, durable_seq: u64, out: &mut Vec<Sealed>) {
        self.killed_pending[stream as usize] = false;
        let Some(ch) = self.open[stream as usize].take() else {
            return;
        };
        if ch.is_empty() {
            if self.pool.len() < POOL_BUFFERS {
                self.pool.push(ch.image);
            }
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let sealed = ch.seal(seq, durable_seq, self.uuid, now_ns());
        let seg_blocks = self.seg_blocks();
        let info = &mut self.segs.segs[sealed.segment as usize];
        info.fill = sealed.start + sealed.blocks;
        info.last_seq = seq;
        debug_assert!(info.fill <= seg_blocks);
        let full = seg_blocks - info.fill < 2;
        self.bytes_since_checkpoint += sealed.blocks as u64 * BLOCK_BYTES as u64;
        let phys = sealed.segment as u64 * seg_blocks as u64 + sealed.start as u64;
        self.inflight.insert(
            phys,
            InFlight {
                seq,
                blocks: sealed.blocks,
                image: sealed.image.clone(),
            },
        );
        if full {
            self.close_segment(sealed.segment);
            self.open_seg[stream as usize] = None;
        }
        out.push(sealed);
    }

    fn close_segment(&mut self, seg: u32) {
        let before = self.segs.pending.len();
        self.segs.close(seg);
        if self.segs.pending.len() > before {
            // whatever emptied it may sit in either stream's open chunk
            self.killed_pending = [true, true];
        }
    }

    /// GC is done with `victim`. If it is now empty it becomes Pending, and the
    /// records that emptied it (relocations in the open GC chunk, overwrites in
    /// the user chunk) must be sealed by the barrier that frees it.
    pub fn end_victim(&mut self, victim: u32) {
        let before = self.segs.pending.len();
        self.segs.end_victim(victim);
        if self.segs.pending.len() > before {
            self.killed_pending = [true, true];
        }
    }

    /// Seal the open chunks that a reuse barrier needs durable.
    pub fn seal_for_barrier(&mut self, durable_seq: u64, out: &mut Vec<Sealed>) {
        for stream in [Stream::User, Stream::Gc] {
            if self.killed_pending[stream as usize] {
                self.seal(stream, durable_seq, out);
            }
        }
    }

    /// Forget in-flight images of chunks known to be on the media.
    pub fn prune_inflight(&mut self, written_through: u64) {
        if self.inflight.len() > 8 {
            let done: Vec<u64> = self
                .inflight
                .iter()
                .filter(|(_, f)| f.seq < written_through)
                .map(|(k, _)| *k)
                .collect();
            for k in done {
                let f = self.inflight.remove(&k).expect("present");
                self.recycle(f.image);
            }
        }
    }

    /// Keep a written chunk's buffer for the next chunk (saves a 1 MiB zeroed
    /// allocation and its page faults per chunk).
    fn recycle(&mut self, image: Arc<AlignedBuf>) {
        if let Ok(buf) = Arc::try_unwrap(image) {
            if self.pool.len() < POOL_BUFFERS {
                self.pool.push(buf);
            }
        }
    }

    fn open_chunk(&mut self, stream: Stream, reserve: u32) -> Result<(), NeedSpace> {
        let seg_blocks = self.seg_blocks();
        let seg = match self.open_seg[stream as usize] {
            Some(s) if seg_blocks - self.segs.segs[s as usize].fill >= 2 => s,
            other => {
                if let Some(s) = other {
                    self.close_segment(s);
                    self.open_seg[stream as usize] = None;
                }
                let allowed = match stream {
                    Stream::User => self.segs.free.len() > reserve as usize,
                    Stream::Gc => !self.segs.free.is_empty(),
                };
                if !allowed {
                    return Err(NeedSpace);
                }
                let s = self.segs.take_free(stream).ok_or(NeedSpace)?;
                self.open_seg[stream as usize] = Some(s);
                s
            }
        };
        let start = self.segs.segs[seg as usize].fill;
        let cap = MAX_DATA_BLOCKS.min(seg_blocks - start - 1);
        let image = self
            .pool
            .pop()
            .unwrap_or_else(|| AlignedBuf::new(MAX_CHUNK_BLOCKS as usize * BLOCK_BYTES));
        self.open[stream as usize] = Some(OpenChunk::new(stream, seg, start, cap, image));
        Ok(())
    }

    /// Is `loc` held by the open GC chunk (so a user record superseding it must
    /// be sequenced after that chunk)?
    fn held_by_open_gc(&self, loc: Loc) -> bool {
        let Some(gc) = &self.open[Stream::Gc as usize] else {
            return false;
        };
        if gc.is_empty() {
            return false;
        }
        let sb = self.seg_blocks() as u64;
        match loc {
            Loc::Data(p) => {
                p as u64 / sb == gc.segment as u64 && gc.block_at((p as u64 % sb) as u32).is_some()
            }
            Loc::Virtual(_, s) => s == gc.segment,
            Loc::Unmapped => false,
        }
    }

    /// Append one block record to `stream` and point the map at it.
    /// `src`: for GC relocations, where it was copied from (recorded, see format).
    pub fn append(
        &mut self,
        stream: Stream,
        lba: u64,
        what: What<'_>,
        src: u32,
        reserve: u32,
        durable_seq: u64,
        out: &mut Vec<Sealed>,
    ) -> Result<(), NeedSpace> {
        debug_assert!(lba < self.map.len());
        if stream == Stream::User && self.held_by_open_gc(self.map.get(lba)) {
            self.seal(Stream::Gc, durable_seq, out);
        }
        // Trim and zero records free space: they may dip into the GC reserve
        // (all but its last segment) so a full volume can always be trimmed.
        let reserve_for = match what {
            What::Data(_) => reserve,
            What::Virtual(_) => reserve.min(1),
        };
        let kind = match what {
            What::Data(_) => Kind::Data,
            What::Virtual(v) => kind_of(v),
        };
        loop {
            match &self.open[stream as usize] {
                Some(ch) if ch.has_room(lba, kind, src) => break,
                Some(_) => self.seal(stream, durable_seq, out),
                None => self.open_chunk(stream, reserve_for)?,
            }
        }
        let seg_blocks = self.seg_blocks();
        let ch = self.open[stream as usize].as_mut().expect("open chunk");
        let new = match what {
            What::Data(b) => {
                let off = ch.push_data(lba, b, src);
                Loc::Data(ch.segment * seg_blocks + off)
            }
            What::Virtual(v) => {
                ch.push_virtual(lba, kind, src);
                Loc::Virtual(v, ch.segment)
            }
        };
        let pending_before = self.segs.pending.len();
        self.remap(lba, new);
        if self.segs.pending.len() > pending_before {
            self.killed_pending[stream as usize] = true;
        }
        Ok(())
    }

    /// Point `lba` at `new`, keeping the live counts of both segments true.
    pub fn remap(&mut self, lba: u64, new: Loc) {
        let old = self.map.set(lba, new);
        let sb = self.seg_blocks();
        if let Some(s) = old.segment(sb) {
            self.segs.drop_live(s, matches!(old, Loc::Data(_)));
        }
        if let Some(s) = new.segment(sb) {
            self.segs.add_live(s, matches!(new, Loc::Data(_)));
        }
    }

    /// The content of physical block `p` if it is still in memory (open or in flight).
    pub fn buffered(&self, p: u32) -> Option<&[u8]> {
        let sb = self.seg_blocks();
        let (seg, off) = (p / sb, p % sb);
        for ch in self.open.iter().flatten() {
            if ch.segment == seg {
                if let Some(b) = ch.block_at(off) {
                    return Some(b);
                }
            }
        }
        let (&start, f) = self.inflight.range(..=p as u64).next_back()?;
        let i = p as u64 - start;
        (i < f.blocks as u64)
            .then(|| &f.image[i as usize * BLOCK_BYTES..(i as usize + 1) * BLOCK_BYTES])
    }

    pub fn user_chunk_age(&self) -> Option<std::time::Duration> {
        self.open[Stream::User as usize]
            .as_ref()
            .filter(|c| !c.is_empty())
            .map(|c| c.opened.elapsed())
    }
}
