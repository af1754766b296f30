//! Power cuts under a volume whose segments live in an object store (objseg,
//! issue 21), deterministic: the local metadata file is a SimMedia (a disk
//! with a volatile write cache: at the cut any subset of unflushed writes
//! survives, each torn at any sector), the objects a MemObjects (an object
//! whose put returned is durable, as S3 promises), uploads and deletes run
//! inline (`ObjSegOptions::uploads == 0`), so one seed is one history.
//!
//! Each seed: random writes, flushes and stretches with the store
//! unreachable, GC included (the volume is small), the power cut after a
//! random number of media operations; then a fresh attach of the same
//! objects and slot table on the crash image: it must mount, every write
//! acknowledged by a FLUSH reads back (or a later write of the block), no
//! block reads as something never written to it, and `check` is clean.
//! Then the cache directory is lost too: another host rebuilds it from the
//! objects as they were at the cut (`objseg::recover`): it must mount and
//! hold a prefix of the write stream (a write that failed may be in or out).
//! The store-durable mode (`--flush-to store`) runs the same seeds with one
//! more promise at the host loss: every write a FLUSH acknowledged is on the
//! other host too (a FLUSH whose log PUT failed stops the volume).
//! Durability against a real server is tests/objects_volume.rs.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use sluice::media::objects::MemObjects;
use sluice::media::{Loss, Media, SimMedia};
use sluice::objseg::{self, ObjSegOptions};
use sluice::{CreateOptions, OpenOptions, StoreHandle, Volume};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

const BS: u64 = 4096;

/// Over a sweep: stored segments whose staging copy the attach after the
/// cut kept (found whole) and dropped (read from the store).
static KEPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn content(lba: u64, ver: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS as usize];
    for c in b.chunks_mut(16) {
        c[..8].copy_from_slice(&lba.to_le_bytes());
        c[8..].copy_from_slice(&ver.to_le_bytes());
    }
    b
}

fn opts(cache: usize) -> ObjSegOptions {
    ObjSegOptions {
        uploads: 0,
        cache_segments: cache,
        retry_max: Duration::from_millis(1),
        close_wait: Duration::from_millis(0),
        ckpt_every: 1,
        ..ObjSegOptions::default()
    }
}

fn open_opts(store: &Arc<objseg::ObjSegStore>) -> OpenOptions {
    OpenOptions {
        background: false,
        discard_every_segment: true,
        store: Some(StoreHandle(store.clone())),
        // checkpoints every 8 segments of log (and so checkpoint objects)
        checkpoint_interval_bytes: Some(8 * 16 * BS),
        ..OpenOptions::default()
    }
}

/// One seed; returns (acknowledged flushes, objects uploaded, whether the
/// store alone could be mounted) for the tally.
/// (store-durable mode: and whether a damaged log object was tried)
fn run(seed: u64, durable: bool) -> (u64, u64, bool, bool) {
    run_with(seed, durable, None)
}

/// `run`, the volume made with an intent log ring of `intent_log` bytes
/// (local-log mode: FLUSHes answered from the ring, the chunk left open;
/// docs/objects.md §4.8 measures what it saves the OSD).
fn run_with(seed: u64, durable: bool, intent_log: Option<u64>) -> (u64, u64, bool, bool) {
    // the host-loss mount takes over: its wait of 2T stays short
    sluice::lease::set_term(std::time::Duration::from_millis(20));
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let objects = Arc::new(MemObjects::new());
    let m = Arc::new(SimMedia::new(3 << 20));
    Volume::format(
        &*m,
        &CreateOptions {
            segment_bytes: 16 * BS,
            uuid: Some([seed as u8 | 1; 16]),
            intent_log,
            ..CreateOptions::default()
        },
    )
    .unwrap();
    if intent_log.is_some() {
        let sb = sluice::recovery::read_superblocks(&*m).unwrap().sb;
        assert!(sb.log_ring().is_some(), "the volume has no intent log ring");
    }
    let cache = [0, 1, 1000][rng.gen_range(0..3)];
    let place = |cache| objseg::Place {
        objects: objects.clone(),
        dir: dir.path(),
        takeover: false,
        opts: opts(cache),
    };
    let (store, _) =
        objseg::create_in_mode(m.clone() as Arc<dyn Media>, place(cache), false, durable).unwrap();
    if let Some(l) = store.flush_log() {
        l.set_put_timeout(Duration::from_millis(1));
        // odd seeds put each FLUSH group's log in pieces of at most 12 KiB,
        // at once (RADOS: 60 KiB, docs/objects.md §4.6)
        l.set_piece_bytes(if seed % 2 == 1 { 12 << 10 } else { 0 });
    }
    let vol = Volume::open(store.media(), &open_opts(&store)).unwrap();
    if durable {
        // what `serve` does before it answers a FLUSH
        vol.checkpoint().unwrap();
        store.checkpoint_now().unwrap();
    }
    let n = vol.size_bytes() / BS;
    let mut history: Vec<HashSet<u64>> = vec![HashSet::new(); n as usize];
    let mut latest = vec![0u64; n as usize];
    let mut flushed = vec![0u64; n as usize];
    let mut acked = 0;
    // every write in order: (block, version, acknowledged)
    let mut stream: Vec<(u64, u64, bool)> = Vec::new();
    m.cut_at_op(m.ops() + rng.gen_range(50..2500));
    let mut ver = 0;
    let mut down = false;
    for i in 0..4000 {
        if rng.gen_ratio(1, 150) {
            down = !rng.gen_ratio(1, 3);
            objects.set_unreachable(down);
        }
        let mut undo = None;
        let r = if rng.gen_ratio(1, 12) {
            vol.flush().map(|_| {
                flushed.clone_from(&latest);
                acked += 1;
            })
        } else {
            // hot and cold: GC has victims of every kind
            let lba = if rng.gen_bool(0.7) {
                rng.gen_range(0..n / 8)
            } else {
                rng.gen_range(0..n)
            };
            ver += 1;
            history[lba as usize].insert(ver);
            undo = Some((lba, latest[lba as usize]));
            latest[lba as usize] = ver;
            stream.push((lba, ver, true));
            vol.write(lba * BS, &content(lba, ver), false)
        };
        if let Err(e) = r {
            if m.is_power_off() {
                break;
            }
            if durable && vol.failure().is_some() {
                // a FLUSH log PUT failed: the volume stopped (EIO); the
                // host vanishes with it
                if let Some((lba, prev)) = undo {
                    latest[lba as usize] = prev;
                    stream.last_mut().unwrap().2 = false;
                }
                break;
            }
            // with the store down, GC cannot read a victim that is only in
            // the store: the write fails (it may or may not have landed; the
            // version stays possible, the floor stays what it was)
            assert!(
                down,
                "seed {seed} op {i}: {e} with the power on and the store up"
            );
            if let Some((lba, prev)) = undo {
                latest[lba as usize] = prev;
                stream.last_mut().unwrap().2 = false;
            }
        }
    }
    let uploaded = store
        .stats()
        .uploaded_objects
        .load(std::sync::atomic::Ordering::Relaxed);
    // the cut: the old mount is gone as a killed process is
    store.halt();
    drop(vol);
    drop(store);
    objects.set_unreachable(false);
    // the store as the vanished host left it
    let left = Arc::new(objects.snapshot());
    // (a restore writes to the store it mounts: each gets its own copy)
    let left_again = left.snapshot();
    let img = SimMedia::from_image(m.crash_image(Loss::Subset, seed));
    let m2: Arc<dyn Media> = Arc::new(img);
    // odd seeds come back with a cache of every segment: the attach then
    // checks copies the mount before punched (cache 0 or 1), perhaps
    // halfway when the cut came
    let again = if seed % 2 == 1 { 1000 } else { cache };
    let (store, rep) = objseg::open(m2.clone(), place(again))
        .unwrap_or_else(|e| panic!("seed {seed}: attach after the cut: {e}"));
    // staging copies of stored segments trusted again (their CRC the
    // object's): every read of them below must still be right
    KEPT.fetch_add(rep.cache_kept as u64, std::sync::atomic::Ordering::Relaxed);
    DROPPED.fetch_add(
        rep.cache_dropped as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    assert_eq!(store.flush_log().is_some(), durable, "the mode is kept");
    let vol = Volume::open(store.media(), &open_opts(&store))
        .unwrap_or_else(|e| panic!("seed {seed}: mount after the cut: {e}"));
    let mut b = vec![0u8; BS as usize];
    for lba in 0..n {
        vol.read(lba * BS, &mut b)
            .unwrap_or_else(|e| panic!("seed {seed}: read of block {lba}: {e}"));
        let (l, v) = (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
        );
        let ok = if v == 0 && l == 0 {
            b.iter().all(|&x| x == 0) && flushed[lba as usize] == 0
        } else {
            l == lba
                && v >= flushed[lba as usize]
                && history[lba as usize].contains(&v)
                && b == content(lba, v)
        };
        assert!(
            ok,
            "seed {seed}: block {lba} reads ({l}, {v}); flushed version {}, latest {}",
            flushed[lba as usize], latest[lba as usize]
        );
    }
    // and the volume goes on: more writes, a clean close, a clean check
    for lba in 0..n.min(64) {
        vol.write(lba * BS, &content(lba, 1 << 40), false).unwrap();
    }
    vol.close().unwrap();
    drop(vol);
    assert!(
        store.wait_idle(Duration::from_secs(5)),
        "seed {seed}: uploads stuck"
    );
    let r = sluice::check::check_store(&*m2, Some(&*store), &[], &mut |_| {});
    assert!(
        r.is_clean(),
        "seed {seed}: check after the cut: {:?}",
        r.damage
    );
    assert!(
        store.verify_objects().is_empty(),
        "seed {seed}: {:?}",
        store.verify_objects()
    );
    store.close().unwrap();
    drop(store);
    let moved = host_loss(seed, &left, &stream, n, durable.then_some(&flushed[..])).is_some();
    let damaged = durable && damaged_log_host_loss(seed, &left_again, &stream, n);
    (acked, uploaded, moved, damaged)
}

/// Store-durable mode: the store as the vanished host left it, but with the
/// last log object the replay applied damaged where its own CRC cannot see
/// it (one byte of a stored line flipped, the object's CRC made to match):
/// only the record's CRC tells. The other host's replay must end there,
/// naming it, and mount a prefix of the write stream (never the damaged
/// bytes as data). false: no log object was replayed to damage.
fn damaged_log_host_loss(
    seed: u64,
    left: &MemObjects,
    stream: &[(u64, u64, bool)],
    n: u64,
) -> bool {
    use sluice::format::objname::ObjName;
    use sluice::media::objects::ObjectStore;
    let dir = tempfile::tempdir().unwrap();
    let Ok(r) = objseg::recover::restore(&left.snapshot(), dir.path(), true) else {
        return false;
    };
    let Some(last) = r.log.as_ref().and_then(|l| l.last_applied) else {
        return false;
    };
    let names: Vec<String> = left
        .list("log/")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(|name| matches!(ObjName::parse(name), Ok(ObjName::Log { seq, .. }) if seq == last))
        .collect();
    assert_eq!(names.len(), 1, "seed {seed}: log object {last}: {names:?}");
    let name = &names[0];
    let mut b = left.get(name).unwrap();
    let l = b.len();
    // the last byte of its last stored line; never made zero (a stored
    // line of zeros is refused by another check)
    b[l - 5] ^= if b[l - 5] == 0x80 { 0x01 } else { 0x80 };
    let crc = crc32c::crc32c(&b[..l - 4]);
    b[l - 4..].copy_from_slice(&crc.to_le_bytes());
    let bad = Arc::new(left.snapshot());
    bad.poke(name, b);
    let stop = host_loss(seed, &bad, stream, n, None)
        .unwrap_or_else(|| panic!("seed {seed}: no mount with {name} damaged"));
    assert!(
        stop.contains(name.as_str()) && stop.contains("damaged"),
        "seed {seed}: {name} damaged, yet the replay ended: {stop}"
    );
    true
}

/// The cache directory is lost as well: rebuild it from `left` elsewhere,
/// mount, and check the volume is a prefix of `stream`. None: the store
/// held no checkpoint object yet (then the refusal must say so); else why
/// the FLUSH log replay ended (store-durable mode; empty otherwise).
/// `flushed` (store-durable mode): the version of each block the last
/// acknowledged FLUSH covered; the other host must hold it or a later one.
fn host_loss(
    seed: u64,
    left: &Arc<MemObjects>,
    stream: &[(u64, u64, bool)],
    n: u64,
    flushed: Option<&[u64]>,
) -> Option<String> {
    use sluice::media::objects::ObjectStore;
    let dir = tempfile::tempdir().unwrap();
    let r = match objseg::recover::restore(&**left, dir.path(), true) {
        Ok(r) => r,
        Err(e) => {
            assert!(
                left.list("ckpt/").unwrap().is_empty(),
                "seed {seed}: no mount from the store alone: {e}"
            );
            return None;
        }
    };
    let media: Arc<dyn Media> =
        Arc::new(sluice::media::FileMedia::open(&dir.path().join("volume"), false).unwrap());
    let place = objseg::Place {
        objects: left.clone(),
        dir: dir.path(),
        takeover: false,
        opts: opts(0),
    };
    let (store, _) = objseg::open(media.clone(), place)
        .unwrap_or_else(|e| panic!("seed {seed}: attach of the rebuilt cache: {e} ({r:?})"));
    let vol = Volume::open(media, &open_opts(&store))
        .unwrap_or_else(|e| panic!("seed {seed}: mount of the rebuilt cache: {e} ({r:?})"));
    let mut seen = vec![0u64; n as usize];
    let mut b = vec![0u8; BS as usize];
    for lba in 0..n {
        vol.read(lba * BS, &mut b)
            .unwrap_or_else(|e| panic!("seed {seed}: moved host, block {lba}: {e}"));
        let v = u64::from_le_bytes(b[8..16].try_into().unwrap());
        assert!(
            b.iter().all(|&x| x == 0) || b == content(lba, v),
            "seed {seed}: moved host, block {lba} holds something never written"
        );
        seen[lba as usize] = v;
        if let Some(f) = flushed {
            assert!(
                v >= f[lba as usize],
                "seed {seed}: moved host, block {lba} holds version {v}, a FLUSH acknowledged version {} ({r:?})",
                f[lba as usize]
            );
        }
    }
    // the cut: the newest write whose data is there
    let k = seen.iter().copied().max().unwrap_or(0);
    let mut want: Vec<Vec<(u64, bool)>> = vec![Vec::new(); n as usize];
    for &(lba, v, sure) in stream.iter().filter(|w| w.1 <= k) {
        want[lba as usize].push((v, sure));
    }
    for lba in 0..n as usize {
        // what it holds was written there, and no acknowledged write of it
        // up to the cut came after (a failed write may be in or out)
        let v = seen[lba];
        let pos = if v == 0 {
            Some(0)
        } else {
            want[lba].iter().position(|w| w.0 == v).map(|p| p + 1)
        };
        let Some(pos) = pos else {
            panic!("seed {seed}: moved host, block {lba} holds version {v}, never written there before {k}");
        };
        assert!(
            want[lba][pos..].iter().all(|w| !w.1),
            "seed {seed}: moved host, block {lba} holds version {v}, but {:?} came before the cut at {k} ({r:?})",
            &want[lba][pos..]
        );
    }
    vol.close().unwrap();
    Some(r.log.map(|l| l.stop).unwrap_or_default())
}

/// The local-log seeds (`SLUICE_OBJ_CRASH_SEEDS`, default 32), the volume
/// made with an intent log ring of `intent_log` bytes or none: (seeds,
/// flushes acknowledged before the cuts, segments uploaded, seeds mounted
/// from the store alone).
fn local_log_sweep(intent_log: Option<u64>) -> (u64, u64, u64, u64) {
    let seeds: u64 = std::env::var("SLUICE_OBJ_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let (mut acked, mut uploaded, mut moved) = (0, 0, 0);
    for seed in 0..seeds {
        let (a, u, m, _) = run_with(seed, false, intent_log);
        acked += a;
        uploaded += u;
        moved += m as u64;
    }
    (seeds, acked, uploaded, moved)
}

#[test]
fn power_cuts_keep_every_flushed_write_of_a_volume_on_objects() {
    let (seeds, acked, uploaded, moved) = local_log_sweep(None);
    let kept = KEPT.load(std::sync::atomic::Ordering::Relaxed);
    let dropped = DROPPED.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{seeds} seeds: {acked} flushes acknowledged before the cuts, {uploaded} segments uploaded, {moved} mounted from the store alone, staging copies kept {kept} dropped {dropped} (all tests of this binary so far)"
    );
    // the cuts leave whole copies to keep and broken ones to drop
    assert!(kept > 0 && dropped > 0, "kept {kept}, dropped {dropped}");
    // most cuts come after a checkpoint object
    assert!(
        moved * 2 >= seeds,
        "{moved} of {seeds} seeds mounted from the store"
    );
    // the histories reach the store, not only the staging file
    assert!(uploaded > seeds * 3, "{uploaded} uploads in {seeds} seeds");
}

#[test]
fn power_cuts_keep_every_flushed_write_of_a_volume_on_objects_with_an_intent_log() {
    // the local-log mode as docs/objects.md §4.8 measures it: FLUSHes
    // answered from a ring in the metadata file (its records name data
    // written at their places in the open segment), so the power cut
    // lands on open chunks whose blocks only the ring vouches for
    let (seeds, acked, uploaded, moved) = local_log_sweep(Some(256 << 10));
    eprintln!(
        "intent log: {seeds} seeds: {acked} flushes acknowledged before the cuts, {uploaded} segments uploaded, {moved} mounted from the store alone"
    );
    assert!(
        moved * 2 >= seeds,
        "{moved} of {seeds} seeds mounted from the store"
    );
    assert!(uploaded > seeds * 3, "{uploaded} uploads in {seeds} seeds");
    assert!(
        acked > seeds,
        "{acked} flushes acknowledged in {seeds} seeds"
    );
}

#[test]
fn power_cuts_and_host_loss_keep_every_flushed_write_in_the_store_durable_mode() {
    let seeds: u64 = std::env::var("SLUICE_OBJ_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let (mut acked, mut moved, mut damaged) = (0, 0, 0);
    for seed in 0..seeds {
        let (a, _, m, d) = run(seed, true);
        acked += a;
        moved += m as u64;
        damaged += d as u64;
    }
    eprintln!("store-durable: {seeds} seeds: {acked} flushes acknowledged, {moved} mounted from the store alone, {damaged} mounted again with their last replayed log object damaged");
    // most seeds replay a log object: the damaged-record case runs
    assert!(
        damaged * 2 >= seeds,
        "{damaged} of {seeds} seeds had a replayed log object to damage"
    );
    // the epoch's first checkpoint object is stored before any write
    assert_eq!(
        moved, seeds,
        "{moved} of {seeds} seeds mounted from the store"
    );
    assert!(
        acked > seeds,
        "{acked} flushes acknowledged in {seeds} seeds"
    );
}
