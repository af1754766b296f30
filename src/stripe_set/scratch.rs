//! Scratch places for the running parity of partial rows (docs/stripes.md
//! §4, "without a log"): each member ends with `LANES` lanes of two places,
//! each a tag block and one stripe unit. A FLUSH that finds a partial row
//! writes the row's running parity (P on the row's P member, Q on its Q
//! member) with a tag `{set, row, seq, which, covered blocks}` into the place
//! of its lane that the row did not use last, after a member flush that made
//! the row's data durable; the row's own parity units are written only when
//! the row is complete. Owns the tag bytes and the places' offsets.
//!
//! Invariant: a tag whose CRC (over tag and parity) verifies describes
//! parity that agrees with the row's data on the members at every block it
//! marks covered, with every block it does not mark counted as zero.

use crate::format::BLOCK_BYTES;

/// Lanes on every member: rows that can be partial at once under protection
/// (more fall back to running parity in place, counted).
pub const LANES: u32 = 16;
const MAGIC: [u8; 8] = *b"SLSTRIPE";
const HEAD: usize = 64;
/// Most blocks a row may have for a tag's bitmap to cover it.
pub const MAX_ROW_BLOCKS: usize = (BLOCK_BYTES - HEAD - 4) * 8;

/// Bytes the scratch area takes at the end of every member.
pub fn area_bytes(unit: u64) -> u64 {
    LANES as u64 * 2 * (unit + BLOCK_BYTES as u64)
}

/// Member offset of a place, the scratch area starting at `base`.
pub fn place_offset(base: u64, unit: u64, lane: u32, place: u32) -> u64 {
    base + (lane as u64 * 2 + place as u64) * (unit + BLOCK_BYTES as u64)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub set_uuid: [u8; 16],
    pub row: u64,
    pub seq: u64,
    /// 0: P, 1: Q.
    pub which: u8,
    /// One bit per data block of the row.
    pub covered: Vec<bool>,
}

impl Tag {
    /// `buf` is the whole place (tag block, then the parity): fill its tag
    /// block, with a CRC over both.
    pub fn seal(&self, buf: &mut [u8]) {
        let t = &mut buf[..BLOCK_BYTES];
        t.fill(0);
        t[0..8].copy_from_slice(&MAGIC);
        t[8..24].copy_from_slice(&self.set_uuid);
        t[24..32].copy_from_slice(&self.row.to_le_bytes());
        t[32..40].copy_from_slice(&self.seq.to_le_bytes());
        t[40] = self.which;
        t[44..48].copy_from_slice(&(self.covered.len() as u32).to_le_bytes());
        for (i, &c) in self.covered.iter().enumerate() {
            if c {
                t[HEAD + i / 8] |= 1 << (i % 8);
            }
        }
        let crc = place_crc(buf);
        buf[BLOCK_BYTES - 4..BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
    }

    /// The tag of a place read whole, if its CRC verifies and it belongs to
    /// `set_uuid`.
    pub fn open(buf: &[u8], set_uuid: &[u8; 16]) -> Option<Tag> {
        let t = &buf[..BLOCK_BYTES];
        if t[0..8] != MAGIC || &t[8..24] != set_uuid {
            return None;
        }
        let crc = u32::from_le_bytes(t[BLOCK_BYTES - 4..].try_into().ok()?);
        if place_crc(buf) != crc {
            return None;
        }
        let n = u32::from_le_bytes(t[44..48].try_into().ok()?) as usize;
        if n > MAX_ROW_BLOCKS || t[40] > 1 {
            return None;
        }
        Some(Tag {
            set_uuid: *set_uuid,
            row: u64::from_le_bytes(t[24..32].try_into().ok()?),
            seq: u64::from_le_bytes(t[32..40].try_into().ok()?),
            which: t[40],
            covered: (0..n)
                .map(|i| t[HEAD + i / 8] & (1 << (i % 8)) != 0)
                .collect(),
        })
    }
}

fn place_crc(buf: &[u8]) -> u32 {
    let c = crc32c::crc32c(&buf[..BLOCK_BYTES - 4]);
    crc32c::crc32c_append(c, &buf[BLOCK_BYTES..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_round_trips_and_any_flip_or_torn_parity_voids_it() {
        let mut buf = vec![0u8; BLOCK_BYTES + 8192];
        buf[BLOCK_BYTES..].fill(7);
        let t = Tag {
            set_uuid: [3; 16],
            row: 99,
            seq: 5,
            which: 1,
            covered: (0..40).map(|i| i % 3 == 0).collect(),
        };
        t.seal(&mut buf);
        assert_eq!(Tag::open(&buf, &[3; 16]), Some(t));
        assert_eq!(Tag::open(&buf, &[4; 16]), None);
        for at in [0, 30, 100, BLOCK_BYTES + 5, buf.len() - 1] {
            let mut b = buf.clone();
            b[at] ^= 1;
            assert_eq!(Tag::open(&b, &[3; 16]), None, "flip at {at}");
        }
    }
}
