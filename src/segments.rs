//! Segment table: per segment, how many live map entries point into it, how far it
//! is filled, its age, and its state in the life cycle
//! Free -> Open (one stream appends) -> Closed -> (live reaches 0) Pending -> Free.
//!
//! Invariant: a segment moves from Pending to Free only through a reuse barrier
//! (every chunk that killed its contents is durable and the superblock records the
//! durable watermark), so replay never needs a chunk that reuse overwrote.

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
}

impl SegInfo {
    /// A free, empty segment with no history.
    pub const EMPTY: SegInfo = SegInfo {
        state: SegState::Free,
        live: 0,
        data_live: 0,
        fill: 0,
        last_seq: 0,
        gen: 0,
        heat: 0.0,
        heat_t: 0,
        since: 0,
        prior: 0.0,
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
    pub free: VecDeque<u32>,
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
        let s = &mut self.segs[seg as usize];
        assert!(
            s.state == SegState::Free && s.live == 0,
            "segment {seg} taken while in use"
        );
        *s = SegInfo {
            state: SegState::Open(stream),
            ..SegInfo::EMPTY
        };
        Some(seg)
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
                self.free.push_back(seg);
            }
        }
        self.pending.retain(|s| !segs.contains(s));
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
