//! Geometry: where everything lives on the media, computed once at create time and
//! recorded in the superblock. Layout: superblock copies at 0 and 4 KiB, two
//! checkpoint slots, then (aligned to 1 MiB) the segment area, then the tail area
//! (`TAIL_AREA_BYTES`, superblock tail copies 0 and 1 at its start) at the end of
//! the media.
//!
//! Invariant: logical_blocks <= (segment_count - reserve - OPEN_SEGMENTS) * data
//! capacity of a segment * (1 - op), so GC can always make progress when op > 0.

use crate::format::superblock::{Superblock, TAIL_AREA_BYTES};
use crate::format::{checkpoint, BLOCK_BYTES};

pub const DATA_ALIGN_BYTES: u64 = 1 << 20;
pub const DEFAULT_SEGMENT_BYTES: u64 = 4 << 20;
pub const DEFAULT_OVERPROVISION: f64 = 0.10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub logical_blocks: u64,
    pub segment_blocks: u32,
    pub segment_count: u32,
    pub data_offset: u64,
    pub checkpoint_offset: [u64; 2],
    pub checkpoint_slot_bytes: u64,
    /// Byte offset of the tail area, or 0: no tail copies (a volume created
    /// before issue 17).
    pub tail_offset: u64,
    /// The intent log ring (format v2): media byte offset and size, between
    /// the checkpoint slots and the segment area; 0 and 0 = none.
    pub log_offset: u64,
    pub log_bytes: u64,
    /// Bytes of one map value in RAM and in a checkpoint: 4, or 5 on a
    /// compressed volume (format v2 `COMPRESSION`).
    pub map_value_bytes: u64,
}

/// Data blocks a segment holds at worst (random single-block writes: one header
/// block per MAX_ENTRIES data blocks).
pub fn segment_data_capacity(segment_blocks: u32) -> u32 {
    let per_chunk = crate::format::chunk::MAX_ENTRIES as u32 + 1;
    segment_blocks - segment_blocks.div_ceil(per_chunk)
}

/// Segments that open chunks may pin half-empty at any time (the user stream and
/// up to three GC classes). They come on top of the over-provisioning, or a small
/// volume would spend its spare space on partly filled open segments.
pub const OPEN_SEGMENTS: u32 = 4;

/// Segments kept back for GC: user writes never take the last `reserve` free ones.
pub fn reserve_segments(segment_count: u32) -> u32 {
    2 + segment_count / 128
}

impl Geometry {
    pub fn from_superblock(sb: &Superblock) -> Geometry {
        Geometry {
            logical_blocks: sb.logical_blocks,
            segment_blocks: sb.segment_blocks,
            segment_count: sb.segment_count,
            data_offset: sb.data_offset,
            checkpoint_offset: sb.checkpoint_offset,
            checkpoint_slot_bytes: sb.checkpoint_slot_bytes,
            tail_offset: sb.tail_offset,
            log_offset: sb.log_ring().map_or(0, |r| r.0),
            log_bytes: sb.log_ring().map_or(0, |r| r.1),
            map_value_bytes: sb.map_value_bytes(),
        }
    }

    /// Layout for `logical_blocks` at over-provisioning `op` (fraction of the
    /// user segments' data capacity kept free). A negative `op` makes a thin
    /// volume (library only): more logical blocks than the media can hold, so
    /// writes fail with ENOSPC once live data fills it.
    pub fn for_logical(logical_blocks: u64, segment_blocks: u32, op: f64) -> Geometry {
        Geometry::for_logical_log(logical_blocks, segment_blocks, op, 0)
    }

    /// `for_logical` with an intent log ring of `log_bytes` (0 = none) right
    /// after the checkpoint slots, so it never shares a segment.
    pub fn for_logical_log(
        logical_blocks: u64,
        segment_blocks: u32,
        op: f64,
        log_bytes: u64,
    ) -> Geometry {
        Geometry::for_logical_with(
            logical_blocks,
            segment_blocks,
            op,
            log_bytes,
            checkpoint::MAP_VALUE_BYTES,
        )
    }

    /// `for_logical_log` with `map_value_bytes` per map value (4, or 5 on a
    /// compressed volume: larger checkpoint slots).
    pub fn for_logical_with(
        logical_blocks: u64,
        segment_blocks: u32,
        op: f64,
        log_bytes: u64,
        map_value_bytes: u64,
    ) -> Geometry {
        let usable = (segment_data_capacity(segment_blocks) as f64 * (1.0 - op)).max(1.0);
        let user_segments = ((logical_blocks as f64 / usable).ceil() as u64).max(2);
        let mut segment_count = user_segments as u32 + OPEN_SEGMENTS + 2;
        // reserve depends on the count; iterate to a fixed point (two rounds suffice).
        for _ in 0..3 {
            segment_count = user_segments as u32 + OPEN_SEGMENTS + reserve_segments(segment_count);
        }
        let slot = checkpoint::slot_bytes_with(logical_blocks, segment_count, map_value_bytes);
        let c0 = 2 * BLOCK_BYTES as u64;
        let c1 = c0 + slot;
        let log_offset = if log_bytes > 0 { c1 + slot } else { 0 };
        let data_offset = (c1 + slot + log_bytes).div_ceil(DATA_ALIGN_BYTES) * DATA_ALIGN_BYTES;
        let tail_offset =
            data_offset + segment_count as u64 * segment_blocks as u64 * BLOCK_BYTES as u64;
        Geometry {
            logical_blocks,
            segment_blocks,
            segment_count,
            data_offset,
            checkpoint_offset: [c0, c1],
            checkpoint_slot_bytes: slot,
            tail_offset,
            log_offset,
            log_bytes,
            map_value_bytes,
        }
    }

    /// The largest volume that fits in `media_bytes`, or None if not even a tiny one fits.
    pub fn for_media(media_bytes: u64, segment_blocks: u32, op: f64) -> Option<Geometry> {
        Geometry::for_media_log(media_bytes, segment_blocks, op, 0)
    }

    /// `for_media` with an intent log ring of `log_bytes` (0 = none).
    pub fn for_media_log(
        media_bytes: u64,
        segment_blocks: u32,
        op: f64,
        log_bytes: u64,
    ) -> Option<Geometry> {
        Geometry::for_media_with(
            media_bytes,
            segment_blocks,
            op,
            log_bytes,
            checkpoint::MAP_VALUE_BYTES,
        )
    }

    /// `for_media_log` with `map_value_bytes` per map value.
    pub fn for_media_with(
        media_bytes: u64,
        segment_blocks: u32,
        op: f64,
        log_bytes: u64,
        map_value_bytes: u64,
    ) -> Option<Geometry> {
        let at = |n| Geometry::for_logical_with(n, segment_blocks, op, log_bytes, map_value_bytes);
        let (mut lo, mut hi) = (0u64, media_bytes / BLOCK_BYTES as u64);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if at(mid).media_bytes() <= media_bytes {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        (lo > 0).then(|| {
            let mut g = at(lo);
            // the tail area at the very end of the media, not just after the segments
            g.tail_offset = media_bytes / BLOCK_BYTES as u64 * BLOCK_BYTES as u64 - TAIL_AREA_BYTES;
            g
        })
    }

    /// End of the segment area.
    pub fn data_end(&self) -> u64 {
        self.data_offset
            + self.segment_count as u64 * self.segment_blocks as u64 * BLOCK_BYTES as u64
    }

    /// Bytes of media the volume needs: up to the end of the tail area (or of the
    /// segment area for a volume without tail copies).
    pub fn media_bytes(&self) -> u64 {
        match self.tail_offset {
            0 => self.data_end(),
            t => t + TAIL_AREA_BYTES,
        }
    }
    pub fn logical_bytes(&self) -> u64 {
        self.logical_blocks * BLOCK_BYTES as u64
    }
    pub fn segment_bytes(&self) -> u64 {
        self.segment_blocks as u64 * BLOCK_BYTES as u64
    }
    /// Media byte offset of physical data block `p`.
    pub fn phys_offset(&self, p: u64) -> u64 {
        self.data_offset + p * BLOCK_BYTES as u64
    }
    pub fn segment_offset(&self, seg: u32) -> u64 {
        self.phys_offset(seg as u64 * self.segment_blocks as u64)
    }
    pub fn reserve(&self) -> u32 {
        reserve_segments(self.segment_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn geometry_keeps_overprovisioning_and_fits_media() {
        let g = Geometry::for_logical(262_144, 1024, 0.10);
        let user = (g.segment_count - g.reserve()) as f64 * 1024.0;
        assert!(g.logical_blocks as f64 <= user * 0.9 + 1.0);
        let m = Geometry::for_media(g.media_bytes(), 1024, 0.10).unwrap();
        assert!(m.media_bytes() <= g.media_bytes());
        assert!(m.logical_blocks >= g.logical_blocks);
        assert!(
            Geometry::for_media(4096, 1024, 0.1).is_none()
                || Geometry::for_media(4096, 1024, 0.1).unwrap().media_bytes() <= 4096
        );
    }

    #[test]
    fn compressed_geometry_has_slots_for_five_byte_values() {
        let n = 1 << 20; // 4 GiB logical
        let v1 = Geometry::for_logical(n, 1024, 0.10);
        let c = Geometry::for_logical_with(n, 1024, 0.10, 0, 5);
        assert_eq!((v1.map_value_bytes, c.map_value_bytes), (4, 5));
        assert_eq!(v1.segment_count, c.segment_count);
        assert!(v1.checkpoint_slot_bytes >= 4096 + 4 * n);
        assert!(c.checkpoint_slot_bytes >= 4096 + 5 * n);
        assert!(c.checkpoint_slot_bytes < v1.checkpoint_slot_bytes + n + 8192);
        assert!(c.data_offset >= c.checkpoint_offset[1] + c.checkpoint_slot_bytes);
        let m = Geometry::for_media_with(c.media_bytes(), 1024, 0.10, 0, 5).unwrap();
        assert_eq!(m.map_value_bytes, 5);
        assert!(m.media_bytes() <= c.media_bytes() && m.logical_blocks >= n);
    }
}
