//! Stripe sets repairing themselves (issue 20 items 4 and 5): a block whose
//! bytes on one member were flipped is healed from its row by a read and by
//! scrub (the right bytes returned, the member's bytes rewritten on disk,
//! counted); two wrong members on RAID-5 answer EIO and rewrite nothing;
//! RAID-6 places a wrong data member together with a wrong P.

use sluice::format::stripe::StripeIdentity;
use sluice::media::{FileMedia, Media};
use sluice::stripe::StripeLayout;
use sluice::{CreateOptions, OpenOptions, Volume};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BS: usize = 4096;
const UNIT: u64 = 16 << 10;
const MEMBER: u64 = 12 << 20;

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        ..Default::default()
    }
}

fn files(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("m{i}.img"))).collect()
}

fn make(paths: &[PathBuf], parity: u32) {
    let devs = paths
        .iter()
        .map(|p| {
            let m: Arc<dyn Media> = Arc::new(FileMedia::create(p, MEMBER).unwrap());
            (p.display().to_string(), m)
        })
        .collect();
    let c = CreateOptions {
        segment_bytes: 256 << 10,
        ..Default::default()
    };
    Volume::format_striped(devs, parity, UNIT, &c).unwrap();
}

fn devices(paths: &[PathBuf]) -> Vec<(String, Arc<dyn Media>)> {
    paths
        .iter()
        .map(|p| {
            let m: Arc<dyn Media> = Arc::new(FileMedia::open(p, false).unwrap());
            (p.display().to_string(), m)
        })
        .collect()
}

fn open(paths: &[PathBuf]) -> Volume {
    Volume::open_striped(devices(paths), &det()).unwrap()
}

/// `n` distinct random blocks at logical blocks 0..n (written once each, no
/// GC: every block's bytes are on exactly one member), flushed and closed.
fn fill(paths: &[PathBuf], n: usize, seed: u8) -> Vec<Vec<u8>> {
    let vol = open(paths);
    let mut x = seed as u64 * 0x9e37_79b9_7f4a_7c15 + 1;
    let want: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            (0..BS)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect();
    for (b, v) in want.iter().enumerate() {
        vol.write((b * BS) as u64, v, false).unwrap();
    }
    vol.flush().unwrap();
    vol.close().unwrap();
    want
}

fn layout(paths: &[PathBuf]) -> (StripeIdentity, StripeLayout) {
    let m = FileMedia::open_unlocked_read_only(&paths[0]).unwrap();
    let (id, sb) = sluice::stripe_set::open::read_member(&m).unwrap().unwrap();
    let l = StripeLayout::from_identity(&id, sb.data_offset).unwrap();
    (id, l)
}

/// Where `block`'s bytes are: (member, byte offset), found by scanning.
fn find(paths: &[PathBuf], block: &[u8]) -> (usize, u64) {
    let mut hits = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let img = std::fs::read(p).unwrap();
        for (k, b) in img.chunks(BS).enumerate() {
            if b == block {
                hits.push((i, (k * BS) as u64));
            }
        }
    }
    assert_eq!(
        hits.len(),
        1,
        "the block is on exactly one member: {hits:?}"
    );
    hits[0]
}

fn peek(path: &Path, off: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut b, off)
        .unwrap();
    b
}

fn flip(path: &Path, off: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 16];
    f.read_exact_at(&mut b, off + 100).unwrap();
    for x in &mut b {
        *x ^= 0xff;
    }
    f.write_all_at(&b, off + 100).unwrap();
    f.sync_all().unwrap();
}

/// The member and offset of the P (which = 0) or Q unit's piece in the same
/// row and column as member offset `off`.
fn parity_piece(l: &StripeLayout, off: u64, which: u32) -> (usize, u64) {
    let row = (off - l.member_offset) / l.unit;
    let col = (off - l.member_offset) % l.unit;
    (
        l.parity_member(row, which).unwrap() as usize,
        l.row_offset(row).unwrap() + col,
    )
}

#[test]
fn a_block_flipped_on_one_member_is_healed_by_read_and_by_scrub() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 1);
    let want = fill(&paths, 96, 1);
    // one block for the read, one for scrub
    let (ma, oa) = find(&paths, &want[10]);
    let (mb, ob) = find(&paths, &want[70]);
    flip(&paths[ma], oa);
    flip(&paths[mb], ob);
    assert_ne!(peek(&paths[ma], oa), want[10]);
    let vol = open(&paths);
    let mut buf = vec![0u8; BS];
    vol.read(10 * BS as u64, &mut buf).unwrap();
    assert!(buf == want[10], "the healed read returns the right bytes");
    assert_eq!(vol.stats().stripe_healed, 1);
    assert_eq!(peek(&paths[ma], oa), want[10], "member bytes rewritten");
    // scrub finds the other and heals it
    let mut lines = Vec::new();
    for _ in 0..vol.geometry().segment_count {
        lines.extend(vol.scrub_step().unwrap().damage);
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("healed"), "{lines:?}");
    assert_eq!(
        peek(&paths[mb], ob),
        want[70],
        "member bytes rewritten by scrub"
    );
    assert_eq!(vol.stats().stripe_healed, 2);
    for (b, v) in want.iter().enumerate() {
        vol.read((b * BS) as u64, &mut buf).unwrap();
        assert!(buf == *v, "block {b}");
    }
    vol.close().unwrap();
}

#[test]
fn two_wrong_members_on_raid5_answer_eio_and_rewrite_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 1);
    let want = fill(&paths, 96, 2);
    let (_, l) = layout(&paths);
    let (m, o) = find(&paths, &want[20]);
    let (pm, po) = parity_piece(&l, o, 0);
    flip(&paths[m], o);
    flip(&paths[pm], po);
    let (bad_d, bad_p) = (peek(&paths[m], o), peek(&paths[pm], po));
    let vol = open(&paths);
    let mut buf = vec![0u8; BS];
    assert!(vol.read(20 * BS as u64, &mut buf).is_err(), "EIO, not data");
    assert_eq!(vol.stats().stripe_healed, 0);
    assert_eq!(peek(&paths[m], o), bad_d, "nothing rewritten");
    assert_eq!(peek(&paths[pm], po), bad_p, "nothing rewritten");
    vol.close().unwrap();
}

#[test]
fn raid6_heals_a_wrong_data_member_together_with_a_wrong_p() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 6);
    make(&paths, 2);
    let want = fill(&paths, 96, 3);
    let (_, l) = layout(&paths);
    let (m, o) = find(&paths, &want[30]);
    let (pm, po) = parity_piece(&l, o, 0);
    let good_p = peek(&paths[pm], po);
    flip(&paths[m], o);
    flip(&paths[pm], po);
    let vol = open(&paths);
    let mut buf = vec![0u8; BS];
    vol.read(30 * BS as u64, &mut buf).unwrap();
    assert!(buf == want[30]);
    assert_eq!(vol.stats().stripe_healed, 1);
    assert_eq!(peek(&paths[m], o), want[30]);
    assert_eq!(peek(&paths[pm], po), good_p, "P rewritten too");
    vol.close().unwrap();
}
