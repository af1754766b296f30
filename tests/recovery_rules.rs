//! The watermark rules of replay, each forced by a constructed image (the crash
//! sweep reaches them rarely): a missing seq below the durable watermark is a dead
//! chunk whose segment was reused (skipped); the first missing seq at or above it
//! ends the log (later chunks are discarded, so the volume holds a prefix).

mod common;

use common::*;
use sluice::format::chunk::ChunkHeader;
use sluice::format::superblock::Superblock;
use sluice::media::{Media, MemMedia};
use sluice::Volume;
use std::sync::Arc;

const BLOCKS: u64 = 256;

fn newest_sb(img: &[u8]) -> Superblock {
    [0, 1]
        .into_iter()
        .filter_map(|i| Superblock::decode(&img[i * 4096..(i + 1) * 4096]).ok())
        .max_by_key(|s| s.generation)
        .unwrap()
}

#[test]
fn a_missing_seq_below_the_watermark_is_skipped_as_dead() {
    // Several passes over the volume with flushes and GC, never a checkpoint:
    // segments are emptied, pass the reuse barrier and are written again, so the
    // log since the (creation) checkpoint has holes below the watermark.
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(BLOCKS);
    let mut seed = 0;
    for pass in 0..4u64 {
        for lba in (0..BLOCKS).step_by(8) {
            seed += 1;
            let op = Op::Write {
                offset: ((lba + pass * 24) % BLOCKS) * BS as u64,
                len: 8 * BS,
                seed,
                fill: Fill::Random,
            };
            issue(&vol, &op, false).unwrap();
            r.apply(&op);
            if seed % 4 == 0 {
                vol.flush().unwrap();
                vol.gc_until_free(2).unwrap();
            }
        }
    }
    vol.flush().unwrap();
    drop(vol); // crash
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let rep = vol.mount_report().clone();
    assert!(!rep.clean);
    assert!(
        rep.rules.gap_below_watermark_skipped > 0,
        "the scenario must leave holes below the watermark: {:?}",
        rep.rules
    );
    assert_eq!(rep.rules.log_end_at_missing_seq, 0, "{:?}", rep.rules);
    let got = read_all(&vol);
    let bad =
        (0..BLOCKS as usize).find(|&b| got[b * BS..(b + 1) * BS] != r.cur[b * BS..(b + 1) * BS]);
    assert!(bad.is_none(), "flushed block {} lost", bad.unwrap());
}

#[test]
fn the_first_missing_seq_above_the_watermark_ends_the_log() {
    // Chunk s fills a segment, chunk s+1 starts the next one; both are sealed
    // before the flush that writes them, so no header records s as durable. If s
    // never reached the media (its header block is zero), s+1 must not be applied:
    // the volume holds the prefix before s.
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let base = payload(31 * BS, 1, Fill::Random);
    vol.write(0, &base, false).unwrap();
    vol.flush().unwrap();
    vol.write(64 * BS as u64, &payload(31 * BS, 2, Fill::Random), false)
        .unwrap();
    vol.write(128 * BS as u64, &payload(8 * BS, 3, Fill::Random), false)
        .unwrap();
    vol.flush().unwrap();
    drop(vol);
    let mut img = media.image();
    let sb = newest_sb(&img);
    let seg_bytes = sb.segment_blocks as usize * 4096;
    let heads: Vec<(usize, ChunkHeader)> = (0..sb.segment_count as usize)
        .filter_map(|s| {
            let at = sb.data_offset as usize + s * seg_bytes;
            ChunkHeader::decode(&img[at..at + 4096])
                .ok()
                .map(|h| (at, h))
        })
        .collect();
    let (s_at, s) = heads
        .iter()
        .filter(|(_, h)| h.data_blocks == 31)
        .max_by_key(|(_, h)| h.seq)
        .expect("chunk s at the start of a segment");
    let (_, s1) = heads
        .iter()
        .find(|(_, h)| h.seq == s.seq + 1)
        .expect("chunk s+1 at the start of the next segment");
    assert_eq!(s1.data_blocks, 8);
    assert!(s1.durable_seq <= s.seq, "s+1 must not prove s durable");
    img[*s_at..*s_at + 4096].fill(0); // s never reached the media
    let media = Arc::new(MemMedia::from_image(img));
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let rep = vol.mount_report().clone();
    assert_eq!(rep.rules.log_end_at_missing_seq, 1, "{:?}", rep.rules);
    assert!(
        rep.rules.chunk_after_log_end_discarded >= 1,
        "{:?}",
        rep.rules
    );
    let mut got = vec![0u8; 31 * BS];
    vol.read(0, &mut got).unwrap();
    assert!(got == base, "the flushed prefix is intact");
    let mut got = vec![0u8; 8 * BS];
    vol.read(128 * BS as u64, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == 0),
        "chunk s+1 was applied although s is missing: not a prefix of the log"
    );
}

#[test]
fn a_recovering_mount_numbers_new_chunks_above_chunks_it_could_not_see() {
    // A reused segment X: the reuse barrier's tombstone is in its block 0, the
    // crash lost X's first new chunk K0 (in flight, unflushed) but not the
    // next one, K1, written out of order behind it. Recovery does not walk a
    // segment whose block 0 is a tombstone, so K1 is never seen. If the mount
    // then numbered new chunks from K0's seq, a later chunk at K1's position
    // (X reused again with a first chunk of K0's length) would carry K1's seq
    // or more; a crash that loses that one brings K1 back, on top of flushed
    // writes made after this mount: stale data read as current. So the seqs
    // after a recovering mount must lie above every chunk the media may hold.
    // The image is built from a real volume: K0 and K1 are written and flushed,
    // then K0's header block becomes a tombstone of X (the picture the crash
    // leaves; K1's own durable_seq field is never read, X is not walked).
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(7 * BS, 1, Fill::Random), false)
        .unwrap();
    vol.flush().unwrap();
    vol.write(64 * BS as u64, &payload(7 * BS, 2, Fill::Random), false)
        .unwrap();
    vol.flush().unwrap();
    drop(vol); // crash: no checkpoint since creation
    let mut img = media.image();
    let sb = newest_sb(&img);
    let seg_bytes = sb.segment_blocks as usize * 4096;
    let (x, k0, k1) = (0..sb.segment_count as usize)
        .find_map(|s| {
            let at = sb.data_offset as usize + s * seg_bytes;
            let k0 = ChunkHeader::decode(&img[at..at + 4096]).ok()?;
            let next = at + (1 + k0.data_blocks as usize) * 4096;
            let k1 = ChunkHeader::decode(&img[next..next + 4096]).ok()?;
            (k0.data_blocks == 7 && k1.seq == k0.seq + 1).then_some((s, k0, k1))
        })
        .expect("a segment holding K0 at block 0 and K1 right after it");
    let at = sb.data_offset as usize + x * seg_bytes;
    sluice::format::chunk::tombstone(&mut img[at..at + 4096], &sb.uuid, x as u32);
    let media = Arc::new(MemMedia::from_image(img));
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let rep = vol.mount_report().clone();
    assert!(!rep.clean);
    assert!(rep.rules.tombstone_seen >= 1, "{:?}", rep.rules);
    vol.close().unwrap();
    let sb = newest_sb(&media.image());
    assert!(
        sb.checkpoint_next_seq > k1.seq,
        "new chunks are numbered from {} although chunk {} (K0 was {}) may lie on the media unseen",
        sb.checkpoint_next_seq,
        k1.seq,
        k0.seq
    );
}
