//! Scrub: find bit rot before a client read does. Walks the closed segments one
//! at a time (segments a failed read marked come first), reads each whole
//! segment (up to its fill) with one media read, verifies every chunk header and
//! every data block's CRC, and reports (warn log + counters `scrub_*`) each
//! damaged block the map still points at, and each chunk header that does not
//! verify. It changes nothing in the engine; on a flat store nothing on the
//! media either. On a store with redundancy (a stripe set) a damaged live block
//! is handed to the store's heal (`Shared::heal`), which may rewrite it, and
//! the store checks its redundancy (a stripe set: every full row's parity
//! against its data, rewritten unless read-only: `Shared::scrub_redundancy`).
//! Each pass of the walk also checks every copy of the current checkpoint
//! where the media mirrors its metadata (`scrub_metadata`).
//!
//! Threads and state: the queue of marked segments (`Scrub::marked`) is written
//! by request threads (a failed read) and drained by whoever scrubs; the cursor
//! of the background walk belongs to the scrub thread (`sluice-scrub`, started
//! by `Volume::open` when `OpenOptions::scrub_rate` is set; off by default), and
//! `Volume::scrub_step` (tests, tools) takes the same mutex. The thread paces
//! itself to `scrub_rate` bytes per second (it sleeps after each segment for as
//! long as that segment's bytes are worth) and stops with the housekeeper.
//!
//! Invariant: a segment is verified with the reuse lock held shared, so it is
//! one incarnation from the state check to the liveness check.

use super::Shared;
use crate::checkpoint;
use crate::error::Result;
use crate::format::chunk::{self, ChunkHeader};
use crate::format::codec::{self, Place};
use crate::format::BLOCK_BYTES;
use crate::map::Loc;
use crate::media::AlignedBuf;
use crate::segments::SegState;
use crate::stats::Counters;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fragment that failed: (lba, its chunk's physical block, the chunk's
/// blocks, (packed block, slot) if the packed tables said, chunk seq).
type BadFragment = (u64, u64, u32, Option<(u32, u8)>, u64);

/// What one scrubbed segment showed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubOutcome {
    pub segment: u32,
    /// Bytes read from the media (0: the segment was skipped: not closed).
    pub bytes: u64,
    /// Damage found, one line each (only blocks the map still points at count,
    /// plus chunk headers that do not verify).
    pub damage: Vec<String>,
}

pub(crate) struct Scrub {
    /// Segments a failed read marked, oldest first, each at most once.
    marked: Mutex<VecDeque<u32>>,
    /// Next segment of the background walk.
    cursor: Mutex<u32>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Scrub {
    pub fn new() -> Scrub {
        Scrub {
            marked: Mutex::new(VecDeque::new()),
            cursor: Mutex::new(0),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Queue `seg` for scrub ahead of the walk (a read found damage there).
    pub fn mark(&self, seg: u32) {
        let mut m = self.marked.lock();
        if !m.contains(&seg) {
            m.push_back(seg);
        }
        drop(m);
        self.wake.notify_all();
    }

    pub fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
    }
}

impl Shared {
    /// Scrub one segment: the oldest marked one, else the next of the walk.
    pub(crate) fn scrub_step(&self) -> Result<ScrubOutcome> {
        let mut pass_start = false;
        let seg = match self.scrub.marked.lock().pop_front() {
            Some(s) => s,
            None => {
                let mut c = self.scrub.cursor.lock();
                let s = *c % self.geo.segment_count;
                *c = (s + 1) % self.geo.segment_count;
                pass_start = s == 0;
                s
            }
        };
        let mut out = self.scrub_segment(seg)?;
        // MUTANT: meta-scrub-skipped s|if pass_start {|if false {|
        if pass_start {
            self.scrub_metadata(&mut out);
        }
        Ok(out)
    }

    /// At the start of each pass of the walk, on a media that mirrors its
    /// metadata (a stripe set): every copy of the current checkpoint against
    /// the checkpoint's own check, a failing copy rewritten from a good one
    /// where the mount may write. A mount reads copies in member order and
    /// stops at the first good one, so a bad copy behind it would otherwise
    /// stay unseen until the members ahead of it were lost. (A checkpoint
    /// write and this read each hold the set's metadata lock, so the read
    /// sees one whole image of the slot.) Intent-log records are not
    /// scrubbed: the ring reuses their space within minutes.
    fn scrub_metadata(&self, out: &mut ScrubOutcome) {
        let sb = self.commit.sb.lock().clone();
        if sb.checkpoint_slot == crate::format::superblock::NO_CHECKPOINT {
            return;
        }
        let slot = sb.checkpoint_slot;
        let Some(r) = checkpoint::check_copies(self.commit.media(), &sb, slot) else {
            return;
        };
        let line = match r {
            Ok(c) => {
                out.bytes += c.read as u64 * sb.checkpoint_slot_bytes;
                if !c.good {
                    Some(format!(
                        "checkpoint slot {slot}: none of its {} copies verifies",
                        c.read
                    ))
                } else if c.bad > 0 {
                    Some(format!(
                        "checkpoint slot {slot}: {} of its {} copies fail their check; {} rewritten from a good one",
                        c.bad, c.read, c.rewritten
                    ))
                } else {
                    None
                }
            }
            Err(e) => Some(format!(
                "checkpoint slot {slot}: reading its copies failed: {e}"
            )),
        };
        if let Some(l) = line {
            tracing::warn!("scrub: {l}");
            Counters::add(&self.counters.scrub_errors, 1);
            out.damage.push(l);
        }
    }

    /// Verify every chunk of `seg` and report damage to live blocks.
    pub(crate) fn scrub_segment(&self, seg: u32) -> Result<ScrubOutcome> {
        let mut out = ScrubOutcome {
            segment: seg,
            ..Default::default()
        };
        let _r = self.reuse.read();
        let (fill, uuid) = {
            let c = self.core.lock();
            let s = &c.segs.segs[seg as usize];
            match s.state {
                // Open segments still receive chunks, a Victim is GC's, Free and
                // Pending hold nothing live.
                SegState::Closed | SegState::Damaged => (s.fill, c.uuid),
                _ => return Ok(out),
            }
        };
        if fill == 0 {
            return Ok(out);
        }
        let mut img = AlignedBuf::new(fill as usize * BLOCK_BYTES);
        self.store.read_segment(seg, 0, &mut img)?;
        out.bytes = img.len() as u64;
        // (lba, physical block, data block index, chunk) of each block whose CRC fails
        let mut bad: Vec<(u64, u32, u32, u64)> = Vec::new();
        let mut bad_frags: Vec<BadFragment> = Vec::new();
        let mut raw = [0u8; BLOCK_BYTES];
        let base = seg * self.geo.segment_blocks;
        let mut pos = 0u32;
        while pos < fill {
            let at = pos as usize * BLOCK_BYTES;
            let h = match ChunkHeader::decode(&img[at..]) {
                Ok(h) if h.uuid == uuid && h.segment == seg && pos + h.total_blocks() <= fill => h,
                Ok(h) => {
                    out.damage.push(format!(
                        "segment {seg} block {pos}: chunk seq {} does not belong here; \
                         the rest of the segment is unverifiable",
                        h.seq
                    ));
                    break;
                }
                Err(e) => {
                    out.damage.push(format!(
                        "segment {seg} block {pos}: chunk header does not verify ({e}); \
                         the rest of the segment is unverifiable"
                    ));
                    break;
                }
            };
            let chunk_phys = base as u64 + pos as u64;
            // a compressed chunk's fragments, resolved once (None: its packed
            // tables do not chain: every fragment of the chunk is unreadable)
            let mut places: Option<Option<Vec<codec::FragmentPlace>>> = None;
            for r in codec::records(&h, chunk_phys) {
                match r.place {
                    Place::Block { phys, data, crc } => {
                        let off = at + (1 + data as usize) * BLOCK_BYTES;
                        if chunk::block_crc(&img[off..off + BLOCK_BYTES]) != crc {
                            bad.push((r.lba, phys as u32, data, h.seq));
                        }
                    }
                    Place::Fragment { k } => {
                        let data =
                            &img[at + BLOCK_BYTES..at + h.total_blocks() as usize * BLOCK_BYTES];
                        let places = places
                            .get_or_insert_with(|| codec::fragments(&h, chunk_phys, data).ok());
                        let fp = places.as_ref().and_then(|v| v.get(k as usize));
                        let ok = fp.is_some_and(|fp| {
                            codec::fragment_verifies(&h, chunk_phys, &img[at..], fp, &mut raw)
                        });
                        // MUTANT: scrub-skips-fragments s|if !ok {|if false {|
                        if !ok {
                            bad_frags.push((
                                r.lba,
                                chunk_phys,
                                h.total_blocks(),
                                fp.map(|f| (f.phys as u32, f.slot)),
                                h.seq,
                            ));
                        }
                    }
                    Place::Virtual(_) => {}
                }
            }
            pos += h.total_blocks();
        }
        let mut live_bad = Vec::new();
        if !bad_frags.is_empty() {
            let c = self.core.lock();
            for (lba, chunk_phys, blocks, place, seq) in bad_frags {
                if lba >= c.map.len() {
                    continue;
                }
                // live: the map still points at this fragment (or, when the
                // packed tables do not say where it is, into this chunk)
                let Loc::Fragment { phys, slot, .. } = c.map.get(lba) else {
                    continue;
                };
                let here = match place {
                    Some(at) => at == (phys, slot),
                    None => (chunk_phys + 1..chunk_phys + blocks as u64).contains(&(phys as u64)),
                };
                if here {
                    out.damage.push(format!(
                        "segment {seg} block {}: logical block {lba} (LZ4 fragment in slot {slot}, chunk seq {seq}) fails its checksum",
                        phys - base
                    ));
                }
            }
        }
        if !bad.is_empty() {
            let c = self.core.lock();
            for (lba, p, di, seq) in bad {
                if lba < c.map.len() && c.map.get(lba) == Loc::Data(p) {
                    out.damage.push(format!(
                        "segment {seg} block {}: logical block {lba} (chunk seq {seq}, data block {di}) fails its checksum",
                        p - base
                    ));
                    live_bad.push((lba, p, out.damage.len() - 1));
                }
            }
        }
        // the store's damage hook, outside the engine lock (a store with
        // redundancy repairs there; a flat store has nothing to repair from)
        for (lba, p, line) in live_bad {
            if self.heal(Some(lba), p, true) {
                out.damage[line].push_str("; healed from the stripe set's parity (rewritten)");
            }
        }
        // a store with redundancy checks it too (a stripe set: every full
        // row's parity against its data; rewritten unless read-only)
        out.damage.extend(self.scrub_redundancy(seg, fill, &uuid));
        for d in &out.damage {
            tracing::warn!("scrub: {d}");
        }
        Counters::add(&self.counters.scrub_segments, 1);
        Counters::add(&self.counters.scrub_bytes, out.bytes);
        Counters::add(&self.counters.scrub_errors, out.damage.len() as u64);
        Ok(out)
    }

    /// The background scrub thread: one segment at a time at `rate` bytes/s.
    pub(crate) fn scrubber(self: Arc<Self>, rate: u64) {
        let rate = rate.max(1);
        loop {
            if *self.scrub.stop.lock() || self.closed.load(Ordering::Acquire) {
                return;
            }
            let t0 = Instant::now();
            let bytes = match self.scrub_step() {
                Ok(o) => o.bytes,
                Err(e) => {
                    tracing::error!("scrub: {e}");
                    self.geo.segment_bytes()
                }
            };
            // pace: this segment's bytes are worth bytes/rate seconds (a skipped
            // segment costs a short pause so an idle walk does not spin)
            let worth =
                Duration::from_secs_f64(bytes as f64 / rate as f64).max(Duration::from_micros(200));
            let until = t0 + worth;
            let mut stop = self.scrub.stop.lock();
            while !*stop && Instant::now() < until && self.scrub.marked.lock().is_empty() {
                self.scrub.wake.wait_until(&mut stop, until);
            }
            if *stop {
                return;
            }
        }
    }
}
