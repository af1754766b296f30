//! Compressed volumes (issue 19, docs/compression.md): what a volume created
//! with `Compression::Lz4` keeps. Step 1: the `COMPRESSION` feature bit and
//! 5-byte map values, in RAM and in checkpoints, through clean closes,
//! crashes, GC and checkpoints; uncompressed volumes keep 4-byte values.

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
                let data = payload(len as usize * BS, seed * 1_000_000 + i, Fill::Random);
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
        vol.flush().unwrap();
        drop(vol);
        let vol = open(m(), &opts);
        assert!(!vol.mount_report().clean);
        assert!(vol.mount_report().chunks_replayed > 0, "chunks replayed");
        assert_reads(&vol, &reference, "after a crash");
        vol.close().unwrap();
        drop(vol);
        let report = sluice::check::check(&*media);
        assert!(report.is_clean(), "{log:?}: check: {report:?}");
    }
}

/// A chunk with Packed entries (which no build writes yet) is outside
/// input to this build: replay refuses the mount by name, it never maps a
/// fragment it cannot read nor panics.
#[test]
fn a_packed_entry_is_refused_by_name_until_the_engine_reads_fragments() {
    use sluice::format::chunk::{self, ChunkHeader, Kind, ENTRY_BYTES, HEADER_BYTES};
    let (c, bytes) = create_opts(256, 0.2, Compression::Lz4, None);
    let (media, m) = mem(bytes);
    let vol = Volume::create(m(), &c, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(4 * BS, 7, Fill::Random), false)
        .unwrap();
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
    // the Data entry becomes a Packed one: its 4 blocks are then packed
    // blocks (1 <= 4 <= 4 fragments), the header decodes and verifies
    let mut header = img[at..at + BS].to_vec();
    let kind_at = HEADER_BYTES + i * ENTRY_BYTES + 7;
    header[kind_at] = (header[kind_at] & 0x80) | Kind::Packed as u8;
    chunk::seal_crc(&mut header);
    let d = ChunkHeader::decode(&header).unwrap();
    assert_eq!((d.raw_blocks(), d.packed_blocks()), (0, 4));
    media.poke(at as u64, &header);
    let e = Volume::open(m(), &det_open(1 << 40))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("compressed (Packed) entries"), "{e}");
}
