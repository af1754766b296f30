//! Checkpoint images: the map and the segment table, so mount does not replay the
//! whole log. The engine fills an image's body, `finish_image` adds its header,
//! the commit stage writes it to the slot the superblock does not point at,
//! flushes, and only then makes it current by a superblock update, so a torn
//! checkpoint is never used. `load` reads one back (mount, check).
//!
//! Invariant: a checkpoint with next_seq = C reflects exactly the chunks with seq < C,
//! and all of those are durable before the superblock names it.

use crate::format::checkpoint::{
    body_bytes_with, decode_segments_with, CheckpointHeader, Lifetime, SegmentRecord,
};
use crate::format::superblock::Superblock;
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::map::Map;
use crate::media::{AlignedBuf, Media};

/// Complete a checkpoint image whose body (map + segment records, after the
/// header block) the engine has filled: compute the body CRC and write the header
/// (with the lifetime counters as of this checkpoint).
pub fn finish_image(
    img: &mut [u8],
    geo: &Geometry,
    uuid: [u8; 16],
    next_seq: u64,
    lifetime: Lifetime,
    created_unix_ns: u64,
    next_lsn: u64,
) {
    let body_len =
        body_bytes_with(geo.logical_blocks, geo.segment_count, geo.map_value_bytes) as usize;
    let header = CheckpointHeader {
        uuid,
        next_seq,
        logical_blocks: geo.logical_blocks,
        segment_count: geo.segment_count,
        body_crc: crc32c::crc32c(&img[BLOCK_BYTES..BLOCK_BYTES + body_len]),
        created_unix_ns,
        lifetime: Some(lifetime),
        next_lsn,
    };
    img[..BLOCK_BYTES].copy_from_slice(&header.encode());
}

/// A checkpoint read back from a slot.
pub struct Loaded {
    pub map: Map,
    pub segments: Vec<SegmentRecord>,
    pub next_seq: u64,
    /// Lifetime counters (None: written by a build that did not keep them).
    pub lifetime: Option<Lifetime>,
    /// Format v2: every user block record below this LSN is in the checkpoint.
    pub next_lsn: u64,
}

/// Does `img` hold a checkpoint of the volume `sb` describes whose body
/// verifies? Some(the whole slot) when it does (`Media::read_checked`: a
/// stripe set takes another member's copy when one member's fails, and
/// rewrites the failing one; the slot's bytes past the body are read by
/// nobody).
fn verifies(img: &[u8], sb: &Superblock) -> Option<std::ops::Range<usize>> {
    let h = CheckpointHeader::decode(img).ok()?;
    let body_len = body_bytes_with(sb.logical_blocks, sb.segment_count, sb.map_value_bytes());
    let body = img.get(BLOCK_BYTES..BLOCK_BYTES + body_len as usize)?;
    (h.uuid == sb.uuid
        && h.logical_blocks == sb.logical_blocks
        && h.segment_count == sb.segment_count
        && crc32c::crc32c(body) == h.body_crc)
        .then_some(0..img.len())
}

/// Scrub: every copy of checkpoint `slot` against its own check, failing
/// copies rewritten from a good one where the media may write
/// (`Media::check_copies`). None: the media keeps one copy.
pub fn check_copies(
    media: &dyn Media,
    sb: &Superblock,
    slot: u32,
) -> Option<std::io::Result<crate::media::CopiesChecked>> {
    let mut img = AlignedBuf::new(sb.checkpoint_slot_bytes as usize);
    media.check_copies(&mut img, sb.checkpoint_offset[slot as usize], &|b| {
        verifies(b, sb)
    })
}

/// Read and verify checkpoint `slot`; the error says what is wrong with it.
pub fn load(media: &dyn Media, sb: &Superblock, slot: u32) -> std::result::Result<Loaded, String> {
    let mut img = AlignedBuf::new(sb.checkpoint_slot_bytes as usize);
    // (when no copy verifies, the checks below say why the one read fails;
    // when one does, its body's CRC is not computed a second time)
    let verified = media
        .read_checked(&mut img, sb.checkpoint_offset[slot as usize], &|b| {
            verifies(b, sb)
        })
        .map_err(|e| format!("read failed: {e}"))?;
    let h = CheckpointHeader::decode(&img).map_err(|e| format!("header: {e}"))?;
    if h.uuid != sb.uuid {
        return Err("belongs to another volume".into());
    }
    if h.logical_blocks != sb.logical_blocks || h.segment_count != sb.segment_count {
        return Err("geometry differs from the superblock".into());
    }
    let w = sb.map_value_bytes();
    let body_len = body_bytes_with(sb.logical_blocks, sb.segment_count, w) as usize;
    let body = &img[BLOCK_BYTES..BLOCK_BYTES + body_len];
    if !verified && crc32c::crc32c(body) != h.body_crc {
        return Err("body checksum mismatch".into());
    }
    let map = Map::decode_with(
        body,
        sb.logical_blocks,
        sb.segment_count,
        sb.segment_blocks,
        w,
    )
    .map_err(|e| e.to_string())?;
    let segments = decode_segments_with(
        body,
        sb.logical_blocks,
        sb.segment_count,
        sb.segment_blocks,
        w,
    )
    .map_err(|e| e.to_string())?;
    Ok(Loaded {
        map,
        segments,
        next_seq: h.next_seq,
        lifetime: h.lifetime,
        next_lsn: h.next_lsn,
    })
}

/// Build an empty segment table state from records (used by recovery).
pub fn empty_records(count: u32) -> Vec<SegmentRecord> {
    vec![SegmentRecord::default(); count as usize]
}
