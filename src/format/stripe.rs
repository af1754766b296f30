//! Stripe-set member identity (format v2, `STRIPE_SET`, docs/format-v2.md
//! §6): the 64 bytes of per-feature geometry at superblock offset 200 that
//! tell a member which set it belongs to, which slot it fills, and the set's
//! shape. Pure encode/decode, no IO; the superblock's CRC covers these bytes.
//!
//! Invariant: `decode` returns only identities whose shape a stripe set can
//! have (members 2..=255 with parity 0..=2 and members > parity + 1, index
//! < members, unit a multiple of 4096 up to 16 MiB, rows >= rows per segment,
//! known layout, non-zero uuids, zero reserved bytes), and `check_member`
//! refuses, by name, any member that is not the one a slot expects.

use super::{get_u16, get_u32, get_u64, invalid, put_u16, put_u32, put_u64, FormatError};
use super::{superblock::incompat, BLOCK_BYTES};

/// Where the identity lives in a version-2 superblock, and its size.
pub const GEOMETRY_OFFSET: usize = 200;
pub const GEOMETRY_BYTES: usize = 64;
/// The incompat bit of stripe-set members (defined with the others in
/// `superblock::incompat`; not set by `create` yet).
pub const STRIPE_SET: u64 = incompat::STRIPE_SET;

/// Most members of a set: Q's coefficients g^d are distinct for at most 255
/// data members, and the layout keeps at least one data member.
pub const MAX_MEMBERS: u16 = 255;
/// Largest stripe unit (16 MiB).
pub const MAX_STRIPE_UNIT: u32 = 16 << 20;
/// Largest segment: the superblock's limit on `segment_blocks` (2^20 blocks).
pub const MAX_SEGMENT_BYTES: u64 = (1 << 20) * BLOCK_BYTES as u64;
/// Largest member area in use (rows * unit): 2^62 bytes, so every member
/// offset plus a head area stays a u64.
pub const MAX_MEMBER_BYTES: u64 = 1 << 62;

/// How data and parity rotate over the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// md's `left-symmetric` (`src/stripe.rs`), mdadm's default.
    LeftSymmetric = 0,
}

/// What one member says about itself and its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeIdentity {
    /// The set: the same on every member (random at create).
    pub set_uuid: [u8; 16],
    /// This device (random when it joins: at create, or when it replaces a
    /// failed member), so messages and `info` can name it.
    pub member_uuid: [u8; 16],
    /// The slot it fills, 0-based.
    pub member_index: u16,
    pub member_count: u16,
    /// 0, 1 or 2 (RAID-0, 5, 6).
    pub parity: u8,
    pub layout: Layout,
    /// Bytes of one member in one row.
    pub stripe_unit: u32,
    pub rows_per_segment: u32,
    /// Rows in use on every member (the set's size, fixed at create by the
    /// smallest member: a larger replacement keeps it).
    pub rows: u64,
    /// Membership generation: +1 on every member each time a slot changes
    /// hands (replace, rebuild done). A member below the highest generation
    /// among those found is stale: it missed a change and is refused.
    pub generation: u64,
}

impl StripeIdentity {
    pub fn encode(&self) -> [u8; GEOMETRY_BYTES] {
        let mut b = [0u8; GEOMETRY_BYTES];
        b[0..16].copy_from_slice(&self.set_uuid);
        b[16..32].copy_from_slice(&self.member_uuid);
        put_u16(&mut b, 32, self.member_index);
        put_u16(&mut b, 34, self.member_count);
        b[36] = self.parity;
        b[37] = self.layout as u8;
        // 38..40 reserved, 0
        put_u32(&mut b, 40, self.stripe_unit);
        put_u32(&mut b, 44, self.rows_per_segment);
        put_u64(&mut b, 48, self.rows);
        put_u64(&mut b, 56, self.generation);
        b
    }

    /// Decode and validate the 64 geometry bytes.
    pub fn decode(b: &[u8]) -> Result<StripeIdentity, FormatError> {
        if b.len() < GEOMETRY_BYTES {
            return Err(FormatError::Short {
                need: GEOMETRY_BYTES,
                have: b.len(),
            });
        }
        let layout = match b[37] {
            0 => Layout::LeftSymmetric,
            l => return Err(invalid("stripe layout", format!("{l} is not known"))),
        };
        let id = StripeIdentity {
            set_uuid: b[0..16].try_into().expect("16 bytes"),
            member_uuid: b[16..32].try_into().expect("16 bytes"),
            member_index: get_u16(b, 32),
            member_count: get_u16(b, 34),
            parity: b[36],
            layout,
            stripe_unit: get_u32(b, 40),
            rows_per_segment: get_u32(b, 44),
            rows: get_u64(b, 48),
            generation: get_u64(b, 56),
        };
        if get_u16(b, 38) != 0 {
            return Err(invalid("stripe reserved", "not zero"));
        }
        if id.set_uuid == [0; 16] {
            return Err(invalid("stripe set_uuid", "zero"));
        }
        if id.member_uuid == [0; 16] {
            return Err(invalid("stripe member_uuid", "zero"));
        }
        let (n, p) = (id.member_count, id.parity as u16);
        if p > 2 || n < p + 2 || n > MAX_MEMBERS {
            return Err(invalid(
                "stripe member_count",
                format!("{n} members with parity {p}"),
            ));
        }
        if id.member_index >= n {
            return Err(invalid(
                "stripe member_index",
                format!("{} of {n} members", id.member_index),
            ));
        }
        let u = id.stripe_unit;
        if u == 0 || !u.is_multiple_of(BLOCK_BYTES as u32) || u > MAX_STRIPE_UNIT {
            return Err(invalid("stripe_unit", u.to_string()));
        }
        if id.rows_per_segment == 0 || id.rows < id.rows_per_segment as u64 {
            return Err(invalid(
                "stripe rows",
                format!("{} rows, {} per segment", id.rows, id.rows_per_segment),
            ));
        }
        let segment = id.rows_per_segment as u64 * u as u64 * (n - p) as u64;
        if segment > MAX_SEGMENT_BYTES {
            return Err(invalid(
                "stripe rows_per_segment",
                format!("segments of {segment} bytes"),
            ));
        }
        if id
            .rows
            .checked_mul(u as u64)
            .is_none_or(|b| b > MAX_MEMBER_BYTES)
        {
            return Err(invalid("stripe rows", format!("{} rows too many", id.rows)));
        }
        Ok(id)
    }

    /// The identity in a version-2 superblock block (already decoded and
    /// CRC-checked by `Superblock::decode`, or about to be): `None` when the
    /// block is not a v2 superblock with `STRIPE_SET` set.
    pub fn from_superblock(block: &[u8]) -> Result<Option<StripeIdentity>, FormatError> {
        if block.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: block.len(),
            });
        }
        if get_u16(block, 8) != super::FORMAT_VERSION_2 || get_u64(block, 160) & STRIPE_SET == 0 {
            return Ok(None);
        }
        Self::decode(&block[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES]).map(Some)
    }

    /// The same set and shape (everything but the member's own fields).
    pub fn same_set(&self, other: &StripeIdentity) -> bool {
        self.set_uuid == other.set_uuid
            && self.member_count == other.member_count
            && self.parity == other.parity
            && self.layout == other.layout
            && self.stripe_unit == other.stripe_unit
            && self.rows_per_segment == other.rows_per_segment
            && self.rows == other.rows
    }

    /// Is this member the one `slot` of the set `expect` describes? Refuses
    /// by name: another set, another shape, another slot, a stale member.
    pub fn check_member(&self, expect: &StripeIdentity, slot: u16) -> Result<(), MemberRefusal> {
        if self.set_uuid != expect.set_uuid {
            return Err(MemberRefusal::OtherSet {
                theirs: self.set_uuid,
                ours: expect.set_uuid,
            });
        }
        if !self.same_set(expect) {
            return Err(MemberRefusal::Shape);
        }
        // MUTANT: member-wrong-slot-accepted s|self.member_index != slot|false|
        if self.member_index != slot {
            return Err(MemberRefusal::WrongSlot {
                claims: self.member_index,
                slot,
            });
        }
        // MUTANT: stale-member-accepted s|self.generation < expect.generation|false|
        if self.generation < expect.generation {
            return Err(MemberRefusal::Stale {
                generation: self.generation,
                set: expect.generation,
            });
        }
        Ok(())
    }
}

/// Why a device is not the member a slot expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemberRefusal {
    #[error("belongs to stripe set {}, not {}", hex(theirs), hex(ours))]
    OtherSet { theirs: [u8; 16], ours: [u8; 16] },
    #[error("has the set's uuid but another shape (members, parity, unit or rows differ)")]
    Shape,
    #[error("is member {claims} of the set, not member {slot}")]
    WrongSlot { claims: u16, slot: u16 },
    #[error("is stale: membership generation {generation}, the set is at {set}")]
    Stale { generation: u64, set: u64 },
}

/// A uuid as 32 hex digits.
/// Where a member being rebuilt keeps its progress: blocks 2 and 3 of its
/// own tail area (blocks 0 and 1 are the tail superblock copies; the engine
/// never writes 2 or 3), record `next_segment % 2` in block 2 + that, so a
/// torn write of one leaves the other. Written only to the member being
/// rebuilt, never mirrored (docs/stripes.md §6, docs/format-v2.md §6).
pub const REBUILD_RECORD_BLOCK: u64 = 2;
const REBUILD_MAGIC: [u8; 8] = *b"SLREBLD1";

/// A member being rebuilt: its pieces of segments below `next_segment` are
/// written and flushed; above, they are not to be read. No valid record
/// (zeros): the member is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildRecord {
    pub set_uuid: [u8; 16],
    /// The member being rebuilt (its identity's `member_uuid`).
    pub member_uuid: [u8; 16],
    pub next_segment: u32,
    pub segment_count: u32,
}

impl RebuildRecord {
    pub fn encode(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..8].copy_from_slice(&REBUILD_MAGIC);
        b[8..24].copy_from_slice(&self.set_uuid);
        b[24..40].copy_from_slice(&self.member_uuid);
        put_u32(&mut b, 40, self.next_segment);
        put_u32(&mut b, 44, self.segment_count);
        let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
        put_u32(&mut b, BLOCK_BYTES - 4, crc);
        b
    }

    /// The record in `b`, None when `b` holds none (zeros, torn, other bytes).
    pub fn decode(b: &[u8]) -> Option<RebuildRecord> {
        if b.len() < BLOCK_BYTES
            || b[0..8] != REBUILD_MAGIC
            || crc32c::crc32c(&b[..BLOCK_BYTES - 4]) != get_u32(b, BLOCK_BYTES - 4)
        {
            return None;
        }
        let r = RebuildRecord {
            set_uuid: b[8..24].try_into().expect("16 bytes"),
            member_uuid: b[24..40].try_into().expect("16 bytes"),
            next_segment: get_u32(b, 40),
            segment_count: get_u32(b, 44),
        };
        (r.next_segment <= r.segment_count).then_some(r)
    }
}

pub fn hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rebuild_records_round_trip_and_refuse_damage() {
        use super::RebuildRecord;
        let r = RebuildRecord {
            set_uuid: [7; 16],
            member_uuid: [9; 16],
            next_segment: 5,
            segment_count: 40,
        };
        let b = r.encode();
        assert_eq!(RebuildRecord::decode(&b), Some(r));
        for i in [0, 10, 41, 4000] {
            let mut d = b;
            d[i] ^= 1;
            assert_eq!(RebuildRecord::decode(&d), None, "byte {i}");
        }
        assert_eq!(RebuildRecord::decode(&[0u8; 4096]), None);
    }
    use super::*;
    use crate::format::superblock::{LogStart, SbV2, Superblock};

    fn id() -> StripeIdentity {
        StripeIdentity {
            set_uuid: *b"stripe-set-uuid!",
            member_uuid: *b"member-uuid-0003",
            member_index: 3,
            member_count: 5,
            parity: 1,
            layout: Layout::LeftSymmetric,
            stripe_unit: 64 << 10,
            rows_per_segment: 16,
            rows: 8192,
            generation: 7,
        }
    }

    #[test]
    fn round_trips_and_every_field_has_its_own_bytes() {
        let a = id();
        let b = a.encode();
        assert_eq!(StripeIdentity::decode(&b), Ok(a));
        // Changing any one field changes the bytes at its offset only.
        let mut c = a;
        c.generation = 8;
        let d = c.encode();
        let diff: Vec<usize> = (0..64).filter(|&i| b[i] != d[i]).collect();
        assert_eq!(diff, vec![56]);
    }

    #[test]
    fn impossible_shapes_are_refused() {
        type Edit = Box<dyn Fn(&mut StripeIdentity)>;
        let bad: Vec<(&str, Edit)> = vec![
            ("zero set uuid", Box::new(|i| i.set_uuid = [0; 16])),
            ("zero member uuid", Box::new(|i| i.member_uuid = [0; 16])),
            ("index out of range", Box::new(|i| i.member_index = 5)),
            ("too few members", Box::new(|i| i.member_count = 2)),
            ("parity 3", Box::new(|i| i.parity = 3)),
            ("too many members", Box::new(|i| i.member_count = 256)),
            ("unit 0", Box::new(|i| i.stripe_unit = 0)),
            ("unit not 4 KiB", Box::new(|i| i.stripe_unit = 6000)),
            ("unit too large", Box::new(|i| i.stripe_unit = 32 << 20)),
            ("no rows per segment", Box::new(|i| i.rows_per_segment = 0)),
            ("fewer rows than a segment", Box::new(|i| i.rows = 15)),
            ("rows overflow", Box::new(|i| i.rows = u64::MAX / 4096)),
            ("members too large", Box::new(|i| i.rows = (1 << 46) + 1)),
            (
                "segment too large",
                Box::new(|i| i.rows_per_segment = 1 << 16),
            ),
        ];
        for (what, f) in bad {
            let mut i = id();
            f(&mut i);
            assert!(StripeIdentity::decode(&i.encode()).is_err(), "{what}");
        }
        let mut b = id().encode();
        b[37] = 1;
        assert!(StripeIdentity::decode(&b).is_err(), "unknown layout");
        let mut b = id().encode();
        b[39] = 1;
        assert!(StripeIdentity::decode(&b).is_err(), "reserved");
        assert!(matches!(
            StripeIdentity::decode(&b[..63]),
            Err(FormatError::Short { .. })
        ));
    }

    #[test]
    fn members_of_another_set_slot_or_generation_are_refused_by_name() {
        let set = id();
        assert_eq!(set.check_member(&set, 3), Ok(()));
        let mut other = set;
        other.set_uuid = *b"another-set-uuid";
        let e = other.check_member(&set, 3).unwrap_err();
        assert!(e.to_string().contains(&hex(b"another-set-uuid")), "{e}");
        assert_eq!(
            set.check_member(&set, 2),
            Err(MemberRefusal::WrongSlot { claims: 3, slot: 2 })
        );
        let mut old = set;
        old.generation = 6;
        assert_eq!(
            old.check_member(&set, 3),
            Err(MemberRefusal::Stale {
                generation: 6,
                set: 7
            })
        );
        let mut shape = set;
        shape.parity = 2;
        assert_eq!(shape.check_member(&set, 3), Err(MemberRefusal::Shape));
    }

    #[test]
    fn the_bytes_sit_between_log_bytes_and_log_start_in_a_v2_superblock() {
        // A v2 superblock with every neighbouring field set: splicing the
        // identity into 200..264 leaves them all as they were.
        let sb = Superblock {
            uuid: *b"volume-uuid-0001",
            generation: 3,
            logical_blocks: 1000,
            segment_blocks: 64,
            segment_count: 20,
            data_offset: 2 << 20,
            checkpoint_offset: [8192, 8192 + 65536],
            checkpoint_slot_bytes: 65536,
            overprovision_bp: 1000,
            flags: 0,
            checkpoint_slot: 1,
            checkpoint_next_seq: 42,
            durable_seq: 40,
            created_unix_s: 1,
            gc_policy: 0,
            tail_offset: (2 << 20) + 20 * 64 * 4096,
            v2: Some(SbV2 {
                features_compat: 0,
                features_ro_compat: 0,
                features_incompat: incompat::INTENT_LOG | incompat::LSN,
                log_uuid: [0xee; 16],
                log_offset: 1 << 20,
                log_bytes: 256 << 10,
                log_start: LogStart {
                    offset: 0x4000,
                    seq: u64::MAX,
                    chain: u32::MAX,
                },
                log_stale: 0,
            }),
        };
        let mut block = sb.encode();
        assert!(block[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES]
            .iter()
            .all(|&b| b == 0));
        assert_eq!(StripeIdentity::from_superblock(&block), Ok(None));
        block[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES].copy_from_slice(&id().encode());
        let crc = crc32c::crc32c(&block[..BLOCK_BYTES - 4]);
        put_u32(&mut block, BLOCK_BYTES - 4, crc);
        // Without the bit it is ignored, and the superblock decodes unchanged.
        assert_eq!(StripeIdentity::from_superblock(&block), Ok(None));
        assert_eq!(Superblock::decode(&block), Ok(sb));
        // With the bit, the identity reads back; this build's superblock
        // decoder still refuses the volume by the feature's name.
        let f = get_u64(&block, 160) | STRIPE_SET;
        put_u64(&mut block, 160, f);
        let crc = crc32c::crc32c(&block[..BLOCK_BYTES - 4]);
        put_u32(&mut block, BLOCK_BYTES - 4, crc);
        assert_eq!(StripeIdentity::from_superblock(&block), Ok(Some(id())));
        assert_eq!(
            Superblock::decode(&block),
            Err(FormatError::Feature("STRIPE_SET".into()))
        );
    }
}
