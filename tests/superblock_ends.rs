//! Superblock copies at both ends of the media (issue 17, finding 10): a volume
//! whose head (first 64 KiB: both head copies and the start of the checkpoint
//! area) or tail (last 64 KiB: both tail copies) was wiped is reported as damage
//! by `check`, still mounts with every flushed block intact, and is whole again
//! after a read-write mount. Both ends wiped refuses with a clear message.

mod common;

use common::*;
use sluice::format::superblock::{Superblock, TAIL_AREA_BYTES};
use sluice::media::{Media, MemMedia};
use sluice::{OpenOptions, Volume};
use std::sync::Arc;

const WIPE: usize = 64 << 10;

/// A volume of `blocks` blocks holding data and checkpoints; `close` decides
/// whether it was closed cleanly or left as after a crash (everything flushed).
/// Returns the media (a copy of the image when not closed) and the content.
fn prepared(blocks: u64, close: bool) -> (Arc<MemMedia>, Vec<u8>) {
    let (create, media_bytes) = small_create(blocks, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(blocks);
    // three checkpoints (slots 0, 1, 0: slot 0 current) with writes between them
    for round in 0..4u64 {
        for i in 0..300u64 {
            let op = Op::Write {
                offset: ((i * 7 + round * 13) % blocks) * BS as u64,
                len: BS,
                seed: round * 1000 + i,
                fill: Fill::Random,
            };
            issue(&vol, &op, false).unwrap();
            r.apply(&op);
        }
        if round < 3 {
            vol.checkpoint().unwrap();
        }
    }
    vol.flush().unwrap();
    if close {
        vol.close().unwrap();
        (media, r.cur)
    } else {
        // a crash right after the flush: the media as it is now
        let img = media.image();
        drop(vol);
        (Arc::new(MemMedia::from_image(img)), r.cur)
    }
}

fn wipe_head(media: &MemMedia) {
    media.poke(0, &vec![0u8; WIPE]);
}

fn wipe_tail(media: &MemMedia) {
    media.poke(media.len() - WIPE as u64, &vec![0u8; WIPE]);
}

fn mount(media: &Arc<MemMedia>) -> sluice::Result<Volume> {
    Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
}

fn assert_reads_back(vol: &Volume, want: &[u8], what: &str) {
    let got = read_all(vol);
    if let Some(i) =
        (0..want.len() / BS).find(|&b| got[b * BS..(b + 1) * BS] != want[b * BS..(b + 1) * BS])
    {
        panic!("{what}: logical block {i} reads back wrong");
    }
}

/// Both head copies zeroed, tail copies intact: check names the loss, the
/// volume mounts from the tail, every block reads back, and a read-write mount
/// rewrites the lost copies (check is clean afterwards).
fn head_wipe(blocks: u64, close: bool) -> Vec<String> {
    let (media, want) = prepared(blocks, close);
    let tail = media.len() - TAIL_AREA_BYTES;
    assert_eq!(
        Superblock::decode(&media.image()[tail as usize..tail as usize + BS])
            .unwrap()
            .tail_offset,
        tail
    );
    wipe_head(&media);
    let r = sluice::check::check(&*media);
    assert!(!r.is_clean(), "check must report a wiped head");
    let text = r.damage.join("\n");
    assert!(
        text.contains("superblock copy 0 at the head (byte 0): zeroed"),
        "{text}"
    );
    assert!(
        text.contains("superblock copy 1 at the head (byte 4096): zeroed"),
        "{text}"
    );
    assert!(text.contains("mounted from the tail copy"), "{text}");
    assert!(!text.contains("not a sluice volume"), "{text}");
    assert!(
        r.mount_result.ok,
        "check's read-only mount: {:?}",
        r.mount_result.cause
    );
    assert!(r
        .mount_result
        .rules
        .contains_key("superblock_tail_fallback"));
    // a read-only mount serves everything and writes nothing
    let before = media.image();
    let ro = Volume::open(
        media.clone() as Arc<dyn Media>,
        &sluice::OpenOptions {
            read_only: true,
            ..det_open(1 << 40)
        },
    )
    .unwrap();
    assert_reads_back(&ro, &want, "read-only mount from the tail");
    drop(ro);
    assert!(
        media.image() == before,
        "a read-only mount wrote to the media"
    );
    // a read-write mount repairs the head copies
    let vol = mount(&media).unwrap();
    let notes = vol.mount_report().notes.clone();
    assert_reads_back(&vol, &want, "mount from the tail");
    vol.close().unwrap();
    let r = sluice::check::check(&*media);
    assert!(r.is_clean(), "after a read-write mount: {:?}", r.damage);
    assert_eq!(r.superblock_copies.iter().filter(|c| c.ok).count(), 4);
    let vol = mount(&media).unwrap();
    assert_reads_back(&vol, &want, "mount after repair");
    assert_eq!(vol.mount_report().rules.superblock_tail_fallback, 0);
    vol.close().unwrap();
    notes
}

#[test]
fn head_wipe_of_a_small_volume_loses_both_checkpoint_slots_and_rebuilds() {
    // 256 blocks: both slots lie inside the first 64 KiB, so the mount rebuilds
    // the map from every segment.
    let notes = head_wipe(256, true);
    assert!(
        notes.iter().any(|n| n.contains("no usable checkpoint")),
        "{notes:?}"
    );
}

#[test]
fn head_wipe_after_a_crash_mounts_from_the_tail() {
    head_wipe(256, false);
}

#[test]
fn head_wipe_keeps_the_older_checkpoint_slot_when_it_survives() {
    // 16384 blocks: a slot is 76 KiB, so the wipe takes slot 0 (the current one)
    // and leaves slot 1 (older): the mount starts from it and replays the rest.
    let notes = head_wipe(16384, false);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("checkpoint slot 0 is unusable")),
        "{notes:?}"
    );
    assert!(
        !notes.iter().any(|n| n.contains("no usable checkpoint")),
        "{notes:?}"
    );
}

#[test]
fn tail_wipe_is_damage_and_a_mount_rewrites_the_tail_copies() {
    for close in [true, false] {
        let (media, want) = prepared(256, close);
        wipe_tail(&media);
        let r = sluice::check::check(&*media);
        let text = r.damage.join("\n");
        assert!(
            text.contains("superblock copies 0 and 1 at the tail"),
            "{text}"
        );
        assert!(text.contains("zeroed"), "{text}");
        assert!(r.mount_result.ok);
        let vol = mount(&media).unwrap();
        assert_reads_back(&vol, &want, "after a tail wipe");
        vol.close().unwrap();
        let r = sluice::check::check(&*media);
        assert!(r.is_clean(), "after a read-write mount: {:?}", r.damage);
        // the tail copies are back: a head wipe now mounts from them
        wipe_head(&media);
        let vol = mount(&media).unwrap();
        assert_reads_back(&vol, &want, "head wipe after the tail was rewritten");
        vol.close().unwrap();
    }
}

#[test]
fn both_ends_wiped_refuses_naming_both() {
    let (media, _) = prepared(256, true);
    wipe_head(&media);
    wipe_tail(&media);
    let e = mount(&media)
        .err()
        .expect("a volume with both ends wiped must not mount")
        .to_string();
    assert!(e.contains("no valid superblock"), "{e}");
    assert!(e.contains("both ends of the media"), "{e}");
    assert!(e.contains("tail (byte"), "{e}");
    let r = sluice::check::check(&*media);
    assert!(!r.is_clean() && !r.mount_result.ok);
}

/// A volume without tail copies (as created before issue 17: `tail_offset` 0,
/// the segment area reaching the end of the media) still mounts, and a lost
/// head is then final.
#[test]
fn a_volume_without_tail_copies_still_mounts() {
    let (media, want) = prepared(256, true);
    let img = media.image();
    let mut sbs = Vec::new();
    for i in 0..2 {
        let mut sb = Superblock::decode(&img[i * BS..(i + 1) * BS]).unwrap();
        sb.tail_offset = 0;
        sbs.push(sb);
    }
    let old_len = sbs[0].media_bytes();
    let media = Arc::new(MemMedia::from_image(img[..old_len as usize].to_vec()));
    for (i, sb) in sbs.iter().enumerate() {
        media.poke((i * BS) as u64, &sb.encode());
    }
    let r = sluice::check::check(&*media);
    assert!(r.is_clean(), "{:?}", r.damage);
    assert_eq!(r.superblock_copies.len(), 2);
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("no superblock copies at the tail")));
    let vol = mount(&media).unwrap();
    assert_reads_back(&vol, &want, "volume without tail copies");
    vol.close().unwrap();
    // its superblock writes keep tail_offset 0 and touch nothing past the segments
    assert_eq!(media.len(), old_len);
    let vol = mount(&media).unwrap();
    assert_eq!(vol.superblock().tail_offset, 0);
    vol.close().unwrap();
    wipe_head(&media);
    assert!(mount(&media).is_err());
}

/// Finding E (ARCHITECTURE.md): the tail twin of an unusable head copy (the
/// same index, written with it before the same flush) decides whether the
/// kept copy can be older than a durable superblock. Twin older: the head
/// write was torn in flight, the kept copy is exact (no fallback). Twin as
/// new: damage to a durable copy, the twin stands in (no fallback). No valid
/// twin: the kept copy may be older (fallback: the mount trusts neither its
/// clean flag nor its watermark).
#[test]
fn the_tail_twin_of_an_unusable_head_copy_decides_the_fallback() {
    let (media, _) = prepared(2048, true);
    let first = sluice::recovery::read_superblocks(&*media).unwrap();
    assert!(!first.fallback && !first.from_tail);
    let g = first.sb.generation;
    let i = g % 2; // the newest copy's index
    let bs = sluice::format::BLOCK_BYTES;
    let peek = |m: &MemMedia, at: u64| m.image()[at as usize..at as usize + bs].to_vec();
    let head = |idx: u64| peek(&media, idx * bs as u64);
    let tail_at = first.sb.tail_copy_offset(i).expect("tail copies");

    // 1. damage to the newest head copy, its twin intact: the twin stands in
    let m = Arc::new(MemMedia::from_image(media.image()));
    let mut b = head(i);
    b[100] ^= 1;
    m.poke(i * bs as u64, &b);
    let r = sluice::recovery::read_superblocks(&*m).unwrap();
    assert_eq!(
        r.sb.generation, g,
        "the twin of the damaged copy is the newest"
    );
    assert!(!r.fallback, "a valid twin vouches for the copy mounted");

    // 2. an update of the other index torn in flight: head copy 1-i torn, its
    //    twin still the older generation (the tail write never happened)
    let m = Arc::new(MemMedia::from_image(media.image()));
    let mut b = head(1 - i);
    b[700] ^= 0xff;
    m.poke((1 - i) * bs as u64, &b);
    let r = sluice::recovery::read_superblocks(&*m).unwrap();
    assert_eq!(r.sb.generation, g);
    assert!(
        !r.fallback,
        "an update torn in flight leaves the kept copy exact"
    );

    // 3. the newest head copy and its twin both unusable: the kept copy may be
    //    older than a durable one
    let m = Arc::new(MemMedia::from_image(media.image()));
    let mut b = head(i);
    b[100] ^= 1;
    m.poke(i * bs as u64, &b);
    let mut t = peek(&m, tail_at);
    t[100] ^= 1;
    m.poke(tail_at, &t);
    let r = sluice::recovery::read_superblocks(&*m).unwrap();
    assert_eq!(r.sb.generation, g - 1);
    assert!(r.fallback, "with no valid twin the kept copy may be older");
}

/// Finding E (ARCHITECTURE.md), the case the DST's threads met about once in
/// 1,500 runs: a superblock update in flight when the power is cut, while
/// chunks written since the last flush sit in the cache with it, the first
/// torn and a newer one whole (a log gap with chunks after it). With both
/// copies of one index written before one flush, the cut could tear both;
/// the mount then fell back to the other copy, could not tell the torn
/// update from rot of a durable copy, and refused at the gap ("the lost copy
/// may have recorded a watermark"). The tail twin is now written and flushed
/// before its head copy (`commit::write_superblock`), so a power cut leaves
/// at most one copy of an index torn and the twin rule decides. Built
/// directly from SimMedia's record, no threads: the update a checkpoint
/// ends with, cut before each of its media operations and after the last,
/// with the chunks the next writes seal (no flush) added to the cache as
/// concurrent writers would have, for three loss modes and 200 tear patterns
/// each: no fallback, no refusal, and every block reads a value it held at
/// the last flush or was given after it.
#[test]
fn a_superblock_update_torn_in_flight_with_a_log_gap_mounts() {
    use sluice::media::{crash_apply, Loss, SimEvent, SimMedia};
    let blocks = 256u64;
    let (create, media_bytes) = small_create(blocks, 0.10);
    let media = Arc::new(SimMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let (mut flushed, mut later) = (Reference::new(blocks), Reference::new(blocks));
    for i in 0..200u64 {
        let op = Op::Write {
            offset: ((i * 7) % blocks) * BS as u64,
            len: BS,
            seed: i,
            fill: Fill::Random,
        };
        issue(&vol, &op, false).unwrap();
        flushed.apply(&op);
        later.apply(&op);
    }
    vol.flush().unwrap();
    media.flush().unwrap();
    let base = media.current_image();
    let sb0 = sluice::recovery::read_superblocks(&*media).unwrap().sb;
    let tail = sb0.tail_offset;
    assert!(tail != 0, "the volume has tail copies");
    let is_sb = |o: u64| o < 2 * BS as u64 || o >= tail;
    media.record();
    // the update in flight: a checkpoint ends with one (its chunks and slot
    // are flushed before it)
    vol.checkpoint().unwrap();
    // what the writer threads would write meanwhile: chunks, sealed as the
    // user chunk fills, not flushed (one segment: 31 data blocks a chunk)
    for i in 0..70u64 {
        let op = Op::Write {
            offset: ((i * 3 + 1) % blocks) * BS as u64,
            len: BS,
            seed: 10_000 + i,
            fill: Fill::Random,
        };
        issue(&vol, &op, false).unwrap();
        later.apply(&op);
    }
    let events = media.take_events();
    drop(vol);
    // the update: from its first superblock write to the flush after its last
    let first = events
        .iter()
        .position(|e| matches!(e, SimEvent::Write { offset, .. } if is_sb(*offset)))
        .expect("the checkpoint updates the superblock");
    let last = events
        .iter()
        .rposition(|e| matches!(e, SimEvent::Write { offset, .. } if is_sb(*offset)))
        .unwrap();
    let end = last
        + events[last..]
            .iter()
            .position(|e| matches!(e, SimEvent::Flush))
            .expect("a flush ends the update");
    // chunk writes after the update, up to the next flush
    let chunks: Vec<(u64, Vec<u8>)> = events[end + 1..]
        .iter()
        .take_while(|e| !matches!(e, SimEvent::Flush))
        .filter_map(|e| match e {
            SimEvent::Write { offset, data } if !is_sb(*offset) => Some((*offset, data.clone())),
            _ => None,
        })
        .collect();
    assert!(
        chunks.len() >= 2,
        "chunks written after the update: {}",
        chunks.len()
    );
    let (mut gaps, mut torn_updates) = (0u64, 0u64);
    for cut in first..=end {
        // the media before operation `cut`: flushed writes durable, the rest cached
        let mut img = base.clone();
        let mut cache: Vec<(u64, Vec<u8>)> = Vec::new();
        for e in &events[..cut] {
            match e {
                SimEvent::Write { offset, data } => cache.push((*offset, data.clone())),
                SimEvent::Flush => {
                    for (o, d) in cache.drain(..) {
                        img[o as usize..o as usize + d.len()].copy_from_slice(&d);
                    }
                }
                _ => {}
            }
        }
        let in_flight_sb = cache.iter().any(|(o, _)| is_sb(*o));
        cache.extend(chunks.iter().cloned());
        for loss in [Loss::Subset, Loss::KeepAll, Loss::DropAll] {
            for seed in 0..200u64 {
                let mut crash = img.clone();
                crash_apply(
                    &mut crash,
                    cache.iter().map(|(o, d)| (*o, &d[..])),
                    loss,
                    seed,
                );
                let m = Arc::new(MemMedia::from_image(crash));
                let what = format!("cut before op {cut} of {end}, {loss:?}, seed {seed}");
                let read = sluice::recovery::read_superblocks(&*m).unwrap();
                let torn = in_flight_sb && read.copies.iter().any(|c| c.found.is_err());
                assert!(
                    !read.fallback,
                    "{what}: a power cut made a superblock fallback"
                );
                let rep = sluice::recovery::mount(&*m)
                    .unwrap_or_else(|e| panic!("{what}: mount refused: {e}"))
                    .report;
                if rep.rules.log_end_at_missing_seq > 0 && rep.chunks_discarded > 0 {
                    gaps += 1;
                    torn_updates += torn as u64;
                }
                let vol = Volume::open(
                    m.clone() as Arc<dyn Media>,
                    &OpenOptions {
                        read_only: true,
                        ..det_open(1 << 40)
                    },
                )
                .unwrap_or_else(|e| panic!("{what}: mount refused: {e}"));
                let mut buf = vec![0u8; BS];
                for b in 0..blocks {
                    vol.read(b * BS as u64, &mut buf).unwrap();
                    let (a, z) = (b as usize * BS, (b as usize + 1) * BS);
                    assert!(
                        buf == flushed.cur[a..z] || buf == later.cur[a..z],
                        "{what}: block {b} reads a value it never held"
                    );
                }
            }
        }
    }
    // the picture the DST met was built: an update torn in flight, and a
    // log ending at a gap with newer chunks after it
    assert!(
        gaps > 0,
        "no crash image ended the log at a gap with chunks after it"
    );
    assert!(
        torn_updates > 0,
        "no crash image tore the superblock update and ended the log at a gap ({gaps} gaps)"
    );
    eprintln!(
        "{gaps} crash images end the log at a gap, {torn_updates} of them with the update torn"
    );
}
