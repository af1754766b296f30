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

const SEG: u64 = 16 * BS;

fn inline() -> ObjSegOptions {
    ObjSegOptions {
        uploads: 0,
        cache_segments: 2,
        retry_max: Duration::from_millis(20),
        close_wait: Duration::from_secs(5),
        ckpt_every: 1,
    }
}

struct HostA {
    objects: Arc<MemObjects>,
    store: Arc<ObjSegStore>,
    vol: Volume,
    _dir: tempfile::TempDir,
    blocks: u64,
    history: Vec<u64>,
    x: u64,
}

impl HostA {
    fn new(seed: u64) -> HostA {
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
            true,
        )
        .unwrap()
        .0;
        assert!(store.flush_log().is_some(), "the mode is on");
        let vol = Volume::open(
            store.media(),
            &OpenOptions {
                background: false,
                store: Some(StoreHandle(store.clone())),
                checkpoint_interval_bytes: Some(8 * SEG),
                ..OpenOptions::default()
            },
        )
        .unwrap();
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
    let mut a = HostA::new(3);
    let mut copies = Vec::new();
    for round in 0..18usize {
        // FLUSHes at varied spacing; GC and checkpoints run in between
        a.write(250, 1 + round % 7 * 5);
        copies.push((a.history.len(), a.objects.snapshot()));
    }
    let log = a.store.flush_log().unwrap();
    let put = log.stats.objects_put.load(Ordering::Relaxed);
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
    assert!(l.stop.contains("missing"), "{l:?}");
    let k = assert_prefix(&vol, &a.history, a.blocks);
    assert_eq!(k, 2, "the first FLUSH's writes and nothing after the gap");
    // without the gap: all six
    let dir = tempfile::tempdir().unwrap();
    let (_r, _s, vol) = host_b(Arc::new(a.objects.snapshot()), dir.path());
    assert_eq!(assert_prefix(&vol, &a.history, a.blocks), 6);
}
