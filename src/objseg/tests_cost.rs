//! What the store is sent per host byte, by kind of object (`seg/`,
//! `ckpt/`, `log/`), on MemObjects under a whole engine: uniform random
//! 4 KiB writes over the whole logical space (the engine's default
//! over-provisioning: GC runs), three times the logical size, while the
//! segment uploads lag the writes by a steady number of segments (a store
//! slower than the host, as radosgw was under fio: the case that sent 1.77
//! store bytes per host byte, docs/objects.md §5.5.1). Each run prints its
//! ratios (`cargo test --release --lib objseg::tests_cost -- --nocapture`).

use super::tests_recover::{assert_prefix, host_b, wblock};
use super::*;
use crate::format::objckpt::ObjCheckpoint;
use crate::media::objects::{MemObjects, ObjectInfo};
use crate::media::MemMedia;
use crate::{CreateOptions, OpenOptions, StoreHandle, Volume};
use std::ops::Range;

/// 1 MiB segments: the ratios depend on the lag and the checkpoint
/// interval counted in segments, not on the segment's size.
const SEG: u64 = 256 * BS;

/// A store whose segment PUTs wait for a permit the test hands out (one
/// per segment of host writes, after the first `lag`): uploads trail the
/// writes by about `lag` segments whatever the machine's speed.
struct Lagging {
    inner: Arc<MemObjects>,
    permits: Mutex<u64>,
    cv: Condvar,
    open: AtomicBool,
    /// The next segment PUT whose bytes start so fails once.
    refuse_once: Mutex<Option<Vec<u8>>>,
}

impl Lagging {
    /// Let uploads run until the full segments waiting are down to `lag`,
    /// and wait for that: the store keeps pace with the segments the
    /// engine fills (host writes and GC's), `lag` behind, whatever the
    /// machine's speed.
    fn keep_lag(&self, store: &ObjSegStore, lag: u64) {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let pending = store.uploads_pending() as u64;
            if pending <= lag || Instant::now() > end {
                return;
            }
            let mut p = self.permits.lock();
            *p = (*p).max(pending - lag);
            self.cv.notify_all();
            drop(p);
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    fn open_wide(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }
}

impl ObjectStore for Lagging {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        if name.starts_with("seg/") {
            let mut p = self.permits.lock();
            let end = Instant::now() + Duration::from_secs(20);
            while *p == 0 && !self.open.load(Ordering::SeqCst) {
                if self.cv.wait_until(&mut p, end).timed_out() {
                    break;
                }
            }
            *p = p.saturating_sub(1);
            drop(p);
            let mut r = self.refuse_once.lock();
            if r.as_ref().is_some_and(|x| bytes.starts_with(x)) {
                *r = None;
                return Err(ObjError::Store("refused once by the test".into()));
            }
        }
        self.inner.put_new(name, bytes)
    }
    fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjError> {
        self.inner.get_range(name, range)
    }
    fn get(&self, name: &str) -> Result<Vec<u8>, ObjError> {
        self.inner.get(name)
    }
    fn head(&self, name: &str) -> Result<u64, ObjError> {
        self.inner.head(name)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjError> {
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> Result<(), ObjError> {
        self.inner.delete(name)
    }
    fn describe(&self) -> String {
        "lagging memory store".into()
    }
}

/// Store bytes per host byte, by kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cost {
    pub seg: f64,
    pub ckpt: f64,
    pub log: f64,
    /// Blocks GC moved per host block written (the engine's own cost).
    pub gc: f64,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.seg + self.ckpt + self.log
    }
}

/// Write `passes` x the logical size in uniform random 4 KiB blocks, a
/// FLUSH every 64, with uploads trailing by `lag` segments (1 upload
/// worker, cache 0), a checkpoint every 16 segments of log; clean close.
/// Host A on a `Lagging` store: `media` bytes of MemMedia in segments of
/// `seg` bytes, one upload worker, cache 0, a checkpoint every 16
/// segments of log (`serve`'s first checkpoint object in the store-durable
/// mode).
struct LagHost {
    lagging: Arc<Lagging>,
    store: Arc<ObjSegStore>,
    vol: Volume,
    _dir: tempfile::TempDir,
    blocks: u64,
    per_seg: u64,
}

impl LagHost {
    fn new(media: u64, seg: u64, store_durable: bool) -> LagHost {
        let media: Arc<dyn Media> = Arc::new(MemMedia::new(media));
        Volume::format(
            &*media,
            &CreateOptions {
                segment_bytes: seg,
                ..CreateOptions::default()
            },
        )
        .unwrap();
        let lagging = Arc::new(Lagging {
            inner: Arc::new(MemObjects::new()),
            permits: Mutex::new(0),
            cv: Condvar::new(),
            open: AtomicBool::new(false),
            refuse_once: Mutex::new(None),
        });
        let dir = tempfile::tempdir().unwrap();
        let store = create_in_mode(
            media,
            Place {
                objects: lagging.clone(),
                dir: dir.path(),
                takeover: false,
                opts: ObjSegOptions {
                    uploads: 1,
                    cache_segments: 0,
                    retry_max: Duration::from_millis(20),
                    close_wait: Duration::from_secs(30),
                    ..ObjSegOptions::default()
                },
            },
            false,
            store_durable,
        )
        .unwrap()
        .0;
        let vol = Volume::open(
            store.media(),
            &OpenOptions {
                background: false,
                store: Some(StoreHandle(store.clone())),
                checkpoint_interval_bytes: Some(16 * seg),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        if store_durable {
            vol.checkpoint().unwrap();
            store.checkpoint_now().unwrap();
        }
        let blocks = vol.stats().logical_bytes / BS;
        LagHost {
            lagging,
            store,
            vol,
            _dir: dir,
            blocks,
            per_seg: seg / BS,
        }
    }
}

/// Write `passes` x the logical size in uniform random 4 KiB blocks, a
/// FLUSH every 64, with uploads trailing by `lag` segments (1 upload
/// worker, cache 0), a checkpoint every 16 segments of log; clean close.
pub(super) fn measure(lag: u64, passes: u64, store_durable: bool) -> (Cost, u64) {
    let LagHost {
        lagging,
        store,
        vol,
        _dir,
        blocks,
        per_seg,
    } = LagHost::new(48 << 20, SEG, store_durable);
    let n = passes * blocks;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lba = x % blocks;
        vol.write(lba * BS, &wblock(lba, i + 1), false).unwrap();
        if i % 64 == 63 {
            vol.flush().unwrap();
        }
        if i % per_seg == per_seg - 1 {
            lagging.keep_lag(&store, lag);
        }
    }
    vol.flush().unwrap();
    lagging.open_wide();
    let gc = vol.stats().gc_blocks_moved as f64 / n as f64;
    let checkpoints = vol.stats().checkpoints;
    vol.close().unwrap();
    assert_eq!(store.finish().unwrap(), 0, "uploads left at close");
    let (seg, log, ckpt) = store.bytes_put();
    let host = (n * BS) as f64;
    let c = Cost {
        seg: seg as f64 / host,
        ckpt: ckpt as f64 / host,
        log: log as f64 / host,
        gc,
    };
    eprintln!(
        "store bytes per host byte (lag {lag} segments, {passes} x {} MiB logical, {} mode): seg {:.3} ckpt {:.3} log {:.3} total {:.3}; GC moved {:.3} blocks per host block; {} checkpoint objects ({} captures raced, {} dropped waiting, {} reused segments carried; {} engine checkpoints)",
        (blocks * BS) >> 20,
        if store_durable { "store-durable" } else { "local-log" },
        c.seg,
        c.ckpt,
        c.log,
        c.total(),
        c.gc,
        store.stats().checkpoints_stored.load(Ordering::Relaxed),
        store.stats().checkpoint_races.load(Ordering::Relaxed),
        store.stats().checkpoint_waits_dropped.load(Ordering::Relaxed),
        store.stats().checkpoint_rescued.load(Ordering::Relaxed),
        checkpoints
    );
    (c, store.stats().checkpoint_rescued.load(Ordering::Relaxed))
}

#[test]
fn checkpoint_objects_cost_little_while_uploads_lag() {
    // Bound: a capture carries the checkpoint image and the open segments'
    // written blocks (the user stream's and GC's: at most two segments
    // with the default greedy policy), and one is taken per engine
    // checkpoint (16 segments of log here), plus the closing one: at most
    // (2 + image) / 16 ~ 0.13 store bytes per host byte for checkpoint
    // objects, whatever the uploads' lag. Before wave 12 a capture also
    // carried every full segment waiting for its upload: 12 of them here
    // (measured: ckpt 0.87, total 2.73).
    let (c, rescued) = measure(12, 3, false);
    assert!(c.ckpt < 0.15, "checkpoint objects cost {c:?}");
    assert_eq!(
        rescued, 0,
        "the engine reused segments before their upload: the lag was not kept"
    );
    assert!(c.log == 0.0, "{c:?}");
    // segment objects: each host block once, GC's moves once more, the
    // partly filled segments once at the close
    assert!(
        c.seg < 1.0 + c.gc + 0.1,
        "segment objects cost more than host + GC blocks: {c:?}"
    );
}

#[test]
fn store_durable_mode_sends_the_log_once_more_and_no_more() {
    let (c, _) = measure(12, 2, true);
    // the FLUSH log carries each written block once (plus its records'
    // headers and the engine's metadata writes); checkpoint objects as in
    // the local-log mode, plus this mode's first one (carried whole)
    assert!(c.ckpt < 0.15, "checkpoint objects cost {c:?}");
    assert!(c.log > 0.9 && c.log < 1.3, "FLUSH log objects cost {c:?}");
    assert!(c.seg < 1.0 + c.gc + 0.1, "{c:?}");
}

#[test]
fn a_vanished_host_leaves_a_prefix_while_uploads_lag() {
    // 512 KiB segments, uploads trailing by 8: the checkpoint objects
    // wait for the full segments they name; a copy of the store taken at
    // any moment mounts on host B as a prefix of the write stream
    let seg = 128 * BS;
    let a = LagHost::new(24 << 20, seg, false);
    let lag = 8;
    let mut history: Vec<u64> = Vec::new();
    let mut copies = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let n = 5 * a.blocks;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lba = x % a.blocks;
        history.push(lba);
        a.vol.write(lba * BS, &wblock(lba, i + 1), false).unwrap();
        if i % 64 == 63 {
            a.vol.flush().unwrap();
        }
        if i % a.per_seg == a.per_seg - 1 {
            let s = i / a.per_seg;
            a.lagging.keep_lag(&a.store, lag);
            if s % 7 == 6 {
                // let the worker catch up to its permits first
                std::thread::sleep(Duration::from_millis(5));
                copies.push((history.len(), a.lagging.inner.snapshot()));
            }
        }
    }
    let waited = a.store.stats().checkpoints_stored.load(Ordering::Relaxed);
    assert!(waited >= 3, "only {waited} checkpoint objects stored");
    a.lagging.open_wide();
    a.store.halt();
    let mut best = 0;
    for (n, objects) in copies {
        if objects.list("ckpt/").unwrap().is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(objects), dir.path())
            .unwrap_or_else(|e| panic!("host vanished after {n} writes: {e}"));
        let k = assert_prefix(&vol, &history[..n], a.blocks);
        eprintln!(
            "after {n} writes: {k} back from {} + {} segment object(s)",
            r.checkpoint,
            r.rolled.len()
        );
        best = best.max(k);
        vol.close().unwrap();
    }
    assert!(best > 0, "no copy mounted");
}

#[test]
fn a_capture_waiting_for_an_upload_carries_a_segment_reused_before_it_landed() {
    let a = LagHost::new(8 << 20, 64 * BS, false);
    let s = &a.store;
    // a checkpoint of the engine's for captures to take
    a.vol.write(0, &wblock(0, 1), false).unwrap();
    a.vol.flush().unwrap();
    a.vol.checkpoint().unwrap();
    // two slots the engine does not use, filled by hand; q's upload is
    // held by the store, q2's first try will be refused
    let (q, q2) = (s.segment_count() - 1, s.segment_count() - 2);
    let sb = s.segment_blocks() as usize;
    let fill = |seed: u8| -> Vec<u8> {
        (0..sb * BLOCK_BYTES)
            .map(|i| (i / 4096) as u8 ^ seed)
            .collect()
    };
    let (img, img2, img3) = (fill(7), fill(9), fill(0x55));
    *a.lagging.refuse_once.lock() = Some(img2[..64].to_vec());
    s.write(q, 0, &img).unwrap();
    s.write(q2, 0, &img2).unwrap();
    assert!(s.inner.state.lock().slots[q as usize].queued);
    assert!(!s.inner.try_checkpoint(true), "stored before its uploads");
    let waiting = s
        .inner
        .ckpt
        .lock()
        .pending
        .as_ref()
        .map(|p| p.seq)
        .expect("no capture waits");
    // q's next life before its upload lands; that life is stored before
    // q2 (whose first PUT is refused), so the capture completes after it
    let mut tomb = AlignedBuf::new(BLOCK_BYTES);
    let uuid = s.inner.state.lock().table.uuid;
    chunk::tombstone(&mut tomb, &uuid, q);
    s.wipe(q, &tomb).unwrap();
    s.write(q, 0, &img3).unwrap();
    a.lagging.open_wide();
    assert!(s.wait_idle(Duration::from_secs(10)));
    assert!(s.stored(q).is_some(), "the next life was not stored");
    assert!(s.stored(q2).is_some(), "q2 was not stored");
    assert!(
        s.stats().upload_retries.load(Ordering::Relaxed) >= 1,
        "q2's upload was not refused once: the order this test needs did not happen"
    );
    s.inner.try_checkpoint(true);
    assert!(s.inner.ckpt.lock().pending.is_none());
    // the capture was stored, carrying the life it was taken with (the
    // next life's object would be other data under its map)
    let name = ObjName::Checkpoint {
        seq: waiting,
        epoch: s.epoch(),
    }
    .encode();
    let c = ObjCheckpoint::decode(
        &a.lagging
            .inner
            .get(&name)
            .unwrap_or_else(|e| panic!("the waiting capture {name} was not stored: {e}")),
    )
    .unwrap();
    assert!(
        c.slots[q as usize].is_none(),
        "{name} names an object for segment {q}, whose captured life no object holds"
    );
    let carried = c.partials.iter().find(|(p, _)| *p == q);
    assert!(
        carried.is_some_and(|(_, b)| *b == img),
        "{name} does not carry segment {q}'s captured life"
    );
    assert_eq!(
        c.slots[q2 as usize].map(|o| o.seq),
        s.stored(q2).map(|o| o.seq),
        "{name} does not name q2's object"
    );
    assert_eq!(s.stats().checkpoint_rescued.load(Ordering::Relaxed), 1);
    a.store.halt();
}
