//! Large host writes stream their data blocks to their places before their
//! chunk's seal (`Shared::append_run`, docs/intent-log.md §4.4): what they
//! write is exactly the blocks they append (virtual blocks in between, a
//! buffer not aligned for direct IO, runs across chunk boundaries), every
//! block is written once, a crash keeps every flushed write, and a seal that
//! races a streamed write in flight waits for it before its chunk counts as
//! written (else a FLUSH could be answered while a block its chunk's header
//! names is not on the media: the chunk fails its check at mount and takes
//! the flushed writes in it along).

use sluice::geometry::Geometry;
use sluice::media::{AlignedBuf, Loss, Media, SimMedia};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;
const LOGICAL: u64 = 2048;

fn create(log: Option<u64>) -> (CreateOptions, u64) {
    let c = CreateOptions {
        logical_bytes: Some(LOGICAL * BS as u64),
        overprovision: 0.25,
        segment_bytes: 256 * BS as u64,
        uuid: Some([5; 16]),
        intent_log: log,
        ..Default::default()
    };
    let g = Geometry::for_logical_log(LOGICAL, 256, 0.25, log.unwrap_or(0));
    (c, g.media_bytes())
}

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 30),
        ..Default::default()
    }
}

/// `n` blocks of data from `seed`, with a zero block at 5 and a ones block
/// at 9 when `holes` (virtual records in the middle of a streamed run).
fn payload(seed: u8, n: usize, holes: bool) -> Vec<u8> {
    let mut v = vec![0u8; n * BS];
    for (i, b) in v.chunks_exact_mut(BS).enumerate() {
        for (j, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31) ^ (j as u8).wrapping_mul(7) ^ seed;
        }
        b[0] = 1; // never all zeros or all ones
    }
    if holes && n > 9 {
        v[5 * BS..6 * BS].fill(0);
        v[9 * BS..10 * BS].fill(0xff);
    }
    v
}

/// `p` in a buffer aligned for direct IO (a streamed write's data is
/// placed from the caller's buffer only when it is aligned).
fn aligned_buf(p: &[u8]) -> AlignedBuf {
    let mut a = AlignedBuf::new(p.len());
    a.copy_from_slice(p);
    a
}

fn read(vol: &Volume, lba: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n * BS];
    vol.read(lba * BS as u64, &mut b).unwrap();
    b
}

#[test]
fn streamed_writes_hold_exactly_their_blocks_once_and_survive_a_crash() {
    // deterministic mode, and with writer threads (a chunk a streamed write
    // sealed goes to them before its claims are written: `submit_now`)
    let modes = [
        (None, false),
        (Some(1u64 << 20), false),
        (None, true),
        (Some(1u64 << 20), true),
    ];
    for (log, threads) in modes {
        let (c, len) = create(log);
        let media = Arc::new(SimMedia::new(len));
        let opts = OpenOptions {
            background: threads,
            ..det()
        };
        let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &opts).unwrap();
        // (lba, blocks, seed, holes, aligned buffer)
        let writes: [(u64, usize, u8, bool, bool); 5] = [
            (0, 40, 1, true, true),
            (100, 64, 2, false, false),
            (300, 300, 3, true, true),  // across a chunk boundary
            (700, 17, 4, false, false), // unaligned: streamed from a copy
            (20, 16, 5, false, true),   // overwrites part of the first
        ];
        let mut expect = vec![0u8; LOGICAL as usize * BS];
        let mut data_blocks = 0u64;
        for &(lba, n, seed, holes, aligned) in &writes {
            let p = payload(seed, n, holes);
            data_blocks += p
                .chunks_exact(BS)
                .filter(|b| b.iter().any(|&x| x != 0) && b.iter().any(|&x| x != 0xff))
                .count() as u64;
            if aligned {
                vol.write(lba * BS as u64, &aligned_buf(&p), false).unwrap();
            } else {
                // one byte off a 4 KiB boundary
                let mut v = vec![0u8; p.len() + 1];
                v[1..].copy_from_slice(&p);
                vol.write(lba * BS as u64, &v[1..], false).unwrap();
            }
            expect[lba as usize * BS..(lba as usize + n) * BS].copy_from_slice(&p);
        }
        vol.flush().unwrap();
        let s = vol.stats();
        assert!(
            s.streamed_blocks >= data_blocks - 2,
            "{log:?}/{threads}: {} of {data_blocks} data blocks streamed",
            s.streamed_blocks
        );
        // every data block reached the media once: streamed, or (the last
        // open chunk's, when a FLUSH record or seal wrote them) not twice
        assert_eq!(
            s.media_user_data_bytes,
            data_blocks * BS as u64,
            "{log:?}/{threads}: data blocks written more than once"
        );
        assert_eq!(
            read(&vol, 0, LOGICAL as usize),
            expect,
            "{log:?}/{threads} before"
        );
        drop(vol);
        for loss in [Loss::DropAll, Loss::Subset, Loss::KeepAll] {
            let m2 = Arc::new(SimMedia::from_image(media.crash_image(loss, 11)));
            let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
            assert_eq!(
                read(&v2, 0, LOGICAL as usize),
                expect,
                "{log:?}/{threads} after a crash, {loss:?}"
            );
        }
    }
}

/// SimMedia whose writes of 8 or more blocks that are not chunk headers or
/// superblocks (a streamed run) are held back `DELAY` before they reach it.
struct SlowPlacing {
    sim: Arc<SimMedia>,
    started: AtomicBool,
}

/// A volume (intent log `log`) over a `SlowPlacing` of a fresh simulated
/// device, its `started` cleared after the create (the create's own writes
/// do not count): the device, the wrapper and the volume.
fn slow_placing_volume(log: Option<u64>) -> (Arc<SimMedia>, Arc<SlowPlacing>, Arc<Volume>) {
    let (c, len) = create(log);
    let sim = Arc::new(SimMedia::new(len));
    let media = Arc::new(SlowPlacing {
        sim: sim.clone(),
        started: AtomicBool::new(false),
    });
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap());
    media.started.store(false, Ordering::Release);
    (sim, media, vol)
}

impl SlowPlacing {
    /// Wait (20 s at most, else fail with `what`) until a placing write
    /// has begun and is held.
    fn wait_started(&self, what: &str) {
        let t0 = std::time::Instant::now();
        while !self.started.load(Ordering::Acquire) {
            assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

const DELAY: Duration = Duration::from_millis(300);

impl Media for SlowPlacing {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.len() >= 8 * BS && !buf.starts_with(b"SLUICE") {
            self.started.store(true, Ordering::Release);
            std::thread::sleep(DELAY);
        }
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "slow placing".into()
    }
}

#[test]
fn a_flush_that_seals_a_chunk_waits_for_its_streamed_blocks_in_flight() {
    let (sim, media, vol) = slow_placing_volume(None);
    let big = aligned_buf(&payload(7, 32, false));
    let small = payload(8, 1, false);
    let v = vol.clone();
    let writer = std::thread::spawn(move || v.write(0, &big, false).unwrap());
    // the big write has appended its blocks and its placing write is held
    media.wait_started("the 128 KiB write never streamed its blocks");
    // a block after them in the same open chunk, then a FLUSH: it seals the
    // chunk, whose header names the big write's blocks too
    vol.write(1000 * BS as u64, &small, false).unwrap();
    vol.flush().unwrap();
    // power cut now: only what the FLUSH made durable is there
    let img = sim.crash_image(Loss::DropAll, 3);
    writer.join().unwrap();
    let m2 = Arc::new(SimMedia::from_image(img));
    let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
    assert_eq!(
        read(&v2, 1000, 1),
        small,
        "a flushed write lost: its chunk was counted written before the streamed blocks it names"
    );
}

/// SimMedia that counts the writes it takes of each size.
struct Sizes {
    sim: SimMedia,
    sizes: std::sync::Mutex<std::collections::BTreeMap<usize, u64>>,
}

impl Media for Sizes {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        *self.sizes.lock().unwrap().entry(buf.len()).or_default() += 1;
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "write sizes".into()
    }
}

/// Far from a FLUSH, a long run of 1 MiB writes is written behind: each
/// request returns once its blocks are in the open chunk, and the device
/// sees every full chunk as one 1 MiB write (header and 255 data blocks)
/// from a writer thread; nothing streams. Within `STREAM_NEAR_FLUSH_BYTES`
/// of the mount or of a FLUSH, large writes stream (a FLUSH waits for
/// their data). Either way a power cut after the FLUSH keeps every write.
#[test]
fn large_writes_far_from_a_flush_go_out_as_whole_chunks() {
    const MIB: usize = 1 << 20;
    let near = sluice::volume::STREAM_NEAR_FLUSH_BYTES as usize;
    let logical = (near + 32 * MIB) as u64;
    let seg_bytes = 4 * MIB as u64;
    let c = CreateOptions {
        logical_bytes: Some(logical),
        overprovision: 0.25,
        segment_bytes: seg_bytes,
        uuid: Some([6; 16]),
        ..Default::default()
    };
    let g = Geometry::for_logical_log(logical / BS as u64, (seg_bytes / BS as u64) as u32, 0.25, 0);
    let sim = SimMedia::new(g.media_bytes());
    let media = Arc::new(Sizes {
        sim,
        sizes: Default::default(),
    });
    let opts = OpenOptions {
        background: true,
        // no idle seal of a part chunk if the test stalls on a loaded machine
        idle_seal_ms: 600_000,
        ..det()
    };
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &opts).unwrap();
    let writes = logical as usize / MIB - 2;
    let mut buf = AlignedBuf::new(MIB);
    let mut expect = vec![0u8; writes * MIB];
    for i in 0..writes {
        buf.copy_from_slice(&payload(i as u8, MIB / BS, false));
        vol.write((i * MIB) as u64, &buf, false).unwrap();
        expect[i * MIB..(i + 1) * MIB].copy_from_slice(&buf);
    }
    let s = vol.stats();
    // the writes within `near` of the mount streamed (each 1 MiB request
    // but the one crossing the line); none after it
    let near_blocks = (near / BS) as u64;
    assert!(
        s.streamed_blocks >= near_blocks - 256 && s.streamed_blocks <= near_blocks + 256,
        "{} blocks streamed, expected those of the first {near} bytes ({near_blocks})",
        s.streamed_blocks
    );
    // the rest reached the media as whole 1 MiB chunks, header included
    let far_chunks = ((writes * MIB - near) / (255 * BS)) as u64;
    vol.flush().unwrap();
    let whole = media.sizes.lock().unwrap().get(&MIB).copied().unwrap_or(0);
    assert!(
        whole + 2 >= far_chunks,
        "{whole} whole-chunk writes of 1 MiB, expected about {far_chunks}: {:?}",
        media.sizes.lock().unwrap()
    );
    // after a FLUSH, a large write streams again
    let before = vol.stats().streamed_blocks;
    vol.write(0, &buf, false).unwrap();
    expect[..MIB].copy_from_slice(&buf);
    assert!(
        vol.stats().streamed_blocks >= before + 255,
        "a 1 MiB write right after a FLUSH did not stream"
    );
    vol.flush().unwrap();
    drop(vol);
    let m2 = Arc::new(SimMedia::from_image(
        media.sim.crash_image(Loss::DropAll, 5),
    ));
    let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
    assert!(
        read(&v2, 0, writes * MIB / BS) == expect,
        "a flushed write lost after a power cut"
    );
}
/// With a version 3 ring in the volume, a streamed write's last batch
/// carries a record of what the open chunk holds unlogged in its own
/// submission (docs/intent-log.md §4.5): the FLUSH after it writes no record
/// of its own, only the media flush, and a crash after the FLUSH keeps the
/// write (the record replays, its data verified at its places) whatever the
/// volatile cache lost before it.
#[test]
fn a_streamed_write_carries_its_record_and_the_flush_writes_none() {
    let (c, len) = create(Some(1 << 20));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    let mut expect = vec![0u8; LOGICAL as usize * BS];
    // a small write first (its block is the FLUSH's to log), then a FLUSH,
    // then a large write with holes in it
    let small = payload(1, 1, false);
    vol.write(1500 * BS as u64, &small, false).unwrap();
    vol.flush().unwrap();
    expect[1500 * BS..1501 * BS].copy_from_slice(&small);
    let before = vol.stats();
    let big = aligned_buf(&payload(2, 48, true));
    vol.write(100 * BS as u64, &big, false).unwrap();
    expect[100 * BS..148 * BS].copy_from_slice(&big);
    let after_write = vol.stats();
    assert_eq!(
        after_write.streamed_records - before.streamed_records,
        1,
        "the large write wrote one record with its data"
    );
    assert_eq!(after_write.log_records - before.log_records, 1);
    vol.flush().unwrap();
    let after_flush = vol.stats();
    assert_eq!(
        after_flush.log_records, after_write.log_records,
        "the FLUSH after a streamed write wrote a record of its own"
    );
    assert_eq!(after_flush.media_log_bytes, after_write.media_log_bytes);
    assert_eq!(read(&vol, 0, LOGICAL as usize), expect, "before a crash");
    // a crash right after the FLUSH: nothing sealed the chunk, so the
    // large write lives in the ring's record and at its places
    for loss in [Loss::DropAll, Loss::Subset, Loss::KeepAll] {
        let m2 = Arc::new(SimMedia::from_image(media.crash_image(loss, 5)));
        let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
        assert_eq!(
            read(&v2, 0, LOGICAL as usize),
            expect,
            "a flushed streamed write lost after a crash, {loss:?}"
        );
    }
    // a second large write, not flushed: after a crash it is there whole
    // or not at all (its record replays only if its data verifies)
    let big2 = aligned_buf(&payload(3, 32, false));
    vol.write(200 * BS as u64, &big2, false).unwrap();
    let mut with2 = expect.clone();
    with2[200 * BS..232 * BS].copy_from_slice(&big2);
    // (the images are taken while the volume is open: closing it flushes)
    let images: Vec<Vec<u8>> = (0..8).map(|s| media.crash_image(Loss::Subset, s)).collect();
    drop(vol);
    for (seed, img) in images.into_iter().enumerate() {
        let m2 = Arc::new(SimMedia::from_image(img));
        let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
        let got = read(&v2, 0, LOGICAL as usize);
        assert!(
            got == expect || got == with2,
            "seed {seed}: the volume after a crash is not a prefix of the writes"
        );
    }
}

/// A streamed write writes its record with its data only while it is the
/// one host write under way: with company (the bench's pieces of one large
/// write, several jobs) every request would write a record where their
/// FLUSH writes one (docs/intent-log.md §4.5, §4.11). A's placing write is
/// held back; B, written meanwhile, leaves its blocks to the FLUSH's record;
/// a power cut right after the FLUSH keeps both.
#[test]
fn a_streamed_write_with_company_leaves_its_record_to_the_flush() {
    let (sim, media, vol) = slow_placing_volume(Some(1 << 20));
    let aligned = |seed: u8| aligned_buf(&payload(seed, 32, false));
    let (a, b) = (aligned(11), aligned(12));
    let before = vol.stats();
    let v = vol.clone();
    let a2 = aligned(11);
    let writer = std::thread::spawn(move || v.write(0, &a2, false).unwrap());
    media.wait_started("the first 128 KiB write never streamed its blocks");
    // A is alone when it plans (its record goes with its held data); B comes
    // while A's write is in flight
    vol.write(500 * BS as u64, &b, false).unwrap();
    writer.join().unwrap();
    let s = vol.stats();
    assert_eq!(
        s.streamed_blocks - before.streamed_blocks,
        64,
        "both writes streamed"
    );
    assert_eq!(
        s.streamed_records - before.streamed_records,
        1,
        "a streamed write with company wrote its own record"
    );
    vol.flush().unwrap();
    let after = vol.stats();
    assert_eq!(
        after.log_records - s.log_records,
        1,
        "the FLUSH logged the blocks of the write that had company"
    );
    // B's blocks were at their places before the FLUSH: its record names
    // them and writes none again (mutation `record-rewrites-placed`)
    assert_eq!(
        after.media_user_data_bytes - before.media_user_data_bytes,
        64 * BS as u64,
        "a data block reached the media twice"
    );
    let img = sim.crash_image(Loss::DropAll, 4);
    let m2 = Arc::new(SimMedia::from_image(img));
    let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
    assert_eq!(
        read(&v2, 0, 32),
        a[..],
        "the alone write lost after a crash"
    );
    assert_eq!(
        read(&v2, 500, 32),
        b[..],
        "the write with company lost after a crash"
    );
    // the FLUSH ended an interval of two writes: the next write, alone now,
    // may be the first of another burst and leaves its record to its FLUSH;
    // after an interval of one it carries its record again
    vol.write(800 * BS as u64, &aligned(13), false).unwrap();
    assert_eq!(
        vol.stats().streamed_records,
        s.streamed_records,
        "a write after an interval of two wrote its own record"
    );
    vol.flush().unwrap();
    vol.write(900 * BS as u64, &aligned(14), false).unwrap();
    assert_eq!(
        vol.stats().streamed_records,
        s.streamed_records + 1,
        "a lone write after an interval of one left its record to the FLUSH"
    );
    vol.flush().unwrap();
}

/// A streamed block is not copied into its chunk's image (log.rs, the
/// image invariant): the only host blocks copied there are those of writes
/// too small to stream (`Stats::image_copied_blocks`, mutation
/// `streamed-block-copied`). Read before any FLUSH, while their chunk is
/// open or its image in flight, the streamed blocks come from their places,
/// checked against their chunk's CRCs, never from the image's stale slots
/// (mutation `streamed-read-from-image`); a crash after the FLUSH keeps all.
#[test]
fn streamed_blocks_skip_the_chunk_image_and_read_back_from_their_places() {
    for (log, threads) in [
        (None, false),
        (Some(1u64 << 20), false),
        (None, true),
        (Some(1u64 << 20), true),
    ] {
        let (c, len) = create(log);
        let media = Arc::new(SimMedia::new(len));
        let opts = OpenOptions {
            background: threads,
            ..det()
        };
        let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &opts).unwrap();
        let mut expect = vec![0u8; LOGICAL as usize * BS];
        // (lba, blocks, seed, aligned buffer): the last too small to stream
        let writes: [(u64, usize, u8, bool); 4] = [
            (0, 40, 21, true),
            (300, 300, 22, true), // across a chunk boundary: one image in flight
            (700, 17, 23, false), // unaligned: streamed from a pool copy
            (1000, 4, 24, true),
        ];
        for &(lba, n, seed, aligned) in &writes {
            let p = payload(seed, n, false);
            if aligned {
                vol.write(lba * BS as u64, &aligned_buf(&p), false).unwrap();
            } else {
                let mut v = vec![0u8; p.len() + 1];
                v[1..].copy_from_slice(&p);
                vol.write(lba * BS as u64, &v[1..], false).unwrap();
            }
            expect[lba as usize * BS..(lba as usize + n) * BS].copy_from_slice(&p);
        }
        let s = vol.stats();
        assert_eq!(
            s.streamed_blocks,
            40 + 300 + 17,
            "{log:?}/{threads}: every block of the large writes streamed"
        );
        assert_eq!(
            s.image_copied_blocks, 4,
            "{log:?}/{threads}: only the small write's blocks go into the chunk image"
        );
        assert_eq!(
            read(&vol, 0, LOGICAL as usize),
            expect,
            "{log:?}/{threads}: read before the FLUSH"
        );
        vol.flush().unwrap();
        assert_eq!(
            read(&vol, 0, LOGICAL as usize),
            expect,
            "{log:?}/{threads}: read after the FLUSH"
        );
        drop(vol);
        let m2 = Arc::new(SimMedia::from_image(media.crash_image(Loss::DropAll, 5)));
        let v2 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
        assert_eq!(
            read(&v2, 0, LOGICAL as usize),
            expect,
            "{log:?}/{threads}: after a crash"
        );
    }
}

/// With a streamed write's placing write held back: a read of its blocks
/// waits for that write (they are in no image) and returns the new data;
/// and a FLUSH whose record would have to carry those blocks (not yet
/// placed, not in the image) seals the chunk instead and waits for them,
/// so a power cut right after it keeps the flushed write (mutation
/// `record-copies-streamed`: the record copied the image's stale slots to
/// their places, the FLUSH was answered, and replay ended at that record).
#[test]
fn reads_and_flushes_wait_for_a_streamed_write_in_flight() {
    let (sim, media, vol) = slow_placing_volume(Some(1 << 20));
    // an interval of two writes: the next large write leaves its record to
    // its FLUSH (`a_streamed_write_with_company_leaves_its_record_to_the_flush`)
    vol.write(1800 * BS as u64, &payload(30, 1, false), false)
        .unwrap();
    vol.write(1801 * BS as u64, &payload(31, 1, false), false)
        .unwrap();
    vol.flush().unwrap();
    media.started.store(false, Ordering::Release);
    let a = aligned_buf(&payload(32, 32, false));
    let a2 = aligned_buf(&a);
    let v = vol.clone();
    let writer = std::thread::spawn(move || v.write(0, &a2, false).unwrap());
    media.wait_started("the 128 KiB write never streamed its blocks");
    let s = vol.stats();
    assert_eq!(
        s.streamed_records, 0,
        "the held write planned its own record"
    );
    // read while the placing write is held: waits, then the new data
    assert_eq!(
        read(&vol, 0, 32),
        a[..],
        "a streamed block read before its write"
    );
    writer.join().unwrap();

    // again, now a small write and a FLUSH while the placing write is held
    media.started.store(false, Ordering::Release);
    let b = aligned_buf(&payload(33, 32, false));
    let b2 = aligned_buf(&b);
    let small = payload(34, 1, false);
    vol.write(1802 * BS as u64, &payload(35, 1, false), false)
        .unwrap();
    vol.flush().unwrap();
    let v = vol.clone();
    let writer = std::thread::spawn(move || v.write(100 * BS as u64, &b2, false).unwrap());
    media.wait_started("the second 128 KiB write never streamed its blocks");
    assert_eq!(
        vol.stats().streamed_records,
        0,
        "the second held write planned its own record"
    );
    vol.write(1000 * BS as u64, &small, false).unwrap();
    vol.flush().unwrap();
    // power cut now: only what the FLUSH made durable is there
    let img = sim.crash_image(Loss::DropAll, 6);
    writer.join().unwrap();
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &det(),
    )
    .unwrap();
    assert_eq!(read(&v2, 1000, 1), small, "a flushed write lost");
    assert_eq!(read(&v2, 0, 32), a[..], "the first streamed write lost");
}

/// A streamed block read at its place while its chunk is still open is
/// checked against the CRC its chunk will record: a bit flipped on the way
/// from the media fails the read, never returned as data (mutation
/// `streamed-read-unverified`).
#[test]
fn a_streamed_block_read_from_its_place_is_checked() {
    let (c, len) = create(Some(1 << 20));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    let p = payload(40, 32, false);
    vol.write(64 * BS as u64, &aligned_buf(&p), false).unwrap();
    assert_eq!(vol.stats().streamed_blocks, 32, "the write streamed");
    // where block 70 (the 7th) went: the one place in the image holding it
    let img = media.current_image();
    let want = &p[6 * BS..7 * BS];
    let at: Vec<usize> = (0..img.len() / BS)
        .filter(|&k| &img[k * BS..(k + 1) * BS] == want)
        .collect();
    assert_eq!(at.len(), 1, "the block is on the media once");
    assert_eq!(read(&vol, 64, 32), p, "read back intact");
    media.flip_on_read((at[0] * BS + 100) as u64);
    let mut b = vec![0u8; 32 * BS];
    assert!(
        vol.read(64 * BS as u64, &mut b).is_err(),
        "a streamed block that does not match its CRC was returned"
    );
}

/// SimMedia whose first placing write (8 blocks or more, not a chunk header
/// nor a superblock) after `arm` is held until `release`; it counts the
/// intent log records it takes (`SLUICELR`).
struct Gated {
    sim: Arc<SimMedia>,
    armed: AtomicBool,
    held: AtomicBool,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
    records: std::sync::atomic::AtomicU64,
}

impl Gated {
    fn wait_for(&self, what: &str, f: impl Fn() -> bool) {
        let t0 = std::time::Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

impl Media for Gated {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.starts_with(b"SLUICELR") {
            self.records.fetch_add(1, Ordering::AcqRel);
        }
        if buf.len() >= 8 * BS
            && !buf.starts_with(b"SLUICE")
            && self.armed.swap(false, Ordering::AcqRel)
        {
            self.held.store(true, Ordering::Release);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.cv.wait(open).unwrap();
            }
        }
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "gated placing".into()
    }
}

/// The last write of a burst as long as the last FLUSH interval's (the
/// bench's 8th 128 KiB piece of a 1 MiB write) writes the record of what
/// the open chunk holds unlogged with its own data, naming the blocks the
/// burst's other writes are still placing, so their FLUSH writes no record
/// (docs/intent-log.md §4.13). That record counts written only once those
/// blocks are placed: A's placing write is held; B's data and record reach
/// the media; B's write (and so its FLUSH) must not return before A's
/// blocks are placed, else a power cut right after the FLUSH finds B's
/// record naming blocks that fail their CRCs, replay ends the log there and
/// B, flushed, is lost (mutation `streamed-record-before-company`).
#[test]
fn the_last_write_of_a_burst_carries_the_record_and_waits_for_its_company() {
    let (c, len) = create(Some(1 << 20));
    let sim = Arc::new(SimMedia::new(len));
    let media = Arc::new(Gated {
        sim: sim.clone(),
        armed: AtomicBool::new(false),
        held: AtomicBool::new(false),
        open: std::sync::Mutex::new(false),
        cv: std::sync::Condvar::new(),
        records: std::sync::atomic::AtomicU64::new(0),
    });
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap());
    let mut expect = vec![0u8; LOGICAL as usize * BS];
    // an interval of two writes (too small to stream), then its FLUSH
    for (k, lba) in [1500usize, 1501].into_iter().enumerate() {
        let p = payload(30 + k as u8, 1, false);
        vol.write(lba as u64 * BS as u64, &p, false).unwrap();
        expect[lba * BS..(lba + 1) * BS].copy_from_slice(&p);
    }
    vol.flush().unwrap();
    let before = vol.stats();
    let (a, b) = (payload(31, 32, false), payload(32, 32, false));
    expect[..32 * BS].copy_from_slice(&a);
    expect[500 * BS..532 * BS].copy_from_slice(&b);
    // A, the first write of this interval: its placing write is held
    media.armed.store(true, Ordering::Release);
    let (va, a2) = (vol.clone(), aligned_buf(&a));
    let wa = std::thread::spawn(move || va.write(0, &a2, false).unwrap());
    media.wait_for("A's placing write never began", || {
        media.held.load(Ordering::Acquire)
    });
    // B, the second: as many writes as the last interval held
    let records = media.records.load(Ordering::Acquire);
    let (vb, b2, sb) = (vol.clone(), aligned_buf(&b), sim.clone());
    let wb = std::thread::spawn(move || {
        vb.write(500 * BS as u64, &b2, false).unwrap();
        vb.flush().unwrap();
        // a power cut right after B's FLUSH returned
        sb.crash_image(Loss::DropAll, 6)
    });
    media.wait_for("B wrote no record with its data", || {
        media.records.load(Ordering::Acquire) > records
    });
    // room for B's write and FLUSH to return, were they to
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !wb.is_finished(),
        "B's write and FLUSH returned while a block its record names was still being placed"
    );
    media.release();
    wa.join().unwrap();
    let img = wb.join().unwrap();
    let s = vol.stats();
    assert_eq!(
        s.streamed_records - before.streamed_records,
        1,
        "the last write of the burst wrote one record with its data (the first none)"
    );
    assert_eq!(
        s.log_records - before.log_records,
        1,
        "the FLUSH after the burst wrote a record of its own"
    );
    assert_eq!(
        s.media_user_data_bytes - before.media_user_data_bytes,
        64 * BS as u64,
        "a data block reached the media twice"
    );
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &det(),
    )
    .unwrap();
    assert_eq!(
        read(&v2, 0, LOGICAL as usize),
        expect,
        "a flushed write lost after a power cut right after its FLUSH"
    );
}

/// SimMedia whose first intent log record write after `armed` fails (EIO).
struct FailRecord {
    sim: Arc<SimMedia>,
    armed: AtomicBool,
}

impl Media for FailRecord {
    fn len(&self) -> u64 {
        self.sim.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.sim.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.starts_with(b"SLUICELR") && self.armed.swap(false, Ordering::AcqRel) {
            return Err(io::Error::other("injected record write error"));
        }
        self.sim.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.sim.flush()
    }
    fn describe(&self) -> String {
        "failing record".into()
    }
}

/// A write error into the ring of a streamed write's own record (its data
/// landed) does not stop the volume: the write returns, the volume falls
/// back to seal-on-FLUSH as after any ring write error (`Commit::place`, as
/// `write_record`), and the FLUSH after it seals the write into the main
/// log; a power cut right after the FLUSH keeps it (mutation
/// `streamed-record-error-stops`).
#[test]
fn a_streamed_records_write_error_falls_back_to_sealing() {
    let (c, len) = create(Some(1 << 20));
    let sim = Arc::new(SimMedia::new(len));
    let media = Arc::new(FailRecord {
        sim: sim.clone(),
        armed: AtomicBool::new(false),
    });
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    // an interval of one write: the next lone large write carries its record
    let small = payload(41, 1, false);
    vol.write(1500 * BS as u64, &small, false).unwrap();
    vol.flush().unwrap();
    let before = vol.stats();
    media.armed.store(true, Ordering::Release);
    let big = payload(42, 32, false);
    vol.write(0, &aligned_buf(&big), false)
        .expect("a streamed write failed with its record's write error");
    assert!(
        !media.armed.load(Ordering::Acquire),
        "the large write wrote no record"
    );
    let s = vol.stats();
    assert_eq!(s.log_fallbacks - before.log_fallbacks, 1, "no fall-back");
    assert_eq!(
        s.streamed_records, before.streamed_records,
        "a record whose write failed was counted"
    );
    vol.flush().expect("the FLUSH after a ring error");
    let img = sim.crash_image(Loss::DropAll, 8);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &det(),
    )
    .unwrap();
    assert_eq!(
        read(&v2, 0, 32),
        big,
        "the streamed write lost after its FLUSH"
    );
    assert_eq!(read(&v2, 1500, 1), small);
}
