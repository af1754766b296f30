//! Self-healing reads of a stripe set (issue 20 item 4, docs/stripes.md §5):
//! a block that failed its CRC while every member answered is looked for
//! among the candidates its row allows (`parity::heal`: each member of the
//! row taken in turn as the wrong one; with Q also a data member together
//! with P or Q, or two data members), and the wrong pieces are rewritten in
//! place on their members.
//!
//! Why in place and not by relocation: the log never rewrites live data, but
//! this rewrite puts back the bytes the row's parity already stands for, so
//! the row agrees with its parity again (a relocated block would leave a bad
//! unit in a row whose other blocks a later member loss rebuilds through it).
//! A torn rewrite leaves the piece wrong or right, never worse than before.
//!
//! Recovery asks the same (`heal_read`) without any rewrite: the mount
//! writes nothing until it has judged the log, and rewrites the blocks
//! afterwards through `heal_block`. A row partial at the last shutdown, its
//! parity only in a scratch copy until the resync, is healed from the
//! newest copy that covers the block and rebuilds a block that passes.
//!
//! Parity scrub (`scrub_parity`, issue 20 item 5): every full row of a
//! closed segment read whole, its parity recomputed from its data and
//! compared; a row that disagrees is named, and (repairing form) its parity
//! rewritten from the data when no data block of the row fails its check.
//!
//! Invariant: nothing is written unless the reported block's candidate
//! passes the caller's check (`Repair::Healed` only then); a data piece is
//! rewritten only with bytes that pass the check, parity only with its
//! recomputation from data that passed. No candidate, or two: nothing is
//! written and the answer is `Undecidable` (the read answers EIO).

use super::{StripeSet, BS};
use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use crate::parity::{self, Heal};
use crate::store::Repair;
use std::io;
use std::sync::atomic::Ordering;

/// What `find_heal` found for a block that failed its check: its right
/// bytes, and the member pieces (at member offset `at`) to rewrite so the
/// row holds them (none: the block verified when read again).
struct Found {
    bytes: AlignedBuf,
    pieces: Vec<(u32, AlignedBuf)>,
    at: u64,
}

impl StripeSet {
    /// The block at byte `off` of the segment area failed `check` (see
    /// `SegmentStore::damaged`) while every member answered: find its right
    /// bytes, rewrite what was wrong, flush the members written.
    pub fn heal_block(
        &self,
        off: u64,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
    ) -> io::Result<Repair> {
        let p = off / BS;
        match self.find_heal(off, check, false)? {
            Err(r) => Ok(r),
            Ok(f) if f.pieces.is_empty() => Ok(Repair::Healed { pieces: 0 }),
            Ok(f) => self.rewrite(p, &f.pieces, f.at),
        }
    }

    /// Recovery's form of `heal_block` (recovery performs no writes): the
    /// right bytes of the block at byte `off`, found and checked as
    /// `heal_block` finds them, without rewriting anything; None when they
    /// cannot be found (the same cases in which `heal_block` answers
    /// `Undecidable`). The caller repairs the block in place later, through
    /// `heal_block`, if the mount may write.
    pub fn heal_read(
        &self,
        off: u64,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
    ) -> io::Result<Option<AlignedBuf>> {
        Ok(self.find_heal(off, check, true)?.ok().map(|f| f.bytes))
    }

    /// Find the right bytes of the block at byte `off` and what to rewrite;
    /// Err(answer) when there is nothing to find (`Repair::None` on RAID-0)
    /// or it cannot be found (`Undecidable`, counted and logged unless
    /// `quiet`: recovery asks about every block that fails, torn writes no
    /// FLUSH acknowledged included, which no row can rebuild).
    fn find_heal(
        &self,
        off: u64,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
        quiet: bool,
    ) -> io::Result<Result<Found, Repair>> {
        let l = self.layout;
        if l.parity == 0 {
            return Ok(Err(Repair::None));
        }
        self.check_area(off, BLOCK_BYTES)?;
        let row_bytes = l.write_unit();
        let (row, in_row) = (off / row_bytes, off % row_bytes);
        let d = (in_row / l.unit) as usize;
        let col = in_row % l.unit;
        let p = off / BS;
        let fail = |why: &str| {
            if !quiet {
                self.counters.heal_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "stripe set: block {p} (row {row}, data unit {d}) fails its check and cannot be healed: {why}"
                );
            }
            Ok(Err(Repair::Undecidable))
        };
        if self.down_count() > 0 {
            return fail(
                "the set is degraded (the row's redundancy is spent on the missing member)",
            );
        }
        let base = l.row_offset(row).expect("row inside the set");
        let me = l.data_member(row, d as u32);
        let tags = self.rows.lock().mount_tags.get(&row).cloned();
        if let Some(tags) = tags {
            // Partial at the last shutdown, not resynced yet: its parity is
            // a scratch copy (blocks a copy does not cover count as zero).
            // The block as the newest copy covering it (and passing) rebuilds
            // it from the row's other covered blocks; only its own piece is
            // rewritten (the copy stands for the right bytes, and the resync
            // puts parity in place from the data).
            let mut seqs: Vec<u64> = tags.iter().map(|t| t.seq).collect();
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            for seq in seqs {
                let one: Vec<super::MountTag> =
                    tags.iter().filter(|t| t.seq == seq).cloned().collect();
                let mut blk = AlignedBuf::new(BLOCK_BYTES);
                if self.reconstruct_tagged(row, d as u32, col / BS, &mut blk, &one)?
                    && check(p, &blk) == Some(true)
                {
                    let mut piece = AlignedBuf::new(BLOCK_BYTES);
                    piece.copy_from_slice(&blk);
                    return Ok(Ok(Found {
                        bytes: blk,
                        pieces: vec![(me, piece)],
                        at: base + col,
                    }));
                }
            }
            return fail("no scratch copy of the row's parity rebuilds it");
        }
        // A row this mount is filling: memory holds its data as written, and
        // the row's state lock keeps writes to it out while we look.
        let state = self.rows.lock().get(row);
        let st = state.as_ref().map(|s| s.lock());
        if let Some(st) = &st {
            if let Some(b) = st.block((in_row / BS) as usize) {
                if check(p, b) == Some(true) {
                    let mut buf = AlignedBuf::new(BLOCK_BYTES);
                    buf.copy_from_slice(b);
                    let mut bytes = AlignedBuf::new(BLOCK_BYTES);
                    bytes.copy_from_slice(b);
                    return Ok(Ok(Found {
                        bytes,
                        pieces: vec![(me, buf)],
                        at: base + col,
                    }));
                }
            }
            if st.dirty {
                return fail("the row is being filled and its parity is not written yet");
            }
        }
        let n = l.members as usize;
        let dn = l.data_members() as usize;
        let mut shards: Vec<AlignedBuf> = (0..n).map(|_| AlignedBuf::new(BLOCK_BYTES)).collect();
        for (i, s) in shards.iter_mut().enumerate() {
            if self
                .mread(self.shard_member(row, i as u32), s, base + col)
                .is_err()
            {
                return fail("a member of the row failed to read");
            }
        }
        match check(p, &shards[d]) {
            // right when read again (a race with a rewrite, or a transient)
            Some(true) => {
                let bytes = std::mem::replace(&mut shards[d], AlignedBuf::new(BLOCK_BYTES));
                return Ok(Ok(Found {
                    bytes,
                    pieces: Vec::new(),
                    at: base + col,
                }));
            }
            Some(false) => {}
            None => return fail("the caller cannot judge the block"),
        }
        let phys = |i: usize| (row * row_bytes + i as u64 * l.unit + col) / BS;
        // a block the caller knows nothing of (padding, a chunk's unused
        // tail) is taken as right: the candidates still have to pass
        // MUTANT: heal-ignores-crc s|check(phys(i), b).unwrap_or(true)|true|
        let mut valid = |i: usize, b: &[u8]| check(phys(i), b).unwrap_or(true);
        let refs: Vec<&[u8]> = shards.iter().map(|s| &s[..]).collect();
        let list = match parity::heal(&refs, dn, &mut valid) {
            Ok(Heal::Repair(list)) if list.iter().any(|(i, _)| *i == d) => list,
            Ok(Heal::Repair(_)) | Ok(Heal::Clean) => {
                return fail("the row's parity points at another member")
            }
            Ok(Heal::Undecidable) => return fail("no candidate verifies"),
            Err(e) => return fail(&e.to_string()),
        };
        let mut right = AlignedBuf::new(BLOCK_BYTES);
        let pieces: Vec<(u32, AlignedBuf)> = list
            .into_iter()
            .map(|(i, bytes)| {
                let mut buf = AlignedBuf::new(BLOCK_BYTES);
                buf.copy_from_slice(&bytes);
                if i == d {
                    right.copy_from_slice(&bytes);
                }
                (self.shard_member(row, i as u32), buf)
            })
            .collect();
        Ok(Ok(Found {
            bytes: right,
            pieces,
            at: base + col,
        }))
    }

    /// Compare the parity of every full row of segment `seg` below block
    /// `fill` with its data (rows held in memory or named by a scratch tag
    /// are skipped: their parity is not in place yet); one line per row that
    /// disagrees. `repair`: rewrite the parity of such a row from its data,
    /// unless a data block of the row fails `check` (then the data is what
    /// is wrong, and heal's business). Nothing on a degraded set.
    pub fn scrub_parity(
        &self,
        seg: u32,
        fill: u32,
        check: &mut dyn FnMut(u64, &[u8]) -> Option<bool>,
        repair: bool,
    ) -> io::Result<Vec<String>> {
        let l = self.layout;
        let mut out = Vec::new();
        if l.parity == 0 || self.down_count() > 0 || seg >= self.shape.segment_count {
            return Ok(out);
        }
        let row_bytes = l.write_unit();
        let u = l.unit as usize;
        let dn = l.data_members() as usize;
        let rps = l.rows_per_segment;
        let full = (fill as u64 * BS / row_bytes).min(rps);
        let first = seg as u64 * rps;
        for row in first..first + full {
            {
                let t = self.rows.lock();
                if t.get(row).is_some() || t.mount_tags.contains_key(&row) {
                    continue;
                }
            }
            let base = l.row_offset(row).expect("row inside the set");
            let mut shards: Vec<AlignedBuf> = (0..l.members).map(|_| AlignedBuf::new(u)).collect();
            let mut unread = false;
            for (i, s) in shards.iter_mut().enumerate() {
                unread |= self
                    .mread(self.shard_member(row, i as u32), s, base)
                    .is_err();
            }
            if unread {
                out.push(format!(
                    "row {row} (segment {seg}): a member failed to read; parity not checked"
                ));
                continue;
            }
            let mut fresh: Vec<AlignedBuf> = (0..l.parity).map(|_| AlignedBuf::new(u)).collect();
            {
                let data: Vec<&[u8]> = shards[..dn].iter().map(|s| &s[..]).collect();
                let mut refs: Vec<&mut [u8]> = fresh.iter_mut().map(|p| &mut p[..]).collect();
                parity::encode(&data, &mut refs).map_err(io::Error::other)?;
            }
            let mut wrong = Vec::new();
            for k in 0..l.parity as usize {
                // MUTANT: parity-scrub-blind s|if fresh[k][..] != shards[dn + k][..] {|if false {|
                if fresh[k][..] != shards[dn + k][..] {
                    wrong.push(k);
                }
            }
            if wrong.is_empty() {
                continue;
            }
            self.counters
                .parity_mismatches
                .fetch_add(1, Ordering::Relaxed);
            let names: Vec<String> = wrong
                .iter()
                .map(|&k| {
                    let at = (0..u)
                        .find(|&b| fresh[k][b] != shards[dn + k][b])
                        .unwrap_or(0);
                    let m = self.shard_member(row, (dn + k) as u32);
                    format!(
                        "{} on member {m} ({}) from byte {at}",
                        ["P", "Q"][k],
                        self.members[m as usize].name
                    )
                })
                .collect();
            let mut line = format!(
                "row {row} (segment {seg}): parity disagrees with the row's data: {}",
                names.join(", ")
            );
            let bad_data = (0..dn).any(|i| {
                shards[i].chunks(BLOCK_BYTES).enumerate().any(|(c, b)| {
                    let q = (row * row_bytes + (i * u + c * BLOCK_BYTES) as u64) / BS;
                    check(q, b) == Some(false)
                })
            });
            if !repair {
                line.push_str("; not rewritten (checking only)");
            } else if bad_data {
                line.push_str("; not rewritten: a data block of the row fails its check");
            } else {
                for &k in &wrong {
                    let m = self.shard_member(row, (dn + k) as u32);
                    // MUTANT: parity-scrub-repair-skipped s|self.mwrite(m, &fresh[k], base)?;|let _ = m;|
                    self.mwrite(m, &fresh[k], base)?;
                }
                self.flush_members()?;
                line.push_str("; rewritten from the data");
            }
            tracing::warn!("stripe set: {line}");
            out.push(line);
        }
        Ok(out)
    }

    /// Write each `(member, bytes)` at member offset `at`, flush them.
    fn rewrite(&self, p: u64, pieces: &[(u32, AlignedBuf)], at: u64) -> io::Result<Repair> {
        for (m, buf) in pieces {
            // MUTANT: heal-rewrite-skipped s|self.mwrite(*m, buf, at)?;|let _ = (m, buf, at);|
            self.mwrite(*m, buf, at)?;
        }
        for (m, _) in pieces {
            if let Some(media) = self.up(*m) {
                if let Err(e) = media.flush() {
                    self.fail(*m, e)?;
                }
            }
        }
        self.counters.healed.fetch_add(1, Ordering::Relaxed);
        let names: Vec<String> = pieces
            .iter()
            .map(|(m, _)| format!("{m} ({})", self.members[*m as usize].name))
            .collect();
        tracing::warn!(
            "stripe set: block {p} failed its check; healed from its row, rewrote members {}",
            names.join(", ")
        );
        Ok(Repair::Healed {
            pieces: pieces.len() as u32,
        })
    }
}
