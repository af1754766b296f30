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

/// A format v2 volume (intent log, so LSN and CHAIN) whose user chunks fill
/// one segment exactly: chunk C (lba 0..20) and chunk D (lba 20..30) in the
/// first segment, D its last chunk; then chunk N (lba 40..50) in the next
/// segment, naming D as its predecessor; each flushed. Returns the media image
/// after the crash, the block where D's header is, and the reference data.
fn chained_volume_with_a_full_segment() -> (Vec<u8>, usize, Vec<u8>) {
    use sluice::geometry::Geometry;
    use sluice::media::{Loss, SimMedia};
    let blocks = 256u64;
    let c = sluice::CreateOptions {
        logical_bytes: Some(blocks * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        uuid: Some([5; 16]),
        intent_log: Some(256 << 10),
        // version 2 records: a FLUSH of more than 8 blocks seals its chunk
        // (version 3 records log any number, leaving the chunk open)
        log_v2_records: true,
        ..Default::default()
    };
    let len = Geometry::for_logical_log(blocks, 32, 0.1, 256 << 10).media_bytes();
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det_open(1 << 40)).unwrap();
    let mut want = vec![0u8; blocks as usize * BS];
    // more than the intent log's 8 blocks: each FLUSH seals its chunk
    for (i, (lba, n)) in [(0u64, 20u64), (20, 10), (40, 10), (60, 9)]
        .iter()
        .enumerate()
    {
        let data = payload(*n as usize * BS, 100 + i as u64, Fill::Random);
        vol.write(lba * BS as u64, &data, false).unwrap();
        vol.flush().unwrap();
        want[*lba as usize * BS..(*lba + *n) as usize * BS].copy_from_slice(&data);
    }
    drop(vol); // crash: everything was flushed
    let img = media.crash_image(Loss::KeepAll, 1);
    let d = (0..img.len() / BS)
        .find(|&b| {
            ChunkHeader::decode(&img[b * BS..(b + 1) * BS]).is_ok_and(|h| {
                h.entries
                    .first()
                    .is_some_and(|e| e.lba == 20 && e.count == 10)
            })
        })
        .expect("chunk D on the media");
    let h = ChunkHeader::decode(&img[d * BS..(d + 1) * BS]).unwrap();
    assert!(h.chain.is_some(), "a CHAIN volume's chunks carry the chain");
    // D ends its segment: no later chunk in it bounds D's seq
    let n = ChunkHeader::decode(&img[(d + 11) * BS..(d + 12) * BS]);
    assert!(
        n.is_ok_and(|n| n.segment != h.segment && n.chain.unwrap().prev_seq == h.seq),
        "D is the last chunk of its segment and the next chunk names it"
    );
    (img, d, want)
}

#[test]
fn a_flipped_seq_in_a_segments_last_header_refuses_or_answers_eio() {
    // format-v2.md §3: with the seq field of the last chunk of a segment
    // flipped, the gaps alone let the mount skip its seq as a dead chunk
    // below the watermark and silently serve the older content of its
    // blocks (before the chain: zeros here). The next chunk of the stream
    // names it as its predecessor, so the mount refuses, and a salvage mount
    // answers EIO for what it held, never stale data.
    use sluice::media::SimMedia;
    let (img, d, want) = chained_volume_with_a_full_segment();
    // the undamaged image mounts and reads back (the rule fires on nothing)
    let v = Volume::open(
        Arc::new(SimMedia::from_image(img.clone())) as Arc<dyn Media>,
        &det_open(1 << 40),
    )
    .expect("an undamaged chained volume mounts");
    let mut buf = vec![0u8; BS];
    for b in [0u64, 20, 29, 45, 68] {
        v.read(b * BS as u64, &mut buf).unwrap();
        assert_eq!(
            buf[..],
            want[b as usize * BS..(b as usize + 1) * BS],
            "block {b}"
        );
    }
    drop(v);
    for bit in [40u32, 3, 63] {
        let mut bad = img.clone();
        bad[d * BS + 32 + bit as usize / 8] ^= 1 << (bit % 8);
        let media = Arc::new(SimMedia::from_image(bad));
        let e = match Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)) {
            Err(e) => e.to_string(),
            Ok(v) => {
                v.read(20 * BS as u64, &mut buf).unwrap();
                let got = if buf[..] == want[20 * BS..21 * BS] {
                    "right"
                } else {
                    "STALE"
                };
                panic!("seq bit {bit} flipped: the mount went on, block 20 reads {got} data");
            }
        };
        assert!(e.contains("refusing to mount"), "bit {bit}: {e}");
        assert!(
            e.contains("predecessor"),
            "the chain names it, bit {bit}: {e}"
        );
        let damage = sluice::recovery::damage(&*media).unwrap();
        assert!(
            damage.iter().any(|d| d.contains("predecessor")),
            "check lists it: {damage:?}"
        );
        let v = Volume::open(
            media as Arc<dyn Media>,
            &sluice::OpenOptions {
                read_only: true,
                salvage: true,
                ..det_open(1 << 40)
            },
        )
        .expect("salvage mount");
        for b in 0..256u64 {
            match v.read(b * BS as u64, &mut buf) {
                Ok(()) => assert_eq!(
                    buf[..],
                    want[b as usize * BS..(b as usize + 1) * BS],
                    "salvage served wrong data for block {b}"
                ),
                // written after D (in N and the chunk after it): vouched for
                Err(_) => assert!(
                    !(40..50).contains(&b) && !(60..69).contains(&b),
                    "block {b} was written after the damage and must be served"
                ),
            }
        }
        for b in 20..30u64 {
            assert!(
                v.read(b * BS as u64, &mut buf).is_err(),
                "block {b} of D: EIO"
            );
        }
    }
}
