//! Power cut during mount and during close (issue 9, finding 2): a cut before any
//! write index of a read-write mount (which checkpoints what replay found and
//! tombstones the segments it found free) or of a close must keep every flushed
//! write. Recovery's own writes follow the reuse barrier's order: the durable point
//! is persisted before any segment's first block is wiped.

mod common;

use common::*;
use sluice::media::{CrashPolicy, FaultMedia, Media};
use sluice::Volume;
use std::sync::Arc;

const BLOCKS: u64 = 256;

/// A crash image whose mount must wipe segments: segment-sized writes, then
/// overwrites of the first ones (their segments end up with nothing live), all
/// sealed under one flush so no chunk header records the others as durable.
fn crashed_image() -> (Vec<u8>, Vec<u8>) {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(BLOCKS);
    let mut seed = 0;
    for range in [0..96u64, 0..48] {
        for lba in range.step_by(8) {
            seed += 1;
            let op = Op::Write {
                offset: lba * BS as u64,
                len: 8 * BS,
                seed,
                fill: Fill::Random,
            };
            issue(&vol, &op, false).unwrap();
            r.apply(&op);
        }
    }
    vol.flush().unwrap();
    drop(vol);
    let img = media.crash_image(CrashPolicy {
        drop_probability: 1.0,
        tear_last: false,
        seed: 0,
    });
    (img, r.cur)
}

fn assert_content(img: Vec<u8>, want: &[u8], what: &str) {
    let media = Arc::new(FaultMedia::from_image(img));
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
        .unwrap_or_else(|e| panic!("{what}: remount fails: {e}"));
    let mut got = vec![0u8; want.len()];
    vol.read(0, &mut got).unwrap();
    let bad =
        (0..want.len() / BS).find(|&b| got[b * BS..(b + 1) * BS] != want[b * BS..(b + 1) * BS]);
    assert!(bad.is_none(), "{what}: flushed block {} lost", bad.unwrap());
    // Every block may read right and the map still point into a tombstoned
    // segment, which the next reuse or crash loses (DST finding B): check it.
    let rep = sluice::check::check(&*media);
    assert!(
        rep.is_clean(),
        "{what}: check after the remount: {:?}; mount notes: {:?}",
        rep.damage,
        vol.mount_report().notes
    );
}

#[test]
fn power_cut_at_every_write_of_a_recovering_mount_keeps_every_flushed_write() {
    let (img, want) = crashed_image();
    // the mount this test is about: it replays and must tombstone free segments
    let media = Arc::new(FaultMedia::from_image(img.clone()));
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let rep = vol.mount_report().clone();
    assert!(!rep.clean && rep.chunks_replayed > 0, "{rep:?}");
    assert!(
        rep.rules.free_segment_wipe_scheduled > 0,
        "the scenario must make mount wipe a segment: {rep:?}"
    );
    let writes = media.writes_issued();
    drop(vol);
    assert!(writes >= 3, "mount wrote {writes} times");
    for cut in 0..=writes {
        for drop_probability in [0.0, 1.0] {
            let media = Arc::new(FaultMedia::from_image(img.clone()));
            media.cut_power_after_writes(cut);
            let _ = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40));
            let after = media.crash_image(CrashPolicy {
                drop_probability,
                tear_last: false,
                seed: cut,
            });
            assert_content(
                after,
                &want,
                &format!("cut before mount write {cut} (drop {drop_probability})"),
            );
        }
    }
}

#[test]
fn power_cut_at_every_write_of_a_close_keeps_every_flushed_write() {
    let (img, want) = crashed_image();
    let media = Arc::new(FaultMedia::from_image(img.clone()));
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let base = media.writes_issued();
    vol.close().unwrap();
    let writes = media.writes_issued() - base;
    drop(vol);
    assert!(writes >= 2, "close wrote {writes} times");
    for cut in 0..=writes {
        let media = Arc::new(FaultMedia::from_image(img.clone()));
        let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
        media.cut_power_after_writes(media.writes_issued() + cut);
        let _ = vol.close();
        drop(vol);
        let after = media.crash_image(CrashPolicy {
            drop_probability: 1.0,
            tear_last: false,
            seed: cut,
        });
        assert_content(after, &want, &format!("cut before close write {cut}"));
    }
}
