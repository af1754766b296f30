//! The store-durable mode (durable.rs) on MemObjects: a whole engine writes
//! on host A (MemMedia: its local disk), the store is copied as it is at
//! chosen moments (host A vanishing then, its disk with it), and host B
//! rebuilds its cache directory from each copy, mounts and reads back:
//! every write a FLUSH acknowledged. The same against a real server and
//! processes: tests/objects_volume.rs.

use super::tests_recover::{assert_prefix, wblock};
use super::*;
use crate::media::objects::MemObjects;
use crate::media::{FileMedia, MemMedia};
use crate::{CreateOptions, OpenOptions, StoreHandle, Volume};
use std::sync::atomic::AtomicBool;

const SEG: u64 = 16 * BS;

fn inline() -> ObjSegOptions {
    ObjSegOptions {
        uploads: 0,
        cache_segments: 2,
        retry_max: Duration::from_millis(20),
        close_wait: Duration::from_secs(5),
        ckpt_every: 1,
        ..ObjSegOptions::default()
    }
}

struct HostA {
    objects: Arc<MemObjects>,
    store: Arc<ObjSegStore>,
    vol: Arc<Volume>,
    _dir: tempfile::TempDir,
    blocks: u64,
    history: Vec<u64>,
    x: u64,
}

impl HostA {
    fn new(seed: u64) -> HostA {
        HostA::on(seed, None)
    }

    /// Host A whose store requests go through `view` (a hooked store over
    /// `objects`), or straight to a fresh MemObjects.
    fn on(seed: u64, view: Option<(Arc<MemObjects>, Arc<dyn ObjectStore>)>) -> HostA {
        let media: Arc<dyn Media> = Arc::new(MemMedia::new(4 << 20));
        Volume::format(
            &*media,
            &CreateOptions {
                segment_bytes: SEG,
                ..CreateOptions::default()
            },
        )
        .unwrap();
        let (objects, view) = match view {
            Some(v) => v,
            None => {
                let o = Arc::new(MemObjects::new());
                (o.clone(), o as Arc<dyn ObjectStore>)
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let store = create_in_mode(
            media,
            Place {
                objects: view,
                dir: dir.path(),
                takeover: false,
                opts: inline(),
            },
            false,
            true,
        )
        .unwrap()
        .0;
        assert!(store.flush_log().is_some(), "the mode is on");
        let vol = Arc::new(
            Volume::open(
                store.media(),
                &OpenOptions {
                    background: false,
                    store: Some(StoreHandle(store.clone())),
                    checkpoint_interval_bytes: Some(8 * SEG),
                    ..OpenOptions::default()
                },
            )
            .unwrap(),
        );
        // what `serve` does before it answers a FLUSH
        vol.checkpoint().unwrap();
        store.checkpoint_now().unwrap();
        let blocks = vol.stats().logical_bytes / BS;
        HostA {
            objects,
            store,
            vol,
            _dir: dir,
            blocks,
            history: Vec::new(),
            x: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        }
    }

    fn write_one(&mut self) -> crate::Result<()> {
        let x = &mut self.x;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let lba = if x.is_multiple_of(3) {
            *x % self.blocks
        } else {
            (*x >> 8) % (self.blocks / 10)
        };
        self.history.push(lba);
        let i = self.history.len() as u64;
        self.vol.write(lba * BS, &wblock(lba, i), false)
    }

    /// `n` writes, a FLUSH every `every` and at the end.
    fn write(&mut self, n: usize, every: usize) {
        for k in 0..n {
            self.write_one().unwrap();
            if k % every == every - 1 {
                self.vol.flush().unwrap();
            }
        }
        self.vol.flush().unwrap();
    }
}

/// Host B: rebuild `dir` from `objects`, attach, mount.
fn host_b(objects: Arc<MemObjects>, dir: &Path) -> (recover::Restored, Arc<ObjSegStore>, Volume) {
    let r = recover::restore(&*objects, dir, true).unwrap();
    let file: Arc<dyn Media> = Arc::new(FileMedia::open(&dir.join("volume"), false).unwrap());
    let s = open(
        file,
        Place {
            objects,
            dir,
            takeover: false,
            opts: inline(),
        },
    )
    .unwrap()
    .0;
    assert!(
        s.flush_log().is_some(),
        "the restored volume keeps the mode"
    );
    let vol = Volume::open(
        s.media(),
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(s.clone())),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    (r, s, vol)
}

fn log_objects(o: &MemObjects) -> Vec<String> {
    o.list(ObjKind::Log.dir())
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect()
}

#[test]
fn every_acknowledged_flush_survives_the_loss_of_the_host_with_gc_running() {
    every_acknowledged_flush_survives(0);
}

/// The same with every FLUSH group's log cut into pieces of at most 20 KiB,
/// put at once (`ObjLog::set_piece_bytes`; RADOS: 60 KiB, docs/objects.md
/// §4.6): each piece carries its own first record number and the chain.
#[test]
fn every_acknowledged_flush_survives_with_the_log_put_in_pieces() {
    every_acknowledged_flush_survives(20 << 10);
}

fn every_acknowledged_flush_survives(piece: usize) {
    let mut a = HostA::new(3);
    a.store.flush_log().unwrap().set_piece_bytes(piece);
    let mut copies = Vec::new();
    for round in 0..18usize {
        // FLUSHes at varied spacing; GC and checkpoints run in between
        a.write(250, 1 + round % 7 * 5);
        copies.push((a.history.len(), a.objects.snapshot()));
    }
    let log = a.store.flush_log().unwrap();
    let put = log.stats.objects_put.load(Ordering::Relaxed);
    if piece > 0 {
        assert!(
            log.stats.most_in_flight.load(Ordering::Relaxed) >= 2,
            "no FLUSH group was put in pieces"
        );
    }
    let left = log_objects(&a.objects).len() as u64;
    assert!(a.store.stats().checkpoints_stored.load(Ordering::Relaxed) >= 4);
    // deleted behind the checkpoint objects: far fewer than were put
    assert!(
        left * 4 < put,
        "{left} log objects left of {put} put: the log is not trimmed"
    );
    for (n, (acked, copy)) in copies.into_iter().enumerate().skip(1).step_by(3) {
        if n % 2 == 0 {
            // the newest checkpoint object damaged: host B falls back to
            // the one before it, whose log is kept too
            let cks = copy.list(ObjKind::Checkpoint.dir()).unwrap();
            assert_eq!(cks.len(), 2, "{cks:?}");
            let mut b = copy.get(&cks[1].name).unwrap();
            b[100] ^= 1;
            copy.poke(&cks[1].name, b);
        }
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(copy), dir.path());
        let l = r.log.clone().expect("a store-durable checkpoint object");
        assert_eq!(r.notes.len(), (n + 1) % 2, "{r:?}");
        let k = assert_prefix(&vol, &a.history, a.blocks);
        assert_eq!(
            k as usize, acked,
            "host B lost acknowledged writes ({r:?}); the log replay: {l:?}"
        );
    }
}

#[test]
fn a_flush_whose_log_put_never_returned_is_not_acknowledged_and_loses_nothing_before_it() {
    let mut a = HostA::new(11);
    a.write(300, 9);
    let acked = a.history.len();
    a.objects.set_unreachable(true);
    a.store
        .flush_log()
        .unwrap()
        .set_put_timeout(Duration::from_millis(100));
    let mut failed = false;
    for k in 0..40 {
        let w = a.write_one();
        let f = if k % 8 == 7 { a.vol.flush() } else { Ok(()) };
        if w.is_err() || f.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "a FLUSH was answered while the store was down");
    // the host vanishes now: the store holds what it acknowledged
    let copy = a.objects.snapshot();
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b(Arc::new(copy), dir.path());
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert_eq!(k as usize, acked, "{r:?}");
}

#[test]
fn a_missing_log_object_ends_the_replay_there() {
    let mut a = HostA::new(5);
    // three FLUSHes of two writes each: no segment fills, no checkpoint
    // object is taken, each FLUSH's writes are only in its log object
    let before = log_objects(&a.objects);
    let mut phases = Vec::new();
    for _ in 0..3 {
        a.write(2, 2);
        phases.push(log_objects(&a.objects));
    }
    let ck = a.store.stats().checkpoints_stored.load(Ordering::Relaxed);
    assert_eq!(ck, 1, "only the epoch's first checkpoint object");
    let second: Vec<&String> = phases[1]
        .iter()
        .filter(|n| !phases[0].contains(n))
        .collect();
    assert!(!second.is_empty(), "{before:?} {phases:?}");
    let copy = a.objects.snapshot();
    copy.delete(second[0]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b(Arc::new(copy), dir.path());
    let l = r.log.clone().unwrap();
    // host B (a taker: A's epoch is not released) reads a gap just below
    // the newest object as a PUT that may still land, and fences it
    // (fence.rs): the replay ends there either way
    assert!(
        l.stop.contains("missing")
            || l.stop.starts_with(second[0].as_str()) && l.fenced_by.is_some(),
        "{l:?}"
    );
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert_eq!(k, 2, "the first FLUSH's writes and nothing after the gap");
    // without the gap: all six
    let dir = tempfile::tempdir().unwrap();
    let (_r, _s, vol) = host_b(Arc::new(a.objects.snapshot()), dir.path());
    assert_eq!(assert_prefix(&vol, &a.history, a.blocks), 6);
}

/// Host B over any store (a hooked one below): rebuild, attach, mount.
fn host_b_on(
    objects: Arc<dyn ObjectStore>,
    dir: &Path,
) -> (recover::Restored, Arc<ObjSegStore>, Volume) {
    let r = recover::restore(&*objects, dir, true).unwrap();
    let file: Arc<dyn Media> = Arc::new(FileMedia::open(&dir.join("volume"), false).unwrap());
    let s = open(
        file,
        Place {
            objects,
            dir,
            takeover: false,
            opts: inline(),
        },
    )
    .unwrap()
    .0;
    let vol = Volume::open(
        s.media(),
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(s.clone())),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    (r, s, vol)
}

/// Host B's view of the shared store: the first listing of `log/` (the
/// taker's fence looking for the old epoch's newest log object) runs `hook`
/// right after it answered, i.e. host A's log PUT lands after B listed.
struct AfterLogListing {
    inner: Arc<MemObjects>,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl ObjectStore for AfterLogListing {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        self.inner.put_new(name, bytes)
    }
    fn get_range(&self, n: &str, r: std::ops::Range<u64>) -> Result<Vec<u8>, ObjError> {
        self.inner.get_range(n, r)
    }
    fn get(&self, n: &str) -> Result<Vec<u8>, ObjError> {
        self.inner.get(n)
    }
    fn head(&self, n: &str) -> Result<u64, ObjError> {
        self.inner.head(n)
    }
    fn list(&self, p: &str) -> Result<Vec<crate::media::objects::ObjectInfo>, ObjError> {
        let out = self.inner.list(p);
        if p == ObjKind::Log.dir() {
            if let Some(h) = self.hook.lock().take() {
                h();
            }
        }
        out
    }
    fn delete(&self, n: &str) -> Result<(), ObjError> {
        self.inner.delete(n)
    }
    fn describe(&self) -> String {
        "after-log-listing".into()
    }
}

/// §5.6, the exact interleaving: host A (alive, its last lease check just
/// before B's create) puts a log object and answers its FLUSH after host B
/// took the next epoch and listed `log/`. B's fence lands on the next
/// number, so B replays A's object (every FLUSH A answered is on B), and
/// A's next log PUT meets the fence: its FLUSH fails, and so does every
/// write and FLUSH after it; A uploads nothing more.
#[test]
fn a_log_put_landing_after_the_takers_listing_is_replayed_and_the_next_is_fenced() {
    let a = Arc::new(Mutex::new(HostA::new(41)));
    a.lock().write(120, 5);
    let epoch_a = a.lock().store.epoch();
    // written, not yet flushed: the hook's FLUSH puts them
    for _ in 0..6 {
        a.lock().write_one().unwrap();
    }
    let objects = a.lock().objects.clone();
    let hooked_flush = Arc::new(Mutex::new(None));
    let b_store = Arc::new(AfterLogListing {
        inner: objects.clone(),
        hook: Mutex::new(Some(Box::new({
            let (a, out) = (a.clone(), hooked_flush.clone());
            move || {
                let a = a.lock();
                // A's lease check came just before B's create
                a.store.lease_clock().assume_checked_now();
                *out.lock() = Some((a.vol.flush().is_ok(), a.history.len()));
            }
        }))),
    });
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b_on(b_store, dir.path());
    let (ok, acked) = hooked_flush.lock().take().expect("the hook ran");
    assert!(
        ok,
        "A's FLUSH before the fence must succeed (its PUT landed first)"
    );
    let mut a = a.lock();
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert_eq!(
        k as usize, acked,
        "host B must hold every write A's FLUSH acknowledged, A's log PUT landing after B's listing included ({r:?})"
    );
    // A, still alive and with a fresh check: its next log PUT meets the
    // fence, and nothing it does from then on is answered
    a.store.lease_clock().assume_checked_now();
    a.write_one().unwrap();
    let e = a
        .vol
        .flush()
        .expect_err("a superseded writer answered a FLUSH");
    assert!(
        a.store
            .lease_clock()
            .superseded()
            .is_some_and(|w| w.contains("fenced")),
        "{e}"
    );
    assert!(a.write_one().is_err() || a.vol.flush().is_err());
    let ours = |o: &MemObjects| {
        o.list("")
            .unwrap()
            .into_iter()
            .filter(|i| matches!(ObjName::parse(&i.name), Ok(n) if n.epoch() == epoch_a && !matches!(n, ObjName::Epoch(_))))
            .count()
    };
    let before = ours(&objects);
    for _ in 0..40 {
        let _ = a.write_one();
    }
    let _ = a.vol.flush();
    a.store.wait_idle(Duration::from_secs(1));
    assert!(ours(&objects) <= before, "a fenced writer stored objects");
    let l = r.log.clone().unwrap();
    assert!(l.fenced_by.is_some(), "B's replay ends at its fence: {l:?}");
}

/// §5.6 without the hook: B takes over while A is idle; A's next FLUSH
/// runs a lease check (its last is older than T/2: B waited 2T), finds
/// B's epoch and fails; in the local-log mode the same (the FlushGate).
#[test]
fn a_superseded_writer_fails_its_next_flush_in_both_modes() {
    let mut a = HostA::new(43);
    a.write(100, 4);
    let acked = a.history.len();
    let dir = tempfile::tempdir().unwrap();
    let (_r, _s, vol) = host_b(a.objects.clone(), dir.path());
    assert!(assert_prefix(&vol, &a.history, a.blocks) as usize >= acked);
    a.write_one().unwrap_or(());
    assert!(
        a.vol.flush().is_err(),
        "store-durable: a superseded writer answered a FLUSH"
    );
    assert!(a.store.lease_clock().superseded().is_some());

    // the local-log mode: A's FLUSH is durable locally, and answered only
    // while its lease is not superseded
    let (objects, _store, vol_a, _d) = local_host();
    vol_a.write(0, &wblock(0, 1), false).unwrap();
    vol_a.flush().unwrap();
    // B takes the next epoch (what a restore's takeover does first)
    let b = lease::take(&*objects, &Holder::this_process(), true).unwrap();
    std::thread::sleep(b.term() * 2);
    vol_a.write(BS, &wblock(1, 2), false).unwrap();
    let e = vol_a
        .flush()
        .expect_err("local-log mode: a superseded writer answered a FLUSH");
    assert!(e.to_string().contains("superseded"), "{e}");

    // and another local-log writer that never FLUSHes after the takeover:
    // its segments fill, and their uploads are sent only under a fresh
    // lease check, which finds B's epoch
    let (objects, store, vol_a, _d) = local_host();
    vol_a.write(0, &wblock(0, 1), false).unwrap();
    vol_a.flush().unwrap();
    let b = lease::take(&*objects, &Holder::this_process(), true).unwrap();
    std::thread::sleep(b.term() * 2);
    let segs = |o: &MemObjects| o.list(ObjKind::Segment.dir()).unwrap().len();
    let before = segs(&objects);
    for i in 0..64u64 {
        if vol_a
            .write((i + 2) * BS, &wblock(i + 2, i + 2), false)
            .is_err()
        {
            break;
        }
    }
    store.wait_idle(Duration::from_millis(500));
    assert_eq!(
        segs(&objects),
        before,
        "a superseded writer uploaded segments"
    );
}

/// A volume in the local-log mode on MemObjects (inline uploads).
fn local_host() -> (Arc<MemObjects>, Arc<ObjSegStore>, Volume, tempfile::TempDir) {
    let media: Arc<dyn Media> = Arc::new(MemMedia::new(4 << 20));
    Volume::format(
        &*media,
        &CreateOptions {
            segment_bytes: SEG,
            ..CreateOptions::default()
        },
    )
    .unwrap();
    let objects = Arc::new(MemObjects::new());
    let dir = tempfile::tempdir().unwrap();
    let store = create_in_mode(
        media,
        Place {
            objects: objects.clone(),
            dir: dir.path(),
            takeover: false,
            opts: inline(),
        },
        false,
        false,
    )
    .unwrap()
    .0;
    let vol = Volume::open(
        store.media(),
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(store.clone())),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    (objects, store, vol, dir)
}

/// Host A's view of the store: the PUT of the log object of epoch 1 named
/// `held` waits until `release` (a PUT delayed on the wire, sent under a
/// fresh lease check), and a GET of it by anyone runs `on_get` first
/// (another host reading it while the PUT is still out).
struct HeldLogPut {
    inner: Arc<MemObjects>,
    held: Mutex<Option<String>>,
    /// The held PUT has arrived and waits.
    arrived: AtomicBool,
    released: Mutex<bool>,
    cv: Condvar,
    on_get: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Host A's lease checks do not see a newer epoch yet (its last check
    /// was served just before the taker's create: every step of A's below
    /// falls within T/2 of it, which wall-clock timing cannot force).
    blind: AtomicBool,
}

impl HeldLogPut {
    fn new(inner: Arc<MemObjects>) -> Arc<HeldLogPut> {
        Arc::new(HeldLogPut {
            inner,
            held: Mutex::new(None),
            arrived: AtomicBool::new(false),
            released: Mutex::new(false),
            cv: Condvar::new(),
            on_get: Mutex::new(None),
            blind: AtomicBool::new(false),
        })
    }
    fn hold(&self, index: u64) {
        *self.held.lock() = Some(
            ObjName::Log {
                seq: index,
                epoch: 1,
            }
            .encode(),
        );
    }
    fn release(&self) {
        *self.released.lock() = true;
        self.cv.notify_all();
    }
}

impl ObjectStore for HeldLogPut {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        // only the first PUT of the name (host A's) is held
        if self.held.lock().as_deref() == Some(name) && !self.arrived.swap(true, Ordering::SeqCst) {
            let mut r = self.released.lock();
            while !*r {
                self.cv.wait(&mut r);
            }
        }
        self.inner.put_new(name, bytes)
    }
    fn get_range(&self, n: &str, r: std::ops::Range<u64>) -> Result<Vec<u8>, ObjError> {
        self.inner.get_range(n, r)
    }
    fn get(&self, n: &str) -> Result<Vec<u8>, ObjError> {
        let out = self.inner.get(n);
        if self.held.lock().as_deref() == Some(n) {
            if let Some(h) = self.on_get.lock().take() {
                h();
            }
        }
        out
    }
    fn head(&self, n: &str) -> Result<u64, ObjError> {
        if self.blind.load(Ordering::SeqCst)
            && matches!(ObjName::parse(n), Ok(ObjName::Epoch(e)) if e > 1)
        {
            return Err(ObjError::NotFound(n.into()));
        }
        self.inner.head(n)
    }
    fn list(&self, p: &str) -> Result<Vec<crate::media::objects::ObjectInfo>, ObjError> {
        self.inner.list(p)
    }
    fn delete(&self, n: &str) -> Result<(), ObjError> {
        self.inner.delete(n)
    }
    fn describe(&self) -> String {
        "held-log-put".into()
    }
}

/// The next log object number host A will seal (its epoch's objects so far).
fn next_log_index(o: &MemObjects) -> u64 {
    log_objects(o)
        .iter()
        .filter_map(|n| match ObjName::parse(n) {
            Ok(ObjName::Log { seq, epoch: 1 }) => Some(seq + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Host A with log PUT `n` held on the wire: one thread's FLUSH waits in
/// it; a second thread's FLUSH starts beside it (several PUTs in flight)
/// and its object n+1 is stored first. Returns the two FLUSHes' results
/// (None while unanswered) and the history length each covers.
#[allow(clippy::type_complexity)]
fn two_flushes_with_the_first_put_held(
    seed: u64,
) -> (
    Arc<Mutex<HostA>>,
    Arc<HeldLogPut>,
    u64,
    usize,
    Vec<(usize, Arc<Mutex<Option<bool>>>)>,
) {
    let objects = Arc::new(MemObjects::new());
    let view = HeldLogPut::new(objects.clone());
    let mut a = HostA::on(seed, Some((objects.clone(), view.clone())));
    // several PUTs in flight (the default is 1: durable.rs)
    a.store.flush_log().unwrap().set_window(8);
    assert_eq!(a.store.flush_log().unwrap().window(), 8);
    a.write(60, 6);
    let acked = a.history.len();
    let n = next_log_index(&objects);
    view.hold(n);
    let a = Arc::new(Mutex::new(a));
    let mut flushes = Vec::new();
    for k in 0..2 {
        // writes under the lock, the FLUSH outside it (both at once)
        let (vol, upto) = {
            let mut g = a.lock();
            for _ in 0..3 {
                g.write_one().unwrap();
            }
            (g.vol.clone(), g.history.len())
        };
        let out = Arc::new(Mutex::new(None));
        let o = out.clone();
        std::thread::spawn(move || *o.lock() = Some(vol.flush().is_ok()));
        flushes.push((upto, out));
        if k == 0 {
            wait_for("the first FLUSH's log PUT", || {
                view.arrived.load(Ordering::SeqCst)
            });
        }
    }
    let next = ObjName::Log {
        seq: n + 1,
        epoch: 1,
    }
    .encode();
    wait_for("log object n+1 stored while n is held", || {
        objects.head(&next).is_ok()
    });
    (a, view, n, acked, flushes)
}

/// Several log PUTs in flight (docs/objects.md §5.0.2): PUT n+1 completes
/// before PUT n. Neither FLUSH is answered while n is out; a power cut of
/// host A then (the store as it is) leaves a store whose mount is a prefix
/// holding every acknowledged write and nothing of n+1 (replay ends at the
/// gap); once n lands both FLUSHes are answered and the store holds both.
#[test]
fn a_later_log_put_stored_first_is_not_acknowledged_and_a_cut_between_leaves_a_prefix() {
    let (a, view, n, acked, flushes) = two_flushes_with_the_first_put_held(51);
    std::thread::sleep(Duration::from_millis(50));
    for (_, f) in &flushes {
        assert!(
            f.lock().is_none(),
            "a FLUSH was answered while log object {n} (below its own) was not stored"
        );
    }
    // the cut: host A vanishes with PUT n on the wire
    let copy = a.lock().objects.snapshot();
    assert!(copy
        .head(
            &ObjName::Log {
                seq: n + 1,
                epoch: 1
            }
            .encode()
        )
        .is_ok());
    {
        let a = a.lock();
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(copy), dir.path());
        let l = r.log.clone().unwrap();
        // a prefix (assert_prefix) with every acknowledged write; more
        // may come from segment objects uploaded meanwhile (the roll
        // forward's prefix), never from log object n+1: the replay ends
        // at n (missing, or fenced there by host B, a taker)
        let k = assert_prefix(&vol, &a.history, a.blocks);
        assert!(
            k as usize >= acked,
            "host B lost acknowledged writes ({l:?})"
        );
        let held = ObjName::Log { seq: n, epoch: 1 }.encode();
        assert!(
            l.stop == format!("log object {n} is missing: replay ends")
                || l.stop.starts_with(held.as_str()) && l.fenced_by.is_some(),
            "the replay went past the gap at {n}: {l:?}"
        );
    }
    // PUT n lands: both FLUSHes are answered, and the store holds both
    view.release();
    for (_, f) in &flushes {
        wait_for("the FLUSH's answer", || f.lock().is_some());
        assert_eq!(*f.lock(), Some(true));
    }
    let a = a.lock();
    let log = a.store.flush_log().unwrap();
    assert!(log.stats.most_in_flight.load(Ordering::Relaxed) >= 2);
    let dir = tempfile::tempdir().unwrap();
    let (_r, _s, vol) = host_b(Arc::new(a.objects.snapshot()), dir.path());
    assert_eq!(
        assert_prefix(&vol, &a.history, a.blocks) as usize,
        flushes[1].0
    );
}

/// §5.6 with several PUTs in flight: host B takes over while A's PUT n is
/// on the wire and n+1 is stored. B's fence must take n (the gap), not
/// n+2: B's replay then reads the fence at n, and A's PUT n, landing after
/// B read that number, meets the fence, so A answers neither FLUSH. (A
/// fence past the newest listed object would let PUT n land after B's
/// replay found n missing, and A would answer FLUSHes B never replayed.)
#[test]
fn a_takers_fence_covers_a_log_put_still_in_flight_below_a_stored_one() {
    let (a, view, n, acked, flushes) = two_flushes_with_the_first_put_held(53);
    // when B's replay asks for object n, A's PUT n lands (after B's read)
    // and A's FLUSHes answer as they will
    *view.on_get.lock() = Some(Box::new({
        let (view, f) = (view.clone(), flushes.clone());
        move || {
            view.release();
            for (_, r) in &f {
                wait_for("A's FLUSH answer", || r.lock().is_some());
            }
        }
    }));
    let objects = a.lock().objects.clone();
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b_on(view.clone(), dir.path());
    for (_, f) in &flushes {
        wait_for("A's FLUSH answer", || f.lock().is_some());
    }
    let a = a.lock();
    let answered = flushes
        .iter()
        .filter(|(_, f)| *f.lock() == Some(true))
        .map(|(upto, _)| *upto)
        .max()
        .unwrap_or(acked);
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert!(
        k as usize >= answered,
        "host B holds {k} writes, A answered FLUSHes covering {answered} ({r:?})"
    );
    let l = r.log.clone().unwrap();
    assert!(l.fenced_by.is_some(), "{l:?}");
    let fence = objects
        .get(&ObjName::Log { seq: n, epoch: 1 }.encode())
        .unwrap();
    assert!(
        crate::format::objlog::fence_by(&fence).is_some(),
        "the fence went elsewhere than the gap at {n}"
    );
}

/// A restore in the store-durable mode replays FLUSH log records into
/// slots whose segment object the rebuilt table names (the records of the
/// chunks that object holds): the slot's object is brought into staging
/// first. When the records only rewrite what the object already holds,
/// the slot must keep its object: no staging slot the table leaves
/// unnamed (queued for upload at attach) may be byte for byte a segment
/// object already in the store (that object an "orphan", the same bytes
/// uploaded again).
#[test]
fn a_restore_keeps_the_objects_of_slots_the_log_only_rewrites() {
    let mut a = HostA::new(61);
    a.write(600, 4);
    let copy = Arc::new(a.objects.snapshot());
    let dir = tempfile::tempdir().unwrap();
    let r = recover::restore(&*copy, dir.path(), true).unwrap();
    let l = r.log.clone().unwrap();
    assert!(l.records > 0, "the replay applied nothing: {l:?}");
    let table = Table::open(&dir.path().join(TABLE_FILE)).unwrap();
    let file = FileMedia::open(&dir.path().join("volume"), false).unwrap();
    let sb = crate::recovery::read_superblocks(&file).unwrap().sb;
    let seg_bytes = sb.segment_blocks as u64 * BS;
    let bodies: Vec<(String, Vec<u8>)> = copy
        .list(ObjKind::Segment.dir())
        .unwrap()
        .into_iter()
        .map(|o| (o.name.clone(), copy.get(&o.name).unwrap()))
        .collect();
    let mut again = Vec::new();
    let mut staged = AlignedBuf::new(seg_bytes as usize);
    for (s, named) in table.slots.iter().enumerate() {
        if named.is_some() {
            continue;
        }
        file.read_at(&mut staged, sb.data_offset + s as u64 * seg_bytes)
            .unwrap();
        if let Some((name, _)) = bodies.iter().find(|(_, b)| b[..] == staged[..]) {
            again.push(format!("segment {s} = {name}"));
        }
    }
    assert!(
        again.is_empty(),
        "{} slot(s) left to upload again though the store holds their bytes: {again:?} ({r:?})",
        again.len()
    );
    // and the volume mounts and holds every acknowledged write
    drop(file);
    let f: Arc<dyn Media> = Arc::new(FileMedia::open(&dir.path().join("volume"), false).unwrap());
    let (s, rep) = open(
        f,
        Place {
            objects: copy.clone(),
            dir: dir.path(),
            takeover: false,
            opts: inline(),
        },
    )
    .unwrap();
    let vol = Volume::open(
        s.media(),
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(s.clone())),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        assert_prefix(&vol, &a.history, a.blocks) as usize,
        a.history.len(),
        "{rep:?}"
    );
}

/// The same with the log cut short (a log object missing in the middle of
/// the replay): a slot whose staging copy holds only the replayed part of
/// a life must not get that life's object (which holds writes past the
/// gap): host B is a prefix, at every cut.
#[test]
fn a_restore_cut_short_by_a_log_gap_names_no_object_past_it() {
    let mut a = HostA::new(61);
    a.write(600, 4);
    let logs: Vec<String> = log_objects(&a.objects)
        .into_iter()
        .filter(|n| matches!(ObjName::parse(n), Ok(ObjName::Log { epoch: 1, .. })))
        .collect();
    assert!(logs.len() > 8, "{logs:?}");
    for cut in (1..logs.len() - 1).step_by(3) {
        let copy = a.objects.snapshot();
        copy.delete(&logs[cut]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(copy), dir.path());
        let k = assert_prefix(&vol, &a.history, a.blocks);
        assert!(k as usize <= a.history.len(), "{r:?}");
    }
}

/// §5.6 interleaving 6, made certain: host B lists `log/` while A's PUT n
/// is on the wire and n+1 is stored (the gap n is B's first candidate);
/// right after the listing A's PUT n lands, A stores many more objects
/// and trims n (it is no longer among its newest 16, and two checkpoint
/// objects are past it), and answers FLUSHes, all within T/2 of a lease
/// check that did not see B's epoch yet. B's fence create at n then
/// succeeds at a deleted number below A's live chain. B must notice
/// (A's objects above n), fence again above A's chain, and replay A's
/// chain past the stale fence: B holds every FLUSH A answered, and A's
/// next log PUT meets the new fence, so its next FLUSH fails. (Before the
/// re-check, B's replay stopped at the stale fence, the lowest log object
/// of A's epoch, losing A's answered FLUSHes, and A's next FLUSH was
/// answered.)
#[test]
fn a_fence_landing_on_a_number_trimmed_after_the_takers_listing_is_put_again_above() {
    let (a, view, n, _acked, flushes) = two_flushes_with_the_first_put_held(57);
    view.blind.store(true, Ordering::SeqCst);
    let objects = a.lock().objects.clone();
    let held = ObjName::Log { seq: n, epoch: 1 }.encode();
    let acked = Arc::new(Mutex::new(None));
    let b_store = Arc::new(AfterLogListing {
        inner: objects.clone(),
        hook: Mutex::new(Some(Box::new({
            let (a, view, acked, objects, held) = (
                a.clone(),
                view.clone(),
                acked.clone(),
                objects.clone(),
                held.clone(),
            );
            move || {
                // B has listed: n missing, n + 1 there. A's PUT n lands.
                view.release();
                for (_, f) in &flushes {
                    wait_for("A's FLUSH answer", || f.lock().is_some());
                    assert_eq!(*f.lock(), Some(true));
                }
                let mut a = a.lock();
                let mut rounds = 0;
                while objects.head(&held).is_ok() {
                    rounds += 1;
                    assert!(rounds < 2000, "host A never trimmed log object {n}");
                    for _ in 0..4 {
                        a.write_one().unwrap();
                    }
                    a.vol.flush().unwrap();
                }
                // and a few FLUSHes whose writes are only in log objects
                for _ in 0..3 {
                    a.write_one().unwrap();
                    a.vol.flush().unwrap();
                }
                *acked.lock() = Some(a.history.len());
            }
        }))),
    });
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b_on(b_store, dir.path());
    let acked = acked.lock().take().expect("the hook ran");
    let mut a = a.lock();
    let l = r.log.clone().unwrap();
    let stale = objects.get(&held).expect("B's fence at n");
    assert!(
        crate::format::objlog::fence_by(&stale).is_some(),
        "B's first fence went elsewhere than the trimmed number {n}"
    );
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert!(
        k as usize >= acked,
        "host B holds {k} writes, A's FLUSHes answered {acked} ({r:?}, log {l:?})"
    );
    // A, alive and (as far as its lease checks know) still the writer:
    // its next log PUT must meet B's fence above its chain
    a.write_one().unwrap();
    let e = a
        .vol
        .flush()
        .expect_err("A answered a FLUSH past B's mount");
    assert!(
        a.store
            .lease_clock()
            .superseded()
            .is_some_and(|w| w.contains("fenced")),
        "{e}"
    );
    // how: B's replay passed over its stale fence and ended at the new one
    assert!(l.passed_fences >= 1 && l.fenced_by.is_some(), "{l:?}");
}

/// §5.6, the writer's side: a FLUSH is answered only under a fresh lease
/// check. Host A's log PUT is held on the wire; host B takes the next
/// epoch and waits 2T (what a takeover does before it lists); then the
/// PUT lands, Ok. A must not answer that FLUSH (its last good check is
/// older than T/2; the check now finds B's epoch): B listed already, and
/// a FLUSH answered now would rest on the PUT's landing before B's
/// listing, i.e. on G3, which the fence no longer needs.
#[test]
fn a_flush_whose_put_returns_after_a_takers_epoch_is_not_answered() {
    let objects = Arc::new(MemObjects::new());
    let view = HeldLogPut::new(objects.clone());
    let mut a = HostA::on(59, Some((objects.clone(), view.clone())));
    a.write(30, 5);
    for _ in 0..3 {
        a.write_one().unwrap();
    }
    view.hold(next_log_index(&objects));
    let out = Arc::new(Mutex::new(None));
    std::thread::spawn({
        let (vol, out) = (a.vol.clone(), out.clone());
        move || *out.lock() = Some(vol.flush().is_ok())
    });
    wait_for("A's log PUT on the wire", || {
        view.arrived.load(Ordering::SeqCst)
    });
    let b = lease::take(&*objects, &Holder::this_process(), true).unwrap();
    std::thread::sleep(b.term() * 2);
    view.release();
    wait_for("A's FLUSH answer", || out.lock().is_some());
    assert_eq!(
        *out.lock(),
        Some(false),
        "A answered a FLUSH more than T/2 after B's epoch existed"
    );
    assert!(a.store.lease_clock().superseded().is_some());
}

/// A FLUSH group put in pieces (`set_piece_bytes`): the PUT of its first
/// piece n is held on the wire while the later pieces are stored. The
/// FLUSH is not answered meanwhile; a power cut of host A then leaves a
/// store whose mount is a prefix with every acknowledged write, the replay
/// ending at the gap n (never applying the later pieces); once n lands the
/// FLUSH is answered and the store holds every write.
#[test]
fn a_flush_put_in_pieces_is_answered_only_once_every_piece_is_stored() {
    let objects = Arc::new(MemObjects::new());
    let view = HeldLogPut::new(objects.clone());
    let mut a = HostA::on(61, Some((objects.clone(), view.clone())));
    a.store.flush_log().unwrap().set_piece_bytes(8 << 10);
    a.write(60, 6);
    let acked = a.history.len();
    let n = next_log_index(&objects);
    view.hold(n);
    for _ in 0..6 {
        a.write_one().unwrap();
    }
    let upto = a.history.len();
    let a = Arc::new(Mutex::new(a));
    let out = Arc::new(Mutex::new(None));
    {
        let (vol, o) = (a.lock().vol.clone(), out.clone());
        std::thread::spawn(move || *o.lock() = Some(vol.flush().is_ok()));
    }
    wait_for("the first piece's PUT", || {
        view.arrived.load(Ordering::SeqCst)
    });
    let next = ObjName::Log {
        seq: n + 1,
        epoch: 1,
    }
    .encode();
    wait_for("piece n+1 stored while n is held", || {
        objects.head(&next).is_ok()
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        out.lock().is_none(),
        "a FLUSH was answered while the first piece {n} of its group was not stored"
    );
    {
        // the cut: host A vanishes with piece n on the wire
        let g = a.lock();
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(objects.snapshot()), dir.path());
        let l = r.log.clone().unwrap();
        let k = assert_prefix(&vol, &g.history, g.blocks);
        assert!(
            k as usize >= acked,
            "host B lost acknowledged writes ({l:?})"
        );
        let held = ObjName::Log { seq: n, epoch: 1 }.encode();
        assert!(
            l.stop == format!("log object {n} is missing: replay ends")
                || l.stop.starts_with(held.as_str()) && l.fenced_by.is_some(),
            "the replay went past the gap at {n}: {l:?}"
        );
    }
    view.release();
    wait_for("the FLUSH's answer", || out.lock().is_some());
    assert_eq!(*out.lock(), Some(true));
    let g = a.lock();
    let dir = tempfile::tempdir().unwrap();
    let (_r, _s, vol) = host_b(Arc::new(g.objects.snapshot()), dir.path());
    assert_eq!(assert_prefix(&vol, &g.history, g.blocks) as usize, upto);
}
