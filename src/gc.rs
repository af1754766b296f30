//! GC policy: which closed segment to clean next. Relocation itself is driven by
//! the volume (it owns the locks); this module only scores candidates.
//!
//! Policies: greedy (fewest live blocks), cost-benefit (LFS), and the
//! generational variants of both, which keep GC output apart by how often the data
//! has already been relocated (GC generation, in the spirit of MiDAS / SepBIT's
//! age classes): data that survived k cleanings joins GC class min(k+1, 3), so
//! cold data settles in segments that stay full and hot data is not mixed into them.
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
    /// Greedy victims, GC output separated into classes by GC generation.
    Generational,
    /// Cost-benefit victims, GC output separated by GC generation.
    GenerationalCb,
    /// SepBIT-style: host writes split by the inferred lifetime of the block they
    /// overwrite (short-lived ones to their own segments), GC output by generation,
    /// greedy victims.
    Sepbit,
    /// As Sepbit with cost-benefit victims.
    SepbitCb,
}

impl GcPolicy {
    pub fn id(self) -> u32 {
        match self {
            GcPolicy::Greedy => 0,
            GcPolicy::CostBenefit => 1,
            GcPolicy::Generational => 2,
            GcPolicy::GenerationalCb => 3,
            GcPolicy::Sepbit => 4,
            GcPolicy::SepbitCb => 5,
        }
    }
    /// Host writes overwriting a block younger than this (in host blocks) are
    /// predicted short-lived and kept apart (0 = no host-write separation).
    pub fn hot_lifetime(self, logical_blocks: u64) -> u64 {
        match self {
            GcPolicy::Sepbit | GcPolicy::SepbitCb => {
                (logical_blocks as f64 * hot_lifetime_factor()) as u64
            }
            _ => 0,
        }
    }
    /// GC output classes the engine keeps open for this policy.
    pub fn gc_classes(self) -> usize {
        match self {
            GcPolicy::Greedy | GcPolicy::CostBenefit => 1,
            GcPolicy::Generational
            | GcPolicy::GenerationalCb
            | GcPolicy::Sepbit
            | GcPolicy::SepbitCb => crate::volume::GC_CLASSES,
        }
    }
    pub fn from_id(id: u32) -> Option<GcPolicy> {
        match id {
            0 => Some(GcPolicy::Greedy),
            1 => Some(GcPolicy::CostBenefit),
            2 => Some(GcPolicy::Generational),
            3 => Some(GcPolicy::GenerationalCb),
            4 => Some(GcPolicy::Sepbit),
            5 => Some(GcPolicy::SepbitCb),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            GcPolicy::Greedy => "greedy",
            GcPolicy::CostBenefit => "cost-benefit",
            GcPolicy::Generational => "generational",
            GcPolicy::GenerationalCb => "generational-cb",
            GcPolicy::Sepbit => "sepbit",
            GcPolicy::SepbitCb => "sepbit-cb",
        }
    }
    pub fn parse(s: &str) -> Result<GcPolicy, String> {
        match s {
            "greedy" => Ok(GcPolicy::Greedy),
            "cost-benefit" | "costbenefit" | "cb" => Ok(GcPolicy::CostBenefit),
            "generational" | "gen" => Ok(GcPolicy::Generational),
            "generational-cb" | "gen-cb" => Ok(GcPolicy::GenerationalCb),
            "sepbit" => Ok(GcPolicy::Sepbit),
            "sepbit-cb" => Ok(GcPolicy::SepbitCb),
            _ => Err(format!(
                "unknown GC policy {s:?} (choose sepbit-cb, sepbit, generational-cb, generational, cost-benefit or greedy)"
            )),
        }
    }
}

/// Lifetime threshold as a fraction of the logical size (SLUICE_HOT_LIFETIME
/// overrides it for experiments).
fn hot_lifetime_factor() -> f64 {
    std::env::var("SLUICE_HOT_LIFETIME")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(1.0)
}

/// Blocks that cleaning a segment with these live counts frees beyond what
/// relocating its live entries consumes (<= 0: no gain). Relocation packs data
/// into chunks of up to MAX_DATA_BLOCKS and virtual records into header blocks of
/// MAX_ENTRIES.
pub fn cleaning_gain(data_live: u32, live: u32, segment_blocks: u32) -> i64 {
    let virtual_live = live - data_live;
    let data_cap = segment_blocks - segment_blocks.div_ceil(MAX_DATA_BLOCKS + 1);
    let virt_blocks = virtual_live.div_ceil(MAX_ENTRIES as u32);
    data_cap as i64 - (data_live + virt_blocks) as i64
}

/// Does cleaning gain anything at all?
pub fn cleaning_gains(data_live: u32, live: u32, segment_blocks: u32) -> bool {
    cleaning_gain(data_live, live, segment_blocks) > 0
}

/// Choose a victim, or None when no segment can be cleaned with a gain of at
/// least `min_gain_blocks`. `written_through`: every chunk with seq < it is on
/// the media. Foreground GC (a write is waiting) takes any gain; cleaning ahead
/// asks for more, so it never churns full segments for a block or two.
pub fn pick_victim(
    segs: &SegmentTable,
    policy: GcPolicy,
    now_seq: u64,
    written_through: u64,
    min_gain_blocks: u32,
) -> Option<u32> {
    let seg_blocks = segs.segment_blocks;
    let mut best: Option<(f64, u32)> = None;
    for (i, s) in segs.segs.iter().enumerate() {
        if s.state != SegState::Closed || s.last_seq >= written_through || s.live == 0 {
            continue;
        }
        if cleaning_gain(s.data_live, s.live, seg_blocks) < min_gain_blocks.max(1) as i64 {
            continue;
        }
        let u = s.data_live as f64 / seg_blocks as f64;
        let score = match policy {
            // lower is better: negate so that larger is better throughout
            GcPolicy::Greedy | GcPolicy::Generational | GcPolicy::Sepbit => {
                -(s.data_live as f64) - (s.live - s.data_live) as f64 * 1e-6
            }
            GcPolicy::CostBenefit | GcPolicy::GenerationalCb | GcPolicy::SepbitCb => {
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

/// Policy used when none is given (chosen by measurement, see docs/gc.md).
pub const DEFAULT_POLICY: GcPolicy = GcPolicy::Greedy;
