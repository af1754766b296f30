//! Segment table: per segment, how many live map entries point into it, how far it
//! is filled, its age, and its state in the life cycle
//! Free -> Open (one stream appends) -> Closed -> (live reaches 0) Pending -> Free.
//!
//! Invariant: a segment moves from Pending to Free only through a reuse barrier
//! (every chunk that killed its contents is durable and the superblock records the
//! durable watermark), so replay never needs a chunk that reuse overwrote.
//!
//! The free segments are a stack: a barrier puts what it frees on top and
//! writes take from the top, so a few recently used segments carry the writes
//! and the ones deep in the stack stay untouched. Those are the ones whose
//! space is given back to the host or device (`take_to_discard`): only
//! segments writes did not reach since the previous pass (below the stack's
//! low-water mark), each once since it was freed, so a discarded segment is
//! not written again until writes have used every segment above it.

use crate::format::checkpoint::SegmentRecord;
use crate::format::chunk::Stream;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegState {
    Free,
    Open(Stream),
    Closed,
    /// Being cleaned: GC reads it without the engine lock. It cannot become
    /// Pending (so it cannot be reused) until GC has finished with it.
    Victim,
    /// Nothing live; waits for the reuse barrier before it may be overwritten.
    Pending,
    /// Holds a chunk that failed verification; never chosen by GC again.
    Damaged,
}

#[derive(Debug, Clone, Copy)]
pub struct SegInfo {
    pub state: SegState,
    /// Map entries (data and virtual) pointing here.
    pub live: u32,
    /// Of `live`, how many are data blocks.
    pub data_live: u32,
    /// Of `live`, how many are LZ4 fragments (compressed volumes).
    pub frag_live: u32,
    /// Mean length in bytes of the fragments placed here (the map does not
    /// know a fragment's length, so live bytes are estimated from it;
    /// `FRAG_MEAN_UNKNOWN` after a mount).
    pub frag_mean: u16,
    /// Fragments placed here this life (the mean's weight).
    pub frag_placed: u32,
    pub fill: u32,
    pub last_seq: u64,
    /// GC generation of the data written here (0 = host writes, k = relocated k
    /// times, capped). In memory only: a hint for generational GC, 0 after mount.
    pub gen: u8,
    /// Decay hints for the `decay-cb` policy (gc.rs), in memory only, reset on
    /// mount. `heat`: invalidations of entries here, each weighted
    /// 2^(-(clock - then) / half_life), as of clock `heat_t`.
    pub heat: f32,
    pub heat_t: u64,
    /// Clock of the first invalidation since the segment was opened (start of
    /// its observation window; meaningless while `heat` is 0).
    pub since: u64,
    /// Prior estimate of the remaining life (in host blocks) of the data written
    /// here (0 = unknown: the volume's mean life N). GC output inherits its
    /// victims' estimate.
    pub prior: f32,
    /// Mount only: a version 3 intent log record names a place in this
    /// segment and the mount has not re-homed it yet (`SegmentTable::hold`,
    /// `hold_live`): GC must not pick it, or a reuse barrier could free it and
    /// a chunk overwrite the record's data before the log start passes it.
    pub held: bool,
}

/// Assumed mean fragment length when nothing was placed this mount.
pub const FRAG_MEAN_UNKNOWN: u16 = 2048;

impl SegInfo {
    /// Live bytes in blocks: raw data blocks plus the estimated space of the
    /// live fragments (their count times the segment's mean fragment length,
    /// rounded up). What GC's policy weighs instead of `data_live`.
    #[inline]
    pub fn live_blocks(&self) -> u32 {
        self.data_live + (self.frag_live as u64 * self.frag_mean as u64).div_ceil(4096) as u32
    }

    /// A fragment of `len` bytes was placed here: update the mean.
    pub fn note_fragment(&mut self, len: u16) {
        if self.frag_placed == 0 {
            self.frag_mean = len;
        } else {
            let m = self.frag_mean as i64;
            self.frag_mean = (m + (len as i64 - m) / (self.frag_placed as i64 + 1)) as u16;
        }
        self.frag_placed += 1;
    }

    /// A free, empty segment with no history.
    pub const EMPTY: SegInfo = SegInfo {
        state: SegState::Free,
        live: 0,
        data_live: 0,
        frag_live: 0,
        frag_mean: FRAG_MEAN_UNKNOWN,
        frag_placed: 0,
        fill: 0,
        last_seq: 0,
        gen: 0,
        heat: 0.0,
        heat_t: 0,
        since: 0,
        prior: 0.0,
        held: false,
    };

    /// `heat` decayed to `clock`.
    #[inline]
    pub fn heat_at(&self, clock: u64, half_life: u64) -> f64 {
        let dt = clock.saturating_sub(self.heat_t) as f64;
        self.heat as f64 * (-dt / half_life.max(1) as f64).exp2()
    }
}

pub struct SegmentTable {
    pub segs: Vec<SegInfo>,
    /// Free segments, the next one to take at the front (a stack: released
    /// segments go on the front too; discarded ones return at the back).
    pub free: VecDeque<u32>,
    /// Per segment: not to be discarded: given back (discarded) since it was
    /// last freed, never written since create, or free since the mount with a
    /// first block that may not be a tombstone; reset when a stream takes it
    /// and when a wipe of this mount tombstones it (`wiped`). Discard needs the
    /// tombstone: a chunk header left at block 0 over discarded data reads as
    /// damage to a mount that walks the segment (a fallback mount without a
    /// checkpoint walks them all).
    pub discarded: Vec<bool>,
    /// The fewest free segments since the last `take_to_discard` pass: the
    /// bottom `free_low` of the stack were not taken since then.
    pub free_low: usize,
    pub pending: Vec<u32>,
    pub segment_blocks: u32,
    /// Host data blocks written since mount: the clock of the decay hints.
    pub clock: u64,
    /// Half-life of the decay hints in host blocks (0: no hints are kept).
    pub half_life: u64,
    /// Mean life of a block under uniform writes (the logical size in blocks).
    pub mean_life: u64,
}

impl SegmentTable {
    pub fn new(count: u32, segment_blocks: u32) -> SegmentTable {
        SegmentTable {
            segs: vec![SegInfo::EMPTY; count as usize],
            free: (0..count).collect(),
            // a new volume's segments hold nothing but a wiped first block
            discarded: vec![true; count as usize],
            free_low: count as usize,
            pending: Vec::new(),
            segment_blocks,
            clock: 0,
            half_life: 0,
            mean_life: 0,
        }
    }

    /// Table rebuilt by recovery: segments with live entries are Closed, the rest Free.
    pub fn rebuild(mut segs: Vec<SegInfo>, segment_blocks: u32) -> SegmentTable {
        let mut free = VecDeque::new();
        for (i, s) in segs.iter_mut().enumerate() {
            if s.live > 0 {
                s.state = SegState::Closed;
            } else {
                *s = SegInfo::EMPTY;
                free.push_back(i as u32);
            }
        }
        SegmentTable {
            // a free segment of a clean mount may still hold a chunk header of
            // its last life at block 0 (it emptied after the last barrier):
            // never discarded until a wipe of ours tombstones it
            discarded: vec![true; segs.len()],
            // the first pass after a mount only starts the window
            free_low: 0,
            segs,
            free,
            pending: Vec::new(),
            segment_blocks,
            clock: 0,
            half_life: 0,
            mean_life: 0,
        }
    }

    pub fn count(&self) -> u32 {
        self.segs.len() as u32
    }

    /// Account one more live entry in `seg`.
    #[inline]
    pub fn add_live(&mut self, seg: u32, data: bool) {
        let s = &mut self.segs[seg as usize];
        s.live += 1;
        s.data_live += data as u32;
        assert!(
            s.data_live <= self.segment_blocks,
            "segment {seg} over-full"
        );
    }

    /// Account one less live entry in `seg`; a Closed segment that empties becomes Pending.
    #[inline]
    pub fn drop_live(&mut self, seg: u32, data: bool) {
        let s = &mut self.segs[seg as usize];
        assert!(
            s.live > 0 && s.data_live >= data as u32,
            "segment {seg} live count underflows"
        );
        s.live -= 1;
        s.data_live -= data as u32;
        if self.half_life > 0 {
            if s.heat == 0.0 {
                s.since = self.clock;
            }
            s.heat = (s.heat_at(self.clock, self.half_life) + 1.0) as f32;
            s.heat_t = self.clock;
        }
        if s.live == 0 && s.state == SegState::Closed {
            s.state = SegState::Pending;
            self.pending.push(seg);
        }
    }

    pub fn take_free(&mut self, stream: Stream) -> Option<u32> {
        let seg = self.free.pop_front()?;
        self.free_low = self.free_low.min(self.free.len());
        let s = &mut self.segs[seg as usize];
        assert!(
            s.state == SegState::Free && s.live == 0,
            "segment {seg} taken while in use"
        );
        *s = SegInfo {
            state: SegState::Open(stream),
            ..SegInfo::EMPTY
        };
        self.discarded[seg as usize] = false;
        Some(seg)
    }

    /// Mount: a free segment holds the data blocks of version 3 intent log
    /// records being re-homed (docs/intent-log.md §3): taken out of the free
    /// stack, Closed and full, so no chunk is written there; `close` once
    /// the mount's new log start has passed those records frees it (through
    /// the reuse barrier, as any segment that empties).
    pub fn hold(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        assert!(
            s.state == SegState::Free && s.live == 0,
            "segment {seg} held while in use"
        );
        *s = SegInfo {
            state: SegState::Closed,
            fill: self.segment_blocks,
            held: true,
            ..SegInfo::EMPTY
        };
        self.free.retain(|&f| f != seg);
        self.free_low = self.free_low.min(self.free.len());
    }

    /// Mount: a segment with live chunks that a version 3 record names stays
    /// out of GC's reach (`SegInfo::held`) until the mount's new log start
    /// has passed the record: the mount may clean before it re-homes.
    pub fn hold_live(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        assert!(
            s.state == SegState::Closed,
            "segment {seg} held live while {:?}",
            s.state
        );
        s.held = true;
    }

    /// The mount's new log start has passed every record naming `seg`: GC
    /// may pick it again, and an empty one held for the records goes the way
    /// of any segment that empties (Pending, then the reuse barrier).
    pub fn unhold(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        if !s.held {
            return;
        }
        s.held = false;
        if s.state == SegState::Closed && s.live == 0 {
            self.close(seg);
        }
    }

    /// A stream is done appending to `seg`.
    pub fn close(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        s.state = SegState::Closed;
        if s.live == 0 {
            s.state = SegState::Pending;
            self.pending.push(seg);
        }
    }

    /// After a reuse barrier: these pending segments may be overwritten.
    /// GC is done with a Victim: Pending if emptied, else Closed again.
    pub fn end_victim(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        assert_eq!(s.state, SegState::Victim, "segment {seg}");
        if s.live == 0 {
            s.state = SegState::Pending;
            self.pending.push(seg);
        } else {
            s.state = SegState::Closed;
        }
    }

    pub fn release(&mut self, segs: &[u32]) {
        for &seg in segs {
            let s = &mut self.segs[seg as usize];
            // only the barrier releases, and only what stayed empty since it began
            assert!(s.state != SegState::Free, "segment {seg} released twice");
            if s.state == SegState::Pending && s.live == 0 {
                s.state = SegState::Free;
                s.fill = 0;
                // on top of the stack: the next segment a stream takes
                self.free.push_front(seg);
            }
        }
        self.pending.retain(|s| !segs.contains(s));
    }

    /// Up to `max` free segments deeper than `keep` in the free stack that
    /// were not given back since they were freed and that no stream reached
    /// since the previous pass (below the low-water mark; `cold_only`), taken
    /// out of the free stack (so no stream can take one while it is
    /// discarded) and marked discarded. The caller discards them, then hands
    /// them back with `return_discarded`. Starts the next window. A segment
    /// writes reached once is likely reached again (the log writes through the
    /// free segments down to the clean-ahead mark before GC cleans): punching
    /// it would only make those writes fill a hole.
    pub fn take_to_discard(&mut self, keep: usize, max: usize, cold_only: bool) -> Vec<u32> {
        let untouched_from = if cold_only {
            self.free.len().saturating_sub(self.free_low)
        } else {
            0
        };
        let mut out = Vec::new();
        let mut i = keep.max(untouched_from);
        while i < self.free.len() && out.len() < max {
            let seg = self.free[i];
            if self.discarded[seg as usize] {
                i += 1;
                continue;
            }
            self.free.remove(i);
            self.discarded[seg as usize] = true;
            out.push(seg);
        }
        // (the ones out for discard come back at the bottom)
        self.free_low = self.free.len() + out.len();
        out
    }

    /// The mount tombstoned these free segments: they may be discarded.
    pub fn wiped(&mut self, segs: &[u32]) {
        for &seg in segs {
            if self.segs[seg as usize].state == SegState::Free {
                self.discarded[seg as usize] = false;
            }
        }
    }

    /// Segments `take_to_discard` took, back at the bottom of the free stack.
    pub fn return_discarded(&mut self, segs: &[u32]) {
        for &seg in segs {
            assert_eq!(
                self.segs[seg as usize].state,
                SegState::Free,
                "segment {seg}"
            );
            self.free.push_back(seg);
        }
    }

    pub fn records(&self) -> Vec<SegmentRecord> {
        self.segs
            .iter()
            .map(|s| SegmentRecord {
                live: s.live,
                fill: s.fill,
                last_seq: s.last_seq,
            })
            .collect()
    }

    pub fn count_state(&self, f: impl Fn(SegState) -> bool) -> u32 {
        self.segs.iter().filter(|s| f(s.state)).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Released segments go on top of the free stack (taken first); the deep
    /// ones are handed out for discard once each, out of the stack meanwhile,
    /// and again only after a stream took and freed them.
    #[test]
    fn free_segments_are_a_stack_and_deep_ones_are_discarded_once() {
        let mut t = SegmentTable::rebuild(vec![SegInfo::EMPTY; 8], 16);
        assert_eq!(t.free, [0, 1, 2, 3, 4, 5, 6, 7]);
        t.wiped(&[0, 1, 2, 3, 4, 5, 6, 7]);
        // the first pass after a mount only starts the window
        assert!(t.take_to_discard(6, 64, true).is_empty());
        // nothing taken since: below the low-water mark, deeper than `keep`
        let d = t.take_to_discard(6, 64, true);
        assert_eq!(d, [6, 7]);
        assert_eq!(
            t.free,
            [0, 1, 2, 3, 4, 5],
            "out of the stack while discarded"
        );
        t.return_discarded(&d);
        assert_eq!(t.free, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(t.take_to_discard(6, 64, true).is_empty(), "each once");
        // a stream takes the top segment, it empties and a barrier frees it
        let s = t.take_free(Stream::User).unwrap();
        assert_eq!(s, 0);
        t.close(s);
        assert_eq!(t.pending, [0]);
        t.release(&[0]);
        assert_eq!(t.free.front(), Some(&0), "freed on top: taken next");
        // the batch bound holds, and what was discarded is not offered again
        assert_eq!(t.take_to_discard(0, 2, false), [0, 1]);
        assert_eq!(t.take_to_discard(0, 64, false), [2, 3, 4, 5]);
    }

    /// Segments free at mount may still hold a chunk header of their last
    /// life at block 0: not discarded until a wipe of the mount tombstones them.
    #[test]
    fn segments_free_at_mount_wait_for_a_wipe_before_a_discard() {
        let mut t = SegmentTable::rebuild(vec![SegInfo::EMPTY; 8], 16);
        for _ in 0..3 {
            assert!(t.take_to_discard(0, 64, false).is_empty());
        }
        t.wiped(&[6, 7]);
        assert_eq!(t.take_to_discard(0, 64, false), [6, 7]);
    }

    /// Segments writes reached since the last pass are not discarded: only
    /// the bottom of the stack that stayed below the low-water mark.
    #[test]
    fn only_segments_below_the_low_water_mark_are_discarded() {
        let mut t = SegmentTable::rebuild(vec![SegInfo::EMPTY; 8], 16);
        t.wiped(&[0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(t.take_to_discard(0, 64, true).is_empty());
        // streams take 0..5 (the stack falls to 3), then they are freed again
        let taken: Vec<u32> = (0..5).map(|_| t.take_free(Stream::User).unwrap()).collect();
        for &s in &taken {
            t.close(s);
        }
        t.release(&taken);
        assert_eq!(t.free.len(), 8);
        // only 5, 6, 7 stayed untouched (and 5 is within `keep`)
        assert_eq!(t.take_to_discard(6, 64, true), [6, 7]);
        assert_eq!(t.take_to_discard(0, 64, false), [4, 3, 2, 1, 0, 5]);
    }
}
