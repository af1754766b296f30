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
    image_after(&[0..96u64, 0..48], false)
}

/// DST finding B's picture (seeds 19, 51, 54 on 53c3fa5): the chunks after the
/// checkpoint change no block's content (they rewrite every block with the
/// bytes it holds, twice), so when the next mount ends the log at a chunk in a
/// segment the crashed mount had tombstoned, the map falls back to the
/// checkpoint's places of the same bytes, in segments that mount wiped because
/// replay had found them free. On 53c3fa5 every block still read right and only
/// `sluice check` saw it; with verified reads such a block answers EIO (its
/// chunk header is gone).
fn rewritten_image() -> (Vec<u8>, Vec<u8>) {
    image_after(&[0..96u64, 0..96, 0..96], true)
}

/// Write `ranges` in 8-block requests (with `same`, every write of a block
/// gives it the same bytes; a checkpoint follows the first range), flush, and
/// crash with the cache dropped.
fn image_after(ranges: &[std::ops::Range<u64>], same: bool) -> (Vec<u8>, Vec<u8>) {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(BLOCKS);
    let mut seed = 0;
    for (i, range) in ranges.iter().enumerate() {
        for lba in range.clone().step_by(8) {
            seed += 1;
            let op = Op::Write {
                offset: lba * BS as u64,
                len: 8 * BS,
                seed: if same { lba + 1 } else { seed },
                fill: Fill::Random,
            };
            issue(&vol, &op, false).unwrap();
            r.apply(&op);
        }
        if same && i == 0 {
            vol.flush().unwrap();
            vol.checkpoint().unwrap();
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
    vol.read(0, &mut got).unwrap_or_else(|e| {
        panic!(
            "{what}: read after the remount: {e}; mount notes: {:?}",
            vol.mount_report().notes
        )
    });
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

/// Mount `img` once (it must replay and tombstone free segments), then again
/// with the power cut before each of that mount's writes (cache kept or
/// dropped), and check what a third mount finds.
fn cut_every_write_of_the_recovering_mount(img: Vec<u8>, want: &[u8]) {
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
                want,
                &format!("cut before mount write {cut} (drop {drop_probability})"),
            );
        }
    }
}

#[test]
fn power_cut_at_every_write_of_a_recovering_mount_keeps_every_flushed_write() {
    let (img, want) = crashed_image();
    cut_every_write_of_the_recovering_mount(img, &want);
}

/// Finding B: fails with the old finish order (tombstones, then checkpoint):
/// cut after its 4th tombstone, the next mount says "log ends at seq 5 (not
/// found; the crash lost it)" and block 0 answers EIO (segment 0 was wiped).
#[test]
fn power_cut_at_every_write_of_a_recovering_mount_leaves_no_live_block_in_a_wiped_segment() {
    let (img, want) = rewritten_image();
    cut_every_write_of_the_recovering_mount(img, &want);
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
