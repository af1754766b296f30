//! Salvage (issue 17, finding 11): one damaged durable chunk refuses a normal
//! mount; a salvage mount (`OpenOptions::salvage`, `serve --read-only
//! --salvage`) serves the rest and answers EIO for every block it cannot vouch
//! for, never wrong data; `check` lists the same ranges.

mod common;

use common::*;
use sluice::media::{CrashPolicy, FaultMedia};
use sluice::media::{Media, MemMedia};
use sluice::{OpenOptions, Volume};
use std::sync::Arc;

const BLOCKS: u64 = 256;

struct Prepared {
    image: Vec<u8>,
    /// what every block holds (the reference)
    want: Vec<u8>,
}

fn write_flush(vol: &Volume, r: &mut Reference, lba: u64, n: u64, seed: u64) {
    let op = Op::Write {
        offset: lba * BS as u64,
        len: n as usize * BS,
        seed,
        fill: Fill::Random,
    };
    issue(vol, &op, false).unwrap();
    r.apply(&op);
    vol.flush().unwrap();
}

/// Every block written, a checkpoint, then flushed writes of 0..16, 100..116
/// and 8..12 (four blocks per chunk), then a crash.
fn prepare() -> Prepared {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(BLOCKS);
    for i in 0..BLOCKS / 16 {
        write_flush(&vol, &mut r, i * 16, 16, 1000 + i);
    }
    vol.checkpoint().unwrap();
    for (k, lba) in [0u64, 4, 8, 12, 100, 104, 108, 112, 8]
        .into_iter()
        .enumerate()
    {
        write_flush(&vol, &mut r, lba, 4, 2000 + k as u64);
    }
    drop(vol); // a crash after the flushes
    let image = media.crash_image(CrashPolicy {
        drop_probability: 0.0,
        tear_last: false,
        seed: 0,
    });
    Prepared { image, want: r.cur }
}

/// Read every block of a salvage mount: listed blocks must answer EIO, the
/// others the reference content or EIO, never anything else. Returns the blocks
/// served.
fn verify_salvage(media: &Arc<MemMedia>, want: &[u8]) -> (Vec<(u64, u64)>, Vec<u64>) {
    let vol = Volume::open(
        media.clone() as Arc<dyn Media>,
        &OpenOptions {
            read_only: true,
            salvage: true,
            ..det_open(1 << 40)
        },
    )
    .expect("salvage mount");
    let listed = vol.unvouched().to_vec();
    let mut served = Vec::new();
    let mut buf = vec![0u8; BS];
    for b in 0..BLOCKS {
        let is_listed = listed.iter().any(|&(s, e)| (s..e).contains(&b));
        match vol.read(b * BS as u64, &mut buf) {
            Ok(()) => {
                assert!(
                    !is_listed,
                    "block {b} is listed as unvouched but was served"
                );
                assert!(
                    buf[..] == want[b as usize * BS..(b as usize + 1) * BS],
                    "salvage served wrong data for block {b}"
                );
                served.push(b);
            }
            Err(e) => assert!(e.errno() == libc::EIO, "block {b}: {e}"),
        }
    }
    // check lists the same ranges
    let r = sluice::check::check(&**media);
    let f = r
        .found
        .iter()
        .find(|f| f.kind == "salvage")
        .expect("check lists salvage ranges");
    assert_eq!(f.ranges.as_ref().unwrap(), &listed);
    assert!(
        r.damage.iter().any(|d| d.contains("--salvage")),
        "{:?}",
        r.damage
    );
    // a salvage mount never writes, and refuses to be read-write
    assert!(Volume::open(
        media.clone() as Arc<dyn Media>,
        &OpenOptions {
            salvage: true,
            ..det_open(1 << 40)
        }
    )
    .is_err());
    (listed, served)
}

#[test]
fn damaged_chunk_data_refuses_a_mount_and_salvage_serves_the_rest() {
    let p = prepare();
    let at = newest_chunk_of(&p.image, 100);
    let mut img = p.image.clone();
    img[at + 4096 + 17] ^= 0x10; // first data block of the chunk writing 100..104
    let media = Arc::new(MemMedia::from_image(img));
    let before = media.image();
    let e = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
        .err()
        .expect("a normal mount refuses")
        .to_string();
    assert!(e.contains("refusing to mount"), "{e}");
    let (listed, served) = verify_salvage(&media, &p.want);
    // the header is intact: exactly the blocks the chunk wrote
    assert_eq!(listed, vec![(100, 104)]);
    assert_eq!(
        served.len() as u64,
        BLOCKS - 4,
        "every other block is served"
    );
    assert!(media.image() == before, "salvage wrote to the media");
}

#[test]
fn unreadable_chunk_header_refuses_a_mount_and_salvage_serves_only_newer_blocks() {
    let p = prepare();
    let at = newest_chunk_of(&p.image, 100);
    let mut img = p.image.clone();
    img[at + 2] ^= 0x01; // the magic: the header is unreadable, its entries unknown
    let media = Arc::new(MemMedia::from_image(img));
    let before = media.image();
    let e = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40))
        .err()
        .expect("a normal mount refuses")
        .to_string();
    assert!(e.contains("refusing to mount"), "{e}");
    let (listed, served) = verify_salvage(&media, &p.want);
    // entries unknown: only blocks rewritten after the damaged chunk are vouched
    // for (104..116 and 8..12); everything else, checkpoint-mapped included, is EIO
    let vouched: Vec<u64> = (8..12).chain(104..116).collect();
    let mut unlisted: Vec<u64> = (0..BLOCKS)
        .filter(|b| !listed.iter().any(|&(s, e)| (s..e).contains(b)))
        .collect();
    unlisted.sort();
    assert_eq!(unlisted, vouched);
    assert!(
        served.contains(&8) && served.contains(&11),
        "served {served:?}"
    );
    assert!(media.image() == before, "salvage wrote to the media");
}

#[test]
fn salvage_of_an_undamaged_volume_lists_nothing() {
    let p = prepare();
    let media = Arc::new(MemMedia::from_image(p.image.clone()));
    let vol = Volume::open(
        media.clone() as Arc<dyn Media>,
        &OpenOptions {
            read_only: true,
            salvage: true,
            ..det_open(1 << 40)
        },
    )
    .unwrap();
    assert!(vol.unvouched().is_empty());
    assert_eq!(read_all(&vol), p.want);
}
