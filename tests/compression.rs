//! Compressed volumes (issue 19, docs/compression.md): what a volume created
//! with `Compression::Lz4` keeps: the `COMPRESSION` feature bit and 5-byte
//! map values, in RAM and in checkpoints; data of every compressibility
//! (fragments, raw blocks, virtual blocks) read back through overwrites,
//! trims, flushes, clean closes, crashes (replay of Packed entries), GC
//! (fragments moved as they are) and checkpoints; a damaged packed block is
//! EIO for its fragments only. Uncompressed volumes keep 4-byte values.

mod common;

use common::*;
use sluice::compress::Compression;
use sluice::format::superblock::incompat;
use sluice::geometry::Geometry;
use sluice::media::{Media, MemMedia};
use sluice::{CreateOptions, GcPolicy, Volume};
use std::sync::Arc;

/// A small volume of 32-block segments, compressed or not.
fn create_opts(
    blocks: u64,
    op: f64,
    compression: Compression,
    log: Option<u64>,
) -> (CreateOptions, u64) {
    let c = CreateOptions {
        logical_bytes: Some(blocks * BS as u64),
        overprovision: op,
        segment_bytes: 128 << 10,
        gc_policy: GcPolicy::Greedy,
        compression,
        intent_log: log,
        ..Default::default()
    };
    let w = if compression == Compression::Lz4 {
        5
    } else {
        4
    };
    let g = Geometry::for_logical_with(blocks, 32, op, log.unwrap_or(0), w);
    (c, g.media_bytes())
}

fn mem(bytes: u64) -> (Arc<MemMedia>, impl Fn() -> Arc<dyn Media>) {
    let media = Arc::new(MemMedia::new(bytes));
    let m = media.clone();
    (media, move || m.clone() as Arc<dyn Media>)
}

/// Write `n` random requests of 1-8 blocks (data, zeros, trims) into
/// `reference`, flushing every 50.
fn workload(vol: &Volume, reference: &mut [Vec<u8>], n: u64, seed: u64) {
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
    let blocks = reference.len() as u64;
    for i in 0..n {
        let len = r.gen_range(1..=8u64).min(blocks);
        let at = r.gen_range(0..=blocks - len);
        match r.gen_range(0..10) {
            0 => {
                vol.trim(at * BS as u64, len * BS as u64, false).unwrap();
                for b in at..at + len {
                    reference[b as usize] = vec![0; BS];
                }
            }
            1 => {
                vol.write(at * BS as u64, &vec![0; len as usize * BS], false)
                    .unwrap();
                for b in at..at + len {
                    reference[b as usize] = vec![0; BS];
                }
            }
            _ => {
                let data = mixed(len as usize, seed * 1_000_000 + i);
                vol.write(at * BS as u64, &data, false).unwrap();
                for (k, b) in (at..at + len).enumerate() {
                    reference[b as usize] = data[k * BS..(k + 1) * BS].to_vec();
                }
            }
        }
        if i % 50 == 49 {
            vol.flush().unwrap();
        }
    }
}

/// `blocks` blocks of mixed compressibility, by block: half random and half
/// zero (fio's buffer_compress_percentage=50), text-like (compresses to a few
/// hundred bytes), or random (incompressible: skipped by the sample).
fn mixed(blocks: usize, seed: u64) -> Vec<u8> {
    let mut out = payload(blocks * BS, seed, Fill::Random);
    for (k, b) in out.chunks_mut(BS).enumerate() {
        match (seed as usize + k) % 3 {
            0 => b[BS / 2..].fill(0),
            1 => {
                let word = format!("block {seed} {k} of mixed data; ");
                for (i, x) in b.iter_mut().enumerate() {
                    *x = word.as_bytes()[i % word.len()];
                }
            }
            _ => {}
        }
    }
    out
}

fn assert_reads(vol: &Volume, reference: &[Vec<u8>], what: &str) {
    let mut buf = vec![0u8; BS];
    for (b, want) in reference.iter().enumerate() {
        vol.read(b as u64 * BS as u64, &mut buf).unwrap();
        assert!(buf == *want, "{what}: block {b} differs");
    }
}

#[test]
fn create_compress_lz4_sets_the_feature_and_five_byte_map_values() {
    let (c, bytes) = create_opts(512, 0.2, Compression::Lz4, None);
    let (_, m) = mem(bytes);
    let vol = Volume::create(m(), &c, &det_open(1 << 40)).unwrap();
    let sb = vol.superblock();
    assert_eq!(sb.version(), 2, "COMPRESSION is a v2 feature");
    assert!(sb.compressed());
    assert_eq!(sb.v2.unwrap().features_incompat, incompat::COMPRESSION);
    assert!(!sb.has_intent_log());
    let st = vol.stats();
    assert_eq!(st.map_bytes, 512 * 5);
    assert_eq!(st.map_bytes_per_block, 5.0);
    let g = vol.geometry();
    assert_eq!(g.map_value_bytes, 5);
    assert!(g.checkpoint_slot_bytes >= 4096 + 512 * 5);
    vol.close().unwrap();

    // an uncompressed volume stays format v1, 4 bytes per block
    let (c, bytes) = create_opts(512, 0.2, Compression::Off, None);
    let (_, m) = mem(bytes);
    let vol = Volume::create(m(), &c, &det_open(1 << 40)).unwrap();
    assert_eq!(vol.superblock().version(), 1);
    assert!(!vol.superblock().compressed());
    assert_eq!(vol.stats().map_bytes_per_block, 4.0);
    assert_eq!(vol.geometry().map_value_bytes, 4);
}

/// Every block reads back after clean closes (the checkpoint's 5-byte map is
/// the whole state), crashes after a flush (checkpoint + replay), GC and
/// checkpoints in between; `check` agrees.
#[test]
fn a_compressed_volume_reopens_with_all_its_data() {
    for log in [None, Some(256 << 10)] {
        let blocks = 256;
        let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, log);
        let (media, m) = mem(bytes);
        let opts = det_open(256 << 10); // a checkpoint every 64 blocks of chunks
        let vol = Volume::create(m(), &c, &opts).unwrap();
        if log.is_some() {
            let f = vol.superblock().v2.unwrap().features_incompat;
            assert_eq!(f & incompat::COMPRESSION, incompat::COMPRESSION);
            assert!(vol.superblock().has_intent_log());
        }
        let mut reference = vec![vec![0u8; BS]; blocks as usize];
        workload(&vol, &mut reference, 1500, 1);
        let s = vol.stats();
        assert!(s.gc_runs > 0 && s.checkpoints > 0, "GC and checkpoints ran");
        let z = s.compress;
        assert!(z.fragments > 0, "{z:?}");
        assert!(z.ratio < 0.75 && z.stored_bytes < z.host_bytes, "{z:?}");
        assert!(z.skipped_share > 0.2 && z.skipped_share < 0.5, "{z:?}");
        assert_reads(&vol, &reference, "before close");
        vol.close().unwrap();
        drop(vol);

        // clean: no replay, the checkpoint's map is the state
        let vol = open(m(), &opts);
        assert!(vol.mount_report().clean, "clean close");
        assert_eq!(vol.stats().map_bytes_per_block, 5.0);
        assert_reads(&vol, &reference, "after a clean close");

        // crash after a flush: checkpoint + replay of later chunks
        workload(&vol, &mut reference, 700, 2);
        // a checkpoint, then 80 blocks in requests of 4: about 180 KiB of
        // chunks after packing, under the 256 KiB interval, so no checkpoint
        // follows and the two or more full chunks (31 blocks) sealed after it
        // are replayed
        vol.checkpoint().unwrap();
        let tail = mixed(80, 77);
        for (k, b) in tail.chunks(4 * BS).enumerate() {
            vol.write((k * 4 * BS) as u64, b, false).unwrap();
        }
        for (k, b) in tail.chunks(BS).enumerate() {
            reference[k] = b.to_vec();
        }
        vol.flush().unwrap();
        drop(vol);
        let vol = open(m(), &opts);
        assert!(!vol.mount_report().clean);
        assert!(
            vol.mount_report().chunks_replayed > 0,
            "{log:?}: chunks replayed"
        );
        assert_reads(&vol, &reference, "after a crash");
        vol.close().unwrap();
        drop(vol);
        let report = sluice::check::check(&*media);
        assert!(report.is_clean(), "{log:?}: check: {report:?}");
    }
}

/// A Packed entry whose packed blocks do not hold its fragments (a Data
/// entry of random blocks relabelled, header CRC made right) is outside
/// input: its chunk is damage, never data. The mount refuses it or leaves
/// it out; the blocks never read as its bytes.
#[test]
fn a_packed_entry_without_packed_tables_is_damage_never_data() {
    use sluice::format::chunk::{self, ChunkHeader, Kind, ENTRY_BYTES, HEADER_BYTES};
    let (c, bytes) = create_opts(256, 0.2, Compression::Lz4, None);
    let (media, m) = mem(bytes);
    let vol = Volume::create(m(), &c, &det_open(1 << 40)).unwrap();
    let data = payload(4 * BS, 7, Fill::Random);
    vol.write(0, &data, false).unwrap();
    vol.flush().unwrap();
    let uuid = vol.superblock().uuid;
    let g = vol.geometry();
    drop(vol); // crash: the chunk is replayed at the next mount
    let img = media.image();
    let seg_bytes = g.segment_bytes() as usize;
    let at = (0..g.segment_count as usize)
        .map(|s| g.data_offset as usize + s * seg_bytes)
        .find(|&o| {
            ChunkHeader::decode(&img[o..o + BS])
                .is_ok_and(|h| h.uuid == uuid && h.entries.iter().any(|e| e.kind == Kind::Data))
        })
        .expect("the flushed chunk");
    let h = ChunkHeader::decode(&img[at..at + BS]).unwrap();
    let i = h.entries.iter().position(|e| e.kind == Kind::Data).unwrap();
    assert_eq!(h.entries.len(), 1, "one entry of 4 blocks: {:?}", h.entries);
    let mut header = img[at..at + BS].to_vec();
    let kind_at = HEADER_BYTES + i * ENTRY_BYTES + 7;
    header[kind_at] = (header[kind_at] & 0x80) | Kind::Packed as u8;
    chunk::seal_crc(&mut header);
    let d = ChunkHeader::decode(&header).unwrap();
    assert_eq!((d.raw_blocks(), d.packed_blocks()), (0, 4));
    media.poke(at as u64, &header);
    if let Ok(vol) = Volume::open(m(), &det_open(1 << 40)) {
        let mut buf = vec![0u8; 4 * BS];
        if vol.read(0, &mut buf).is_ok() {
            assert!(buf.iter().all(|&b| b == 0), "a damaged chunk read as data");
        }
    }
}

/// The packed blocks of the first chunk on the media with Packed entries:
/// (byte offset of the chunk's header, its header, each fragment's
/// logical block and place).
fn packed_chunk(
    img: &[u8],
    g: &Geometry,
    uuid: [u8; 16],
) -> (
    usize,
    sluice::format::chunk::ChunkHeader,
    Vec<(u64, sluice::format::codec::FragmentPlace)>,
) {
    use sluice::format::chunk::{ChunkHeader, Kind};
    use sluice::format::codec;
    let seg_bytes = g.segment_bytes() as usize;
    for s in 0..g.segment_count as usize {
        let mut o = g.data_offset as usize + s * seg_bytes;
        let end = o + seg_bytes;
        while o + BS <= end {
            let Ok(h) = ChunkHeader::decode(&img[o..o + BS]) else {
                break;
            };
            if h.uuid != uuid {
                break;
            }
            let total = h.total_blocks() as usize * BS;
            if h.entries.iter().any(|e| e.kind == Kind::Packed) {
                let frags = codec::fragments(&h, 0, &img[o + BS..o + total]).unwrap();
                let lbas: Vec<u64> = codec::records(&h, 0)
                    .filter(|r| matches!(r.place, codec::Place::Fragment { .. }))
                    .map(|r| r.lba)
                    .collect();
                return (o, h.clone(), lbas.into_iter().zip(frags).collect());
            }
            o += total;
        }
    }
    panic!("no chunk with Packed entries on the media");
}

/// Where to damage the second packed block of the chunk at byte `at` (its
/// header `h`, its fragments `frags`): (byte offset, the byte to write
/// there, the logical blocks whose fragments start in it or span into it).
fn damage_second_packed_block(
    img: &[u8],
    at: usize,
    h: &sluice::format::chunk::ChunkHeader,
    frags: &[(u64, sluice::format::codec::FragmentPlace)],
) -> (u64, u8, Vec<u64>) {
    let bad = 1 + h.raw_blocks() as u64 + 1; // relative to the chunk header
    let off = at as u64 + bad * BS as u64 + 3000;
    let hit: Vec<u64> = frags
        .iter()
        .filter(|(_, f)| f.phys == bad || (f.spans && f.phys + 1 == bad))
        .map(|&(lba, _)| lba)
        .collect();
    assert!(!hit.is_empty() && hit.len() < frags.len());
    (off, img[off as usize] ^ 0x40, hit)
}

/// A flipped byte in one packed block: every fragment that starts in it or
/// spans into it answers EIO, every other block still reads right (the
/// packed block before and after it included), after a remount too.
#[test]
fn a_damaged_packed_block_is_eio_for_its_fragments_only() {
    let blocks = 256u64;
    let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, None);
    let (media, m) = mem(bytes);
    let opts = det_open(1 << 40);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    // 24 blocks, 2 of 3 compressible: fragments over several packed blocks
    let data = mixed(24, 3);
    vol.write(0, &data, false).unwrap();
    vol.close().unwrap();
    let uuid = vol.superblock().uuid;
    let g = vol.geometry();
    drop(vol);
    let img = media.image();
    let (at, h, frags) = packed_chunk(&img, &g, uuid);
    let packed = h.packed_blocks() as u64;
    assert!(packed >= 3, "{packed} packed blocks");
    assert!(frags.len() >= 12, "{} fragments", frags.len());
    let (off, byte, hit) = damage_second_packed_block(&img, at, &h, &frags);
    media.poke(off, &[byte]);
    let vol = open(m(), &opts);
    // scrub (before any read marks the segment) names every fragment of the
    // damaged block, and no other block
    let mut lines = Vec::new();
    for _ in 0..g.segment_count {
        lines.extend(vol.scrub_step().unwrap().damage);
    }
    for l in 0..24u64 {
        let named = lines
            .iter()
            .any(|d| d.contains(&format!("logical block {l} (LZ4 fragment")));
        assert_eq!(named, hit.contains(&l), "scrub on block {l}: {lines:?}");
    }
    assert_eq!(lines.len(), hit.len(), "{lines:?}");
    let mut buf = vec![0u8; BS];
    for lba in 0..24u64 {
        let r = vol.read(lba * BS as u64, &mut buf);
        if hit.contains(&lba) {
            let e = r.expect_err("a fragment of the damaged block read as data");
            assert!(e.to_string().contains("checksum"), "{e}");
        } else {
            r.unwrap();
            assert!(
                buf == data[lba as usize * BS..(lba as usize + 1) * BS],
                "block {lba}"
            );
        }
    }
    assert!(vol.stats().crc_errors >= hit.len() as u64);
    drop(vol);
    // `check` names every fragment of the damaged block
    let report = sluice::check::check(&*media);
    assert!(!report.is_clean());
    let named: Vec<u64> = report
        .found
        .iter()
        .filter(|f| f.kind == "bad_fragment")
        .filter_map(|f| f.lba)
        .collect();
    for l in &hit {
        assert!(
            named.contains(l),
            "check does not name block {l}: {named:?}"
        );
    }
}

/// The read ring (io_uring on file media: every NBD READ goes through it)
/// reads fragments itself: each packed block is submitted as the read
/// arrives, verified and unpacked on the completing side, not handed to the
/// synchronous path (which made a compressed volume's NBD reads one at a
/// time per connection). Every block reads back through the ring, alone and
/// as one 24-block read; after one packed block is damaged, a ring read of a
/// fragment in it is EIO, never data, and the other blocks still read back.
#[test]
fn the_read_ring_reads_fragments_and_fails_only_the_damaged_ones() {
    use sluice::media::FileMedia;
    use std::os::unix::fs::FileExt;
    let blocks = 256u64;
    let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    let opts = det_open(1 << 40);
    // (another test of this binary spawning the CLI may hold a copy of the
    // closed descriptor, and with it the volume's flock, until its exec: wait)
    let file = |p: &std::path::Path| {
        let t0 = std::time::Instant::now();
        loop {
            match FileMedia::open(p, false) {
                Ok(m) => return Arc::new(m) as Arc<dyn Media>,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        && t0.elapsed() < std::time::Duration::from_secs(10) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => panic!("reopening the volume: {e}"),
            }
        }
    };
    let media = Arc::new(FileMedia::create(&path, bytes).unwrap());
    let vol = Volume::create(media as Arc<dyn Media>, &c, &opts).unwrap();
    let data = mixed(24, 3);
    vol.write(0, &data, false).unwrap();
    vol.close().unwrap();
    let uuid = vol.superblock().uuid;
    let g = vol.geometry();
    drop(vol);
    let want = |lba: u64| &data[lba as usize * BS..(lba as usize + 1) * BS];
    // reads every block through a ring (one read each, then all 24 as one);
    // returns each single read's result and the whole read's
    let ring_reads = |vol: &Arc<Volume>| {
        let Some(ring) = vol.read_ring::<u64>() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "io_uring is not available here"
            );
            eprintln!("\n*** SKIP: ring reads of fragments: io_uring is not available here ***\n");
            return None;
        };
        for lba in 0..24u64 {
            assert!(
                ring.start(lba, lba * BS as u64, BS as u32).is_none(),
                "block {lba}: a media read in flight, not answered at once"
            );
        }
        assert!(ring.start(24, 0, 24 * BS as u32).is_none());
        ring.submit();
        let mut out = Vec::new();
        while out.len() < 25 {
            assert!(ring.reap(&mut out));
        }
        ring.stop();
        out.sort_by_key(|(k, _)| *k);
        Some(out)
    };
    let vol = Arc::new(open(file(&path), &opts));
    let Some(out) = ring_reads(&vol) else { return };
    for (lba, r) in &out[..24] {
        let got = r.as_ref().unwrap_or_else(|e| panic!("block {lba}: {e}"));
        assert!(
            &got[..] == want(*lba),
            "block {lba} read through the ring differs"
        );
    }
    let whole = out[24].1.as_ref().expect("the 24-block read");
    assert!(whole[..] == data[..], "the 24-block ring read differs");
    drop(out);
    drop(vol);
    let img = std::fs::read(&path).unwrap();
    let (at, h, frags) = packed_chunk(&img, &g, uuid);
    let (off, byte, hit) = damage_second_packed_block(&img, at, &h, &frags);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_at(&[byte], off).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let vol = Arc::new(open(file(&path), &opts));
    let out = ring_reads(&vol).expect("the ring was there a moment ago");
    for (lba, r) in &out[..24] {
        if hit.contains(lba) {
            let e = r.as_ref().err().unwrap_or_else(|| {
                panic!("block {lba}: a fragment of the damaged block read as data")
            });
            assert!(e.to_string().contains("checksum"), "{e}");
        } else {
            let got = r.as_ref().unwrap_or_else(|e| panic!("block {lba}: {e}"));
            assert!(&got[..] == want(*lba), "block {lba} differs");
        }
    }
    assert!(
        out[24].1.is_err(),
        "a read over a damaged fragment answered data"
    );
}

/// A fragment's raw CRC is checked after LZ4 (block CRCs off: only the
/// fragment's own CRC stands between a changed byte and the caller).
#[test]
fn a_fragment_whose_raw_crc_fails_is_eio_even_without_block_crcs() {
    let blocks = 256u64;
    let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, None);
    let (media, m) = mem(bytes);
    let opts = det_open(1 << 40);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    let data = mixed(24, 5);
    vol.write(0, &data, false).unwrap();
    vol.close().unwrap();
    let uuid = vol.superblock().uuid;
    let g = vol.geometry();
    drop(vol);
    let img = media.image();
    let (at, _, frags) = packed_chunk(&img, &g, uuid);
    // a literal byte of one fragment changed: LZ4 still decodes 4 KiB
    let (lba, f) = frags
        .iter()
        .find(|(_, f)| !f.spans && f.len > 600)
        .copied()
        .expect("a long fragment");
    let blk = at + f.phys as usize * BS;
    let slot_at = blk + 8 + f.slot as usize * 8;
    let start = u16::from_le_bytes([img[slot_at], img[slot_at + 1]]) as usize;
    // a byte near the fragment's end (inside its literals of random bytes)
    let off = (blk + start + f.len as usize - 20) as u64;
    let mut b = [img[off as usize]];
    b[0] ^= 0x01;
    media.poke(off, &b);
    let mut o = opts.clone();
    o.verify_reads = false;
    let vol = open(m(), &o);
    let mut buf = vec![0u8; BS];
    let r = vol.read(lba * BS as u64, &mut buf);
    assert!(r.is_err(), "a fragment whose raw CRC fails read as data");
    for other in (0..24u64).filter(|&x| frags.iter().all(|(l, _)| *l != x)) {
        vol.read(other * BS as u64, &mut buf).unwrap();
        assert!(buf == data[other as usize * BS..(other as usize + 1) * BS]);
    }
    drop(vol);
    // (the block CRC of its packed block fails too: check names it)
    let report = sluice::check::check(&*media);
    assert!(
        report
            .found
            .iter()
            .any(|f| f.kind == "bad_fragment" && f.lba == Some(lba)),
        "{:?}",
        report.damage
    );
}

/// GC moves every live fragment as it is and drops the dead ones: write
/// compressible blocks, trim every other one, clean until the old segments
/// are free; the live half reads back (a dead fragment copied would bring
/// back a trimmed block), the trimmed half reads zero, and GC left no
/// segment damaged (a live fragment dropped leaves its segment with live
/// entries: damaged).
#[test]
fn gc_moves_live_fragments_as_they_are_and_drops_dead_ones() {
    let blocks = 512u64;
    let (c, bytes) = create_opts(blocks, 0.3, Compression::Lz4, None);
    let (_media, m) = mem(bytes);
    let opts = det_open(1 << 40);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    let n = 300u64;
    let data = mixed(n as usize, 11);
    vol.write(0, &data, false).unwrap();
    vol.flush().unwrap();
    let before = vol.stats();
    assert!(before.compress.fragments > 150, "{:?}", before.compress);
    for lba in (0..n).step_by(2) {
        vol.trim(lba * BS as u64, BS as u64, false).unwrap();
    }
    vol.flush().unwrap();
    let free0 = vol.stats().segments_free;
    vol.gc_until_free(free0 + 4).unwrap();
    let s = vol.stats();
    assert!(s.gc_runs > 0, "GC ran");
    assert!(s.gc_blocks_moved > 0, "GC moved live blocks");
    assert_eq!(s.segments_damaged, 0, "a live entry was left behind");
    let check = |vol: &Volume, what: &str| {
        let mut buf = vec![0u8; BS];
        for lba in 0..n {
            vol.read(lba * BS as u64, &mut buf).unwrap();
            if lba % 2 == 0 {
                assert!(buf.iter().all(|&b| b == 0), "{what}: trimmed {lba}");
            } else {
                assert!(
                    buf == data[lba as usize * BS..(lba as usize + 1) * BS],
                    "{what}: {lba}"
                );
            }
        }
    };
    check(&vol, "after GC");
    // moved fragments replay (GC chunks with Packed entries) and checkpoint
    vol.flush().unwrap();
    drop(vol);
    let vol = open(m(), &opts);
    check(&vol, "after a crash");
    vol.close().unwrap();
    drop(vol);
    let vol = open(m(), &opts);
    check(&vol, "after a clean close");
}

/// The threads that ship (background mode: writer threads, the
/// housekeeper, several request threads sealing and packing at once) on a
/// compressed volume kept under GC pressure: no request fails, no segment
/// is left damaged, and every block reads back what its thread last wrote,
/// before and after a clean close.
#[test]
fn threads_that_ship_compress_under_gc_pressure() {
    let blocks = 2048u64;
    let (c, bytes) = create_opts(blocks, 0.15, Compression::Lz4, None);
    let (_media, m) = mem(bytes);
    let opts = sluice::OpenOptions {
        background: true,
        checkpoint_interval_bytes: Some(2 << 20),
        ..Default::default()
    };
    let vol = Arc::new(Volume::create(m(), &c, &opts).unwrap());
    let threads = 3u64;
    let per = blocks / threads;
    let finals: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let vol = vol.clone();
                s.spawn(move || {
                    use rand::{Rng, SeedableRng};
                    let mut r = rand::rngs::SmallRng::seed_from_u64(t + 100);
                    let mut mine = vec![vec![0u8; BS]; per as usize];
                    for i in 0..6000u64 {
                        let b = r.gen_range(0..per);
                        let data = mixed(1, t * 1_000_000 + i);
                        vol.write((t * per + b) * BS as u64, &data, r.gen_ratio(1, 50))
                            .unwrap();
                        mine[b as usize] = data;
                        if i % 500 == 499 {
                            vol.flush().unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let s = vol.stats();
    assert!(s.gc_runs > 0, "GC ran");
    assert_eq!(s.segments_damaged, 0);
    assert!(s.compress.fragments > 0);
    let check = |vol: &Volume, what: &str| {
        let mut buf = vec![0u8; BS];
        for (t, mine) in finals.iter().enumerate() {
            for (b, want) in mine.iter().enumerate() {
                let lba = t as u64 * per + b as u64;
                vol.read(lba * BS as u64, &mut buf).unwrap();
                assert!(buf == *want, "{what}: block {lba}");
            }
        }
    };
    check(&vol, "while mounted");
    vol.close().unwrap();
    drop(vol);
    let vol = Volume::open(m(), &opts).unwrap();
    check(&vol, "after a clean close");
}

/// GC output of victims whose records alternate raw blocks and fragments
/// (mixed data: fragment, fragment, raw, ...) takes about the victims' live
/// blocks, not a chunk header every few blocks: a GC chunk takes no raw block
/// after a fragment, so relocation moves a victim's raw blocks first and its
/// fragments after (moved in record order, a header came every 2-3 blocks,
/// GC wrote more than it freed and a busy small volume answered ENOSPC).
#[test]
fn gc_of_mixed_victims_writes_few_chunk_headers() {
    let blocks = 512u64;
    let (c, bytes) = create_opts(blocks, 0.3, Compression::Lz4, None);
    let (_media, m) = mem(bytes);
    let opts = det_open(1 << 40);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    let n = 300u64;
    let data = mixed(n as usize, 12);
    for (k, b) in data.chunks(8 * BS).enumerate() {
        vol.write((k * 8 * BS) as u64, b, false).unwrap();
    }
    vol.flush().unwrap();
    // every fourth block dead: each victim is three quarters live
    for lba in (0..n).step_by(4) {
        vol.trim(lba * BS as u64, BS as u64, false).unwrap();
    }
    vol.flush().unwrap();
    let before = vol.stats();
    let free0 = before.segments_free;
    vol.gc_until_free(free0 + 3).unwrap();
    let after = vol.stats();
    assert_eq!(after.segments_damaged, 0);
    let moved = after.gc_blocks_moved - before.gc_blocks_moved;
    assert!(moved > 100, "GC moved {moved} live blocks");
    let data_bytes = after.media_gc_data_bytes - before.media_gc_data_bytes;
    let headers = (after.media_chunk_header_bytes - before.media_chunk_header_bytes) / BS as u64;
    let data_blocks = data_bytes / BS as u64;
    // (the GC chunks are most of what is written here: a few barrier and
    // user chunks of trims add a header each)
    assert!(
        headers * 8 <= data_blocks,
        "{headers} chunk headers for {data_blocks} data blocks of GC output ({moved} records moved)"
    );
    let mut buf = vec![0u8; BS];
    for lba in 0..n {
        vol.read(lba * BS as u64, &mut buf).unwrap();
        if lba % 4 == 0 {
            assert!(buf.iter().all(|&b| b == 0), "trimmed {lba}");
        } else {
            assert!(
                buf == data[lba as usize * BS..(lba as usize + 1) * BS],
                "block {lba}"
            );
        }
    }
}

/// `set_compression` (`sluice tune --compress`) switches new writes of a
/// compressed volume off and on again: every mount honours the superblock's
/// setting, no new fragment is placed while it is off, the fragments
/// written before stay readable (the 5-byte map and the COMPRESSION bit
/// stay), and every block reads back through switches, clean closes,
/// crashes and GC. A volume created without compression cannot be switched
/// on (its checkpoint slots hold 4-byte values); switching it off is a no-op.
#[test]
fn compression_switches_off_and_on_for_new_writes() {
    use sluice::volume::set_compression;
    let blocks = 256u64;
    let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, None);
    let (media, m) = mem(bytes);
    let opts = det_open(256 << 10);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    assert!(vol.superblock().compresses_new_writes());
    let mut reference = vec![vec![0u8; BS]; blocks as usize];
    workload(&vol, &mut reference, 600, 21);
    let on = vol.stats().compress;
    assert!(on.fragments > 0, "{on:?}");
    vol.close().unwrap();
    drop(vol);

    // off: the bit stays, the setting is recorded, no fragment is placed
    let sb = set_compression(&*m(), Compression::Off).unwrap();
    assert!(sb.compressed() && !sb.compresses_new_writes());
    assert_eq!(
        sb.v2.unwrap().features_incompat & incompat::COMPRESSION,
        incompat::COMPRESSION
    );
    // (the same setting again writes nothing)
    assert_eq!(
        set_compression(&*m(), Compression::Off).unwrap().generation,
        sb.generation
    );
    for round in 0..2 {
        let vol = open(m(), &opts);
        assert!(!vol.superblock().compresses_new_writes(), "round {round}");
        assert_eq!(vol.stats().map_bytes_per_block, 5.0);
        if round == 0 {
            assert!(
                vol.stats().compress.live_fragments > 0,
                "old fragments live on"
            );
        }
        assert_reads(&vol, &reference, "after switching off");
        workload(&vol, &mut reference, 600, 22 + round);
        let z = vol.stats().compress;
        assert_eq!(
            z.fragments, 0,
            "a fragment placed with compression off: {z:?}"
        );
        assert!(
            vol.stats().gc_runs > 0,
            "GC moved the old fragments meanwhile"
        );
        assert_reads(&vol, &reference, "written with compression off");
        if round == 0 {
            vol.close().unwrap();
        } else {
            vol.flush().unwrap(); // and crash
        }
    }

    // on again
    let sb = set_compression(&*m(), Compression::Lz4).unwrap();
    assert!(sb.compresses_new_writes());
    let vol = open(m(), &opts);
    assert!(vol.superblock().compresses_new_writes());
    assert_reads(&vol, &reference, "after switching on");
    workload(&vol, &mut reference, 600, 30);
    assert!(
        vol.stats().compress.fragments > 0,
        "switched on: fragments again"
    );
    vol.flush().unwrap();
    drop(vol); // crash
    let vol = open(m(), &opts);
    assert_reads(&vol, &reference, "after a crash with compression on again");
    vol.close().unwrap();
    drop(vol);
    let report = sluice::check::check(&*media);
    assert!(report.is_clean(), "check: {report:?}");

    // an uncompressed volume: on is refused by name, off changes nothing
    let (c, bytes) = create_opts(blocks, 0.2, Compression::Off, None);
    let (_, m) = mem(bytes);
    let vol = Volume::create(m(), &c, &opts).unwrap();
    vol.close().unwrap();
    drop(vol);
    let e = set_compression(&*m(), Compression::Lz4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("created without compression"), "{e}");
    let sb = set_compression(&*m(), Compression::Off).unwrap();
    assert_eq!(sb.version(), 1, "an uncompressed volume stays v1");
}

/// `sluice tune VOL --compress off|lz4` on a file volume: `info` shows the
/// setting (text and JSON), a served volume is refused by its lock.
#[test]
fn sluice_tune_switches_compression_and_info_shows_it() {
    let bin = env!("CARGO_BIN_EXE_sluice");
    let dir = std::env::temp_dir().join(format!("sluice-tune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let vol = dir.join("vol.img");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(bin).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let p = vol.to_str().unwrap();
    let (code, out) = run(&["create", p, "--size", "64M", "--compress", "lz4"]);
    assert_eq!(code, Some(0), "{out}");
    let (_, out) = run(&["info", p]);
    assert!(out.contains("lz4 for new writes"), "{out}");
    let (code, out) = run(&["tune", p, "--compress", "off"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("compression off for new writes"), "{out}");
    let (_, out) = run(&["info", p]);
    assert!(out.contains("off for new writes"), "{out}");
    let (_, out) = run(&["info", p, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["compression"], "off");
    let (code, out) = run(&["tune", p, "--compress", "lz4"]);
    assert_eq!(code, Some(0), "{out}");
    let (_, out) = run(&["info", p, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["compression"], "lz4");
    // a volume in use: its lock refuses the tune
    let f = std::fs::OpenOptions::new().read(true).open(&vol).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let (code, out) = run(&["tune", p, "--compress", "off"]);
    assert_ne!(code, Some(0), "tuned a locked volume: {out}");
    drop(f);
    // an uncompressed volume cannot be switched on
    let plain = dir.join("plain.img");
    let q = plain.to_str().unwrap();
    let (code, out) = run(&["create", q, "--size", "64M"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(&["tune", q, "--compress", "lz4"]);
    assert_ne!(code, Some(0));
    assert!(out.contains("created without compression"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compressed volume with its intent log on a log device (`create
/// --compress lz4 --log-device`): FLUSHes are records on the device, a
/// crash replays them (re-homed into staged chunks, packed, placed), every
/// block reads back and fragments were placed. A stripe set refuses
/// `--compress` by name (`sluice create --device ... --compress lz4`).
#[test]
fn compression_works_with_a_log_device_and_a_stripe_set_refuses_it() {
    use sluice::media::SimMedia;
    use sluice::LogDevice;
    let blocks = 256u64;
    let geo = Geometry::for_logical_with(blocks, 32, 0.2, 0, 5);
    let main = Arc::new(MemMedia::new(geo.media_bytes()));
    let log = Arc::new(SimMedia::new(
        sluice::format::logdev::LOGDEV_RING_OFFSET + (256 << 10),
    ));
    let c = CreateOptions {
        logical_bytes: Some(blocks * BS as u64),
        overprovision: 0.2,
        segment_bytes: 128 << 10,
        compression: Compression::Lz4,
        intent_log: Some(256 << 10),
        log_devices: vec![LogDevice(log.clone() as Arc<dyn Media>)],
        ..Default::default()
    };
    let mut opts = det_open(1 << 20);
    opts.log_devices = vec![LogDevice(log.clone() as Arc<dyn Media>)];
    let vol = Volume::create(main.clone() as Arc<dyn Media>, &c, &opts).unwrap();
    let sb = vol.superblock();
    assert!(sb.compressed() && sb.log_device().is_some());
    let mut reference = vec![vec![0u8; BS]; blocks as usize];
    workload(&vol, &mut reference, 800, 41);
    assert!(vol.stats().compress.fragments > 0);
    // a few blocks after the last flush of the workload, flushed: records
    let tail = mixed(6, 43);
    vol.write(0, &tail, false).unwrap();
    vol.flush().unwrap();
    for (k, b) in tail.chunks(BS).enumerate() {
        reference[k] = b.to_vec();
    }
    drop(vol); // crash
    let vol = Volume::open(main.clone() as Arc<dyn Media>, &opts).unwrap();
    assert!(!vol.mount_report().clean);
    assert_reads(&vol, &reference, "after a crash with a log device");
    vol.close().unwrap();
    drop(vol);
    let report = sluice::check::check_logs(&*main, &[&*log as &dyn Media], &mut |_| {});
    assert!(report.is_clean(), "check: {report:?}");

    // the CLI: a stripe set refuses --compress by name
    let bin = env!("CARGO_BIN_EXE_sluice");
    let dir = std::env::temp_dir().join(format!("sluice-zstripe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = vec!["create".to_string()];
    for i in 0..3 {
        args.push("--device".into());
        args.push(dir.join(format!("m{i}.img")).to_str().unwrap().into());
    }
    args.extend(["--size", "64M", "--compress", "lz4"].map(String::from));
    let o = std::process::Command::new(bin)
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a stripe set took --compress");
    assert!(err.contains("--compress with --device"), "{err}");
    for i in 0..3 {
        assert!(
            !dir.join(format!("m{i}.img")).exists()
                || std::fs::metadata(dir.join(format!("m{i}.img")))
                    .unwrap()
                    .len()
                    == 0,
            "a refused create left a member behind"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Direct chunks (docs/compression.md "Direct chunks"): a user stream of
/// random data turns direct after `DIRECT_AFTER` tested blocks (its chunks
/// placed at open, untested, sampled), compressible data stages it again
/// within two chunks, and data with a compressible block in every three
/// never turns direct. Every block reads back after crashes in each mode
/// and `check` is clean. With and without an intent log.
#[test]
fn an_incompressible_stream_writes_direct_chunks_until_data_compresses_again() {
    use sluice::volume::DIRECT_AFTER;
    for log in [None, Some(256 << 10)] {
        let blocks = 1024u64;
        let chunk = 31u64; // data blocks of a full chunk (32-block segments)
        let (c, bytes) = create_opts(blocks, 0.2, Compression::Lz4, log);
        let (media, m) = mem(bytes);
        let opts = det_open(1 << 20);
        let vol = Volume::create(m(), &c, &opts).unwrap();
        let mut reference = vec![vec![0u8; BS]; blocks as usize];
        let write = |vol: &Volume, reference: &mut Vec<Vec<u8>>, at: u64, data: &[u8]| {
            vol.write(at * BS as u64, data, false).unwrap();
            for (k, b) in data.chunks(BS).enumerate() {
                reference[at as usize + k] = b.to_vec();
            }
        };

        // 1. random data, 4-block writes: 3,000 blocks, most of them direct
        let n1 = 3000u64;
        for i in 0..n1 / 4 {
            write(
                &vol,
                &mut reference,
                i * 4 % blocks,
                &payload(4 * BS, i, Fill::Random),
            );
        }
        let z = vol.stats().compress;
        assert_eq!(z.fragments, 0, "{log:?}: {z:?}");
        // (counted at seal: the open chunk's blocks not yet)
        let counted = z.host_bytes / BS as u64;
        assert!(counted <= n1 && counted + chunk > n1, "{z:?}");
        assert!(
            z.direct_blocks + DIRECT_AFTER + 3 * chunk >= n1,
            "{log:?}: the stream turned direct after {DIRECT_AFTER} tested blocks and a chunk or two: {z:?}"
        );
        assert_eq!(z.skipped_blocks, counted, "{z:?}");
        // a crash while direct (mounts start staged)
        vol.flush().unwrap();
        drop(vol);
        let vol = open(m(), &opts);
        assert_reads(&vol, &reference, "after a crash while direct");
        for i in 0..n1 / 4 {
            write(
                &vol,
                &mut reference,
                i * 4 % blocks,
                &payload(4 * BS, n1 + i, Fill::Random),
            );
        }
        let direct = vol.stats().compress.direct_blocks;
        assert!(direct + DIRECT_AFTER + 3 * chunk >= n1, "{direct}");

        // 2. fio-style 50% compressible blocks: compressed again after at
        // most three chunks stored raw (the direct chunk open at the change,
        // whose samples may all be older random blocks; the next, sampled;
        // the one opened at its seal)
        let n2 = 600u64;
        let before = vol.stats().compress;
        for i in 0..n2 / 4 {
            let mut d = payload(4 * BS, 10_000 + i, Fill::Random);
            for b in d.chunks_mut(BS) {
                b[BS / 2..].fill(0);
            }
            write(&vol, &mut reference, i * 4 % blocks, &d);
        }
        let z = vol.stats().compress;
        let frags = z.fragments - before.fragments;
        assert!(
            frags + 3 * chunk >= n2,
            "{log:?}: compressible data stored raw past three chunks: {frags} of {n2} fragments"
        );
        assert!(z.direct_blocks - before.direct_blocks <= 3 * chunk, "{z:?}");

        // 3. mixed data (a random block in three) never turns direct
        let before = vol.stats().compress;
        for i in 0..600u64 {
            write(&vol, &mut reference, i * 4 % blocks, &mixed(4, 20_000 + i));
        }
        let z = vol.stats().compress;
        assert_eq!(
            z.direct_blocks, before.direct_blocks,
            "{log:?}: mixed data turned the stream direct: {z:?}"
        );
        assert!(z.fragments - before.fragments >= 1500, "{z:?}");
        assert_reads(&vol, &reference, "before the crash");
        vol.flush().unwrap();
        drop(vol); // crash
        let vol = open(m(), &opts);
        assert_reads(&vol, &reference, "after a crash");
        vol.close().unwrap();
        drop(vol);
        let report = sluice::check::check(&*media);
        assert!(report.is_clean(), "{log:?}: check: {report:?}");
    }
}

/// Direct chunks under the threads that ship (background housekeeper, 8
/// writer threads, the sealing thread samples): random data turns the
/// stream direct for nearly all its blocks, every block reads back, and the
/// volume mounts again with them.
#[test]
fn threads_writing_random_data_get_direct_chunks() {
    let blocks = 4096u64;
    let (c, bytes) = create_opts(blocks, 0.15, Compression::Lz4, None);
    let (_media, m) = mem(bytes);
    let opts = sluice::OpenOptions {
        background: true,
        ..Default::default()
    };
    let vol = Arc::new(Volume::create(m(), &c, &opts).unwrap());
    let threads = 8u64;
    let per = blocks / threads;
    let finals: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let vol = vol.clone();
                s.spawn(move || {
                    use rand::{Rng, SeedableRng};
                    let mut r = rand::rngs::SmallRng::seed_from_u64(t + 200);
                    let mut mine = vec![vec![0u8; BS]; per as usize];
                    for i in 0..2000u64 {
                        let b = r.gen_range(0..per);
                        let data = payload(BS, t * 1_000_000 + i, Fill::Random);
                        vol.write((t * per + b) * BS as u64, &data, false).unwrap();
                        mine[b as usize] = data;
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    vol.flush().unwrap();
    let z = vol.stats().compress;
    let host = z.host_bytes / BS as u64;
    assert!(host > 15_000, "{z:?}");
    assert_eq!(z.fragments, 0, "{z:?}");
    assert!(
        z.direct_blocks * 10 >= host * 9,
        "random data from {threads} threads: {} of {host} blocks direct",
        z.direct_blocks
    );
    let check = |vol: &Volume, what: &str| {
        let mut buf = vec![0u8; BS];
        for (t, mine) in finals.iter().enumerate() {
            for (b, want) in mine.iter().enumerate() {
                let lba = t as u64 * per + b as u64;
                vol.read(lba * BS as u64, &mut buf).unwrap();
                assert!(buf == *want, "{what}: block {lba}");
            }
        }
    };
    check(&vol, "while mounted");
    drop(vol); // crash after the flush
    let vol = Volume::open(m(), &opts).unwrap();
    check(&vol, "after a crash");
}
