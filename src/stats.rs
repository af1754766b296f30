//! Stats: counters kept by the volume and the snapshot reported by `sluice info`,
//! `sluice bench` and the NBD server.
//!
//! Invariant: the session counters only grow; the lifetime view is the
//! checkpointed `lifetime_base` (fixed at mount) plus the session counters.

use crate::format::checkpoint::{Lifetime, LIFETIME_GC_CLASSES};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Log2 buckets: bucket k counts values in [2^(k-1), 2^k) (bucket 0: value 0).
pub const BUCKETS: usize = 40;

/// A histogram of u64 values (request latencies, seek distances, sizes) in power-of-two buckets, updated with relaxed atomics.
pub struct Log2Hist {
    buckets: [AtomicU64; BUCKETS],
    sum: AtomicU64,
}

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl Log2Hist {
    #[inline]
    pub fn observe(&self, v: u64) {
        let k = ((64 - v.leading_zeros()) as usize).min(BUCKETS - 1);
        self.buckets[k].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
    }
    pub fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|k| self.buckets[k].load(Relaxed))
    }
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }
    pub fn sum(&self) -> u64 {
        self.sum.load(Relaxed)
    }
    /// Upper bound (inclusive) of bucket k.
    pub fn upper(k: usize) -> u64 {
        if k == 0 {
            0
        } else {
            (1u64 << k) - 1
        }
    }
}

/// How a FLUSH was made durable (`Counters::flush_latency_us` is split by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPath {
    /// It sealed no chunk: its blocks went to the intent log as a record (in
    /// the volume or on a log device), or were logged already.
    Log = 0,
    /// It sealed the open chunk into the main log (no intent log, too many
    /// blocks for a record, a full ring, the idle seal, or the fallback after
    /// the log failed).
    Seal = 1,
}

impl FlushPath {
    pub const ALL: [FlushPath; 2] = [FlushPath::Log, FlushPath::Seal];
    /// The `path` label of `sluice_flush_latency_seconds`.
    pub fn name(self) -> &'static str {
        match self {
            FlushPath::Log => "log",
            FlushPath::Seal => "seal",
        }
    }
}

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
    /// Bytes GC read of its victims (headers, live runs, whole segments).
    pub gc_bytes_read: AtomicU64,
    /// Victims GC read as their live runs / whole (gcread.rs's plan).
    pub gc_victims_read_runs: AtomicU64,
    pub gc_victims_read_whole: AtomicU64,
    /// GC runs and blocks (data + virtual) moved, by the GC output class the
    /// policy sent the victim's data to (gc.rs `relocation_class`).
    pub gc_class_runs: [AtomicU64; LIFETIME_GC_CLASSES],
    pub gc_class_blocks_moved: [AtomicU64; LIFETIME_GC_CLASSES],
    pub checkpoints: AtomicU64,
    pub barriers: AtomicU64,
    /// Media flushes made while a reuse barrier ran (its chunk flush, its
    /// superblock, its wipes: 3 per barrier that frees segments).
    pub barrier_flushes: AtomicU64,
    /// Open chunks a reuse barrier sealed before they were full
    /// (`Core::seal_for_barrier`).
    pub barrier_partial_seals: AtomicU64,
    /// Housekeeper time, microseconds: reading victims (`gcread`), handing
    /// their relocations to the writers (`submit_housekeeping`, which waits
    /// while the queue holds its share), in reuse barriers, in checkpoints.
    pub hk_gc_read_us: AtomicU64,
    pub hk_gc_submit_us: AtomicU64,
    pub hk_barrier_us: AtomicU64,
    pub hk_checkpoint_us: AtomicU64,
    /// Housekeeper time, microseconds, waiting for the tail of a reuse
    /// barrier or checkpoint it had handed to a helper thread to run beside
    /// the next victims (`Shared::join_tail`), and how many tails ran so.
    pub hk_tail_wait_us: AtomicU64,
    pub hk_tails_overlapped: AtomicU64,
    /// Victims GC read and relocated while such a tail was in flight.
    pub hk_victims_beside_tails: AtomicU64,
    /// Request threads' waits on the housekeeper, microseconds and count:
    /// pacing sleeps (`Housekeeper::pace`), waits for free segments (hard
    /// credit, `wait_round`), waits for a checkpoint (the replay window).
    pub pace_sleep_us: AtomicU64,
    pub pace_sleeps: AtomicU64,
    pub space_wait_us: AtomicU64,
    pub space_waits: AtomicU64,
    pub checkpoint_wait_us: AtomicU64,
    pub checkpoint_waits: AtomicU64,
    /// Reads answered EIO because a block failed its CRC (verified reads).
    pub crc_errors: AtomicU64,
    pub scrub_segments: AtomicU64,
    pub scrub_bytes: AtomicU64,
    /// Damaged live blocks and chunk headers the scrub found.
    pub scrub_errors: AtomicU64,
    /// Bytes of freed segments given back to the host or device (`Media::discard`).
    pub discard_bytes: AtomicU64,
    /// Intent log records written and their bytes (headers + data) this session.
    pub log_records: AtomicU64,
    pub media_log_bytes: AtomicU64,
    /// Flushes of log devices (a volume with its log in the volume counts
    /// none: its records share the media flush).
    pub log_flushes: AtomicU64,
    /// Media flushes that first waited for another FLUSH's chunk or record
    /// to be written (group commit, `Commit::company_wait`).
    pub group_commit_waits: AtomicU64,
    /// FLUSHes that parked for a media flush already running and were
    /// answered by the thread that ended the one covering them
    /// (`Commit::flush_covering_log_then`), or parked in the fill's open
    /// group and were answered by its leader (`volume::fill`).
    pub flushes_parked: AtomicU64,
    /// Of `flushes_parked`, those that parked only after a wait of their own
    /// in the group commit (for their writes, for company, or a flush that
    /// began meanwhile), where they used to sleep (`Commit::park`).
    pub flushes_parked_late: AtomicU64,
    /// Host FLUSHes that found a FLUSH group in flight and joined the next
    /// one instead of planning a record of their own (`volume::fill`).
    pub flushes_joined: AtomicU64,
    /// Data blocks large host writes streamed to their places before their
    /// chunk's seal (`Commit::place`).
    pub streamed_blocks: AtomicU64,
    /// Intent log records large host writes wrote in the submission of
    /// their own streamed data (`Commit::place`; also in `log_records`).
    pub streamed_records: AtomicU64,
    /// Of `streamed_blocks`, those written from a copy in a pool buffer
    /// because the caller's buffer was not aligned for direct IO.
    pub streamed_copied_blocks: AtomicU64,
    /// Write or flush errors of a log device while serving (each takes that
    /// device out of use until the next mount).
    pub log_device_errors: AtomicU64,
    /// Log devices the volume runs without (missing at mount or failed since).
    pub log_devices_degraded: AtomicU64,
    /// Times every log device had failed and FLUSH fell back to sealing
    /// into the main log (at most once per mount).
    pub log_fallbacks: AtomicU64,
    /// Time from a FLUSH's arrival at the volume (`Volume::flush`) to its
    /// acknowledgement, in microseconds, by `FlushPath` (index `path as usize`);
    /// only FLUSHes that succeeded.
    pub flush_latency_us: [Log2Hist; 2],
    /// Lifetime counters of the checkpoint this mount started from (set once,
    /// at mount; `mounts` already counts this mount).
    pub lifetime_base: Lifetime,
}

impl Counters {
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Relaxed);
    }

    /// Counters for a mount that starts from `base`.
    pub fn with_lifetime(base: Lifetime) -> Counters {
        Counters {
            lifetime_base: base,
            ..Counters::default()
        }
    }

    /// The lifetime view now: the mount's base plus this session, and `extra`
    /// (writes about to happen that the caller wants included: a checkpoint's
    /// own slot and superblock write).
    pub fn lifetime(&self, extra: &Lifetime) -> Lifetime {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let b = &self.lifetime_base;
        let mut l = Lifetime {
            since_unix_s: b.since_unix_s,
            mounts: b.mounts + extra.mounts,
            host_write_bytes: b.host_write_bytes
                + g(&self.host_write_bytes)
                + extra.host_write_bytes,
            host_zero_bytes: b.host_zero_bytes + g(&self.host_zero_bytes) + extra.host_zero_bytes,
            host_trim_bytes: b.host_trim_bytes + g(&self.host_trim_bytes) + extra.host_trim_bytes,
            media_user_data_bytes: b.media_user_data_bytes
                + g(&self.media_user_data_bytes)
                + extra.media_user_data_bytes,
            media_gc_data_bytes: b.media_gc_data_bytes
                + g(&self.media_gc_data_bytes)
                + extra.media_gc_data_bytes,
            media_chunk_header_bytes: b.media_chunk_header_bytes
                + g(&self.media_chunk_header_bytes)
                + extra.media_chunk_header_bytes,
            media_checkpoint_bytes: b.media_checkpoint_bytes
                + g(&self.media_checkpoint_bytes)
                + extra.media_checkpoint_bytes,
            media_superblock_bytes: b.media_superblock_bytes
                + g(&self.media_superblock_bytes)
                + extra.media_superblock_bytes,
            media_flushes: b.media_flushes + g(&self.media_flushes) + extra.media_flushes,
            checkpoints: b.checkpoints + g(&self.checkpoints) + extra.checkpoints,
            gc_runs: b.gc_runs + g(&self.gc_runs) + extra.gc_runs,
            gc_blocks_moved: b.gc_blocks_moved + g(&self.gc_blocks_moved) + extra.gc_blocks_moved,
            gc_virtual_moved: b.gc_virtual_moved
                + g(&self.gc_virtual_moved)
                + extra.gc_virtual_moved,
            gc_class_blocks_moved: [0; LIFETIME_GC_CLASSES],
        };
        for k in 0..LIFETIME_GC_CLASSES {
            l.gc_class_blocks_moved[k] = b.gc_class_blocks_moved[k]
                + g(&self.gc_class_blocks_moved[k])
                + extra.gc_class_blocks_moved[k];
        }
        l
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
    /// Bytes GC read of its victims (`sluice_gc_bytes_read_total`).
    pub gc_bytes_read: u64,
    /// Victims GC read as their chunk headers and live runs, and victims
    /// read whole (`sluice_gc_victims_read_total{how}`).
    pub gc_victims_read_runs: u64,
    pub gc_victims_read_whole: u64,
    /// GC runs and blocks moved (data + virtual) per GC output class.
    pub gc_class_runs: [u64; LIFETIME_GC_CLASSES],
    pub gc_class_blocks_moved: [u64; LIFETIME_GC_CLASSES],
    pub checkpoints: u64,
    pub reuse_barriers: u64,
    /// Media flushes made while reuse barriers ran (`Counters::barrier_flushes`).
    pub barrier_flushes: u64,
    /// Open chunks reuse barriers sealed part-filled.
    pub barrier_partial_seals: u64,
    /// Housekeeper time in microseconds (`Counters::hk_gc_read_us` ...).
    pub hk_gc_read_us: u64,
    pub hk_gc_submit_us: u64,
    pub hk_barrier_us: u64,
    pub hk_checkpoint_us: u64,
    /// Housekeeper waits for overlapped barrier/checkpoint tails
    /// (`Counters::hk_tail_wait_us`) and tails overlapped.
    pub hk_tail_wait_us: u64,
    pub hk_tails_overlapped: u64,
    pub hk_victims_beside_tails: u64,
    /// Request threads' waits on the housekeeper (`Counters::pace_sleep_us` ...).
    pub pace_sleep_us: u64,
    pub pace_sleeps: u64,
    pub space_wait_us: u64,
    pub space_waits: u64,
    pub checkpoint_wait_us: u64,
    pub checkpoint_waits: u64,
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
    /// Bytes of freed segments given back to the host (punched holes) or the
    /// device (discard) this session.
    pub discarded_bytes: u64,
    /// Intent log records written this session, and their bytes on the media
    /// (counted in `media_write_bytes`, so in the write amplification).
    pub log_records: u64,
    pub media_log_bytes: u64,
    /// Flushes of log devices this session (`Counters::log_flushes`).
    pub log_flushes: u64,
    /// Media flushes that first waited for company (`Counters::group_commit_waits`).
    pub group_commit_waits: u64,
    /// FLUSHes parked for a running media flush (`Counters::flushes_parked`).
    pub flushes_parked: u64,
    /// Of those, parked after a wait of their own (`Counters::flushes_parked_late`).
    pub flushes_parked_late: u64,
    /// FLUSHes that joined the next FLUSH group (`Counters::flushes_joined`).
    pub flushes_joined: u64,
    /// Data blocks large host writes streamed to their places before their
    /// chunk's seal, this session (`Counters::streamed_blocks`).
    pub streamed_blocks: u64,
    /// Of `log_records`, those written with a streamed write's data, this
    /// session (`Counters::streamed_records`).
    pub streamed_records: u64,
    /// Of `streamed_blocks`, those copied first (`Counters::streamed_copied_blocks`).
    pub streamed_copied_blocks: u64,
    /// Host data blocks copied into the open chunk's image under the engine
    /// lock, this session (`Core::image_copied_blocks`; streamed blocks are not).
    pub image_copied_blocks: u64,
    /// Write or flush errors of log devices this session.
    pub log_device_errors: u64,
    /// Log devices of the volume it runs without: its intent log is degraded.
    pub log_devices_degraded: u64,
    /// Every log device failed this session: FLUSH seals into the main log.
    pub log_fallbacks: u64,
    /// Stripe set members missing or failed (0 on one file or device): the
    /// set serves degraded.
    pub stripe_members_down: u64,
    /// Pieces a stripe set rebuilt from the rest of their row this mount.
    pub stripe_reconstructed: u64,
    /// Reads a stripe set issued to its members this mount (the mount's
    /// own, reads, GC and rebuild; a write-only workload adds none: the
    /// bench reports it over a run, docs/stripes.md §0).
    pub stripe_member_reads: u64,
    /// Blocks a stripe set healed from their row after a CRC failure.
    pub stripe_healed: u64,
    /// Members' copies of a checkpoint or intent-log record that failed
    /// their check while another member's passed, this mount
    /// (`SetMedia::read_checked`), and of those the copies rewritten from
    /// the good one (a writable mount with every member up).
    pub stripe_meta_copies_bad: u64,
    pub stripe_meta_copies_rewritten: u64,
    /// A stripe set member being rebuilt: segments done of `.._total`
    /// (both 0 when none is).
    pub stripe_rebuild_done: u64,
    pub stripe_rebuild_total: u64,
    /// The volume stopped after a media write error or a full host file
    /// system: writes, trims, zeroes and flushes fail, reads go on.
    pub failed: bool,
    /// Why it stopped (None while it runs).
    pub failure: Option<String>,
    /// Counters over the volume's life (persisted in each checkpoint; after a
    /// crash, what the last checkpoint recorded plus this session).
    pub lifetime: Lifetime,
    /// lifetime media bytes / lifetime host bytes written.
    pub lifetime_write_amplification: f64,
    /// Compressed volumes (since mount): what the packer did with the host
    /// data blocks of the user chunks it placed.
    pub compress: CompressStats,
}

/// The packer's counts (compressed volumes, since mount; all 0 otherwise).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct CompressStats {
    /// Host data bytes packed (4 KiB per data block).
    pub host_bytes: u64,
    /// Bytes those blocks take in their chunks' data areas (raw blocks and
    /// packed blocks, 4 KiB each).
    pub stored_bytes: u64,
    /// stored / host (1.0 when nothing was packed).
    pub ratio: f64,
    /// Blocks stored as LZ4 fragments.
    pub fragments: u64,
    /// Share of the host blocks the entropy sample skipped (LZ4 never ran).
    pub skipped_share: f64,
    /// Those blocks.
    pub skipped_blocks: u64,
    /// Of the skipped blocks, those stored in direct chunks: the user stream
    /// looked incompressible, so they were not tested, only one in 16
    /// sampled (docs/compression.md, "Direct chunks").
    pub direct_blocks: u64,
    /// Live map entries that are fragments now (from the segment table).
    pub live_fragments: u64,
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
        s.log_records = g(&self.log_records);
        s.media_log_bytes = g(&self.media_log_bytes);
        s.log_flushes = g(&self.log_flushes);
        s.group_commit_waits = g(&self.group_commit_waits);
        s.flushes_parked = g(&self.flushes_parked);
        s.flushes_parked_late = g(&self.flushes_parked_late);
        s.flushes_joined = g(&self.flushes_joined);
        s.streamed_blocks = g(&self.streamed_blocks);
        s.streamed_records = g(&self.streamed_records);
        s.streamed_copied_blocks = g(&self.streamed_copied_blocks);
        s.log_device_errors = g(&self.log_device_errors);
        s.log_devices_degraded = g(&self.log_devices_degraded);
        s.log_fallbacks = g(&self.log_fallbacks);
        s.media_write_bytes = s.media_user_data_bytes
            + s.media_gc_data_bytes
            + s.media_metadata_bytes
            + s.media_log_bytes;
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
        s.gc_bytes_read = g(&self.gc_bytes_read);
        s.gc_victims_read_runs = g(&self.gc_victims_read_runs);
        s.gc_victims_read_whole = g(&self.gc_victims_read_whole);
        s.gc_class_runs = std::array::from_fn(|k| g(&self.gc_class_runs[k]));
        s.gc_class_blocks_moved = std::array::from_fn(|k| g(&self.gc_class_blocks_moved[k]));
        s.checkpoints = g(&self.checkpoints);
        s.reuse_barriers = g(&self.barriers);
        s.barrier_flushes = g(&self.barrier_flushes);
        s.barrier_partial_seals = g(&self.barrier_partial_seals);
        s.hk_gc_read_us = g(&self.hk_gc_read_us);
        s.hk_gc_submit_us = g(&self.hk_gc_submit_us);
        s.hk_barrier_us = g(&self.hk_barrier_us);
        s.hk_checkpoint_us = g(&self.hk_checkpoint_us);
        s.hk_tail_wait_us = g(&self.hk_tail_wait_us);
        s.hk_tails_overlapped = g(&self.hk_tails_overlapped);
        s.hk_victims_beside_tails = g(&self.hk_victims_beside_tails);
        s.pace_sleep_us = g(&self.pace_sleep_us);
        s.pace_sleeps = g(&self.pace_sleeps);
        s.space_wait_us = g(&self.space_wait_us);
        s.space_waits = g(&self.space_waits);
        s.checkpoint_wait_us = g(&self.checkpoint_wait_us);
        s.checkpoint_waits = g(&self.checkpoint_waits);
        s.crc_errors = g(&self.crc_errors);
        s.scrub_segments = g(&self.scrub_segments);
        s.scrub_bytes = g(&self.scrub_bytes);
        s.scrub_errors = g(&self.scrub_errors);
        s.discarded_bytes = g(&self.discard_bytes);
        s.lifetime = self.lifetime(&Lifetime::default());
        s.lifetime_write_amplification = s.lifetime.write_amplification();
        s
    }
}

/// Host bytes written below which a WA figure mostly measures the fixed cost of
/// checkpoints and superblocks (each checkpoint writes the whole map), not the
/// write path: one 4 KiB write followed by a clean close reads "WA 264".
pub const WA_MEANINGFUL_BYTES: u64 = 64 << 20;

/// "WA x.xxx" for people: with a note when too little was written for the
/// figure to describe the write path (the data-path WA, without checkpoints and
/// superblocks, is given then), and "n/a" when nothing was written. The number
/// stays first so scripts that grep `WA [0-9.]*` keep working.
pub fn wa_text(host_write_bytes: u64, media_write_bytes: u64, fixed_bytes: u64) -> String {
    if host_write_bytes == 0 {
        return "WA n/a (nothing written)".to_string();
    }
    let wa = media_write_bytes as f64 / host_write_bytes as f64;
    if host_write_bytes >= WA_MEANINGFUL_BYTES {
        return format!("WA {wa:.3}");
    }
    let data = media_write_bytes.saturating_sub(fixed_bytes) as f64 / host_write_bytes as f64;
    format!(
        "WA {wa:.3} (only {} written: the fixed cost of checkpoints and superblocks, {}, \
         dominates below {}; data path WA {data:.3})",
        crate::size::human(host_write_bytes),
        crate::size::human(fixed_bytes),
        crate::size::human(WA_MEANINGFUL_BYTES)
    )
}

impl Stats {
    /// This session's WA in words (`wa_text`).
    pub fn wa_text(&self) -> String {
        wa_text(
            self.host_write_bytes,
            self.media_write_bytes,
            self.media_checkpoint_bytes + self.media_superblock_bytes,
        )
    }

    /// The volume's lifetime WA in words (`wa_text`).
    pub fn lifetime_wa_text(&self) -> String {
        let l = &self.lifetime;
        wa_text(
            l.host_write_bytes,
            l.media_write_bytes(),
            l.media_checkpoint_bytes + l.media_superblock_bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wa_text_says_when_the_figure_means_little() {
        assert_eq!(wa_text(0, 8192, 8192), "WA n/a (nothing written)");
        let small = wa_text(4096, 4096 * 264, 4096 * 262);
        assert!(
            small.starts_with("WA 264.000 (only 4.0 KiB written"),
            "{small}"
        );
        assert!(small.ends_with("data path WA 2.000)"), "{small}");
        assert_eq!(wa_text(100 << 20, 120 << 20, 1 << 20), "WA 1.200");
    }
}
