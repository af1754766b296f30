//! ObjSegStore on MemObjects and MemMedia: the upload queue, naming, the slot
//! table across a crash, and a whole engine on top. Durability against a
//! real server is tests/objects_volume.rs.

use super::*;
use crate::media::objects::MemObjects;
use crate::media::MemMedia;
use crate::store::SegmentStore;
use crate::{CreateOptions, OpenOptions, StoreHandle, Volume};

const SEG: u64 = 16 * BS;

pub(super) struct Rig {
    pub(super) media: Arc<dyn Media>,
    objects: Arc<MemObjects>,
    dir: tempfile::TempDir,
}

pub(super) fn opts(cache: usize) -> ObjSegOptions {
    ObjSegOptions {
        uploads: 2,
        cache_segments: cache,
        retry_max: Duration::from_millis(20),
        close_wait: Duration::from_secs(5),
        ckpt_every: 1,
        ..ObjSegOptions::default()
    }
}

impl Rig {
    pub(super) fn new() -> Rig {
        let media: Arc<dyn Media> = Arc::new(MemMedia::new(4 << 20));
        Volume::format(
            &*media,
            &CreateOptions {
                segment_bytes: SEG,
                ..CreateOptions::default()
            },
        )
        .unwrap();
        Rig {
            media,
            objects: Arc::new(MemObjects::new()),
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub(super) fn place(&self, cache: usize) -> Place<'_> {
        Place {
            objects: self.objects.clone(),
            dir: self.dir.path(),
            takeover: false,
            opts: opts(cache),
        }
    }
    pub(super) fn create(&self, cache: usize) -> Arc<ObjSegStore> {
        create(self.media.clone(), self.place(cache), false)
            .unwrap()
            .0
    }
    fn open(&self, cache: usize) -> crate::Result<Arc<ObjSegStore>> {
        open(self.media.clone(), self.place(cache)).map(|x| x.0)
    }
    fn segs(&self) -> Vec<String> {
        self.objects
            .list("seg/")
            .unwrap()
            .into_iter()
            .map(|o| o.name)
            .collect()
    }
    fn volume(&self, s: &Arc<ObjSegStore>) -> Volume {
        Volume::open(
            self.media.clone(),
            &OpenOptions {
                background: false,
                store: Some(StoreHandle(s.clone())),
                // checkpoints (and so checkpoint objects, which let old
                // objects be deleted) every 4 segments of log
                checkpoint_interval_bytes: Some(4 * SEG),
                ..OpenOptions::default()
            },
        )
        .unwrap()
    }
}

/// The cache check's result (it runs in the background after the attach):
/// waited for by its condition, never a fixed sleep.
pub(super) fn check_of(s: &ObjSegStore) -> CacheCheck {
    s.wait_cache_check(Duration::from_secs(60))
        .expect("the cache check never finished")
}

/// A whole segment's worth of recognisable blocks.
pub(super) fn image(seed: u8) -> Vec<u8> {
    (0..SEG as usize).map(|i| (i / 4096) as u8 ^ seed).collect()
}

pub(super) fn fill(s: &ObjSegStore, seg: u32, seed: u8) {
    // out of order, as the writer threads may land chunks
    let img = image(seed);
    let half = SEG as usize / 2;
    s.write(seg, 8, &img[half..]).unwrap();
    s.write(seg, 0, &img[..half]).unwrap();
}

/// Read segments `0..n` (filled with `image(seg + 1)`) whole: each must
/// serve its bytes and cost `gets(seg)` GETs (1: from its object; 0: from
/// the cache).
pub(super) fn read_back(s: &ObjSegStore, n: u32, gets: impl Fn(u32) -> u64, what: &str) {
    let count = || s.stats().gets.load(Ordering::Relaxed);
    for seg in 0..n {
        let before = count();
        let mut b = vec![0u8; SEG as usize];
        s.read_segment(seg, 0, &mut b).unwrap();
        assert!(
            b == image(seg as u8 + 1),
            "segment {seg}: wrong bytes served{what}"
        );
        assert_eq!(count() - before, gets(seg), "segment {seg}'s GETs{what}");
    }
}

#[test]
fn a_full_segment_is_uploaded_once_and_read_back_by_ranged_gets() {
    let r = Rig::new();
    let s = r.create(0);
    let sb = s.segment_blocks() as u64;
    s.write(3, 0, &image(1)[..8 * BLOCK_BYTES]).unwrap();
    assert!(s.wait_idle(Duration::from_secs(5)));
    assert!(r.segs().is_empty(), "a half-full segment was uploaded");
    s.write(3, 8, &image(1)[8 * BLOCK_BYTES..]).unwrap();
    assert!(s.wait_idle(Duration::from_secs(5)));
    let stored = s.stored(3).expect("segment 3 stored");
    assert_eq!(
        r.segs(),
        vec![ObjName::Segment {
            seq: stored.seq,
            epoch: s.epoch()
        }
        .encode()]
    );
    // cache 0: the staging copy is punched, the read is a GET
    let gets = s.stats().gets.load(Ordering::Relaxed);
    let mut b = vec![0u8; 3 * BLOCK_BYTES];
    s.read(3 * sb + 5, &mut b).unwrap();
    assert_eq!(b, image(1)[5 * BLOCK_BYTES..8 * BLOCK_BYTES]);
    assert_eq!(s.stats().gets.load(Ordering::Relaxed), gets + 1);
    // a read spanning two segments: one GET and one staging read
    let mut b = vec![0u8; 2 * BLOCK_BYTES];
    s.read(4 * sb - 1, &mut b).unwrap();
    assert_eq!(b[..BLOCK_BYTES], image(1)[15 * BLOCK_BYTES..]);
    assert_eq!(s.stats().uploaded_objects.load(Ordering::Relaxed), 1);
}

#[test]
fn an_unreachable_store_keeps_every_staging_copy_and_uploads_resume() {
    let r = Rig::new();
    let s = r.create(0);
    r.objects.set_unreachable(true);
    for seg in 0..6 {
        fill(&s, seg, seg as u8);
    }
    assert!(!s.wait_idle(Duration::from_millis(300)));
    assert_eq!(s.uploads_pending(), 6);
    assert!(s.stats().upload_retries.load(Ordering::Relaxed) > 0);
    for seg in 0..6 {
        let mut b = vec![0u8; SEG as usize];
        s.read_segment(seg, 0, &mut b).unwrap();
        assert!(
            b == image(seg as u8),
            "segment {seg} changed while its upload waits"
        );
    }
    r.objects.set_unreachable(false);
    assert!(s.wait_idle(Duration::from_secs(10)));
    assert_eq!(s.uploads_pending(), 0);
    assert_eq!(r.segs().len(), 6);
    for seg in 0..6 {
        assert!(s.stored(seg).is_some());
        let mut b = vec![0u8; SEG as usize];
        s.read_segment(seg, 0, &mut b).unwrap();
        assert!(
            b == image(seg as u8),
            "segment {seg} read back from its object"
        );
    }
}

#[test]
fn a_new_life_forgets_the_old_object_durably_and_keeps_it_for_checkpoint_objects() {
    let r = Rig::new();
    let s = r.create(0);
    fill(&s, 2, 7);
    assert!(s.wait_idle(Duration::from_secs(5)));
    let old = s.stored(2).unwrap();
    let mut tomb = vec![0u8; BLOCK_BYTES];
    tomb[0] = 0xaa;
    s.wipe(2, &tomb).unwrap();
    assert!(s.wait_idle(Duration::from_secs(5)));
    // deleted only once checkpoint objects that no longer name it are
    // stored (none here: no engine, no checkpoint): kept
    assert_eq!(r.segs(), vec![Inner::name(&old)], "deleted too early");
    assert!(s.stored(2).is_none());
    let mut b = vec![0u8; BLOCK_BYTES];
    s.read_segment(2, 0, &mut b).unwrap();
    assert_eq!(b, tomb);
    // a crash now (no close): the table must not name the deleted object
    s.halt();
    drop(s);
    let s = r.open(0).expect("reopen after the old object's delete");
    assert!(s.stored(2).is_none());
    // the next life gets a higher sequence number
    fill(&s, 2, 9);
    assert!(s.wait_idle(Duration::from_secs(5)));
    let new = s.stored(2).unwrap();
    assert!(
        new.seq > old.seq && new.epoch > old.epoch,
        "{new:?} after {old:?}"
    );
}

#[test]
fn a_missing_object_refuses_the_attach_naming_it_and_damage_is_found() {
    let r = Rig::new();
    let s = r.create(0);
    fill(&s, 1, 1);
    fill(&s, 4, 4);
    assert!(s.wait_idle(Duration::from_secs(5)));
    let (a, b) = (s.stored(1).unwrap(), s.stored(4).unwrap());
    let name_a = ObjName::Segment {
        seq: a.seq,
        epoch: a.epoch,
    }
    .encode();
    let name_b = ObjName::Segment {
        seq: b.seq,
        epoch: b.epoch,
    }
    .encode();
    let mut bad = image(4);
    bad[40_000] ^= 1;
    r.objects.poke(&name_b, bad);
    let found = s.verify_objects();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(&name_b) && found[0].contains("damaged"),
        "{found:?}"
    );
    drop(s);
    r.objects.delete(&name_a).unwrap();
    let e = r
        .open(0)
        .err()
        .expect("attach without segment 1's object")
        .to_string();
    assert!(e.contains(&name_a) && e.contains("segment 1"), "{e}");
}

#[test]
fn orphans_wait_for_checkpoint_objects_and_sequences_never_repeat() {
    let r = Rig::new();
    let s = r.create(0);
    let e = s.epoch();
    drop(s);
    // an upload a crash cut off before the table recorded it
    let orphan = ObjName::Segment { seq: 41, epoch: e }.encode();
    // (dropped above: a clean close released epoch e)
    r.objects.put_new(&orphan, &image(0)).unwrap();
    let (s, rep) = open(r.media.clone(), r.place(0)).unwrap();
    assert_eq!(rep.orphans_deferred, 1);
    assert!(s.wait_idle(Duration::from_secs(5)));
    // an orphan waits for checkpoint objects taken after it was found (a
    // mount from the store may roll forward over it): none here
    assert_eq!(r.segs(), vec![orphan.clone()]);
    fill(&s, 0, 0);
    assert!(s.wait_idle(Duration::from_secs(5)));
    assert!(s.stored(0).unwrap().seq > 41);
}

#[test]
fn another_writers_newer_epoch_is_refused_unless_taken_over() {
    let r = Rig::new();
    let s = r.create(0);
    s.close().unwrap();
    drop(s);
    // another host took the volume since (and released it)
    let l = lease::take(&*r.objects, &Holder::this_process(), false).unwrap();
    let theirs = ObjName::Segment { seq: 5, epoch: 2 }.encode();
    r.objects.put_new(&theirs, &image(3)).unwrap();
    l.release(&*r.objects).unwrap();
    let e = r.open(0).err().expect("stale cache accepted").to_string();
    assert!(e.contains("held by epoch 2"), "{e}");
    let (s, rep) = open(
        r.media.clone(),
        Place {
            takeover: true,
            ..r.place(0)
        },
    )
    .unwrap();
    assert_eq!(s.epoch(), 3);
    // the other writer's object is not this cache's orphan to delete
    assert!(s.wait_idle(Duration::from_secs(5)));
    assert_eq!(r.segs(), vec![theirs.clone()]);
    assert!(
        rep.notes.iter().any(|n| n.contains(&theirs)),
        "{:?}",
        rep.notes
    );
}

/// Four passes over the `n` blocks, pass k writing every (1 + k % 3)th block
/// as `block(lba, k)` and flushing: the version each block holds (0: never).
fn overwrite_passes(vol: &Volume, n: u64) -> Vec<u32> {
    let mut ver = vec![0u32; n as usize];
    for pass in 1..=4u32 {
        for lba in (0..n).step_by(1 + pass as usize % 3) {
            vol.write(lba * BS, &block(lba, pass), false).unwrap();
            ver[lba as usize] = pass;
        }
        vol.flush().unwrap();
    }
    ver
}

/// Deterministic pattern of block `lba` at version `v`.
fn block(lba: u64, v: u32) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_BYTES];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (lba as u32)
            .wrapping_mul(31)
            .wrapping_add(v * 7 + i as u32 / 8) as u8
            | 1;
    }
    b
}

#[test]
fn a_volume_on_objects_survives_close_crash_and_gc() {
    let r = Rig::new();
    // inline uploads: GC's new lives meet stored slots in every run
    fn inline(r: &Rig) -> Place<'_> {
        Place {
            opts: ObjSegOptions {
                uploads: 0,
                ..opts(0)
            },
            ..r.place(0)
        }
    }
    let s = create(r.media.clone(), inline(&r), false).unwrap().0;
    let vol = r.volume(&s);
    let n = vol.stats().logical_bytes / BS;
    // several passes: GC relocates, slots get new lives, old objects go
    let mut ver = overwrite_passes(&vol, n);
    assert!(s.wait_idle(Duration::from_secs(10)));
    let st = s.stats();
    assert!(st.uploaded_objects.load(Ordering::Relaxed) >= 8);
    assert!(
        st.deleted_objects.load(Ordering::Relaxed) >= 1,
        "no slot got a new life"
    );
    let check = |vol: &Volume, ver: &[u32]| {
        for lba in 0..n {
            let mut b = vec![0u8; BLOCK_BYTES];
            vol.read(lba * BS, &mut b).unwrap();
            let want = if ver[lba as usize] == 0 {
                vec![0u8; BLOCK_BYTES]
            } else {
                block(lba, ver[lba as usize])
            };
            assert!(b == want, "block {lba}");
        }
    };
    check(&vol, &ver);
    assert!(
        s.stats().gets.load(Ordering::Relaxed) > 0,
        "no read reached an object"
    );
    vol.close().unwrap();
    drop(vol);
    s.close().unwrap();
    drop(s);
    let s = open(r.media.clone(), inline(&r)).unwrap().0;
    let vol = r.volume(&s);
    check(&vol, &ver);
    // more writes, then a crash: no close of the volume or the store
    for lba in (0..n).step_by(5) {
        vol.write(lba * BS, &block(lba, 9), false).unwrap();
        ver[lba as usize] = 9;
    }
    vol.flush().unwrap();
    s.halt();
    drop(vol);
    drop(s);
    let s = open(r.media.clone(), inline(&r)).unwrap().0;
    let vol = r.volume(&s);
    check(&vol, &ver);
    assert!(s.wait_idle(Duration::from_secs(10)));
    check(&vol, &ver);
}

/// Staging bounded while the store is down (docs/objects.md §5.0, issue 21
/// item 7): a store that refuses every request; writes and FLUSHes go on
/// into staging until `staging_max` full segments wait for their upload,
/// then the write that opens another segment fails with a clear error
/// (inline mode: no upload can finish meanwhile) and the volume stops.
/// Every FLUSH answered before is in the local file; once the store
/// answers, the uploads drain and a remount reads every flushed write.
#[test]
fn staging_stops_at_its_bound_while_the_store_is_down_and_drains_when_it_returns() {
    let r = Rig::new();
    fn place(r: &Rig) -> Place<'_> {
        Place {
            opts: ObjSegOptions {
                uploads: 0,
                staging_max: 3,
                staging_wait: Duration::from_millis(50),
                ..opts(1_000)
            },
            ..r.place(1_000)
        }
    }
    let s = create(r.media.clone(), place(&r), false).unwrap().0;
    let vol = r.volume(&s);
    let n = vol.stats().logical_bytes / BS;
    r.objects.set_unreachable(true);
    let mut flushed = 0u64;
    let mut err = None;
    for lba in 0..n {
        let w = vol.write(lba * BS, &block(lba, 1), false);
        let f = w.and_then(|()| if lba % 4 == 3 { vol.flush() } else { Ok(()) });
        match f {
            Ok(()) if lba % 4 == 3 => flushed = lba + 1,
            Ok(()) => {}
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
    }
    let err = err.expect("writes went on past the staging bound with the store down");
    assert!(err.contains("staging is full"), "{err}");
    let pending = s.uploads_pending();
    // the bound, plus the segments the engine had open when it was reached
    assert!((3..=3 + 4).contains(&pending), "{pending} segments waiting");
    // (a 16-block segment holds three 4-block FLUSHes, each with a header)
    assert!(
        flushed >= 3 * 8,
        "only {flushed} blocks flushed before the bound"
    );
    assert!(flushed < n / 2, "{flushed} of {n}: the bound never held");
    assert!(s.stats().staging_full.load(Ordering::Relaxed) >= 1);
    // the store answers again: the uploads drain
    r.objects.set_unreachable(false);
    assert!(s.wait_idle(Duration::from_secs(10)));
    assert_eq!(s.uploads_pending(), 0);
    drop(vol);
    s.halt();
    drop(s);
    let s = open(r.media.clone(), place(&r)).unwrap().0;
    let vol = r.volume(&s);
    for lba in 0..flushed {
        let mut b = vec![0u8; BLOCK_BYTES];
        vol.read(lba * BS, &mut b).unwrap();
        assert!(b == block(lba, 1), "flushed block {lba} lost");
    }
}

/// The same bound with upload workers: the write that opens a segment past
/// it waits (back-pressure) instead of failing while uploads may still
/// finish within `staging_wait`; the store coming back lets it go on, and
/// every write lands.
#[test]
fn a_write_past_the_staging_bound_waits_for_uploads_and_goes_on_when_the_store_returns() {
    let r = Rig::new();
    fn place(r: &Rig) -> Place<'_> {
        Place {
            opts: ObjSegOptions {
                uploads: 1,
                staging_max: 2,
                staging_wait: Duration::from_secs(20),
                ..opts(1_000)
            },
            ..r.place(1_000)
        }
    }
    let s = create(r.media.clone(), place(&r), false).unwrap().0;
    let vol = Arc::new(r.volume(&s));
    let n = (vol.stats().logical_bytes / BS).min(16 * 12);
    r.objects.set_unreachable(true);
    let done = Arc::new(Mutex::new(None));
    std::thread::spawn({
        let (vol, done) = (vol.clone(), done.clone());
        move || {
            let mut r = Ok(());
            for lba in 0..n {
                r = vol.write(lba * BS, &block(lba, 1), false);
                if r.is_ok() && lba % 8 == 7 {
                    r = vol.flush();
                }
                if r.is_err() {
                    break;
                }
            }
            *done.lock() = Some(r.map_err(|e| e.to_string()));
        }
    });
    let t = Instant::now();
    while s.stats().staging_waits.load(Ordering::Relaxed) == 0 {
        assert!(
            done.lock().is_none(),
            "the writes ended without meeting the bound"
        );
        assert!(t.elapsed() < Duration::from_secs(20), "no write waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(done.lock().is_none(), "a write went on past the bound");
    let pending = s.uploads_pending();
    assert!((2..=2 + 4).contains(&pending), "{pending} segments waiting");
    r.objects.set_unreachable(false);
    while done.lock().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "the writes never went on"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(done.lock().clone(), Some(Ok(())));
    vol.flush().unwrap();
    assert!(s.wait_idle(Duration::from_secs(10)));
    for lba in 0..n {
        let mut b = vec![0u8; BLOCK_BYTES];
        vol.read(lba * BS, &mut b).unwrap();
        assert!(b == block(lba, 1), "block {lba}");
    }
    assert_eq!(s.stats().staging_full.load(Ordering::Relaxed), 0);
}

/// GC's victims come from the cache when it holds the volume
/// (docs/objects.md §5.7): the same writes over a cache of every segment
/// and over none; GC reads each victim locally in the first (no GET at
/// all), with one whole-object GET each in the second, and the counters
/// say which. Every block reads back in both.
#[test]
fn gc_victims_are_read_from_a_cache_that_holds_the_volume() {
    for cache in [usize::MAX, 0] {
        let r = Rig::new();
        let place = Place {
            opts: ObjSegOptions {
                uploads: 0,
                ..opts(cache)
            },
            ..r.place(cache)
        };
        let s = create(r.media.clone(), place, false).unwrap().0;
        let vol = r.volume(&s);
        let n = vol.stats().logical_bytes / BS;
        let ver = overwrite_passes(&vol, n);
        assert!(s.wait_idle(Duration::from_secs(10)));
        let st = s.stats();
        let cached = st.gc_victims_cached.load(Ordering::Relaxed);
        let fetched = st.gc_victims_fetched.load(Ordering::Relaxed);
        let gets = st.gets.load(Ordering::Relaxed);
        assert!(
            st.deleted_objects.load(Ordering::Relaxed) >= 1,
            "GC never gave a stored slot a new life"
        );
        if cache == usize::MAX {
            assert!(cached > 0, "no GC victim counted");
            assert_eq!(
                fetched, 0,
                "a victim read from the store with every segment cached"
            );
            assert_eq!(gets, 0, "a GET with every segment cached");
        } else {
            assert!(
                fetched > 0,
                "no GC victim read from the store with no cache"
            );
            assert!(gets >= fetched, "{fetched} victims fetched in {gets} GETs");
        }
        for lba in 0..n {
            let mut b = vec![0u8; BLOCK_BYTES];
            vol.read(lba * BS, &mut b).unwrap();
            let want = match ver[lba as usize] {
                0 => vec![0u8; BLOCK_BYTES],
                v => block(lba, v),
            };
            assert!(b == want, "cache {cache}: block {lba}");
        }
        vol.close().unwrap();
        drop(vol);
        s.close().unwrap();
    }
}

/// A restart keeps the staging copies that are whole (docs/objects.md §5.7):
/// an earlier mount's segments are read with no GET. A copy punched (an
/// eviction), half punched (a crash in the middle of one) or with a block
/// that never reached the disk is never served: its reads are GETs.
#[test]
fn a_restart_trusts_exactly_the_whole_staging_copies() {
    let r = Rig::new();
    let s = r.create(100);
    for seg in 0..6 {
        fill(&s, seg, seg as u8 + 1);
    }
    assert!(s.wait_idle(Duration::from_secs(5)));
    let geo = s.inner.geo;
    // a crash (no close): what the staging file holds stays as it is
    s.halt();
    drop(s);
    let flat = FlatStore::new(r.media.clone(), &geo);
    // 1: evicted (the body punched behind its chunk header)
    assert!(flat.discard_body(1).unwrap());
    // 2: a crash in the middle of its eviction: half the body punched
    flat.write(2, 8, &vec![0u8; 8 * BLOCK_BYTES]).unwrap();
    // 3: one block of the copy never reached the disk (older bytes)
    flat.write(3, 5, &image(9)[..BLOCK_BYTES]).unwrap();
    let (s, rep) = open(r.media.clone(), r.place(100)).unwrap();
    // the attach returns before the check: it reads the six copies after
    assert_eq!(rep.cache_checking, 6, "{rep:?}");
    let c = check_of(&s);
    assert_eq!((c.checked, c.kept, c.dropped), (6, 3, 3), "{c:?}");
    read_back(&s, 6, |seg| u64::from([1, 2, 3].contains(&seg)), "");
    // a cache of 2 keeps the copies of the newest two objects, if whole
    let mut newest: Vec<(u64, u32)> = (0..6).map(|g| (s.stored(g).unwrap().seq, g)).collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<u32> = newest[..2].iter().map(|x| x.1).collect();
    let whole = |g: u32| ![1, 2, 3].contains(&g);
    drop(s);
    let s = open(r.media.clone(), r.place(2)).unwrap().0;
    let kept = top.iter().filter(|&&g| whole(g)).count();
    let c = check_of(&s);
    assert_eq!((c.checked, c.kept), (2, kept), "{c:?} (newest {top:?})");
    let want = |seg| u64::from(!(top.contains(&seg) && whole(seg)));
    read_back(&s, 6, want, ", cache of 2");
}

/// A staging copy the cache disk cannot read (EIO) is not trusted and does
/// not stop the mount: its object serves it. Fails with the attach's read
/// error passed up (the mount refused for a cache block gone bad).
#[test]
fn a_staging_copy_the_disk_cannot_read_is_served_from_the_store() {
    /// The cache's media with reads of one byte range failing (EIO).
    struct BadReads {
        inner: Arc<dyn Media>,
        bad: std::ops::Range<u64>,
    }
    impl Media for BadReads {
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let end = offset + buf.len() as u64;
            if offset < self.bad.end && self.bad.start < end {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            self.inner.flush()
        }
        fn describe(&self) -> String {
            "cache media with a bad range".into()
        }
    }
    let r = Rig::new();
    let s = r.create(100);
    for seg in 0..4 {
        fill(&s, seg, seg as u8 + 1);
    }
    assert!(s.wait_idle(Duration::from_secs(5)));
    let geo = s.inner.geo;
    s.halt();
    drop(s);
    // segment 2's copy: its last block unreadable
    let at = geo.segment_offset(2) + SEG - BLOCK_BYTES as u64;
    let media: Arc<dyn Media> = Arc::new(BadReads {
        inner: r.media.clone(),
        bad: at..at + BLOCK_BYTES as u64,
    });
    let s = open(media, r.place(100))
        .expect("a bad cache block does not stop the mount")
        .0;
    let c = check_of(&s);
    assert_eq!((c.kept, c.dropped, c.cut_short), (3, 1, None), "{c:?}");
    read_back(&s, 4, |seg| u64::from(seg == 2), "");
}

/// Through the engine: a volume closed and mounted again reads every block
/// from the cache it left, GC's victims included: no GET at all.
#[test]
fn a_remount_reads_the_volume_and_gc_victims_from_the_cache_it_left() {
    let r = Rig::new();
    let place = || Place {
        opts: ObjSegOptions {
            uploads: 0,
            ..opts(usize::MAX)
        },
        ..r.place(usize::MAX)
    };
    let s = create(r.media.clone(), place(), false).unwrap().0;
    let vol = r.volume(&s);
    let n = vol.stats().logical_bytes / BS;
    let ver = overwrite_passes(&vol, n);
    vol.close().unwrap();
    drop(vol);
    s.close().unwrap();
    drop(s);
    let (s, rep) = open(r.media.clone(), place()).unwrap();
    assert!(rep.cache_kept > 0 && rep.cache_dropped == 0, "{rep:?}");
    let vol = r.volume(&s);
    for lba in 0..n {
        let mut b = vec![0u8; BLOCK_BYTES];
        vol.read(lba * BS, &mut b).unwrap();
        let want = match ver[lba as usize] {
            0 => vec![0u8; BLOCK_BYTES],
            v => block(lba, v),
        };
        assert!(b == want, "block {lba}");
    }
    // more overwrites: GC picks victims of the earlier mount
    overwrite_passes(&vol, n);
    assert!(s.wait_idle(Duration::from_secs(10)));
    let st = s.stats();
    assert!(
        st.gc_victims_cached.load(Ordering::Relaxed) > 0,
        "no GC victim"
    );
    assert_eq!(st.gc_victims_fetched.load(Ordering::Relaxed), 0);
    assert_eq!(
        st.gets.load(Ordering::Relaxed),
        0,
        "a GET after the remount"
    );
    vol.close().unwrap();
    drop(vol);
    s.close().unwrap();
}

/// Copies `evict_over` punched in the mount before are dropped at the next
/// attach, whatever the cache's size then: only the one it kept is read
/// locally.
#[test]
fn copies_evicted_before_a_crash_are_read_from_the_store_after_it() {
    let r = Rig::new();
    let s = r.create(1);
    for seg in 0..4 {
        fill(&s, seg, seg as u8 + 1);
        assert!(s.wait_idle(Duration::from_secs(5)));
    }
    // the cache of 1 kept segment 3's copy and punched the others
    assert_eq!(s.stats().local_reads.load(Ordering::Relaxed), 0);
    s.halt();
    drop(s);
    let s = open(r.media.clone(), r.place(100)).unwrap().0;
    let c = check_of(&s);
    assert_eq!((c.kept, c.dropped), (1, 3), "{c:?}");
    read_back(&s, 4, |seg| u64::from(seg != 3), "");
}
