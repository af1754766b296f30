//! Recording a member failure durably before the set acknowledges anything
//! after it (docs/stripes.md §0, finding 3; md marks a member faulty in the
//! superblocks of the others before it completes the write that failed).
//! Owns the rewrite of the members' superblock copies with the set's next
//! membership generation.
//!
//! Invariant: when `StripeSet::flush` returns Ok, every member taken out of
//! use before it returned is stale on the media of every member still up:
//! each of their valid superblock copies carries a generation above the
//! failed member's, and is flushed. A member whose cache a power cut lost
//! (its failed flush taken for a member failure) is refused as stale by the
//! next assembly instead of being trusted with data it no longer holds.

use super::{meta, StripeSet, BS};
use crate::format::stripe::StripeIdentity;
use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use std::io;
use std::sync::atomic::Ordering;

impl StripeSet {
    /// If a member failed since the last record: write the set's next
    /// membership generation into every valid superblock copy of every
    /// member up, one copy place at a time (head 0, head 1, tail 0, tail 1),
    /// each followed by a flush of every member, so a power cut tears at
    /// most one place and its twin of the same index stands in (the
    /// engine's fallback rule for a torn superblock write). A member that
    /// fails meanwhile is recorded too; Err when more members are down than
    /// the parity covers (nothing is acknowledged then).
    pub(super) fn record_failures(&self) -> io::Result<()> {
        while self.unrecorded.swap(false, Ordering::AcqRel) {
            // no engine superblock write between our read and our write
            let _sb = self.sb_lock.lock();
            let gen = self.write_generation();
            let tail = self.member_tail_offset();
            for at in [0, BS, tail, tail + BS] {
                for m in 0..self.layout.members {
                    if self.up(m).is_none() {
                        continue;
                    }
                    let mut b = AlignedBuf::new(BLOCK_BYTES);
                    if self.mread(m, &mut b, at).is_err() {
                        continue;
                    }
                    let Ok(Some(mut id)) = StripeIdentity::from_superblock(&b) else {
                        continue;
                    };
                    if !meta::is_superblock(&b) || id.generation >= gen {
                        continue;
                    }
                    id.generation = gen;
                    meta::to_member(&mut b, &id);
                    self.mwrite(m, &b, at)?;
                }
                self.flush_members()?;
            }
            tracing::warn!(
                "stripe set: membership generation {gen} recorded on the members up ({})",
                self.status().describe()
            );
        }
        if self.down_count() > self.layout.parity as usize {
            return Err(io::Error::other(format!(
                "stripe set: {}; {} parity",
                self.status().describe(),
                self.layout.parity
            )));
        }
        Ok(())
    }
}
