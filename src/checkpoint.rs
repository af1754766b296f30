//! Checkpoint: persist the map and the segment table so mount does not replay the
//! whole log. Written to the slot the superblock does not point at, flushed, and
//! only then made current by a superblock update, so a torn checkpoint is never used.
//!
//! Invariant: a checkpoint with next_seq = C reflects exactly the chunks with seq < C,
//! and all of those are durable before the superblock names it.

use crate::error::{Error, Result};
use crate::format::checkpoint::{body_bytes, decode_segments, CheckpointHeader, SegmentRecord};
use crate::format::chunk::Stream;
use crate::format::superblock::{Superblock, FLAG_CLEAN};
use crate::format::BLOCK_BYTES;
use crate::map::Map;
use crate::media::{AlignedBuf, Media};
use crate::stats::Counters;
use crate::volume::Shared;

/// Write a checkpoint of the volume's current state; `clean` marks a clean close.
pub(crate) fn write(sh: &Shared, clean: bool) -> Result<()> {
    let g = sh.ckpt_lock.lock();
    write_locked(sh, clean, g)
}

/// Write a checkpoint unless one written meanwhile (by another thread) brought the
/// log written since the last one under `limit` bytes.
pub(crate) fn write_if_due(sh: &Shared, limit: u64) -> Result<()> {
    let g = sh.ckpt_lock.lock();
    if sh.core.lock().bytes_since_checkpoint < limit {
        return Ok(());
    }
    write_locked(sh, false, g)
}

fn write_locked(sh: &Shared, clean: bool, _g: parking_lot::MutexGuard<'_, ()>) -> Result<()> {
    let geo = sh.geo;
    let mut img = AlignedBuf::new(geo.checkpoint_slot_bytes as usize);
    let body_len = body_bytes(geo.logical_blocks, geo.segment_count) as usize;
    let mut out = Vec::new();
    let (next_seq, uuid) = {
        let mut c = sh.core.lock();
        let d = sh.durable_seq();
        c.seal(Stream::User, d, &mut out);
        c.seal(Stream::Gc, d, &mut out);
        let map_len = geo.logical_blocks as usize * 4;
        c.map
            .encode_into(&mut img[BLOCK_BYTES..BLOCK_BYTES + map_len]);
        let mut off = BLOCK_BYTES + map_len;
        for r in c.segs.records() {
            r.encode(&mut img[off..off + 16]);
            off += 16;
        }
        c.bytes_since_checkpoint = 0;
        (c.next_seq, c.uuid)
    };
    sh.write_sealed(out)?;
    sh.flush_covering(next_seq)?;
    let header = CheckpointHeader {
        uuid,
        next_seq,
        logical_blocks: geo.logical_blocks,
        segment_count: geo.segment_count,
        body_crc: crc32c::crc32c(&img[BLOCK_BYTES..BLOCK_BYTES + body_len]),
        created_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    img[..BLOCK_BYTES].copy_from_slice(&header.encode());
    let slot = if sh.sb.lock().checkpoint_slot == 0 {
        1
    } else {
        0
    };
    let r = sh
        .media
        .write_at(&img, geo.checkpoint_offset[slot as usize])
        .and_then(|_| sh.media.flush());
    if let Err(e) = r {
        return Err(Error::Failed(format!(
            "writing checkpoint slot {slot}: {e}"
        )));
    }
    Counters::add(&sh.counters.media_checkpoint_bytes, img.len() as u64);
    Counters::add(&sh.counters.media_flushes, 1);
    sh.update_superblock(|sb| {
        sb.checkpoint_slot = slot;
        sb.checkpoint_next_seq = next_seq;
        sb.durable_seq = sb.durable_seq.max(next_seq);
        if clean {
            sb.flags |= FLAG_CLEAN;
        } else {
            sb.flags &= !FLAG_CLEAN;
        }
    })?;
    Counters::add(&sh.counters.checkpoints, 1);
    Ok(())
}

/// A checkpoint read back from a slot.
pub struct Loaded {
    pub map: Map,
    pub segments: Vec<SegmentRecord>,
    pub next_seq: u64,
}

/// Read and verify checkpoint `slot`; the error says what is wrong with it.
pub fn load(media: &dyn Media, sb: &Superblock, slot: u32) -> std::result::Result<Loaded, String> {
    let mut img = AlignedBuf::new(sb.checkpoint_slot_bytes as usize);
    media
        .read_at(&mut img, sb.checkpoint_offset[slot as usize])
        .map_err(|e| format!("read failed: {e}"))?;
    let h = CheckpointHeader::decode(&img).map_err(|e| format!("header: {e}"))?;
    if h.uuid != sb.uuid {
        return Err("belongs to another volume".into());
    }
    if h.logical_blocks != sb.logical_blocks || h.segment_count != sb.segment_count {
        return Err("geometry differs from the superblock".into());
    }
    let body_len = body_bytes(sb.logical_blocks, sb.segment_count) as usize;
    let body = &img[BLOCK_BYTES..BLOCK_BYTES + body_len];
    if crc32c::crc32c(body) != h.body_crc {
        return Err("body checksum mismatch".into());
    }
    let map = Map::decode(body, sb.logical_blocks, sb.segment_count, sb.segment_blocks)
        .map_err(|e| e.to_string())?;
    let segments = decode_segments(body, sb.logical_blocks, sb.segment_count, sb.segment_blocks)
        .map_err(|e| e.to_string())?;
    Ok(Loaded {
        map,
        segments,
        next_seq: h.next_seq,
    })
}

/// Build an empty segment table state from records (used by recovery).
pub fn empty_records(count: u32) -> Vec<SegmentRecord> {
    vec![SegmentRecord::default(); count as usize]
}
