//! Checkpoint: the map and the segment table as of a sequence number, written to one
//! of two alternating slots so mount = load newest valid checkpoint + replay newer
//! chunks. Layout of a slot: one header block, then the body (map as u32 LE per
//! logical block, 5 bytes LE per block on a `COMPRESSION` volume, then 16 bytes
//! per segment), padded to whole blocks.
//!
//! The header's formerly reserved bytes 64.. may carry the volume's lifetime
//! counters (`Lifetime`, tag `LIFE`): optional, ignored by readers that predate
//! them, all-zero = absent (docs/format.md §4.3).
//!
//! Invariant: a checkpoint is used only if its header CRC and its body CRC verify
//! and its geometry matches the superblock; the lifetime counters never make a
//! checkpoint unusable (a bad counter block decodes as absent).

use super::*;

pub const CHECKPOINT_MAGIC: [u8; 8] = *b"SLUICECP";
pub const SEGMENT_RECORD_BYTES: usize = 16;
/// `open_*` value meaning "no open segment".
pub const NO_SEGMENT: u32 = u32::MAX;

/// Bytes of one map value in a checkpoint body: 4 (format v1, and v2
/// without compression).
pub const MAP_VALUE_BYTES: u64 = 4;
/// Bytes of one map value of a `COMPRESSION` volume (docs/format-v2.md §5).
pub const MAP_VALUE_BYTES_COMPRESSED: u64 = 5;

/// Body length in bytes (before padding), 4-byte map values.
pub fn body_bytes(logical_blocks: u64, segment_count: u32) -> u64 {
    body_bytes_with(logical_blocks, segment_count, MAP_VALUE_BYTES)
}

/// Body length in bytes (before padding) with `value_bytes` per map value.
pub fn body_bytes_with(logical_blocks: u64, segment_count: u32, value_bytes: u64) -> u64 {
    logical_blocks * value_bytes + segment_count as u64 * SEGMENT_RECORD_BYTES as u64
}

/// `body_bytes` for unvalidated numbers: None when it overflows u64 or usize.
pub fn checked_body_bytes(logical_blocks: u64, segment_count: u32) -> Option<usize> {
    checked_body_bytes_with(logical_blocks, segment_count, MAP_VALUE_BYTES)
}

/// `body_bytes_with` for unvalidated numbers.
pub fn checked_body_bytes_with(
    logical_blocks: u64,
    segment_count: u32,
    value_bytes: u64,
) -> Option<usize> {
    logical_blocks
        .checked_mul(value_bytes)?
        .checked_add(segment_count as u64 * SEGMENT_RECORD_BYTES as u64)?
        .try_into()
        .ok()
}

/// Size of one checkpoint slot on the media: header block + padded body.
pub fn slot_bytes(logical_blocks: u64, segment_count: u32) -> u64 {
    slot_bytes_with(logical_blocks, segment_count, MAP_VALUE_BYTES)
}

/// `slot_bytes` with `value_bytes` per map value.
pub fn slot_bytes_with(logical_blocks: u64, segment_count: u32, value_bytes: u64) -> u64 {
    let b = BLOCK_BYTES as u64;
    b + body_bytes_with(logical_blocks, segment_count, value_bytes).div_ceil(b) * b
}

/// Tag at header offset 64 that marks the lifetime counter block.
pub const LIFETIME_TAG: [u8; 4] = *b"LIFE";
/// Header offset of the tag; the u16 field count follows at +4, the u64
/// fields at +8.
pub const LIFETIME_OFFSET: usize = 64;
/// Most u64 fields the header has room for (up to the CRC at 4092).
pub const LIFETIME_MAX_FIELDS: usize = (NEXT_LSN_OFFSET - LIFETIME_OFFSET - 8) / 8;
/// Header offset of `next_lsn` (format v2; zero, reserved, in version 1
/// checkpoints, whose lifetime block never reaches it).
pub const NEXT_LSN_OFFSET: usize = BLOCK_BYTES - 16;
/// GC output classes counted per class (the engine uses at most this many).
pub const LIFETIME_GC_CLASSES: usize = 3;

/// Counters over the volume's whole life (since `since_unix_s`), carried in the
/// checkpoint header. Field order is the on-disk order; new fields are only ever
/// appended (a reader takes the fields it knows, missing ones are 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Lifetime {
    /// When counting started: the volume's creation, or the first mount by a
    /// build that keeps these counters (seconds since the Unix epoch).
    pub since_unix_s: u64,
    pub mounts: u64,
    pub host_write_bytes: u64,
    pub host_zero_bytes: u64,
    pub host_trim_bytes: u64,
    pub media_user_data_bytes: u64,
    pub media_gc_data_bytes: u64,
    pub media_chunk_header_bytes: u64,
    pub media_checkpoint_bytes: u64,
    pub media_superblock_bytes: u64,
    pub media_flushes: u64,
    pub checkpoints: u64,
    pub gc_runs: u64,
    pub gc_blocks_moved: u64,
    pub gc_virtual_moved: u64,
    /// Data and virtual blocks GC moved into each GC output class.
    pub gc_class_blocks_moved: [u64; LIFETIME_GC_CLASSES],
}

impl Lifetime {
    /// The fields in on-disk order.
    pub fn fields(&self) -> Vec<u64> {
        let mut v = vec![
            self.since_unix_s,
            self.mounts,
            self.host_write_bytes,
            self.host_zero_bytes,
            self.host_trim_bytes,
            self.media_user_data_bytes,
            self.media_gc_data_bytes,
            self.media_chunk_header_bytes,
            self.media_checkpoint_bytes,
            self.media_superblock_bytes,
            self.media_flushes,
            self.checkpoints,
            self.gc_runs,
            self.gc_blocks_moved,
            self.gc_virtual_moved,
        ];
        v.extend_from_slice(&self.gc_class_blocks_moved);
        v
    }

    /// Build from fields in on-disk order; missing trailing fields are 0,
    /// fields beyond the known ones are ignored.
    pub fn from_fields(f: &[u64]) -> Lifetime {
        let g = |i: usize| f.get(i).copied().unwrap_or(0);
        let mut l = Lifetime {
            since_unix_s: g(0),
            mounts: g(1),
            host_write_bytes: g(2),
            host_zero_bytes: g(3),
            host_trim_bytes: g(4),
            media_user_data_bytes: g(5),
            media_gc_data_bytes: g(6),
            media_chunk_header_bytes: g(7),
            media_checkpoint_bytes: g(8),
            media_superblock_bytes: g(9),
            media_flushes: g(10),
            checkpoints: g(11),
            gc_runs: g(12),
            gc_blocks_moved: g(13),
            gc_virtual_moved: g(14),
            gc_class_blocks_moved: [0; LIFETIME_GC_CLASSES],
        };
        for (k, c) in l.gc_class_blocks_moved.iter_mut().enumerate() {
            *c = g(15 + k);
        }
        l
    }

    /// Every media byte the volume wrote.
    pub fn media_write_bytes(&self) -> u64 {
        self.media_user_data_bytes
            + self.media_gc_data_bytes
            + self.media_chunk_header_bytes
            + self.media_checkpoint_bytes
            + self.media_superblock_bytes
    }

    /// Media bytes / host bytes written (0 when nothing was written).
    pub fn write_amplification(&self) -> f64 {
        if self.host_write_bytes == 0 {
            0.0
        } else {
            self.media_write_bytes() as f64 / self.host_write_bytes as f64
        }
    }

    /// Write the counter block into a checkpoint header block.
    fn encode_into(&self, b: &mut [u8]) {
        let f = self.fields();
        b[LIFETIME_OFFSET..LIFETIME_OFFSET + 4].copy_from_slice(&LIFETIME_TAG);
        put_u16(b, LIFETIME_OFFSET + 4, f.len() as u16);
        for (i, v) in f.iter().enumerate() {
            put_u64(b, LIFETIME_OFFSET + 8 + i * 8, *v);
        }
    }

    /// Read the counter block of a (CRC-verified) header block: None when
    /// absent (no tag: written before the counters existed) or malformed.
    fn decode_from(b: &[u8]) -> Option<Lifetime> {
        if b[LIFETIME_OFFSET..LIFETIME_OFFSET + 4] != LIFETIME_TAG {
            return None;
        }
        let n = get_u16(b, LIFETIME_OFFSET + 4) as usize;
        if n > LIFETIME_MAX_FIELDS {
            return None;
        }
        let f: Vec<u64> = (0..n)
            .map(|i| get_u64(b, LIFETIME_OFFSET + 8 + i * 8))
            .collect();
        Some(Lifetime::from_fields(&f))
    }
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
    /// Lifetime counters as of this checkpoint (None: not recorded).
    pub lifetime: Option<Lifetime>,
    /// Format v2 (LSN feature): every user block record with an LSN below
    /// this is reflected in this checkpoint. 0 in version 1 volumes.
    pub next_lsn: u64,
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
        if let Some(l) = &self.lifetime {
            l.encode_into(&mut b);
        }
        put_u64(&mut b, NEXT_LSN_OFFSET, self.next_lsn);
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
            lifetime: Lifetime::decode_from(b),
            next_lsn: get_u64(b, NEXT_LSN_OFFSET),
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

/// Decode the segment table part of a checkpoint body (4-byte map values).
pub fn decode_segments(
    body: &[u8],
    logical_blocks: u64,
    segment_count: u32,
    segment_blocks: u32,
) -> Result<Vec<SegmentRecord>, FormatError> {
    decode_segments_with(
        body,
        logical_blocks,
        segment_count,
        segment_blocks,
        MAP_VALUE_BYTES,
    )
}

/// `decode_segments` for a body with `value_bytes` per map value.
pub fn decode_segments_with(
    body: &[u8],
    logical_blocks: u64,
    segment_count: u32,
    segment_blocks: u32,
    value_bytes: u64,
) -> Result<Vec<SegmentRecord>, FormatError> {
    let need = checked_body_bytes_with(logical_blocks, segment_count, value_bytes)
        .ok_or_else(|| invalid("logical_blocks", "checkpoint body size overflows"))?;
    if body.len() < need {
        return Err(FormatError::Short {
            need,
            have: body.len(),
        });
    }
    let start = (logical_blocks * value_bytes) as usize;
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
            lifetime: None,
            next_lsn: 0,
        };
        let b = h.encode();
        assert_eq!(CheckpointHeader::decode(&b).unwrap(), h);
        // no counters: the bytes after created_unix_ns stay zero (what v1 wrote)
        assert!(b[64..4092].iter().all(|&x| x == 0));
        let mut bad = b.clone();
        bad[40] ^= 1;
        assert_eq!(CheckpointHeader::decode(&bad), Err(FormatError::Checksum));
        assert_eq!(slot_bytes(1024, 8), 4096 + 8192);
    }

    #[test]
    fn lifetime_counters_roundtrip_at_their_documented_offsets() {
        let l = Lifetime::from_fields(&(1..=18).collect::<Vec<u64>>());
        assert_eq!(l.fields(), (1..=18).collect::<Vec<u64>>());
        let h = CheckpointHeader {
            uuid: [1; 16],
            next_seq: 9,
            logical_blocks: 100,
            segment_count: 8,
            body_crc: 5,
            created_unix_ns: 6,
            lifetime: Some(l),
            next_lsn: 0,
        };
        let b = h.encode();
        assert_eq!(CheckpointHeader::decode(&b).unwrap(), h);
        // docs/format.md §4.3: tag at 64, count at 68, fields LE u64 from 72
        assert_eq!(&b[64..68], b"LIFE");
        assert_eq!(u16::from_le_bytes([b[68], b[69]]), 18);
        assert_eq!(u64::from_le_bytes(b[72..80].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(b[88..96].try_into().unwrap()), 3);
        // the fields a v1 reader knows are where they were
        assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 9);
        // a later build's extra fields are ignored, fewer fields read as 0
        let mut more = b.clone();
        put_u16(&mut more, 68, 20);
        put_u64(&mut more, 72 + 18 * 8, 77);
        let crc = crc32c::crc32c(&more[..4092]);
        put_u32(&mut more, 4092, crc);
        assert_eq!(CheckpointHeader::decode(&more).unwrap().lifetime, Some(l));
        let mut fewer = b.clone();
        put_u16(&mut fewer, 68, 2);
        let crc = crc32c::crc32c(&fewer[..4092]);
        put_u32(&mut fewer, 4092, crc);
        let got = CheckpointHeader::decode(&fewer).unwrap().lifetime.unwrap();
        assert_eq!(
            (got.since_unix_s, got.mounts, got.host_write_bytes),
            (1, 2, 0)
        );
        // a count past the header's room is malformed: counters absent, header fine
        let mut huge = b.clone();
        put_u16(&mut huge, 68, u16::MAX);
        let crc = crc32c::crc32c(&huge[..4092]);
        put_u32(&mut huge, 4092, crc);
        let d = CheckpointHeader::decode(&huge).unwrap();
        assert_eq!((d.lifetime, d.next_seq), (None, 9));
        // 501 since format v2 keeps `next_lsn` at 4080
        assert_eq!(LIFETIME_MAX_FIELDS, 501);
    }
}
