//! The cache check in the background (docs/objects.md §5.7): a punch, a
//! write or a close ordered into the gap between a copy's check and its
//! switch to local (`ObjSegOptions::check_gap`), on MemObjects and MemMedia.

use super::tests::{check_of, fill, image, opts, read_back, Rig};
use super::*;
use crate::store::SegmentStore;
use std::sync::mpsc;

/// Four segments filled and uploaded, then a crash (no close): every
/// staging copy whole. Returns the slots newest object first.
fn four_stored(r: &Rig) -> Vec<u32> {
    let s = r.create(100);
    for seg in 0..4 {
        fill(&s, seg, seg as u8 + 1);
    }
    assert!(s.wait_idle(Duration::from_secs(5)));
    let mut newest: Vec<(u64, u32)> = (0..4).map(|g| (s.stored(g).unwrap().seq, g)).collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    s.halt();
    drop(s);
    newest.into_iter().map(|x| x.1).collect()
}

/// The rig's store opened with a cache of `cache` segments, whose cache
/// check runs `f` in its gap at slot `at` with the store (handed to the
/// check once `open` returned).
fn gap_at(
    r: &Rig,
    cache: usize,
    at: u32,
    f: impl Fn(&Arc<ObjSegStore>) + Send + Sync + 'static,
) -> Arc<ObjSegStore> {
    let (tx, rx) = mpsc::channel::<Arc<ObjSegStore>>();
    let rx = Mutex::new(rx);
    let gap = CheckGap(Arc::new(move |seg| {
        if seg == at {
            let s = rx.lock().recv().expect("the test hands the store over");
            f(&s);
        }
    }));
    let o = ObjSegOptions {
        check_gap: Some(gap),
        ..opts(cache)
    };
    let s = open(
        r.media.clone(),
        Place {
            opts: o,
            ..r.place(cache)
        },
    )
    .unwrap()
    .0;
    tx.send(s.clone()).unwrap();
    s
}

/// A copy punched while the check holds it (after its CRC matched, before
/// it is marked local) is never served from the cache: the punch waits for
/// the switch and undoes it. Fails with the check letting go of the
/// eviction lock before its switch (mutation `cache-check-unlocked`): the
/// punch lands first and the check marks the punched copy local.
#[test]
fn a_copy_punched_during_its_check_is_read_from_the_store() {
    let r = Rig::new();
    let order = four_stored(&r);
    let at = order[1];
    let (punch_tx, punch_rx) = mpsc::channel();
    let s = gap_at(&r, 100, at, move |s| {
        // an evictor that finds the eviction lock free punches now; one
        // that does not waits for it on its own thread
        let free = s.inner.evict.try_write().is_some();
        if free {
            s.discard_body(at).unwrap();
            punch_tx.send(None).unwrap();
        } else {
            let s = s.clone();
            let t = std::thread::spawn(move || {
                s.discard_body(at).unwrap();
            });
            punch_tx.send(Some(t)).unwrap();
        }
    });
    let c = check_of(&s);
    if let Some(t) = punch_rx.recv().unwrap() {
        t.join().unwrap();
    }
    assert_eq!((c.checked, c.kept), (4, 4), "{c:?}");
    read_back(&s, 4, |seg| u64::from(seg == at), ", punched in the gap");
}

/// A slot written (a new life) while the check holds its old copy is
/// never marked local by that check, and the cache's bound counts it once:
/// the next copy still fits. Fails with the switch not comparing the
/// object it read for (mutation `cache-check-stale-life`).
#[test]
fn a_slot_rewritten_during_its_check_is_not_marked_from_the_old_copy() {
    let r = Rig::new();
    let order = four_stored(&r);
    let (a, b) = (order[0], order[1]);
    let s = gap_at(&r, 2, a, move |s| {
        // another writer starts the slot's next life and fills it
        std::thread::scope(|sc| {
            sc.spawn(|| fill(s, a, 9)).join().unwrap();
        });
    });
    let c = check_of(&s);
    assert!(s.wait_idle(Duration::from_secs(5)));
    assert_eq!((c.kept, c.cut_short), (1, None), "{c:?}");
    let gets = || s.stats().gets.load(Ordering::Relaxed);
    let mut buf = vec![0u8; SEG_BYTES];
    for seg in 0..4 {
        let before = gets();
        s.read_segment(seg, 0, &mut buf).unwrap();
        let want = image(if seg == a { 9 } else { seg as u8 + 1 });
        assert!(buf == want, "segment {seg}: wrong bytes");
        // a: its new life, local; b: kept by the check; the rest: GETs
        let local = seg == a || seg == b;
        assert_eq!(gets() - before, u64::from(!local), "segment {seg}'s GETs");
    }
}

const SEG_BYTES: usize = 16 * BLOCK_BYTES;

/// Until the check reaches a copy its segment is read from the store; a
/// close during the check stops it after the copy in hand (close joins it),
/// and the next mount checks every copy again.
#[test]
fn a_close_during_the_check_stops_it() {
    let r = Rig::new();
    let order = four_stored(&r);
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let s = gap_at(&r, 100, order[0], move |_| {
        started_tx.send(()).unwrap();
        go_rx.lock().recv().unwrap();
    });
    started_rx.recv().unwrap();
    assert!(s.cache_check().is_none(), "the check is running");
    // the copies not yet marked local: every read is a GET
    let gets = || s.stats().gets.load(Ordering::Relaxed);
    let mut buf = vec![0u8; SEG_BYTES];
    for &seg in &order {
        let before = gets();
        s.read_segment(seg, 0, &mut buf).unwrap();
        assert!(buf == image(seg as u8 + 1), "segment {seg}: wrong bytes");
        assert_eq!(
            gets() - before,
            1,
            "segment {seg} read locally before its check"
        );
    }
    let closer = {
        let s = s.clone();
        std::thread::spawn(move || s.close())
    };
    // the close has begun (it then joins the check, held in its gap)
    while !s.inner.stop.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    go_tx.send(()).unwrap();
    closer.join().unwrap().unwrap();
    let c = s
        .cache_check()
        .expect("close returned after the check ended");
    assert_eq!(
        (c.checked, c.cut_short),
        (1, Some("the store closed")),
        "{c:?}"
    );
    drop(s);
    let s = open(r.media.clone(), r.place(100)).unwrap().0;
    let c = check_of(&s);
    assert_eq!((c.checked, c.kept, c.cut_short), (4, 4, None), "{c:?}");
    read_back(&s, 4, |_| 0, ", after the check");
}
