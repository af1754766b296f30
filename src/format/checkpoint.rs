//! Checkpoint: the map and the segment table as of a sequence number, written to one
//! of two alternating slots so mount = load newest valid checkpoint + replay newer
//! chunks. Layout of a slot: one header block, then the body (map as u32 LE per
//! logical block, then 16 bytes per segment), padded to whole blocks.
//!
//! Invariant: a checkpoint is used only if its header CRC and its body CRC verify
//! and its geometry matches the superblock.

use super::*;

pub const CHECKPOINT_MAGIC: [u8; 8] = *b"SLUICECP";
pub const SEGMENT_RECORD_BYTES: usize = 16;
/// `open_*` value meaning "no open segment".
pub const NO_SEGMENT: u32 = u32::MAX;

/// Body length in bytes (before padding).
pub fn body_bytes(logical_blocks: u64, segment_count: u32) -> u64 {
    logical_blocks * 4 + segment_count as u64 * SEGMENT_RECORD_BYTES as u64
}

/// `body_bytes` for unvalidated numbers: None when it overflows u64 or usize.
pub fn checked_body_bytes(logical_blocks: u64, segment_count: u32) -> Option<usize> {
    logical_blocks
        .checked_mul(4)?
        .checked_add(segment_count as u64 * SEGMENT_RECORD_BYTES as u64)?
        .try_into()
        .ok()
}

/// Size of one checkpoint slot on the media: header block + padded body.
pub fn slot_bytes(logical_blocks: u64, segment_count: u32) -> u64 {
    let b = BLOCK_BYTES as u64;
    b + body_bytes(logical_blocks, segment_count).div_ceil(b) * b
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointHeader {
    pub uuid: [u8; 16],
    /// Every chunk with seq < next_seq is reflected in this checkpoint.
    pub next_seq: u64,
    pub logical_blocks: u64,
    pub segment_count: u32,
    pub body_crc: u32,
    pub created_unix_ns: u64,
}

impl CheckpointHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_BYTES];
        b[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
        put_u16(&mut b, 8, FORMAT_VERSION);
        b[16..32].copy_from_slice(&self.uuid);
        put_u64(&mut b, 32, self.next_seq);
        put_u64(&mut b, 40, self.logical_blocks);
        put_u32(&mut b, 48, self.segment_count);
        put_u32(&mut b, 52, self.body_crc);
        put_u64(&mut b, 56, self.created_unix_ns);
        let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
        put_u32(&mut b, BLOCK_BYTES - 4, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<CheckpointHeader, FormatError> {
        if b.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: b.len(),
            });
        }
        if b[0..8] != CHECKPOINT_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc32c::crc32c(&b[..BLOCK_BYTES - 4]) != get_u32(b, BLOCK_BYTES - 4) {
            return Err(FormatError::Checksum);
        }
        let version = get_u16(b, 8);
        if version != FORMAT_VERSION {
            return Err(FormatError::Version(version));
        }
        Ok(CheckpointHeader {
            uuid: b[16..32].try_into().unwrap(),
            next_seq: get_u64(b, 32),
            logical_blocks: get_u64(b, 40),
            segment_count: get_u32(b, 48),
            body_crc: get_u32(b, 52),
            created_unix_ns: get_u64(b, 56),
        })
    }
}

/// One segment's record in a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentRecord {
    /// Live entries (data blocks and virtual records) the map points at in this segment.
    pub live: u32,
    /// Blocks written from the start of the segment (next append position).
    pub fill: u32,
    /// Highest chunk sequence number written into the segment (its age).
    pub last_seq: u64,
}

impl SegmentRecord {
    pub fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, self.live);
        put_u32(b, 4, self.fill);
        put_u64(b, 8, self.last_seq);
    }
    pub fn decode(b: &[u8], segment_blocks: u32) -> Result<SegmentRecord, FormatError> {
        let r = SegmentRecord {
            live: get_u32(b, 0),
            fill: get_u32(b, 4),
            last_seq: get_u64(b, 8),
        };
        if r.fill > segment_blocks {
            return Err(invalid("segment.fill", r.fill.to_string()));
        }
        Ok(r)
    }
}

/// Decode the segment table part of a checkpoint body.
pub fn decode_segments(
    body: &[u8],
    logical_blocks: u64,
    segment_count: u32,
    segment_blocks: u32,
) -> Result<Vec<SegmentRecord>, FormatError> {
    let need = checked_body_bytes(logical_blocks, segment_count)
        .ok_or_else(|| invalid("logical_blocks", "checkpoint body size overflows"))?;
    if body.len() < need {
        return Err(FormatError::Short {
            need,
            have: body.len(),
        });
    }
    let start = logical_blocks as usize * 4;
    (0..segment_count as usize)
        .map(|i| SegmentRecord::decode(&body[start + i * SEGMENT_RECORD_BYTES..], segment_blocks))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_header_roundtrips_and_detects_damage() {
        let h = CheckpointHeader {
            uuid: [1; 16],
            next_seq: 9,
            logical_blocks: 100,
            segment_count: 8,
            body_crc: 5,
            created_unix_ns: 6,
        };
        let b = h.encode();
        assert_eq!(CheckpointHeader::decode(&b).unwrap(), h);
        let mut bad = b.clone();
        bad[40] ^= 1;
        assert_eq!(CheckpointHeader::decode(&bad), Err(FormatError::Checksum));
        assert_eq!(slot_bytes(1024, 8), 4096 + 8192);
    }
}
