//! Drive: runs block operations (pattern data, 4 KiB granularity) against a
//! volume and measures WA over a window. Shared by `sluice sim` and `sluice replay`.
//!
//! Invariant: every data block written is `media::PATTERN`, so ReplayMedia and
//! FlashSim keep no per-block data; host bytes counted here equal the bytes the
//! volume's own host_write_bytes counter grows by.

use crate::media::PATTERN;
use crate::stats::Stats;
use crate::trace::{Op, Req, Trace};
use crate::{Result, Volume};
use std::collections::HashMap;

const BS: u64 = 4096;
const BUF_BLOCKS: u64 = 256;

pub struct Driver<'a> {
    pub vol: &'a Volume,
    buf: Vec<u8>,
    pub host_write_bytes: u64,
    pub host_trim_bytes: u64,
}

/// WA over a measurement window (stats delta).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Measure {
    pub host_bytes: u64,
    pub trim_bytes: u64,
    pub media_bytes: u64,
    pub user_data_bytes: u64,
    pub gc_data_bytes: u64,
    pub header_bytes: u64,
    pub checkpoint_bytes: u64,
    pub superblock_bytes: u64,
    pub gc_runs: u64,
    pub gc_blocks_moved: u64,
    /// Bytes GC read of its victims (headers and live runs, or whole).
    pub gc_bytes_read: u64,
    /// media bytes / host bytes (everything the engine wrote).
    pub wa: f64,
    /// (user data + GC data) / host bytes: the quantity the analytic model predicts.
    pub wa_data: f64,
}

impl Measure {
    pub fn between(a: &Stats, b: &Stats) -> Measure {
        let host = b.host_write_bytes - a.host_write_bytes;
        let media = b.media_write_bytes - a.media_write_bytes;
        let ud = b.media_user_data_bytes - a.media_user_data_bytes;
        let gd = b.media_gc_data_bytes - a.media_gc_data_bytes;
        let r = |x: u64| {
            if host == 0 {
                0.0
            } else {
                x as f64 / host as f64
            }
        };
        Measure {
            host_bytes: host,
            trim_bytes: b.host_trim_bytes - a.host_trim_bytes,
            media_bytes: media,
            user_data_bytes: ud,
            gc_data_bytes: gd,
            header_bytes: b.media_chunk_header_bytes - a.media_chunk_header_bytes,
            checkpoint_bytes: b.media_checkpoint_bytes - a.media_checkpoint_bytes,
            superblock_bytes: b.media_superblock_bytes - a.media_superblock_bytes,
            gc_runs: b.gc_runs - a.gc_runs,
            gc_blocks_moved: b.gc_blocks_moved - a.gc_blocks_moved,
            gc_bytes_read: b.gc_bytes_read - a.gc_bytes_read,
            wa: r(media),
            wa_data: r(ud + gd),
        }
    }
}

impl<'a> Driver<'a> {
    pub fn new(vol: &'a Volume) -> Driver<'a> {
        let mut buf = Vec::with_capacity((BUF_BLOCKS * BS) as usize);
        for _ in 0..BUF_BLOCKS {
            buf.extend_from_slice(&PATTERN);
        }
        Driver {
            vol,
            buf,
            host_write_bytes: 0,
            host_trim_bytes: 0,
        }
    }

    pub fn write_blocks(&mut self, lba: u64, n: u64) -> Result<()> {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(BUF_BLOCKS);
            self.vol
                .write((lba + done) * BS, &self.buf[..(k * BS) as usize], false)?;
            done += k;
        }
        self.host_write_bytes += n * BS;
        Ok(())
    }

    pub fn trim_blocks(&mut self, lba: u64, n: u64) -> Result<()> {
        self.vol.trim(lba * BS, n * BS, false)?;
        self.host_trim_bytes += n * BS;
        Ok(())
    }

    /// JESD219 precondition: write the whole logical space once, in order.
    pub fn fill(&mut self, mut progress: impl FnMut(u64)) -> Result<()> {
        let blocks = self.vol.size_bytes() / BS;
        let mut l = 0;
        while l < blocks {
            let k = (blocks - l).min(BUF_BLOCKS);
            self.write_blocks(l, k)?;
            l += k;
            progress(k);
        }
        Ok(())
    }
}

/// How trace addresses become volume blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrMap {
    /// Each device's address space (up to its highest block touched) laid end to end.
    Concat,
    /// Only the 4 KiB blocks the trace touches, packed densely in first-touch order.
    Dense,
}

impl AddrMap {
    pub fn parse(s: &str) -> std::result::Result<AddrMap, String> {
        match s {
            "concat" | "none" => Ok(AddrMap::Concat),
            "dense" => Ok(AddrMap::Dense),
            _ => Err(format!("unknown address map {s:?} (concat or dense)")),
        }
    }
}

/// A trace reduced to 4 KiB block operations on one volume address space.
#[derive(Debug, Clone, Default)]
pub struct BlockTrace {
    /// (is_trim, lba, blocks); writes and trims only.
    pub ops: Vec<(bool, u64, u32)>,
    pub blocks: u64,
    pub write_blocks: u64,
    pub trim_blocks: u64,
    pub reads: u64,
    pub flushes: u64,
    /// Where the trace flushed: a flush comes before `ops[i]` for each `i` here
    /// (ascending; `ops.len()` for a flush at the end). Runs never merge across one.
    pub flush_points: Vec<usize>,
}

/// Reduce a trace: writes are widened to whole 4 KiB blocks, trims narrowed to the
/// whole blocks inside them, reads and flushes counted and dropped.
pub fn block_trace(t: &Trace, map: AddrMap) -> BlockTrace {
    let mut bt = BlockTrace::default();
    let range = |r: &Req| -> (u64, u64, bool) {
        match r.op {
            Op::Trim => {
                let a = r.offset.div_ceil(BS);
                let b = (r.offset + r.len) / BS;
                (a, b.max(a), true)
            }
            _ => (r.offset / BS, (r.offset + r.len).div_ceil(BS), false),
        }
    };
    let mut dev_max: HashMap<u32, u64> = HashMap::new();
    for r in &t.reqs {
        match r.op {
            Op::Write | Op::Trim | Op::Zero => {
                let (_, b, _) = range(r);
                let e = dev_max.entry(r.dev).or_default();
                *e = (*e).max(b);
            }
            Op::Read => bt.reads += 1,
            Op::Flush => bt.flushes += 1,
        }
    }
    let mut devs: Vec<u32> = dev_max.keys().copied().collect();
    devs.sort_unstable();
    let mut base: HashMap<u32, u64> = HashMap::new();
    let mut acc = 0;
    for d in devs {
        base.insert(d, acc);
        acc += dev_max[&d];
    }
    let mut dense: HashMap<u64, u64> = HashMap::new();
    for r in &t.reqs {
        if r.op == Op::Flush {
            if bt.flush_points.last() != Some(&bt.ops.len()) {
                bt.flush_points.push(bt.ops.len());
            }
            continue;
        }
        if !matches!(r.op, Op::Write | Op::Trim | Op::Zero) {
            continue;
        }
        let (a, b, trim) = range(r);
        if a >= b {
            continue;
        }
        let ga = base[&r.dev] + a;
        match map {
            AddrMap::Concat => push_run(&mut bt, trim, ga, b - a),
            AddrMap::Dense => {
                for g in ga..ga + (b - a) {
                    let next = dense.len() as u64;
                    let d = *dense.entry(g).or_insert(next);
                    push_run(&mut bt, trim, d, 1);
                }
            }
        }
    }
    bt.blocks = match map {
        AddrMap::Concat => acc,
        AddrMap::Dense => dense.len() as u64,
    };
    bt
}

fn push_run(bt: &mut BlockTrace, trim: bool, lba: u64, n: u64) {
    if trim {
        bt.trim_blocks += n;
    } else {
        bt.write_blocks += n;
    }
    let after_flush = bt.flush_points.last() == Some(&bt.ops.len());
    if let Some(last) = bt.ops.last_mut().filter(|_| !after_flush) {
        if last.0 == trim && last.1 + last.2 as u64 == lba && (last.2 as u64 + n) < 1 << 20 {
            last.2 += n as u32;
            return;
        }
    }
    let mut left = n;
    let mut l = lba;
    while left > 0 {
        let k = left.min(1 << 20);
        bt.ops.push((trim, l, k as u32));
        l += k;
        left -= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse_str, Format};

    #[test]
    fn block_trace_aligns_and_maps_devices() {
        let s = "1 0 1 1 0\n2 1 0 16 0\n3 0 8 16 1\n4 0 0 8 0\n";
        let t = parse_str(Format::Disksim, s, false).unwrap();
        let bt = block_trace(&t, AddrMap::Concat);
        // dev 0: one sector at 512 -> block 0 (widened); dev 1: blocks 0..2 -> based
        // at 1, so the first two writes merge into one run 0..3.
        assert_eq!(bt.blocks, 1 + 2);
        assert_eq!(bt.ops, vec![(false, 0, 3), (false, 0, 1)]);
        assert_eq!(bt.write_blocks, 4);
        assert_eq!(bt.reads, 1);
        let d = block_trace(&t, AddrMap::Dense);
        assert_eq!(d.blocks, 3);
        assert_eq!(d.write_blocks, 4);
    }
}

/// Media a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Memory,
    FlashSim,
}

impl MediaKind {
    pub fn parse(s: &str) -> std::result::Result<MediaKind, String> {
        match s {
            "memory" | "mem" => Ok(MediaKind::Memory),
            "flash-sim" | "flash" => Ok(MediaKind::FlashSim),
            _ => Err(format!("unknown media {s:?} (memory or flash-sim)")),
        }
    }
}

/// Everything needed to build a volume for a run.
#[derive(Debug, Clone)]
pub struct Setup {
    pub logical_blocks: u64,
    pub overprovision: f64,
    pub segment_bytes: u64,
    pub policy: crate::GcPolicy,
    pub media: MediaKind,
    pub flash_pages_per_block: u32,
    pub flash_op: f64,
}

/// A fresh volume on fresh media (background off: every media write is deterministic).
pub fn build(s: &Setup) -> Result<(Volume, Option<std::sync::Arc<crate::media::FlashSim>>)> {
    build_with(s, false)
}

/// As `build`, with the housekeeper thread on or off (on: the GC and checkpoint
/// timing of a live server, at the cost of determinism).
pub fn build_with(
    s: &Setup,
    background: bool,
) -> Result<(Volume, Option<std::sync::Arc<crate::media::FlashSim>>)> {
    use crate::geometry::Geometry;
    use crate::media::{FlashSim, Media, ReplayMedia};
    use std::sync::Arc;
    let logical = s.logical_blocks.max(1024);
    let geo = Geometry::for_logical(logical, (s.segment_bytes / BS) as u32, s.overprovision);
    let len = geo.media_bytes();
    let (media, flash): (Arc<dyn Media>, _) = match s.media {
        MediaKind::Memory => (Arc::new(ReplayMedia::new(len)), None),
        MediaKind::FlashSim => {
            let f = Arc::new(FlashSim::new(len, s.flash_pages_per_block, s.flash_op)?);
            (f.clone(), Some(f))
        }
    };
    let vol = Volume::create(
        media,
        &crate::CreateOptions {
            logical_bytes: Some(logical * BS),
            overprovision: s.overprovision,
            segment_bytes: s.segment_bytes,
            gc_policy: s.policy,
            ..Default::default()
        },
        &crate::OpenOptions {
            background,
            ..Default::default()
        },
    )?;
    Ok((vol, flash))
}

/// Spare factor the GC actually works with: 1 - logical / data capacity of the
/// segments user data may occupy (segment_count - reserve), where each chunk of
/// 255 data blocks costs one header block.
pub fn effective_spare(g: &crate::geometry::Geometry) -> f64 {
    let cap = (g.segment_count - g.reserve()) as f64
        * g.segment_blocks as f64
        * (crate::format::chunk::MAX_DATA_BLOCKS as f64
            / crate::format::chunk::MAX_CHUNK_BLOCKS as f64);
    1.0 - g.logical_blocks as f64 / cap
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use crate::trace::{parse_file, Format};

    /// The real MQSim TPC-C trace from shared/ (beside the repository in CI).
    #[test]
    fn tpcc_trace_replays_with_exact_host_bytes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/traces/mqsim/tpcc-small.trace");
        if !path.exists() {
            eprintln!("skipping: {} not present", path.display());
            return;
        }
        let t = parse_file(Format::Disksim, &path, false).unwrap();
        assert_eq!(t.reqs.len(), 6999);
        assert_eq!(t.count(Op::Write), 2618);
        let bt = block_trace(&t, AddrMap::Dense);
        assert_eq!(
            bt.blocks, 7879,
            "unique 4 KiB pages written (traces/README.md)"
        );
        let setup = Setup {
            logical_blocks: bt.blocks,
            overprovision: 0.10,
            segment_bytes: 256 << 10,
            policy: crate::GcPolicy::SepbitCb,
            media: MediaKind::Memory,
            flash_pages_per_block: 64,
            flash_op: 0.07,
        };
        let (vol, _) = build(&setup).unwrap();
        let mut d = Driver::new(&vol);
        d.fill(|_| {}).unwrap();
        let s0 = vol.stats();
        for _ in 0..3 {
            for &(trim, l, n) in &bt.ops {
                assert!(!trim);
                d.write_blocks(l, n as u64).unwrap();
            }
        }
        vol.flush().unwrap();
        let m = Measure::between(&s0, &vol.stats());
        assert_eq!(m.host_bytes, 3 * bt.write_blocks * BS);
        assert!(m.wa >= 1.0 && m.wa < 10.0, "WA {}", m.wa);
        assert!(m.wa_data >= 1.0);
    }
}
