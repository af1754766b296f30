//! A stripe set's metadata (superblock copies, checkpoint slots, intent log
//! ring: everything that is not segment data) is mirrored: the same bytes at
//! the same offsets on every member, so any `members - parity` members hold
//! all of it. Owns the one difference between the copies: each member's
//! superblocks carry `STRIPE_SET` and that member's identity
//! (`format::stripe`, docs/format-v2.md §6), which the engine never sees.
//!
//! Invariant: `from_member(to_member(b, id))` is `b` for every superblock
//! block the engine writes (version 1, or version 2 without `STRIPE_SET`);
//! a block that is not a superblock with a valid CRC passes both unchanged.

use crate::format::stripe::{StripeIdentity, GEOMETRY_BYTES, GEOMETRY_OFFSET, STRIPE_SET};
use crate::format::superblock::SUPERBLOCK_MAGIC;
use crate::format::BLOCK_BYTES;

const VERSION_AT: usize = 8;
const INCOMPAT_AT: usize = 160;

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn seal(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
    b[BLOCK_BYTES - 4..BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
}

/// A superblock block with a valid CRC.
pub fn is_superblock(b: &[u8]) -> bool {
    b.len() == BLOCK_BYTES
        && b[0..8] == SUPERBLOCK_MAGIC
        && crc32c::crc32c(&b[..BLOCK_BYTES - 4])
            == u32::from_le_bytes(b[BLOCK_BYTES - 4..].try_into().expect("4 bytes"))
}

/// The block a member stores for the superblock block `b` the engine wrote:
/// version 2, `STRIPE_SET` set, the member's identity at offset 200.
pub fn to_member(b: &mut [u8], id: &StripeIdentity) {
    if !is_superblock(b) {
        return;
    }
    b[VERSION_AT..VERSION_AT + 2].copy_from_slice(&2u16.to_le_bytes());
    let f = get_u64(b, INCOMPAT_AT) | STRIPE_SET;
    b[INCOMPAT_AT..INCOMPAT_AT + 8].copy_from_slice(&f.to_le_bytes());
    b[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES].copy_from_slice(&id.encode());
    seal(b);
}

/// The member's superblock block as the engine wrote it: the identity and
/// the bit taken out, version 1 again when no other incompat bit is set
/// (the engine writes version 2 only with a v2 feature).
pub fn from_member(b: &mut [u8]) {
    if !is_superblock(b) || get_u64(b, INCOMPAT_AT) & STRIPE_SET == 0 {
        return;
    }
    let f = get_u64(b, INCOMPAT_AT) & !STRIPE_SET;
    b[INCOMPAT_AT..INCOMPAT_AT + 8].copy_from_slice(&f.to_le_bytes());
    if f == 0 {
        b[VERSION_AT..VERSION_AT + 2].copy_from_slice(&1u16.to_le_bytes());
    }
    b[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES].fill(0);
    seal(b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::stripe::Layout;
    use crate::format::superblock::Superblock;

    fn sb(v2: bool) -> Vec<u8> {
        use crate::format::superblock::{incompat, LogStart, SbV2};
        Superblock {
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
            v2: v2.then_some(SbV2 {
                features_compat: 0,
                features_ro_compat: 0,
                features_incompat: incompat::INTENT_LOG | incompat::LSN,
                log_uuid: [0xee; 16],
                log_offset: 1 << 20,
                log_bytes: 256 << 10,
                log_start: LogStart {
                    offset: 0x4000,
                    seq: 9,
                    chain: 7,
                },
                log_stale: 0,
            }),
        }
        .encode()
    }

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
            generation: 1,
        }
    }

    #[test]
    fn a_member_superblock_carries_the_identity_and_strips_back_exactly() {
        for v2 in [false, true] {
            let orig = sb(v2);
            let mut m = orig.clone();
            to_member(&mut m, &id());
            assert!(is_superblock(&m));
            assert_eq!(StripeIdentity::from_superblock(&m), Ok(Some(id())));
            // a plain mount of one member refuses it by the feature's name
            assert!(Superblock::decode(&m).is_err());
            from_member(&mut m);
            assert_eq!(m, orig, "v2 {v2}");
            assert!(Superblock::decode(&m).is_ok());
        }
        // anything else passes unchanged
        let mut z = vec![0u8; BLOCK_BYTES];
        to_member(&mut z, &id());
        assert!(z.iter().all(|&b| b == 0));
        let mut torn = sb(false);
        torn[100] ^= 1;
        let keep = torn.clone();
        to_member(&mut torn, &id());
        assert_eq!(torn, keep);
    }
}
