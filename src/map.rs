//! Map: the RAM table from logical block to where its content lives, 4 bytes per
//! logical block. A value is either a physical data block (index into the segment
//! area), a virtual block (trimmed / all-zero / all-0xFF) tagged with the segment
//! whose chunk holds the record, or UNMAPPED (never written since create).
//!
//! Invariant: a physical data block is referenced by at most one logical block,
//! and every value decodes to a place inside the volume's geometry.

use crate::format::chunk::Kind;
use crate::format::FormatError;
pub use crate::format::{MAX_LOGICAL_BLOCKS, MAX_PHYS_BLOCKS};

/// Segments addressable by a virtual value.
pub const MAX_SEGMENTS: u32 = (1 << 29) - 1;

const UNMAPPED: u32 = u32::MAX;
const VIRTUAL_BIT: u32 = 1 << 31;

/// Content kind of a virtual block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Virt {
    Trim = 0,
    Zero = 1,
    Ones = 2,
}

/// Where a logical block's content lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    Unmapped,
    Data(u32),
    Virtual(Virt, u32),
}

impl Loc {
    #[inline]
    pub fn encode(self) -> u32 {
        match self {
            Loc::Unmapped => UNMAPPED,
            Loc::Data(p) => {
                assert!((p as u64) < MAX_PHYS_BLOCKS);
                p
            }
            Loc::Virtual(k, seg) => {
                assert!(seg < MAX_SEGMENTS);
                VIRTUAL_BIT | (k as u32) << 29 | seg
            }
        }
    }
    #[inline]
    pub fn decode(v: u32) -> Loc {
        if v == UNMAPPED {
            Loc::Unmapped
        } else if v & VIRTUAL_BIT == 0 {
            Loc::Data(v)
        } else {
            let k = match (v >> 29) & 3 {
                0 => Virt::Trim,
                1 => Virt::Zero,
                _ => Virt::Ones,
            };
            Loc::Virtual(k, v & MAX_SEGMENTS)
        }
    }
    /// Segment that must stay alive for this value (data block or virtual record).
    #[inline]
    pub fn segment(self, segment_blocks: u32) -> Option<u32> {
        match self {
            Loc::Unmapped => None,
            Loc::Data(p) => Some(p / segment_blocks),
            Loc::Virtual(_, s) => Some(s),
        }
    }
}

pub struct Map {
    slots: Vec<u32>,
}

impl Map {
    pub fn new(logical_blocks: u64) -> Map {
        Map {
            slots: vec![UNMAPPED; logical_blocks as usize],
        }
    }
    pub fn len(&self) -> u64 {
        self.slots.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
    #[inline]
    pub fn get(&self, lba: u64) -> Loc {
        Loc::decode(self.slots[lba as usize])
    }
    #[inline]
    pub fn set(&mut self, lba: u64, loc: Loc) -> Loc {
        Loc::decode(std::mem::replace(
            &mut self.slots[lba as usize],
            loc.encode(),
        ))
    }
    /// Bytes of RAM the table uses.
    pub fn memory_bytes(&self) -> u64 {
        self.slots.len() as u64 * 4
    }
    /// Serialize as u32 little-endian per logical block.
    pub fn encode_into(&self, out: &mut [u8]) {
        for (i, v) in self.slots.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    /// Parse a serialized map and check every value against the geometry.
    pub fn decode(
        bytes: &[u8],
        logical_blocks: u64,
        segment_count: u32,
        segment_blocks: u32,
    ) -> Result<Map, FormatError> {
        // Checked: a caller-supplied count must not overflow into a small length
        // check followed by a huge allocation (found by fuzzing).
        let (n, need) = usize::try_from(logical_blocks)
            .ok()
            .and_then(|n| Some((n, n.checked_mul(4)?)))
            .ok_or_else(|| crate::format::invalid("map", "logical block count overflows"))?;
        if bytes.len() < need {
            return Err(FormatError::Short {
                need,
                have: bytes.len(),
            });
        }
        let data_blocks = segment_count as u64 * segment_blocks as u64;
        let mut slots = Vec::with_capacity(n);
        for i in 0..n {
            let v = u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
            let ok = match Loc::decode(v) {
                Loc::Unmapped => true,
                Loc::Data(p) => (p as u64) < data_blocks,
                Loc::Virtual(_, s) => s < segment_count && (v >> 29) & 3 != 3,
            };
            if !ok {
                return Err(crate::format::invalid(
                    "map",
                    format!("logical block {i} holds {v:#x}, outside the volume"),
                ));
            }
            slots.push(v);
        }
        Ok(Map { slots })
    }
    pub fn iter(&self) -> impl Iterator<Item = Loc> + '_ {
        self.slots.iter().map(|&v| Loc::decode(v))
    }
}

/// The on-disk record kind of a virtual block.
pub fn kind_of(v: Virt) -> Kind {
    match v {
        Virt::Trim => Kind::Trim,
        Virt::Zero => Kind::Zero,
        Virt::Ones => Kind::Ones,
    }
}

/// The virtual block a record kind stands for (None: data).
pub fn virt_of(k: Kind) -> Option<Virt> {
    match k {
        Kind::Data => None,
        Kind::Trim => Some(Virt::Trim),
        Kind::Zero => Some(Virt::Zero),
        Kind::Ones => Some(Virt::Ones),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loc_encoding_roundtrips() {
        for loc in [
            Loc::Unmapped,
            Loc::Data(0),
            Loc::Data((1 << 31) - 1),
            Loc::Virtual(Virt::Trim, 0),
            Loc::Virtual(Virt::Ones, MAX_SEGMENTS - 1),
            Loc::Virtual(Virt::Zero, 17),
        ] {
            assert_eq!(Loc::decode(loc.encode()), loc);
        }
    }
}
