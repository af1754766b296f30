//! The intent log (issue 18, format v2): a FLUSH after a few small writes
//! writes one record into the ring and leaves the chunk open; a crash after it
//! keeps the flushed writes (the mount replays the record and re-homes its
//! blocks); v1 volumes stay v1; `sluice info`'s superblock shows the ring.

use sluice::geometry::Geometry;
use sluice::media::{Loss, Media, SimMedia};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::sync::Arc;

const BS: usize = 4096;

fn create(log: Option<u64>) -> (CreateOptions, u64) {
    let c = CreateOptions {
        logical_bytes: Some(256 * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        uuid: Some([3; 16]),
        intent_log: log,
        ..Default::default()
    };
    let g = Geometry::for_logical_log(256, 32, 0.1, log.unwrap_or(0));
    (c, g.media_bytes())
}

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 30),
        ..Default::default()
    }
}

fn block(v: u8) -> Vec<u8> {
    let mut b = vec![v; BS];
    b[0] = 1; // never all-zero or all-ones
    b
}

#[test]
fn flush_logs_a_record_and_a_crash_keeps_the_flushed_writes() {
    let (c, len) = create(Some(256 << 10));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    assert_eq!(vol.superblock().version(), 2);
    for i in 0..3u64 {
        vol.write(i * BS as u64, &block(10 + i as u8), false)
            .unwrap();
    }
    vol.trim(7 * BS as u64, BS as u64, false).unwrap();
    vol.flush().unwrap();
    // a FUA write: one more record
    vol.write(20 * BS as u64, &block(99), true).unwrap();
    // not flushed: may be lost
    vol.write(30 * BS as u64, &block(77), false).unwrap();
    let s = vol.stats();
    assert_eq!(
        s.log_records, 2,
        "two records, no chunk sealed by the flushes"
    );
    assert_eq!(s.chunks_sealed, 0);
    assert!(s.media_log_bytes >= 4 * BS as u64 + 2 * BS as u64);
    drop(vol);
    for loss in [Loss::DropAll, Loss::Subset, Loss::KeepAll] {
        let img = media.crash_image(loss, 7);
        let m2 = Arc::new(SimMedia::from_image(img));
        let v2 = Volume::open(m2.clone() as Arc<dyn Media>, &det()).unwrap();
        let r = v2.mount_report();
        assert_eq!(r.rules.log_record_replayed, 2, "{loss:?}");
        assert!(r.rules.log_end_at_unverified_record >= 1);
        let mut buf = vec![0u8; BS];
        for i in 0..3u64 {
            v2.read(i * BS as u64, &mut buf).unwrap();
            assert_eq!(buf, block(10 + i as u8), "block {i} {loss:?}");
        }
        v2.read(20 * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(99));
        // re-homed and checkpointed by the mount: a second crash keeps them
        // without the log (the new start is past the replayed records)
        drop(v2);
        let m3 = Arc::new(SimMedia::from_image(m2.crash_image(Loss::DropAll, 1)));
        let v3 = Volume::open(m3 as Arc<dyn Media>, &det()).unwrap();
        assert_eq!(v3.mount_report().rules.log_record_replayed, 0);
        v3.read(BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(11));
    }
}

#[test]
fn many_flushes_wrap_the_ring_and_persist_new_starts() {
    let (c, len) = create(Some(64 << 10));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    for i in 0..400u64 {
        vol.write((i % 200) * BS as u64, &block(i as u8), false)
            .unwrap();
        vol.flush().unwrap();
    }
    let s = vol.stats();
    assert!(s.log_records > 300, "{} records", s.log_records);
    drop(vol);
    let img = media.crash_image(Loss::DropAll, 3);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &det(),
    )
    .unwrap();
    let mut buf = vec![0u8; BS];
    for i in 200..400u64 {
        v2.read((i % 200) * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i as u8), "block {}", i % 200);
    }
}

#[test]
fn large_flushes_seal_as_before_and_v1_stays_v1() {
    let (c, len) = create(Some(256 << 10));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media as Arc<dyn Media>, &c, &det()).unwrap();
    let big: Vec<u8> = (0..16 * BS).map(|i| (i % 251) as u8 + 1).collect();
    vol.write(0, &big, false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_records, 0, "16 blocks > 8: sealed");
    assert_eq!(vol.stats().chunks_sealed, 1);
    let (c1, len1) = create(None);
    let m1 = Arc::new(SimMedia::new(len1));
    let v1 = Volume::create(m1 as Arc<dyn Media>, &c1, &det()).unwrap();
    assert_eq!(v1.superblock().version(), 1);
    assert!(v1.superblock().v2.is_none());
    v1.write(0, &block(5), false).unwrap();
    v1.flush().unwrap();
    assert_eq!(v1.stats().log_records, 0);
}
