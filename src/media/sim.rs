//! SimMedia: the media of the deterministic simulation test (tests/dst.rs). It
//! models a disk with a volatile write cache: a completed write sits in the cache
//! until a flush; at power loss any subset of the cached writes may have reached the
//! media, each torn at any subset of its 512-byte sectors, and the cache is lost.
//! On demand it cuts power after N media operations (writes and flushes), fails
//! chosen writes with EIO, freezes (power cut from another thread), flips bits on
//! read, and records every operation so a test can rebuild the media as it was
//! before any operation (prefix replay) instead of re-running the workload.
//! Its flushes may be held (`hold_flushes`): durable at their call, they
//! return only after the hold, so a flush stays running while other threads
//! write (what a slow device's flush looks like to the engine).
//!
//! Invariant: everything written before a flush that returned Ok is in every
//! image `crash_image` / `crash_apply` produce; nothing else is promised.

use super::{check_range, Media};
use parking_lot::Mutex;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::collections::{BTreeSet, HashMap};
use std::io;

/// One recorded operation (see `SimMedia::record`).
#[derive(Debug, Clone)]
pub enum SimEvent {
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    Flush,
    /// A flush of one part (`SimMedia::part`): only cached writes inside
    /// `[base, base + len)` became durable.
    FlushPart {
        base: u64,
        len: u64,
    },
    /// A test's own marker (not a media operation).
    Mark(u64),
}

/// How a power loss treats the cached (unflushed) writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Every cached write reached the media, each may be torn.
    KeepAll,
    /// Each cached write reached the media or not (coin flip), each may be torn.
    Subset,
    /// No cached write reached the media.
    DropAll,
}

struct State {
    /// What survives a power loss for sure.
    durable: Vec<u8>,
    /// Completed but unflushed writes, in completion order.
    cache: Vec<(u64, Vec<u8>)>,
    /// Media operations (writes and flushes) attempted so far.
    ops: u64,
    /// Operations with index >= this fail and power is off from then on.
    cut_at: Option<u64>,
    power_off: bool,
    /// Write numbers (counted among writes only) that fail with EIO.
    fail_writes: BTreeSet<u64>,
    /// Offsets of the writes (and discards) `fail_writes` failed, in order.
    failed: Vec<u64>,
    writes: u64,
    flips: BTreeSet<u64>,
    log: Option<Vec<SimEvent>>,
    /// Discards applied (see `Media::discard` below).
    discards: u64,
    /// Each 4 KiB block's content before its last write (what a device may
    /// return for it after a discard: stale old data).
    prev: HashMap<u64, Vec<u8>>,
}

pub struct SimMedia {
    st: Mutex<State>,
    len: u64,
    /// Microseconds each flush sleeps after it took effect (0: none).
    hold_us: std::sync::atomic::AtomicU64,
}

impl SimMedia {
    pub fn new(len: u64) -> SimMedia {
        Self::from_image(vec![0u8; len as usize])
    }
    /// Media whose durable content is `image` (empty cache).
    pub fn from_image(image: Vec<u8>) -> SimMedia {
        SimMedia {
            len: image.len() as u64,
            st: Mutex::new(State {
                durable: image,
                cache: Vec::new(),
                ops: 0,
                cut_at: None,
                power_off: false,
                fail_writes: BTreeSet::new(),
                failed: Vec::new(),
                writes: 0,
                flips: BTreeSet::new(),
                log: None,
                discards: 0,
                prev: HashMap::new(),
            }),
            hold_us: std::sync::atomic::AtomicU64::new(0),
        }
    }
    /// Every flush from now on (of the media or of a part) sleeps `us`
    /// microseconds after it took effect, outside the media's lock: what it
    /// makes durable is what was written before its call (as a device's
    /// flush covers what completed before it was issued), and a write that
    /// completes during the hold stays in the cache for the next flush.
    /// A test with threads uses it to keep a flush running while other
    /// threads write and FLUSH (parked FLUSHes, tests/dst.rs).
    pub fn hold_flushes(&self, us: u64) {
        self.hold_us.store(us, std::sync::atomic::Ordering::Relaxed);
    }
    /// The hold of `hold_flushes`, after a flush's lock is released.
    fn hold(&self) {
        let us = self.hold_us.load(std::sync::atomic::Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
    }
    /// Record every operation from now on (see `events`).
    pub fn record(&self) {
        self.st.lock().log = Some(Vec::new());
    }
    /// Add a test marker to the record.
    pub fn mark(&self, tag: u64) {
        if let Some(l) = self.st.lock().log.as_mut() {
            l.push(SimEvent::Mark(tag));
        }
    }
    pub fn events(&self) -> Vec<SimEvent> {
        self.st.lock().log.clone().unwrap_or_default()
    }
    pub fn take_events(&self) -> Vec<SimEvent> {
        self.st.lock().log.take().unwrap_or_default()
    }
    /// Power fails at media operation number `n` (writes and flushes, counted from
    /// the media's creation): it and every later operation fail.
    pub fn cut_at_op(&self, n: u64) {
        self.st.lock().cut_at = Some(n);
    }
    /// Power fails now (another thread may be mid-request): every later write
    /// and flush fails and changes nothing.
    pub fn freeze(&self) {
        self.st.lock().power_off = true;
    }
    /// Write number `n` (counted among writes only) fails with EIO, unapplied;
    /// power stays on.
    pub fn fail_write(&self, n: u64) {
        self.st.lock().fail_writes.insert(n);
    }
    /// Offsets of the writes `fail_write` failed so far, in order (which
    /// device of a part-split media took the EIO is known only here: the
    /// order of writes to different parts may differ from a recorded run's).
    pub fn failed_writes(&self) -> Vec<u64> {
        self.st.lock().failed.clone()
    }
    /// Flip bit 0 of the byte at `offset` on every read of it.
    pub fn flip_on_read(&self, offset: u64) {
        self.st.lock().flips.insert(offset);
    }
    pub fn ops(&self) -> u64 {
        self.st.lock().ops
    }
    pub fn writes(&self) -> u64 {
        self.st.lock().writes
    }
    /// Discards the engine issued that were applied (they count among writes).
    pub fn discards(&self) -> u64 {
        self.st.lock().discards
    }
    pub fn is_power_off(&self) -> bool {
        self.st.lock().power_off
    }
    /// The media after a power loss now: the durable content plus the cached
    /// writes `loss` lets through, torn by `seed`.
    pub fn crash_image(&self, loss: Loss, seed: u64) -> Vec<u8> {
        self.crash_image_opts(loss, seed, true)
    }
    /// `crash_image`; see `crash_apply_opts` for `tear_zero_writes`.
    pub fn crash_image_opts(&self, loss: Loss, seed: u64, tear_zero_writes: bool) -> Vec<u8> {
        let s = self.st.lock();
        let mut img = s.durable.clone();
        crash_apply_opts(
            &mut img,
            s.cache.iter().map(|(o, d)| (*o, d.as_slice())),
            loss,
            seed,
            tear_zero_writes,
        );
        img
    }
    /// The content the running system sees.
    pub fn current_image(&self) -> Vec<u8> {
        let s = self.st.lock();
        let mut img = s.durable.clone();
        for (o, d) in &s.cache {
            img[*o as usize..*o as usize + d.len()].copy_from_slice(d);
        }
        img
    }

    /// Remember the content of every whole 4 KiB block of `o..o + n` before
    /// a write or discard replaces it.
    fn keep_prev(s: &mut State, o: usize, n: usize) {
        let first = o.div_ceil(4096);
        let end = (o + n) / 4096;
        for b in first..end {
            let mut old = vec![0u8; 4096];
            Self::current_range(s, b * 4096, &mut old);
            s.prev.insert(b as u64, old);
        }
    }

    /// What the running system sees at `o..o + buf.len()` (no bit flips).
    fn current_range(s: &State, o: usize, buf: &mut [u8]) {
        let n = buf.len();
        buf.copy_from_slice(&s.durable[o..o + n]);
        for (wo, d) in &s.cache {
            let (ws, we) = (*wo as usize, *wo as usize + d.len());
            let (a, b) = (ws.max(o), we.min(o + n));
            if a < b {
                buf[a - o..b - o].copy_from_slice(&d[a - ws..b - ws]);
            }
        }
    }

    /// Count one operation; Err if power is (now) off.
    fn start_op(s: &mut State) -> io::Result<()> {
        let i = s.ops;
        s.ops += 1;
        if s.cut_at.is_some_and(|n| i >= n) {
            s.power_off = true;
        }
        if s.power_off {
            return Err(io::Error::other(format!("simulated power loss at op {i}")));
        }
        Ok(())
    }
}

/// A window `[base, base + len)` of a `SimMedia`, as a device of its own:
/// several parts of one SimMedia model several devices (a volume and its
/// intent log devices) whose operations share one numbered, recorded order
/// (one power cut, one prefix replay), while each flush makes durable only
/// the cached writes of its own part (each device has its own volatile cache).
pub struct SimPart {
    pub sim: std::sync::Arc<SimMedia>,
    pub base: u64,
    pub len: u64,
}

impl SimMedia {
    /// The part `[base, base + len)` of this media as a device of its own.
    pub fn part(self: &std::sync::Arc<Self>, base: u64, len: u64) -> SimPart {
        assert!(base + len <= self.len, "a part inside the media");
        SimPart {
            sim: self.clone(),
            base,
            len,
        }
    }
}

impl Media for SimPart {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        self.sim.read_at(buf, self.base + offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        self.sim.write_at(buf, self.base + offset)
    }
    fn flush(&self) -> io::Result<()> {
        let mut s = self.sim.st.lock();
        SimMedia::start_op(&mut s)?;
        let (lo, hi) = (self.base, self.base + self.len);
        let cache = std::mem::take(&mut s.cache);
        for (o, d) in cache {
            if o >= lo && o < hi {
                s.durable[o as usize..o as usize + d.len()].copy_from_slice(&d);
            } else {
                s.cache.push((o, d));
            }
        }
        if let Some(l) = s.log.as_mut() {
            l.push(SimEvent::FlushPart {
                base: self.base,
                len: self.len,
            });
        }
        drop(s);
        self.sim.hold();
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range(self.len, offset, len as usize)?;
        self.sim.discard(self.base + offset, len)
    }
    fn describe(&self) -> String {
        format!(
            "part {}..{} of a simulated disk",
            self.base,
            self.base + self.len
        )
    }
}

/// Apply the cached writes `cache` (in completion order) that a power loss lets
/// reach the media to `img`: `loss` chooses which, and each one that gets through
/// is torn at a random subset of its 512-byte sectors half of the time.
pub fn crash_apply<'a>(
    img: &mut [u8],
    cache: impl Iterator<Item = (u64, &'a [u8])>,
    loss: Loss,
    seed: u64,
) {
    crash_apply_opts(img, cache, loss, seed, true)
}

/// `crash_apply`, where `tear_zero_writes: false` never tears a write of all
/// zeros (it reaches the media whole or not at all).
pub fn crash_apply_opts<'a>(
    img: &mut [u8],
    cache: impl Iterator<Item = (u64, &'a [u8])>,
    loss: Loss,
    seed: u64,
    tear_zero_writes: bool,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for (off, data) in cache {
        let keep = match loss {
            Loss::KeepAll => true,
            Loss::DropAll => false,
            Loss::Subset => rng.gen_bool(0.5),
        };
        if !keep {
            continue;
        }
        let o = off as usize;
        let tear = rng.gen_bool(0.5);
        if tear && (tear_zero_writes || data.iter().any(|&b| b != 0)) {
            // torn: each sector independently reached the media or not
            for (i, sector) in data.chunks(512).enumerate() {
                if rng.gen_bool(0.5) {
                    let so = o + i * 512;
                    img[so..so + sector.len()].copy_from_slice(sector);
                }
            }
        } else {
            img[o..o + data.len()].copy_from_slice(data);
        }
    }
}

impl Media for SimMedia {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        let s = self.st.lock();
        let n = buf.len();
        Self::current_range(&s, offset as usize, buf);
        for &f in s.flips.range(offset..offset + n as u64) {
            buf[(f - offset) as usize] ^= 1;
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        let mut s = self.st.lock();
        Self::start_op(&mut s)?;
        let w = s.writes;
        s.writes += 1;
        if s.fail_writes.contains(&w) {
            s.failed.push(offset);
            return Err(io::Error::other(format!("simulated EIO on write {w}")));
        }
        if let Some(l) = s.log.as_mut() {
            l.push(SimEvent::Write {
                offset,
                data: buf.to_vec(),
            });
        }
        Self::keep_prev(&mut s, offset as usize, buf.len());
        s.cache.push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let mut s = self.st.lock();
        Self::start_op(&mut s)?;
        let cache = std::mem::take(&mut s.cache);
        for (o, d) in cache {
            s.durable[o as usize..o as usize + d.len()].copy_from_slice(&d);
        }
        if let Some(l) = s.log.as_mut() {
            l.push(SimEvent::Flush);
        }
        drop(s);
        self.hold();
        Ok(())
    }
    /// A discard is one media operation, recorded and cached like a write
    /// (so prefix replay, power cuts and `fail_write` see it, and a power cut
    /// may lose or tear it): each 4 KiB block of the range then reads as
    /// zeros, keeps its bytes, or reads as the stale bytes it held before its
    /// last write (as some devices return after a discard), chosen per block
    /// from the operation number and the block (deterministic), so recovery
    /// meets every outcome a device allows.
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range(self.len, offset, len as usize)?;
        let mut s = self.st.lock();
        Self::start_op(&mut s)?;
        let op = s.ops;
        let w = s.writes;
        s.writes += 1;
        if s.fail_writes.contains(&w) {
            s.failed.push(offset);
            return Err(io::Error::other(format!(
                "simulated EIO on discard (write {w})"
            )));
        }
        let mut data = vec![0u8; len as usize];
        Self::current_range(&s, offset as usize, &mut data);
        for (i, b) in data.chunks_mut(4096).enumerate() {
            let blk = offset / 4096 + i as u64;
            let h = (op ^ blk).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
            match h % 3 {
                0 => b.fill(0),
                1 => {} // keeps its bytes
                _ => match s.prev.get(&blk) {
                    Some(old) if old.len() == b.len() => b.copy_from_slice(old),
                    _ => b.fill(0),
                },
            }
        }
        Self::keep_prev(&mut s, offset as usize, len as usize);
        if let Some(l) = s.log.as_mut() {
            l.push(SimEvent::Write {
                offset,
                data: data.clone(),
            });
        }
        s.cache.push((offset, data));
        s.discards += 1;
        Ok(true)
    }
    fn describe(&self) -> String {
        "simulated disk with a volatile write cache".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_makes_writes_durable_and_a_cut_loses_only_the_cache() {
        let m = SimMedia::new(8192);
        m.write_at(&[1u8; 4096], 0).unwrap();
        m.flush().unwrap();
        m.write_at(&[2u8; 4096], 4096).unwrap();
        let mut b = [0u8; 8192];
        m.read_at(&mut b, 0).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 1) && b[4096..].iter().all(|&x| x == 2));
        let img = m.crash_image(Loss::DropAll, 1);
        assert!(img[..4096].iter().all(|&x| x == 1) && img[4096..].iter().all(|&x| x == 0));
        m.cut_at_op(m.ops());
        assert!(m.write_at(&[3u8; 4096], 0).is_err());
        assert!(m.flush().is_err());
        assert!(m.is_power_off());
    }

    #[test]
    fn a_part_flushes_only_its_own_writes() {
        let m = std::sync::Arc::new(SimMedia::new(3 * 4096));
        let (a, b) = (m.part(0, 4096), m.part(4096, 8192));
        a.write_at(&[1u8; 4096], 0).unwrap();
        b.write_at(&[2u8; 4096], 4096).unwrap();
        b.flush().unwrap();
        let img = m.crash_image(Loss::DropAll, 1);
        assert!(
            img[..4096].iter().all(|&x| x == 0),
            "a's write was not flushed"
        );
        assert!(img[8192..].iter().all(|&x| x == 2), "b's was");
        assert!(
            b.write_at(&[0u8; 4096], 8192).is_err(),
            "inside its part only"
        );
        let mut r = [0u8; 4096];
        a.read_at(&mut r, 0).unwrap();
        assert_eq!(r, [1u8; 4096]);
    }

    #[test]
    fn torn_writes_mix_sectors() {
        // over many seeds a kept write is sometimes torn at a non-prefix subset
        let mut saw_gap = false;
        for seed in 0..64 {
            let mut img = vec![0u8; 4096];
            crash_apply(
                &mut img,
                [(0u64, &[9u8; 4096][..])].into_iter(),
                Loss::KeepAll,
                seed,
            );
            let s: Vec<bool> = img.chunks(512).map(|c| c[0] == 9).collect();
            saw_gap |= s.windows(2).any(|w| !w[0] && w[1]);
        }
        assert!(saw_gap);
    }
}
