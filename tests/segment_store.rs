//! The segment store seam (`sluice::store`): `FlatStore` puts segment blocks
//! where the geometry says, tells the read ring the same place, and refuses
//! any address outside the segment area instead of writing there (a wrong
//! address must never land on a superblock, checkpoint slot or the tail).

use sluice::format::BLOCK_BYTES;
use sluice::geometry::Geometry;
use sluice::media::{Media, MemMedia};
use sluice::store::{FlatStore, Piece, SegmentStore};

const BS: u64 = BLOCK_BYTES as u64;

fn media() -> (MemMedia, Geometry) {
    let g = Geometry::for_logical(256, 16, 0.1);
    (MemMedia::new(g.media_bytes()), g)
}

#[test]
fn flat_store_places_blocks_at_the_geometry_offsets() {
    let (m, g) = media();
    let s = FlatStore::new(&m, &g);
    assert_eq!(s.write_unit(), BS);
    assert_eq!(s.members(), 1);
    let mut b = vec![7u8; 2 * BLOCK_BYTES];
    s.write(3, 5, &b).unwrap();
    let mut raw = vec![0u8; 2 * BLOCK_BYTES];
    m.read_at(&mut raw, g.data_offset + (3 * 16 + 5) * BS)
        .unwrap();
    assert_eq!(raw, b);
    b.fill(0);
    s.read(3 * 16 + 5, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 7));
    let mut one = vec![0u8; BLOCK_BYTES];
    s.read_segment(3, 6, &mut one).unwrap();
    assert!(one.iter().all(|&x| x == 7));
    let (mut x, mut y) = (vec![0u8; BLOCK_BYTES], vec![1u8; BLOCK_BYTES]);
    s.read_batch(&mut [(&mut x[..], 3 * 16 + 6), (&mut y[..], 0)])
        .unwrap();
    assert!(x.iter().all(|&v| v == 7) && y.iter().all(|&v| v == 0));
    let mut pieces = Vec::new();
    s.locate(3 * 16 + 5, 2, &mut |p| pieces.push(p));
    assert_eq!(
        pieces,
        [Piece {
            member: 0,
            offset: g.data_offset + (3 * 16 + 5) * BS,
            len: 2 * BLOCK_BYTES as u32,
            at: 0
        }]
    );
}

#[test]
fn flat_store_wipes_the_first_block_only() {
    let (m, g) = media();
    let s = FlatStore::new(&m, &g);
    s.write(2, 0, &vec![5u8; 16 * BLOCK_BYTES]).unwrap();
    s.wipe(2, &vec![9u8; BLOCK_BYTES]).unwrap();
    let mut seg = vec![0u8; 16 * BLOCK_BYTES];
    s.read_segment(2, 0, &mut seg).unwrap();
    assert!(seg[..BLOCK_BYTES].iter().all(|&x| x == 9));
    assert!(seg[BLOCK_BYTES..].iter().all(|&x| x == 5));
}

#[test]
fn flat_store_refuses_addresses_outside_the_segment_area() {
    let (m, g) = media();
    let s = FlatStore::new(&m, &g);
    let b = vec![1u8; BLOCK_BYTES];
    assert!(s.write(g.segment_count, 0, &b).is_err());
    assert!(s.write(0, g.segment_blocks, &b).is_err());
    assert!(s
        .write(0, g.segment_blocks - 1, &vec![1u8; 2 * BLOCK_BYTES])
        .is_err());
    let end = g.segment_count as u64 * g.segment_blocks as u64;
    let mut r = vec![0u8; BLOCK_BYTES];
    assert!(s.read(end, &mut r).is_err());
    assert!(s.read(end - 1, &mut r).is_ok());
    assert!(s.read(0, &mut r[..100]).is_err());
    let mut r2 = vec![0u8; BLOCK_BYTES];
    assert!(s.read_batch(&mut [(&mut r2[..], end)]).is_err());
    assert!(s.discard_body(g.segment_count).is_err());
    // nothing landed outside the segment area: below it (superblocks,
    // checkpoint slots) and after it (the tail area) are still zero
    let mut head = vec![0u8; g.data_offset as usize];
    m.read_at(&mut head, 0).unwrap();
    assert!(head.iter().all(|&x| x == 0));
    let mut tail = vec![0u8; (g.media_bytes() - g.data_end()) as usize];
    m.read_at(&mut tail, g.data_end()).unwrap();
    assert!(tail.iter().all(|&x| x == 0));
}
