//! Header flips (issue 9, finding 1): three 16 KiB writes, each followed by FLUSH,
//! then a crash before any checkpoint. Flipping any single bit of the magic, uuid,
//! seq, segment or data_blocks field of chunk 0 or 1 must refuse the mount naming
//! the chunk's place, and `check` must report it. A torn header of an unflushed
//! tail chunk must still be dropped silently.

mod common;

use common::*;
use sluice::format::superblock::Superblock;
use sluice::media::{CrashPolicy, FaultMedia};
use sluice::media::{Media, MemMedia};
use sluice::Volume;
use std::sync::Arc;

const BLOCKS: u64 = 256;

/// (field, offset in the header block, bytes)
const FIELDS: [(&str, usize, usize); 5] = [
    ("magic", 0, 8),
    ("data_blocks", 12, 4),
    ("uuid", 16, 16),
    ("seq", 32, 8),
    ("segment", 40, 4),
];

struct Prepared {
    image: Vec<u8>,
    /// byte offset of the segment holding the three chunks, and its number
    seg_off: u64,
    seg: u32,
    /// block positions of the chunks in that segment
    pos: Vec<u32>,
    data: Vec<Vec<u8>>,
}

fn prepare(unflushed_tail: bool) -> Prepared {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut data = Vec::new();
    for i in 0..3u64 {
        let d = payload(BS * 4, 100 + i, Fill::Random);
        vol.write(i * 16 * BS as u64, &d, false).unwrap();
        vol.flush().unwrap();
        data.push(d);
    }
    if unflushed_tail {
        let d = payload(BS * 4, 200, Fill::Random);
        vol.write(3 * 16 * BS as u64, &d, false).unwrap();
        // the flush writes the chunk, then power fails before the media flush
        media.cut_power_after_writes(media.writes_issued() + 1);
        assert!(vol.flush().is_err());
    }
    drop(vol); // a crash: no checkpoint, no clean flag
    let image = media.crash_image(CrashPolicy {
        drop_probability: 0.0,
        tear_last: false,
        seed: 0,
    });
    let sb = [0, 1]
        .into_iter()
        .filter_map(|i| Superblock::decode(&image[i * 4096..(i + 1) * 4096]).ok())
        .max_by_key(|s| s.generation)
        .unwrap();
    let sbk = sb.segment_blocks as u64;
    let (seg, seg_off) = (0..sb.segment_count)
        .map(|s| (s, sb.data_offset + s as u64 * sbk * 4096))
        .find(|&(_, off)| &image[off as usize..off as usize + 8] == b"SLUICECK")
        .expect("a segment with chunks");
    let mut pos = vec![0u32];
    let want = if unflushed_tail { 4 } else { 3 };
    while pos.len() < want {
        let at = seg_off as usize + *pos.last().unwrap() as usize * 4096;
        let h = sluice::format::chunk::ChunkHeader::decode(&image[at..at + 4096]).unwrap();
        assert_eq!(h.segment, seg);
        pos.push(pos.last().unwrap() + h.total_blocks());
    }
    let at = seg_off as usize + *pos.last().unwrap() as usize * 4096;
    assert!(
        sluice::format::chunk::ChunkHeader::decode(&image[at..at + 4096]).is_ok(),
        "all chunks in one segment"
    );
    Prepared {
        image,
        seg_off,
        seg,
        pos,
        data,
    }
}

fn flipped(p: &Prepared, chunk: usize, byte: usize, bit: u8) -> Arc<MemMedia> {
    let mut img = p.image.clone();
    img[p.seg_off as usize + p.pos[chunk] as usize * 4096 + byte] ^= 1 << bit;
    Arc::new(MemMedia::from_image(img))
}

#[test]
fn untouched_image_mounts_with_every_flushed_write() {
    let p = prepare(false);
    let media = Arc::new(MemMedia::from_image(p.image.clone()));
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    for (i, d) in p.data.iter().enumerate() {
        let mut b = vec![0u8; d.len()];
        vol.read(i as u64 * 16 * BS as u64, &mut b).unwrap();
        assert!(b == *d, "write {i}");
    }
    assert!(sluice::check::check(&*media).is_clean());
}

#[test]
fn every_bit_of_every_identity_field_of_chunk_0_and_1_refuses_mount_naming_it() {
    let p = prepare(false);
    let mut cases = 0;
    let mut failures = Vec::new();
    for chunk in 0..2 {
        for (name, off, len) in FIELDS {
            for byte in off..off + len {
                for bit in 0..8u8 {
                    cases += 1;
                    let media = flipped(&p, chunk, byte, bit);
                    let place = format!("segment {} block {}", p.seg, p.pos[chunk]);
                    match sluice::recovery::mount(&*media) {
                        Ok(_) => {
                            failures.push(format!("chunk {chunk} {name} byte {byte} bit {bit}: mounted"))
                        }
                        Err(e) if !e.to_string().contains(&place) => failures.push(format!(
                            "chunk {chunk} {name} byte {byte} bit {bit}: error does not name {place}: {e}"
                        )),
                        Err(_) => {}
                    }
                    let rep = sluice::check::check(&*media);
                    if rep.is_clean() || !rep.damage.iter().any(|d| d.contains(&place)) {
                        failures.push(format!(
                            "chunk {chunk} {name} byte {byte} bit {bit}: check does not report {place}: {:?}",
                            rep.damage
                        ));
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 8 * (8 + 4 + 16 + 8 + 4));
    assert!(
        failures.is_empty(),
        "{} of {cases} flips not refused:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

#[test]
fn a_damaged_header_of_the_unflushed_tail_is_dropped_silently() {
    let p = prepare(true);
    let mut cases = 0;
    for (name, off, len) in FIELDS {
        for byte in off..off + len {
            for bit in 0..8u8 {
                cases += 1;
                let media = flipped(&p, 3, byte, bit);
                let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
                    .unwrap_or_else(|e| panic!("{name} byte {byte} bit {bit}: {e}"));
                for (i, d) in p.data.iter().enumerate() {
                    let mut b = vec![0u8; d.len()];
                    vol.read(i as u64 * 16 * BS as u64, &mut b).unwrap();
                    assert!(b == *d, "{name} byte {byte} bit {bit}: write {i}");
                }
            }
        }
    }
    assert_eq!(cases, 8 * 40);
}
