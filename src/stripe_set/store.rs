//! `StripeStore`: the segment store of a volume on a stripe set (the second
//! implementation of `store::SegmentStore`, after `FlatStore`). Segment `s`
//! is rows `s * rows_per_segment ..` of the set; physical block `p` is byte
//! `p * 4096` of the set's segment area. It advertises a row as its write
//! unit, names one piece per stripe unit in `locate`, and marks a segment's
//! new life at `wipe` (what memory held of its rows is dead).
//!
//! Invariant (as `FlatStore`'s): every IO lies inside the segment area; an
//! address outside it is refused with `InvalidInput`.

use super::StripeSet;
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, UringReads};
use crate::store::{Piece, Repair, SegmentStore};
use std::io;
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

pub struct StripeStore {
    set: Arc<StripeSet>,
    segment_blocks: u32,
}

impl StripeStore {
    pub fn new(set: Arc<StripeSet>) -> StripeStore {
        let segment_blocks = (set.shape.segment_bytes / BS) as u32;
        StripeStore {
            set,
            segment_blocks,
        }
    }

    fn check_seg(&self, seg: u32, block: u32, len: usize) -> io::Result<()> {
        if seg >= self.set.shape.segment_count
            || block as u64 + (len as u64).div_ceil(BS) > self.segment_blocks as u64
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "stripe store: {len} bytes at block {block} of segment {seg} are outside the {} segments",
                    self.set.shape.segment_count
                ),
            ));
        }
        Ok(())
    }
}

impl SegmentStore for StripeStore {
    fn segment_blocks(&self) -> u32 {
        self.segment_blocks
    }
    fn segment_count(&self) -> u32 {
        self.set.shape.segment_count
    }
    fn write_unit(&self) -> u64 {
        self.set.layout.write_unit()
    }
    fn write(&self, seg: u32, block: u32, buf: &[u8]) -> io::Result<()> {
        self.check_seg(seg, block, buf.len())?;
        self.set.write_area(self.phys(seg, block) * BS, buf)
    }
    fn read(&self, p: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = p.checked_mul(BS).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("block {p} overflows"))
        })?;
        self.set.read_area(off, buf)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, p) in reads.iter_mut() {
            self.read(*p, buf)?;
        }
        Ok(())
    }
    fn wipe(&self, seg: u32, tombstone: &[u8]) -> io::Result<()> {
        assert_eq!(tombstone.len(), BLOCK_BYTES, "a tombstone is one block");
        self.check_seg(seg, 0, BLOCK_BYTES)?;
        self.set.wipe_segment(seg, tombstone)
    }
    fn closed(&self, seg: u32, fill: u32) {
        if seg < self.set.shape.segment_count && fill <= self.segment_blocks {
            self.set.segment_closed(seg, fill);
        }
    }
    fn discard_body(&self, seg: u32) -> io::Result<bool> {
        self.check_seg(seg, 0, 0)?;
        // Not built for stripe sets: a discarded body would read as zeros or
        // old bytes member by member, and rows must stay consistent with
        // their parity for degraded reads of later lives.
        Ok(false)
    }
    fn members(&self) -> u32 {
        self.set.layout.members
    }
    fn locate(&self, p: u64, blocks: u32, f: &mut dyn FnMut(Piece)) {
        let l = self.set.layout;
        let row_bytes = l.write_unit();
        let (start, len) = (p * BS, blocks as u64 * BS);
        let mut pos = 0;
        while pos < len {
            let a = start + pos;
            let row = a / row_bytes;
            let in_row = a % row_bytes;
            let d = (in_row / l.unit) as u32;
            let col = in_row % l.unit;
            let take = (l.unit - col).min(len - pos);
            f(Piece {
                member: l.data_member(row, d),
                offset: l.row_offset(row).expect("row inside the set") + col,
                len: take as u32,
                at: pos as u32,
            });
            pos += take;
        }
    }
    fn damaged(&self, p: u64, check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>) -> Repair {
        let Some(off) = p.checked_mul(BS) else {
            return Repair::Undecidable;
        };
        self.set.heal_block(off, check).unwrap_or_else(|e| {
            tracing::error!("stripe store: healing block {p}: {e}");
            Repair::Undecidable
        })
    }
    fn heal_read(
        &self,
        p: u64,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
    ) -> Option<AlignedBuf> {
        let off = p.checked_mul(BS)?;
        self.set.heal_read(off, check).unwrap_or_else(|e| {
            tracing::error!("stripe store: reconstructing block {p} for recovery: {e}");
            None
        })
    }
    fn scrub_redundancy(
        &self,
        seg: u32,
        fill: u32,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
        repair: bool,
    ) -> io::Result<Vec<String>> {
        self.set.scrub_parity(seg, fill, check, repair)
    }
    fn uring_reads(&self, _entries: u32) -> Option<io::Result<UringReads>> {
        // A ring over several members is not built: reads go in batches.
        None
    }
    fn describe(&self) -> String {
        self.set.describe()
    }
}
