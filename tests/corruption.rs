//! Corruption: damage a superblock copy, a checkpoint slot or a chunk. The volume
//! falls back to the other copy, or to replay, or refuses to mount with an error
//! naming the damage; `check` reports each case.

mod common;

use common::*;
use sluice::format::superblock::Superblock;
use sluice::media::{Media, MemMedia};
use sluice::{Error, Volume};
use std::sync::Arc;

const BLOCKS: u64 = 256;

/// A volume with data, closed cleanly, plus its expected content.
fn prepared(checkpoints: bool) -> (Arc<MemMedia>, Vec<u8>) {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(
        media.clone() as Arc<dyn Media>,
        &create,
        &det_open(if checkpoints { 64 << 10 } else { 1 << 40 }),
    )
    .unwrap();
    let mut r = Reference::new(BLOCKS);
    for i in 0..600u64 {
        let op = Op::Write {
            offset: (i * 7 % BLOCKS) * BS as u64,
            len: BS,
            seed: i,
            fill: Fill::Random,
        };
        issue(&vol, &op, false).unwrap();
        r.apply(&op);
    }
    vol.close().unwrap();
    (media, r.cur)
}

fn newest_superblock(media: &MemMedia) -> (usize, Superblock) {
    let img = media.image();
    let a = Superblock::decode(&img[..4096]).ok();
    let b = Superblock::decode(&img[4096..8192]).ok();
    match (a, b) {
        (Some(a), Some(b)) if b.generation > a.generation => (1, b),
        (Some(a), _) => (0, a),
        (_, Some(b)) => (1, b),
        _ => panic!("no superblock"),
    }
}

fn flip(media: &MemMedia, offset: u64) {
    let mut b = [0u8; 1];
    media.read_at(&mut b, offset).unwrap();
    media.poke(offset, &[b[0] ^ 0x04]);
}

fn mount(media: &Arc<MemMedia>) -> sluice::Result<Volume> {
    Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
}

#[test]
fn damaged_superblock_copy_falls_back_to_the_other() {
    let (media, want) = prepared(true);
    let (copy, _) = newest_superblock(&media);
    flip(&media, copy as u64 * 4096 + 40);
    let rep = sluice::check::check(&*media);
    assert!(
        rep.damage
            .iter()
            .any(|d| d.contains(&format!("superblock copy {copy}"))),
        "{:?}",
        rep.damage
    );
    let vol = mount(&media).unwrap();
    assert!(vol
        .mount_report()
        .notes
        .iter()
        .any(|n| n.contains("superblock copy")));
    assert_eq!(read_all(&vol), want);
}

#[test]
fn both_superblocks_damaged_refuses_to_mount_and_says_why() {
    let (media, want) = prepared(false);
    media.poke(100, &[0xee; 8]);
    media.poke(4096 + 100, &[0xee; 8]);
    // both head copies damaged: the tail copies (issue 17) still mount it
    let vol = mount(&media).expect("mounts from the tail copies");
    assert_eq!(vol.mount_report().rules.superblock_tail_fallback, 1);
    assert_eq!(read_all(&vol), want);
    drop(vol);
    // and with the tail copies damaged too it refuses, naming all four
    let tail = media.len() - sluice::format::superblock::TAIL_AREA_BYTES;
    let (media, _) = prepared(false);
    for at in [100, 4096 + 100, tail + 100, tail + 4096 + 100] {
        media.poke(at, &[0xee; 8]);
    }
    let err = mount(&media).err().expect("must refuse");
    let msg = err.to_string();
    assert!(
        msg.contains("no valid superblock")
            && msg.contains("copy 0 at the head")
            && msg.contains("copy 1 at the head")
            && msg.contains("copy 0 at the tail")
            && msg.contains("copy 1 at the tail"),
        "{msg}"
    );
    assert!(!sluice::check::check(&*media).is_clean());
}

#[test]
fn damaged_checkpoint_falls_back_to_older_slot_or_full_rebuild() {
    for checkpoints in [true, false] {
        let (media, want) = prepared(checkpoints);
        let (_, sb) = newest_superblock(&media);
        let slot = sb.checkpoint_slot as usize;
        flip(&media, sb.checkpoint_offset[slot] + 4096 + 123);
        let rep = sluice::check::check(&*media);
        assert!(
            rep.damage
                .iter()
                .any(|d| d.contains(&format!("checkpoint slot {slot}"))),
            "{:?}",
            rep.damage
        );
        let vol = mount(&media).unwrap();
        assert!(
            vol.mount_report()
                .notes
                .iter()
                .any(|n| n.contains(&format!("checkpoint slot {slot} is unusable"))),
            "{:?}",
            vol.mount_report().notes
        );
        assert!(
            vol.mount_report().chunks_replayed > 0,
            "fallback must replay chunks"
        );
        assert_eq!(read_all(&vol), want, "checkpoints={checkpoints}");
        // the mount wrote a fresh checkpoint: the volume is whole again
        vol.close().unwrap();
        assert!(sluice::check::check(&*media).is_clean());
    }
}

/// Media byte offset of block 0 of segment `seg`.
fn chunk_start_of_segment(media: &MemMedia, seg: u32) -> u64 {
    let (_, sb) = newest_superblock(media);
    sb.data_offset + seg as u64 * sb.segment_blocks as u64 * 4096
}

/// Two flushed writes, then a crash: both chunks live only in the log (no
/// checkpoint), the second proves the first durable. Returns the media and the
/// segment holding the first chunk (at block 0).
fn two_flushed_chunks_then_crash() -> (Arc<MemMedia>, u32) {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(BS * 8, 1, Fill::Random), false)
        .unwrap();
    vol.flush().unwrap();
    vol.write(BS as u64 * 20, &payload(BS * 8, 2, Fill::Random), false)
        .unwrap();
    vol.flush().unwrap();
    drop(vol);
    let seg = (0..20)
        .find(|&s| {
            let mut b = [0u8; 8];
            media
                .read_at(&mut b, chunk_start_of_segment(&media, s))
                .unwrap();
            &b == b"SLUICECK"
        })
        .expect("a segment with a chunk");
    (media, seg)
}

#[test]
fn damaged_durable_chunk_in_the_log_refuses_mount_naming_it() {
    let (media, seg) = two_flushed_chunks_then_crash();
    let off = chunk_start_of_segment(&media, seg) + 4096 + 17;
    flip(&media, off);
    let err = mount(&media)
        .err()
        .expect("a damaged durable chunk must not be skipped silently");
    assert!(matches!(err, Error::Corrupt(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("fails verification") && msg.contains("segment"),
        "{msg}"
    );
    let rep = sluice::check::check(&*media);
    assert!(!rep.is_clean());
}

#[test]
fn damaged_chunk_behind_a_checkpoint_is_reported_by_check() {
    let (media, _) = prepared(false);
    let m = sluice::recovery::mount(&*media).unwrap();
    let seg = (0..m.geo.segment_count)
        .find(|&s| {
            m.segs.segs[s as usize].state == sluice::segments::SegState::Closed
                && m.segs.segs[s as usize].fill >= 4
        })
        .expect("a closed segment");
    // flip a byte in the data of the segment's first chunk
    flip(&media, chunk_start_of_segment(&media, seg) + 4096 * 2 + 5);
    let rep = sluice::check::check(&*media);
    assert!(
        rep.damage
            .iter()
            .any(|d| d.contains(&format!("segment {seg} block 0"))
                && d.contains("fails its checksum")),
        "{:?}",
        rep.damage
    );
}

#[test]
fn damaged_durable_chunk_header_refuses_mount_naming_it() {
    let (media, seg) = two_flushed_chunks_then_crash();
    // an entry byte in the header of the first (durable) chunk
    flip(&media, chunk_start_of_segment(&media, seg) + 80);
    let msg = mount(&media).err().expect("must refuse").to_string();
    assert!(
        msg.contains("chunk header") && msg.contains(&format!("segment {seg}")),
        "{msg}"
    );
}
