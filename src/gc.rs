//! GC policy: which closed segment to clean next. Relocation itself is driven by
//! the volume (it owns the locks); this module only scores candidates.
//!
//! Invariant: a victim is chosen only if it is Closed, every chunk in it has been
//! written to the media, and relocating its live entries takes less space than
//! cleaning it frees (so GC always makes net progress).

use crate::format::chunk::{MAX_DATA_BLOCKS, MAX_ENTRIES};
use crate::segments::{SegState, SegmentTable};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GcPolicy {
    /// Emptiest segment first.
    Greedy,
    /// LFS cost-benefit: maximise (1 - u) * age / (1 + u).
    CostBenefit,
}

impl GcPolicy {
    pub fn id(self) -> u32 {
        match self {
            GcPolicy::Greedy => 0,
            GcPolicy::CostBenefit => 1,
        }
    }
    pub fn from_id(id: u32) -> Option<GcPolicy> {
        match id {
            0 => Some(GcPolicy::Greedy),
            1 => Some(GcPolicy::CostBenefit),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GcPolicy::Greedy => "greedy",
            GcPolicy::CostBenefit => "cost-benefit",
        }
    }
    pub fn parse(s: &str) -> Result<GcPolicy, String> {
        match s {
            "greedy" => Ok(GcPolicy::Greedy),
            "cost-benefit" | "costbenefit" | "cb" => Ok(GcPolicy::CostBenefit),
            _ => Err(format!(
                "unknown GC policy {s:?} (choose greedy or cost-benefit)"
            )),
        }
    }
}

/// Does cleaning a segment with these live counts free more than relocating its
/// live entries consumes? Relocation packs data into chunks of up to
/// MAX_DATA_BLOCKS and virtual records into header blocks of MAX_ENTRIES.
pub fn cleaning_gains(data_live: u32, live: u32, segment_blocks: u32) -> bool {
    let virtual_live = live - data_live;
    let data_cap = segment_blocks - segment_blocks.div_ceil(MAX_DATA_BLOCKS + 1);
    let virt_blocks = virtual_live.div_ceil(MAX_ENTRIES as u32);
    data_live + virt_blocks < data_cap
}

/// Choose a victim, or None when no segment can be cleaned with net gain.
/// `written_through`: every chunk with seq < it is on the media.
pub fn pick_victim(
    segs: &SegmentTable,
    policy: GcPolicy,
    now_seq: u64,
    written_through: u64,
) -> Option<u32> {
    let seg_blocks = segs.segment_blocks;
    let mut best: Option<(f64, u32)> = None;
    for (i, s) in segs.segs.iter().enumerate() {
        if s.state != SegState::Closed || s.last_seq >= written_through || s.live == 0 {
            continue;
        }
        if !cleaning_gains(s.data_live, s.live, seg_blocks) {
            continue;
        }
        let u = s.data_live as f64 / seg_blocks as f64;
        let score = match policy {
            // lower is better: negate so that larger is better throughout
            GcPolicy::Greedy => -(s.data_live as f64) - (s.live - s.data_live) as f64 * 1e-6,
            GcPolicy::CostBenefit => {
                let age = now_seq.saturating_sub(s.last_seq) as f64 + 1.0;
                (1.0 - u) * age / (1.0 + u)
            }
        };
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, i as u32));
        }
    }
    best.map(|(_, i)| i)
}
