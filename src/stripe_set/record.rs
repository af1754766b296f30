//! Recording a member failure durably before the set acknowledges anything
//! after it (docs/stripes.md §0, finding 3; md marks a member faulty in the
//! superblocks of the others before it completes the write that failed).
//! Owns the rewrite of the members' superblock copies with the set's next
//! membership generation, and the repair at a writable mount of a member's
//! superblock copy that fails its check (`repair_superblocks`).
//!
//! Invariant: when `StripeSet::flush` returns Ok, every member taken out of
//! use before it returned is stale on the media of every member still up:
//! each of their valid superblock copies carries a generation above the
//! failed member's, and is flushed. A member whose cache a power cut lost
//! (its failed flush taken for a member failure) is refused as stale by the
//! next assembly instead of being trusted with data it no longer holds.
//! And: after `repair_superblocks` returns Ok, every superblock copy place
//! holds a valid copy on every member up that some member holds one at, so
//! the engine's rule (write one copy, flush, only then the other) keeps a
//! valid copy on *each* member, not only on the one its reads come from.

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

    /// A writable mount, before the engine writes anything: each superblock
    /// copy place (head 0, head 1, tail 0, tail 1) whose block fails its
    /// check on a member up is rewritten from the copy the engine reads
    /// there (the first member's whose copy verifies, as `SetMedia` reads
    /// it), with this member's identity, then the members are flushed.
    /// Returns the copies rewritten.
    ///
    /// Why (docs/stripes.md §0, finding 4): the engine sees one member's
    /// copies (the first that verifies) and writes the other copy place
    /// next. A power cut tears a copy on the members whose flush it
    /// preceded, and the engine, reading another member, does not see it:
    /// two cut mounts in a row tore head 0 and then head 1 on the same
    /// member (DST seed 2^20+1), and assembly refused it as no member.
    /// Rewriting only copies that fail their check cannot make any member
    /// worse, so a cut during this repair needs no ordering.
    pub fn repair_superblocks(&self) -> io::Result<u32> {
        let _sb = self.sb_lock.lock();
        let tail = self.member_tail_offset();
        let gen = self.write_generation();
        let mut fixed = 0;
        for at in [0, BS, tail, tail + BS] {
            let copies: Vec<Option<AlignedBuf>> = (0..self.layout.members)
                .map(|m| {
                    let mut b = AlignedBuf::new(BLOCK_BYTES);
                    self.mread(m, &mut b, at).ok().map(|_| b)
                })
                .collect();
            let Some(good) = copies.iter().flatten().find(|b| meta::is_superblock(b)) else {
                continue;
            };
            let mut plain = AlignedBuf::new(BLOCK_BYTES);
            plain.copy_from_slice(good);
            meta::from_member(&mut plain);
            for (m, c) in copies.iter().enumerate() {
                // (a member that cannot be read here is down or being
                // rebuilt: not ours to write)
                let whole_or_absent = c.as_ref().is_none_or(|b| meta::is_superblock(b));
                // MUTANT: superblock-copies-not-repaired s|if whole_or_absent {|if true {|
                if whole_or_absent {
                    continue;
                }
                let mut id = self.members[m].ident;
                id.generation = gen;
                let mut b = AlignedBuf::new(BLOCK_BYTES);
                b.copy_from_slice(&plain);
                meta::to_member(&mut b, &id);
                tracing::warn!(
                    "stripe set: member {m} ({}): the superblock copy at byte {at} fails its check; rewritten from another member's",
                    self.members[m].name
                );
                self.mwrite(m as u32, &b, at)?;
                fixed += 1;
            }
        }
        if fixed > 0 {
            self.flush_members()?;
        }
        Ok(fixed)
    }
}
