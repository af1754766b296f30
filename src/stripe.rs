//! Stripe-set layout (issue 20): where the bytes of a segment live on the
//! members of a stripe set. Pure arithmetic, no IO; `format::stripe` holds
//! the bytes each member carries to say which set and slot it belongs to.
//!
//! A set has `members` devices, `parity` of them (0, 1 or 2: RAID-0, 5, 6)
//! hold parity in each row, and `members > parity + 1`. A **row** is one
//! `unit` of bytes on every member at the same member offset; its data is
//! `members - parity` units, which is the **write unit** the set advertises
//! (a row is written whole or not at all, so parity is never read to be
//! updated). A **segment** is `rows_per_segment` whole rows; segment `s`
//! holds rows `s * rows_per_segment ..`. Row `r` starts on every member at
//! `member_offset + r * unit`.
//!
//! Parity rotates as md's default `left-symmetric` layout (mdadm's default
//! for raid5 and raid6): in row `r` P is on member `n - 1 - r % n`, Q on the
//! member after it (wrapping), and data unit `d` of the row on member
//! `(P + parity + d) % n`, so consecutive data units walk the members in a
//! circle and a long sequential read touches every member evenly.
//!
//! Invariant: for every layout `new` accepts, `map` is a bijection from a
//! segment's bytes onto the member bytes of its rows that hold data (every
//! other byte of those rows is P or Q of the row: `role`), and every piece
//! it returns lies inside one unit.

use crate::format::stripe::{self as fstripe, Layout, MemberRefusal, StripeIdentity};
use crate::format::superblock::TAIL_AREA_BYTES;
use crate::format::BLOCK_BYTES;

/// Default stripe unit: 64 KiB. A row of 4 data members is then 256 KiB,
/// so a full 1 MiB chunk is whole rows for 1, 2, 4, 8 or 16 data members;
/// a 4 KiB read or a degraded 4 KiB reconstruction touches one unit per
/// member; and every member write is still at least 64 KiB. md's default
/// (512 KiB) would make the write unit of a 4+1 set 2 MiB, larger than any
/// chunk, so every flushed chunk would be a partial row.
pub const DEFAULT_STRIPE_UNIT: u64 = 64 << 10;
/// Most members of a set (`format::stripe`: Q's coefficients g^d are
/// distinct for at most 255 data members).
pub const MAX_MEMBERS: u32 = fstripe::MAX_MEMBERS as u32;
/// Largest stripe unit accepted (16 MiB).
pub const MAX_STRIPE_UNIT: u64 = fstripe::MAX_STRIPE_UNIT as u64;

/// Why a layout or a mapping was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("{members} members with {parity} parity: need parity 0..=2 and parity + 2 ..= {MAX_MEMBERS} members")]
    Members { members: u32, parity: u32 },
    #[error("stripe unit {0} bytes: must be a multiple of 4096 up to 16 MiB")]
    Unit(u64),
    #[error("a segment needs at least one row")]
    Rows,
    #[error("byte range {offset}+{len} is outside segment {segment} ({segment_bytes} bytes)")]
    Range {
        segment: u64,
        offset: u64,
        len: u64,
        segment_bytes: u64,
    },
    #[error("members too small: {0} bytes usable on the smallest, less than one segment")]
    TooSmall(u64),
}

/// What a member holds in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Data unit `d` (0-based) of the row.
    Data(u32),
    P,
    Q,
}

/// One contiguous piece of a segment-relative byte range on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub member: u32,
    /// Byte offset on the member.
    pub member_offset: u64,
    pub len: u64,
    /// Where the piece starts in the segment.
    pub segment_offset: u64,
    /// Absolute row number and data unit in the row.
    pub row: u64,
    pub data_index: u32,
}

/// What a set of members holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Rows every member has room for.
    pub rows: u64,
    /// Whole segments in those rows.
    pub segments: u64,
    /// Data bytes of those segments (parity excluded).
    pub data_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    pub members: u32,
    pub parity: u32,
    /// Bytes of one member in one row.
    pub unit: u64,
    pub rows_per_segment: u64,
    /// Where row 0 starts on every member (after the member's superblocks,
    /// checkpoint slots and log).
    pub member_offset: u64,
}

impl StripeLayout {
    pub fn new(
        members: u32,
        parity: u32,
        unit: u64,
        rows_per_segment: u64,
        member_offset: u64,
    ) -> Result<StripeLayout, LayoutError> {
        if parity > 2 || members < parity + 2 || members > MAX_MEMBERS {
            return Err(LayoutError::Members { members, parity });
        }
        if unit == 0 || !unit.is_multiple_of(BLOCK_BYTES as u64) || unit > MAX_STRIPE_UNIT {
            return Err(LayoutError::Unit(unit));
        }
        // A segment no larger than the superblock allows.
        let row = unit * (members - parity) as u64;
        if rows_per_segment == 0
            || rows_per_segment
                .checked_mul(row)
                .is_none_or(|b| b > fstripe::MAX_SEGMENT_BYTES)
        {
            return Err(LayoutError::Rows);
        }
        Ok(StripeLayout {
            members,
            parity,
            unit,
            rows_per_segment,
            member_offset,
        })
    }

    /// The layout a member's identity describes (row 0 at `member_offset`,
    /// the superblock's data offset).
    pub fn from_identity(
        id: &StripeIdentity,
        member_offset: u64,
    ) -> Result<StripeLayout, LayoutError> {
        match id.layout {
            Layout::LeftSymmetric => {}
        }
        StripeLayout::new(
            id.member_count as u32,
            id.parity as u32,
            id.stripe_unit as u64,
            id.rows_per_segment as u64,
            member_offset,
        )
    }

    /// Rows per segment closest to `target` segment bytes (at least one):
    /// today's 4 MiB segments are 16 rows of a 4+1 set at 64 KiB units.
    pub fn rows_for_segment_bytes(members: u32, parity: u32, unit: u64, target: u64) -> u64 {
        let row = unit.max(1) * members.saturating_sub(parity).max(1) as u64;
        ((target + row / 2) / row).max(1)
    }

    pub fn data_members(&self) -> u32 {
        self.members - self.parity
    }

    /// Data bytes of one row: the write unit the set advertises (SPDK
    /// raid5f's `write_unit_size`). Writes of whole rows never read.
    pub fn write_unit(&self) -> u64 {
        self.unit * self.data_members() as u64
    }

    pub fn segment_bytes(&self) -> u64 {
        self.rows_per_segment * self.write_unit()
    }

    /// The member holding P (`which` 0) or Q (`which` 1) in `row`; `None`
    /// when the set has no such parity.
    pub fn parity_member(&self, row: u64, which: u32) -> Option<u32> {
        if which >= self.parity {
            return None;
        }
        let n = self.members as u64;
        // MUTANT: parity-not-rotated s|n - 1 - row % n|n - 1|
        let p = n - 1 - row % n;
        Some(((p + which as u64) % n) as u32)
    }

    /// The member holding data unit `d` of `row` (`d < data_members()`).
    pub fn data_member(&self, row: u64, d: u32) -> u32 {
        assert!(d < self.data_members(), "data unit {d} of a {self:?} row");
        match self.parity_member(row, 0) {
            None => d,
            Some(p) => (p + self.parity + d) % self.members,
        }
    }

    /// What `member` holds in `row` (the inverse of `data_member` and
    /// `parity_member`).
    pub fn role(&self, row: u64, member: u32) -> Role {
        assert!(member < self.members, "member {member} of {}", self.members);
        let Some(p) = self.parity_member(row, 0) else {
            return Role::Data(member);
        };
        match (member + self.members - p) % self.members {
            0 => Role::P,
            1 if self.parity == 2 => Role::Q,
            rel => Role::Data(rel - self.parity),
        }
    }

    /// Byte offset on every member where `row` starts.
    pub fn row_offset(&self, row: u64) -> Option<u64> {
        row.checked_mul(self.unit)?.checked_add(self.member_offset)
    }

    /// The member pieces of `len` bytes at `offset` in `segment`, in segment
    /// order, split at every unit boundary.
    pub fn map(&self, segment: u64, offset: u64, len: u64) -> Result<Vec<Piece>, LayoutError> {
        let segment_bytes = self.segment_bytes();
        let range = LayoutError::Range {
            segment,
            offset,
            len,
            segment_bytes,
        };
        let end = match offset.checked_add(len) {
            Some(e) if e <= segment_bytes => e,
            _ => return Err(range),
        };
        let first_row = segment
            .checked_mul(self.rows_per_segment)
            .filter(|r| {
                r.checked_add(self.rows_per_segment)
                    .and_then(|e| self.row_offset(e))
                    .is_some()
            })
            .ok_or(range)?;
        let row_bytes = self.write_unit();
        let mut out = Vec::with_capacity((len / self.unit + 2) as usize);
        let mut pos = offset;
        while pos < end {
            let row = first_row + pos / row_bytes;
            let in_row = pos % row_bytes;
            let d = (in_row / self.unit) as u32;
            let in_unit = in_row % self.unit;
            let take = (self.unit - in_unit).min(end - pos);
            out.push(Piece {
                member: self.data_member(row, d),
                member_offset: self.member_offset + row * self.unit + in_unit,
                len: take,
                segment_offset: pos,
                row,
                data_index: d,
            });
            pos += take;
        }
        Ok(out)
    }

    /// What members of these sizes hold: the smallest one sets the rows
    /// (each member keeps `member_offset` at its head and the superblock
    /// tail area at its end), rounded down to whole segments.
    pub fn capacity(&self, member_bytes: &[u64]) -> Result<Capacity, LayoutError> {
        if member_bytes.len() != self.members as usize {
            return Err(LayoutError::Members {
                members: member_bytes.len() as u32,
                parity: self.parity,
            });
        }
        let smallest = member_bytes.iter().copied().min().unwrap_or(0);
        let usable = smallest.saturating_sub(self.member_offset + TAIL_AREA_BYTES);
        let segments = usable / self.unit / self.rows_per_segment;
        if segments == 0 {
            return Err(LayoutError::TooSmall(usable));
        }
        Ok(Capacity {
            rows: usable / self.unit,
            segments,
            data_bytes: segments * self.segment_bytes(),
        })
    }
}

/// Members found on the devices given (in any order), put in their slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    /// The set's identity as its newest member says (its own member fields
    /// are that member's).
    pub set: StripeIdentity,
    /// For each slot, the index into the `found` list that fills it.
    pub slots: Vec<Option<usize>>,
}

impl Assembly {
    /// Slots no device filled: the set serves degraded without them.
    pub fn missing(&self) -> Vec<u16> {
        (0..self.slots.len() as u16)
            .filter(|&s| self.slots[s as usize].is_none())
            .collect()
    }
}

/// Why the devices given do not make a set. Each names the device(s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssemblyError {
    #[error("no stripe-set member among the devices given")]
    Empty,
    #[error("{name} {why}")]
    Refused { name: String, why: MemberRefusal },
    #[error("{first} and {second} both claim member {slot} of the set (a copied device?)")]
    DuplicateSlot {
        slot: u16,
        first: String,
        second: String,
    },
    #[error(
        "members {missing:?} are missing; a set with {parity} parity can lose at most {parity}"
    )]
    TooManyMissing { missing: Vec<u16>, parity: u8 },
}

/// Put the members found (`(device name, identity)`, in any order) into
/// their slots. The set is the one most devices name (the first device's on a
/// tie); a device of another set, of another shape, or stale is refused by
/// name, as is a second device for a slot. Up to `parity` missing slots
/// assemble (degraded); more refuse.
///
/// Stale: below the set's generation, which is the highest generation that
/// at least `members - parity` of the members found carry or exceed (the
/// newest found, when all are found and none missed a change). Why not
/// simply the newest: the set acknowledges nothing at a new generation
/// before it is durable on every member up, at least `members - parity` of
/// them (a degraded mount's superblock write, `StripeSet::record_failures`
/// before a FLUSH returns); a newer generation on fewer was cut short by a
/// power cut before any acknowledgement, so the members below it missed
/// nothing acknowledged and are not stale. On that many or more it may or
/// may not have been acknowledged: the members below it are refused (the
/// safe side; docs/stripes.md §0, finding 3).
pub fn assemble(found: &[(String, StripeIdentity)]) -> Result<Assembly, AssemblyError> {
    let count = |u: &[u8; 16]| found.iter().filter(|(_, i)| &i.set_uuid == u).count();
    let Some(first) = found.first() else {
        return Err(AssemblyError::Empty);
    };
    let mut uuid = first.1.set_uuid;
    for (_, id) in found {
        if count(&id.set_uuid) > count(&uuid) {
            uuid = id.set_uuid;
        }
    }
    let mut set = found
        .iter()
        .filter(|(_, i)| i.set_uuid == uuid)
        .map(|(_, i)| *i)
        .max_by_key(|i| i.generation)
        .expect("the chosen set has a member");
    let mut gens: Vec<u64> = found
        .iter()
        .filter(|(_, i)| i.set_uuid == uuid)
        .map(|(_, i)| i.generation)
        .collect();
    gens.sort_unstable_by(|a, b| b.cmp(a));
    let quorum = (set.member_count as usize).saturating_sub(set.parity as usize);
    // MUTANT: stale-by-newest-generation s|gens.get(quorum.max(1) - 1)|gens.first()|
    set.generation = match gens.get(quorum.max(1) - 1) {
        Some(&g) => g,
        // fewer found than a set needs: refused below as missing
        None => *gens.last().expect("the chosen set has a member"),
    };
    let mut slots: Vec<Option<usize>> = vec![None; set.member_count as usize];
    for (n, (name, id)) in found.iter().enumerate() {
        let refuse = |why| AssemblyError::Refused {
            name: name.clone(),
            why,
        };
        id.check_member(&set, id.member_index).map_err(refuse)?;
        let slot = &mut slots[id.member_index as usize];
        if let Some(other) = *slot {
            return Err(AssemblyError::DuplicateSlot {
                slot: id.member_index,
                first: found[other].0.clone(),
                second: name.clone(),
            });
        }
        *slot = Some(n);
    }
    let a = Assembly { set, slots };
    let missing = a.missing();
    if missing.len() > set.parity as usize {
        return Err(AssemblyError::TooManyMissing {
            missing,
            parity: set.parity,
        });
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md_left_symmetric_raid5_on_four_members() {
        // mdadm's picture of left-symmetric:
        //   D0  D1  D2  P
        //   D4  D5  P   D3
        //   D8  P   D6  D7
        //   P   D9  D10 D11
        let l = StripeLayout::new(4, 1, 4096, 1, 0).unwrap();
        let want = [[0, 1, 2], [3, 0, 1], [2, 3, 0], [1, 2, 3]];
        for (row, w) in want.iter().enumerate() {
            let got: Vec<u32> = (0..3).map(|d| l.data_member(row as u64, d)).collect();
            assert_eq!(got, w.to_vec(), "row {row}");
        }
        assert_eq!(l.parity_member(1, 0), Some(2));
    }

    #[test]
    fn raid6_q_follows_p() {
        let l = StripeLayout::new(5, 2, 4096, 1, 0).unwrap();
        assert_eq!(
            (l.parity_member(0, 0), l.parity_member(0, 1)),
            (Some(4), Some(0))
        );
        assert_eq!(
            (l.parity_member(1, 0), l.parity_member(1, 1)),
            (Some(3), Some(4))
        );
        assert_eq!(l.data_member(1, 0), 0);
        assert_eq!(l.role(1, 4), Role::Q);
    }
}
