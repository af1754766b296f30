//! Segment store: the one interface through which segment data reaches the
//! media. Owns the mapping from a segment's blocks to where they physically
//! live; everything above it (engine, recovery, scrub, CRC index, check) names
//! segment data only as a segment and block, or a physical block number
//! (`segment * segment_blocks + block`), never as a media byte offset.
//!
//! What a store does (lab47/lsvd's `segment_access.go`, SPDK raid5f's
//! advertised write unit): write a piece of a segment at a block index, read a
//! range (or a batch of ranges) of physical blocks, wipe a segment's first
//! block with a tombstone, discard a segment's body, say its write unit, tell
//! the read ring where a range physically lives (`locate`: one piece on one
//! media for a flat store, several pieces on several members for a stripe
//! set), and take reports of damage (`damaged`: a store with redundancy will
//! repair there; a flat store has nothing to repair from).
//!
//! What a store does not hold: the superblocks, the checkpoint slots and the
//! intent log ring are not segment data. They stay on the volume's `Media`
//! (ARCHITECTURE.md, "Where things live"), and so does the one media flush
//! that makes chunk writes, tombstones and superblocks durable together: a
//! flat store shares that media, so the commit stage's flush covers its writes.
//!
//! Today's implementation is `FlatStore`: the segment area of one `Media`
//! (a file or a device; MemMedia, FaultMedia and SimMedia in tests and the
//! simulator, which it wraps unchanged).
//!
//! Invariant kept here: every IO a store issues lies inside the segment area
//! (`[data_offset, data_offset + segment_count * segment_bytes)`); an address
//! outside it is refused with `InvalidInput`, never turned into IO elsewhere
//! (a wrong address must not land on a superblock or checkpoint slot).

use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::media::{AlignedBuf, Media, UringReads};
use std::io;

const BS: u64 = BLOCK_BYTES as u64;

/// Where part of a range of physical blocks lives: `len` bytes at byte
/// `offset` of member `member`, holding the bytes at `at` of the range.
/// A flat store answers one piece (member 0); a stripe set one per stripe unit
/// the range touches, on the member holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub member: u32,
    pub offset: u64,
    pub len: u32,
    pub at: u32,
}

/// A separate read costs about what this many blocks of transfer do on the
/// shared machine's disk (fio, libaio O_DIRECT: ~40K small reads/s at QD16
/// against ~2 GB/s for 4 MiB reads; docs/gc.md, "Reading a victim"): GC reads
/// through dead gaps up to this long (`SegmentStore::gc_read_cost_blocks`).
pub const GC_GAP_BLOCKS: u32 = 12;

pub trait SegmentStore: Send + Sync {
    /// Blocks per segment.
    fn segment_blocks(&self) -> u32;
    /// Segments in the store.
    fn segment_count(&self) -> u32;
    /// Bytes a write should be a multiple of (and aligned to) to cost no
    /// read: 4 KiB for one file or device; a parity set's full row.
    fn write_unit(&self) -> u64;
    /// Write `buf` (whole blocks) into segment `seg` from block `block` on.
    fn write(&self, seg: u32, block: u32, buf: &[u8]) -> io::Result<()>;
    /// `write`, and in the same submission `extra` (bytes, media byte offset)
    /// on the volume's own media, when this store's segments live on that
    /// media (a flat store): the two writes are unordered between themselves
    /// (a later media flush makes both durable). The extra write is the
    /// caller's (a version 3 intent log record, in the ring outside the
    /// segment area); the store checks only its own. None: this store does
    /// not share the volume's media (the caller writes the two in turn).
    fn write_with(
        &self,
        _seg: u32,
        _block: u32,
        _buf: &[u8],
        _extra: (&[u8], u64),
    ) -> Option<io::Result<()>> {
        None
    }
    /// Several writes, each `(seg, block, buf)` as in `write`, unordered
    /// among themselves (a later media flush makes them durable together);
    /// a store that can overlap them issues them together (a flat store: one
    /// io_uring submission on O_DIRECT media, `Media::write_batch`).
    fn write_pieces(&self, pieces: &[(u32, u32, &[u8])]) -> io::Result<()> {
        for &(seg, block, buf) in pieces {
            self.write(seg, block, buf)?;
        }
        Ok(())
    }
    /// `write_pieces` and `extra` (bytes, media offset: a version 3 intent
    /// log record in the volume's ring) in one submission, all unordered
    /// among themselves, when the store shares the volume's media (a flat
    /// store). None: it does not, and nothing was written.
    fn write_pieces_with(
        &self,
        _pieces: &[(u32, u32, &[u8])],
        _extra: (&[u8], u64),
    ) -> Option<io::Result<()>> {
        None
    }
    /// Read `buf.len()` bytes (whole blocks) from physical block `p` on.
    fn read(&self, p: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Several reads at once, each `(buffer, physical block)` as in `read`;
    /// stores that can overlap them issue them together. The second member
    /// of each pair is the store's to use (a flat store turns it into the
    /// media offset in place): it means nothing afterwards.
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()>;
    /// Write `tombstone` (one block, `chunk::tombstone`) over the first block
    /// of `seg`. Not durable until the media flush.
    fn wipe(&self, seg: u32, tombstone: &[u8]) -> io::Result<()>;
    /// The engine closed `seg` with its first `fill` blocks written (or
    /// sealed to be written): no block at or past `fill` is written in this
    /// life of the segment (until `wipe`). Called under the engine lock, so
    /// memory only, no IO. A parity set finishes the segment's last partial
    /// row (its blocks past `fill` padded with zeros, its parity in place)
    /// once every block below `fill` in it has landed, and frees the
    /// row's scratch lane (docs/stripes.md §0 finding 8); flat and object
    /// stores do nothing.
    fn closed(&self, _seg: u32, _fill: u32) {}
    /// Give the space of `seg`'s body (every block but the first, which holds
    /// its tombstone) back to the host or device. Ok(false): this store cannot
    /// discard (nothing done). Advisory: the body may afterwards read as
    /// anything.
    fn discard_body(&self, seg: u32) -> io::Result<bool>;
    /// Members the store spans (1 for a flat store).
    fn members(&self) -> u32 {
        1
    }
    /// Where the `blocks` blocks from physical block `p` physically live:
    /// `f` is called once per piece, in the range's order; at most one piece
    /// per block.
    fn locate(&self, p: u64, blocks: u32, f: &mut dyn FnMut(Piece));
    /// A ring for reads submitted on one thread and completed on another over
    /// the pieces `locate` names (member 0 only today). None: the store has
    /// none (memory, fault injection); Some(Err): not now.
    fn uring_reads(&self, entries: u32) -> Option<io::Result<UringReads>>;
    /// Physical block `p` failed its CRC while the store answered. A store
    /// with redundancy finds what it should hold, checks that against
    /// `check`, rewrites what was wrong and says so; a flat store has no
    /// second copy: `Repair::None`. `check(q, bytes)` judges physical block
    /// `q` holding `bytes`: Some(true) when they verify (a data block's CRC,
    /// a chunk header's own check), Some(false) when they do not, None when
    /// the caller knows nothing of block `q` (padding, unused space).
    fn damaged(&self, _p: u64, _check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>) -> Repair {
        Repair::None
    }
    /// Recovery's form of `damaged` (recovery performs no writes): the
    /// bytes physical block `p` should hold, found from the store's
    /// redundancy and passing `check` (the same contract), with nothing
    /// rewritten; None without redundancy or when they cannot be found. The
    /// mount repairs such a block through `damaged` afterwards if it may
    /// write.
    fn heal_read(
        &self,
        _p: u64,
        _check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
    ) -> Option<AlignedBuf> {
        None
    }
    /// Check the redundancy of segment `seg`'s full rows below block `fill`
    /// against its data (a parity set: every row's parity), `check` judging
    /// blocks as for `damaged`; one line per disagreement. `repair`: rewrite
    /// what is wrong where the data passes `check`. A store without
    /// redundancy has nothing to compare: no lines.
    fn scrub_redundancy(
        &self,
        _seg: u32,
        _fill: u32,
        _check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
        _repair: bool,
    ) -> io::Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// Human-readable description.
    fn describe(&self) -> String;
    /// Physical block of block `block` of segment `seg`.
    fn phys(&self, seg: u32, block: u32) -> u64 {
        seg as u64 * self.segment_blocks() as u64 + block as u64
    }
    /// What one more separate read of segment `seg` costs GC, in blocks of
    /// transfer (`volume::gcread`: dead gaps up to this long are read
    /// through, and a victim whose live runs would cost more than the whole
    /// segment is read whole). A segment-long value makes GC read `seg` in
    /// one piece (a store whose every read is a round trip to a server).
    fn gc_read_cost_blocks(&self, _seg: u32) -> u32 {
        GC_GAP_BLOCKS
    }
    /// Read `buf.len()` bytes from block `block` of segment `seg` on.
    fn read_segment(&self, seg: u32, block: u32, buf: &mut [u8]) -> io::Result<()> {
        self.read(self.phys(seg, block), buf)
    }
}

/// What a store did about damage reported to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// Nothing to repair from (a flat store): the damage stands.
    None,
    /// The block's right bytes were found (they pass `check`) and written
    /// over the wrong ones (`pieces` member pieces rewritten, 0 when the
    /// block verified when looked at again): a read again returns them.
    Healed { pieces: u32 },
    /// No candidate passes `check`, or the evidence points two ways:
    /// nothing was rewritten, the damage stands (EIO).
    Undecidable,
}

/// The segment area of one `Media`: segment `s` block `b` is at media byte
/// `data_offset + (s * segment_blocks + b) * 4096` (`Geometry::phys_offset`,
/// which the simulator's damage sweeps use to find the same bytes). `M` is the media or a
/// reference to it (`FlatStore<&dyn Media>` for a mount's or check's walk,
/// `FlatStore<Arc<dyn Media>>` for a volume).
pub struct FlatStore<M> {
    media: M,
    geo: Geometry,
}

impl<M: Media> FlatStore<M> {
    pub fn new(media: M, geo: &Geometry) -> FlatStore<M> {
        FlatStore { media, geo: *geo }
    }

    fn blocks(&self) -> u64 {
        self.geo.segment_count as u64 * self.geo.segment_blocks as u64
    }

    /// Media byte offset of `len` bytes from physical block `p`, refused when
    /// not whole blocks inside the segment area.
    fn offset(&self, p: u64, len: usize) -> io::Result<u64> {
        let n = len as u64 / BS;
        if !(len as u64).is_multiple_of(BS) || p.checked_add(n).is_none_or(|e| e > self.blocks()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment store: {len} bytes at block {p} are not whole blocks inside the {} blocks of the segment area",
                    self.blocks()
                ),
            ));
        }
        Ok(self.geo.phys_offset(p))
    }

    /// Media byte offset of `len` bytes from block `block` of segment `seg`,
    /// refused when they are not whole blocks inside that segment.
    fn segment_offset(&self, seg: u32, block: u32, len: usize) -> io::Result<u64> {
        self.check_seg(seg)?;
        if block as u64 + (len as u64).div_ceil(BS) > self.geo.segment_blocks as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment store: {len} bytes at block {block} run past the end of segment {seg}"
                ),
            ));
        }
        self.offset(self.phys(seg, block), len)
    }

    fn check_seg(&self, seg: u32) -> io::Result<()> {
        if seg >= self.geo.segment_count {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment store: no segment {seg} of {}",
                    self.geo.segment_count
                ),
            ));
        }
        Ok(())
    }
}

impl<M: Media> SegmentStore for FlatStore<M> {
    fn segment_blocks(&self) -> u32 {
        self.geo.segment_blocks
    }
    fn segment_count(&self) -> u32 {
        self.geo.segment_count
    }
    fn write_unit(&self) -> u64 {
        BS
    }
    fn write(&self, seg: u32, block: u32, buf: &[u8]) -> io::Result<()> {
        let off = self.segment_offset(seg, block, buf.len())?;
        self.media.write_at(buf, off)
    }
    fn write_with(
        &self,
        seg: u32,
        block: u32,
        buf: &[u8],
        extra: (&[u8], u64),
    ) -> Option<io::Result<()>> {
        Some(self.segment_offset(seg, block, buf.len()).and_then(|off| {
            // MUTANT: record-without-data s|&[(buf, off), extra]|&[extra]|
            self.media.write_batch(&[(buf, off), extra])
        }))
    }
    fn write_pieces(&self, pieces: &[(u32, u32, &[u8])]) -> io::Result<()> {
        let mut writes = Vec::with_capacity(pieces.len());
        for &(seg, block, buf) in pieces {
            writes.push((buf, self.segment_offset(seg, block, buf.len())?));
        }
        self.media.write_batch(&writes)
    }
    fn write_pieces_with(
        &self,
        pieces: &[(u32, u32, &[u8])],
        extra: (&[u8], u64),
    ) -> Option<io::Result<()>> {
        let mut writes = Vec::with_capacity(pieces.len() + 1);
        for &(seg, block, buf) in pieces {
            match self.segment_offset(seg, block, buf.len()) {
                Ok(off) => writes.push((buf, off)),
                Err(e) => return Some(Err(e)),
            }
        }
        writes.push(extra);
        Some(self.media.write_batch(&writes))
    }
    fn read(&self, p: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = self.offset(p, buf.len())?;
        self.media.read_at(buf, off)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, p) in reads.iter_mut() {
            *p = self.offset(*p, buf.len())?;
        }
        self.media.read_batch(reads)
    }
    fn wipe(&self, seg: u32, tombstone: &[u8]) -> io::Result<()> {
        assert_eq!(tombstone.len(), BLOCK_BYTES, "a tombstone is one block");
        // MUTANT: store-wipe-skipped s|self.write(seg, 0, tombstone)|Ok(())|
        self.write(seg, 0, tombstone)
    }
    fn discard_body(&self, seg: u32) -> io::Result<bool> {
        self.check_seg(seg)?;
        // Never the first block: the tombstone there is what keeps a stale
        // chunk header from being read as new data (ARCHITECTURE.md, Discard).
        let len = (self.geo.segment_blocks as u64 - 1) * BS;
        // MUTANT: discard-tombstone s|self.phys(seg, 1)|self.phys(seg, 0)|
        let off = self.offset(self.phys(seg, 1), len as usize)?;
        self.media.discard(off, len)
    }
    fn locate(&self, p: u64, blocks: u32, f: &mut dyn FnMut(Piece)) {
        f(Piece {
            member: 0,
            offset: self.geo.phys_offset(p),
            len: blocks * BLOCK_BYTES as u32,
            at: 0,
        })
    }
    fn uring_reads(&self, entries: u32) -> Option<io::Result<UringReads>> {
        self.media.uring_reads(entries)
    }
    fn describe(&self) -> String {
        self.media.describe()
    }
}
