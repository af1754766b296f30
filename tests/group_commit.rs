//! Group commit with company (`Commit::company_wait`, docs/intent-log.md
//! §4.6): a flusher that finds another FLUSH's record announced but not yet
//! written may wait a little for it, but what its media flush covers is only
//! what was written when the flush began. A record that lands after a flush
//! began is made durable by a later flush, never by that one: else its
//! FLUSH would be answered with the record still in the media's volatile
//! cache, and a power cut would lose acknowledged writes.

use sluice::geometry::Geometry;
use sluice::media::{AlignedBuf, Loss, Media, SimMedia};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;
const LOGICAL: u64 = 2048;

fn create() -> (CreateOptions, u64) {
    let log = 1u64 << 20;
    let c = CreateOptions {
        logical_bytes: Some(LOGICAL * BS as u64),
        overprovision: 0.25,
        segment_bytes: 256 * BS as u64,
        uuid: Some([7; 16]),
        intent_log: Some(log),
        ..Default::default()
    };
    let g = Geometry::for_logical_log(LOGICAL, 256, 0.25, log);
    (c, g.media_bytes())
}

/// Deterministic mode: no housekeeper whose idle seal could flush the held
/// record and hide a flush that covered it too early.
fn opts() -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 30),
        ..Default::default()
    }
}

fn block(seed: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(BS);
    for (j, x) in b.iter_mut().enumerate() {
        *x = (j as u8).wrapping_mul(13) ^ seed;
    }
    b[0] = 1;
    b
}

/// A thread writing `data` at block `lba`, then FLUSHing (a client of
/// the group commit).
fn write_then_flush(vol: &Arc<Volume>, lba: u64, data: AlignedBuf) -> std::thread::JoinHandle<()> {
    let v = vol.clone();
    std::thread::spawn(move || {
        v.write(lba * BS as u64, &data, false).unwrap();
        v.flush().unwrap();
    })
}

fn read(vol: &Volume, lba: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    vol.read(lba * BS as u64, &mut b).unwrap();
    b
}

/// SimMedia whose intent log record writes (they start with the record
/// magic) are held back, once armed: the first `FIRST`, the second
/// `SECOND`, the others not at all. `started` counts the held writes begun.
struct SlowRecords {
    sim: Arc<SimMedia>,
    armed: AtomicBool,
    started: AtomicUsize,
}

const FIRST: Duration = Duration::from_millis(150);
const SECOND: Duration = Duration::from_millis(600);

impl Media for SlowRecords {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.armed.load(Ordering::Acquire) && buf.starts_with(b"SLUICELR") {
            match self.started.fetch_add(1, Ordering::AcqRel) {
                0 => std::thread::sleep(FIRST),
                1 => std::thread::sleep(SECOND),
                _ => {}
            }
        }
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "slow records".into()
    }
}

#[test]
fn a_record_that_lands_after_a_flush_began_waits_for_the_next_flush() {
    let (c, len) = create();
    let sim = Arc::new(SimMedia::new(len));
    let media = Arc::new(SlowRecords {
        sim: sim.clone(),
        armed: AtomicBool::new(false),
        started: AtomicUsize::new(0),
    });
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts()).unwrap());
    // a FLUSH beforehand: the group commit has a media flush time to scale by
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    media.armed.store(true, Ordering::Release);
    // A: a write and a FLUSH whose record (the first held) takes FIRST
    let a = write_then_flush(&vol, 10, block(2));
    let t0 = std::time::Instant::now();
    while media.started.load(Ordering::Acquire) < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "A's record never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // B, while A's record is in flight: its own record (the second held)
    // is announced before A's lands and lands after A's flush began
    let b = write_then_flush(&vol, 20, block(3));
    a.join().unwrap();
    b.join().unwrap();
    // power cut right after B's FLUSH was answered: what is not flushed is gone
    let img = sim.crash_image(Loss::DropAll, 5);
    drop(vol);
    let m2 = Arc::new(SimMedia::from_image(img));
    let v2 = Volume::open(m2 as Arc<dyn Media>, &opts()).unwrap();
    assert!(read(&v2, 10) == block(2)[..], "A's flushed write lost");
    assert!(
        read(&v2, 20) == block(3)[..],
        "B's flushed write lost: its record was counted durable by a flush that began before it was written"
    );
}

#[test]
fn a_flush_alone_does_not_wait_for_company() {
    // QD1: nothing announced beyond what is written, so no FLUSH waits for
    // company (counted): the group commit never slows a lone writer
    let (c, len) = create();
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media as Arc<dyn Media>, &c, &opts()).unwrap();
    for i in 0..50u64 {
        vol.write(i * BS as u64, &block(i as u8), false).unwrap();
        vol.flush().unwrap();
    }
    assert_eq!(
        vol.stats().group_commit_waits,
        0,
        "a lone FLUSH waited for company"
    );
}

/// SimMedia whose flushes, once armed, each wait until the test lets that
/// many through (`released`); `started` counts the flushes begun.
struct GatedFlushes {
    sim: Arc<SimMedia>,
    armed: AtomicBool,
    started: AtomicUsize,
    released: AtomicUsize,
    /// Once let through, flush `fail` (counted from 1; 0: none) fails.
    fail: AtomicUsize,
}

impl GatedFlushes {
    /// Over `sim`, disarmed (nothing held, nothing failing).
    fn over(sim: &Arc<SimMedia>) -> Arc<GatedFlushes> {
        Arc::new(GatedFlushes {
            sim: sim.clone(),
            armed: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
            fail: AtomicUsize::new(0),
        })
    }
}

/// Hold the caller until `released` reaches `n` (the test lets the `n`th
/// held operation through); fails after 60 s.
fn wait_released(released: &AtomicUsize, n: usize, what: &str) {
    let t0 = std::time::Instant::now();
    while released.load(Ordering::Acquire) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what} {n} never let through"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Media for GatedFlushes {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if self.armed.load(Ordering::Acquire) {
            let n = self.started.fetch_add(1, Ordering::AcqRel) + 1;
            wait_released(&self.released, n, "flush");
            if self.fail.load(Ordering::Acquire) == n {
                return Err(io::Error::from_raw_os_error(libc_eio()));
            }
        }
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "gated flushes".into()
    }
}

/// Background mode (writer and flusher threads), nothing on a timer, and
/// no fill: these tests are of the commit stage's parking, where a FLUSH
/// that comes while a flush runs writes its own record first (the fill
/// would make it join the next group instead: `opts_bg_fill`).
fn opts_bg() -> OpenOptions {
    OpenOptions {
        background: true,
        idle_seal_ms: 3_600_000,
        checkpoint_interval_bytes: Some(1 << 30),
        flush_fill: false,
        ..Default::default()
    }
}

/// `opts_bg` with the fill (the default).
fn opts_bg_fill() -> OpenOptions {
    OpenOptions {
        flush_fill: true,
        ..opts_bg()
    }
}

fn until(what: &str, f: impl Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "hung: never {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_parked_flush_is_answered_only_by_a_flush_that_began_after_its_record() {
    // B's FLUSH writes its record while A's media flush runs: it parks
    // (`Volume::flush_then` returns at once) and must be answered by the
    // next flush (the flusher thread's), never by the end of A's, which
    // began before B's record was written
    let (c, len) = create();
    let sim = Arc::new(SimMedia::new(len));
    let media = GatedFlushes::over(&sim);
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts_bg()).unwrap());
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    media.armed.store(true, Ordering::Release);
    let a = write_then_flush(&vol, 10, block(2));
    until("A's media flush began", || {
        media.started.load(Ordering::Acquire) == 1
    });
    vol.write(20 * BS as u64, &block(3), false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let answered = Arc::new(AtomicBool::new(false));
    let seen = answered.clone();
    vol.flush_then(Box::new(move |r| {
        let who = std::thread::current().name().map(str::to_string);
        seen.store(true, Ordering::Release);
        tx.send((r.is_ok(), who)).unwrap();
    }));
    assert_eq!(vol.stats().flushes_parked, 1, "B's FLUSH did not park");
    assert!(
        rx.try_recv().is_err(),
        "B answered before any flush covered its record"
    );
    // A's flush ends: A is answered, B is not (its record came after A's
    // flush began); the flusher thread starts the next flush for B
    media.released.store(1, Ordering::Release);
    a.join().unwrap();
    until("the flusher's media flush began (or B answered)", || {
        media.started.load(Ordering::Acquire) == 2 || answered.load(Ordering::Acquire)
    });
    assert!(
        rx.try_recv().is_err(),
        "B's FLUSH was answered by a media flush that began before its record was written"
    );
    // a power cut now: B was never answered, so nothing is owed; its
    // record may be lost (not checked)
    media.released.store(2, Ordering::Release);
    let (ok, who) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("B never answered");
    assert!(ok);
    assert_eq!(
        who.as_deref(),
        Some("sluice-flusher"),
        "answered by the flush's own thread"
    );
    // a power cut right after B's answer: both FLUSHed writes are there
    let img = sim.crash_image(Loss::DropAll, 9);
    media.armed.store(false, Ordering::Release);
    drop(vol);
    let m2 = Arc::new(SimMedia::from_image(img));
    let v2 = Volume::open(m2 as Arc<dyn Media>, &opts()).unwrap();
    assert!(read(&v2, 10) == block(2)[..], "A's flushed write lost");
    assert!(
        read(&v2, 20) == block(3)[..],
        "B's answered FLUSH lost its write"
    );
}

#[test]
fn a_lone_flush_then_is_answered_on_its_own_thread() {
    // QD1: no media flush runs when it comes, so it flushes itself and
    // answers before `flush_then` returns: no hand-off, no wake-up
    let (c, len) = create();
    let vol = Volume::create(
        Arc::new(SimMedia::new(len)) as Arc<dyn Media>,
        &c,
        &opts_bg(),
    )
    .unwrap();
    let me = std::thread::current().id();
    for i in 0..20u64 {
        vol.write(i * BS as u64, &block(i as u8), false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        vol.flush_then(Box::new(move |r| {
            tx.send((r.is_ok(), std::thread::current().id())).unwrap();
        }));
        let (ok, who) = rx
            .try_recv()
            .expect("a lone FLUSH not answered before flush_then returned");
        assert!(ok);
        assert_eq!(who, me);
    }
    assert_eq!(vol.stats().flushes_parked, 0);
}

/// SimMedia whose writes from the volume's writer threads are held once
/// armed: every write of the first writer thread that writes until
/// `writes_released` >= 1, of the second until >= 2 (each thread holds one
/// sealed chunk's writes); and whose flushes are gated as `GatedFlushes`'.
struct HeldWriters {
    sim: Arc<SimMedia>,
    armed: AtomicBool,
    writers: std::sync::Mutex<Vec<std::thread::ThreadId>>,
    writes_released: AtomicUsize,
    flushes: AtomicUsize,
    flushes_released: AtomicUsize,
}

impl HeldWriters {
    /// How many writer threads have a held write (begun).
    fn writers_held(&self) -> usize {
        self.writers.lock().unwrap().len()
    }
}

impl Media for HeldWriters {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let me = std::thread::current();
        let writer = me.name().is_some_and(|n| n.starts_with("sluice-writer"));
        if self.armed.load(Ordering::Acquire) && writer {
            let n = {
                let mut w = self.writers.lock().unwrap();
                match w.iter().position(|&t| t == me.id()) {
                    Some(i) => Some(i + 1),
                    None if w.len() < 2 => {
                        w.push(me.id());
                        Some(w.len())
                    }
                    None => None,
                }
            };
            if let Some(n) = n {
                wait_released(&self.writes_released, n, "writer");
            }
        }
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if self.armed.load(Ordering::Acquire) {
            let n = self.flushes.fetch_add(1, Ordering::AcqRel) + 1;
            wait_released(&self.flushes_released, n, "flush");
        }
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "held writers".into()
    }
}

/// `blocks` blocks from `lba` on, each its own pattern (seed + i).
fn blocks(seed: u8, n: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(n * BS);
    for i in 0..n {
        b[i * BS..(i + 1) * BS].copy_from_slice(&block(seed.wrapping_add(i as u8)));
    }
    b
}

#[test]
fn a_flush_that_slept_parks_when_a_flush_began_meanwhile() {
    // C's FLUSH (`flush_then`) finds no media flush running and the
    // flusher idle, so it waits for a chunk of its target still with a
    // writer thread (K2). Meanwhile T's FLUSH, whose target ends before K2,
    // starts a media flush. When K2 lands, C must park for the flusher
    // rather than sleep through T's flush (which began before K2 was
    // written and so cannot answer it): its `flush_then` returns while T's
    // flush is still running, and it is answered by the next flush
    let (c, len) = create();
    let sim = Arc::new(SimMedia::new(len));
    let media = Arc::new(HeldWriters {
        sim: sim.clone(),
        armed: AtomicBool::new(false),
        writers: std::sync::Mutex::new(Vec::new()),
        writes_released: AtomicUsize::new(0),
        flushes: AtomicUsize::new(0),
        flushes_released: AtomicUsize::new(0),
    });
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts_bg()).unwrap());
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    media.armed.store(true, Ordering::Release);
    // K1: a full chunk sealed, its writer thread held
    vol.write(100 * BS as u64, &blocks(10, 300), false).unwrap();
    until("K1's writer held", || media.writers_held() == 1);
    // T: a write and a FLUSH (its record written) waiting for K1
    let records = vol.stats().log_records;
    let t = write_then_flush(&vol, 1, block(2));
    until("T's record written", || {
        vol.stats().log_records == records + 1
    });
    // K2: the next full chunk, the other writer thread held
    vol.write(400 * BS as u64, &blocks(20, 300), false).unwrap();
    until("K2's writer held", || media.writers_held() == 2);
    // C: a write and a FLUSH through `flush_then`, on a thread of its own
    // (it returns at once when it parks, else only once answered)
    vol.write(2 * BS as u64, &block(3), false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let returned = Arc::new(AtomicBool::new(false));
    let c_thread = {
        let (v, returned) = (vol.clone(), returned.clone());
        std::thread::spawn(move || {
            v.flush_then(Box::new(move |r| {
                let who = std::thread::current().name().map(str::to_string);
                tx.send((r.is_ok(), who)).unwrap();
            }));
            returned.store(true, Ordering::Release);
        })
    };
    until("C's record written", || {
        vol.stats().log_records == records + 2
    });
    // (time for C to reach its wait for K2; the test holds either way,
    // this only makes it sharper)
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        vol.stats().flushes_parked,
        0,
        "C parked with no flush running"
    );
    // K1 lands: T starts its media flush (held); then K2 lands
    media.writes_released.store(1, Ordering::Release);
    until("T's media flush began", || {
        media.flushes.load(Ordering::Acquire) == 1
    });
    media.writes_released.store(2, Ordering::Release);
    until(
        "C's flush_then returned (parked, not asleep in the group commit)",
        || returned.load(Ordering::Acquire),
    );
    assert_eq!(vol.stats().flushes_parked, 1, "C's FLUSH did not park");
    assert!(
        rx.try_recv().is_err(),
        "C answered before any flush covered K2"
    );
    // T's flush ends: T answered, C not (K2 came after that flush began);
    // the flusher's flush answers C
    media.flushes_released.store(1, Ordering::Release);
    t.join().unwrap();
    until("the flusher's media flush began", || {
        media.flushes.load(Ordering::Acquire) == 2
    });
    assert!(
        rx.try_recv().is_err(),
        "C's FLUSH was answered by a media flush that began before K2 was written"
    );
    media.flushes_released.store(2, Ordering::Release);
    let (ok, who) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("C never answered");
    assert!(ok);
    assert_eq!(who.as_deref(), Some("sluice-flusher"));
    c_thread.join().unwrap();
    // a power cut right after C's answer: every write before it is there
    let img = sim.crash_image(Loss::DropAll, 11);
    media.armed.store(false, Ordering::Release);
    drop(vol);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &opts(),
    )
    .unwrap();
    assert!(read(&v2, 1) == block(2)[..], "T's flushed write lost");
    assert!(read(&v2, 2) == block(3)[..], "C's flushed write lost");
    for (lba, seed) in [(100u64, 10u8), (400, 20)] {
        for i in [0u64, 254, 299] {
            assert!(
                read(&v2, lba + i) == block(seed.wrapping_add(i as u8))[..],
                "block {} of a flushed write lost",
                lba + i
            );
        }
    }
}

#[test]
fn a_burst_of_flushes_while_a_group_is_in_flight_is_served_by_one_more_record() {
    // The fill (`volume/fill.rs`): A's FLUSH group (its record, its media
    // flush) is in flight, held in its media flush; N writers each write
    // and FLUSH meanwhile. They must not plan a record each: they wait, and
    // the next group covers them all with one record and one media flush.
    // None of them is answered before that flush ends, and a power cut right
    // after their answers keeps every write.
    const N: u64 = 8;
    let (c, len) = create();
    let sim = Arc::new(SimMedia::new(len));
    let media = GatedFlushes::over(&sim);
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts()).unwrap());
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    let before = vol.stats();
    media.armed.store(true, Ordering::Release);
    let a = write_then_flush(&vol, 10, block(2));
    until("A's media flush began", || {
        media.started.load(Ordering::Acquire) == 1
    });
    let answered = Arc::new(AtomicUsize::new(0));
    let burst: Vec<_> = (0..N)
        .map(|i| {
            let (v, answered) = (vol.clone(), answered.clone());
            std::thread::spawn(move || {
                v.write((100 + i) * BS as u64, &block(40 + i as u8), false)
                    .unwrap();
                v.flush().unwrap();
                answered.fetch_add(1, Ordering::AcqRel);
            })
        })
        .collect();
    until("every FLUSH of the burst arrived", || {
        vol.stats().host_flushes == before.host_flushes + 1 + N
    });
    // (time for each to reach its wait, or to write a record of its own:
    // the count below holds either way, this only makes it sharper)
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        answered.load(Ordering::Acquire),
        0,
        "a FLUSH of the burst answered while no flush covering its write had even begun"
    );
    // A's flush ends: the burst's group (one record) and its media flush
    media.released.store(1, Ordering::Release);
    a.join().unwrap();
    until("the burst's media flush began", || {
        media.started.load(Ordering::Acquire) == 2
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        answered.load(Ordering::Acquire),
        0,
        "a FLUSH of the burst answered before the media flush covering its record ended"
    );
    media.released.store(2, Ordering::Release);
    for t in burst {
        t.join().unwrap();
    }
    let after = vol.stats();
    let records = after.log_records - before.log_records;
    assert!(
        records <= 2,
        "{N} FLUSHes arriving while one group was in flight wrote {records} records (A's and at most one more)"
    );
    assert_eq!(
        media.started.load(Ordering::Acquire),
        2,
        "media flushes: A's and one for the burst"
    );
    assert_eq!(after.flushes_joined - before.flushes_joined, N);
    // a power cut right after the answers: every FLUSHed write is there
    let img = sim.crash_image(Loss::DropAll, 13);
    media.armed.store(false, Ordering::Release);
    drop(vol);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &opts(),
    )
    .unwrap();
    assert!(read(&v2, 10) == block(2)[..], "A's flushed write lost");
    for i in 0..N {
        assert!(
            read(&v2, 100 + i) == block(40 + i as u8)[..],
            "the burst's flushed write {i} lost"
        );
    }
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn a_burst_that_joined_a_failed_group_is_not_answered_ok() {
    // The group A leads fails in its media flush (EIO: the volume stops);
    // the FLUSHes that joined the next group while A's was in flight must
    // be answered with an error, never Ok on the strength of a group that
    // did not make anything durable
    const N: u64 = 4;
    let (c, len) = create();
    let media = GatedFlushes::over(&Arc::new(SimMedia::new(len)));
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts()).unwrap());
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    let before = vol.stats();
    media.fail.store(1, Ordering::Release);
    media.armed.store(true, Ordering::Release);
    let v = vol.clone();
    let a = std::thread::spawn(move || {
        v.write(10 * BS as u64, &block(2), false).unwrap();
        v.flush()
    });
    until("A's media flush began", || {
        media.started.load(Ordering::Acquire) == 1
    });
    let burst: Vec<_> = (0..N)
        .map(|i| {
            let v = vol.clone();
            std::thread::spawn(move || {
                v.write((100 + i) * BS as u64, &block(40 + i as u8), false)
                    .unwrap();
                v.flush()
            })
        })
        .collect();
    until("every FLUSH of the burst arrived", || {
        vol.stats().host_flushes == before.host_flushes + 1 + N
    });
    std::thread::sleep(Duration::from_millis(100));
    media.released.store(usize::MAX, Ordering::Release);
    assert!(a.join().unwrap().is_err(), "A's failed flush answered Ok");
    for (i, t) in burst.into_iter().enumerate() {
        assert!(
            t.join().unwrap().is_err(),
            "FLUSH {i} of the burst answered Ok though the media flush failed and the volume stopped"
        );
    }
}

#[test]
fn a_flush_then_parked_in_the_open_group_is_answered_after_its_groups_flush() {
    // The fill with the NBD server's path (`flush_then`): while A's group is
    // in flight (held in its media flush), B's FLUSH parks in the open group
    // at once, writing nothing; when A's group ends the fill thread leads
    // B's group (one record, one media flush) and answers B only after that
    // flush ended. A power cut right after B's answer keeps B's write.
    let (c, len) = create();
    let sim = Arc::new(SimMedia::new(len));
    let media = GatedFlushes::over(&sim);
    let vol =
        Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &opts_bg_fill()).unwrap());
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    let before = vol.stats();
    media.armed.store(true, Ordering::Release);
    let a = write_then_flush(&vol, 10, block(2));
    until("A's media flush began", || {
        media.started.load(Ordering::Acquire) == 1
    });
    vol.write(20 * BS as u64, &block(3), false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    vol.flush_then(Box::new(move |r| {
        let who = std::thread::current().name().map(str::to_string);
        tx.send((r.is_ok(), who)).unwrap();
    }));
    let s = vol.stats();
    assert_eq!(
        s.flushes_parked - before.flushes_parked,
        1,
        "B did not park"
    );
    assert_eq!(
        s.log_records - before.log_records,
        1,
        "B wrote a record of its own while a group was in flight"
    );
    assert!(rx.try_recv().is_err(), "B answered at once");
    media.released.store(1, Ordering::Release);
    a.join().unwrap();
    until("B's group's media flush began", || {
        media.started.load(Ordering::Acquire) == 2
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        rx.try_recv().is_err(),
        "B answered before the media flush of its group ended"
    );
    media.released.store(2, Ordering::Release);
    let (ok, who) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("B never answered");
    assert!(ok);
    assert_eq!(
        who.as_deref(),
        Some("sluice-fill"),
        "led by the fill thread"
    );
    assert_eq!(vol.stats().log_records - before.log_records, 2);
    let img = sim.crash_image(Loss::DropAll, 17);
    media.armed.store(false, Ordering::Release);
    drop(vol);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &opts(),
    )
    .unwrap();
    assert!(read(&v2, 10) == block(2)[..], "A's flushed write lost");
    assert!(
        read(&v2, 20) == block(3)[..],
        "B's answered FLUSH lost its write"
    );
}
