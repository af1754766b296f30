//! The read path: map lookup under the engine lock (copies of blocks still in
//! memory, virtual blocks), then the media reads of a whole batch at once, then
//! verification of every block that came from the media against the CRC index
//! (`crate::crc_index`). A block whose CRC does not match is never returned: its
//! request fails with `Error::BadBlock` (EIO), the block is logged with its
//! segment and chunk, counted (`crc_errors`) and its segment is queued for scrub.
//!
//! Invariant: the reuse lock is held shared from the map lookup until the last
//! block is verified, so the bytes read and the CRC they are checked against
//! belong to the same incarnation of their segment (ARCHITECTURE.md, reuse).

use super::Shared;
use crate::crc_index::{self, Expect};
use crate::error::{Error, Result};
use crate::format::chunk::block_crc;
use crate::format::BLOCK_BYTES;
use crate::map::{Loc, Virt};
use crate::segments::SegState;
use crate::stats::Counters;

/// A run of blocks contiguous on the media: (first physical block, index of its
/// first block in the request, blocks).
type Run = (u64, usize, usize);

impl Shared {
    pub(crate) fn read_blocks(&self, first: u64, out: &mut [u8]) -> Result<()> {
        let mut reqs = [(first, out)];
        let mut res = [Ok(())];
        self.read_blocks_batch(&mut reqs, &mut res)?;
        let [r] = res;
        r
    }

    /// Fill each `(first block, buffer)` with the volume's blocks from `first` on.
    /// Blocks in memory and virtual blocks are copied under the engine lock; the
    /// media reads of every request are then issued together. Err: a media error
    /// (every request failed); otherwise `res[i]` says whether request i verified.
    pub(crate) fn read_blocks_batch(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        res: &mut [Result<()>],
    ) -> Result<()> {
        debug_assert_eq!(reqs.len(), res.len());
        let mut failed = self.read_once(reqs, res)?;
        // A block that fails verification while the map no longer points at it
        // was overwritten (and its segment perhaps emptied and its first block
        // wiped) during the read: read that request again, it is not damage.
        for _ in 0..3 {
            let mut again = Vec::new();
            for (k, lba, p) in failed {
                if self.core.lock().map.get(lba) == Loc::Data(p) {
                    res[k] = Err(self.bad_block(lba, p));
                } else {
                    again.push(k);
                }
            }
            failed = Vec::new();
            for k in again {
                let (first, out) = &mut reqs[k];
                let mut one = [(*first, &mut out[..])];
                let mut r = [Ok(())];
                if let Some(&(_, lba, p)) = self.read_once(&mut one, &mut r)?.first() {
                    failed.push((k, lba, p));
                } else {
                    let [r] = r;
                    res[k] = r;
                }
            }
            if failed.is_empty() {
                break;
            }
        }
        for (k, lba, p) in failed {
            res[k] = Err(self.bad_block(lba, p));
        }
        // the caller's buffer must not hold bytes that failed verification
        for ((_, out), r) in reqs.iter_mut().zip(res.iter()) {
            if r.is_err() {
                out.fill(0);
            }
        }
        Ok(())
    }

    /// One attempt of `read_blocks_batch`: returns (request, logical block,
    /// physical block) of the first block of each request that failed
    /// verification; the caller decides whether that is damage.
    fn read_once(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        res: &mut [Result<()>],
    ) -> Result<Vec<(usize, u64, u32)>> {
        let verify = self.opts.verify_reads;
        let _r = self.reuse.read();
        let mut runs: Vec<Vec<Run>> = Vec::with_capacity(reqs.len());
        // segments written before this mount whose CRCs must be loaded first
        let mut load: Vec<(u32, u32)> = Vec::new();
        {
            let c = self.core.lock();
            let sb = self.geo.segment_blocks;
            for (first, out) in reqs.iter_mut() {
                let mut mine: Vec<Run> = Vec::new();
                for i in 0..out.len() / BLOCK_BYTES {
                    let dst = &mut out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                    match c.map.get(*first + i as u64) {
                        Loc::Unmapped | Loc::Virtual(Virt::Trim | Virt::Zero, _) => dst.fill(0),
                        Loc::Virtual(Virt::Ones, _) => dst.fill(0xff),
                        Loc::Data(p) => match c.buffered(p) {
                            Some(b) => dst.copy_from_slice(b),
                            None => {
                                let seg = p / sb;
                                if verify
                                    && !self.crc_index.is_loaded(seg)
                                    && !load.iter().any(|&(s, _)| s == seg)
                                {
                                    load.push((seg, c.segs.segs[seg as usize].fill));
                                }
                                match mine.last_mut() {
                                    Some((rp, ri, rn))
                                        if *rp + *rn as u64 == p as u64 && *ri + *rn == i =>
                                    {
                                        *rn += 1
                                    }
                                    _ => mine.push((p as u64, i, 1)),
                                }
                            }
                        },
                    }
                }
                runs.push(mine);
            }
        }
        for &(seg, fill) in &load {
            let end = self
                .crc_index
                .load_segment(&*self.media, &self.geo, seg, fill)?;
            if end < fill {
                // A header there does not verify. If the segment still holds live
                // data that is damage; if it was emptied meanwhile, its first
                // block may just have been wiped by a barrier (not damage).
                let c = self.core.lock();
                if matches!(
                    c.segs.segs[seg as usize].state,
                    SegState::Closed | SegState::Damaged | SegState::Victim
                ) {
                    self.crc_index.set_unverifiable_from(seg, end, fill);
                }
            }
        }
        {
            let mut io: Vec<(&mut [u8], u64)> = Vec::new();
            for ((_, out), mine) in reqs.iter_mut().zip(&runs) {
                // runs are in increasing block order and disjoint: carve them off in turn
                let mut rest: &mut [u8] = out;
                let mut at = 0;
                for &(p, i, k) in mine {
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut((i - at) * BLOCK_BYTES);
                    let (run, tail) = tail.split_at_mut(k * BLOCK_BYTES);
                    io.push((run, self.geo.phys_offset(p)));
                    rest = tail;
                    at = i + k;
                }
            }
            if !io.is_empty() {
                self.media.read_batch(&mut io)?;
            }
        }
        let mut failed = Vec::new();
        for (k, r) in res.iter_mut().enumerate() {
            *r = Ok(());
            if verify {
                if let Some((lba, p)) = self.verify_runs(reqs[k].0, &reqs[k].1[..], &runs[k]) {
                    failed.push((k, lba, p));
                }
            }
        }
        Ok(failed)
    }

    /// Check every media block of one request against the CRC index; the first
    /// block that fails, as (logical block, physical block).
    fn verify_runs(&self, first: u64, out: &[u8], runs: &[Run]) -> Option<(u64, u32)> {
        for &(p0, i0, k) in runs {
            for j in 0..k {
                let (p, i) = (p0 as u32 + j as u32, i0 + j);
                let block = &out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                let ok = match self.crc_index.expected(p) {
                    // MUTANT: read-crc s|block_crc(block) == want|true|
                    Expect::Crc(want) => block_crc(block) == want,
                    Expect::NotLoaded | Expect::Unverifiable => false,
                };
                if !ok {
                    return Some((first + i as u64, p));
                }
            }
        }
        None
    }

    /// A block failed verification: log where it is, count it, queue its
    /// segment for scrub, and make the request's error. (Error path: it reads
    /// chunk headers to name the chunk.)
    fn bad_block(&self, lba: u64, p: u32) -> Error {
        // (the segment stays this incarnation while its headers are read)
        let _r = self.reuse.read();
        let sb = self.geo.segment_blocks;
        let (seg, off) = (p / sb, p % sb);
        let fill = self.core.lock().segs.segs[seg as usize].fill;
        let mut chunk = format!("no verified chunk header covers block {off}");
        let uuid = self.crc_index_uuid();
        let _ = crc_index::walk(&*self.media, &self.geo, &uuid, seg, fill, |at, _| {
            if at.pos < off && off < at.pos + at.blocks {
                chunk = format!(
                    "chunk seq {} at block {} (data block {})",
                    at.seq,
                    at.pos,
                    off - at.pos - 1
                );
            }
        });
        tracing::warn!(
            "read of logical block {lba}: data fails its checksum (segment {seg} block {off}, {chunk}); answering EIO"
        );
        Counters::add(&self.counters.crc_errors, 1);
        self.scrub.mark(seg);
        Error::BadBlock {
            lba,
            segment: seg,
            chunk,
        }
    }

    fn crc_index_uuid(&self) -> [u8; 16] {
        self.core.lock().uuid
    }
}
