//! Fuzz properties for every decoder of the on-disk format, shared by the cargo-fuzz
//! targets (fuzz/fuzz_targets/*.rs) and the plain test tests/format_fuzz_smoke.rs,
//! which includes this file with `#[path]`. Each `check_*` takes arbitrary bytes and
//! panics only when a property fails: a decoder panics, a decoded value does not
//! round-trip through its encoder, or recovery / check panic, allocate beyond the
//! media, or write to the media.
//!
//! Input convention: byte 0 is a control byte (which CRCs the harness re-seals, or
//! which base image to start from), the rest is the structure; see each function.
//! `seeds()` returns valid inputs built from real encoded structures.

use sluice::check;
use sluice::format::checkpoint::{
    self, body_bytes_with, decode_segments_with, CheckpointHeader, SegmentRecord,
    SEGMENT_RECORD_BYTES,
};
use sluice::format::chunk::{
    self, ChunkHeader, Entry, Kind, Stream, BLOCK_CRC_OFFSET, CHUNK_MAGIC, NO_SRC,
};
use sluice::format::superblock::Superblock;
use sluice::format::BLOCK_BYTES;
use sluice::geometry::Geometry;
use sluice::map::{Loc, Map, Virt};
use sluice::media::{Media, MemMedia};
use sluice::recovery;
use std::sync::{Arc, OnceLock};

/// Names of the properties; each is one cargo-fuzz target of the same name.
pub const TARGETS: [&str; 13] = [
    "intent_record",
    "logdev_superblock",
    "superblock",
    "chunk_header",
    "chunk_verify",
    "checkpoint_header",
    "checkpoint_segments",
    "map_decode",
    "mount",
    "packed",
    "stripe_identity",
    "obj_checkpoint",
    "obj_log",
];

/// Run the property named `target` on `data`.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "superblock" => check_superblock(data),
        "chunk_header" => check_chunk_header(data),
        "chunk_verify" => check_chunk_verify(data),
        "checkpoint_header" => check_checkpoint_header(data),
        "checkpoint_segments" => check_checkpoint_segments(data),
        "map_decode" => check_map_decode(data),
        "mount" => check_mount(data),
        "packed" => check_packed(data),
        "stripe_identity" => check_stripe_identity(data),
        "obj_checkpoint" => check_obj_checkpoint(data),
        "obj_log" => check_obj_log(data),
        "intent_record" => check_intent_record(data),
        "logdev_superblock" => check_logdev_superblock(data),
        _ => panic!("unknown fuzz target {target}"),
    }
}

const FLAG_RESEAL: u8 = 1;

fn split_control(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((c, rest)) => (*c, rest),
        None => (0, &[]),
    }
}

/// Store the CRC32C of bytes 0..4092 at 4092 (superblock and checkpoint header).
fn reseal_block(b: &mut [u8]) {
    if b.len() >= BLOCK_BYTES {
        let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
        b[BLOCK_BYTES - 4..BLOCK_BYTES].copy_from_slice(&crc.to_le_bytes());
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    for (i, x) in w.iter_mut().enumerate() {
        *x = b.get(off + i).copied().unwrap_or(0);
    }
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u32_at(b, off) as u64 | (u32_at(b, off + 4) as u64) << 32
}

/// Input: [control][4 KiB block]. Control bit 0: re-seal the block CRC first, so the
/// fuzzer reaches the field validation behind the checksum.
pub fn check_superblock(data: &[u8]) {
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 {
        reseal_block(&mut b);
    }
    let Ok(sb) = Superblock::decode(&b) else {
        return;
    };
    let enc = sb.encode();
    assert_eq!(enc.len(), BLOCK_BYTES);
    assert_eq!(
        Superblock::decode(&enc).as_ref(),
        Ok(&sb),
        "superblock round-trip"
    );
    // What validation promises to everything downstream (recovery, check, info):
    // no overflow in the layout arithmetic, slots inside the metadata area and
    // disjoint, and a checkpoint read no larger than the checkpoint needs + 1 MiB.
    let need =
        checkpoint::slot_bytes_with(sb.logical_blocks, sb.segment_count, sb.map_value_bytes());
    assert!(sb.checkpoint_slot_bytes >= need);
    assert!(
        sb.checkpoint_slot_bytes <= need + (1 << 20),
        "checkpoint slot of {} bytes for a checkpoint of {need}",
        sb.checkpoint_slot_bytes
    );
    assert_eq!(sb.checkpoint_slot_bytes % BLOCK_BYTES as u64, 0);
    let area = sb.segment_count as u64 * sb.segment_blocks as u64 * BLOCK_BYTES as u64;
    assert!(
        sb.data_offset.checked_add(area).is_some(),
        "media_bytes() overflows: data_offset {:#x}",
        sb.data_offset
    );
    let [c0, c1] = sb.checkpoint_offset;
    let s = sb.checkpoint_slot_bytes;
    assert!(c0 >= 2 * BLOCK_BYTES as u64 && c1 >= 2 * BLOCK_BYTES as u64);
    assert!(c0 + s <= sb.data_offset && c1 + s <= sb.data_offset);
    assert!(c0 + s <= c1 || c1 + s <= c0, "checkpoint slots overlap");
    let _ = sb.media_bytes();
}

/// Input: [control][log device superblock block]. Control bit 0: re-seal the
/// CRC. A block that decodes re-encodes to the same value, its ring lies
/// inside the u64 range, and its mirror index is below its count.
pub fn check_logdev_superblock(data: &[u8]) {
    use sluice::format::logdev::{LogDevSuperblock, LOGDEV_RING_OFFSET, MAX_LOG_MIRRORS};
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 {
        reseal_block(&mut b);
    }
    let Ok(s) = LogDevSuperblock::decode(&b) else {
        return;
    };
    assert_eq!(LogDevSuperblock::decode(&s.encode()), Ok(s), "round-trip");
    assert!(s.mirror_index < s.mirror_count && s.mirror_count <= MAX_LOG_MIRRORS);
    assert!(s.ring_offset >= LOGDEV_RING_OFFSET);
    assert!(s.device_bytes() >= s.ring_bytes);
}

/// Input: [control][intent log record: header block + data]. Control bit 0:
/// re-seal the header CRC; bit 1: expect the seq, chain and uuid the header
/// carries (else fixed ones, which it rarely matches); bit 2: recompute the
/// block CRCs from the data present.
pub fn check_intent_record(data: &[u8]) {
    use sluice::format::intent::{self, RecordHeader};
    let (ctl, rest) = split_control(data);
    let mut img = rest.to_vec();
    let reseal = |img: &mut Vec<u8>| {
        // version 3: the CRC covers the record's sectors
        let v3_len = (img.len() >= 512 && img[8..10] == 3u16.to_le_bytes())
            .then(|| (u32_at(img, 76) & 0xffff) as usize * 512)
            .filter(|&l| (512..=BLOCK_BYTES).contains(&l) && l <= img.len());
        if let Some(len) = v3_len {
            let mut c = crc32c::crc32c(&img[..44]);
            c = crc32c::crc32c_append(c, &[0u8; 4]);
            c = crc32c::crc32c_append(c, &img[48..len]);
            img[44..48].copy_from_slice(&c.to_le_bytes());
        } else if img.len() >= BLOCK_BYTES {
            let mut c = crc32c::crc32c(&img[..44]);
            c = crc32c::crc32c_append(c, &[0u8; 4]);
            c = crc32c::crc32c_append(c, &img[48..BLOCK_BYTES]);
            img[44..48].copy_from_slice(&c.to_le_bytes());
        }
    };
    if ctl & 4 != 0 && img.len() >= BLOCK_BYTES {
        let n = u32_at(&img, 12).min(1000) as usize;
        let entries = (u32_at(&img, 10) & 0xffff) as usize;
        let at = 64 + 16 * entries;
        for i in 0..n {
            let d = (1 + i) * BLOCK_BYTES;
            if d + BLOCK_BYTES > img.len() || at + 4 * i + 4 > BLOCK_BYTES {
                break;
            }
            let crc = crc32c::crc32c(&img[d..d + BLOCK_BYTES]);
            img[at + 4 * i..at + 4 * i + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    if ctl & FLAG_RESEAL != 0 {
        reseal(&mut img);
    }
    let (uuid, seq, chain) = if ctl & 2 != 0 && img.len() >= 44 {
        (
            img[16..32].try_into().unwrap(),
            u64_at(&img, 32),
            u32_at(&img, 40),
        )
    } else {
        ([0x5a; 16], 7, 0x1234_5678)
    };
    let Ok((h, crc)) = RecordHeader::decode(&img) else {
        return;
    };
    match h.place {
        None => assert!(intent::fits(h.entries.len(), h.block_crcs.len())),
        Some(_) => assert!(
            intent::v3_bytes(h.entries.len(), h.block_crcs.len()) <= h.ring_bytes()
                && h.ring_bytes() <= BLOCK_BYTES
        ),
    }
    assert!(h.main_lsn <= h.first_lsn);
    let mut enc = vec![0u8; h.ring_bytes().min(BLOCK_BYTES)];
    // (bytes the decoder ignores, past the block CRCs, are covered by the
    // CRC but not kept: the CRC need not round-trip, the header must)
    let _ = (crc, h.encode_into(&mut enc));
    assert_eq!(
        RecordHeader::decode(&enc).map(|x| x.0).as_ref(),
        Ok(&h),
        "record header round-trip"
    );
    if let Ok((v, _)) = intent::verify(&img, &uuid, seq, chain) {
        assert_eq!(v, h);
        assert!(img.len() >= h.ring_bytes());
        assert_eq!((v.uuid, v.seq, v.prev_crc), (uuid, seq, chain));
    }
}

/// Input: [control][4 KiB header block]. Control bit 0: re-seal the header CRC.
pub fn check_chunk_header(data: &[u8]) {
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 && b.len() >= BLOCK_BYTES {
        chunk::seal_crc(&mut b[..BLOCK_BYTES]);
    }
    let Ok(h) = ChunkHeader::decode(&b) else {
        return;
    };
    assert!(h.entries.len() <= chunk::MAX_ENTRIES);
    assert!(h.data_blocks <= chunk::MAX_DATA_BLOCKS);
    assert_eq!(
        h.entries
            .iter()
            .map(|e| e.data_blocks() as u64)
            .sum::<u64>(),
        h.data_blocks as u64
    );
    assert_eq!(h.block_crcs.len(), h.data_blocks as usize);
    for e in &h.entries {
        assert!(e.count > 0 && e.lba + e.count as u64 <= chunk::MAX_ENTRY_LBA);
    }
    let mut enc = vec![0u8; BLOCK_BYTES];
    h.encode_into(&mut enc);
    chunk::seal_crc(&mut enc);
    assert_eq!(
        ChunkHeader::decode(&enc).as_ref(),
        Ok(&h),
        "chunk header round-trip"
    );
}

/// Input: [control][chunk image]. Control bit 0: seal the header CRC; bit 1: cut or
/// zero-extend the image to the length its header declares; bit 2: expect the UUID
/// the header carries (else a fixed one, which the header rarely matches); bit 3:
/// recompute the block CRCs from the data present.
pub fn check_chunk_verify(data: &[u8]) {
    let (ctl, rest) = split_control(data);
    let mut img = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 && img.len() >= BLOCK_BYTES {
        chunk::seal_crc(&mut img[..BLOCK_BYTES]);
    }
    if ctl & 2 != 0 {
        if let Ok(h) = ChunkHeader::decode(&img) {
            img.resize(h.total_blocks() as usize * BLOCK_BYTES, 0);
        }
    }
    if ctl & 8 != 0 {
        if let Ok(h) = ChunkHeader::decode(&img) {
            let n = (h.data_blocks as usize).min(img.len() / BLOCK_BYTES - 1);
            for i in 0..n {
                let d = (1 + i) * BLOCK_BYTES;
                let crc = chunk::block_crc(&img[d..d + BLOCK_BYTES]);
                let c = BLOCK_CRC_OFFSET + 4 * i;
                img[c..c + 4].copy_from_slice(&crc.to_le_bytes());
            }
            chunk::seal_crc(&mut img[..BLOCK_BYTES]);
        }
    }
    let uuid: [u8; 16] = if ctl & 4 != 0 && img.len() >= 32 {
        img[16..32].try_into().unwrap()
    } else {
        [0x5a; 16]
    };
    let Ok(h) = chunk::verify(&img, &uuid) else {
        return;
    };
    assert_eq!(img.len(), h.total_blocks() as usize * BLOCK_BYTES);
    assert_eq!(h.uuid, uuid);
    // Re-encode the header in front of the same data: it must verify to the same value.
    let mut again = img.clone();
    h.encode_into(&mut again[..BLOCK_BYTES]);
    chunk::seal_crc(&mut again[..BLOCK_BYTES]);
    assert_eq!(
        chunk::verify(&again, &uuid).as_ref(),
        Ok(&h),
        "chunk round-trip"
    );
}

/// Input: [control][4 KiB header block]. Control bit 0: re-seal the header CRC.
pub fn check_checkpoint_header(data: &[u8]) {
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 {
        reseal_block(&mut b);
    }
    let Ok(h) = CheckpointHeader::decode(&b) else {
        return;
    };
    assert_eq!(
        CheckpointHeader::decode(&h.encode()).as_ref(),
        Ok(&h),
        "checkpoint header round-trip"
    );
    // the lifetime counters (bytes 64..4092) are optional: without them the
    // header decodes to the same v1 fields, and a decoded count is in range
    let mut v1 = b[..BLOCK_BYTES].to_vec();
    v1[64..BLOCK_BYTES - 4].fill(0);
    reseal_block(&mut v1);
    let old = CheckpointHeader::decode(&v1).expect("header without lifetime counters");
    assert_eq!(old.lifetime, None, "zero bytes mean no lifetime counters");
    assert_eq!(
        CheckpointHeader {
            lifetime: None,
            next_lsn: 0,
            ..h.clone()
        },
        old,
        "lifetime counters change a v1 field"
    );
}

/// Geometry for the body decoders. Input: [control][logical_blocks u64][segment_count
/// u32][segment_blocks u32][body...]. Control bit 0: use the numbers raw (any u64 /
/// u32: the decoders must refuse, not overflow); else fold them into ranges a valid
/// superblock allows, small enough that the body can cover them.
fn body_geometry(data: &[u8]) -> (u64, u32, u32, &[u8]) {
    let (ctl, rest) = split_control(data);
    let (mut lb, mut sc, mut sbk) = (u64_at(rest, 0), u32_at(rest, 8), u32_at(rest, 12));
    if ctl & 1 == 0 {
        lb %= 4096;
        sc %= 1024;
        sbk = chunk::MIN_SEGMENT_BLOCKS + sbk % ((1 << 20) - chunk::MIN_SEGMENT_BLOCKS + 1);
    }
    (lb, sc, sbk, rest.get(16..).unwrap_or(&[]))
}

/// Map value width of a body check: 5 bytes (compressed volumes) when bit 1
/// of the control byte is set, else 4.
fn value_bytes(data: &[u8]) -> u64 {
    if split_control(data).0 & 2 != 0 {
        5
    } else {
        4
    }
}

/// Checkpoint segment table (after the map in the body).
pub fn check_checkpoint_segments(data: &[u8]) {
    let (lb, sc, sbk, body) = body_geometry(data);
    let w = value_bytes(data);
    let Ok(recs) = decode_segments_with(body, lb, sc, sbk, w) else {
        return;
    };
    assert_eq!(recs.len(), sc as usize);
    let start = (lb * w) as usize;
    for (i, r) in recs.iter().enumerate() {
        assert!(r.fill <= sbk);
        let mut enc = [0u8; SEGMENT_RECORD_BYTES];
        r.encode(&mut enc);
        let off = start + i * SEGMENT_RECORD_BYTES;
        assert_eq!(
            &enc[..],
            &body[off..off + SEGMENT_RECORD_BYTES],
            "record {i} round-trip"
        );
    }
}

/// Checkpoint map (the first logical_blocks * 4 bytes of the body; * 5 on
/// a compressed volume).
pub fn check_map_decode(data: &[u8]) {
    let (lb, sc, sbk, body) = body_geometry(data);
    let w = value_bytes(data);
    let Ok(map) = Map::decode_with(body, lb, sc, sbk, w) else {
        return;
    };
    assert_eq!(map.value_bytes(), w);
    assert_eq!(map.len(), lb);
    let data_blocks = sc as u64 * sbk as u64;
    for loc in map.iter() {
        match loc {
            Loc::Unmapped => {}
            Loc::Data(p) => assert!((p as u64) < data_blocks),
            Loc::Fragment { phys, spans, .. } => {
                assert!(w == 5 && (phys as u64 + spans as u64) < data_blocks)
            }
            Loc::Virtual(_, s) => assert!(s < sc),
            Loc::Staged { .. } | Loc::StagedVirt(..) => panic!("a staged value decoded"),
        }
    }
    let mut enc = vec![0u8; map.encoded_bytes()];
    assert_eq!(enc.len() as u64, lb * w);
    map.encode_into(&mut enc);
    assert_eq!(&enc[..], &body[..enc.len()], "map round-trip");
}

/// Packed blocks (format v2 compression): control byte = slot (low 4 bits;
/// bit 4: the next block is absent), then two 4 KiB blocks. `unpack` never
/// panics, and when it returns data, that data has the slot's raw CRC.
pub fn check_packed(data: &[u8]) {
    use sluice::format::packed::{unpack, Table};
    let (ctl, rest) = split_control(data);
    let mut two = vec![0u8; 2 * BLOCK_BYTES];
    let n = rest.len().min(two.len());
    two[..n].copy_from_slice(&rest[..n]);
    let (block, next) = two.split_at(BLOCK_BYTES);
    let next = (ctl & 0x10 == 0).then_some(next);
    let slot = ctl & 0x0f;
    let mut raw = vec![0u8; BLOCK_BYTES];
    if unpack(block, next, slot, &mut raw).is_ok() {
        let table = Table::decode(block).expect("unpack accepted a table decode refuses");
        assert_eq!(crc32c::crc32c(&raw), table.slots()[slot as usize].raw_crc);
    }
    // the run's fragment list: every place inside the run, spans only into
    // a block of the run, and each one's table agrees
    let run = if next.is_some() { &two[..] } else { block };
    if let Ok(found) = sluice::format::packed::fragments_of(run) {
        let blocks = run.len() / BLOCK_BYTES;
        for f in found {
            let b = f.place.block as usize;
            assert!(b < blocks && (!f.place.spans || b + 1 < blocks));
            let t = Table::decode(&run[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES]).unwrap();
            let s = t.slots()[f.place.slot as usize];
            assert_eq!(
                (s.len, s.raw_crc, s.spans()),
                (f.len, f.raw_crc, f.place.spans)
            );
        }
    }
}

/// Stripe-set member identity (format v2 §6): control byte bit 0 = read it
/// from a v2 superblock block with `STRIPE_SET` set (the 64 bytes at 200),
/// else decode the bytes directly. Decode never panics; what it accepts
/// re-encodes to the same bytes, and is a shape `StripeLayout` accepts too.
/// `obj_checkpoint`: a checkpoint object of a volume in an object store
/// (`format::objckpt`). Input: a control byte (bit 0: recompute the trailing
/// CRC so the fuzzer gets past it), then the object's bytes. Properties:
/// decode never panics, and what it accepts is exactly what `encode` makes
/// of the value (no byte of an accepted object is ignored).
pub fn check_obj_checkpoint(data: &[u8]) {
    use sluice::format::objckpt::ObjCheckpoint;
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 && b.len() >= 4 {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(c) = ObjCheckpoint::decode(&b) {
        assert_eq!(c.encode(), b, "obj checkpoint round-trip");
    }
}

/// `obj_log`: a FLUSH log object of a store-durable volume
/// (`format::objlog`). Input: a control byte (bit 0: recompute the trailing
/// CRC), then the object's bytes. Properties: decode never panics, and what
/// it accepts is exactly what `encode` makes of the value.
pub fn check_obj_log(data: &[u8]) {
    use sluice::format::objlog::LogObject;
    let (ctl, rest) = split_control(data);
    let mut b = rest.to_vec();
    if ctl & FLAG_RESEAL != 0 && b.len() >= 4 {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(o) = LogObject::decode(&b) {
        // version 1 objects still decode; `encode` writes version 2
        let again = if b[8..12] == 1u32.to_le_bytes() {
            o.encode_v1()
        } else {
            o.encode()
        };
        assert_eq!(again, b, "obj log round-trip");
    }
}

pub fn check_stripe_identity(data: &[u8]) {
    use sluice::format::stripe::{StripeIdentity, GEOMETRY_BYTES, GEOMETRY_OFFSET, STRIPE_SET};
    use sluice::stripe::StripeLayout;
    let (ctl, rest) = split_control(data);
    let mut bytes = [0u8; GEOMETRY_BYTES];
    let n = rest.len().min(GEOMETRY_BYTES);
    bytes[..n].copy_from_slice(&rest[..n]);
    let got = if ctl & 1 != 0 {
        let mut block = vec![0u8; BLOCK_BYTES];
        block[8..10].copy_from_slice(&2u16.to_le_bytes());
        block[160..168].copy_from_slice(&STRIPE_SET.to_le_bytes());
        block[GEOMETRY_OFFSET..GEOMETRY_OFFSET + GEOMETRY_BYTES].copy_from_slice(&bytes);
        match StripeIdentity::from_superblock(&block) {
            Ok(id) => Ok(id.expect("STRIPE_SET is set")),
            Err(e) => Err(e),
        }
    } else {
        StripeIdentity::decode(rest)
    };
    if let Ok(id) = got {
        assert_eq!(id.encode(), bytes, "stripe identity round-trip");
        let l = StripeLayout::from_identity(&id, 1 << 20)
            .expect("a decoded identity is a layout the geometry accepts");
        let segs = id.rows / id.rows_per_segment as u64;
        let pieces = l
            .map(segs - 1, 0, l.segment_bytes())
            .expect("the last segment of the set maps");
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), l.segment_bytes());
    }
}

/// Size of the media the mount property runs on: the 1.5 MiB layout the corpus
/// was built for, plus the 64 KiB tail area of the superblock tail copies.
pub const IMAGE_BYTES: usize = (1536 + 64) << 10;
const SEGMENT_BYTES: u64 = 32 << 10;
const BASE_UUID: [u8; 16] = *b"sluice-fuzz-uuid";

/// Re-seal the CRCs the fuzzer cannot forge, on a whole media image: bit 2 = both
/// superblock copies (and both tail copies, when the newest names them); bit 3 = both checkpoint slots (body CRC, then header CRC);
/// bit 4 = every chunk, walking each segment from block 0 (header CRC so it
/// decodes, then block CRCs from the data, then the header CRC again). Geometry comes from the best superblock, if any.
pub fn reseal_image(img: &mut [u8], what: u8) {
    if what & 4 != 0 {
        reseal_block(&mut img[..BLOCK_BYTES]);
        reseal_block(&mut img[BLOCK_BYTES..2 * BLOCK_BYTES]);
    }
    let sb = [0, 1]
        .iter()
        .filter_map(|&i| Superblock::decode(&img[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]).ok())
        .max_by_key(|s| s.generation);
    let Some(sb) = sb else { return };
    if sb.media_bytes() > img.len() as u64 {
        return;
    }
    if what & 4 != 0 && sb.tail_offset != 0 {
        // the superblock copies at the tail (issue 17)
        let t = sb.tail_offset as usize;
        reseal_block(&mut img[t..t + BLOCK_BYTES]);
        reseal_block(&mut img[t + BLOCK_BYTES..t + 2 * BLOCK_BYTES]);
    }
    if what & 8 != 0 {
        let body_len =
            body_bytes_with(sb.logical_blocks, sb.segment_count, sb.map_value_bytes()) as usize;
        for off in sb.checkpoint_offset {
            let off = off as usize;
            let body = &img[off + BLOCK_BYTES..off + BLOCK_BYTES + body_len];
            let crc = crc32c::crc32c(body);
            img[off + 52..off + 56].copy_from_slice(&crc.to_le_bytes());
            reseal_block(&mut img[off..off + BLOCK_BYTES]);
        }
    }
    if what & 16 != 0 {
        let geo = Geometry::from_superblock(&sb);
        let sbk = geo.segment_blocks;
        for seg in 0..geo.segment_count {
            let base = geo.segment_offset(seg) as usize;
            let mut pos = 0u32;
            while pos < sbk {
                let at = base + pos as usize * BLOCK_BYTES;
                if img[at..at + 8] == CHUNK_MAGIC {
                    chunk::seal_crc(&mut img[at..at + BLOCK_BYTES]);
                }
                let Ok(h) = ChunkHeader::decode(&img[at..at + BLOCK_BYTES]) else {
                    break;
                };
                let total = h.total_blocks();
                if pos + total > sbk {
                    break;
                }
                for i in 0..h.data_blocks as usize {
                    let d = at + (1 + i) * BLOCK_BYTES;
                    let crc = chunk::block_crc(&img[d..d + BLOCK_BYTES]);
                    let c = at + BLOCK_CRC_OFFSET + 4 * i;
                    img[c..c + 4].copy_from_slice(&crc.to_le_bytes());
                }
                chunk::seal_crc(&mut img[at..at + BLOCK_BYTES]);
                pos += total;
            }
        }
    }
}

/// Two real volume images, built once by driving the engine: [0] after a crash
/// (flushed but never closed: a checkpoint, then chunks to replay, GC relocations,
/// virtual blocks, trims), [1] the same volume closed cleanly. The random UUID and
/// the timestamps are replaced by constants so the images are byte-identical in
/// every process (a crashing fuzz input reproduces).
pub fn base_images() -> &'static [Vec<u8>; 2] {
    static IMAGES: OnceLock<[Vec<u8>; 2]> = OnceLock::new();
    IMAGES.get_or_init(build_base_images)
}

fn build_base_images() -> [Vec<u8>; 2] {
    let media = Arc::new(MemMedia::new(IMAGE_BYTES as u64));
    let create = sluice::CreateOptions {
        logical_bytes: None,
        overprovision: 0.25,
        segment_bytes: SEGMENT_BYTES,
        gc_policy: sluice::GcPolicy::Greedy,
        ..Default::default()
    };
    let open = sluice::OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 40),
        ..Default::default()
    };
    let vol = sluice::Volume::create(media.clone(), &create, &open).expect("create base volume");
    let blocks = vol.size_bytes() / BLOCK_BYTES as u64;
    // A small deterministic generator (xorshift) keeps this file free of a rand dep.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..400u64 {
        let r = next();
        let lba = r % blocks;
        let n = (1 + (r >> 20) % 6).min(blocks - lba);
        let off = lba * BLOCK_BYTES as u64;
        let len = n * BLOCK_BYTES as u64;
        match (r >> 8) % 10 {
            0 => vol.trim(off, len, false).unwrap(),
            1 => vol.write_zeroes(off, len, false, false).unwrap(),
            2 => vol.write(off, &vec![0xff; len as usize], false).unwrap(),
            3 => vol
                .write(off + 100, &[(r >> 3) as u8; 1000], false)
                .unwrap(),
            _ => {
                let data: Vec<u8> = (0..len).map(|k| (k ^ r ^ (k >> 9)) as u8).collect();
                vol.write(off, &data, (r >> 40) % 8 == 0).unwrap();
            }
        }
        if r % 7 == 0 {
            vol.flush().unwrap();
        }
        if i == 150 {
            vol.checkpoint().unwrap();
        }
    }
    vol.flush().unwrap();
    let st = vol.stats();
    assert!(
        st.gc_blocks_moved > 0 && st.reuse_barriers > 0 && st.checkpoints > 0,
        "base image workload must exercise GC, reuse barriers and a checkpoint: {st:?}"
    );
    let mut crashed = media.image();
    vol.close().unwrap();
    let mut clean = media.image();
    drop(vol);
    for img in [&mut crashed, &mut clean] {
        normalize(img);
        let m = MemMedia::from_image(img.clone());
        recovery::mount(&m).expect("base image mounts");
        let report = check::check(&m);
        assert!(
            report.is_clean(),
            "base image checks clean: {:?}",
            report.damage
        );
    }
    [crashed, clean]
}

/// Replace the volume UUID and the timestamps in every superblock, checkpoint and
/// chunk header by constants, then re-seal every CRC.
fn normalize(img: &mut [u8]) {
    let uuid: [u8; 16] = img[16..32].try_into().unwrap();
    for b in img.chunks_exact_mut(BLOCK_BYTES) {
        if b[16..32] != uuid {
            continue;
        }
        let stamp = match &b[0..8] {
            m if m == b"SLUICESB" => 120,
            m if m == b"SLUICECP" => 56,
            m if m == CHUNK_MAGIC => 48,
            _ => continue,
        };
        b[16..32].copy_from_slice(&BASE_UUID);
        b[stamp..stamp + 8].fill(0);
    }
    reseal_image(img, 4 | 8 | 16);
}

/// Input: [control][patches...]. Control bits 0-1 pick the starting image: 0 = the
/// crashed base image, 1 = the cleanly closed one, 2 = all zeros, 3 = raw (the rest
/// of the input is copied to offset 0, zero padded to IMAGE_BYTES, no patches).
/// Each patch is [offset u32 LE, taken modulo the image size][len u8][len bytes].
/// Bits 2-4 re-seal CRCs after patching (see `reseal_image`). Then mount and check
/// run; they may fail but must not panic, must not abort on an allocation, and must
/// not write to the media.
pub fn check_mount(data: &[u8]) {
    let (ctl, rest) = split_control(data);
    let mut img = match ctl & 3 {
        0 => base_images()[0].clone(),
        1 => base_images()[1].clone(),
        _ => vec![0u8; IMAGE_BYTES],
    };
    if ctl & 3 == 3 {
        let n = rest.len().min(IMAGE_BYTES);
        img[..n].copy_from_slice(&rest[..n]);
    } else {
        let mut p = rest;
        while p.len() >= 5 {
            let off = u32_at(p, 0) as usize % IMAGE_BYTES;
            let len = (p[4] as usize).min(p.len() - 5).min(IMAGE_BYTES - off);
            img[off..off + len].copy_from_slice(&p[5..5 + len]);
            p = &p[5 + len..];
        }
    }
    reseal_image(&mut img, ctl);
    let before = crc32c::crc32c(&img);
    let media = MemMedia::from_image(img);
    if let Ok(m) = recovery::mount(&media) {
        // Every map value must be inside the geometry the superblock declares.
        let g = m.geo;
        assert!(g.media_bytes() <= IMAGE_BYTES as u64);
        for loc in m.map.iter() {
            match loc {
                Loc::Unmapped => {}
                Loc::Data(p) => {
                    assert!((p as u64) < g.segment_count as u64 * g.segment_blocks as u64)
                }
                Loc::Fragment { phys, spans, .. } => assert!(
                    (phys as u64 + spans as u64) < g.segment_count as u64 * g.segment_blocks as u64
                ),
                Loc::Virtual(_, s) => assert!(s < g.segment_count),
                Loc::Staged { .. } | Loc::StagedVirt(..) => panic!("a staged value mounted"),
            }
        }
        assert_eq!(m.segs.count(), g.segment_count);
    }
    let _ = check::check(&media);
    let mut after = 0;
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..IMAGE_BYTES).step_by(buf.len()) {
        media.read_at(&mut buf, off as u64).unwrap();
        after = crc32c::crc32c_append(after, &buf);
    }
    assert_eq!(after, before, "mount or check wrote to the media");
}

/// Valid inputs for each target, built from real encoded structures (what
/// fuzz/seeds/<target>/ holds). Deterministic.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let with = |ctl: u8, b: &[u8]| [&[ctl][..], b].concat();

    // Superblocks: a small and a large geometry, with and without a checkpoint.
    for (name, logical, seg_blocks) in [("small", 1000u64, 16u32), ("large", 1 << 28, 1024)] {
        let g = Geometry::for_logical(logical, seg_blocks, 0.1);
        let mut sb = Superblock {
            uuid: BASE_UUID,
            generation: 7,
            logical_blocks: g.logical_blocks,
            segment_blocks: g.segment_blocks,
            segment_count: g.segment_count,
            data_offset: g.data_offset,
            checkpoint_offset: g.checkpoint_offset,
            checkpoint_slot_bytes: g.checkpoint_slot_bytes,
            overprovision_bp: 1000,
            flags: 1,
            checkpoint_slot: 1,
            checkpoint_next_seq: 42,
            durable_seq: 40,
            created_unix_s: 0,
            gc_policy: 1,
            tail_offset: g.tail_offset,
            v2: None,
        };
        out.push(("superblock", name.to_string(), with(1, &sb.encode())));
        sb.checkpoint_slot = u32::MAX;
        sb.flags = 0;
        out.push((
            "superblock",
            format!("{name}-nockpt"),
            with(0, &sb.encode()),
        ));
    }

    // Log device superblocks: a single device and the second of a pair.
    for (name, index, count) in [("single", 0u16, 1u16), ("mirror-1", 1, 2)] {
        use sluice::format::logdev::{LogDevSuperblock, LOGDEV_RING_OFFSET};
        let s = LogDevSuperblock {
            volume_uuid: BASE_UUID,
            log_uuid: [0x42; 16],
            ring_offset: LOGDEV_RING_OFFSET,
            ring_bytes: 16 << 20,
            mirror_index: index,
            mirror_count: count,
            created_unix_s: 1_700_000_000,
        };
        out.push(("logdev_superblock", name.to_string(), with(0, &s.encode())));
    }

    // Intent log records: data, trim and zero entries; a header-only record.
    for (name, ndata) in [("data", 2usize), ("header-only", 0)] {
        use sluice::format::intent::{RecordEntry, RecordHeader};
        let data: Vec<u8> = (0..ndata * BLOCK_BYTES)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let mut entries = vec![RecordEntry {
            lba: 40,
            count: 3,
            kind: Kind::Trim,
        }];
        if ndata > 0 {
            entries.push(RecordEntry {
                lba: 9,
                count: ndata as u32,
                kind: Kind::Data,
            });
        }
        let h = RecordHeader {
            uuid: BASE_UUID,
            seq: 12,
            prev_crc: 0xabcd_ef01,
            main_lsn: 100,
            first_lsn: 104,
            entries,
            block_crcs: data.chunks(BLOCK_BYTES).map(crc32c::crc32c).collect(),
            place: None,
            sectors: 0,
        };
        let mut img = vec![0u8; BLOCK_BYTES];
        h.encode_into(&mut img);
        img.extend_from_slice(&data);
        out.push(("intent_record", name.to_string(), with(2, &img)));
        // version 3: the same entries, no data, one sector naming its place
        let v3 = RecordHeader {
            place: Some(sluice::format::intent::Place {
                segment: 3,
                chunk_start: 17,
                first_index: 2,
            }),
            sectors: 1,
            ..h
        };
        let mut img = vec![0u8; 512];
        v3.encode_into(&mut img);
        out.push(("intent_record", format!("{name}-v3"), with(2, &img)));
    }

    // Chunks: every kind, relocations, a full-size header, a header-only chunk.
    let chunk = |entries: Vec<Entry>, stream: Stream, fill: u8| {
        let data_blocks: u32 = entries.iter().map(|e| e.data_blocks()).sum();
        let mut img = vec![fill; (1 + data_blocks as usize) * BLOCK_BYTES];
        for (i, b) in img[BLOCK_BYTES..].chunks_mut(BLOCK_BYTES).enumerate() {
            b[0] = i as u8;
        }
        let block_crcs = img[BLOCK_BYTES..]
            .chunks(BLOCK_BYTES)
            .map(chunk::block_crc)
            .collect();
        let h = ChunkHeader {
            uuid: BASE_UUID,
            seq: 1000,
            segment: 3,
            stream,
            timestamp_ns: 0,
            durable_seq: 990,
            data_blocks,
            entries,
            block_crcs,
            lsn: None,
            chain: None,
            mixed_check: false,
        };
        h.encode_into(&mut img[..BLOCK_BYTES]);
        chunk::seal_crc(&mut img);
        img
    };
    let e = |lba: u64, count: u32, kind: Kind, src: u32| Entry {
        lba,
        count,
        kind,
        src,
    };
    let user = chunk(
        vec![
            e(10, 2, Kind::Data, NO_SRC),
            e(100, 1 << 20, Kind::Trim, NO_SRC),
            e(5, 1, Kind::Ones, NO_SRC),
            e(6, 3, Kind::Zero, NO_SRC),
            e(200, 1, Kind::Data, NO_SRC),
        ],
        Stream::User,
        0x11,
    );
    let gc = chunk(
        vec![
            e(7, 1, Kind::Data, 4096),
            e(8, 1, Kind::Zero, 2),
            e(chunk::MAX_ENTRY_LBA - 1, 1, Kind::Data, 77),
        ],
        Stream::Gc,
        0x22,
    );
    let many: Vec<Entry> = (0..chunk::MAX_ENTRIES as u64)
        .map(|i| {
            e(
                i * 3,
                1,
                if i % 2 == 0 { Kind::Trim } else { Kind::Zero },
                NO_SRC,
            )
        })
        .collect();
    let header_only = chunk(many, Stream::User, 0);
    for (name, img) in [("user", &user), ("gc", &gc), ("header-only", &header_only)] {
        out.push((
            "chunk_header",
            name.to_string(),
            with(1, &img[..BLOCK_BYTES]),
        ));
        out.push(("chunk_verify", name.to_string(), with(1 | 4 | 8, img)));
    }
    out.push((
        "chunk_verify",
        "user-truncated".into(),
        with(7, &user[..BLOCK_BYTES + 10]),
    ));

    // Checkpoint header.
    let h = CheckpointHeader {
        uuid: BASE_UUID,
        next_seq: 1234,
        logical_blocks: 1000,
        segment_count: 20,
        body_crc: 0xdead_beef,
        created_unix_ns: 0,
        lifetime: None,
        next_lsn: 0,
    };
    out.push(("checkpoint_header", "basic".into(), with(0, &h.encode())));
    let l = checkpoint::Lifetime::from_fields(&(1..=18).map(|i| i * 4096).collect::<Vec<u64>>());
    let h = CheckpointHeader {
        lifetime: Some(l),
        next_lsn: 0,
        ..h
    };
    out.push(("checkpoint_header", "lifetime".into(), with(0, &h.encode())));

    // Checkpoint body: map values of every form, then segment records.
    let (lb, sc, sbk) = (64u64, 8u32, 16u32);
    let mut map = Map::new(lb);
    for i in 0..lb {
        let loc = match i % 6 {
            0 => Loc::Unmapped,
            1 => Loc::Data((i * 7 % (sc as u64 * sbk as u64)) as u32),
            2 => Loc::Virtual(Virt::Trim, (i % sc as u64) as u32),
            3 => Loc::Virtual(Virt::Zero, 0),
            4 => Loc::Virtual(Virt::Ones, sc - 1),
            _ => Loc::Data(sc * sbk - 1 - i as u32),
        };
        map.set(i, loc);
    }
    let mut body = vec![0u8; body_bytes_with(lb, sc, 4) as usize];
    map.encode_into(&mut body[..lb as usize * 4]);
    for s in 0..sc as usize {
        let r = SegmentRecord {
            live: s as u32 * 3,
            fill: (s as u32 * 5) % (sbk + 1),
            last_seq: 1000 + s as u64,
        };
        let off = lb as usize * 4 + s * SEGMENT_RECORD_BYTES;
        r.encode(&mut body[off..off + SEGMENT_RECORD_BYTES]);
    }
    let mut params = Vec::new();
    params.extend_from_slice(&lb.to_le_bytes());
    params.extend_from_slice(&sc.to_le_bytes());
    params.extend_from_slice(&sbk.to_le_bytes());
    for target in ["checkpoint_segments", "map_decode"] {
        // Control bit 0 = raw numbers, so the geometry is taken exactly.
        out.push((
            target,
            "basic".into(),
            with(1, &[&params[..], &body[..]].concat()),
        ));
    }
    // the same map with 5-byte values (a compressed volume; control bit 1)
    let mut map5 = Map::with_value_bytes(lb, 5);
    for (i, loc) in map.iter().enumerate() {
        map5.set(i as u64, loc);
    }
    let mut body5 = vec![0u8; body_bytes_with(lb, sc, 5) as usize];
    map5.encode_into(&mut body5[..lb as usize * 5]);
    body5[lb as usize * 5..].copy_from_slice(&body[lb as usize * 4..]);
    for target in ["checkpoint_segments", "map_decode"] {
        out.push((
            target,
            "five-byte-values".into(),
            with(3, &[&params[..], &body5[..]].concat()),
        ));
    }

    // Mount: the two base images untouched, a patched superblock field with the CRC
    // re-sealed, a flipped chunk byte, a raw superblock-only image.
    let patch = |off: u32, bytes: &[u8]| {
        let mut p = off.to_le_bytes().to_vec();
        p.push(bytes.len() as u8);
        p.extend_from_slice(bytes);
        p
    };
    out.push(("mount", "crashed".into(), vec![0]));
    out.push(("mount", "clean".into(), vec![1]));
    out.push(("mount", "crashed-resealed".into(), vec![4 | 8 | 16]));
    out.push((
        "mount",
        "sb-durable-seq".into(),
        [&[4u8][..], &patch(112, &[0xff; 8])].concat(),
    ));
    out.push((
        "mount",
        "sb1-generation".into(),
        [&[1 | 4u8][..], &patch(4096 + 32, &[0xff, 0xff, 0, 0])].concat(),
    ));
    let data_offset = u64::from_le_bytes(base_images()[0][56..64].try_into().unwrap()) as u32;
    out.push((
        "mount",
        "chunk-flip".into(),
        [&[0u8][..], &patch(data_offset + 40, &[0x55])].concat(),
    ));
    out.push((
        "mount",
        "chunk-seq-resealed".into(),
        [&[16u8][..], &patch(data_offset + 32, &[9, 9, 9])].concat(),
    ));
    out.push((
        "mount",
        "raw-superblocks".into(),
        [&[3u8][..], &base_images()[0][..2 * BLOCK_BYTES]].concat(),
    ));

    // Packed blocks: fragments of half-compressible blocks, one spanning.
    {
        use sluice::format::packed::{Compressor, Packer};
        let mut p = Packer::new();
        let mut z = Compressor::default();
        let mut places = Vec::new();
        for i in 0..6u32 {
            let mut raw = vec![0u8; BLOCK_BYTES];
            for (k, b) in raw.iter_mut().enumerate().take(BLOCK_BYTES / 2) {
                *b = (k as u32)
                    .wrapping_mul(2654435761)
                    .wrapping_add(i)
                    .to_le_bytes()[1];
            }
            let f = z.compress(&raw).expect("half-zero block compresses");
            places.push(p.push(f, crc32c::crc32c(&raw)));
        }
        let packed = p.finish();
        for (i, place) in places.iter().enumerate().filter(|(_, p)| p.block == 0) {
            let end = (2 * BLOCK_BYTES).min(packed.len());
            out.push((
                "packed",
                format!("slot{i}"),
                with(place.slot, &packed[..end]),
            ));
        }
    }
    // Stripe identities: a 4+1 and a 6+2 member, direct and in a superblock.
    {
        use sluice::format::stripe::{Layout, StripeIdentity};
        for (name, n, p, index) in [("raid5", 5u16, 1u8, 3u16), ("raid6", 8, 2, 0)] {
            let id = StripeIdentity {
                set_uuid: *b"fuzz-stripe-set!",
                member_uuid: [index as u8 + 1; 16],
                member_index: index,
                member_count: n,
                parity: p,
                layout: Layout::LeftSymmetric,
                stripe_unit: 64 << 10,
                rows_per_segment: 16,
                rows: 4096,
                generation: 2,
            };
            out.push(("stripe_identity", name.into(), with(0, &id.encode())));
            out.push((
                "stripe_identity",
                format!("{name}-sb"),
                with(1, &id.encode()),
            ));
        }
    }
    {
        use sluice::format::objckpt::{ObjCheckpoint, SlotObject};
        let c = ObjCheckpoint {
            uuid: [7; 16],
            segment_blocks: 16,
            seg_start: 42,
            slots: vec![
                None,
                Some(SlotObject {
                    seq: 3,
                    epoch: 1,
                    crc: 0xdead_beef,
                }),
                None,
            ],
            superblock: vec![5; BLOCK_BYTES],
            image: vec![9; 2 * BLOCK_BYTES],
            partials: vec![(2, vec![3; BLOCK_BYTES])],
            log_start: None,
        };
        out.push(("obj_checkpoint", "three-slots".into(), with(0, &c.encode())));
        out.push((
            "obj_checkpoint",
            "three-slots-reseal".into(),
            with(1, &c.encode()),
        ));
        let c = ObjCheckpoint {
            log_start: Some(77),
            ..c
        };
        out.push(("obj_checkpoint", "with-log".into(), with(1, &c.encode())));
    }
    {
        use sluice::format::objlog::LogObject;
        let o = LogObject {
            uuid: [7; 16],
            epoch: 2,
            index: 5,
            first_record: 40,
            prev_crc: 0x1234_5678,
            records: vec![(8192, vec![1; BLOCK_BYTES]), (0, vec![2; 512])],
        };
        out.push(("obj_log", "two-records".into(), with(0, &o.encode())));
        out.push(("obj_log", "two-records-reseal".into(), with(1, &o.encode())));
        out.push(("obj_log", "two-records-v1".into(), with(1, &o.encode_v1())));
        // a chunk-like record: a mostly zero header block, then data
        let mut chunk = vec![0u8; 2 * BLOCK_BYTES];
        chunk[..72].fill(0x5a);
        chunk[3064..3068].fill(1);
        chunk[BLOCK_BYTES - 12..].fill(3);
        chunk[BLOCK_BYTES..].fill(9);
        let o = LogObject {
            records: vec![(4096, chunk), (0, vec![0; 100])],
            ..o
        };
        out.push(("obj_log", "sparse-reseal".into(), with(1, &o.encode())));
    }
    out
}
