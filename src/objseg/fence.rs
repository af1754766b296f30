//! Fencing a superseded writer that is still alive (issue 21;
//! docs/objects.md §5.6). Owns both sides of a takeover:
//!
//! - the writer's `LeaseClock`: every mutation of the store (segment
//!   upload, delete, checkpoint object, FLUSH log object) is sent only
//!   within T/2 of the start of a lease check (`Lease::check`, one HEAD of
//!   `epoch/E+1`) that found no newer epoch; once a check finds one, or a
//!   log object's conditional create meets a fence, the writer is
//!   superseded for good: no uploads, no deletes, every FLUSH and write
//!   fails. `FlushGate` is the local-log mode's media: its `flush` answers
//!   only while the clock is not superseded.
//! - the taker's `take_over`: after creating its epoch, it fences the FLUSH
//!   log of every earlier unreleased epoch (a fence object under the lowest
//!   `log/L-E` the old writer may still put: a gap just below its newest
//!   object, where a PUT of its several in flight has not landed, else the
//!   next free number; the old writer's PUT of L gets `Exists`, so it can
//!   never acknowledge a FLUSH past what the taker replays; the fence is
//!   checked against the old writer's objects above it, and put again
//!   above them when the writer moved on past a number it then trimmed,
//!   `fence_log`), then waits 2T
//!   (T: the longer of the old writer's term and its own) before it lists
//!   anything, so every mutation the old writer sent under a fresh check
//!   has landed (or failed) by then.
//!
//! Invariants: a FLUSH in the store-durable mode is acknowledged only if
//! its log object's create returned Ok, which (conditional create) means it
//! is below the taker's last fence, which the taker's replay reads up to,
//! and only under a fresh lease check (`durable::ObjLog::answer_gate`), so
//! its object was stored before the taker lists; no
//! store mutation is sent more than T/2 after a check that saw no newer
//! epoch, so none is sent after the taker's epoch exists + T/2, and the
//! taker lists only 2T after it.

use super::durable::MAX_PUTS_IN_FLIGHT;
use super::io_err;
use crate::format::objlog::{encode_fence, fence_by};
use crate::format::objname::{ObjKind, ObjName};
use crate::lease::{self, Lease, LeaseError};
use crate::media::objects::{ObjError, ObjectStore};
use crate::media::{Media, UringReads};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A writer's view of its lease (see the module doc).
pub struct LeaseClock {
    lease: Lease,
    objects: Arc<dyn ObjectStore>,
    /// When the last check that found no newer epoch started.
    ok_at: Mutex<Option<Instant>>,
    /// When the last check was tried (the FLUSH gate tries at most one a
    /// half term while the store does not answer).
    tried_at: Mutex<Option<Instant>>,
    superseded: Mutex<Option<String>>,
    /// Lease checks sent (HEADs).
    pub checks: AtomicU64,
}

impl LeaseClock {
    pub fn new(lease: Lease, objects: Arc<dyn ObjectStore>) -> Arc<LeaseClock> {
        Arc::new(LeaseClock {
            lease,
            objects,
            ok_at: Mutex::new(None),
            tried_at: Mutex::new(None),
            superseded: Mutex::new(None),
            checks: AtomicU64::new(0),
        })
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Why this writer is superseded, once it is.
    pub fn superseded(&self) -> Option<String> {
        self.superseded.lock().clone()
    }

    /// This writer is superseded (`why`): from now on every mutation of
    /// the store and every FLUSH fails.
    pub fn supersede(&self, why: String) {
        let mut s = self.superseded.lock();
        if s.is_none() {
            tracing::error!(
                "{}: epoch {} is superseded ({why}): no more uploads, deletes or FLUSHes; the volume is read-only",
                self.objects.describe(),
                self.lease.epoch
            );
            *s = Some(why);
        }
    }

    fn superseded_err(&self) -> Option<io::Error> {
        self.superseded().map(|why| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{}: epoch {} is superseded by a takeover ({why}): the volume is read-only here",
                    self.objects.describe(),
                    self.lease.epoch
                ),
            )
        })
    }

    /// Ok only while a lease check that started less than T/2 ago found
    /// no newer epoch (one is run when the last is older). Err: superseded
    /// (for good), or the store did not answer the check.
    pub fn fresh(&self) -> io::Result<()> {
        if let Some(e) = self.superseded_err() {
            return Err(e);
        }
        let mut ok = self.ok_at.lock();
        let half = self.lease.term() / 2;
        if ok.is_some_and(|t| t.elapsed() < half) {
            return Ok(());
        }
        let start = Instant::now();
        *self.tried_at.lock() = Some(start);
        self.checks.fetch_add(1, Ordering::Relaxed);
        match self.lease.check(&*self.objects) {
            Ok(()) => {
                *ok = Some(start);
                Ok(())
            }
            Err(e @ LeaseError::Superseded { .. }) => {
                drop(ok);
                self.supersede(e.to_string());
                Err(self.superseded_err().expect("set above"))
            }
            Err(e) => Err(io_err(format!(
                "{}: lease check of epoch {}: {e}",
                self.objects.describe(),
                self.lease.epoch
            ))),
        }
    }

    /// The local-log mode's FLUSH: Err once superseded; a check is run when
    /// the last good one is older than T/2 (at most one try a half term
    /// while the store does not answer: a FLUSH is durable in the local
    /// file, and a store that is down must not stop it, §5.3).
    pub fn gate_flush(&self) -> io::Result<()> {
        if let Some(e) = self.superseded_err() {
            return Err(e);
        }
        let half = self.lease.term() / 2;
        let stale = self.ok_at.lock().is_none_or(|t| t.elapsed() >= half);
        let tried = self.tried_at.lock().is_some_and(|t| t.elapsed() < half);
        if stale && !tried {
            if let Err(e) = self.fresh() {
                if self.superseded().is_some() {
                    return Err(e);
                }
                tracing::warn!(
                    "{e}; the FLUSH is durable locally, the lease is checked again later"
                );
            }
        }
        Ok(())
    }

    /// Tests: as if a lease check that found no newer epoch had just
    /// started (the interleaving where the old writer's check came right
    /// before the taker's create, which wall-clock timing cannot force).
    #[cfg(test)]
    pub fn assume_checked_now(&self) {
        *self.ok_at.lock() = Some(Instant::now());
    }

    /// Writes to the local file stop once superseded.
    pub fn gate_write(&self) -> io::Result<()> {
        match self.superseded_err() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The local metadata file in the local-log mode: a FLUSH is answered only
/// while the writer is not superseded (`LeaseClock::gate_flush`).
pub struct FlushGate {
    pub inner: Arc<dyn Media>,
    pub clock: Arc<LeaseClock>,
}

impl Media for FlushGate {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        self.inner.read_batch(reads)
    }
    fn uring_reads(&self, entries: u32) -> Option<io::Result<UringReads>> {
        self.inner.uring_reads(entries)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.clock.gate_write()?;
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()?;
        // MUTANT: flush-gate-skipped s|self.clock.gate_flush()|Ok::<(), io::Error>(())|
        self.clock.gate_flush()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn size_now(&self) -> io::Result<u64> {
        self.inner.size_now()
    }
    fn allocate(&self, ranges: &[(u64, u64)]) -> io::Result<()> {
        self.inner.allocate(ranges)
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        self.inner.discard(offset, len)
    }
}

/// What `take_over` did.
#[derive(Debug, Clone, Default)]
pub struct TakeOver {
    /// (epoch, the log number its fence took).
    pub fenced: Vec<(u64, u64)>,
    /// How long it waited before listing.
    pub waited: Duration,
}

/// Fence the FLUSH log of epoch `epoch` for `by`: a fence object at a
/// number L the old writer never stored and never will, above every
/// object it has stored. Returns L.
///
/// One round (`fence_round`) lists `log/` and puts the fence at the lowest
/// candidate (below). The old writer may have moved on between that
/// listing and the fence's create: landed a PUT the listing lacked, stored
/// many more objects and trimmed the one the fence then took, so the fence
/// sits at a deleted number *below* its live chain, where it blocks
/// nothing (docs/objects.md §5.6, interleaving 6). So after each create at
/// L the round is checked: the old writer's object at L + 1 is asked for by
/// name (G2), and `log/` is listed again; any object of its above L (a
/// fence aside) means another round, whose candidates are all above L.
/// Rounds end once the old writer stops putting, within T/2 of our epoch
/// by its lease check. A trimmed number below the chain holds a fence
/// then, which replay passes over (`durable::replay`: a fence before the
/// chain's first object ends nothing).
pub fn fence_log(objects: &dyn ObjectStore, epoch: u64, by: &Lease) -> io::Result<u64> {
    let mut above: Option<u64> = None;
    for _ in 0..10_000 {
        let l = fence_round(objects, epoch, by, above)?;
        // MUTANT: fence-recheck-skipped s|if !old_writer_above(objects, epoch, l)? {|if true {|
        if !old_writer_above(objects, epoch, l)? {
            return Ok(l);
        }
        tracing::warn!(
            "{}: the fence at log/{l} of epoch {epoch} is below an object its writer stored (it moved on after the listing): fencing again above it",
            objects.describe()
        );
        above = Some(l);
    }
    Err(io_err(format!(
        "{}: could not fence the FLUSH log of epoch {epoch}: its writer keeps moving past the fence",
        objects.describe()
    )))
}

/// Does epoch `epoch` hold an object above `l` that is not a fence? Asks
/// for `l + 1` by name first (a GET sees every create that returned
/// before it, G2), then lists (a writer that trimmed `l` kept its newest
/// `MAX_PUTS_IN_FLIGHT` objects, all above `l`).
fn old_writer_above(objects: &dyn ObjectStore, epoch: u64, l: u64) -> io::Result<bool> {
    let is_old_writers = |seq: u64| -> io::Result<bool> {
        let name = ObjName::Log { seq, epoch }.encode();
        match objects.get(&name) {
            Ok(b) => Ok(fence_by(&b).is_none()),
            Err(ObjError::NotFound(_)) => Ok(false),
            Err(e) => Err(io_err(format!("{name}: {e}"))),
        }
    };
    if is_old_writers(l + 1)? {
        return Ok(true);
    }
    let mut listed: Vec<u64> = Vec::new();
    for o in objects.list(ObjKind::Log.dir()).map_err(io_err)? {
        if let Ok(ObjName::Log { seq, epoch: e }) = ObjName::parse(&o.name) {
            if e == epoch && seq > l + 1 {
                listed.push(seq);
            }
        }
    }
    // newest first: a live writer's newest objects are never fences
    for seq in listed.into_iter().rev() {
        if is_old_writers(seq)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One round of `fence_log`: a fence under the lowest number the old
/// writer may still put, as one listing shows it, above `above` (the
/// fence of the round before, if any). The old writer has at most
/// `MAX_PUTS_IN_FLIGHT` (M) log PUTs in flight, sent only within M of its
/// lowest object not stored, and always keeps its newest M stored objects
/// (`durable.rs`). So with N the newest listed object of the epoch, every
/// number up to N - M is stored (or trimmed behind a checkpoint), and a
/// number in N-M+1..=N that the listing lacks is a PUT that may still
/// land (or, the writer having moved on since the listing, a trimmed
/// object: `fence_log`'s check): the candidates are those numbers, lowest
/// first, then N+1 and up. Each `Exists` is the old writer's object (it
/// landed after the listing): the next candidate is tried. A fence already
/// there (an earlier taker's) among the candidates is kept.
fn fence_round(
    objects: &dyn ObjectStore,
    epoch: u64,
    by: &Lease,
    above: Option<u64>,
) -> io::Result<u64> {
    let mut listed = std::collections::BTreeSet::new();
    for o in objects.list(ObjKind::Log.dir()).map_err(io_err)? {
        if let Ok(ObjName::Log { seq, epoch: e }) = ObjName::parse(&o.name) {
            if e == epoch && above.is_none_or(|a| seq > a) {
                listed.insert(seq);
            }
        }
    }
    let m = MAX_PUTS_IN_FLIGHT as u64;
    let floor = above.map_or(0, |a| a + 1);
    let (mut candidates, mut l): (Vec<u64>, u64) = match listed.last() {
        Some(&n) => {
            let low = (n + 1).saturating_sub(m).max(floor);
            for &i in listed.range(low..=n) {
                let name = ObjName::Log { seq: i, epoch }.encode();
                match objects.get(&name) {
                    Ok(b) if fence_by(&b).is_some() => return Ok(i),
                    Ok(_) | Err(ObjError::NotFound(_)) => {}
                    Err(e) => return Err(io_err(format!("{name}: {e}"))),
                }
            }
            // MUTANT: fence-ignores-gaps s|(low..=n)|(n + 1..=n)|
            let gaps = (low..=n).filter(|i| !listed.contains(i)).collect();
            (gaps, n + 1)
        }
        None => (Vec::new(), floor),
    };
    candidates.reverse();
    let bytes = encode_fence(epoch, by.epoch, by.holder.nonce);
    for _ in 0..100_000 {
        let at = candidates.pop().unwrap_or(l);
        let name = ObjName::Log { seq: at, epoch }.encode();
        match objects.put_new(&name, &bytes) {
            Ok(()) => return Ok(at),
            Err(ObjError::Exists(_)) if at == l => l += 1,
            Err(ObjError::Exists(_)) => {}
            Err(e) => return Err(io_err(format!("fencing {name}: {e}"))),
        }
    }
    Err(io_err(format!(
        "{}: could not fence the FLUSH log of epoch {epoch}: its writer keeps putting log objects",
        objects.describe()
    )))
}

/// The taker's side, right after it created its epoch and before it lists
/// anything (see the module doc). `own_crash`: the epoch before ours was
/// this cache's own writer, which is gone (we hold its local volume
/// lock): fenced all the same, no wait.
pub fn take_over(objects: &dyn ObjectStore, mine: &Lease, own_crash: bool) -> io::Result<TakeOver> {
    let released: std::collections::HashSet<u64> = objects
        .list(ObjKind::Release.dir())
        .map_err(io_err)?
        .into_iter()
        .filter_map(|o| match ObjName::parse(&o.name) {
            Ok(ObjName::Release(e)) => Some(e),
            _ => None,
        })
        .collect();
    let mut out = TakeOver::default();
    let mut term = mine.term();
    for e in lease::epochs(objects).map_err(io_err)? {
        if e >= mine.epoch || released.contains(&e) {
            continue;
        }
        // MUTANT: fence-skipped s|let l = fence_log(objects, e, mine)?;|let l = 0;|
        let l = fence_log(objects, e, mine)?;
        out.fenced.push((e, l));
        let h = lease::holder_of(objects, e).map_err(io_err)?;
        term = term.max(Duration::from_millis(h.term_ms));
    }
    if !own_crash && !out.fenced.is_empty() {
        out.waited = term * 2;
        tracing::info!(
            "{}: epoch {} took over: waiting {:?} (2T) before listing, so the old writer's last sends have landed",
            objects.describe(),
            mine.epoch,
            out.waited
        );
        std::thread::sleep(out.waited);
    }
    Ok(out)
}
