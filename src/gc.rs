//! GC policy, in one place: the `Policy` trait holds every decision a policy
//! makes (victim score, GC output classes, the class relocated data joins, the
//! hints the engine keeps for it); `GcPolicy` names the registered policies
//! (the default and the research ones) and maps each to its `Policy`.
//! Relocation itself is the engine's (volume/core.rs) and runs in the
//! housekeeper; neither holds policy logic.
//!
//! Policies: greedy (fewest live blocks), cost-benefit (LFS), and the
//! generational variants of both, which keep GC output apart by how often the data
//! has already been relocated (GC generation, in the spirit of MiDAS / SepBIT's
//! age classes): data that survived k cleanings joins GC class min(k+1, 3), so
//! cold data settles in segments that stay full and hot data is not mixed into them.
//!
//! `decay-cb` (the default) needs only per-segment state (segments.rs: a decayed
//! invalidation count, the clock of the first invalidation, and a prior life;
//! 24 bytes per segment, in memory only, rebuilt empty on mount). Rule:
//! - estimate each segment's remaining life per entry from how fast its entries
//!   have been invalidated since the first invalidation (window: half-life N/4,
//!   N = logical blocks), smoothed towards a prior: N for host data, and for GC
//!   output the estimate of the victims it came from (LFS keeps the *data's* age
//!   through cleaning; a relocated cold block is not "just written");
//! - clean the segment with the largest g(u) * min(life / N, 2.5),
//!   g(u) = (1-u)/u + ln u (see `decay_score`; equal lives give exactly greedy's
//!   order; the cap bounds what a wrong "cold" guess can cost);
//! - relocated data goes to a second, cold GC class when its victim's life is
//!   estimated at 2N or more.
//!
//! Why: LFS cost-benefit's age (time since the segment was written) takes data
//! that was never overwritten for cold, so after a linear fill it cleans the fill
//! segments at high utilisation (5-17% worse than greedy on the CloudPhysics
//! trace), and a GC output segment looks brand new. Here untouched data counts
//! as average until it is seen decaying, and the score comes from a fluid model
//! instead of (1-u)*age/(1+u). Measurements: docs/gc.md.
//!
//! Invariant: a victim is chosen only if it is Closed, every chunk in it has been
//! written to the media, and relocating its live entries takes less space than
//! cleaning it frees (so GC always makes net progress).

use crate::format::chunk::{MAX_DATA_BLOCKS, MAX_ENTRIES};
use crate::segments::{SegInfo, SegState, SegmentTable};

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
    /// Cost-benefit on each segment's estimated decay rate (see `decay_score`),
    /// cold GC output apart. Per-segment state only.
    DecayCb,
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
            GcPolicy::DecayCb => 6,
        }
    }
    /// The policy's decisions (the one place they live).
    pub fn policy(self) -> &'static dyn Policy {
        match self {
            GcPolicy::Greedy => &Greedy,
            GcPolicy::CostBenefit => &CostBenefit,
            GcPolicy::Generational => &Generational,
            GcPolicy::GenerationalCb => &GenerationalCb,
            GcPolicy::Sepbit => &Sepbit,
            GcPolicy::SepbitCb => &SepbitCb,
            GcPolicy::DecayCb => &DecayCb,
        }
    }
    /// Host writes overwriting a block younger than this (in host blocks) are
    /// predicted short-lived and kept apart (0 = no host-write separation).
    pub fn hot_lifetime(self, logical_blocks: u64) -> u64 {
        self.policy().hot_lifetime(logical_blocks)
    }
    /// GC output classes the engine keeps open for this policy.
    pub fn gc_classes(self) -> usize {
        self.policy().gc_classes()
    }
    /// Does the policy need the per-segment decay hints (segments.rs)?
    pub fn decay_hints(self) -> bool {
        self.policy().decay_hints()
    }
    pub fn from_id(id: u32) -> Option<GcPolicy> {
        match id {
            0 => Some(GcPolicy::Greedy),
            1 => Some(GcPolicy::CostBenefit),
            2 => Some(GcPolicy::Generational),
            3 => Some(GcPolicy::GenerationalCb),
            4 => Some(GcPolicy::Sepbit),
            5 => Some(GcPolicy::SepbitCb),
            6 => Some(GcPolicy::DecayCb),
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
            GcPolicy::DecayCb => "decay-cb",
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
            "decay-cb" | "decay" => Ok(GcPolicy::DecayCb),
            _ => Err(format!(
                "unknown GC policy {s:?} (choose decay-cb, sepbit-cb, sepbit, generational-cb, generational, cost-benefit or greedy)"
            )),
        }
    }
}

/// Every decision of one GC policy. The engine (relocation, GC classes) and the
/// housekeeper (victim choice) ask it and keep no policy logic of their own;
/// the per-segment hints some policies read live in `SegInfo` and are kept by
/// the segment table whatever the policy.
pub trait Policy: Send + Sync {
    /// Rank a Closed candidate whose cleaning gains space: larger cleans first.
    /// `u`: its data utilisation, `now_seq`: the next sequence number.
    fn score(&self, s: &SegInfo, segs: &SegmentTable, now_seq: u64, u: f64) -> f64;
    /// GC output classes the engine keeps open.
    fn gc_classes(&self) -> usize {
        1
    }
    /// Host writes overwriting a block younger than this (host blocks) mark it
    /// short-lived; > 0 makes the engine keep a per-block write clock.
    fn hot_lifetime(&self, _logical_blocks: u64) -> u64 {
        0
    }
    /// Does the engine keep the per-segment decay hints for it?
    fn decay_hints(&self) -> bool {
        false
    }
    /// GC class (0-based, below `classes`) of the data relocated out of
    /// `victim`, and the life estimate its output segment inherits (0: none).
    /// Default: by GC generation (data relocated k times joins class k).
    fn relocation_class(
        &self,
        victim: &SegInfo,
        _segs: &SegmentTable,
        classes: usize,
    ) -> (usize, f32) {
        ((victim.gen as usize + 1).clamp(1, classes.max(1)) - 1, 0.0)
    }
}

fn greedy_score(s: &SegInfo) -> f64 {
    // lower is better: negate so that larger is better throughout
    -(s.live_blocks() as f64) - (s.live - s.data_live - s.frag_live) as f64 * 1e-6
}

fn cb_score(s: &SegInfo, now_seq: u64, u: f64) -> f64 {
    let age = now_seq.saturating_sub(s.last_seq) as f64 + 1.0;
    (1.0 - u) * age / (1.0 + u)
}

struct Greedy;
struct CostBenefit;
struct Generational;
struct GenerationalCb;
struct Sepbit;
struct SepbitCb;
struct DecayCb;

impl Policy for Greedy {
    fn score(&self, s: &SegInfo, _: &SegmentTable, _: u64, _: f64) -> f64 {
        greedy_score(s)
    }
}
impl Policy for CostBenefit {
    fn score(&self, s: &SegInfo, _: &SegmentTable, now: u64, u: f64) -> f64 {
        cb_score(s, now, u)
    }
}
impl Policy for Generational {
    fn score(&self, s: &SegInfo, _: &SegmentTable, _: u64, _: f64) -> f64 {
        greedy_score(s)
    }
    fn gc_classes(&self) -> usize {
        GC_CLASSES
    }
}
impl Policy for GenerationalCb {
    fn score(&self, s: &SegInfo, _: &SegmentTable, now: u64, u: f64) -> f64 {
        cb_score(s, now, u)
    }
    fn gc_classes(&self) -> usize {
        GC_CLASSES
    }
}
impl Policy for Sepbit {
    fn score(&self, s: &SegInfo, _: &SegmentTable, _: u64, _: f64) -> f64 {
        greedy_score(s)
    }
    fn gc_classes(&self) -> usize {
        GC_CLASSES
    }
    fn hot_lifetime(&self, logical_blocks: u64) -> u64 {
        (logical_blocks as f64 * hot_lifetime_factor()) as u64
    }
}
impl Policy for SepbitCb {
    fn score(&self, s: &SegInfo, _: &SegmentTable, now: u64, u: f64) -> f64 {
        cb_score(s, now, u)
    }
    fn gc_classes(&self) -> usize {
        GC_CLASSES
    }
    fn hot_lifetime(&self, logical_blocks: u64) -> u64 {
        (logical_blocks as f64 * hot_lifetime_factor()) as u64
    }
}
impl Policy for DecayCb {
    fn score(&self, s: &SegInfo, segs: &SegmentTable, _: u64, u: f64) -> f64 {
        decay_score(s, segs, u)
    }
    fn gc_classes(&self) -> usize {
        2
    }
    fn decay_hints(&self) -> bool {
        true
    }
    fn relocation_class(
        &self,
        victim: &SegInfo,
        segs: &SegmentTable,
        classes: usize,
    ) -> (usize, f32) {
        if segs.half_life == 0 {
            return (0, 0.0);
        }
        // GC output from victims estimated cold goes to its own class, and the
        // segments it fills inherit the victim's estimate as their prior.
        let life = est_life(victim, segs);
        (
            decay_class(life, segs.mean_life).min(classes.max(1) - 1),
            life as f32,
        )
    }
}

/// SepBIT's GC classes for a block relocated `age` host blocks after its last
/// host write (None: never seen): < l, < 4 l, older.
pub fn age_class(age: Option<u64>, hot_lifetime: u64) -> usize {
    match age {
        Some(a) if a < hot_lifetime => 0,
        Some(a) if a < 4 * hot_lifetime => 1,
        _ => GC_CLASSES - 1,
    }
}

/// Number of GC output classes (generations 1..=GC_CLASSES, the last one absorbing older).
pub const GC_CLASSES: usize = 3;
// the lifetime counters (checkpoint header) count moves per class for this many
const _: () = assert!(GC_CLASSES <= crate::format::checkpoint::LIFETIME_GC_CLASSES);

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
    let p = policy.policy();
    let mut best: Option<(f64, u32)> = None;
    for (i, s) in segs.segs.iter().enumerate() {
        // (a segment a mount holds for the intent log's records is not one)
        // MUTANT: gc-picks-held-segment s| s.held {| false {|
        if s.state != SegState::Closed || s.last_seq >= written_through || s.live == 0 || s.held {
            continue;
        }
        // fragments weigh their estimated bytes (compressed volumes)
        let lb = s.live_blocks();
        let virt = s.live - s.data_live - s.frag_live;
        if cleaning_gain(lb, lb + virt, seg_blocks) < min_gain_blocks.max(1) as i64 {
            continue;
        }
        let u = lb as f64 / seg_blocks as f64;
        let score = p.score(s, segs, now_seq, u);
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, i as u32));
        }
    }
    best.map(|(_, i)| i)
}

/// Decay hints (`decay-cb`): half-life of the invalidation count, as a fraction
/// of the logical size in host blocks.
pub const DECAY_HALF_LIFE: f64 = 0.25;
/// Weight of the prior in the life estimate, in invalidations: a segment needs
/// about this many invalidations of evidence before its own rate dominates.
const PRIOR_KILLS: f64 = 16.0;
/// `decay-cb` sends data from victims estimated to live at least this many
/// times the mean life N to its own (cold) GC class.
const COLD_CLASS: f64 = 2.0;
/// `decay-cb` counts a segment at most this many times colder than average.
const MAX_COLDNESS: f64 = 2.5;

/// Estimated mean remaining life, in host blocks, of an entry of `s` (decay
/// hints must be on: `segs.half_life > 0`). The rate is invalidations per
/// live entry per host block, counted from the segment's first invalidation
/// (data that was never overwritten has told us nothing yet) over an
/// exponential window of `half_life`, smoothed by PRIOR_KILLS invalidations
/// at the prior rate: the segment's inherited prior (GC output) or 1/N.
pub fn est_life(s: &SegInfo, segs: &SegmentTable) -> f64 {
    let mean = segs.mean_life.max(1) as f64;
    let kills = s.heat_at(segs.clock, segs.half_life);
    let window = if s.heat > 0.0 {
        let tau = segs.half_life as f64 / std::f64::consts::LN_2;
        (segs.clock.saturating_sub(s.since) as f64).min(tau)
    } else {
        0.0
    };
    let exposure = (s.live as f64 + 0.5 * kills) * window;
    let prior = if s.prior > 0.0 { s.prior as f64 } else { mean };
    (exposure + PRIOR_KILLS * prior) / (kills + PRIOR_KILLS)
}

/// GC output class (0 = ordinary, 1 = cold) for data relocated from a victim
/// of estimated life `life` (`decay-cb`).
pub fn decay_class(life: f64, mean_life: u64) -> usize {
    (life >= COLD_CLASS * mean_life.max(1) as f64) as usize
}

/// `decay-cb` score: g(u) * min(life / N, MAX_COLDNESS), g(u) = (1 - u)/u + ln u.
/// Fluid model: a segment at utilisation u whose entries die at rate m, cleaned
/// whenever it reaches its threshold, costs m*u/(1-u) GC writes for
/// (-ln u)/(1-u) of space; spending the spare where it saves most gives the
/// condition g(u) = lambda * m, so the segment furthest past its threshold has
/// the largest g(u)/m. With equal rates (uniform writes) this is exactly
/// greedy; a cold segment is cleaned at a higher u, but g falls quadratically
/// near 1, so cold data is not churned as with LFS's (1-u)*age/(1+u).
/// The cap: lives are not memoryless. Data that dies in order (sequential
/// overwrites; a linear fill before a trace) is invalidated in bursts and
/// looks cold in between; uncapped, a 20% sequential mix cost 2-8% more WA
/// than greedy, capped at 2.5 it is within -4..+4% (docs/gc.md).
fn decay_score(s: &SegInfo, segs: &SegmentTable, u: f64) -> f64 {
    let u = u.max(1e-6);
    let g = (1.0 - u) / u + u.ln();
    g * (est_life(s, segs) / segs.mean_life.max(1) as f64).min(MAX_COLDNESS)
}

/// Policy used when none is given (chosen by measurement, see docs/gc.md).
pub const DEFAULT_POLICY: GcPolicy = GcPolicy::DecayCb;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segments::SegInfo;

    /// A segment a replayed version 3 intent log record names, held by the
    /// mount (`SegmentTable::hold_live`) until the new log start passes the
    /// record, is never a victim however little it holds (a barrier could
    /// free it and a chunk overwrite the record's data meanwhile); released
    /// (`unhold`), it is the best victim again.
    #[test]
    fn a_segment_held_for_the_intent_log_is_never_a_victim() {
        let mut t = SegmentTable::new(3, 256);
        t.free.clear();
        for (i, live) in [10u32, 200, 250].into_iter().enumerate() {
            t.segs[i] = SegInfo {
                state: SegState::Closed,
                live,
                data_live: live,
                fill: 256,
                last_seq: 1,
                ..SegInfo::EMPTY
            };
        }
        for policy in [GcPolicy::Greedy, GcPolicy::CostBenefit, GcPolicy::DecayCb] {
            assert_eq!(pick_victim(&t, policy, 100, 100, 1), Some(0), "{policy:?}");
        }
        t.hold_live(0);
        for policy in [GcPolicy::Greedy, GcPolicy::CostBenefit, GcPolicy::DecayCb] {
            assert_eq!(pick_victim(&t, policy, 100, 100, 1), Some(1), "{policy:?}");
        }
        t.unhold(0);
        assert_eq!(t.segs[0].state, SegState::Closed, "still live: Closed");
        assert_eq!(pick_victim(&t, GcPolicy::Greedy, 100, 100, 1), Some(0));
    }

    /// Three closed segments of 256 blocks on a volume of N = 1000 blocks,
    /// clock 5000, decay half-life 250.
    /// 0: half empty and decaying fast (120 recent invalidations), written recently;
    /// 1: 66% full, never invalidated, written long ago;
    /// 2: full (no gain).
    fn table(prior1: f32) -> SegmentTable {
        let mut t = SegmentTable::new(3, 256);
        t.clock = 5000;
        t.half_life = 250;
        t.mean_life = 1000;
        let closed = |live: u32, last_seq: u64| SegInfo {
            state: SegState::Closed,
            live,
            data_live: live,
            fill: 256,
            last_seq,
            ..SegInfo::EMPTY
        };
        t.segs[0] = SegInfo {
            heat: 120.0,
            heat_t: 4990,
            since: 4600,
            ..closed(128, 90)
        };
        t.segs[1] = SegInfo {
            prior: prior1,
            ..closed(170, 1)
        };
        t.segs[2] = closed(255, 50);
        t.free.clear();
        t
    }

    #[test]
    fn decay_cb_cleans_cold_relocated_data_at_higher_utilisation() {
        // Segment 1 holds data that GC already moved from a victim estimated
        // to live 8 N: it is cold, so cleaning it at 66% beats waiting.
        let mut t = table(8000.0);
        assert!(est_life(&t.segs[0], &t) < 1000.0, "hot segment looks hot");
        assert_eq!(est_life(&t.segs[1], &t), 8000.0, "inherited life kept");
        assert_eq!(pick_victim(&t, GcPolicy::DecayCb, 100, 101, 1), Some(1));
        assert_eq!(pick_victim(&t, GcPolicy::Greedy, 100, 101, 1), Some(0));
        // ... but coldness counts at most MAX_COLDNESS times: at 78% it waits,
        // however cold it is estimated.
        t.segs[1].live = 200;
        t.segs[1].data_live = 200;
        t.segs[1].prior = 1e9;
        assert_eq!(pick_victim(&t, GcPolicy::DecayCb, 100, 101, 1), Some(0));
    }

    #[test]
    fn decay_cb_does_not_take_never_overwritten_data_for_cold() {
        // Segment 1 is old but nothing in it was ever overwritten (e.g. the
        // linear fill before a trace): its life is unknown, the prior N. LFS
        // cost-benefit takes it for the coldest; decay-cb waits like greedy.
        let t = table(0.0);
        assert_eq!(est_life(&t.segs[1], &t), 1000.0);
        assert_eq!(pick_victim(&t, GcPolicy::CostBenefit, 100, 101, 1), Some(1));
        assert_eq!(pick_victim(&t, GcPolicy::DecayCb, 100, 101, 1), Some(0));
    }

    #[test]
    fn decay_cb_without_hints_is_greedy() {
        // After a mount every hint is gone: all lives are N and the order is
        // g(u), decreasing in u, i.e. greedy.
        let mut t = SegmentTable::new(40, 256);
        t.half_life = 250;
        t.mean_life = 1000;
        t.free.clear();
        for (i, s) in t.segs.iter_mut().enumerate() {
            let live = 40 + (i as u32 * 37) % 200;
            *s = SegInfo {
                state: SegState::Closed,
                live,
                data_live: live,
                fill: 256,
                last_seq: i as u64,
                ..SegInfo::EMPTY
            };
        }
        let g = pick_victim(&t, GcPolicy::Greedy, 100, 101, 1);
        assert_eq!(t.segs[g.unwrap() as usize].live, 40);
        assert_eq!(pick_victim(&t, GcPolicy::DecayCb, 100, 101, 1), g);
    }

    #[test]
    fn decay_classes() {
        assert_eq!(decay_class(100.0, 1000), 0);
        assert_eq!(decay_class(1999.0, 1000), 0);
        assert_eq!(decay_class(2500.0, 1000), 1);
    }

    #[test]
    fn policy_ids_round_trip() {
        for id in 0..7 {
            let p = GcPolicy::from_id(id).expect("known id");
            assert_eq!(p.id(), id);
            assert_eq!(GcPolicy::parse(p.name()), Ok(p));
        }
        assert_eq!(GcPolicy::from_id(7), None);
    }
}
