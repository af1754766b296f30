//! Map: the RAM table from logical block to where its content lives, 4 bytes per
//! logical block. A value is either a physical data block (index into the segment
//! area), a virtual block (trimmed / all-zero / all-0xFF) tagged with the segment
//! whose chunk holds the record, or UNMAPPED (never written since create).
//!
//! A compressed volume (format v2 `COMPRESSION`) has 5-byte values: the v1
//! value and a high byte, kept as a second array (empty on an uncompressed
//! volume, whose map stays 4 bytes per block and whose lookups never touch it).
//! A high byte of 0 means the low 4 bytes are a v1 value; the others are the
//! fragment and staged encodings of docs/compression.md: `0x80 | spans << 4 |
//! slot` a fragment (low bytes: the packed block where it starts), `0x40` a
//! data block of a staged chunk (low bytes: chunk id << 8 | data index),
//! `0x50 | kind` a virtual record of a staged chunk (low bytes: chunk id).
//! Staged values live in RAM only: a checkpoint never holds one (encoding one
//! is an assertion, decoding one an error).
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
    /// Compressed volumes: an LZ4 fragment starting in packed block `phys`,
    /// slot `slot`, continuing in `phys + 1` when `spans`.
    Fragment {
        phys: u32,
        slot: u8,
        spans: bool,
    },
    /// Compressed volumes, RAM only: data block `idx` of staged chunk `id`
    /// (a user chunk not yet packed and placed).
    Staged {
        id: u32,
        idx: u8,
    },
    /// Compressed volumes, RAM only: a virtual record of staged chunk `id`.
    StagedVirt(Virt, u32),
}

/// Staged chunk ids are 24 bits (a staged value's low bytes: id << 8 | idx).
pub const STAGED_IDS: u32 = 1 << 24;
const HI_FRAGMENT: u8 = 0x80;
const HI_STAGED: u8 = 0x40;
const HI_STAGED_VIRT: u8 = 0x50;

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
            Loc::Fragment { .. } | Loc::Staged { .. } | Loc::StagedVirt(..) => {
                panic!("a compressed-volume value in a 4-byte map")
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
    /// The 5-byte value (low 4 bytes, high byte) of a compressed volume's map.
    #[inline]
    pub fn encode5(self) -> (u32, u8) {
        match self {
            Loc::Fragment { phys, slot, spans } => {
                assert!(
                    (phys as u64) < MAX_PHYS_BLOCKS
                        && (slot as usize) < crate::format::packed::MAX_SLOTS
                );
                (phys, HI_FRAGMENT | (spans as u8) << 4 | slot)
            }
            Loc::Staged { id, idx } => {
                assert!(id < STAGED_IDS);
                (id << 8 | idx as u32, HI_STAGED)
            }
            Loc::StagedVirt(k, id) => (id, HI_STAGED_VIRT | k as u8),
            v1 => (v1.encode(), 0),
        }
    }
    /// Decode a 5-byte value (None: a high byte no build makes).
    #[inline]
    pub fn decode5(lo: u32, hi: u8) -> Option<Loc> {
        Some(match hi {
            0 => Loc::decode(lo),
            h if h & HI_FRAGMENT != 0 => {
                if h & 0x60 != 0 || (h & 0x0f) as usize >= crate::format::packed::MAX_SLOTS {
                    return None;
                }
                Loc::Fragment {
                    phys: lo,
                    slot: h & 0x0f,
                    spans: h & 0x10 != 0,
                }
            }
            HI_STAGED => Loc::Staged {
                id: lo >> 8,
                idx: lo as u8,
            },
            h if h & 0xf0 == HI_STAGED_VIRT => Loc::StagedVirt(
                match h & 0x0f {
                    0 => Virt::Trim,
                    1 => Virt::Zero,
                    2 => Virt::Ones,
                    _ => return None,
                },
                lo,
            ),
            _ => return None,
        })
    }
    /// Segment that must stay alive for this value (data block, fragment or
    /// virtual record; a staged value has no segment yet).
    #[inline]
    pub fn segment(self, segment_blocks: u32) -> Option<u32> {
        match self {
            Loc::Unmapped | Loc::Staged { .. } | Loc::StagedVirt(..) => None,
            Loc::Data(p) => Some(p / segment_blocks),
            Loc::Fragment { phys, .. } => Some(phys / segment_blocks),
            Loc::Virtual(_, s) => Some(s),
        }
    }
}

pub struct Map {
    slots: Vec<u32>,
    /// High bytes of 5-byte values (compressed volumes), else empty.
    hi: Vec<u8>,
    /// 4 or 5.
    value_bytes: u64,
}

/// Bytes per map value of an uncompressed volume.
pub const VALUE_BYTES: u64 = 4;
/// Bytes per map value of a compressed volume.
pub const VALUE_BYTES_COMPRESSED: u64 = 5;

impl Map {
    /// A map of 4-byte values, every block unmapped.
    pub fn new(logical_blocks: u64) -> Map {
        Map::with_value_bytes(logical_blocks, VALUE_BYTES)
    }

    /// A map of `value_bytes` (4 or 5) per value, every block unmapped.
    pub fn with_value_bytes(logical_blocks: u64, value_bytes: u64) -> Map {
        assert!(
            value_bytes == VALUE_BYTES || value_bytes == VALUE_BYTES_COMPRESSED,
            "map values are 4 or 5 bytes"
        );
        let hi_len = if value_bytes == VALUE_BYTES_COMPRESSED {
            logical_blocks as usize
        } else {
            0
        };
        Map {
            slots: vec![UNMAPPED; logical_blocks as usize],
            hi: vec![0; hi_len],
            value_bytes,
        }
    }

    /// Bytes per value: 4, or 5 on a compressed volume.
    pub fn value_bytes(&self) -> u64 {
        self.value_bytes
    }
    pub fn len(&self) -> u64 {
        self.slots.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
    /// Whether values are 5 bytes (a compressed volume).
    #[inline]
    pub fn is_wide(&self) -> bool {
        !self.hi.is_empty()
    }
    #[inline]
    pub fn get(&self, lba: u64) -> Loc {
        let lo = self.slots[lba as usize];
        if self.hi.is_empty() {
            Loc::decode(lo)
        } else {
            Loc::decode5(lo, self.hi[lba as usize]).expect("map holds only values it encoded")
        }
    }
    #[inline]
    pub fn set(&mut self, lba: u64, loc: Loc) -> Loc {
        if self.hi.is_empty() {
            return Loc::decode(std::mem::replace(
                &mut self.slots[lba as usize],
                loc.encode(),
            ));
        }
        let old = self.get(lba);
        let (lo, hi) = loc.encode5();
        self.slots[lba as usize] = lo;
        self.hi[lba as usize] = hi;
        old
    }
    /// Bytes of RAM the table uses.
    pub fn memory_bytes(&self) -> u64 {
        self.slots.len() as u64 * 4 + self.hi.len() as u64
    }
    /// Bytes `encode_into` writes.
    pub fn encoded_bytes(&self) -> usize {
        self.slots.len() * self.value_bytes() as usize
    }
    /// Serialize as u32 little-endian per logical block (4-byte values), or
    /// 5 bytes little-endian per block: the v1 value, then the high byte.
    pub fn encode_into(&self, out: &mut [u8]) {
        if self.value_bytes == VALUE_BYTES {
            for (i, v) in self.slots.iter().enumerate() {
                out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
        } else {
            for (i, (v, h)) in self.slots.iter().zip(&self.hi).enumerate() {
                // staged values are never durable: a checkpoint is made with
                // every staged chunk placed
                assert!(
                    *h & 0xc0 != HI_STAGED,
                    "a staged map value in a checkpoint: block {i}: {h:#x} {v:#x}"
                );
                // MUTANT: map-five-byte-stride s|out[i * 5..i * 5 + 4]|out[i * 4..i * 4 + 4]|
                out[i * 5..i * 5 + 4].copy_from_slice(&v.to_le_bytes());
                out[i * 5 + 4] = *h;
            }
        }
    }
    /// Parse a serialized map of 4-byte values and check every value against
    /// the geometry.
    pub fn decode(
        bytes: &[u8],
        logical_blocks: u64,
        segment_count: u32,
        segment_blocks: u32,
    ) -> Result<Map, FormatError> {
        Map::decode_with(
            bytes,
            logical_blocks,
            segment_count,
            segment_blocks,
            VALUE_BYTES,
        )
    }
    /// `decode` for `value_bytes` (4 or 5) per value.
    pub fn decode_with(
        bytes: &[u8],
        logical_blocks: u64,
        segment_count: u32,
        segment_blocks: u32,
        value_bytes: u64,
    ) -> Result<Map, FormatError> {
        if value_bytes != VALUE_BYTES && value_bytes != VALUE_BYTES_COMPRESSED {
            return Err(crate::format::invalid(
                "map",
                format!("{value_bytes}-byte values"),
            ));
        }
        let w = value_bytes as usize;
        // Checked: a caller-supplied count must not overflow into a small length
        // check followed by a huge allocation (found by fuzzing).
        let (n, need) = usize::try_from(logical_blocks)
            .ok()
            .and_then(|n| Some((n, n.checked_mul(w)?)))
            .ok_or_else(|| crate::format::invalid("map", "logical block count overflows"))?;
        if bytes.len() < need {
            return Err(FormatError::Short {
                need,
                have: bytes.len(),
            });
        }
        let data_blocks = segment_count as u64 * segment_blocks as u64;
        let mut slots = Vec::with_capacity(n);
        let mut hi = Vec::with_capacity(if w == 5 { n } else { 0 });
        for i in 0..n {
            let v = u32::from_le_bytes(bytes[i * w..i * w + 4].try_into().unwrap());
            let h = if w == 5 { bytes[i * w + 4] } else { 0 };
            let loc = match Loc::decode5(v, h) {
                // staged values are RAM only; unknown high bytes are refused
                // rather than misread
                Some(Loc::Staged { .. } | Loc::StagedVirt(..)) | None => {
                    return Err(crate::format::invalid(
                        "map",
                        format!(
                            "logical block {i} holds a value no checkpoint holds ({h:#x}:{v:#x})"
                        ),
                    ));
                }
                Some(l) => l,
            };
            let ok = match loc {
                Loc::Unmapped => true,
                Loc::Data(p) => (p as u64) < data_blocks,
                Loc::Fragment { phys, spans, .. } => {
                    (phys as u64 + spans as u64) < data_blocks
                        && (!spans || (phys + 1) % segment_blocks != 0)
                }
                Loc::Virtual(_, s) => s < segment_count && (v >> 29) & 3 != 3,
                Loc::Staged { .. } | Loc::StagedVirt(..) => false,
            };
            if !ok {
                return Err(crate::format::invalid(
                    "map",
                    format!("logical block {i} holds {v:#x}, outside the volume"),
                ));
            }
            slots.push(v);
            if w == 5 {
                hi.push(h);
            }
        }
        Ok(Map {
            slots,
            hi,
            value_bytes,
        })
    }
    pub fn iter(&self) -> impl Iterator<Item = Loc> + '_ {
        (0..self.len()).map(|i| self.get(i))
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

/// The virtual block a record kind stands for (None: data, raw or packed).
pub fn virt_of(k: Kind) -> Option<Virt> {
    match k {
        Kind::Data | Kind::Packed => None,
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
        for loc in [
            Loc::Data(5),
            Loc::Fragment {
                phys: 9,
                slot: 0,
                spans: false,
            },
            Loc::Fragment {
                phys: (1 << 31) - 2,
                slot: 14,
                spans: true,
            },
            Loc::Staged {
                id: STAGED_IDS - 1,
                idx: 254,
            },
            Loc::StagedVirt(Virt::Ones, 77),
            Loc::StagedVirt(Virt::Trim, 0),
        ] {
            let (lo, hi) = loc.encode5();
            assert_eq!(Loc::decode5(lo, hi), Some(loc));
        }
    }

    #[test]
    fn five_byte_maps_roundtrip_and_refuse_values_no_checkpoint_holds() {
        let (n, segs, sb) = (100u64, 8u32, 16u32);
        for w in [VALUE_BYTES, VALUE_BYTES_COMPRESSED] {
            let mut m = Map::with_value_bytes(n, w);
            assert_eq!(m.value_bytes(), w);
            assert_eq!(m.memory_bytes(), n * w);
            m.set(3, Loc::Data(17));
            m.set(4, Loc::Virtual(Virt::Zero, 5));
            m.set(99, Loc::Data(segs * sb - 1));
            let mut bytes = vec![0xAAu8; m.encoded_bytes()];
            assert_eq!(bytes.len() as u64, n * w);
            m.encode_into(&mut bytes);
            let d = Map::decode_with(&bytes, n, segs, sb, w).unwrap();
            assert_eq!(d.value_bytes(), w);
            assert!(d.iter().eq(m.iter()));
            assert_eq!(d.get(3), Loc::Data(17));
            // one byte short is refused, not read past
            assert!(Map::decode_with(&bytes[..bytes.len() - 1], n, segs, sb, w).is_err());
            if w == 5 {
                // the layout: v1 value little-endian, then the high byte
                assert_eq!(bytes[3 * 5..3 * 5 + 5], [17, 0, 0, 0, 0]);
                // a fragment value roundtrips; staged and unknown ones are refused
                let mut f = Map::with_value_bytes(n, w);
                let frag = Loc::Fragment {
                    phys: 20,
                    slot: 14,
                    spans: true,
                };
                f.set(7, frag);
                let mut fb = vec![0u8; f.encoded_bytes()];
                f.encode_into(&mut fb);
                assert_eq!(fb[7 * 5..7 * 5 + 5], [20, 0, 0, 0, 0x9e]);
                assert_eq!(Map::decode_with(&fb, n, segs, sb, w).unwrap().get(7), frag);
                for h in [0x40u8, 0x50, 0x53, 0x20, 0x8f, 0xa0] {
                    let mut bad = bytes.clone();
                    bad[7 * 5 + 4] = h;
                    let Err(e) = Map::decode_with(&bad, n, segs, sb, w) else {
                        panic!("high byte {h:#x} decoded");
                    };
                    assert!(e.to_string().contains("logical block 7"), "{e}");
                }
                // a spanning fragment whose next block is in another segment
                let mut bad = fb.clone();
                bad[7 * 5..7 * 5 + 4].copy_from_slice(&(sb - 1).to_le_bytes());
                assert!(Map::decode_with(&bad, n, segs, sb, w).is_err());
                // read as 4-byte values the same bytes are another map
                assert!(Map::decode_with(&bytes, n, segs, sb, 4)
                    .map_or(true, |m4| !m4.iter().eq(m.iter())));
            }
        }
        assert!(Map::decode_with(&[0; 600], n, segs, sb, 6).is_err());
    }
}
