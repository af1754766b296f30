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
    let a = {
        let v = vol.clone();
        std::thread::spawn(move || {
            v.write(10 * BS as u64, &block(2), false).unwrap();
            v.flush().unwrap();
        })
    };
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
    let b = {
        let v = vol.clone();
        std::thread::spawn(move || {
            v.write(20 * BS as u64, &block(3), false).unwrap();
            v.flush().unwrap();
        })
    };
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
