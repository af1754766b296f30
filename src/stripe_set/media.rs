//! `SetMedia`: a stripe set shown to the engine as one flat `Media` with the
//! geometry its superblock records: the metadata head (superblocks,
//! checkpoint slots, intent ring: below `data_offset`) and the tail area are
//! mirrored on every member (`meta`), the segment area goes to the set's
//! rows (`StripeSet::write_area`/`read_area`), and `flush` is the set's (the
//! parity of partial rows, then every member). Recovery, check and the
//! commit stage's metadata writes use it unchanged; the volume's segment
//! store is `store::StripeStore` over the same set.
//!
//! Invariant: a byte of the flat view lives at exactly one place on each
//! member (metadata) or in exactly one row (segment data); IO that runs
//! between the segment area's end and the tail area, or past the end, is
//! refused, never sent to a member.

use super::{meta, StripeSet};
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, Media};
use std::io;
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

    fn meta_read(&self, flat: u64, buf: &mut [u8], at: u64) -> io::Result<()> {
        let set = &self.set;
        let sb_blocks: Vec<usize> = (0..buf.len() / BLOCK_BYTES)
            .filter(|&i| self.superblock_at(flat + i as u64 * BS))
            .collect();
        let mut fallback: Option<AlignedBuf> = None;
        let mut chosen = None;
        let mut tmp = AlignedBuf::new(buf.len());
        for m in 0..set.layout.members {
            if set.mread(m, &mut tmp, at).is_err() {
                continue;
            }
            // a superblock copy must verify on this member, else the next
            let ok = sb_blocks.iter().all(|&i| {
                let b = &tmp[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                b[0..8] != crate::format::superblock::SUPERBLOCK_MAGIC || meta::is_superblock(b)
            });
            if ok {
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
