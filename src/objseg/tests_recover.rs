//! Checkpoint objects and mounts from the store alone (ckpt.rs, recover.rs)
//! on MemObjects: a whole engine writes on host A (MemMedia), the store is
//! copied as it is at chosen moments (host A vanishing then), and host B
//! rebuilds its cache directory from each copy, mounts and reads back: a
//! prefix of the write stream, everything after a clean close. The same
//! against a real server and processes: tests/objects_volume.rs.

use super::*;
use crate::media::objects::MemObjects;
use crate::media::{FileMedia, MemMedia};
use crate::{CreateOptions, OpenOptions, StoreHandle, Volume};

const SEG: u64 = 16 * BS;

/// Block `lba` as written by write number `i` (>= 1) of a history.
pub(super) fn wblock(lba: u64, i: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_BYTES];
    b[0..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&i.to_le_bytes());
    for (j, x) in b[16..].iter_mut().enumerate() {
        *x = (i as u32)
            .wrapping_mul(131)
            .wrapping_add(j as u32 * 7 + lba as u32) as u8;
    }
    b
}

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
    vol: Volume,
    _dir: tempfile::TempDir,
    blocks: u64,
    /// (lba, write number) in order; write number = index + 1.
    history: Vec<u64>,
}

impl HostA {
    fn new() -> HostA {
        HostA::with(None)
    }

    /// Host A, its volume with an intent log ring of this many bytes.
    fn with(intent_log: Option<u64>) -> HostA {
        let media: Arc<dyn Media> = Arc::new(MemMedia::new(4 << 20));
        Volume::format(
            &*media,
            &CreateOptions {
                segment_bytes: SEG,
                intent_log,
                ..CreateOptions::default()
            },
        )
        .unwrap();
        let objects = Arc::new(MemObjects::new());
        let dir = tempfile::tempdir().unwrap();
        let store = create(
            media.clone(),
            Place {
                objects: objects.clone(),
                dir: dir.path(),
                takeover: false,
                opts: inline(),
            },
            false,
        )
        .unwrap()
        .0;
        let vol = Volume::open(
            media,
            &OpenOptions {
                background: false,
                store: Some(StoreHandle(store.clone())),
                // a checkpoint every 8 segments of log
                checkpoint_interval_bytes: Some(8 * SEG),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        let blocks = vol.stats().logical_bytes / BS;
        HostA {
            objects,
            store,
            vol,
            _dir: dir,
            blocks,
            history: Vec::new(),
        }
    }

    /// `n` writes of pseudo-random blocks (a hot tenth and the rest), a
    /// FLUSH every 16.
    fn write(&mut self, n: usize, seed: u64) {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for k in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lba = if x.is_multiple_of(3) {
                x % self.blocks
            } else {
                (x >> 8) % (self.blocks / 10)
            };
            self.history.push(lba);
            let i = self.history.len() as u64;
            self.vol.write(lba * BS, &wblock(lba, i), false).unwrap();
            if k % 16 == 15 {
                self.vol.flush().unwrap();
            }
        }
        self.vol.flush().unwrap();
    }
}

/// Host B: rebuild `dir` from `objects`, attach, mount.
pub(super) fn host_b(
    objects: Arc<MemObjects>,
    dir: &Path,
) -> crate::Result<(recover::Restored, Arc<ObjSegStore>, Volume)> {
    let r = recover::restore(&*objects, dir, true)?;
    let media: Arc<dyn Media> = Arc::new(FileMedia::open(&dir.join("volume"), false)?);
    let s = open(
        media.clone(),
        Place {
            objects,
            dir,
            takeover: false,
            opts: inline(),
        },
    )?
    .0;
    let vol = Volume::open(
        media,
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(s.clone())),
            ..OpenOptions::default()
        },
    )?;
    Ok((r, s, vol))
}

/// Every block of `vol` is the last write to it below some cut k of
/// `history` (nothing else, nothing newer); returns k.
pub(super) fn assert_prefix(vol: &Volume, history: &[u64], blocks: u64) -> u64 {
    let mut seen = vec![0u64; blocks as usize];
    let mut b = vec![0u8; BLOCK_BYTES];
    for lba in 0..blocks {
        vol.read(lba * BS, &mut b).unwrap();
        if b.iter().all(|&x| x == 0) {
            continue;
        }
        let i = u64::from_le_bytes(b[8..16].try_into().unwrap());
        assert!(
            i >= 1 && i as usize <= history.len() && b == wblock(lba, i),
            "block {lba} holds data never written there"
        );
        seen[lba as usize] = i;
    }
    let k = seen.iter().copied().max().unwrap_or(0);
    let mut want = vec![0u64; blocks as usize];
    for (j, &lba) in history.iter().enumerate().take(k as usize) {
        want[lba as usize] = j as u64 + 1;
    }
    for lba in 0..blocks as usize {
        assert_eq!(
            seen[lba], want[lba],
            "block {lba}: not a prefix of the writes (cut at write {k})"
        );
    }
    k
}

#[test]
fn a_clean_close_moves_hosts_whole() {
    let mut a = HostA::new();
    a.write(3000, 1);
    a.vol.close().unwrap();
    assert_eq!(a.store.finish().unwrap(), 0);
    assert!(a.store.stats().checkpoints_stored.load(Ordering::Relaxed) >= 2);
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b(a.objects.snapshot().into(), dir.path()).unwrap();
    let k = assert_prefix(&vol, &a.history, a.blocks);
    // the partly filled segments were uploaded at close: nothing lost
    assert_eq!(k as usize, a.history.len(), "{r:?}");
    // the old host released its lease: no takeover needed
    drop(vol);
}

#[test]
fn a_vanished_host_leaves_a_prefix_at_every_moment_with_gc_running() {
    let mut a = HostA::new();
    let mut copies = Vec::new();
    for round in 0..24u64 {
        a.write(400, round + 7);
        // (inline uploads: what is uploaded is uploaded by now)
        copies.push((a.history.len(), a.objects.snapshot()));
    }
    assert!(
        a.store.stats().deleted_objects.load(Ordering::Relaxed) > 0,
        "GC gave no slot a new life: the test does not test deletes"
    );
    let mut best = 0;
    for (n, objects) in copies {
        let dir = tempfile::tempdir().unwrap();
        let (r, _s, vol) = host_b(Arc::new(objects), dir.path())
            .unwrap_or_else(|e| panic!("host vanished after {n} writes: {e}"));
        let k = assert_prefix(&vol, &a.history[..n], a.blocks);
        // segments hold ~15 blocks each: at most the open ones' worth is lost
        assert!(
            n as u64 - k < 20 * 15,
            "after {n} writes only {k} came back ({r:?})"
        );
        best = best.max(k);
        vol.close().unwrap();
    }
    assert!(best > 0);
}

#[test]
fn a_second_host_needs_the_old_ones_lease_gone() {
    let mut a = HostA::new();
    a.write(1000, 3);
    let dir = tempfile::tempdir().unwrap();
    let e = recover::restore(&*a.objects, dir.path(), false)
        .expect_err("the live writer's volume restored elsewhere")
        .to_string();
    assert!(e.contains("held by epoch"), "{e}");
    assert!(!dir.path().join("volume").exists());
}

#[test]
fn a_damaged_checkpoint_object_falls_back_and_none_usable_refuses_naming_them() {
    let mut a = HostA::new();
    a.write(2000, 5);
    a.store.halt();
    let objects = a.objects.snapshot();
    let cks: Vec<String> = objects
        .list("ckpt/")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(cks.len(), 2, "{cks:?}");
    let mut bad = objects.get(&cks[1]).unwrap();
    bad[100] ^= 4;
    objects.poke(&cks[1], bad);
    let objects = Arc::new(objects);
    let dir = tempfile::tempdir().unwrap();
    let (r, _s, vol) = host_b(objects.clone(), dir.path()).unwrap();
    assert_eq!(r.checkpoint, cks[0]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains(&cks[1]) && n.contains("damaged")),
        "{:?}",
        r.notes
    );
    assert_prefix(&vol, &a.history, a.blocks);
    drop(vol);
    drop(_s);
    // both unusable: refused, naming each
    let objects = Arc::new(a.objects.snapshot());
    objects.delete(&cks[0]).unwrap();
    objects.poke(&cks[1], b"not a checkpoint".to_vec());
    let dir = tempfile::tempdir().unwrap();
    let e = recover::restore(&*objects, dir.path(), true)
        .expect_err("mounted with no usable checkpoint object")
        .to_string();
    assert!(
        e.contains(&cks[1]) && e.contains("no usable checkpoint"),
        "{e}"
    );
}

#[test]
fn roll_forward_ends_at_a_sequence_gap() {
    let mut a = HostA::new();
    a.write(2500, 11);
    a.store.halt();
    let objects = a.objects.snapshot();
    // the segment objects above the newest checkpoint object's table
    let newest = objects.list("ckpt/").unwrap().pop().unwrap().name;
    let c = crate::format::objckpt::ObjCheckpoint::decode(&objects.get(&newest).unwrap()).unwrap();
    let above: Vec<String> = objects
        .list("seg/")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(
            |n| matches!(ObjName::parse(n), Ok(ObjName::Segment { seq, .. }) if seq >= c.seg_start),
        )
        .collect();
    assert!(
        above.len() >= 3,
        "too few objects above {newest}: {above:?}"
    );
    // an upload that never landed, with later ones that did
    objects.delete(&above[1]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (r, s, vol) = host_b(Arc::new(objects), dir.path()).unwrap();
    assert!(r.stop.contains("missing"), "{r:?}");
    for later in &above[2..] {
        assert!(!r.rolled.contains(later), "rolled past the gap to {later}");
        let ObjName::Segment { seq, epoch } = ObjName::parse(later).unwrap() else {
            unreachable!()
        };
        assert!(
            (0..s.inner.geo.segment_count)
                .all(|i| s.stored(i).is_none_or(|o| (o.seq, o.epoch) != (seq, epoch))),
            "the rebuilt table names {later}, past the gap"
        );
    }
    assert_prefix(&vol, &a.history, a.blocks);
}

#[test]
fn a_volume_with_an_intent_log_moves_hosts_as_a_prefix_and_its_lost_log_is_named() {
    // host A: an intent log ring in its metadata file (FLUSHes answered
    // from the ring), dropped without a close: its ring is lost with it
    let mut a = HostA::with(Some(256 << 10));
    let ring = crate::recovery::read_superblocks(&*a.store.media())
        .unwrap()
        .sb
        .log_ring();
    assert!(ring.is_some(), "host A's volume has no intent log ring");
    a.write(1500, 21);
    a.store.halt();
    let objects = Arc::new(a.objects.snapshot());
    // the lease rules hold: host A never released its epoch
    let dir = tempfile::tempdir().unwrap();
    let e = recover::restore(&*objects, dir.path(), false)
        .expect_err("a volume whose writer never released it restored without --takeover")
        .to_string();
    assert!(e.contains("held by epoch"), "{e}");
    // host B: an empty cache directory, no intent log of host A's
    let dir = tempfile::tempdir().unwrap();
    let (r, s, vol) = host_b(objects.clone(), dir.path()).unwrap();
    let k = assert_prefix(&vol, &a.history, a.blocks);
    let lost = r
        .intent_log_lost
        .clone()
        .expect("the intent log's loss is not reported");
    assert!(
        lost.contains("intent log")
            && lost.contains(&r.checkpoint)
            && lost.contains("are lost")
            && !lost.contains("nothing is lost"),
        "{lost}"
    );
    eprintln!("{k} of {} writes back: {lost}", a.history.len());
    assert!(k > 0, "nothing came back ({r:?})");
    // host B's own intent log works: it writes, FLUSHes, closes cleanly,
    // and host C (another empty cache directory) gets every write of both
    let mut history = a.history[..k as usize].to_vec();
    for j in 0..300u64 {
        let lba = (j * 7919) % a.blocks;
        history.push(lba);
        vol.write(lba * BS, &wblock(lba, history.len() as u64), false)
            .unwrap();
        if j % 16 == 15 {
            vol.flush().unwrap();
        }
    }
    vol.flush().unwrap();
    vol.close().unwrap();
    assert_eq!(s.finish().unwrap(), 0);
    drop(s);
    let dir = tempfile::tempdir().unwrap();
    let r = recover::restore(&*objects, dir.path(), false).unwrap();
    let media: Arc<dyn Media> =
        Arc::new(FileMedia::open(&dir.path().join("volume"), false).unwrap());
    let s = open(
        media.clone(),
        Place {
            objects: objects.clone(),
            dir: dir.path(),
            takeover: false,
            opts: inline(),
        },
    )
    .unwrap()
    .0;
    let vol = Volume::open(
        media,
        &OpenOptions {
            background: false,
            store: Some(StoreHandle(s.clone())),
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let note = r.intent_log_lost.expect("no word on the intent log");
    assert!(note.contains("nothing is lost"), "{note}");
    let k2 = assert_prefix(&vol, &history, a.blocks);
    assert_eq!(
        k2 as usize,
        history.len(),
        "host B closed cleanly: nothing lost"
    );
}
