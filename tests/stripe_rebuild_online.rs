//! Rebuilding a stripe set member while the volume takes writes (issue 20
//! item 5, docs/stripes.md §6 "Online"). A rebuild runs on the volume's own
//! thread (`Volume::start_rebuild`) while another thread writes random
//! blocks and flushes the whole time; afterwards a member other than the
//! rebuilt one is taken away and every block reads back against the model
//! (a piece the rebuild wrote stale over newer data shows as EIO or wrong
//! bytes). Then power is cut at random points of such a run: the next mount
//! resumes the rebuild from its record, and every flushed write reads back,
//! part rebuilt, finished, and with another member gone.

use rand::{Rng, SeedableRng};
use sluice::media::{FileMedia, Loss, Media, SimMedia};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;
const UNIT: u64 = 16 << 10;
const MEMBER: u64 = 12 << 20;
/// Members of the small set the race test writes while rebuilding.
const SMALL: u64 = 3 << 20;

/// A member whose large reads (the rebuild's: a unit or a span of rows)
/// wait, while `slow` is on, after reading and before returning, until some
/// member is written in the same member byte range (rows lie at the same
/// offsets on every member), or `WAIT` passes. That puts a write going on
/// into every window between a rebuild's read of a row and its write of the
/// row's piece on the new member, whenever the writer writes that row at
/// all; with the fence the writer cannot (its write waits for the batch),
/// and the read returns after `WAIT`.
struct Slow {
    inner: FileMedia,
    slow: Arc<AtomicBool>,
    big_reads: Arc<AtomicU64>,
}

const WAIT: Duration = Duration::from_millis(40);

/// Member writes, (start, end, number), the last few thousand.
static WRITES: parking_lot::Mutex<Vec<(u64, u64, u64)>> = parking_lot::Mutex::new(Vec::new());
static WRITE_NO: AtomicU64 = AtomicU64::new(0);
/// Reads a write landed in (the window was hit).
static HIT: AtomicU64 = AtomicU64::new(0);

impl Media for Slow {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if buf.len() < UNIT as usize || !self.slow.load(Ordering::Relaxed) {
            return self.inner.read_at(buf, offset);
        }
        self.big_reads.fetch_add(1, Ordering::Relaxed);
        let seen = WRITE_NO.load(Ordering::SeqCst);
        self.inner.read_at(buf, offset)?;
        let end = offset + buf.len() as u64;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < WAIT {
            let hit = WRITES
                .lock()
                .iter()
                .any(|&(a, b, n)| n >= seen && a < end && offset < b);
            if hit {
                HIT.fetch_add(1, Ordering::Relaxed);
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let r = self.inner.write_at(buf, offset);
        let n = WRITE_NO.fetch_add(1, Ordering::SeqCst);
        let mut w = WRITES.lock();
        if w.len() >= 4096 {
            w.drain(..2048);
        }
        w.push((offset, offset + buf.len() as u64, n));
        r
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

fn files(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("m{i}.img"))).collect()
}

fn devices(
    paths: &[PathBuf],
    slow: &Arc<AtomicBool>,
    big: &Arc<AtomicU64>,
) -> Vec<(String, Arc<dyn Media>)> {
    paths
        .iter()
        .map(|p| {
            let m: Arc<dyn Media> = Arc::new(Slow {
                inner: FileMedia::open(p, false).unwrap(),
                slow: slow.clone(),
                big_reads: big.clone(),
            });
            (p.display().to_string(), m)
        })
        .collect()
}

fn random_block(rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    rng.fill(&mut b[..]);
    b
}

/// Random writes of 1-3 blocks into the first `span` blocks, a flush every
/// `every` writes, until `done` (and at least `min` writes); each block's
/// value in `want` (all flushed at the end).
fn write_until(
    vol: &Volume,
    seed: u64,
    span: u64,
    every: usize,
    min: usize,
    done: &AtomicBool,
    want: &mut HashMap<u64, Vec<u8>>,
) -> usize {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut i = 0;
    while i < min || !done.load(Ordering::Acquire) {
        let b = rng.gen_range(0..span);
        let n = rng.gen_range(1..4u64).min(span - b);
        let mut buf = Vec::with_capacity(n as usize * BS);
        for _ in 0..n {
            buf.extend(random_block(&mut rng));
        }
        vol.write(b * BS as u64, &buf, false).unwrap();
        for (k, c) in buf.chunks(BS).enumerate() {
            want.insert(b + k as u64, c.to_vec());
        }
        i += 1;
        if i % every == 0 {
            vol.flush().unwrap();
        }
    }
    vol.flush().unwrap();
    i
}

fn verify(vol: &Volume, want: &HashMap<u64, Vec<u8>>, what: &str) {
    let mut buf = vec![0u8; BS];
    let mut bad = Vec::new();
    for (b, v) in want {
        match vol.read(*b * BS as u64, &mut buf) {
            Ok(()) if buf == *v => {}
            Ok(()) => bad.push(format!("block {b}: wrong bytes")),
            Err(e) => bad.push(format!("block {b}: {e}")),
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} blocks: {:?}",
        bad.len(),
        want.len(),
        &bad[..bad.len().min(8)]
    );
}

/// A 4+1 set with data on it; member 2 replaced by a new file and rebuilt
/// by the volume's rebuild thread while a writer thread writes and flushes
/// the whole time (the rebuild's batch reads slowed, so writes land between
/// a batch's reads and its write). Then, with each of two other members
/// gone in turn, every block reads back as last written. Three rounds, a
/// new member each. Without the fence (mutation `rebuild-unfenced`) a
/// write inside a batch's window is overwritten on the new member by the
/// piece rebuilt from the row as it was before the write.
#[test]
fn a_rebuild_while_writes_go_on_leaves_no_stale_piece() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = files(dir.path(), 5);
    let slow = Arc::new(AtomicBool::new(false));
    let big = Arc::new(AtomicU64::new(0));
    {
        let devs = paths
            .iter()
            .map(|p| {
                let m: Arc<dyn Media> = Arc::new(FileMedia::create(p, SMALL).unwrap());
                (p.display().to_string(), m)
            })
            .collect();
        let c = CreateOptions {
            segment_bytes: 256 << 10,
            ..Default::default()
        };
        Volume::format_striped(devs, 1, UNIT, &c).unwrap();
    }
    let mut want = HashMap::new();
    let span;
    {
        let vol =
            Volume::open_striped(devices(&paths, &slow, &big), &OpenOptions::default()).unwrap();
        // a small volume (about 40 segments), a quarter of it live: a
        // rebuild batch (16 live segments at most) holds most of the live
        // ones, the open segments among them
        span = vol.size_bytes() / BS as u64 * 2 / 3;
        let stop = AtomicBool::new(true);
        write_until(&vol, 1, span, 40, span as usize / 2, &stop, &mut want);
        vol.close().unwrap();
    }
    let lost = 2usize;
    for round in 0..6u64 {
        let new = dir.path().join(format!("new{round}.img"));
        FileMedia::create(&new, SMALL).unwrap();
        let rest: Vec<PathBuf> = (0..5)
            .filter(|&i| i != lost)
            .map(|i| paths[i].clone())
            .collect();
        let vol = Volume::replace_member(
            devices(&rest, &slow, &big),
            lost as u32,
            devices(std::slice::from_ref(&new), &slow, &big)
                .pop()
                .unwrap(),
            &OpenOptions::default(),
        )
        .unwrap();
        let done = AtomicBool::new(false);
        let before = big.load(Ordering::Relaxed);
        slow.store(true, Ordering::Relaxed);
        let (writes, p) = std::thread::scope(|s| {
            let w = s.spawn(|| write_until(&vol, 100 + round, span, 16, 200, &done, &mut want));
            vol.start_rebuild(None).unwrap();
            let p = vol.wait_rebuild().expect("started");
            done.store(true, Ordering::Release);
            (w.join().unwrap(), p)
        });
        slow.store(false, Ordering::Relaxed);
        let p = p.unwrap();
        assert_eq!(p.next_segment, p.segment_count, "round {round}: {p:?}");
        assert!(p.copied > 0, "round {round}: {p:?}");
        let st = vol.stripe_set().unwrap().status();
        assert!(!st.degraded(), "round {round}: {}", st.describe());
        assert!(
            big.load(Ordering::Relaxed) > before,
            "round {round}: the rebuild read in batches"
        );
        eprintln!(
            "round {round}: {writes} writes during the rebuild ({} copied, {} marked), {} rebuild reads a write landed behind",
            p.copied, p.skipped, HIT.swap(0, Ordering::Relaxed)
        );
        vol.close().unwrap();
        drop(vol);
        paths[lost] = new;
        for gone in [0usize, 3] {
            let some: Vec<PathBuf> = (0..5)
                .filter(|&i| i != gone)
                .map(|i| paths[i].clone())
                .collect();
            let vol = Volume::open_striped(
                devices(&some, &slow, &big),
                &OpenOptions {
                    read_only: true,
                    background: false,
                    ..Default::default()
                },
            )
            .unwrap();
            verify(
                &vol,
                &want,
                &format!("round {round}: rebuilt while written, member {gone} gone"),
            );
        }
    }
}

/// `close` stops a rebuild running on the volume's thread between two
/// batches; the record stays, so the next mount resumes where it stopped
/// (not at 0) and finishes.
#[test]
fn close_stops_the_rebuild_and_the_next_mount_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    let slow = Arc::new(AtomicBool::new(false));
    let big = Arc::new(AtomicU64::new(0));
    {
        let devs = paths
            .iter()
            .map(|p| {
                let m: Arc<dyn Media> = Arc::new(FileMedia::create(p, MEMBER).unwrap());
                (p.display().to_string(), m)
            })
            .collect();
        let c = CreateOptions {
            segment_bytes: 256 << 10,
            ..Default::default()
        };
        Volume::format_striped(devs, 1, UNIT, &c).unwrap();
    }
    let mut want = HashMap::new();
    {
        let vol =
            Volume::open_striped(devices(&paths, &slow, &big), &OpenOptions::default()).unwrap();
        let span = vol.size_bytes() / BS as u64 / 2;
        let stop = AtomicBool::new(true);
        write_until(&vol, 5, span, 40, span as usize, &stop, &mut want);
        vol.close().unwrap();
    }
    let new = dir.path().join("new.img");
    FileMedia::create(&new, MEMBER).unwrap();
    let rest: Vec<PathBuf> = [0, 2, 3, 4].iter().map(|&i| paths[i].clone()).collect();
    let newdev = || {
        devices(std::slice::from_ref(&new), &slow, &big)
            .pop()
            .unwrap()
    };
    let vol = Volume::replace_member(
        devices(&rest, &slow, &big),
        1,
        newdev(),
        &OpenOptions::default(),
    )
    .unwrap();
    // slow enough (one segment's pieces per 10 ms) that close comes first
    let seg_piece = 4 * UNIT;
    vol.start_rebuild(Some(seg_piece * 100)).unwrap();
    let t0 = std::time::Instant::now();
    let set = vol.stripe_set().unwrap().clone();
    while set.status().rebuild.unwrap().next_segment == 0 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = std::time::Instant::now();
    vol.close().unwrap();
    assert!(
        t1.elapsed() < Duration::from_secs(2),
        "close waited {:?} for the rebuild",
        t1.elapsed()
    );
    let at = set.status().rebuild.expect("not finished");
    assert!(at.next_segment < at.segment_count, "{at:?}");
    assert!(vol.wait_rebuild().is_none(), "close took the thread");
    drop(vol);
    drop(set);
    let vol = Volume::replace_member(
        devices(&rest, &slow, &big),
        1,
        newdev(),
        &OpenOptions::default(),
    )
    .unwrap();
    let again = vol.stripe_set().unwrap().status().rebuild.unwrap();
    assert!(
        again.next_segment >= at.next_segment && again.next_segment > 0,
        "resumed from the record: {again:?} (stopped at {at:?})"
    );
    verify(&vol, &want, "part rebuilt");
    vol.start_rebuild(None).unwrap();
    let p = vol.wait_rebuild().unwrap().unwrap();
    assert_eq!(p.next_segment, p.segment_count);
    vol.close().unwrap();
    drop(vol);
    let some: Vec<PathBuf> = [
        new.clone(),
        paths[2].clone(),
        paths[3].clone(),
        paths[4].clone(),
    ]
    .to_vec();
    let vol = Volume::open_striped(
        devices(&some, &slow, &big),
        &OpenOptions {
            read_only: true,
            background: false,
            ..Default::default()
        },
    )
    .unwrap();
    verify(&vol, &want, "resumed and finished, member 0 gone");
}

/// What a block may read after a power cut: its value at the last flush
/// that returned Ok, or any value written after that flush began.
#[derive(Default, Clone)]
struct Model {
    acked: HashMap<u64, Vec<u8>>,
    pending: HashMap<u64, Vec<Vec<u8>>>,
}

impl Model {
    fn write(&mut self, b: u64, v: Vec<u8>) {
        self.pending.entry(b).or_default().push(v);
    }
    /// A flush returned Ok: everything written before it is durable.
    fn flushed(&mut self) {
        for (b, vs) in self.pending.drain() {
            self.acked.insert(b, vs.last().expect("a value").clone());
        }
    }
    /// The first acknowledged block (lowest number) that does not read
    /// back as the model allows.
    fn first_bad(&self, vol: &Volume) -> Option<String> {
        let mut buf = vec![0u8; BS];
        let mut blocks: Vec<u64> = self.acked.keys().copied().collect();
        blocks.sort_unstable();
        for b in blocks {
            let v = &self.acked[&b];
            if let Err(e) = vol.read(b * BS as u64, &mut buf) {
                return Some(format!("block {b}: {e}"));
            }
            if buf != *v && !self.pending.get(&b).is_some_and(|p| p.contains(&buf)) {
                let zero = buf.iter().all(|&x| x == 0);
                return Some(format!(
                    "block {b} reads back wrong (zeros: {zero}, crc {:08x}; acked crc {:08x}, {} pending)",
                    crc32c::crc32c(&buf),
                    crc32c::crc32c(v),
                    self.pending.get(&b).map_or(0, |p| p.len())
                ));
            }
        }
        None
    }
}

/// A RAID-5 of 5 `CUT_M`-byte parts of one `SimMedia` (`CUT_N` parts: the
/// sixth is the replacement), 300 random writes flushed and closed, then
/// member `CUT_LOST` replaced by part 5: the rebuild starts at this open.
/// The rounds of the online power-cut tests start here.
struct Rebuilding {
    sim: Arc<SimMedia>,
    vol: Volume,
    model: Model,
    rng: rand::rngs::SmallRng,
    /// Writes go to blocks below this (a third of the volume).
    span: u64,
}

fn rebuilding(k: u64, det: &OpenOptions) -> Rebuilding {
    let (m, n, lost) = (CUT_M, CUT_N, CUT_LOST);
    let sim = Arc::new(SimMedia::new(m * n as u64));
    let ps = parts(&sim, n, m);
    let c = CreateOptions {
        segment_bytes: 256 << 10,
        uuid: Some([k as u8 + 1; 16]),
        ..Default::default()
    };
    Volume::format_striped(named(&ps, &[0, 1, 2, 3, 4]), 1, UNIT, &c).unwrap();
    let mut model = Model::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(k);
    let span;
    {
        let vol = Volume::open_striped(named(&ps, &[0, 1, 2, 3, 4]), det).unwrap();
        span = vol.size_bytes() / BS as u64 / 3;
        for _ in 0..300 {
            let b = rng.gen_range(0..span);
            let v = random_block(&mut rng);
            vol.write(b * BS as u64, &v, false).unwrap();
            model.write(b, v);
        }
        vol.flush().unwrap();
        model.flushed();
        vol.close().unwrap();
    }
    let vol = Volume::replace_member(
        named(&ps, &[0, 2, 3, 4]),
        lost as u32,
        named(&ps, &[5]).pop().unwrap(),
        det,
    )
    .unwrap();
    Rebuilding {
        sim,
        vol,
        model,
        rng,
        span,
    }
}

fn parts(sim: &Arc<SimMedia>, n: usize, len: u64) -> Vec<Arc<dyn Media>> {
    (0..n)
        .map(|i| Arc::new(sim.part(i as u64 * len, len)) as Arc<dyn Media>)
        .collect()
}

fn named(ps: &[Arc<dyn Media>], which: &[usize]) -> Vec<(String, Arc<dyn Media>)> {
    which
        .iter()
        .map(|&i| (format!("sim{i}"), ps[i].clone()))
        .collect()
}

/// Power cut at random points of a rebuild running on the volume's thread
/// while a writer thread writes and flushes (all members and the new one
/// parts of one simulated disk: one numbered order of operations, one cut;
/// each part its own cache). After the cut (cached writes kept in part,
/// all, or none, torn): the mount resumes the rebuild from its record,
/// every flushed write reads back part rebuilt; the rebuild finishes; then
/// with each of three other members gone every flushed write reads back.
///
/// The cut falls a few hundred operations after a moment drawn from the
/// time the quickest uncut rebuild so far took (round 0's, then any round
/// whose rebuild ended before its cut). Rounds go on until
/// `SLUICE_ONLINE_REBUILD_CUTS` cuts (6) landed in a rebuild, at most
/// eight times as many rounds; `SLUICE_ONLINE_REBUILD_SAVE=DIR` saves each
/// cut round's crash image, model and media operations for
/// `replay_an_online_rebuild_cut`. Round 0 must flush no partial row
/// unprotected (it counted 62 while scratch lanes leaked).
///
/// Findings 6 (a completed row's tags voided in hash order), 7 (a mount
/// with the member being rebuilt did not resync:
/// `a_cut_in_a_flush_while_rebuilding_then_another_member_lost`) and 8
/// (scratch lanes leaked: the last row of every segment kept its lane until
/// a wipe, so with no housekeeper most FLUSHes wrote their running parity
/// in place, and a cut on the set being rebuilt lost acknowledged blocks,
/// some read back older) are fixed (docs/stripes.md §0); it failed within
/// 10-40 cuts before the last. A longer run by hand:
/// `SLUICE_ONLINE_REBUILD_CUTS=30 cargo test --release --features rados
/// --test stripe_rebuild_online a_power_cut_during -- --nocapture`.
#[test]
fn a_power_cut_during_an_online_rebuild_resumes_and_loses_no_flushed_write() {
    let cuts: u64 = std::env::var("SLUICE_ONLINE_REBUILD_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let rounds = 8 * cuts + 1;
    let det = OpenOptions {
        background: false,
        ..Default::default()
    };
    let (mut cut_in_rebuild, mut resumed_mid, mut missed) = (0u64, 0u64, 0u64);
    let mut took = Duration::ZERO;
    for k in 0..rounds {
        if cut_in_rebuild >= cuts {
            break;
        }
        let Rebuilding {
            sim,
            vol,
            model,
            mut rng,
            span,
        } = rebuilding(k, &det);
        let start_ops = sim.ops();
        // the cut: a few hundred operations after a moment drawn from the
        // time an uncut run's rebuild took (round 0), so cuts fall early,
        // mid-way and late in the rebuild however fast the writer goes
        // (the rebuild is paced, the writer is not)
        let at = took.mul_f64(rng.gen_range(0.0..1.0));
        let after_ops = rng.gen_range(1..500u64);
        let mut cut = 0;
        let save = std::env::var("SLUICE_ONLINE_REBUILD_SAVE").ok();
        if save.is_some() {
            sim.record();
        }
        let done = AtomicBool::new(false);
        let wseed = k * 31 + 7;
        let (rebuilt, model_after) = std::thread::scope(|s| {
            let w = s.spawn(|| {
                let mut m = model.clone();
                let mut rng = rand::rngs::SmallRng::seed_from_u64(wseed);
                let mut i = 0;
                while !done.load(Ordering::Acquire) {
                    let b = rng.gen_range(0..span);
                    let v = random_block(&mut rng);
                    m.write(b, v.clone());
                    if vol.write(b * BS as u64, &v, false).is_err() {
                        break;
                    }
                    i += 1;
                    if i % 8 == 0 {
                        sim.mark(1 << 62);
                        if vol.flush().is_err() {
                            break;
                        }
                        sim.mark(1 << 63);
                        m.flushed();
                    }
                }
                m
            });
            // pieces at 32 MiB/s: the rebuild spans the writer's work
            let t0 = std::time::Instant::now();
            vol.start_rebuild(Some(32 << 20)).unwrap();
            if k > 0 {
                std::thread::sleep(at);
                cut = sim.ops() + after_ops;
                sim.cut_at_op(cut);
            }
            let r = vol.wait_rebuild().expect("started");
            if k == 0 {
                took = t0.elapsed();
                let unprotected = vol.stripe_set().unwrap().status().unprotected_flushes;
                eprintln!(
                    "round 0 (uncut): the rebuild took {took:?}, {unprotected} flushes found no free scratch lane"
                );
                // (62 before docs/stripes.md §0 finding 8 was fixed)
                assert_eq!(unprotected, 0, "scratch lanes ran out");
            } else if r.is_ok() {
                // a rebuild that ended before its cut: later cuts are
                // drawn from the quickest seen (a slow round 0 on a
                // loaded machine left most cuts after the rebuild)
                took = took.min(t0.elapsed());
            }
            done.store(true, Ordering::Release);
            (r, w.join().unwrap())
        });
        let model = model_after;
        sim.freeze();
        if let (Some(dir), Err(_)) = (&save, &rebuilt) {
            save_events(
                Path::new(dir),
                k,
                &sim,
                vol.stripe_set().unwrap(),
                start_ops,
            );
        }
        drop(vol);
        if rebuilt.is_ok() {
            // uncut (round 0), or the rebuild ended before the cut
            missed += (k > 0) as u64;
            continue;
        }
        cut_in_rebuild += 1;
        let loss = [Loss::Subset, Loss::KeepAll, Loss::DropAll][k as usize % 3];
        let what = format!(
            "round {k}: cut at op {} of the run ({after_ops} after {at:?} of {took:?}), {loss:?}",
            cut - start_ops
        );
        let img = sim.crash_image(loss, k);
        if let Some(dir) = &save {
            save_cut(Path::new(dir), k, &img, &model);
        }
        match after_online_cut(img, &model, &what, false) {
            Ok(mid) => resumed_mid += mid as u64,
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!(
        "online rebuild power cuts: {cut_in_rebuild} crash points in a rebuild ({resumed_mid} resumed past segment 0), {missed} runs ended before their cut"
    );
    assert!(
        cut_in_rebuild * 2 >= cuts && (cuts < 20 || resumed_mid > 0),
        "{cut_in_rebuild} cuts of {rounds} rounds landed in a rebuild ({cuts} wanted), {resumed_mid} resumed mid-way"
    );
}

/// Parts of the online power-cut test's disk: members 0..5 of `CUT_M`
/// bytes, part 5 the new member of slot `CUT_LOST`.
const CUT_M: u64 = 8 << 20;
const CUT_N: usize = 6;
const CUT_LOST: usize = 1;

/// The online power-cut test after its cut: mount the crash image `img`
/// (the rebuild resumes from its record), check every acknowledged block
/// part rebuilt, finish the rebuild, check again, then with each of three
/// other members gone. Ok(true) when the record had moved past segment 0.
/// `trace`: print the rows of the segment a failure names
/// (`trace_rows`).
fn after_online_cut(img: Vec<u8>, model: &Model, what: &str, trace: bool) -> Result<bool, String> {
    let (m, n, lost) = (CUT_M, CUT_N, CUT_LOST);
    let det = OpenOptions {
        background: false,
        ..Default::default()
    };
    let img0 = img.clone();
    let after = Arc::new(SimMedia::from_image(img));
    let ps2 = parts(&after, n, m);
    let mut what = what.to_string();
    let fail = |what: &str,
                stage: &str,
                e: String,
                set: Option<&sluice::stripe_set::StripeSet>,
                now: Vec<u8>| {
        if let (true, Some(set)) = (trace, set) {
            trace_rows(&img0, &now, set, m, &e);
        }
        Err(format!("{what}: {stage}: {e}"))
    };
    let mut mid = false;
    let vol = match Volume::replace_member(
        named(&ps2, &[0, 2, 3, 4]),
        lost as u32,
        named(&ps2, &[5]).pop().unwrap(),
        &det,
    ) {
        Ok(vol) => {
            let p = vol.stripe_set().unwrap().status().rebuild.unwrap();
            mid = p.next_segment > 0;
            what = format!("{what}, resumed at segment {}", p.next_segment);
            if let Some(e) = model.first_bad(&vol) {
                return fail(
                    &what,
                    "part rebuilt",
                    e,
                    vol.stripe_set().map(|s| &**s),
                    after.current_image(),
                );
            }
            vol.start_rebuild(None).unwrap();
            let p = vol
                .wait_rebuild()
                .unwrap()
                .map_err(|e| format!("{what}: rebuild: {e}"))?;
            if p.next_segment != p.segment_count {
                return Err(format!("{what}: the rebuild stopped at {p:?}"));
            }
            vol
        }
        // cut while the record was being voided after the last mark:
        // the member is whole
        Err(e) if e.to_string().contains("whole") => {
            Volume::open_striped(named(&ps2, &[0, 5, 2, 3, 4]), &det)
                .map_err(|e| format!("{what}: mount whole: {e}"))?
        }
        Err(e) => {
            let all = named(&ps2, &[0, 5, 2, 3, 4]);
            let set = sluice::stripe_set::open::open(all).ok();
            return fail(
                &what,
                "resume",
                e.to_string(),
                set.as_deref(),
                after.current_image(),
            );
        }
    };
    if let Some(e) = model.first_bad(&vol) {
        return fail(
            &what,
            "rebuilt",
            e,
            vol.stripe_set().map(|s| &**s),
            after.current_image(),
        );
    }
    vol.close().map_err(|e| format!("{what}: close: {e}"))?;
    drop(vol);
    for gone in [0usize, 2, 4] {
        let img = after.current_image();
        let again = Arc::new(SimMedia::from_image(img));
        let ps3 = parts(&again, n, m);
        let members: Vec<usize> = [0usize, 5, 2, 3, 4]
            .into_iter()
            .filter(|&i| i != gone)
            .collect();
        let vol = Volume::open_striped(
            named(&ps3, &members),
            &OpenOptions {
                read_only: true,
                ..det.clone()
            },
        )
        .map_err(|e| format!("{what}: member {gone} gone: {e}"))?;
        if let Some(e) = model.first_bad(&vol) {
            let stage = format!("rebuilt, member {gone} gone");
            return fail(
                &what,
                &stage,
                e,
                vol.stripe_set().map(|s| &**s),
                after.current_image(),
            );
        }
    }
    Ok(mid)
}

/// Write round `k`'s media operations since `start` (numbered as the
/// cut counts them) to `dir/cutK.log`: each write's part, offset, length,
/// CRC and the rows it touches, scratch tags decoded; the writer's FLUSH
/// marks.
fn save_events(
    dir: &Path,
    k: u64,
    sim: &SimMedia,
    set: &sluice::stripe_set::StripeSet,
    start: u64,
) {
    use std::fmt::Write as _;
    std::fs::create_dir_all(dir).unwrap();
    let l = set.layout;
    let uuid = set.members()[0].ident.set_uuid;
    let sb = set.scratch_base();
    let mut out = String::new();
    let mut op = start;
    for e in sim.events() {
        match e {
            sluice::media::SimEvent::Mark(x) if x == 1 << 62 => out.push_str("FLUSH begins\n"),
            sluice::media::SimEvent::Mark(x) if x == 1 << 63 => out.push_str("FLUSH ok\n"),
            sluice::media::SimEvent::Mark(_) => {}
            sluice::media::SimEvent::Write { offset, data } => {
                op += 1;
                let (part, o) = (offset / CUT_M, offset % CUT_M);
                let _ = write!(
                    out,
                    "op {op}: part {part} write {o}+{} crc {:08x}",
                    data.len(),
                    crc32c::crc32c(&data)
                );
                if o >= l.member_offset && o < sb {
                    let r0 = (o - l.member_offset) / l.unit;
                    let r1 = (o + data.len() as u64 - 1 - l.member_offset) / l.unit;
                    let _ = write!(
                        out,
                        " rows {r0}..={r1} (col {})",
                        (o - l.member_offset) % l.unit / BS as u64
                    );
                } else if o >= sb {
                    match sluice::stripe_set::scratch::Tag::open(&data, &uuid) {
                        Some(t) => {
                            let _ = write!(
                                out,
                                " TAG row {} seq {} which {} covered {:?}",
                                t.row,
                                t.seq,
                                t.which,
                                t.covered
                                    .iter()
                                    .enumerate()
                                    .filter(|c| *c.1)
                                    .map(|c| c.0)
                                    .collect::<Vec<_>>()
                            );
                        }
                        None => out.push_str(" scratch, no tag"),
                    }
                }
                out.push('\n');
            }
            sluice::media::SimEvent::FlushPart { base, .. } => {
                op += 1;
                let _ = writeln!(out, "op {op}: part {} flush", base / CUT_M);
            }
            sluice::media::SimEvent::Flush => {
                op += 1;
                let _ = writeln!(out, "op {op}: flush");
            }
        }
    }
    std::fs::write(dir.join(format!("cut{k}.log")), out).unwrap();
}

/// Write round `k`'s crash image and model under `dir` (for
/// `replay_an_online_rebuild_cut`).
fn save_cut(dir: &Path, k: u64, img: &[u8], model: &Model) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("cut{k}.img")), img).unwrap();
    let mut b = Vec::new();
    let put = |b: &mut Vec<u8>, blk: u64, vs: &[&Vec<u8>]| {
        b.extend(blk.to_le_bytes());
        b.extend((vs.len() as u64).to_le_bytes());
        for v in vs {
            b.extend(v.iter());
        }
    };
    b.extend((model.acked.len() as u64).to_le_bytes());
    for (blk, v) in &model.acked {
        put(&mut b, *blk, &[v]);
    }
    for (blk, vs) in &model.pending {
        put(&mut b, *blk, &vs.iter().collect::<Vec<_>>());
    }
    std::fs::write(dir.join(format!("cut{k}.model")), b).unwrap();
}

fn load_model(path: &Path) -> Model {
    let b = std::fs::read(path).unwrap();
    let mut at = 0usize;
    let u = |at: &mut usize| {
        let v = u64::from_le_bytes(b[*at..*at + 8].try_into().unwrap());
        *at += 8;
        v
    };
    let acked = u(&mut at);
    let mut model = Model::default();
    let mut i = 0;
    while at < b.len() {
        let blk = u(&mut at);
        let n = u(&mut at) as usize;
        let vs: Vec<Vec<u8>> = (0..n)
            .map(|j| b[at + j * BS..at + (j + 1) * BS].to_vec())
            .collect();
        at += n * BS;
        if i < acked {
            model.acked.insert(blk, vs[0].clone());
        } else {
            model.pending.insert(blk, vs);
        }
        i += 1;
    }
    model
}

/// A tracing aid, run by hand: the part after the cut of a round the
/// online power-cut test saved (`SLUICE_ONLINE_REBUILD_SAVE=DIR`), from
/// `SLUICE_REPLAY=DIR/cutK` (`.img`, `.model`), deterministic, printing
/// the rows of the segment a failure names.
#[test]
#[ignore = "a tracing aid, run by hand"]
fn replay_an_online_rebuild_cut() {
    let Ok(base) = std::env::var("SLUICE_REPLAY") else {
        panic!("set SLUICE_REPLAY=DIR/cutK");
    };
    let img = std::fs::read(format!("{base}.img")).unwrap();
    let model = load_model(Path::new(&format!("{base}.model")));
    let r = after_online_cut(img.clone(), &model, &base, true);
    eprintln!("{r:?}");
    if let Some(b) = std::env::var("SLUICE_REPLAY_BLOCK")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        // where the block's acknowledged and pending values lie in the
        // crash image (part, byte offset)
        let mut vals: Vec<(&str, &Vec<u8>)> = vec![("acked", &model.acked[&b])];
        for v in model.pending.get(&b).into_iter().flatten() {
            vals.push(("pending", v));
        }
        for (what, v) in vals {
            let at: Vec<(u64, u64)> = img
                .chunks(BS)
                .enumerate()
                .filter(|(_, c)| *c == &v[..])
                .map(|(i, _)| ((i * BS) as u64 / CUT_M, (i * BS) as u64 % CUT_M))
                .collect();
            eprintln!(
                "block {b} {what} value (crc {:08x}) at {at:?}",
                crc32c::crc32c(v)
            );
        }
    }
    r.unwrap();
}

/// A tracing aid (`replay_an_online_rebuild_cut`): for the segment a
/// failure message names, each row's pieces on each member (part index:
/// slot 1 is part 5) in the crash image and after the resumed rebuild,
/// whether the row's P agrees with its data, and the scratch tags naming
/// the row.
fn trace_rows(crash: &[u8], after: &[u8], set: &sluice::stripe_set::StripeSet, m: u64, msg: &str) {
    let l = set.layout;
    let Some(seg) = msg
        .split("segment ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u64>().ok())
    else {
        eprintln!("trace: no segment in {msg:?}");
        return;
    };
    let part = |slot: u32| if slot == 1 { 5u64 } else { slot as u64 };
    let u = l.unit as usize;
    let uuid = set.members()[0].ident.set_uuid;
    let sb = set.scratch_base();
    eprintln!("trace: {msg}");
    for row in seg * l.rows_per_segment..(seg + 1) * l.rows_per_segment {
        let at = l.row_offset(row).unwrap();
        for (name, img) in [("crash", crash), ("after", after)] {
            let piece = |slot: u32| {
                let o = (part(slot) * m + at) as usize;
                &img[o..o + u]
            };
            let mut x = vec![0u8; u];
            for slot in 0..l.members {
                for (a, b) in x.iter_mut().zip(piece(slot)) {
                    *a ^= b;
                }
            }
            let bad: Vec<usize> = x
                .chunks(BS)
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&b| b != 0))
                .map(|(i, _)| i)
                .collect();
            let crcs: Vec<String> = (0..l.members)
                .map(|s| {
                    format!(
                        "{}:{:?}={:08x}",
                        s,
                        l.role(row, s),
                        crc32c::crc32c(piece(s))
                    )
                })
                .collect();
            eprintln!(
                "  row {row} {name}: parity columns disagreeing {bad:?}; {}",
                crcs.join(" ")
            );
            for slot in 0..l.members {
                for lane in 0..sluice::stripe_set::scratch::LANES {
                    for place in 0..2 {
                        let o = (part(slot) * m
                            + sluice::stripe_set::scratch::place_offset(sb, l.unit, lane, place))
                            as usize;
                        if let Some(t) =
                            sluice::stripe_set::scratch::Tag::open(&img[o..o + BS + u], &uuid)
                        {
                            if t.row == row {
                                eprintln!(
                                    "    tag on slot {slot} lane {lane} place {place}: seq {} which {} covered {:?}",
                                    t.seq,
                                    t.which,
                                    t.covered
                                        .iter()
                                        .enumerate()
                                        .filter(|c| *c.1)
                                        .map(|c| c.0)
                                        .collect::<Vec<_>>()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One round of `a_power_cut_on_a_degraded_set_loses_no_flushed_write`:
/// a RAID-5 4+1 set (five parts of one `SimMedia`) written healthy, closed,
/// mounted with member 1 missing; one thread writes random blocks and
/// flushes every 8 writes, power is cut at operation `cut` of that run
/// (none: 0), the next mount is degraded as well and every block a flush
/// acknowledged reads back. Err: what failed. Ok: operations the run took.
fn degraded_cut_round(k: u64, cut: u64, writes: usize) -> Result<u64, String> {
    degraded_cut_round_traced(k, cut, writes, None)
}

fn degraded_cut_round_traced(
    k: u64,
    cut: u64,
    writes: usize,
    trace: Option<u64>,
) -> Result<u64, String> {
    const M: u64 = 8 << 20;
    let det = OpenOptions {
        background: false,
        ..Default::default()
    };
    let sim = Arc::new(SimMedia::new(M * 5));
    let ps = parts(&sim, 5, M);
    let c = CreateOptions {
        segment_bytes: 256 << 10,
        uuid: Some([k as u8 + 1; 16]),
        ..Default::default()
    };
    Volume::format_striped(named(&ps, &[0, 1, 2, 3, 4]), 1, UNIT, &c).unwrap();
    let mut model = Model::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(k);
    let span;
    {
        let vol = Volume::open_striped(named(&ps, &[0, 1, 2, 3, 4]), &det).unwrap();
        span = vol.size_bytes() / BS as u64 / 3;
        for _ in 0..300 {
            let b = rng.gen_range(0..span);
            let v = random_block(&mut rng);
            vol.write(b * BS as u64, &v, false).unwrap();
            model.write(b, v);
        }
        vol.flush().unwrap();
        model.flushed();
        vol.close().unwrap();
    }
    let vol = Volume::open_striped(named(&ps, &[0, 2, 3, 4]), &det).unwrap();
    let start = sim.ops();
    if cut > 0 {
        sim.cut_at_op(start + cut);
    }
    if trace.is_some() {
        sim.record();
    }
    for i in 1..=writes {
        let b = rng.gen_range(0..span);
        let v = random_block(&mut rng);
        model.write(b, v.clone());
        sim.mark(b);
        if vol.write(b * BS as u64, &v, false).is_err() {
            break;
        }
        if i % 8 == 0 {
            sim.mark(1 << 62);
            if vol.flush().is_err() {
                break;
            }
            sim.mark(1 << 63);
            model.flushed();
        }
    }
    if let Some(row) = trace {
        let set = vol.stripe_set().unwrap();
        let l = set.layout;
        let (r0, r1) = (l.row_offset(row).unwrap(), l.row_offset(row + 1).unwrap());
        let sb = set.scratch_base();
        eprintln!(
            "row {row}: member bytes {r0}..{r1}, scratch from {sb}, P on {:?}",
            l.parity_member(row, 0)
        );
        let mut op = 0u64;
        let uuid = set.members()[0].ident.set_uuid;
        for e in sim.events() {
            match e {
                sluice::media::SimEvent::Mark(m) if m == 1 << 62 => eprintln!("  FLUSH begins"),
                sluice::media::SimEvent::Mark(m) if m == 1 << 63 => eprintln!("  FLUSH ok"),
                sluice::media::SimEvent::Mark(_) => {}
                sluice::media::SimEvent::Write { offset, data } => {
                    op += 1;
                    let (m, o) = (offset / M, offset % M);
                    if o < r1 && o + data.len() as u64 > r0 {
                        eprintln!(
                            "  op {op}: member {m} row bytes {}..{} ({} blocks) crc {:08x}",
                            o - r0,
                            o - r0 + data.len() as u64,
                            data.len() / BS,
                            crc32c::crc32c(&data)
                        );
                    } else if o >= sb {
                        let tag = sluice::stripe_set::scratch::Tag::open(&data, &uuid);
                        let place = (o - sb) / (UNIT + BS as u64);
                        match tag {
                            Some(t) if t.row == row => eprintln!("  op {op}: member {m} scratch lane {} place {}: tag row {} seq {} covered {:?} parity crc {:08x}", place / 2, place % 2, t.row, t.seq, t.covered.iter().enumerate().filter(|c| *c.1).map(|c| c.0).collect::<Vec<_>>(), crc32c::crc32c(&data[BS..])),
                            Some(_) => {}
                            None => eprintln!("  op {op}: member {m} scratch lane {} place {}: {} bytes, no tag (void?)", place / 2, place % 2, data.len()),
                        }
                    }
                }
                sluice::media::SimEvent::FlushPart { base, .. } => {
                    op += 1;
                    let _ = base;
                }
                sluice::media::SimEvent::Flush => op += 1,
            }
        }
        eprintln!("  ops recorded: {op}, cut at {cut}");
    }
    let used = sim.ops() - start;
    sim.freeze();
    drop(vol);
    if cut == 0 {
        return Ok(used);
    }
    let loss = [Loss::Subset, Loss::KeepAll, Loss::DropAll][k as usize % 3];
    let after = Arc::new(SimMedia::from_image(sim.crash_image(loss, k)));
    let ps2 = parts(&after, 5, M);
    let vol = Volume::open_striped(named(&ps2, &[0, 2, 3, 4]), &det)
        .map_err(|e| format!("mount: {e}"))?;
    let mut buf = vec![0u8; BS];
    let mut blocks: Vec<_> = model.acked.keys().copied().collect();
    blocks.sort_unstable();
    for b in blocks {
        let v = &model.acked[&b];
        vol.read(b * BS as u64, &mut buf)
            .map_err(|e| format!("cut at op {cut}, {loss:?}: block {b}: {e}"))?;
        if buf != *v && !model.pending.get(&b).is_some_and(|p| p.contains(&buf)) {
            return Err(format!(
                "cut at op {cut}, {loss:?}: block {b} reads back wrong"
            ));
        }
    }
    Ok(used)
}

/// Prints the member writes into one row and the scratch tags naming it
/// (`SLUICE_TRACE_SEED`, `SLUICE_TRACE_ROW`) of one round of the test below.
#[test]
#[ignore = "a tracing aid, run by hand"]
fn trace_a_degraded_cut() {
    let env = |n: &str| std::env::var(n).ok().and_then(|s| s.parse().ok());
    let (Some(k), Some(row)) = (env("SLUICE_TRACE_SEED"), env("SLUICE_TRACE_ROW")) else {
        panic!("set SLUICE_TRACE_SEED and SLUICE_TRACE_ROW");
    };
    let window = degraded_cut_round(k, 0, 400).expect("uncut");
    let cut = rand::rngs::SmallRng::seed_from_u64(k ^ 0x5eed).gen_range(1..window.max(2));
    eprintln!("{:?}", degraded_cut_round_traced(k, cut, 400, Some(row)));
}

/// The finding (docs/stripes.md §0, "a power cut on a degraded set"),
/// deterministic: one thread, no rebuild. Seeds
/// `SLUICE_DEGRADED_CUT_BASE..+SLUICE_DEGRADED_CUT_SEEDS` (0..40); the cut
/// of seed k at a point of the run drawn from k.
#[test]
fn a_power_cut_on_a_degraded_set_loses_no_flushed_write() {
    let env = |n: &str, d: u64| {
        std::env::var(n)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let base = env("SLUICE_DEGRADED_CUT_BASE", 0);
    let seeds = env("SLUICE_DEGRADED_CUT_SEEDS", 40);
    let writes = 400;
    let mut failed = Vec::new();
    for k in base..base + seeds {
        let window = degraded_cut_round(k, 0, writes).expect("uncut");
        let cut = rand::rngs::SmallRng::seed_from_u64(k ^ 0x5eed).gen_range(1..window.max(2));
        if let Err(e) = degraded_cut_round(k, cut, writes) {
            eprintln!("seed {k}: {e}");
            failed.push(k);
        }
    }
    assert!(
        failed.is_empty(),
        "seeds {failed:?} lost acknowledged writes"
    );
}

/// One round of `a_cut_in_a_flush_while_rebuilding_then_another_member_lost`:
/// a 4+1 set with data, member 1 replaced by part 5 (the rebuild not yet
/// run: every piece of the new member is served degraded); `writes`
/// random blocks and a FLUSH, `more` more and a FLUSH cut at its
/// operation `cut` (0: uncut), loss KeepAll. Then the mount resumes the
/// rebuild and finishes it, and with each other member gone in turn every
/// acknowledged block reads back. Ok: the operations the cut FLUSH took
/// (uncut) or that the round passed.
fn rebuilding_flush_cut_round(k: u64, writes: usize, more: usize, cut: u64) -> Result<u64, String> {
    let det = OpenOptions {
        background: false,
        ..Default::default()
    };
    let Rebuilding {
        sim,
        vol,
        mut model,
        mut rng,
        span,
    } = rebuilding(k, &det);
    let mut put = |vol: &Volume, model: &mut Model, n: usize| {
        for _ in 0..n {
            let b = rng.gen_range(0..span);
            let v = random_block(&mut rng);
            model.write(b, v.clone());
            vol.write(b * BS as u64, &v, false).unwrap();
        }
    };
    put(&vol, &mut model, writes);
    vol.flush().unwrap();
    model.flushed();
    put(&vol, &mut model, more);
    let start = sim.ops();
    if cut > 0 {
        sim.cut_at_op(start + cut);
    }
    if vol.flush().is_ok() {
        model.flushed();
    }
    let used = sim.ops() - start;
    sim.freeze();
    drop(vol);
    if cut == 0 {
        return Ok(used);
    }
    let what = format!("seed {k}, cut at op {cut} of the FLUSH");
    after_online_cut(sim.crash_image(Loss::KeepAll, k), &model, &what, false).map(|_| used)
}

/// A power cut in a FLUSH on a set whose member is being rebuilt, then the
/// resumed rebuild, then another member lost: every acknowledged block
/// reads back (docs/stripes.md §0, finding 7). At each operation of the
/// cut FLUSH, for two seeds (single-threaded, deterministic). Before the
/// fix the resumed mount, degraded by the member being rebuilt, adopted a
/// chunk the cut FLUSH had written whole (never acknowledged) without
/// resyncing its rows: the row's scratch tags, which do not cover it,
/// stayed valid (or its parity in place stale), and after the rebuild,
/// with another member lost, an acknowledged block's new value read as
/// zeros (EIO). Mutation `rebuilding-mount-not-resynced`.
#[test]
fn a_cut_in_a_flush_while_rebuilding_then_another_member_lost() {
    let mut failed = Vec::new();
    let mut points = 0;
    // (seeds 2 and 3 failed before the fix, 0, 1, 4 and 5 did not)
    for k in 2..4u64 {
        let (writes, more) = (5 + k as usize, 6 + 2 * k as usize);
        let ops = rebuilding_flush_cut_round(k, writes, more, 0).expect("uncut");
        for cut in 1..=ops {
            points += 1;
            if let Err(e) = rebuilding_flush_cut_round(k, writes, more, cut) {
                eprintln!("{e}");
                failed.push((k, cut));
            }
        }
    }
    eprintln!("{points} cut points, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "(seed, cut) {failed:?} lost acknowledged writes"
    );
}
