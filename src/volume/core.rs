//! Core: the engine state guarded by the volume's one mutex: the map, the segment
//! table, the open chunk of each stream, and sealed chunks not yet known written.
//! Everything here is in-memory bookkeeping; the volume does the IO.
//!
//! Invariants kept here:
//! - every map value points at a block of a chunk that is open, in flight or written;
//! - a user record that supersedes a block held by the open chunk of another slot
//!   (any GC class) seals that chunk first, so a relocation
//!   always has a lower sequence number than any user record that overwrites it
//!   (replay then applies relocations unconditionally);
//! - a block held by an open chunk is never relocated (victims are Closed), so two
//!   GC classes never hold relocations of the same block at once.
//! - the in-flight images (`inflight`) are of chunks of their segment's current
//!   life and never overlap: the barrier that frees a segment drops its images
//!   (`release`), so `buffered` never answers a block of a reused segment with
//!   bytes of its previous life.
//!
//! Open chunks live in slots: slot 0 is the user stream, slots GC0.. are GC
//! output classes. On the media they are just Stream::User / Stream::Gc; the slot only
//! decides which segment a record joins (see gc.rs).

use crate::format::chunk::{Chain, Kind, LsnRange, Stream, MAX_CHUNK_BLOCKS, MAX_DATA_BLOCKS};
use crate::format::codec::{self, Place};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::log::{ChunkPool, OpenChunk, Placed, Sealed};
use crate::map::{Loc, Map, Virt};
use crate::media::AlignedBuf;
use crate::segments::{SegState, SegmentTable};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

pub use crate::gc::GC_CLASSES;
/// First GC slot. Host writes have exactly one slot (0): splitting them between
/// two open chunks would let a crash keep a later write and lose an earlier one
/// (the crash sweep demands a prefix of the accepted writes), so only GC output,
/// which never changes what a block reads, is separated.
pub const GC0: usize = 1;
pub const SLOTS: usize = GC0 + GC_CLASSES;
const _: () = assert!(SLOTS as u32 <= crate::geometry::OPEN_SEGMENTS);
const _: () = assert!(SLOTS <= crate::format::chunk::CHAIN_CLASSES);

/// What to store for one logical block.
#[derive(Clone, Copy)]
pub enum What<'a> {
    /// A host data block and its CRC32C (computed before the engine lock).
    Data(&'a [u8], u32),
    /// A host data block its request streams to its place itself and claims
    /// before this engine lock hold ends (`Shared::append_run`): not copied
    /// into the chunk image unless the chunk has no place (staged).
    Streamed(&'a [u8], u32),
    /// A data block GC moves, with the CRC32C it was verified against.
    Moved(&'a [u8], u32),
    /// A fragment GC moves as it is, with the CRC32C of its 4 KiB.
    MovedFragment(&'a [u8], u32),
    Virtual(Virt),
}

/// Which records of a victim one pass of `Core::relocate` moves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Raw blocks and virtual records.
    Raw,
    /// Fragments.
    Fragments,
    /// Everything in record order (only the mutation `gc-fragments-in-record-order`).
    #[allow(dead_code)]
    Both,
}

/// Why a relocation stopped.
pub enum RelocateError {
    Damaged(String),
    NoSpace,
}

/// The stream has no segment to append to: GC (or a reuse barrier) must run first.
#[derive(Debug)]
pub struct NeedSpace;

pub struct InFlight {
    pub seq: u64,
    pub blocks: u32,
    pub image: Arc<AlignedBuf>,
    /// Its streamed data blocks (claimed: not in `image`).
    pub placed: Option<Arc<Placed>>,
}

/// A block still in memory (`Core::buffered_data`): its bytes, or, for a
/// streamed block (not in its chunk's image), where to find it once its
/// placing write completed and the CRC32C to check it against.
pub enum Buffered<'a> {
    Bytes(&'a [u8]),
    Streamed {
        placed: Arc<Placed>,
        idx: u32,
        crc: u32,
    },
}

pub struct Core {
    pub geo: Geometry,
    pub uuid: [u8; 16],
    pub map: Map,
    pub segs: SegmentTable,
    /// Open chunk and segment per slot (0 = user, GC0.. = GC classes).
    pub open: [Option<OpenChunk>; SLOTS],
    pub open_seg: [Option<u32>; SLOTS],
    /// GC class slot the next relocations go to (set by `relocate`).
    pub gc_slot: usize,
    /// The GC policy (gc.rs) that decides GC classes.
    pub policy: crate::gc::GcPolicy,
    /// GC classes in use: 1 (one GC stream) or GC_CLASSES (generational policies).
    pub gc_classes: usize,
    /// Lifetime unit l of the age classes for GC output (0 = classes by generation).
    pub hot_lifetime: u64,
    /// Host data blocks appended so far (the clock for lifetimes).
    pub user_clock: u64,
    /// Estimated life (host blocks) of the data `relocate` is moving now, passed
    /// to the GC output segment's `prior` (decay hints; 0 = none).
    pub gc_src_life: f32,
    /// Per logical block, the (wrapping, 32-bit) user clock of its last host
    /// write; allocated only when `hot_lifetime` > 0. In memory only.
    pub last_write: Vec<u32>,
    pub next_seq: u64,
    /// Sealed chunks by first physical block; pruned once written.
    pub inflight: BTreeMap<u64, InFlight>,
    /// Host data blocks copied into a user chunk's image (streamed ones are
    /// not: `What::Streamed`), this session.
    pub image_copied_blocks: u64,
    pub bytes_since_checkpoint: u64,
    /// The open chunk of this stream holds a record that emptied a segment now
    /// Pending: a reuse barrier must seal it (and only then) to free that segment.
    pub killed_pending: [bool; SLOTS],
    /// Chunk image buffers, shared with the commit stage (whichever of the
    /// two lets go of a sealed image last gives it back).
    pub pool: Arc<ChunkPool>,
    /// `Progress::writes_seen` at the last prune (nothing to prune until a
    /// chunk write completes).
    pruned_through: u64,
    /// Source of chunk header timestamps (the mount's `OpenOptions::clock`).
    pub clock: super::WallClock,
    /// Format v2 (LSN feature): every user block record gets the next LSN, in
    /// arrival order under this lock, and chunk headers carry their range.
    pub lsn_on: bool,
    pub next_lsn: u64,
    /// User chunks sealed and not yet known durable: (seq, end of their LSNs).
    user_seals: VecDeque<(u64, u64)>,
    /// Every LSN below this is in a durable main-log chunk.
    pub durable_lsn: u64,
    /// `next_lsn` when a segment last became Pending: the records that
    /// emptied it are below it, and the barrier that frees it must have them
    /// durable in the main log, never only in the intent log.
    pub kill_lsn: u64,
    /// The intent log ring, if the volume has one.
    pub ring: Option<super::intent::Ring>,
    /// Format v2 `CHAIN`: every sealed chunk names the previous chunk of its
    /// slot (`chunk::Chain`, class = slot), `chain_last[slot]` (0: none
    /// sealed since the mount).
    pub chain_on: bool,
    pub chain_last: [u64; SLOTS],
    /// Format v2 `MIXED_HEADER_CHECK` (stripe sets): every chunk header's
    /// check is `chunk::mix` of its CRC32C (`chunk::MIXED_CHECK_FLAG`).
    pub mixed_check: bool,
    /// A compressed volume (format v2 `COMPRESSION`): the user chunk is
    /// staged, packed off the lock and placed in seq order.
    pub compressed: bool,
    /// Sealed user chunks not yet placed, in seq order (docs/compression.md).
    pub staged: VecDeque<super::packer::StagedChunk>,
    next_staged_id: u32,
    /// Sums of every packing since mount (stats).
    pub packed_tally: super::packer::Tally,
    /// Segments taken (Open, empty) for staged chunks that will not fit the
    /// user segment: placement takes them in order (`open_staged`).
    pub user_spare: VecDeque<u32>,
    /// Segments placement had to take that `open_staged`'s plan had not
    /// promised (`user_spare` empty): 0 while the plan follows `place`
    /// (such a take may dip into the GC reserve, or find none: ENOSPC).
    pub unplanned_takes: u64,
    /// GC records placed in another class's segment for want of a free
    /// segment (`append`).
    pub gc_class_fallbacks: u64,
    /// A compressed volume's user stream looks incompressible: its user
    /// chunks are opened at a final place, as an uncompressed volume's
    /// (no staging, packing or placement), and only sampled after their seal
    /// (`to_sample`). Set when `packer::DIRECT_AFTER` tested blocks in a row
    /// were not kept (`note_packed`), cleared when a packed chunk kept one
    /// or a sample compressed (`note_compressible`). RAM only: a mount
    /// starts staged. The first chunk sealed after it is set is placed raw
    /// at its seal (`seal_slot`), so the next one can open direct.
    pub direct: bool,
    /// Tested data blocks in a row that LZ4 did not keep.
    incompressible_run: u64,
    /// Sealed direct user chunks whose sample is due (image, data blocks):
    /// taken by the sealing thread (`Shared::pack_staged`).
    pub to_sample: Vec<(Arc<crate::media::AlignedBuf>, u32)>,
    /// The segment store, told of every segment the engine closes
    /// (`SegmentStore::closed`, a memory-only call): None in tests of the
    /// engine alone.
    pub closes: Option<Arc<dyn crate::store::SegmentStore>>,
}

pub use crate::map::{kind_of, virt_of};

/// Sealed direct chunks kept for their sample at most (a path that seals
/// without sampling after cannot hold many images: the rest go unsampled).
const MAX_TO_SAMPLE: usize = 8;

impl Core {
    pub fn new(geo: Geometry, uuid: [u8; 16], map: Map, segs: SegmentTable, next_seq: u64) -> Core {
        Core {
            geo,
            uuid,
            map,
            segs,
            open: Default::default(),
            open_seg: [None; SLOTS],
            gc_slot: GC0,
            policy: crate::gc::GcPolicy::Greedy,
            gc_classes: 1,
            hot_lifetime: 0,
            user_clock: 0,
            gc_src_life: 0.0,
            last_write: Vec::new(),
            next_seq,
            inflight: BTreeMap::new(),
            image_copied_blocks: 0,
            bytes_since_checkpoint: 0,
            killed_pending: [false; SLOTS],
            // (a chunk never spans segments: small segments need small buffers)
            pool: Arc::new(ChunkPool::new(
                MAX_CHUNK_BLOCKS.min(geo.segment_blocks) as usize * BLOCK_BYTES,
            )),
            pruned_through: 0,
            clock: super::WallClock::System,
            lsn_on: false,
            next_lsn: 0,
            user_seals: VecDeque::new(),
            durable_lsn: 0,
            kill_lsn: 0,
            ring: None,
            chain_on: false,
            chain_last: [0; SLOTS],
            mixed_check: false,
            compressed: false,
            staged: VecDeque::new(),
            next_staged_id: 0,
            packed_tally: Default::default(),
            user_spare: VecDeque::new(),
            unplanned_takes: 0,
            gc_class_fallbacks: 0,
            direct: false,
            incompressible_run: 0,
            to_sample: Vec::new(),
            closes: None,
        }
    }

    /// Start numbering user block records at `lsn` (mount).
    pub fn start_lsn(&mut self, lsn: u64) {
        self.lsn_on = true;
        self.next_lsn = lsn;
        self.durable_lsn = lsn;
        self.kill_lsn = lsn;
    }

    /// Every chunk below `durable_seq` is durable: raise `durable_lsn` past the
    /// user chunks among them.
    pub fn note_durable(&mut self, durable_seq: u64) -> u64 {
        while let Some(&(seq, end)) = self.user_seals.front() {
            if seq >= durable_seq {
                break;
            }
            self.user_seals.pop_front();
            self.durable_lsn = self.durable_lsn.max(end);
        }
        self.durable_lsn
    }

    /// Every user block record below this LSN is in a sealed user chunk:
    /// where the open user chunk starts, or `next_lsn` when none is open.
    fn sealed_lsn_end(&self) -> u64 {
        self.open[0]
            .as_ref()
            .and_then(|c| c.lsn)
            .map_or(self.next_lsn, |l| l.first)
    }

    /// Segments just became Pending: whatever emptied them may sit in any
    /// slot's open chunk, so the next barrier seals them all.
    fn mark_killed(&mut self) {
        self.killed_pending = [true; SLOTS];
        self.kill_lsn = self.next_lsn;
    }

    /// FLUSH or FUA with an intent log: if the open user chunk's unlogged
    /// block records are few (`LOG_MAX_DATA_BLOCKS` for each of the
    /// `members` host FLUSHes of a FLUSH group; any number a version 3
    /// record holds, whose data is written once either way) and fit the ring, build
    /// their record and leave the chunk open (Ok(Some)); if they are too many
    /// or the ring is full, seal the chunk into `out` (Ok(None)); with nothing
    /// unlogged, do neither. Without a ring: seal.
    pub fn flush_plan(
        &mut self,
        durable_seq: u64,
        members: u32,
        out: &mut Vec<Sealed>,
    ) -> Option<super::intent::PlannedRecord> {
        let uuid = self.uuid;
        if let (Some(ring), Some(ch)) = (self.ring.as_mut(), self.open[0].as_mut()) {
            let (records, data) = ch.unlogged_counts();
            if records == 0 {
                return None;
            }
            // version 3 writes the data once whichever way: log whenever
            // the record fits (`Ring::plan`), keeping the chunk open
            // a FLUSH group's record (`fill.rs`) logs what its `members`
            // FLUSHes would each have: the limit is per host FLUSH
            let most = super::intent::LOG_MAX_DATA_BLOCKS.saturating_mul(members.max(1));
            if data <= most || (ring.indirect && ch.staged.is_none()) {
                if let Some(r) = ring.plan(ch, uuid, &self.pool) {
                    return Some(r);
                }
            }
        }
        self.seal(Stream::User, durable_seq, out);
        None
    }

    fn seg_blocks(&self) -> u32 {
        self.geo.segment_blocks
    }

    /// Close the open chunk of `stream` (for Gc: of every GC class) if it holds
    /// anything and queue it for writing.
    /// `durable_seq`: every chunk below it is known flushed (recorded in the header).
    pub fn seal(&mut self, stream: Stream, durable_seq: u64, out: &mut Vec<Sealed>) {
        match stream {
            Stream::User => {
                self.seal_slot(0, durable_seq, out);
            }
            Stream::Gc => {
                for slot in GC0..SLOTS {
                    self.seal_slot(slot, durable_seq, out);
                }
            }
        }
    }

    /// Slot for a record of `stream` for `lba`: host writes use slot 0; GC output
    /// goes to the class `relocate` chose, or with a lifetime policy to the class
    /// of the block's age since its last host write (SepBIT's GC classes).
    fn slot_of(&self, stream: Stream, lba: u64) -> usize {
        match stream {
            // Lifetime-separating policies sort GC output by the block's age
            // (SepBIT's GC classes): < l, < 4 l, older.
            Stream::Gc if self.hot_lifetime > 0 => {
                let age = match self.last_write.get(lba as usize) {
                    Some(&last) if last != 0 => {
                        Some((self.user_clock as u32).wrapping_sub(last) as u64)
                    }
                    _ => None,
                };
                GC0 + crate::gc::age_class(age, self.hot_lifetime).min(GC_CLASSES - 1)
            }
            Stream::Gc => self.gc_slot,
            Stream::User => 0,
        }
    }

    /// Whether a GC record for `lba` fits `slot` without a free segment:
    /// its open chunk takes it, or its open segment keeps `room` blocks
    /// (header included) after that chunk.
    fn gc_slot_fits(&self, slot: usize, lba: u64, kind: Kind, src: u32, room: u32) -> bool {
        if let Some(ch) = &self.open[slot] {
            if ch.has_room(lba, kind, src) {
                return true;
            }
        }
        let Some(seg) = self.open_seg[slot] else {
            return false;
        };
        let fill = self.segs.segs[seg as usize].fill;
        let used = match &self.open[slot] {
            Some(ch) => fill.max(ch.start + 1 + ch.data_blocks() + ch.packed_blocks()),
            None => fill,
        };
        self.seg_blocks().saturating_sub(used) >= room
    }

    fn seal_slot(&mut self, slot: usize, durable_seq: u64, out: &mut Vec<Sealed>) {
        self.killed_pending[slot] = false;
        let Some(mut ch) = self.open[slot].take() else {
            return;
        };
        if ch.is_empty() {
            self.pool.put(ch.image);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if let (Stream::User, Some(l)) = (ch.stream, ch.lsn) {
            self.user_seals.push_back((seq, l.end()));
        }
        // MUTANT: chain-not-written s|if self.chain_on {|if false {|
        if self.chain_on {
            ch.chain = Some(Chain {
                class: slot as u8,
                prev_seq: self.chain_last[slot],
            });
            self.chain_last[slot] = seq;
        }
        ch.mixed_check = self.mixed_check;
        if let Some(id) = ch.staged {
            // a compressed volume's user chunk: sequenced now, packed off the
            // lock, placed in seq order (`place_ready`)
            let mut st = super::packer::StagedChunk {
                id,
                seq,
                durable_seq,
                timestamp_ns: self.clock.unix_ns(),
                entries: std::mem::take(&mut ch.entries),
                crcs: std::mem::take(&mut ch.crcs),
                lsn: ch.lsn,
                chain: ch.chain,
                raw: Arc::new(ch.image),
                taken: false,
                packed: None,
            };
            if self.direct && self.staged.is_empty() && self.can_place(1 + st.crcs.len() as u32) {
                // the stream turned incompressible while this chunk was
                // open: place it raw now, untested (sampled like a direct
                // chunk), so the next user chunk opens direct
                let n = st.crcs.len();
                st.packed = Some(super::packer::PackedChunk {
                    entries: st.entries.clone(),
                    crcs: st.crcs.clone(),
                    image: None,
                    raw_blocks: n as u32,
                    records: super::packer::raw_records(&st.entries, n),
                    tally: super::packer::Tally::untested(n as u64),
                });
                self.place(st, out);
                if n > 0 && self.to_sample.len() < MAX_TO_SAMPLE {
                    let image = out.last().expect("placed").image.clone();
                    self.to_sample.push((image, n as u32));
                }
                return;
            }
            self.staged.push_back(st);
            return;
        }
        if let (Stream::Gc, Some(l)) = (ch.stream, ch.lsn.as_mut()) {
            // A GC chunk's first_lsn (count 0) is the user stream's sealed
            // LSN end: every user block record below it is in a chunk with a
            // lower seq. Replay raises the main log's LSN to it, so the LSNs
            // of a dead user chunk (its segment reused, its blocks moved by
            // GC) are not a gap that ends intent log replay (seed 72).
            // MUTANT: gc-lsn-watermark s|self.sealed_lsn_end()|0|
            l.first = self.sealed_lsn_end();
        }
        let sealed = ch.seal(seq, durable_seq, self.uuid, self.clock.unix_ns());
        if self.compressed && slot == 0 && sealed.blocks > 1 {
            // a direct user chunk of a compressed volume (`direct`): its
            // blocks were not tested; a sample of them is, off the lock
            let n = sealed.blocks - 1;
            self.packed_tally
                .add(&super::packer::Tally::untested(n as u64));
            if self.to_sample.len() < MAX_TO_SAMPLE {
                self.to_sample.push((sealed.image.clone(), n));
            }
        }
        let seg_blocks = self.seg_blocks();
        let info = &mut self.segs.segs[sealed.segment as usize];
        // chunks of a segment are sealed in place order and seq order
        assert!(
            sealed.start >= info.fill && seq >= info.last_seq,
            "seal order"
        );
        info.fill = sealed.start + sealed.blocks;
        info.last_seq = seq;
        assert!(info.fill <= seg_blocks);
        let full = seg_blocks - info.fill < 2;
        self.bytes_since_checkpoint += sealed.blocks as u64 * BLOCK_BYTES as u64;
        let phys = sealed.segment as u64 * seg_blocks as u64 + sealed.start as u64;
        // in-flight images never overlap: `buffered` takes the nearest start
        // at or below a block (a segment's images go when it is freed: `release`)
        assert!(
            self.inflight
                .range(..phys + sealed.blocks as u64)
                .next_back()
                .is_none_or(|(&k, f)| k + f.blocks as u64 <= phys),
            "in-flight chunk images overlap"
        );
        self.inflight.insert(
            phys,
            InFlight {
                seq,
                blocks: sealed.blocks,
                image: sealed.image.clone(),
                placed: sealed.placed.clone(),
            },
        );
        if full {
            self.close_segment(sealed.segment);
            self.open_seg[slot] = None;
        }
        out.push(sealed);
    }

    fn close_segment(&mut self, seg: u32) {
        // the store learns the segment's final fill: a parity set finishes
        // its last partial row and frees that row's scratch lane
        // (docs/stripes.md §0 finding 8; memory only, under this lock)
        if let Some(store) = &self.closes {
            // MUTANT: close-hook-skipped s|store.closed(seg, self.segs.segs[seg as usize].fill);|let _ = store;|
            store.closed(seg, self.segs.segs[seg as usize].fill);
        }
        let before = self.segs.pending.len();
        self.segs.close(seg);
        if self.segs.pending.len() > before {
            // whatever emptied it may sit in any slot's open chunk
            self.mark_killed();
        }
    }

    /// GC is done with `victim`. If it is now empty it becomes Pending, and the
    /// records that emptied it (relocations in the open GC chunk, overwrites in
    /// the user chunk) must be sealed by the barrier that frees it.
    pub fn end_victim(&mut self, victim: u32) {
        let before = self.segs.pending.len();
        self.segs.end_victim(victim);
        if self.segs.pending.len() > before {
            self.mark_killed();
        }
    }

    /// Seal the open chunks that a reuse barrier needs durable. Returns how
    /// many it sealed (each one part-filled: a full chunk is sealed when full).
    pub fn seal_for_barrier(&mut self, durable_seq: u64, out: &mut Vec<Sealed>) -> u64 {
        let mut sealed = 0;
        for slot in 0..SLOTS {
            if self.killed_pending[slot] {
                sealed += self.open[slot].as_ref().is_some_and(|c| !c.is_empty()) as u64;
                self.seal_slot(slot, durable_seq, out);
            }
        }
        sealed
    }

    /// The reuse barrier frees `segs`: every chunk below `target` is written
    /// and flushed and their first blocks are wiped. They go back to the free
    /// list, and the in-flight images of their chunks (written, but not yet
    /// pruned: `prune_inflight` runs only when more than 8 are kept) are dropped with them. A segment
    /// may be taken again at once, and `buffered` finds a block's image by the
    /// nearest chunk start at or below it: an image of the segment's previous
    /// life starting between a new chunk's start and one of its blocks would
    /// answer that block with the old bytes, unverified (a sub-block write then
    /// merged its data into them and wrote the mix, a block no request wrote).
    pub fn release(&mut self, segs: &[u32], target: u64) {
        self.segs.release(segs);
        let sb = self.seg_blocks() as u64;
        for &s in segs {
            // MUTANT: stale-inflight-kept s|.state != SegState::Free|.state == SegState::Free|
            if self.segs.segs[s as usize].state != SegState::Free {
                continue;
            }
            let range = s as u64 * sb..(s as u64 + 1) * sb;
            let stale: Vec<u64> = self.inflight.range(range).map(|(&k, _)| k).collect();
            for k in stale {
                let f = self.inflight.remove(&k).expect("present");
                assert!(
                    f.seq < target,
                    "a freed segment's chunk {} is not flushed",
                    f.seq
                );
                self.pool.release(f.image);
            }
        }
    }

    /// Forget in-flight images of chunks known to be on the media: each one
    /// as soon as its own write completed, not when `written_through` passes
    /// it (one chunk held back, e.g. a GC chunk waiting for queue space, kept
    /// every later image in memory: about 240 MiB at the peak of a
    /// `bench ceiling`). A completed chunk reads from the media like any
    /// other; one whose write failed never completes and stays here.
    pub(in crate::volume) fn prune_inflight(&mut self, p: &super::commit::Progress) {
        if self.inflight.len() > 8 && p.writes_seen() > self.pruned_through {
            self.pruned_through = p.writes_seen();
            // An image goes only once every earlier chunk of its segment is
            // written too: the CRC index learns a segment's new incarnation
            // from the chunk at its block 0 (`CrcIndex::record_chunk`, just
            // before that chunk's write). A later chunk written first (two
            // writer threads) and pruned sent its reads to the media while
            // the index still knew nothing of the segment: the lazy load
            // found no header at block 0 and the read answered EIO for a
            // good block (compress_stress, threads that ship). Images are
            // keyed by physical block, so a segment's are adjacent, in place
            // order.
            let sb = self.seg_blocks() as u64;
            let mut held: Option<u64> = None; // a segment with an unwritten chunk
            let done: Vec<u64> = self
                .inflight
                .iter()
                .filter(|(&k, f)| {
                    if !p.is_written(f.seq) {
                        held = Some(k / sb);
                        return false;
                    }
                    // MUTANT: prune-past-unwritten-chunk s|held != Some(k / sb)|true|
                    held != Some(k / sb)
                })
                .map(|(k, _)| *k)
                .collect();
            for k in done {
                let f = self.inflight.remove(&k).expect("present");
                self.pool.release(f.image);
            }
        }
    }

    /// `room`: blocks the chunk needs at least (header included): 2, or 3
    /// for a fragment (which may open two packed blocks).
    fn open_chunk(&mut self, slot: usize, reserve: u32, room: u32) -> Result<(), NeedSpace> {
        let stream = if slot < GC0 { Stream::User } else { Stream::Gc };
        let seg_blocks = self.seg_blocks();
        // (a compressed volume's user stream that looks incompressible opens
        // direct chunks once no staged chunk waits to be placed: `direct`)
        let direct = self.direct && self.staged.is_empty();
        if stream == Stream::User && self.compressed && !direct {
            return self.open_staged(reserve);
        }
        let seg = match self.open_seg[slot] {
            Some(s) if seg_blocks - self.segs.segs[s as usize].fill >= room => s,
            other => {
                if let Some(s) = other {
                    // (a segment with a block or two left is closed as full)
                    self.close_segment(s);
                    self.open_seg[slot] = None;
                }
                // (a compressed volume's direct chunk first takes a segment
                // staged chunks had taken and did not need: `user_spare`)
                let spare = match stream {
                    Stream::User => self.user_spare.pop_front(),
                    Stream::Gc => None,
                };
                let allowed = match stream {
                    _ if spare.is_some() => true,
                    Stream::User => self.segs.free.len() > reserve as usize,
                    Stream::Gc => !self.segs.free.is_empty(),
                };
                if !allowed {
                    return Err(NeedSpace);
                }
                let s = match spare {
                    Some(s) => s,
                    None => self.segs.take_free(stream).ok_or(NeedSpace)?,
                };
                let si = &mut self.segs.segs[s as usize];
                si.gen = slot.saturating_sub(GC0 - 1) as u8;
                self.open_seg[slot] = Some(s);
                s
            }
        };
        let start = self.segs.segs[seg as usize].fill;
        let cap = MAX_DATA_BLOCKS.min(seg_blocks - start - 1);
        let image = self.pool.get();
        let mut ch = OpenChunk::new(stream, seg, start, cap, image);
        if self.lsn_on {
            ch.lsn = Some(LsnRange {
                first: if stream == Stream::User {
                    self.next_lsn
                } else {
                    0
                },
                count: 0,
            });
        }
        self.open[slot] = Some(ch);
        Ok(())
    }

    /// Open a staged user chunk (compressed volumes). It takes no place yet,
    /// but it is allowed only where an uncompressed one would be: room in the
    /// user segment, or a free segment beyond the reserve; placement may then
    /// dip into the reserve, as GC does (a chunk is placed moments after it
    /// is sealed, by the thread that sealed it).
    fn open_staged(&mut self, reserve: u32) -> Result<(), NeedSpace> {
        let seg_blocks = self.seg_blocks();
        // The chunks staged before it are placed first, in seq order, each
        // where it fits (the user segment, else the next one): plan them
        // with their raw sizes (a packed chunk is never larger, and this
        // next-fit plan never needs more segments for smaller chunks). The
        // new chunk is capped to the room the plan leaves; when none is left
        // it takes its segment now, beyond the reserve as an uncompressed
        // chunk would (`user_spare`), so placement never waits for GC.
        // The plan follows `place` exactly: a chunk fits where `b` blocks are
        // left, and a segment left with fewer than 2 blocks is closed as full
        // (so a chunk of trims alone, 1 block, does not fit there: planned
        // into that last block, it took a segment nobody had promised, and
        // with none free the volume answered ENOSPC: compress_stress seed 1003).
        let mut room = self.open_seg[0].map_or(0, |s| seg_blocks - self.segs.segs[s as usize].fill);
        let mut spares_used = 0usize;
        for st in &self.staged {
            let b = 1 + st.crcs.len() as u32;
            if b > room {
                spares_used += 1;
                room = seg_blocks;
            }
            room -= b;
            // MUTANT: staged-plan-ignores-close s|if room < 2 {|if false {|
            if room < 2 {
                room = 0;
            }
        }
        assert!(
            spares_used <= self.user_spare.len(),
            "staged chunks promised more segments than were taken"
        );
        let cap_room = if room >= 2 {
            room - 1
        } else if self.user_spare.len() > spares_used {
            seg_blocks - 1
        } else {
            if self.segs.free.len() <= reserve as usize {
                return Err(NeedSpace);
            }
            let s = self.segs.take_free(Stream::User).ok_or(NeedSpace)?;
            self.segs.segs[s as usize].gen = 0;
            self.user_spare.push_back(s);
            seg_blocks - 1
        };
        let image = self.pool.get();
        let bufs = (image.len() / BLOCK_BYTES) as u32;
        let cap = MAX_DATA_BLOCKS.min(cap_room).min(bufs - 1);
        let mut ch = OpenChunk::new(Stream::User, u32::MAX, 0, cap, image);
        let id = self.next_staged_id;
        self.next_staged_id = (id + 1) % crate::map::STAGED_IDS;
        assert!(
            self.staged.iter().all(|s| s.id != id),
            "staged chunk ids wrapped onto a chunk still staged"
        );
        ch.staged = Some(id);
        if self.lsn_on {
            ch.lsn = Some(LsnRange {
                first: self.next_lsn,
                count: 0,
            });
        }
        self.open[0] = Some(ch);
        Ok(())
    }

    /// A staged chunk nobody packs yet, marked taken (the caller packs it off
    /// the lock and hands it to `finish_pack`).
    pub fn take_pack_job(&mut self) -> Option<super::packer::PackJob> {
        let pool = self.pool.clone();
        let s = self
            .staged
            .iter_mut()
            .find(|s| !s.taken && s.packed.is_none())?;
        s.taken = true;
        Some(super::packer::PackJob {
            id: s.id,
            entries: s.entries.clone(),
            crcs: s.crcs.clone(),
            raw: s.raw.clone(),
            pool,
        })
    }

    /// `Shared::pack_staged` has work: a staged chunk (a thread that sealed
    /// one packs it, one that finds it waiting helps) or a direct chunk's
    /// sample. False on an uncompressed volume and while a compressed
    /// one's stream is direct between seals, so their writes skip the call.
    pub fn pack_due(&self) -> bool {
        !self.staged.is_empty() || !self.to_sample.is_empty()
    }

    /// Some staged chunk is being packed by a thread (a checkpoint waits).
    pub fn staged_busy(&self) -> bool {
        self.staged.iter().any(|s| s.taken && s.packed.is_none())
    }

    /// The packer's result for staged chunk `id` (its job is dropped first:
    /// the raw image then has one holder, the queue entry).
    pub fn finish_pack(&mut self, job: super::packer::PackJob, packed: super::packer::PackedChunk) {
        let id = job.id;
        drop(job);
        let s = self
            .staged
            .iter_mut()
            .find(|s| s.id == id)
            .expect("a packed chunk is staged");
        assert!(s.taken && s.packed.is_none(), "packed twice");
        s.packed = Some(packed);
    }

    /// Pack, on this thread and under the lock, every staged chunk nobody
    /// packs (checkpoints: their map image may hold no staged value).
    pub fn pack_inline(&mut self) {
        while let Some(job) = self.take_pack_job() {
            let p = super::packer::pack_here(&job);
            self.finish_pack(job, p);
        }
    }

    /// Place the packed chunks at the head of the staged queue, in seq order:
    /// take the user segment's room, finish the header, re-point every record
    /// the map still stages to it (a record overwritten meanwhile is left
    /// alone), and hand the chunk to `out` like a sealed one. Err: no segment
    /// at all (the reserve is exhausted; the volume must stop).
    pub fn place_ready(&mut self, out: &mut Vec<Sealed>) -> Result<(), NeedSpace> {
        while let Some(p) = self.staged.front().and_then(|s| s.packed.as_ref()) {
            if !self.can_place(1 + p.data_blocks()) {
                // (kept staged: nothing is lost, the volume reports no space)
                return Err(NeedSpace);
            }
            let st = self.staged.pop_front().expect("front");
            self.place(st, out);
        }
        Ok(())
    }

    /// Whether `place` finds room for a chunk of `blocks` (header included):
    /// in the user segment, a segment taken for staged chunks, or a free one.
    fn can_place(&self, blocks: u32) -> bool {
        let fits = self.open_seg[0]
            .is_some_and(|s| self.seg_blocks() - self.segs.segs[s as usize].fill >= blocks);
        fits || !self.user_spare.is_empty() || !self.segs.free.is_empty()
    }

    /// A packed chunk's tally: whether the user stream turns direct (after
    /// `DIRECT_AFTER` tested blocks in a row not kept) or stays staged.
    fn note_packed(&mut self, t: &super::packer::Tally) {
        // MUTANT: direct-run-not-reset s|if t.kept > 0 {|if false {|
        if t.kept > 0 {
            self.note_compressible();
            return;
        }
        self.incompressible_run += t.blocks - t.untested;
        if self.incompressible_run >= super::packer::DIRECT_AFTER {
            // MUTANT: direct-never-set s|self.direct = true;|self.direct = false;|
            self.direct = true;
        }
    }

    /// LZ4 kept a block of the user stream (packed, or sampled from a direct
    /// chunk): the next user chunk is staged again.
    pub fn note_compressible(&mut self) {
        self.incompressible_run = 0;
        self.direct = false;
    }

    fn place(&mut self, st: super::packer::StagedChunk, out: &mut Vec<Sealed>) {
        use super::packer::Rec;
        let p = st.packed.expect("placed after packing");
        let seg_blocks = self.seg_blocks();
        let data_blocks = p.data_blocks();
        let blocks = 1 + data_blocks;
        let seg = match self.open_seg[0] {
            Some(s) if seg_blocks - self.segs.segs[s as usize].fill >= blocks => s,
            other => {
                if let Some(s) = other {
                    self.close_segment(s);
                    self.open_seg[0] = None;
                }
                let s = match self.user_spare.pop_front() {
                    Some(s) => s,
                    None => {
                        self.unplanned_takes += 1;
                        let s = self
                            .segs
                            .take_free(Stream::User)
                            .expect("place_ready checked for a free segment");
                        self.segs.segs[s as usize].gen = 0;
                        s
                    }
                };
                self.open_seg[0] = Some(s);
                s
            }
        };
        let start = self.segs.segs[seg as usize].fill;
        assert!(
            start + blocks <= seg_blocks,
            "a placed chunk fits its segment"
        );
        let mut image = match p.image {
            Some(img) => img,
            None => Arc::try_unwrap(st.raw)
                .unwrap_or_else(|_| panic!("a staged image has one holder when placed")),
        };
        let header = crate::format::chunk::ChunkHeader {
            uuid: self.uuid,
            seq: st.seq,
            segment: seg,
            stream: Stream::User,
            timestamp_ns: st.timestamp_ns,
            durable_seq: st.durable_seq,
            data_blocks,
            entries: p.entries,
            block_crcs: p.crcs,
            lsn: st.lsn,
            chain: st.chain,
            mixed_check: self.mixed_check,
        };
        header.encode_into(&mut image[..BLOCK_BYTES]);
        crate::format::chunk::seal_crc(&mut image[..BLOCK_BYTES]);
        debug_assert!(crate::format::chunk::verify(
            &image[..blocks as usize * BLOCK_BYTES],
            &self.uuid
        )
        .is_ok());
        let first = seg * seg_blocks + start + 1;
        let id = st.id;
        let mut t = p.tally;
        for r in &p.records {
            match *r {
                Rec::Raw { lba, old, new } => {
                    // MUTANT: place-unconditional s|self.map.get(lba) == (Loc::Staged { id, idx: old })|true|
                    if self.map.get(lba) == (Loc::Staged { id, idx: old }) {
                        self.remap(lba, Loc::Data(first + new));
                    }
                }
                Rec::Frag {
                    lba,
                    old,
                    place,
                    len,
                } => {
                    self.segs.segs[seg as usize].note_fragment(len);
                    if self.map.get(lba) == (Loc::Staged { id, idx: old }) {
                        let phys = first + p.raw_blocks + place.block;
                        self.remap(
                            lba,
                            Loc::Fragment {
                                phys,
                                slot: place.slot,
                                spans: place.spans,
                            },
                        );
                    }
                }
                Rec::Virt { lba, count, v } => {
                    for x in lba..lba + count as u64 {
                        if self.map.get(x) == Loc::StagedVirt(v, id) {
                            self.remap(x, Loc::Virtual(v, seg));
                        }
                    }
                }
            }
        }
        t.stored_blocks = data_blocks as u64;
        self.note_packed(&t);
        self.packed_tally.add(&t);
        let info = &mut self.segs.segs[seg as usize];
        assert!(start >= info.fill && st.seq >= info.last_seq, "seal order");
        info.fill = start + blocks;
        info.last_seq = st.seq;
        let full = seg_blocks - info.fill < 2;
        self.bytes_since_checkpoint += blocks as u64 * BLOCK_BYTES as u64;
        let phys = seg as u64 * seg_blocks as u64 + start as u64;
        assert!(
            self.inflight
                .range(..phys + blocks as u64)
                .next_back()
                .is_none_or(|(&k, f)| k + f.blocks as u64 <= phys),
            "in-flight chunk images overlap"
        );
        let image = Arc::new(image);
        self.inflight.insert(
            phys,
            InFlight {
                seq: st.seq,
                blocks,
                image: image.clone(),
                placed: None,
            },
        );
        if full {
            self.close_segment(seg);
            self.open_seg[0] = None;
        }
        out.push(Sealed {
            seq: st.seq,
            stream: Stream::User,
            segment: seg,
            start,
            blocks,
            image,
            placed: None,
        });
    }

    /// The bytes of data block `idx` of staged chunk `id` (open or sealed and
    /// not yet placed).
    pub fn staged_block(&self, id: u32, idx: u8) -> &[u8] {
        let i = idx as usize;
        if let Some(ch) = self.open[0].as_ref().filter(|c| c.staged == Some(id)) {
            return ch.data_block(idx as u32);
        }
        let s = self
            .staged
            .iter()
            .find(|s| s.id == id)
            .expect("a staged map value names a staged chunk");
        &s.raw[(1 + i) * BLOCK_BYTES..(2 + i) * BLOCK_BYTES]
    }

    /// A slot other than `mine` whose open chunk holds `loc`, if any (a user
    /// record superseding it must be sequenced after that chunk).
    fn held_by_other_open(&self, loc: Loc, mine: usize) -> Option<usize> {
        let sb = self.seg_blocks() as u64;
        (0..SLOTS).filter(|&s| s != mine).find(|&slot| {
            let Some(gc) = &self.open[slot] else {
                return false;
            };
            if gc.is_empty() {
                return false;
            }
            match loc {
                Loc::Data(p) | Loc::Fragment { phys: p, .. } => {
                    p as u64 / sb == gc.segment as u64
                        && gc.block_at((p as u64 % sb) as u32).is_some()
                }
                Loc::Virtual(_, s) => s == gc.segment,
                Loc::Unmapped | Loc::Staged { .. } | Loc::StagedVirt(..) => false,
            }
        })
    }

    /// The data block `append` just put into the open user chunk, for a
    /// streamed host write (`Shared::append_run`) to claim before it lets
    /// the engine lock go (`Placed::claim_range`: the seal skips it and
    /// waits for its placing write). Returns the chunk's map, the block's
    /// segment, its block in the segment and its data index; None for a
    /// chunk whose places are not final (a compressed volume's staged chunk).
    pub fn last_user_data(&mut self) -> Option<(&Arc<Placed>, u32, u32, u32)> {
        let ch = self.open[0].as_mut()?;
        if ch.staged.is_some() || ch.packer.is_some() {
            return None;
        }
        let idx = ch.data_blocks().checked_sub(1)?;
        let (segment, block) = (ch.segment, ch.start + 1 + idx);
        let placed = ch.placed.get_or_insert_with(Default::default);
        Some((placed, segment, block, idx))
    }

    /// A version 3 record of the open user chunk's unlogged block records,
    /// for a streamed host write to write in the submission that carries its
    /// own data (`Ring::plan_streamed`); `ours(placed, i)`: data block `i` of
    /// the chunk whose map is `placed` is claimed by that write, not yet
    /// written. None without an in-volume version 3 ring, or when a block
    /// the record would name is neither placed nor that write's (nor, with
    /// `company`, claimed by another write still placing it: the record
    /// then counts written only once those are placed, `Commit::place`).
    pub fn plan_streamed_record(
        &mut self,
        ours: &dyn Fn(&Arc<Placed>, u32) -> bool,
        company: bool,
    ) -> Option<super::intent::PlannedRecord> {
        let uuid = self.uuid;
        let (ring, ch) = (self.ring.as_mut()?, self.open[0].as_mut()?);
        let placed = ch.placed.clone()?;
        ring.plan_streamed(ch, uuid, &self.pool, &|i| ours(&placed, i), company)
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
        assert!(lba < self.map.len(), "append beyond the volume");
        let old = self.map.get(lba);
        let kind = match what {
            What::Data(..) | What::Streamed(..) | What::Moved(..) => Kind::Data,
            What::MovedFragment(..) => Kind::Packed,
            What::Virtual(v) => kind_of(v),
        };
        let room = if kind == Kind::Packed { 3 } else { 2 };
        let mut slot = self.slot_of(stream, lba);
        // GC output whose class has no room left, with no free segment to
        // open one: another GC class's open segment takes it. The class is
        // a placement hint; a victim's live data must be able to leave it
        // while any GC segment has room, or a volume whose reserve went to
        // the other classes' open segments can clean nothing and refuses
        // writes with every victim nearly empty (a 64-block compressed
        // volume under threaded clients: docs/gc.md "GC classes and the
        // reserve").
        // MUTANT: gc-class-no-fallback s|if stream == Stream::Gc|if false && stream == Stream::Gc|
        if stream == Stream::Gc
            && self.segs.free.is_empty()
            && !self.gc_slot_fits(slot, lba, kind, src, room)
        {
            if let Some(s) = (GC0..SLOTS).find(|&s| self.gc_slot_fits(s, lba, kind, src, room)) {
                slot = s;
                self.gc_class_fallbacks += 1;
            }
        }
        if stream == Stream::User {
            if let Some(other) = self.held_by_other_open(old, slot) {
                self.seal_slot(other, durable_seq, out);
            }
            if matches!(what, What::Data(..) | What::Streamed(..)) {
                self.user_clock += 1;
                self.segs.clock += 1;
                if let Some(t) = self.last_write.get_mut(lba as usize) {
                    *t = (self.user_clock as u32).max(1);
                }
            }
        }
        // Trim and zero records free space: they may dip into the GC reserve
        // (all but its last segment) so a full volume can always be trimmed.
        let reserve_for = match what {
            What::Data(..) | What::Streamed(..) | What::Moved(..) | What::MovedFragment(..) => {
                reserve
            }
            What::Virtual(_) => reserve.min(1),
        };
        loop {
            match &self.open[slot] {
                Some(ch) if ch.has_room(lba, kind, src) => break,
                Some(_) => self.seal_slot(slot, durable_seq, out),
                None => self.open_chunk(slot, reserve_for, room)?,
            }
        }
        let seg_blocks = self.seg_blocks();
        let ch = self.open[slot].as_mut().expect("open chunk");
        let new = match what {
            What::Data(b, crc) | What::Streamed(b, crc) | What::Moved(b, crc) => {
                let streamed = matches!(what, What::Streamed(..)) && ch.staged.is_none();
                // MUTANT: streamed-block-copied s|let off = if streamed {|let off = if false {|
                let off = if streamed {
                    ch.push_data_streamed(lba, crc, src)
                } else {
                    if stream == Stream::User {
                        self.image_copied_blocks += 1;
                    }
                    ch.push_data_crc(lba, b, crc, src)
                };
                match ch.staged {
                    None => Loc::Data(ch.segment * seg_blocks + off),
                    Some(id) => Loc::Staged {
                        id,
                        idx: (off - 1) as u8,
                    },
                }
            }
            What::MovedFragment(f, raw_crc) => {
                let (off, place) = ch.push_fragment(lba, f, raw_crc, src);
                let seg = ch.segment;
                self.segs.segs[seg as usize].note_fragment(f.len() as u16);
                Loc::Fragment {
                    phys: seg * seg_blocks + off,
                    slot: place.slot,
                    spans: place.spans,
                }
            }
            What::Virtual(v) => {
                ch.push_virtual(lba, kind, src);
                match ch.staged {
                    None => Loc::Virtual(v, ch.segment),
                    Some(id) => Loc::StagedVirt(v, id),
                }
            }
        };
        let ch = self.open[slot].as_mut().expect("open chunk");
        if stream == Stream::User && self.lsn_on {
            // one LSN per user block record, in arrival order
            ch.count_lsn();
            self.next_lsn += 1;
        }
        let out_seg = ch.segment;
        let pending_before = self.segs.pending.len();
        self.remap(lba, new);
        if stream == Stream::Gc && self.gc_src_life > 0.0 {
            // GC output keeps the estimated life of the data it received
            // (live-weighted mean over its victims), not "just written".
            let s = &mut self.segs.segs[out_seg as usize];
            s.prior = if s.prior > 0.0 {
                s.prior + (self.gc_src_life - s.prior) / s.live.max(1) as f32
            } else {
                self.gc_src_life
            };
        }
        if self.segs.pending.len() > pending_before {
            // The records that moved or superseded the rest of that segment may sit
            // in any slot's open chunk (a victim's relocations spread over the GC
            // classes), so the barrier must seal them all before the wipe.
            self.mark_killed();
        }
        Ok(())
    }

    /// Point `lba` at `new`, keeping the live counts of both segments true.
    pub fn remap(&mut self, lba: u64, new: Loc) {
        let old = self.map.set(lba, new);
        let sb = self.seg_blocks();
        if let Some(s) = old.segment(sb) {
            if matches!(old, Loc::Fragment { .. }) {
                let f = &mut self.segs.segs[s as usize].frag_live;
                assert!(*f > 0, "segment {s} fragment count underflows");
                *f -= 1;
            }
            self.segs.drop_live(s, matches!(old, Loc::Data(_)));
        }
        if let Some(s) = new.segment(sb) {
            self.segs.add_live(s, matches!(new, Loc::Data(_)));
            if matches!(new, Loc::Fragment { .. }) {
                self.segs.segs[s as usize].frag_live += 1;
            }
        }
    }

    /// The content of physical block `p` if it is still in memory (open or
    /// in flight); None for a streamed block (GC fragments: never streamed).
    pub fn buffered(&self, p: u32) -> Option<&[u8]> {
        match self.buffered_data(p)? {
            Buffered::Bytes(b) => Some(b),
            Buffered::Streamed { .. } => None,
        }
    }

    /// Physical block `p` if its chunk is still in memory (open or in
    /// flight): its bytes from the chunk image, or, for a streamed block
    /// (claimed: never in the image, log.rs), its chunk's `Placed` map, its
    /// data index and its CRC32C, for the reader to read it at its place
    /// once placed.
    pub fn buffered_data(&self, p: u32) -> Option<Buffered<'_>> {
        let sb = self.seg_blocks();
        let (seg, off) = (p / sb, p % sb);
        for ch in self.open.iter().flatten() {
            if ch.segment == seg && ch.staged.is_none() {
                if let Some(i) = off.checked_sub(ch.start + 1) {
                    let streamed = i < ch.data_blocks() && ch.is_streamed(i);
                    // MUTANT: streamed-read-from-image s|if streamed {|if false {|
                    if streamed {
                        return Some(Buffered::Streamed {
                            placed: ch.placed.clone().expect("a streamed block has a map"),
                            idx: i,
                            crc: ch.crcs[i as usize],
                        });
                    }
                }
            }
            if ch.segment == seg {
                if let Some(b) = ch.block_at(off) {
                    return Some(Buffered::Bytes(b));
                }
            }
        }
        let (&start, f) = self.inflight.range(..=p as u64).next_back()?;
        let i = p as u64 - start;
        if i >= f.blocks as u64 {
            return None;
        }
        if let Some(placed) = f
            .placed
            .as_ref()
            .filter(|pl| i > 0 && pl.is_claimed(i as u32 - 1))
        {
            let idx = i as u32 - 1;
            return Some(Buffered::Streamed {
                placed: placed.clone(),
                idx,
                crc: crate::format::chunk::stored_block_crc(&f.image[..BLOCK_BYTES], idx as usize),
            });
        }
        Some(Buffered::Bytes(
            &f.image[i as usize * BLOCK_BYTES..(i as usize + 1) * BLOCK_BYTES],
        ))
    }

    /// Checkpoint plan: seal every open chunk (into `out`, for the commit stage)
    /// and encode the map and the segment table into `body` (the slot after its
    /// header block). Returns next_seq: the image reflects exactly the chunks
    /// below it, which must be durable before the image is made current.
    pub fn checkpoint_image(
        &mut self,
        durable_seq: u64,
        body: &mut [u8],
        out: &mut Vec<Sealed>,
    ) -> u64 {
        self.seal(Stream::User, durable_seq, out);
        self.seal(Stream::Gc, durable_seq, out);
        assert!(
            self.open.iter().all(|c| c.is_none()),
            "checkpoint with an open chunk"
        );
        if self.compressed {
            // the map image may hold no staged value: pack what is left here
            // (the caller made sure no other thread is packing one)
            assert!(!self.staged_busy(), "checkpoint while a chunk is packed");
            self.pack_inline();
            // (no segment at all: the caller finds the volume out of space
            // by the staged chunk left over)
            let _ = self.place_ready(out);
            assert!(self.staged.is_empty(), "checkpoint with a staged chunk");
        }
        // 4 bytes per block, 5 on a compressed volume (the geometry's slot
        // was sized for the same width)
        debug_assert_eq!(self.map.value_bytes(), self.geo.map_value_bytes);
        let map_len = self.map.encoded_bytes();
        self.map.encode_into(&mut body[..map_len]);
        let mut off = map_len;
        for r in self.segs.records() {
            r.encode(&mut body[off..off + 16]);
            off += 16;
        }
        self.bytes_since_checkpoint = 0;
        self.next_seq
    }

    /// Move every entry of `victim` that the map still points at into the GC
    /// stream. `img` holds the victim's blocks [0, fill) that `verified` marks
    /// (read and checked against their CRCs: `gcread`; the others hold
    /// anything), `chunks` its walked chunks (or the first damage). A live
    /// block that was not verified refuses the victim as damaged: GC never
    /// moves bytes it did not check. Returns (data blocks, virtual records)
    /// moved. Memory only: the sealed GC chunks go to `out` for the commit
    /// stage.
    #[allow(clippy::too_many_arguments)]
    pub fn relocate(
        &mut self,
        victim: u32,
        img: &[u8],
        verified: &[bool],
        chunks: std::result::Result<Vec<(usize, crate::format::chunk::ChunkHeader)>, String>,
        reserve: u32,
        durable: u64,
        out: &mut Vec<Sealed>,
    ) -> std::result::Result<(u64, u64, usize), RelocateError> {
        let seg_blocks = self.geo.segment_blocks;
        let base = victim * seg_blocks;
        let (mut data_moved, mut virt_moved) = (0u64, 0u64);
        // the policy says which GC class this victim's data joins, and what
        // life estimate its output inherits
        let (class, life) = self.policy.policy().relocation_class(
            &self.segs.segs[victim as usize],
            &self.segs,
            self.gc_classes,
        );
        self.gc_slot = GC0 + class;
        self.gc_src_life = life;
        let chunks = chunks.map_err(RelocateError::Damaged)?;
        // Two passes: raw blocks and virtual records first, then fragments.
        // A GC chunk takes no raw block after a fragment (its packed blocks
        // follow its raw ones), so moving a victim's records in their order
        // sealed a GC chunk at every raw block after a fragment: mixed data
        // (raw, fragment, fragment, raw, ...) came out with a header every
        // two or three blocks, more blocks than the victim held, and GC under
        // pressure ran out of its reserve (ENOSPC: compress_stress seed
        // 1003). The order of different blocks' records inside a victim does
        // not matter (each block has one live record), so raw ones go first.
        // MUTANT: gc-fragments-in-record-order s|for pass in [Pass::Raw, Pass::Fragments]|for pass in [Pass::Both]|
        for pass in [Pass::Raw, Pass::Fragments] {
            for (pos, h) in chunks.iter().map(|(p, h)| (*p, h)) {
                if pass == Pass::Fragments && !h.entries.iter().any(|e| e.kind == Kind::Packed) {
                    continue;
                }
                // the chunk's fragments, placed by its packed tables (verified
                // blocks: the victim's chunks were checked before the lock;
                // a chunk none of whose fragments was live then was not read,
                // and none of them is live now)
                let chunk_phys = base as u64 + pos as u64;
                let packed =
                    chunk_phys + 1 + h.raw_blocks() as u64..chunk_phys + 1 + h.data_blocks as u64;
                let packed_read = verified
                    .get((packed.start - base as u64) as usize..(packed.end - base as u64) as usize)
                    .is_some_and(|v| v.iter().all(|&b| b));
                let frags = if pass != Pass::Raw
                    && packed_read
                    && h.entries.iter().any(|e| e.kind == Kind::Packed)
                {
                    let data = img
                        .get(
                            (pos + 1) * BLOCK_BYTES
                                ..(pos + 1 + h.data_blocks as usize) * BLOCK_BYTES,
                        )
                        .ok_or_else(|| {
                            RelocateError::Damaged(format!(
                                "chunk seq {} runs past its segment",
                                h.seq
                            ))
                        })?;
                    codec::fragments(h, base as u64 + pos as u64, data).map_err(|e| {
                        RelocateError::Damaged(format!("chunk seq {}: packed blocks: {e}", h.seq))
                    })?
                } else {
                    Vec::new()
                };
                for placed in codec::entries(h, base as u64 + pos as u64) {
                    let e = placed.entry;
                    if e.lba + e.count as u64 > self.map.len() {
                        return Err(RelocateError::Damaged(format!(
                            "chunk seq {} names blocks beyond the volume",
                            h.seq
                        )));
                    }
                    for r in placed.records() {
                        let lba = r.lba;
                        match r.place {
                            Place::Block { .. } | Place::Virtual(_) if pass == Pass::Fragments => {}
                            Place::Fragment { .. } if pass == Pass::Raw => {}
                            Place::Block { phys, data, crc } => {
                                let phys = phys as u32;
                                if self.map.get(lba) == Loc::Data(phys) {
                                    let b = pos + 1 + data as usize;
                                    // MUTANT: gc-moves-unverified s|if !verified.get(b).copied().unwrap_or(false) {|if false {|
                                    if !verified.get(b).copied().unwrap_or(false) {
                                        return Err(RelocateError::Damaged(format!(
                                            "live block {lba} (segment {victim} block {b}) was not read and verified"
                                        )));
                                    }
                                    let off = b * BLOCK_BYTES;
                                    self.append(
                                        Stream::Gc,
                                        lba,
                                        What::Moved(&img[off..off + BLOCK_BYTES], crc),
                                        phys,
                                        reserve,
                                        durable,
                                        out,
                                    )
                                    .map_err(|_| RelocateError::NoSpace)?;
                                    data_moved += 1;
                                }
                            }
                            Place::Fragment { .. } if !packed_read => {
                                if let Loc::Fragment { phys, .. } = self.map.get(lba) {
                                    if packed.contains(&(phys as u64)) {
                                        return Err(RelocateError::Damaged(format!(
                                            "live fragment of block {lba} (segment {victim} chunk at block {pos}) was not read and verified"
                                        )));
                                    }
                                }
                            }
                            Place::Fragment { k } => {
                                let f = frags[k as usize];
                                let at = Loc::Fragment {
                                    phys: f.phys as u32,
                                    slot: f.slot,
                                    spans: f.spans,
                                };
                                // MUTANT: gc-moves-dead-fragment s|self.map.get(lba) == at|true|
                                if self.map.get(lba) == at {
                                    // its bytes as they are (no recompression)
                                    let off = (f.phys - base as u64) as usize * BLOCK_BYTES;
                                    let next = f
                                        .spans
                                        .then(|| &img[off + BLOCK_BYTES..off + 2 * BLOCK_BYTES]);
                                    let mut joined = Vec::new();
                                    let (bytes, raw_crc) = crate::format::packed::fragment(
                                        &img[off..off + BLOCK_BYTES],
                                        next,
                                        f.slot,
                                        &mut joined,
                                    )
                                    .map_err(|e| {
                                        RelocateError::Damaged(format!(
                                            "chunk seq {}: fragment of block {lba}: {e}",
                                            h.seq
                                        ))
                                    })?;
                                    let bytes = bytes.to_vec();
                                    self.append(
                                        Stream::Gc,
                                        lba,
                                        What::MovedFragment(&bytes, raw_crc),
                                        victim,
                                        reserve,
                                        durable,
                                        out,
                                    )
                                    .map_err(|_| RelocateError::NoSpace)?;
                                    data_moved += 1;
                                }
                            }
                            Place::Virtual(k2) => {
                                let v = virt_of(k2).expect("virtual kind");
                                if self.map.get(lba) == Loc::Virtual(v, victim) {
                                    self.append(
                                        Stream::Gc,
                                        lba,
                                        What::Virtual(v),
                                        victim,
                                        reserve,
                                        durable,
                                        out,
                                    )
                                    .map_err(|_| RelocateError::NoSpace)?;
                                    virt_moved += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        let s = &self.segs.segs[victim as usize];
        if s.live != 0 {
            return Err(RelocateError::Damaged(format!(
                "{} live entries point at blocks no chunk in the segment describes",
                s.live
            )));
        }
        Ok((data_moved, virt_moved, class))
    }

    /// Blocks writers can still take before the reserve: free and pending
    /// segments beyond `reserve`, plus the room left in the open segments. It
    /// moves by one block per append and by a victim's net gain per GC run
    /// (pacing follows it; counting whole segments moves the rate in steps).
    pub fn headroom_blocks(&self, reserve: u32) -> u64 {
        let b = self.geo.segment_blocks as u64;
        let spare = (self.segs.free.len() + self.segs.pending.len()) as u64;
        let room: u64 = self
            .open_seg
            .iter()
            .flatten()
            .map(|&s| b.saturating_sub(self.segs.segs[s as usize].fill as u64))
            .sum();
        spare.saturating_sub(reserve as u64) * b + room
    }

    pub fn user_chunk_age(&self) -> Option<std::time::Duration> {
        self.open[..GC0]
            .iter()
            .flatten()
            .filter(|c| !c.is_empty())
            .map(|c| c.opened.elapsed())
            .max()
    }
}
