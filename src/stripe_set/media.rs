//! `SetMedia`: a stripe set shown to the engine as one flat `Media` with the
//! geometry its superblock records: the metadata head (superblocks,
//! checkpoint slots, intent ring: below `data_offset`) and the tail area are
//! mirrored on every member (`meta`), the segment area goes to the set's
//! rows (`StripeSet::write_area`/`read_area`), and `flush` is the set's (the
//! parity of partial rows, then every member). Recovery, check and the
//! commit stage's metadata writes use it unchanged; the volume's segment
//! store is `store::StripeStore` over the same set.
//!
//! Checked metadata reads (`read_checked`: recovery's reads of checkpoints
//! and intent-log records) try each member's copy in member order until
//! the caller's check passes, so a copy flipped on one member is never
//! taken for the end of the log or an unusable checkpoint while another
//! member holds it whole; the copies read before it that failed are
//! rewritten from it (its vouched bytes only) on a writable mount with
//! every member up, else only counted.
//!
//! Invariant: a byte of the flat view lives at exactly one place on each
//! member (metadata) or in exactly one row (segment data); IO that runs
//! between the segment area's end and the tail area, or past the end, is
//! refused, never sent to a member. A repair writes only bytes a check
//! vouched for, over a copy that failed that check, under the metadata
//! write lock (no newer write can be undone by it).
//!
//! Scrub (`check_copies`) reads every member's copy the same way without
//! stopping at the first good one, so a bad copy behind a good one (which a
//! mount never reads) is found and rewritten before the members ahead of it
//! are lost.

use super::{meta, StripeSet};
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, CopiesChecked, Media};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

#[derive(Clone)]
pub struct SetMedia {
    pub set: Arc<StripeSet>,
}

/// Where a range of the flat view lives.
enum Region {
    /// Mirrored metadata at this member offset.
    Meta(u64),
    /// The segment area at this area offset.
    Area(u64),
}

impl SetMedia {
    pub fn new(set: Arc<StripeSet>) -> SetMedia {
        SetMedia { set }
    }

    /// The region holding `off` and how many bytes of it follow.
    fn region(&self, off: u64) -> io::Result<(Region, u64)> {
        let s = &self.set.shape;
        let area_end = s.data_offset + s.area_bytes();
        if off < s.data_offset {
            Ok((Region::Meta(off), s.data_offset - off))
        } else if off < area_end {
            Ok((Region::Area(off - s.data_offset), area_end - off))
        } else if off >= s.tail_offset && off < s.len {
            Ok((
                Region::Meta(self.set.member_tail_offset() + (off - s.tail_offset)),
                s.len - off,
            ))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "stripe set: offset {off} is outside the metadata, the segment area and the tail area"
                ),
            ))
        }
    }

    /// Flat offsets of the four superblock copies.
    fn superblock_at(&self, off: u64) -> bool {
        let t = self.set.shape.tail_offset;
        off == 0 || off == BS || off == t || off == t + BS
    }

    fn meta_write(&self, flat: u64, buf: &[u8], at: u64) -> io::Result<()> {
        let set = &self.set;
        // not between `record_failures`' read and write of a copy
        let _sb = set.sb_lock.lock();
        let mut wrote = 0;
        for (m, member) in set.members.iter().enumerate() {
            if set.up(m as u32).is_none() {
                continue;
            }
            let mut mine = AlignedBuf::new(buf.len());
            mine.copy_from_slice(buf);
            // A set with a member down writes the next membership generation:
            // the absent member, which misses these writes, is stale from
            // now on and assembly refuses it (it would serve old data).
            let mut ident = member.ident;
            ident.generation = set.write_generation();
            for (i, b) in mine.chunks_mut(BLOCK_BYTES).enumerate() {
                if b.len() == BLOCK_BYTES && self.superblock_at(flat + i as u64 * BS) {
                    meta::to_member(b, &ident);
                }
            }
            set.mwrite(m as u32, &mine, at)?;
            wrote += 1;
        }
        if wrote == 0 {
            return Err(io::Error::other("stripe set: no member left to write to"));
        }
        Ok(())
    }

    /// Blocks of `len` bytes from flat offset `flat` that are superblock
    /// copies.
    fn sb_blocks(&self, flat: u64, len: usize) -> Vec<usize> {
        (0..len / BLOCK_BYTES)
            .filter(|&i| self.superblock_at(flat + i as u64 * BS))
            .collect()
    }

    /// Does every superblock copy among `sb_blocks` of a member's `tmp`
    /// verify (or is not one at all)?
    fn sb_copies_ok(tmp: &[u8], sb_blocks: &[usize]) -> bool {
        sb_blocks.iter().all(|&i| {
            let b = &tmp[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            b[0..8] != crate::format::superblock::SUPERBLOCK_MAGIC || meta::is_superblock(b)
        })
    }

    /// `read_checked` of metadata at member offset `at`: each member's copy
    /// in turn until `check` passes (with `every`, scrub: every member's
    /// copy); the members that answered with a failing copy get the vouched
    /// range rewritten (a writable mount with every member up:
    /// `StripeSet::set_meta_repair`), counted either way.
    fn meta_read_checked(
        &self,
        flat: u64,
        buf: &mut [u8],
        at: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
        every: bool,
    ) -> io::Result<CopiesChecked> {
        let set = &self.set;
        // no metadata write between a copy's read and its repair
        let _sb = set.sb_lock.lock();
        let sb_blocks = self.sb_blocks(flat, buf.len());
        let mut tmp = AlignedBuf::new(buf.len());
        let mut bad = Vec::new();
        let mut good = None;
        let mut seen = CopiesChecked::default();
        for m in 0..set.layout.members {
            if set.mread(m, &mut tmp, at).is_err() {
                continue;
            }
            seen.read += 1;
            let sb_ok = Self::sb_copies_ok(&tmp, &sb_blocks);
            for &i in &sb_blocks {
                meta::from_member(&mut tmp[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]);
            }
            let verdict = check(&tmp).filter(|_| sb_ok);
            // MUTANT: meta-read-unchecked s|match verdict {|match verdict.or(Some(0..0)) {|
            match verdict {
                Some(r) => {
                    if good.is_none() {
                        buf.copy_from_slice(&tmp);
                        good = Some(r);
                    }
                    // MUTANT: meta-scrub-stops-at-first-good s|if !every {|if true {|
                    if !every {
                        break;
                    }
                }
                None => bad.push(m),
            }
        }
        seen.bad = bad.len() as u32;
        let Some(vouched) = good else {
            // as `read_at` gives it (the first copy whose superblocks verify)
            self.meta_read(flat, buf, at)?;
            return Ok(seen);
        };
        seen.good = true;
        if bad.is_empty() {
            return Ok(seen);
        }
        set.counters
            .meta_bad
            .fetch_add(bad.len() as u64, Ordering::Relaxed);
        // the vouched bytes, rounded inwards to what every member can write
        // alone; none in a superblock copy (`repair_superblocks` owns them)
        let unit = (0..set.layout.members)
            .filter_map(|m| set.up(m).map(|x| x.direct_unit()))
            .max()
            .unwrap_or(512) as usize;
        let start = vouched.start.div_ceil(unit) * unit;
        let end = vouched.end.min(buf.len()) / unit * unit;
        let repair = set.meta_repair.load(Ordering::Acquire)
            && set.down_count() == 0
            && start < end
            && sb_blocks
                .iter()
                .all(|&i| (i + 1) * BLOCK_BYTES <= start || i * BLOCK_BYTES >= end);
        for m in bad {
            tracing::warn!(
                "stripe set: member {m} ({}): its copy of the metadata at byte {flat} fails its check, another member's passes{}",
                set.members[m as usize].name,
                if repair { "; rewritten from it" } else { "" }
            );
            if !repair {
                continue;
            }
            let mut fix = AlignedBuf::new(end - start);
            fix.copy_from_slice(&buf[start..end]);
            // a member failing here is out of use (`mwrite`); the read
            // stands either way
            if set.mwrite(m, &fix, at + start as u64).is_ok() {
                set.counters.meta_rewritten.fetch_add(1, Ordering::Relaxed);
                seen.rewritten += 1;
            }
        }
        Ok(seen)
    }

    fn meta_read(&self, flat: u64, buf: &mut [u8], at: u64) -> io::Result<()> {
        let set = &self.set;
        let sb_blocks = self.sb_blocks(flat, buf.len());
        let mut fallback: Option<AlignedBuf> = None;
        let mut chosen = None;
        let mut tmp = AlignedBuf::new(buf.len());
        for m in 0..set.layout.members {
            if set.mread(m, &mut tmp, at).is_err() {
                continue;
            }
            // a superblock copy must verify on this member, else the next
            if Self::sb_copies_ok(&tmp, &sb_blocks) {
                chosen = Some(tmp);
                break;
            }
            if fallback.is_none() {
                fallback = Some(std::mem::replace(&mut tmp, AlignedBuf::new(buf.len())));
            }
        }
        let Some(got) = chosen.or(fallback) else {
            return Err(io::Error::other(format!(
                "stripe set: no member answered a metadata read at {flat}"
            )));
        };
        buf.copy_from_slice(&got);
        for i in sb_blocks {
            meta::from_member(&mut buf[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]);
        }
        Ok(())
    }
}

impl Media for SetMedia {
    fn len(&self) -> u64 {
        self.set.shape.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        crate::media::check_range(self.len(), offset, buf.len())?;
        let mut pos = 0usize;
        while pos < buf.len() {
            let flat = offset + pos as u64;
            let (r, room) = self.region(flat)?;
            let take = (room as usize).min(buf.len() - pos);
            let piece = &mut buf[pos..pos + take];
            match r {
                Region::Meta(at) => self.meta_read(flat, piece, at)?,
                Region::Area(a) => self.set.read_area(a, piece)?,
            }
            pos += take;
        }
        Ok(())
    }
    fn read_checked(
        &self,
        buf: &mut [u8],
        offset: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> io::Result<bool> {
        crate::media::check_range(self.len(), offset, buf.len())?;
        match self.region(offset)? {
            (Region::Meta(at), room) if room >= buf.len() as u64 => self
                .meta_read_checked(offset, buf, at, check, false)
                .map(|c| c.good),
            // the segment area has one copy (its rows heal themselves)
            _ => {
                self.read_at(buf, offset)?;
                Ok(check(buf).is_some())
            }
        }
    }
    fn check_copies(
        &self,
        buf: &mut [u8],
        offset: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> Option<io::Result<CopiesChecked>> {
        if let Err(e) = crate::media::check_range(self.len(), offset, buf.len()) {
            return Some(Err(e));
        }
        match self.region(offset) {
            Err(e) => Some(Err(e)),
            Ok((Region::Meta(at), room)) if room >= buf.len() as u64 => {
                Some(self.meta_read_checked(offset, buf, at, check, true))
            }
            // the segment area has one copy (parity scrub checks its rows)
            Ok(_) => None,
        }
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        crate::media::check_range(self.len(), offset, buf.len())?;
        let mut pos = 0usize;
        while pos < buf.len() {
            let flat = offset + pos as u64;
            let (r, room) = self.region(flat)?;
            let take = (room as usize).min(buf.len() - pos);
            let piece = &buf[pos..pos + take];
            match r {
                Region::Meta(at) => self.meta_write(flat, piece, at)?,
                Region::Area(a) => self.set.write_area(a, piece)?,
            }
            pos += take;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.set.flush()
    }
    fn describe(&self) -> String {
        self.set.describe()
    }
}
