//! Volumes on stripe sets (issue 20) through the engine: RAID-0, 4+1 and
//! 4+2 over real files read back after a reopen with the members in another
//! order, degraded with members gone, and refuse foreign, copied or too few
//! members by name; a write-only workload reads no member; a power cut in a
//! partial row and then a lost member never returns wrong data, and loses no
//! flushed write when the cut leaves nothing unflushed.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluice::compress::Compression;
use sluice::media::{FileMedia, Loss, Media, SimMedia};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const BS: usize = 4096;
const UNIT: u64 = 16 << 10;
const MEMBER: u64 = 12 << 20;

fn create_opts() -> CreateOptions {
    CreateOptions {
        segment_bytes: 256 << 10,
        ..Default::default()
    }
}

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        ..Default::default()
    }
}

fn files(dir: &Path, tag: &str, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("{tag}{i}.img"))).collect()
}

fn make(paths: &[PathBuf], parity: u32) {
    let devs = paths
        .iter()
        .map(|p| {
            let m: Arc<dyn Media> = Arc::new(FileMedia::create(p, MEMBER).unwrap());
            (p.display().to_string(), m)
        })
        .collect();
    Volume::format_striped(devs, parity, UNIT, &create_opts()).unwrap();
}

fn devices(paths: &[PathBuf]) -> Vec<(String, Arc<dyn Media>)> {
    paths
        .iter()
        .map(|p| {
            let m: Arc<dyn Media> = Arc::new(
                FileMedia::open(p, false).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            );
            (p.display().to_string(), m)
        })
        .collect()
}

fn open(paths: &[PathBuf]) -> sluice::Result<Volume> {
    Volume::open_striped(devices(paths), &det())
}

/// Write `n` random 4 KiB blocks (some FUA, a flush every so often), then
/// flush; what each block holds.
fn scribble(vol: &Volume, n: usize, seed: u64) -> HashMap<u64, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let blocks = vol.size_bytes() / BS as u64;
    let mut want = HashMap::new();
    for i in 0..n {
        let b = rng.gen_range(0..blocks);
        let mut buf = vec![0u8; BS * rng.gen_range(1..4usize).min((blocks - b) as usize)];
        rng.fill(&mut buf[..]);
        vol.write(b * BS as u64, &buf, i % 7 == 0).unwrap();
        for (k, c) in buf.chunks(BS).enumerate() {
            want.insert(b + k as u64, c.to_vec());
        }
        if i % 50 == 49 {
            vol.flush().unwrap();
        }
    }
    vol.flush().unwrap();
    want
}

fn verify(vol: &Volume, want: &HashMap<u64, Vec<u8>>, what: &str) {
    let mut buf = vec![0u8; BS];
    for (b, v) in want {
        vol.read(b * BS as u64, &mut buf)
            .unwrap_or_else(|e| panic!("{what}: block {b}: {e}"));
        assert!(buf == *v, "{what}: block {b} reads back wrong");
    }
}

#[test]
fn sets_read_back_shuffled_and_degraded() {
    for (n, parity) in [(5usize, 1u32), (6, 2), (4, 0)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), "m", n);
        make(&paths, parity);
        let want = {
            let vol = open(&paths).unwrap();
            let set = vol.stripe_set().unwrap().status();
            assert_eq!((set.members, set.parity), (n as u32, parity));
            assert!(!set.degraded());
            let w = scribble(&vol, 600, n as u64);
            vol.close().unwrap();
            w
        };
        let mut shuffled = paths.clone();
        shuffled.shuffle(&mut SmallRng::seed_from_u64(9));
        {
            let vol = open(&shuffled).unwrap();
            verify(&vol, &want, &format!("{n}+{parity} shuffled"));
            vol.close().unwrap();
        }
        // every member (every pair for RAID-6) gone in turn
        let mut losses: Vec<Vec<usize>> = (0..n).map(|a| vec![a]).collect();
        if parity == 2 {
            losses = (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| vec![a, b]))
                .collect();
        }
        for lost in losses {
            let rest: Vec<PathBuf> = (0..n)
                .filter(|i| !lost.contains(i))
                .map(|i| shuffled[i].clone())
                .collect();
            if parity == 0 {
                let e = open(&rest).err().expect("RAID-0 without a member");
                assert!(e.to_string().contains("missing"), "{e}");
                continue;
            }
            let vol = open(&rest).unwrap();
            let st = vol.stripe_set().unwrap().status();
            assert!(st.degraded(), "{lost:?}");
            assert!(st.describe().contains("missing"), "{}", st.describe());
            verify(&vol, &want, &format!("{n}+{parity} without {lost:?}"));
            assert!(vol.stripe_set().unwrap().status().reconstructed > 0);
            // writes go on degraded, and read back
            let more = scribble(&vol, 60, 77);
            verify(&vol, &more, "degraded writes");
            vol.close().unwrap();
            drop(vol);
            // the member that missed those writes is stale now: refused by
            // name, and the set opens degraded without it
            let e = open(&paths).err().expect("stale member").to_string();
            assert!(
                lost.iter()
                    .any(|i| e.contains(&shuffled[*i].display().to_string()))
                    && e.contains("stale"),
                "{e}"
            );
            let vol = open(&rest).unwrap();
            verify(&vol, &more, "written degraded, read degraded");
            vol.close().unwrap();
            break;
        }
    }
}

/// Chunk headers found on `paths` (every 4 KiB block that decodes as one):
/// how many carry the mixed check and how many the plain CRC32C.
fn header_checks(paths: &[PathBuf]) -> (usize, usize) {
    use sluice::format::chunk::{ChunkHeader, CHUNK_MAGIC};
    let (mut mixed, mut plain) = (0, 0);
    for p in paths {
        let bytes = std::fs::read(p).unwrap();
        for b in bytes.chunks_exact(BS) {
            if b[..8] == CHUNK_MAGIC {
                if let Ok(h) = ChunkHeader::decode(b) {
                    if h.mixed_check {
                        mixed += 1
                    } else {
                        plain += 1
                    }
                }
            }
        }
    }
    (mixed, plain)
}

/// The incompat feature words of member `p`'s first superblock copy.
fn member_incompat(p: &Path) -> u64 {
    let b = std::fs::read(p).unwrap();
    u64::from_le_bytes(b[160..168].try_into().unwrap())
}

/// docs/stripes.md §0 finding 1: a set this build makes has
/// `MIXED_HEADER_CHECK` and writes only chunk headers with the mixed check
/// (a block rebuilt from stale parity, an XOR of stale headers, fails it);
/// a set made as before (plain CRC32C headers, no bit) keeps mounting,
/// healthy and degraded, and keeps writing plain headers.
#[test]
fn a_new_set_writes_mixed_header_checks_and_an_older_set_keeps_mounting() {
    use sluice::format::superblock::incompat::{MIXED_HEADER_CHECK, STRIPE_SET};
    for mixed_check in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), "m", 4);
        let devs = paths
            .iter()
            .map(|p| {
                let m: Arc<dyn Media> = Arc::new(FileMedia::create(p, MEMBER).unwrap());
                (p.display().to_string(), m)
            })
            .collect();
        if mixed_check {
            Volume::format_striped(devs, 1, UNIT, &create_opts()).unwrap();
        } else {
            Volume::format_striped_with(devs, 1, UNIT, &create_opts(), false).unwrap();
        }
        let f = member_incompat(&paths[0]);
        assert_ne!(f & STRIPE_SET, 0);
        assert_eq!(f & MIXED_HEADER_CHECK != 0, mixed_check, "{f:#x}");
        let vol = open(&paths).unwrap();
        let mut want = scribble(&vol, 300, 5);
        vol.close().unwrap();
        drop(vol);
        let (m, p) = header_checks(&paths);
        if mixed_check {
            assert!(m > 10 && p == 0, "mixed {m}, plain {p}");
        } else {
            assert!(p > 10 && m == 0, "mixed {m}, plain {p}");
        }
        for skip in [None, Some(2)] {
            let rest: Vec<PathBuf> = (0..4)
                .filter(|&i| Some(i) != skip)
                .map(|i| paths[i].clone())
                .collect();
            let vol = open(&rest).unwrap();
            verify(
                &vol,
                &want,
                &format!("mixed {mixed_check}, without {skip:?}"),
            );
            if skip.is_none() {
                let more = scribble(&vol, 50, 6);
                verify(&vol, &more, "written after a reopen");
                want.extend(more);
            }
            vol.close().unwrap();
            drop(vol);
            if skip.is_none() {
                let (m2, p2) = header_checks(&paths);
                assert_eq!((m2 > m, p2 > p), (mixed_check, !mixed_check));
            }
        }
    }
}

#[test]
fn foreign_copied_blank_and_too_few_members_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let a = files(dir.path(), "a", 5);
    let b = files(dir.path(), "b", 5);
    make(&a, 1);
    make(&b, 1);
    let name = |p: &PathBuf| p.display().to_string();
    // a member of another set
    let mut mixed = a[..4].to_vec();
    mixed.push(b[4].clone());
    let e = open(&mixed).err().expect("foreign member").to_string();
    assert!(
        e.contains(&name(&b[4])) && e.contains("belongs to stripe set"),
        "{e}"
    );
    // a copied member: two devices claim one slot
    let copy = dir.path().join("copy.img");
    std::fs::copy(&a[1], &copy).unwrap();
    let mut dup = a[..4].to_vec();
    dup.push(copy.clone());
    let e = open(&dup).err().expect("copied member").to_string();
    assert!(e.contains(&name(&a[1])) && e.contains(&name(&copy)), "{e}");
    // a blank device in a member's place
    let blank = dir.path().join("blank.img");
    FileMedia::create(&blank, MEMBER).unwrap();
    let mut with_blank = a[..4].to_vec();
    with_blank.push(blank.clone());
    let e = open(&with_blank).err().expect("blank").to_string();
    assert!(
        e.contains(&name(&blank)) && e.contains("not a member"),
        "{e}"
    );
    // two missing of a RAID-5
    let e = open(&a[..3]).err().expect("two missing").to_string();
    assert!(e.contains("members [3, 4] are missing"), "{e}");
    // one member alone is not a volume: its superblock needs STRIPE_SET
    let alone = Volume::open(Arc::new(FileMedia::open(&a[0], false).unwrap()), &det());
    let e = alone.err().expect("member alone").to_string();
    assert!(e.contains("STRIPE_SET"), "{e}");
}

/// Counts reads of a member.
struct Counting {
    inner: FileMedia,
    reads: Arc<AtomicU64>,
}

impl Media for Counting {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> std::io::Result<()> {
        self.reads.fetch_add(reads.len() as u64, Ordering::Relaxed);
        self.inner.read_batch(reads)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[test]
fn a_write_only_workload_reads_no_member() {
    for parity in [1u32, 2] {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), "m", 4 + parity as usize);
        make(&paths, parity);
        let reads = Arc::new(AtomicU64::new(0));
        let devs: Vec<(String, Arc<dyn Media>)> = paths
            .iter()
            .map(|p| {
                let m: Arc<dyn Media> = Arc::new(Counting {
                    inner: FileMedia::open(p, false)
                        .unwrap_or_else(|e| panic!("{}: {e}", p.display())),
                    reads: reads.clone(),
                });
                (p.display().to_string(), m)
            })
            .collect();
        let vol = Volume::open_striped(devs, &det()).unwrap();
        let at_mount = reads.load(Ordering::Relaxed);
        assert!(at_mount > 0, "the mount reads superblocks and checkpoints");
        // every block once, in a random order, flushes between: no GC runs
        let blocks = vol.size_bytes() / BS as u64;
        let mut order: Vec<u64> = (0..blocks / 2).collect();
        order.shuffle(&mut SmallRng::seed_from_u64(3));
        let mut rng = SmallRng::seed_from_u64(4);
        for (i, b) in order.iter().enumerate() {
            let mut buf = vec![0u8; BS];
            rng.fill(&mut buf[..]);
            vol.write(b * BS as u64, &buf, false).unwrap();
            if i % 97 == 0 {
                vol.flush().unwrap();
            }
        }
        vol.flush().unwrap();
        let st = vol.stripe_set().unwrap().status();
        assert!(st.member_writes > 0);
        assert_eq!(
            reads.load(Ordering::Relaxed) - at_mount,
            0,
            "member reads during writes (parity {parity})"
        );
        assert_eq!(st.rows_loaded, 0);
        vol.close().unwrap();
    }
}

/// A set on simulated disks (each its own volatile cache), cut off.
fn sim_set(n: usize) -> Vec<Arc<SimMedia>> {
    (0..n).map(|_| Arc::new(SimMedia::new(8 << 20))).collect()
}

fn sim_devs(ms: &[Arc<SimMedia>], skip: Option<usize>) -> Vec<(String, Arc<dyn Media>)> {
    ms.iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(i, m)| (format!("sim{i}"), m.clone() as Arc<dyn Media>))
        .collect()
}

/// A simulated member whose flush fails once `fail` is set (as a power cut
/// fails the first member's flush before the others notice).
struct FlushFails {
    inner: Arc<SimMedia>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl Media for FlushFails {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        if self.fail.load(Ordering::Acquire) {
            return Err(std::io::Error::other("flush failed (power cut)"));
        }
        self.inner.flush()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// docs/stripes.md §0 finding 3 (`stripe-flush-acked-after-member-flush-
/// failed`, DST seed 2^20+5): a member's flush fails (its cache is lost)
/// and the set goes on without it, acknowledging the FLUSH on the others.
/// Before it returns, the others must carry the next membership generation
/// durably: after a power cut that keeps only flushed bytes, assembly with
/// every member refuses the failed one as stale (by name), and without it
/// (RAID-6: and one more member) every flushed write reads back. Without
/// the record the failed member was trusted with what its cache lost.
#[test]
fn a_member_whose_flush_failed_is_stale_on_the_others_when_the_flush_returns() {
    use std::sync::atomic::AtomicBool;
    for parity in [1u32, 2] {
        let n = parity as usize + 3;
        let bad = 1;
        let ms = sim_set(n);
        let fail = Arc::new(AtomicBool::new(false));
        let devs = || -> Vec<(String, Arc<dyn Media>)> {
            ms.iter()
                .enumerate()
                .map(|(i, m)| {
                    let f = Arc::new(AtomicBool::new(false));
                    let media = FlushFails {
                        inner: m.clone(),
                        fail: if i == bad { fail.clone() } else { f },
                    };
                    (format!("sim{i}"), Arc::new(media) as Arc<dyn Media>)
                })
                .collect()
        };
        let c = CreateOptions {
            uuid: Some([parity as u8 + 40; 16]),
            ..create_opts()
        };
        Volume::format_striped(devs(), parity, UNIT, &c).unwrap();
        let vol = Volume::open_striped(devs(), &det()).unwrap();
        let mut want = scribble(&vol, 120, 11);
        fail.store(true, Ordering::Release);
        // a few writes and one FLUSH: no superblock write of the engine's
        // records the failure for the set
        let mut rng = SmallRng::seed_from_u64(12);
        for _ in 0..5 {
            let b = rng.gen_range(0..vol.size_bytes() / BS as u64);
            let mut buf = vec![0u8; BS];
            rng.fill(&mut buf[..]);
            vol.write(b * BS as u64, &buf, false).unwrap();
            want.insert(b, buf);
        }
        vol.flush().expect("one failed member is within the parity");
        let st = vol.stripe_set().unwrap().status();
        assert!(st.degraded(), "{}", st.describe());
        // the power goes: only what was flushed survives, on every member
        // (fresh images for each mount: a degraded mount raises the
        // generation of the members it has)
        let images = || -> Vec<Arc<SimMedia>> {
            ms.iter()
                .map(|m| Arc::new(SimMedia::from_image(m.crash_image(Loss::DropAll, 1))))
                .collect()
        };
        let e = Volume::open_striped(sim_devs(&images(), None), &det())
            .err()
            .expect("the member whose flush failed must be stale")
            .to_string();
        assert!(
            e.contains(&format!("sim{bad}")) && e.contains("stale"),
            "{e}"
        );
        let mut lose: Vec<Option<usize>> = vec![None];
        if parity == 2 {
            lose.extend((0..n).filter(|&i| i != bad).map(Some));
        }
        for also in lose {
            let devs: Vec<(String, Arc<dyn Media>)> = sim_devs(&images(), None)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| *i != bad && Some(*i) != also)
                .map(|(_, d)| d)
                .collect();
            let vol = Volume::open_striped(devs, &det()).unwrap();
            verify(
                &vol,
                &want,
                &format!("parity {parity}, without {bad} and {also:?}"),
            );
            drop(vol);
        }
    }
}

/// Power cut after a flush that left a row partial and while more writes
/// were going into it and later rows (a chunk completing the row, its parity
/// in place torn or not), then one member lost: every flushed write reads
/// back, whichever unflushed writes reached the members (the running parity
/// of the partial row is in a scratch place, docs/stripes.md §4). Also after
/// a mount with every member (the resync puts the parity in place) and then
/// a member lost. Odd seeds cut the power during the next FLUSH instead
/// (each member at its own op): when that FLUSH still returned Ok, its
/// writes must read back too; a member whose op failed during it is out
/// for good once the set recorded that on the others (docs/stripes.md §0
/// finding 3), so a mount that gives it, or loses another member, may be
/// refused as stale: two members down on a RAID-5 (counted, never wrong
/// data).
#[test]
fn power_cut_in_a_partial_row_then_a_member_lost() {
    let mut holes = 0;
    let mut checked = 0;
    let mut refused = 0;
    for seed in 0..12u64 {
        for loss in [Loss::DropAll, Loss::Subset, Loss::KeepAll] {
            let ms = sim_set(5);
            let devs = sim_devs(&ms, None);
            let c = CreateOptions {
                uuid: Some([seed as u8 + 1; 16]),
                ..create_opts()
            };
            Volume::format_striped(devs, 1, UNIT, &c).unwrap();
            let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
            let mut rng = SmallRng::seed_from_u64(seed);
            let blocks = vol.size_bytes() / BS as u64;
            let mut acked: HashMap<u64, Vec<u8>> = HashMap::new();
            let mut later: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
            let mut out: Vec<usize> = Vec::new();
            // a flushed part: a chunk of a few blocks leaves a partial row
            for _ in 0..rng.gen_range(3..12) {
                let b = rng.gen_range(0..blocks);
                let mut buf = vec![0u8; BS];
                rng.fill(&mut buf[..]);
                vol.write(b * BS as u64, &buf, false).unwrap();
                acked.insert(b, buf);
            }
            vol.flush().unwrap();
            // unflushed: enough to seal a chunk (it lands in the partial row)
            // (odd seeds: a few blocks, which the next FLUSH seals into the
            // same partial row while the power fails)
            for _ in 0..if seed % 2 == 1 { 6 } else { 300 } {
                let b = rng.gen_range(0..blocks);
                let mut buf = vec![0u8; BS];
                rng.fill(&mut buf[..]);
                vol.write(b * BS as u64, &buf, false).unwrap();
                later.entry(b).or_default().push(buf);
            }
            if seed % 2 == 1 {
                // the power fails during the next FLUSH instead: somewhere
                // in its member writes and flushes
                for m in &ms {
                    m.cut_at_op(m.ops() + rng.gen_range(0..8));
                }
                let acknowledged = vol.flush().is_ok();
                if acknowledged {
                    // its writes must read back too
                    for (b, l) in later.drain() {
                        acked.insert(b, l.last().unwrap().clone());
                    }
                }
                // a member whose op failed is out for good once the set
                // recorded that on the others (before an acknowledgement,
                // and perhaps before a later failure made the FLUSH fail):
                // with another member lost that is two, beyond the parity,
                // so such mounts may be refused as stale (never answer
                // wrong)
                let st = vol.stripe_set().unwrap().status();
                out = st.down.iter().map(|d| d.0 as usize).collect();
            }
            for m in &ms {
                m.freeze();
            }
            drop(vol);
            let images: Vec<Arc<SimMedia>> = ms
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    Arc::new(SimMedia::from_image(
                        m.crash_image(loss, seed * 31 + i as u64),
                    ))
                })
                .collect();
            for lost in 0..5 {
                let copies: Vec<Arc<SimMedia>> = images
                    .iter()
                    .map(|m| Arc::new(SimMedia::from_image(m.current_image())))
                    .collect();
                let vol = match Volume::open_striped(sim_devs(&copies, Some(lost)), &det()) {
                    Ok(v) => v,
                    Err(e)
                        if !out.is_empty()
                            && !out.contains(&lost)
                            && e.to_string().contains("stale") =>
                    {
                        refused += 1;
                        continue;
                    }
                    Err(e) => panic!("seed {seed} {loss:?} lost {lost}: {e}"),
                };
                let mut buf = vec![0u8; BS];
                for (b, v) in &acked {
                    checked += 1;
                    let ok = match vol.read(b * BS as u64, &mut buf) {
                        Ok(()) => buf == *v || later.get(b).is_some_and(|l| l.contains(&buf)),
                        Err(_) => false,
                    };
                    if !ok {
                        holes += 1;
                        eprintln!("seed {seed} {loss:?} lost member {lost}: flushed block {b} does not read back");
                    }
                }
                if lost == seed as usize % 5 {
                    // healed first: a mount with every member, then the loss
                    drop(vol);
                    let whole: Vec<Arc<SimMedia>> = images
                        .iter()
                        .map(|m| Arc::new(SimMedia::from_image(m.current_image())))
                        .collect();
                    let v = match Volume::open_striped(sim_devs(&whole, None), &det()) {
                        Ok(v) => v,
                        Err(e) if !out.is_empty() && e.to_string().contains("stale") => {
                            refused += 1;
                            continue;
                        }
                        Err(e) => panic!("seed {seed} {loss:?} every member: {e}"),
                    };
                    v.close().unwrap();
                    drop(v);
                    let vol = Volume::open_striped(sim_devs(&whole, Some(lost)), &det()).unwrap();
                    for (b, v) in &acked {
                        checked += 1;
                        let ok = match vol.read(b * BS as u64, &mut buf) {
                            Ok(()) => buf == *v || later.get(b).is_some_and(|l| l.contains(&buf)),
                            Err(_) => false,
                        };
                        if !ok {
                            holes += 1;
                            eprintln!("seed {seed} {loss:?} healed, then lost member {lost}: flushed block {b} does not read back");
                        }
                    }
                    continue;
                }
                drop(vol);
            }
        }
    }
    eprintln!(
        "{checked} flushed blocks read degraded after a cut, {holes} lost; {refused} mounts refused as stale (a member whose op failed during the cut FLUSH given, or another member lost)"
    );
    assert_eq!(
        holes, 0,
        "flushed blocks lost after a power cut and a lost member"
    );
}

fn sluice(args: &[&str], dir: &Path) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn cli_creates_a_set_and_info_and_check_take_members_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dev = |names: &[&str]| -> Vec<String> {
        names
            .iter()
            .flat_map(|n| ["--device".to_string(), n.to_string()])
            .collect()
    };
    let run = |pre: &[&str], names: &[&str], post: &[&str]| {
        let mut v: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
        v.extend(dev(names));
        v.extend(post.iter().map(|s| s.to_string()));
        let r: Vec<&str> = v.iter().map(|s| s.as_str()).collect();
        sluice(&r, d)
    };
    let (rc, out) = run(
        &["create"],
        &["a", "b", "c", "d", "e"],
        &["--parity", "1", "--size", "32M"],
    );
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("of 5 members, parity 1"), "{out}");
    // the same again is refused: every member holds a volume now
    let (rc, out) = run(
        &["create"],
        &["a", "b", "c", "d", "e"],
        &["--parity", "1", "--size", "32M"],
    );
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("already holds a sluice volume"), "{out}");
    let (rc, out) = run(&["info"], &["e", "c", "a", "d", "b"], &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("RAID-5") && out.contains("healthy"), "{out}");
    let (rc, out) = run(&["check"], &["b", "a", "e", "d"], &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("degraded (member 2 missing") && out.contains("clean"),
        "{out}"
    );
    let (rc, out) = run(&["info"], &["a", "b", "d"], &[]);
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("members [2, 4] are missing"), "{out}");
    // one member alone is named as such
    let (rc, out) = sluice(&["info", "c"], d);
    assert_eq!(rc, 2, "{out}");
    assert!(
        out.contains("c is member 2 of the 5-member stripe set"),
        "{out}"
    );
    // too few members for the parity
    let (rc, out) = run(
        &["create"],
        &["x", "y"],
        &["--parity", "1", "--size", "32M"],
    );
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("more members than parity + 1"), "{out}");
}

/// A rebuild from parity that is wrong (here: every P unit on one member
/// overwritten under a degraded set) is caught by the CRC index: the read
/// answers EIO, never the wrong bytes.
#[test]
fn a_rebuild_from_damaged_parity_answers_eio_not_wrong_bytes() {
    use sluice::stripe::StripeLayout;
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), "m", 5);
    make(&paths, 1);
    let want = {
        let vol = open(&paths).unwrap();
        let w = scribble(&vol, 400, 5);
        vol.close().unwrap();
        w
    };
    let lost = 1;
    let rest: Vec<PathBuf> = (0..5)
        .filter(|&i| i != lost)
        .map(|i| paths[i].clone())
        .collect();
    let vol = Volume::open_striped(
        devices(&rest),
        &OpenOptions {
            read_only: true,
            ..det()
        },
    )
    .unwrap();
    // every P unit on every member gets garbage (a plain write beside the
    // set's own descriptors)
    let (id, sb) = {
        let m = FileMedia::open_unlocked_read_only(&paths[0]).unwrap();
        sluice::stripe_set::open::read_member(&m).unwrap().unwrap()
    };
    let layout = StripeLayout::from_identity(&id, sb.data_offset).unwrap();
    for (m, p) in paths.iter().enumerate() {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        let junk = vec![0x5au8; layout.unit as usize];
        for row in 0..id.rows {
            if layout.parity_member(row, 0) == Some(m as u32) {
                f.write_all_at(&junk, layout.row_offset(row).unwrap())
                    .unwrap();
            }
        }
        f.sync_all().unwrap();
    }
    let (mut eio, mut good) = (0, 0);
    let mut buf = vec![0u8; BS];
    for (b, v) in &want {
        match vol.read(b * BS as u64, &mut buf) {
            Ok(()) => {
                assert!(
                    buf == *v,
                    "block {b}: a rebuild from bad parity was returned"
                );
                good += 1;
            }
            Err(_) => eio += 1,
        }
    }
    assert!(eio > 0 && good > 0, "{eio} EIO, {good} good");
}

/// docs/stripes.md §0 finding 4: a bit flipped on one member in the newest
/// durable chunk header (after a crash, so recovery walks it). Recovery read
/// headers without the self-healing read: the header failed its check and
/// the mount refused, or ended the log there and returned older data. Now
/// the scan reads it right from the rest of its row, every flushed write
/// reads back, and the mount rewrites the member's bytes in place.
#[test]
fn a_flipped_chunk_header_on_one_member_is_read_right_at_mount() {
    use sluice::format::chunk::ChunkHeader;
    for parity in [1u32, 2] {
        let n = parity as usize + 3;
        let ms = sim_set(n);
        let c = CreateOptions {
            uuid: Some([parity as u8 + 60; 16]),
            ..create_opts()
        };
        Volume::format_striped(sim_devs(&ms, None), parity, UNIT, &c).unwrap();
        let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
        let want = scribble(&vol, 150, 21 + parity as u64);
        for m in &ms {
            m.freeze();
        }
        drop(vol);
        let images: Vec<Vec<u8>> = ms.iter().map(|m| m.crash_image(Loss::DropAll, 1)).collect();
        // the newest chunk header on any member
        let mut newest: Option<(u64, usize, usize)> = None;
        for (i, img) in images.iter().enumerate() {
            for (k, b) in img.chunks(BS).enumerate() {
                if let Ok(h) = ChunkHeader::decode(b) {
                    if newest.is_none_or(|(s, _, _)| h.seq > s) {
                        newest = Some((h.seq, i, k * BS));
                    }
                }
            }
        }
        let (seq, who, at) = newest.expect("chunk headers on the members");
        let mut images = images;
        let orig = images[who][at..at + BS].to_vec();
        images[who][at + 200] ^= 0x10;
        let sims: Vec<Arc<SimMedia>> = images
            .into_iter()
            .map(|i| Arc::new(SimMedia::from_image(i)))
            .collect();
        let vol = Volume::open_striped(sim_devs(&sims, None), &det()).unwrap_or_else(|e| {
            panic!("parity {parity}: header of chunk {seq} flipped on member {who}: {e}")
        });
        verify(
            &vol,
            &want,
            &format!("parity {parity}: header of chunk {seq} flipped on member {who}"),
        );
        let mut now = vec![0u8; BS];
        sims[who].read_at(&mut now, at as u64).unwrap();
        assert!(
            now == orig,
            "parity {parity}: the mount left the flipped header on member {who}"
        );
    }
}

/// A bit flipped in the seq field of a durable chunk header on one member
/// (bit 20: the header claims a seq far past the checkpoint), each header
/// in turn, after a crash (the mount scans): the mount must not refuse and
/// every flushed write reads back. A segment's block 0 holding a chunk
/// older than the checkpoint was healed only if the right bytes were newer
/// than it, so the flipped one stayed damage that claimed a new seq and
/// the mount refused (DST seed 2^20+14, docs/stripes.md §0 finding 10).
#[test]
fn a_flipped_seq_in_an_old_chunk_header_does_not_refuse_the_mount() {
    use sluice::format::chunk::ChunkHeader;
    let ms = sim_set(3);
    let c = CreateOptions {
        uuid: Some([77; 16]),
        ..create_opts()
    };
    Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let mut want = scribble(&vol, 150, 41);
    // chunks below the checkpoint, in segments whose block 0 holds one
    vol.checkpoint().unwrap();
    want.extend(scribble(&vol, 40, 42));
    for m in &ms {
        m.freeze();
    }
    drop(vol);
    let images: Vec<Vec<u8>> = ms.iter().map(|m| m.crash_image(Loss::DropAll, 1)).collect();
    let mut headers = Vec::new();
    for (i, img) in images.iter().enumerate() {
        for (k, b) in img.chunks(BS).enumerate() {
            if ChunkHeader::decode(b).is_ok() {
                headers.push((i, k * BS));
            }
        }
    }
    assert!(headers.len() > 8, "chunk headers on the members");
    for (who, at) in headers {
        let mut imgs = images.clone();
        // seq is bytes 32..40, little endian: bit 20 is byte 34's 0x10
        imgs[who][at + 34] ^= 0x10;
        let sims: Vec<Arc<SimMedia>> = imgs
            .into_iter()
            .map(|i| Arc::new(SimMedia::from_image(i)))
            .collect();
        let what = format!("seq bit 20 of the header at byte {at} of member {who} flipped");
        let vol = Volume::open_striped(sim_devs(&sims, None), &det())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        verify(&vol, &want, &what);
    }
}

/// The same after a clean close: the mount walks no chunk, so the first
/// read of a block after the flipped header finds it (the CRC index and
/// the self-healing read stop at a header that fails its check): the read
/// heals the header from its row first, then verifies. Each of the
/// members' chunk headers flipped in turn (a mount each): every write
/// reads back.
#[test]
fn a_flipped_chunk_header_is_healed_by_a_read_after_a_clean_mount() {
    use sluice::format::chunk::ChunkHeader;
    let ms = sim_set(4);
    let c = CreateOptions {
        uuid: Some([70; 16]),
        ..create_opts()
    };
    Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let want = scribble(&vol, 150, 31);
    vol.close().unwrap();
    drop(vol);
    let images: Vec<Vec<u8>> = ms.iter().map(|m| m.current_image()).collect();
    let mut headers = Vec::new();
    for (i, img) in images.iter().enumerate() {
        for (k, b) in img.chunks(BS).enumerate() {
            if ChunkHeader::decode(b).is_ok() {
                headers.push((i, k * BS));
            }
        }
    }
    assert!(headers.len() > 4, "chunk headers on the members");
    let mut healed = 0;
    for (who, at) in headers {
        let mut imgs = images.clone();
        imgs[who][at + 300] ^= 0x04;
        let sims: Vec<Arc<SimMedia>> = imgs
            .into_iter()
            .map(|i| Arc::new(SimMedia::from_image(i)))
            .collect();
        let vol = Volume::open_striped(sim_devs(&sims, None), &det()).unwrap();
        verify(
            &vol,
            &want,
            &format!("header at byte {at} of member {who} flipped"),
        );
        healed += vol.stats().stripe_healed;
    }
    assert!(healed > 0, "some flipped header held live data");
}

/// docs/stripes.md §0 finding 4 (DST seed 2^20+1): the engine reads each
/// superblock copy from the first member whose copy verifies and writes
/// the other copy next, so a copy torn on another member by a power cut
/// stayed torn, and the next cut mount tore that member's other copy:
/// assembly refused it as no member. A writable mount now rewrites every
/// superblock copy that fails its check on a member from another member's
/// before the engine writes anything: each of the four copy places torn on
/// one member in turn is whole on that member's media once the mount
/// returns (flushed), and the member alone still identifies itself with
/// its other head copy torn afterwards.
#[test]
fn a_superblock_copy_torn_on_one_member_is_rewritten_at_mount() {
    use sluice::stripe_set::meta::is_superblock;
    use sluice::stripe_set::open::read_member;
    let ms = sim_set(4);
    let c = CreateOptions {
        uuid: Some([71; 16]),
        ..create_opts()
    };
    Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let want = scribble(&vol, 60, 5);
    let tail = vol.stripe_set().unwrap().member_tail_offset() as usize;
    vol.close().unwrap();
    drop(vol);
    let base: Vec<Vec<u8>> = ms.iter().map(|m| m.crash_image(Loss::DropAll, 1)).collect();
    let who = 2;
    for at in [0, BS, tail, tail + BS] {
        let mut images = base.clone();
        assert!(is_superblock(&images[who][at..at + BS]), "copy at {at}");
        images[who][at + 100] ^= 0x40;
        let sims: Vec<Arc<SimMedia>> = images
            .into_iter()
            .map(|i| Arc::new(SimMedia::from_image(i)))
            .collect();
        let vol = Volume::open_striped(sim_devs(&sims, None), &det())
            .unwrap_or_else(|e| panic!("copy at {at} torn on member {who}: {e}"));
        let durable = sims[who].crash_image(Loss::DropAll, 2);
        assert!(
            is_superblock(&durable[at..at + BS]),
            "the mount left the superblock copy at {at} torn on member {who}"
        );
        verify(&vol, &want, &format!("copy at {at} torn on member {who}"));
        drop(vol);
        // the member's other head copy torn now: it still says who it is
        let mut alone = durable;
        let other = if at == BS { 0 } else { BS };
        alone[other + 100] ^= 0x40;
        let m = SimMedia::from_image(alone);
        assert!(
            read_member(&m).unwrap().is_some(),
            "member {who} with its head copy at {other} torn after the repair of {at}"
        );
    }
}

/// docs/stripes.md §0 finding 8: a long run on a RAID-5 (4+1) set that
/// closes well over 100 segments with no segment wiped (sequential 12 KiB
/// writes, a FLUSH every second write: chunks of 7 blocks, so a segment of
/// 64 closes at 63 and most FLUSHes find a partial row) never runs out of
/// scratch lanes: every closed segment's last row (which the engine never
/// fills) gets its parity in place and gives its lane back. Before the fix
/// each such row held its lane until its segment's wipe, and from the 17th
/// closed segment on every FLUSH wrote a partial row's parity in place,
/// unprotected. Also on a compressed volume (half of each block zeros):
/// its chunks are placed after packing and a segment closes when the next
/// one does not fit, often with its last chunk already written (the row is
/// then finished by the next FLUSH, `finish_closed_rows`). Then a power cut
/// (only flushed bytes survive) and each member lost in turn: every write
/// reads back.
#[test]
fn a_long_run_closing_many_segments_never_runs_out_of_scratch_lanes() {
    for compression in [Compression::Off, Compression::Lz4] {
        let ms: Vec<Arc<SimMedia>> = (0..5).map(|_| Arc::new(SimMedia::new(24 << 20))).collect();
        let c = CreateOptions {
            uuid: Some([77; 16]),
            compression,
            ..create_opts()
        };
        Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
        let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
        let seg_bytes = create_opts().segment_bytes;
        // (compressed: about half the bytes reach the members)
        let total = if compression == Compression::Off {
            110
        } else {
            200
        } * seg_bytes;
        assert!(
            total < vol.size_bytes(),
            "the run fits without GC (no wipe): {total} of {}",
            vol.size_bytes()
        );
        let mut rng = SmallRng::seed_from_u64(8);
        let mut want: HashMap<u64, Vec<u8>> = HashMap::new();
        let w = 3 * BS;
        for (i, off) in (0..total).step_by(w).enumerate() {
            let mut buf = vec![0u8; w];
            rng.fill(&mut buf[..]);
            if compression == Compression::Lz4 {
                for b in buf.chunks_mut(BS) {
                    b[BS / 2..].fill(0);
                }
            }
            vol.write(off, &buf, false).unwrap();
            for (k, b) in buf.chunks(BS).enumerate() {
                want.insert(off / BS as u64 + k as u64, b.to_vec());
            }
            if i % 2 == 1 {
                vol.flush().unwrap();
            }
        }
        vol.flush().unwrap();
        let st = vol.stripe_set().unwrap().status();
        let closed = vol.stats().segments_closed;
        eprintln!(
            "{compression:?}: {} MiB written, {closed} segments closed, {} partial rows flushed unprotected",
            total >> 20,
            st.unprotected_flushes
        );
        assert!(closed >= 100, "{closed} segments closed");
        assert_eq!(
            st.unprotected_flushes, 0,
            "{compression:?}: scratch lanes ran out: partial rows flushed with their parity in place, unprotected"
        );
        for m in &ms {
            m.freeze();
        }
        drop(vol);
        let images: Vec<Vec<u8>> = ms
            .iter()
            .enumerate()
            .map(|(i, m)| m.crash_image(Loss::DropAll, i as u64))
            .collect();
        for lost in 0..5 {
            let copies: Vec<Arc<SimMedia>> = images
                .iter()
                .map(|im| Arc::new(SimMedia::from_image(im.clone())))
                .collect();
            let vol = Volume::open_striped(sim_devs(&copies, Some(lost)), &det()).unwrap();
            verify(
                &vol,
                &want,
                &format!("{compression:?}: member {lost} lost after the cut"),
            );
        }
    }
}

/// Issue 20: recovery reads a checkpoint and the intent log's records
/// through `Media::read_checked`, so a copy flipped on one member is not
/// taken for an unusable checkpoint or the log's end while other members
/// hold it whole. A RAID-5 (3+1) set with an intent log, closed clean (a
/// checkpoint), then small FUA writes (ring records) and a power cut that
/// keeps what was flushed. In the durable images a bit is flipped in the
/// named checkpoint slot's body, in the first record's header and in its
/// data, on one member in turn, and then on every member but one: each
/// mount takes the same checkpoint slot, replays as many records as the
/// mount of the unflipped images, and reads every write back; the copies
/// read before the good one are rewritten from it (member 0's always), and
/// counted; a read-only mount and a degraded one only count member 0's
/// bad copy (the read-only one leaves it as it is). With `meta_read`'s first copy (the mutation
/// `meta-read-unchecked`) a flip on member 0 took the older slot or ended
/// the log early.
#[test]
fn a_metadata_copy_flipped_on_one_member_is_read_from_another_and_rewritten() {
    use sluice::recovery::read_superblocks;
    use sluice::stripe_set::media::SetMedia;
    let ms = sim_set(4);
    let c = CreateOptions {
        uuid: Some([73; 16]),
        intent_log: Some(256 << 10),
        ..create_opts()
    };
    Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let mut want = scribble(&vol, 80, 9);
    vol.close().unwrap();
    drop(vol);
    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let mut rng = SmallRng::seed_from_u64(10);
    let blocks = vol.size_bytes() / BS as u64;
    for _ in 0..12 {
        let b = rng.gen_range(0..blocks);
        let mut buf = vec![0u8; BS];
        rng.fill(&mut buf[..]);
        vol.write(b * BS as u64, &buf, true).unwrap();
        want.insert(b, buf);
    }
    let base: Vec<Vec<u8>> = ms.iter().map(|m| m.crash_image(Loss::DropAll, 1)).collect();
    drop(vol);
    let sims = |images: &[Vec<u8>]| -> Vec<Arc<SimMedia>> {
        images
            .iter()
            .map(|i| Arc::new(SimMedia::from_image(i.clone())))
            .collect()
    };
    // where the named checkpoint and the first record to replay are
    let (ckpt, rec) = {
        let s = sims(&base);
        let set = sluice::stripe_set::open::open(sim_devs(&s, None)).unwrap();
        let sb = read_superblocks(&SetMedia::new(set)).unwrap().sb;
        let geo = sluice::geometry::Geometry::from_superblock(&sb);
        assert!(sb.checkpoint_slot < 2, "a checkpoint was written");
        (
            sb.checkpoint_offset[sb.checkpoint_slot as usize] as usize,
            (geo.log_offset + sb.v2.unwrap().log_start.offset) as usize,
        )
    };
    let mount = |images: Vec<Vec<u8>>, what: &str| {
        let s = sims(&images);
        let vol = Volume::open_striped(sim_devs(&s, None), &det())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = vol.mount_report().clone();
        verify(&vol, &want, what);
        let st = vol.stripe_set().unwrap().status();
        // the same counts reach the volume's stats (metrics, `top`)
        let vs = vol.stats();
        assert_eq!(
            (vs.stripe_meta_copies_bad, vs.stripe_meta_copies_rewritten),
            (st.meta_copies_bad, st.meta_copies_rewritten),
            "{what}"
        );
        vol.close().unwrap();
        drop(vol);
        (r, st, s)
    };
    let (clean, st, _) = mount(base.clone(), "no flip");
    assert_eq!(st.meta_copies_bad, 0);
    let records = clean.rules.log_record_replayed;
    assert!(records >= 2, "records replayed: {records}");
    for (at, where_) in [
        (ckpt + BS + 64, "the checkpoint's body"),
        (rec + 100, "the first record's header"),
        (rec + BS + 100, "the first record's data"),
    ] {
        for (flipped, what) in (0..4)
            .map(|m| (vec![m], format!("{where_} flipped on member {m}")))
            .chain((0..4).map(|m| {
                let others: Vec<usize> = (0..4).filter(|&x| x != m).collect();
                (others, format!("{where_} flipped on every member but {m}"))
            }))
        {
            let mut images = base.clone();
            for &m in &flipped {
                images[m][at] ^= 0x10;
            }
            let (r, st, s) = mount(images, &what);
            assert_eq!(r.checkpoint_slot, clean.checkpoint_slot, "{what}");
            assert_eq!(r.rules.log_record_replayed, records, "{what}");
            // the members read before the good copy: the flipped ones from 0 on
            let before_good = (0..4).take_while(|m| flipped.contains(m)).count();
            assert_eq!(st.meta_copies_bad, before_good as u64, "{what}");
            assert_eq!(st.meta_copies_rewritten, before_good as u64, "{what}");
            for m in 0..before_good {
                let durable = s[m].crash_image(Loss::DropAll, 2);
                assert_eq!(
                    durable[at], base[m][at],
                    "{what}: member {m}'s copy was not rewritten"
                );
            }
        }
        // a read-only mount, and a degraded one (member 3 missing), only
        // count member 0's bad copy
        for (ro, skip) in [(true, None), (false, Some(3))] {
            let mut images = base.clone();
            images[0][at] ^= 0x10;
            let s = sims(&images);
            let what = format!("{where_} flipped on member 0, read-only {ro}, missing {skip:?}");
            let opts = OpenOptions {
                read_only: ro,
                ..det()
            };
            let vol = Volume::open_striped(sim_devs(&s, skip), &opts)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(vol.mount_report().checkpoint_slot, clean.checkpoint_slot);
            assert_eq!(vol.mount_report().rules.log_record_replayed, records);
            verify(&vol, &want, &what);
            let st = vol.stripe_set().unwrap().status();
            // (a record's header is read twice, header then image: both
            // find member 0's copy bad when it is not rewritten)
            assert!(
                st.meta_copies_bad >= 1 && st.meta_copies_rewritten == 0,
                "{what}: {st:?}"
            );
            drop(vol);
            // (a writable mount writes checkpoints of its own later)
            if ro {
                let durable = s[0].crash_image(Loss::DropAll, 2);
                assert_eq!(durable[at], images[0][at], "{what}: member 0 written");
            }
        }
    }
}

/// Scrub reads every member's copy of the current checkpoint (a mount reads
/// them in member order and stops at the first good one, so a bad copy
/// behind it is never seen there). A byte flipped on the last member is
/// named and rewritten by the first scrub step of a pass on a writable
/// mount, counted and left alone on a read-only one; a flip on every member
/// is reported as no copy verifying. With the scrub's check of the copies
/// skipped (mutation `meta-scrub-skipped`) nothing is named.
#[test]
fn scrub_finds_and_rewrites_a_bad_checkpoint_copy_behind_a_good_one() {
    use sluice::recovery::read_superblocks;
    use sluice::stripe_set::media::SetMedia;
    let ms = sim_set(4);
    let c = CreateOptions {
        uuid: Some([74; 16]),
        ..create_opts()
    };
    Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
    // the current checkpoint's body, one byte flipped on `members` in place
    let flip = |vol: &Volume, members: &[usize]| -> usize {
        let set = vol.stripe_set().unwrap().clone();
        let sb = read_superblocks(&SetMedia::new(set)).unwrap().sb;
        assert!(sb.checkpoint_slot < 2, "a checkpoint was written");
        let at = sb.checkpoint_offset[sb.checkpoint_slot as usize] as usize + BS + 64;
        for &m in members {
            let mut b = vec![0u8; BS];
            ms[m].read_at(&mut b, (at - 64) as u64).unwrap();
            b[64] ^= 0x10;
            ms[m].write_at(&b, (at - 64) as u64).unwrap();
            ms[m].flush().unwrap();
        }
        at
    };
    let byte = |m: usize, at: usize| {
        let mut b = vec![0u8; BS];
        ms[m].read_at(&mut b, (at - 64) as u64).unwrap();
        b[64]
    };
    // one whole pass of the walk (from segment 0 to the last); the
    // checkpoint lines it reported
    let pass = |vol: &Volume| -> Vec<String> {
        let set = vol.stripe_set().unwrap().clone();
        let segments = read_superblocks(&SetMedia::new(set))
            .unwrap()
            .sb
            .segment_count;
        let mut lines = Vec::new();
        for i in 0..segments {
            let o = vol.scrub_step().unwrap();
            assert_eq!(o.segment, i, "the walk's order");
            lines.extend(
                o.damage
                    .into_iter()
                    .filter(|d| d.contains("checkpoint slot")),
            );
        }
        lines
    };

    let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
    let want = scribble(&vol, 60, 11);
    vol.checkpoint().unwrap();
    assert!(pass(&vol).is_empty(), "no flip, nothing named");
    let at = flip(&vol, &[3]);
    assert_ne!(byte(3, at), byte(0, at));
    let lines = pass(&vol);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("1 of its 4 copies fail their check; 1 rewritten"),
        "{lines:?}"
    );
    let st = vol.stripe_set().unwrap().status();
    assert_eq!((st.meta_copies_bad, st.meta_copies_rewritten), (1, 1));
    assert_eq!(byte(3, at), byte(0, at), "member 3's copy rewritten");
    assert!(pass(&vol).is_empty(), "the next pass finds it whole");
    verify(&vol, &want, "after the rewrite");
    vol.close().unwrap();
    drop(vol);

    // read-only: named and counted, not rewritten
    let ro = OpenOptions {
        read_only: true,
        ..det()
    };
    let vol = Volume::open_striped(sim_devs(&ms, None), &ro).unwrap();
    let at = flip(&vol, &[2]);
    let lines = pass(&vol);
    assert!(
        lines.len() == 1 && lines[0].contains("1 of its 4 copies fail their check; 0 rewritten"),
        "{lines:?}"
    );
    assert_ne!(byte(2, at), byte(0, at), "a read-only scrub writes nothing");
    drop(vol);

    // every copy flipped (member 2's already is: the mount reads member 0's)
    let vol = Volume::open_striped(sim_devs(&ms, None), &ro).unwrap();
    let at = flip(&vol, &[0, 1, 3]);
    let lines = pass(&vol);
    assert!(
        lines.len() == 1 && lines[0].contains("none of its 4 copies verifies"),
        "{lines:?} at {at}"
    );
}
