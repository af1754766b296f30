//! FaultMedia: in-memory media that injects the failures a crash-safe engine must
//! survive: the Nth write fails, every write into a byte range fails, power is
//! cut after N writes, writes not covered by
//! a flush are dropped or reordered, the last write is torn at 512-byte granularity,
//! and bits flip on read.
//!
//! Invariant: `crash_image` only ever loses or tears writes issued after the last
//! completed flush; everything flushed is in every image it produces.

use super::{check_range, Media};
use parking_lot::Mutex;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::collections::BTreeSet;
use std::io;

/// What happens to unflushed writes at the simulated power loss.
#[derive(Debug, Clone, Copy)]
pub struct CrashPolicy {
    /// Drop each unflushed write with this probability (0.0 keeps all).
    pub drop_probability: f64,
    /// Tear the last surviving unflushed write at a random 512-byte boundary.
    pub tear_last: bool,
    pub seed: u64,
}

struct State {
    /// Content as of the last completed flush.
    durable: Vec<u8>,
    /// Content as the running system sees it.
    current: Vec<u8>,
    /// Writes since the last flush, in issue order.
    unflushed: Vec<(u64, Vec<u8>)>,
    writes: u64,
    /// Writes with index >= this fail and are not applied (power is off).
    cut_after: Option<u64>,
    /// This single write index fails (EIO) without being applied.
    fail_write: Option<u64>,
    /// Every write that overlaps this byte range fails (EIO), unapplied.
    fail_range: Option<std::ops::Range<u64>>,
    flip_on_read: BTreeSet<u64>,
}

pub struct FaultMedia {
    state: Mutex<State>,
}

impl FaultMedia {
    pub fn new(len: u64) -> FaultMedia {
        Self::from_image(vec![0u8; len as usize])
    }
    pub fn from_image(image: Vec<u8>) -> FaultMedia {
        FaultMedia {
            state: Mutex::new(State {
                durable: image.clone(),
                current: image,
                unflushed: Vec::new(),
                writes: 0,
                cut_after: None,
                fail_write: None,
                fail_range: None,
                flip_on_read: BTreeSet::new(),
            }),
        }
    }
    /// Power fails before write number `n` (0-based): it and all later writes fail.
    pub fn cut_power_after_writes(&self, n: u64) {
        self.state.lock().cut_after = Some(n);
    }
    /// Only write number `n` fails with EIO.
    pub fn fail_write(&self, n: u64) {
        self.state.lock().fail_write = Some(n);
    }
    /// From now on every write overlapping `range` fails with EIO, unapplied
    /// (a region of the media gone bad: e.g. the intent log ring); `None`
    /// heals it.
    pub fn fail_writes_in(&self, range: Option<std::ops::Range<u64>>) {
        self.state.lock().fail_range = range;
    }
    /// Flip bit 0 of the byte at `offset` whenever it is read.
    pub fn flip_on_read(&self, offset: u64) {
        self.state.lock().flip_on_read.insert(offset);
    }
    pub fn writes_issued(&self) -> u64 {
        self.state.lock().writes
    }
    pub fn is_power_cut(&self) -> bool {
        let s = self.state.lock();
        s.cut_after.is_some_and(|n| s.writes >= n)
    }
    /// The media content after a power loss now, under `policy`.
    pub fn crash_image(&self, policy: CrashPolicy) -> Vec<u8> {
        let s = self.state.lock();
        let mut rng = SmallRng::seed_from_u64(policy.seed);
        let mut image = s.durable.clone();
        let kept: Vec<&(u64, Vec<u8>)> = s
            .unflushed
            .iter()
            .filter(|_| !rng.gen_bool(policy.drop_probability.clamp(0.0, 1.0)))
            .collect();
        for (i, (off, data)) in kept.iter().enumerate() {
            let mut n = data.len();
            if policy.tear_last && i + 1 == kept.len() {
                n = rng.gen_range(0..=data.len() / 512) * 512;
            }
            image[*off as usize..*off as usize + n].copy_from_slice(&data[..n]);
        }
        image
    }
    /// The content the running system sees (no loss).
    pub fn current_image(&self) -> Vec<u8> {
        self.state.lock().current.clone()
    }
}

impl Media for FaultMedia {
    fn len(&self) -> u64 {
        self.state.lock().current.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let s = self.state.lock();
        check_range(s.current.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&s.current[offset as usize..offset as usize + buf.len()]);
        for &f in s.flip_on_read.range(offset..offset + buf.len() as u64) {
            buf[(f - offset) as usize] ^= 1;
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        check_range(s.current.len() as u64, offset, buf.len())?;
        let index = s.writes;
        s.writes += 1;
        let end = offset + buf.len() as u64;
        let in_bad_range = s
            .fail_range
            .as_ref()
            .is_some_and(|r| offset < r.end && r.start < end);
        if s.cut_after.is_some_and(|n| index >= n) || s.fail_write == Some(index) || in_bad_range {
            return Err(io::Error::other(format!(
                "injected failure of write {index}"
            )));
        }
        s.current[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        s.unflushed.push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.cut_after.is_some_and(|n| s.writes >= n) {
            return Err(io::Error::other("injected power loss: flush failed"));
        }
        let pending = std::mem::take(&mut s.unflushed);
        for (off, data) in pending {
            s.durable[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
    /// The range reads as zeros at once; like a write, the zeroing is lost at
    /// a power cut unless a flush followed (`crash_image` may drop it). Not
    /// counted as a write (`fail_write` numbers stay those of real writes).
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        let mut s = self.state.lock();
        check_range(s.current.len() as u64, offset, len as usize)?;
        if s.cut_after.is_some_and(|n| s.writes >= n) {
            return Err(io::Error::other("injected power loss: discard failed"));
        }
        let (o, n) = (offset as usize, len as usize);
        s.current[o..o + n].fill(0);
        s.unflushed.push((offset, vec![0u8; n]));
        Ok(true)
    }
    fn describe(&self) -> String {
        "fault-injecting memory".into()
    }
}
