//! Stats: counters kept by the volume and the snapshot reported by `sluice info`,
//! `sluice bench` and the NBD server.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Counters {
    pub host_write_bytes: AtomicU64,
    pub host_read_bytes: AtomicU64,
    pub host_zero_bytes: AtomicU64,
    pub host_trim_bytes: AtomicU64,
    pub host_flushes: AtomicU64,
    pub media_user_data_bytes: AtomicU64,
    pub media_gc_data_bytes: AtomicU64,
    pub media_chunk_header_bytes: AtomicU64,
    pub media_checkpoint_bytes: AtomicU64,
    pub media_superblock_bytes: AtomicU64,
    pub media_flushes: AtomicU64,
    pub chunks_sealed: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_blocks_moved: AtomicU64,
    pub gc_virtual_moved: AtomicU64,
    pub checkpoints: AtomicU64,
    pub barriers: AtomicU64,
    /// Reads answered EIO because a block failed its CRC (verified reads).
    pub crc_errors: AtomicU64,
    pub scrub_segments: AtomicU64,
    pub scrub_bytes: AtomicU64,
    /// Damaged live blocks and chunk headers the scrub found.
    pub scrub_errors: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Relaxed);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub logical_bytes: u64,
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub host_zero_bytes: u64,
    pub host_trim_bytes: u64,
    pub host_flushes: u64,
    pub media_user_data_bytes: u64,
    pub media_gc_data_bytes: u64,
    pub media_metadata_bytes: u64,
    pub media_chunk_header_bytes: u64,
    pub media_checkpoint_bytes: u64,
    pub media_superblock_bytes: u64,
    pub media_write_bytes: u64,
    pub media_flushes: u64,
    /// media_write_bytes / host_write_bytes (0 when nothing was written).
    pub write_amplification: f64,
    pub chunks_sealed: u64,
    pub gc_runs: u64,
    pub gc_blocks_moved: u64,
    pub gc_virtual_moved: u64,
    pub checkpoints: u64,
    pub reuse_barriers: u64,
    pub segments_total: u32,
    pub segments_free: u32,
    pub segments_open: u32,
    pub segments_closed: u32,
    pub segments_pending: u32,
    pub segments_damaged: u32,
    pub live_data_blocks: u64,
    pub map_bytes: u64,
    pub map_bytes_per_block: f64,
    pub segment_table_bytes: u64,
    /// Reads answered EIO because a block failed its CRC.
    pub crc_errors: u64,
    pub scrub_segments: u64,
    pub scrub_bytes: u64,
    pub scrub_errors: u64,
    /// RAM of the CRC index (4 B per physical block, 8 B per segment).
    pub crc_index_bytes: u64,
}

impl Counters {
    pub fn snapshot(&self, base: Stats) -> Stats {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let mut s = base;
        s.host_write_bytes = g(&self.host_write_bytes);
        s.host_read_bytes = g(&self.host_read_bytes);
        s.host_zero_bytes = g(&self.host_zero_bytes);
        s.host_trim_bytes = g(&self.host_trim_bytes);
        s.host_flushes = g(&self.host_flushes);
        s.media_user_data_bytes = g(&self.media_user_data_bytes);
        s.media_gc_data_bytes = g(&self.media_gc_data_bytes);
        s.media_chunk_header_bytes = g(&self.media_chunk_header_bytes);
        s.media_checkpoint_bytes = g(&self.media_checkpoint_bytes);
        s.media_superblock_bytes = g(&self.media_superblock_bytes);
        s.media_metadata_bytes =
            s.media_chunk_header_bytes + s.media_checkpoint_bytes + s.media_superblock_bytes;
        s.media_write_bytes =
            s.media_user_data_bytes + s.media_gc_data_bytes + s.media_metadata_bytes;
        s.media_flushes = g(&self.media_flushes);
        s.write_amplification = if s.host_write_bytes == 0 {
            0.0
        } else {
            s.media_write_bytes as f64 / s.host_write_bytes as f64
        };
        s.chunks_sealed = g(&self.chunks_sealed);
        s.gc_runs = g(&self.gc_runs);
        s.gc_blocks_moved = g(&self.gc_blocks_moved);
        s.gc_virtual_moved = g(&self.gc_virtual_moved);
        s.checkpoints = g(&self.checkpoints);
        s.reuse_barriers = g(&self.barriers);
        s.crc_errors = g(&self.crc_errors);
        s.scrub_segments = g(&self.scrub_segments);
        s.scrub_bytes = g(&self.scrub_bytes);
        s.scrub_errors = g(&self.scrub_errors);
        s
    }
}
