//! Engine behaviour that a storage engineer relies on, one property per test.

mod common;

use common::*;
use sluice::media::{FaultMedia, FileMedia, Media, MemMedia};
use sluice::{Error, OpenOptions, Volume};
use std::sync::Arc;

fn mem_volume(blocks: u64, op: f64) -> (Arc<MemMedia>, Volume) {
    let (create, media_bytes) = small_create(blocks, op);
    let media = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    (media, vol)
}

#[test]
fn trim_frees_space_without_writing_data() {
    let (_, vol) = mem_volume(256, 0.1);
    vol.write(0, &payload(64 * BS, 3, Fill::Random), true)
        .unwrap();
    let before = vol.stats();
    assert_eq!(before.live_data_blocks, 64);
    vol.trim(0, 64 * BS as u64, true).unwrap();
    let after = vol.stats();
    assert_eq!(after.live_data_blocks, 0);
    assert_eq!(
        after.media_user_data_bytes, before.media_user_data_bytes,
        "trim must not write data blocks"
    );
    let mut buf = vec![1u8; 64 * BS];
    vol.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn zero_and_ones_blocks_cost_no_data_bytes_and_read_back() {
    let (_, vol) = mem_volume(256, 0.1);
    vol.write(0, &vec![0u8; 16 * BS], false).unwrap();
    vol.write(16 * BS as u64, &vec![0xffu8; 16 * BS], false)
        .unwrap();
    vol.write_zeroes(32 * BS as u64, 16 * BS as u64, false, false)
        .unwrap();
    vol.flush().unwrap();
    let st = vol.stats();
    assert_eq!(st.media_user_data_bytes, 0);
    assert_eq!(st.live_data_blocks, 0);
    let mut buf = vec![7u8; 48 * BS];
    vol.read(0, &mut buf).unwrap();
    assert!(buf[..16 * BS].iter().all(|&b| b == 0));
    assert!(buf[16 * BS..32 * BS].iter().all(|&b| b == 0xff));
    assert!(buf[32 * BS..].iter().all(|&b| b == 0));
}

#[test]
fn block_status_reports_holes_zeros_and_data() {
    let (_, vol) = mem_volume(256, 0.1);
    vol.write(4 * BS as u64, &payload(2 * BS, 1, Fill::Random), false)
        .unwrap();
    vol.write_zeroes(8 * BS as u64, 2 * BS as u64, false, false)
        .unwrap();
    let ext = vol.block_status(0, 12 * BS as u64).unwrap();
    let b = BS as u64;
    assert_eq!(
        ext,
        vec![
            sluice::Extent {
                length: 4 * b,
                hole: true,
                zero: true
            },
            sluice::Extent {
                length: 2 * b,
                hole: false,
                zero: false
            },
            sluice::Extent {
                length: 2 * b,
                hole: true,
                zero: true
            },
            sluice::Extent {
                length: 2 * b,
                hole: false,
                zero: true
            },
            sluice::Extent {
                length: 2 * b,
                hole: true,
                zero: true
            },
        ]
    );
}

#[test]
fn requests_beyond_the_end_are_rejected_without_side_effects() {
    let (_, vol) = mem_volume(64, 0.1);
    let size = vol.size_bytes();
    assert!(matches!(
        vol.write(size - 10, &[1u8; 20], false),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        vol.read(size, &mut [0u8; 1]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        vol.trim(u64::MAX - 5, 10, false),
        Err(Error::OutOfRange { .. })
    ));
    assert_eq!(vol.stats().host_write_bytes, 0);
}

#[test]
fn clean_close_means_the_next_mount_replays_nothing() {
    let (media, vol) = mem_volume(256, 0.1);
    vol.write(0, &payload(100 * BS, 9, Fill::Random), false)
        .unwrap();
    vol.close().unwrap();
    assert!(matches!(
        vol.write(0, &[0u8; 4096], false),
        Err(Error::Closed)
    ));
    drop(vol);
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    assert!(vol.mount_report().clean);
    assert_eq!(vol.mount_report().chunks_replayed, 0);
    let mut buf = vec![0u8; 100 * BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(buf, payload(100 * BS, 9, Fill::Random));
}

#[test]
fn overwrites_trigger_gc_and_write_amplification_stays_bounded() {
    let (_, vol) = mem_volume(512, 0.2);
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
    for i in 0..6000u64 {
        let b = rand::Rng::gen_range(&mut rng, 0..512u64);
        vol.write(b * BS as u64, &payload(BS, i, Fill::Random), false)
            .unwrap();
    }
    let st = vol.stats();
    assert!(st.gc_runs > 0 && st.gc_blocks_moved > 0, "{st:?}");
    assert!(
        st.write_amplification > 1.0 && st.write_amplification < 6.0,
        "WA {}",
        st.write_amplification
    );
    assert!(st.map_bytes_per_block <= 4.0);
}

#[test]
fn media_write_failure_stops_the_volume_with_errors_not_panics() {
    let (create, media_bytes) = small_create(128, 0.1);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(BS, 1, Fill::Random), true).unwrap();
    assert!(!vol.stats().failed);
    // acknowledged, not flushed: its chunk is the one whose write fails
    vol.write(2 * BS as u64, &payload(BS, 3, Fill::Random), false)
        .unwrap();
    media.fail_write(media.writes_issued());
    let e = vol
        .write(BS as u64, &payload(BS, 2, Fill::Random), true)
        .unwrap_err();
    assert!(matches!(e, Error::Failed(_)), "{e}");
    assert_eq!(e.errno(), libc::EIO, "an injected EIO is not ENOSPC");
    // the volume is stopped, visibly, and every change answers the same error
    let st = vol.stats();
    assert!(st.failed, "stats show the stop");
    assert!(st
        .failure
        .as_deref()
        .unwrap_or("")
        .contains("writing chunk"));
    assert!(vol.failure().is_some());
    for r in [
        vol.write(3 * BS as u64, &payload(BS, 4, Fill::Random), false),
        vol.trim(0, BS as u64, false),
        vol.write_zeroes(0, BS as u64, false, true),
        vol.flush(),
        vol.checkpoint(),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::Failed(_)), "{e}");
        assert_eq!(e.errno(), libc::EIO);
    }
    // reads go on: flushed data from the media (verified), acknowledged but
    // never written data from memory; never anything else
    let mut buf = vec![0u8; BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(buf, payload(BS, 1, Fill::Random), "flushed, from the media");
    vol.read(2 * BS as u64, &mut buf).unwrap();
    assert_eq!(
        buf,
        payload(BS, 3, Fill::Random),
        "acknowledged, from memory"
    );
    let got = vol.read_batch(&[(0, BS as u32), (2 * BS as u64, BS as u32)]);
    assert_eq!(
        &got[0].as_ref().unwrap()[..],
        &payload(BS, 1, Fill::Random)[..]
    );
    assert_eq!(
        &got[1].as_ref().unwrap()[..],
        &payload(BS, 3, Fill::Random)[..]
    );
    assert!(vol.block_status(0, 4 * BS as u64).is_ok());
    drop(vol);
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let mut buf = vec![0u8; BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(
        buf,
        payload(BS, 1, Fill::Random),
        "data flushed before the failure survives"
    );
}

/// Finding 13: a checkpoint slot that cannot be written stops the volume like
/// every other media write (it used to return an error and leave the volume
/// taking writes).
#[test]
fn a_checkpoint_slot_write_error_stops_the_volume() {
    let (create, media_bytes) = small_create(128, 0.1);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(BS, 1, Fill::Random), true).unwrap();
    // nothing left to seal: the checkpoint's first media write is its slot
    media.fail_write(media.writes_issued());
    let e = vol.checkpoint().unwrap_err();
    assert!(matches!(e, Error::Failed(_)), "{e}");
    assert!(vol.stats().failed, "the slot error stopped the volume");
    let e = vol
        .write(BS as u64, &payload(BS, 2, Fill::Random), false)
        .unwrap_err();
    assert!(matches!(e, Error::Failed(_)), "{e}");
    let mut buf = vec![0u8; BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(buf, payload(BS, 1, Fill::Random));
}

/// Finding 12: a volume file truncated under a live volume is noticed at the
/// next checkpoint (fstat) and stops the volume loudly (EIO), instead of going
/// unnoticed until the next mount refuses.
#[test]
fn a_volume_file_truncated_under_the_volume_stops_it_at_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.img");
    let (create, media_bytes) = small_create(256, 0.1);
    let media = Arc::new(FileMedia::create(&path, media_bytes).unwrap());
    let vol = Volume::create(media as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(BS, 1, Fill::Random), true).unwrap();
    vol.checkpoint().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(media_bytes / 2)
        .unwrap();
    let e = vol.checkpoint().unwrap_err();
    assert!(matches!(e, Error::Failed(_)), "{e}");
    assert_eq!(e.errno(), libc::EIO);
    let st = vol.stats();
    assert!(st.failed);
    assert!(st.failure.unwrap().contains("shrank"));
}

#[test]
fn read_only_mount_refuses_writes_with_eperm() {
    let (media, vol) = mem_volume(64, 0.1);
    vol.close().unwrap();
    let ro = Volume::open(
        media as Arc<dyn Media>,
        &OpenOptions {
            read_only: true,
            background: false,
            ..Default::default()
        },
    )
    .unwrap();
    let e = ro.write(0, &[1u8; 4096], false).unwrap_err();
    assert_eq!(e.errno(), libc::EPERM);
}

#[test]
fn concurrent_writers_with_background_housekeeper_keep_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    let (create, media_bytes) = small_create(4096, 0.1);
    let media = Arc::new(FileMedia::create(&path, media_bytes).unwrap());
    let opts = OpenOptions {
        idle_seal_ms: 20,
        checkpoint_interval_bytes: Some(4 << 20),
        ..Default::default()
    };
    let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &create, &opts).unwrap());
    let threads = 8u64;
    let per = 4096 / threads;
    std::thread::scope(|s| {
        for t in 0..threads {
            let vol = vol.clone();
            s.spawn(move || {
                for round in 0..6u64 {
                    for i in 0..per {
                        let b = t * per + (i * 7 + round) % per;
                        vol.write(
                            b * BS as u64,
                            &payload(BS, b * 100 + round, Fill::Random),
                            false,
                        )
                        .unwrap();
                        if i % 50 == 0 {
                            let mut r = vec![0u8; BS];
                            vol.read(b * BS as u64, &mut r).unwrap();
                            assert_eq!(r, payload(BS, b * 100 + round, Fill::Random));
                        }
                    }
                    vol.flush().unwrap();
                }
            });
        }
    });
    let st = vol.stats();
    assert!(st.gc_runs > 0, "{st:?}");
    vol.close().unwrap();
    drop(vol);
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let all = read_all(&vol);
    for b in 0..4096u64 {
        assert_eq!(
            &all[b as usize * BS..(b as usize + 1) * BS],
            &payload(BS, b * 100 + 5, Fill::Random)[..],
            "block {b}"
        );
    }
    drop(vol); // its media holds the volume lock
    assert!(sluice::check::check(&FileMedia::open(&path, true).unwrap()).is_clean());
}

#[test]
fn a_tiny_full_volume_sustains_random_overwrites_at_ten_percent_spare() {
    // 32 MiB with default 4 MiB segments: 9 segments of data. Open segments must not
    // eat the spare space (found by `sluice bench steady --size 32M`: ENOSPC).
    let create = sluice::CreateOptions {
        logical_bytes: Some(32 << 20),
        ..Default::default()
    };
    let g = sluice::geometry::Geometry::for_logical(8192, 1024, 0.10);
    let media = Arc::new(MemMedia::new(g.media_bytes()));
    let vol = Volume::create(media as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(32 << 20, 1, Fill::Random), false)
        .unwrap();
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(3);
    for i in 0..40_000u64 {
        let b = rand::Rng::gen_range(&mut rng, 0..8192u64);
        vol.write(b * BS as u64, &payload(BS, i, Fill::Random), false)
            .unwrap_or_else(|e| panic!("write {i}: {e} {:#?}", vol.stats()));
    }
    let st = vol.stats();
    assert!(st.write_amplification < 8.0, "{st:?}");
}

#[test]
fn batched_reads_match_single_reads_on_file_media() {
    // FileMedia serves a batch through io_uring (where available): every range,
    // aligned or not, in memory or on the media, must read as `read` does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    let (create, media_bytes) = small_create(1024, 0.2);
    let media = Arc::new(FileMedia::create(&path, media_bytes).unwrap());
    let vol = Volume::create(media as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    // The expected content comes from the reference device (tests/common), not
    // from the volume under test.
    let mut r = Reference::new(1024);
    let ops = [
        (
            Op::Write {
                offset: 0,
                len: 512 * BS,
                seed: 7,
                fill: Fill::Random,
            },
            true, // durable: on the media
        ),
        (
            Op::Write {
                offset: 600 * BS as u64,
                len: 8 * BS,
                seed: 8,
                fill: Fill::Random,
            },
            false, // possibly still in the open chunk
        ),
        (
            Op::Zero {
                offset: 700 * BS as u64,
                len: 4 * BS as u64,
                may_trim: true,
            },
            false,
        ),
    ];
    for (op, fua) in &ops {
        issue(&vol, op, *fua).unwrap();
        r.apply(op);
    }
    let size = vol.size_bytes();
    let ranges: Vec<(u64, u32)> = vec![
        (0, BS as u32),
        (5 * BS as u64, 3 * BS as u32),
        (123, 9000),                      // unaligned both ends
        (599 * BS as u64, 3 * BS as u32), // unwritten + buffered
        (698 * BS as u64, 8 * BS as u32), // zeroes inside
        (510 * BS as u64 + 17, 0),        // empty
        (size - 10, 20),                  // beyond the end: its own error
        (64 * BS as u64, 64 * BS as u32),
    ];
    let got = vol.read_batch(&ranges);
    assert_eq!(got.len(), ranges.len());
    for (&(off, len), res) in ranges.iter().zip(&got) {
        if off + len as u64 > size {
            assert!(matches!(res, Err(Error::OutOfRange { .. })), "{off}+{len}");
            continue;
        }
        let want = &r.cur[off as usize..(off + len as u64) as usize];
        assert_eq!(&res.as_ref().unwrap()[..], want, "range {off}+{len}");
    }
}

/// `n` random 4 KiB overwrites over the first `blocks` blocks.
fn random_writes(vol: &Volume, blocks: u64, n: u64, seed: u64) {
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    for i in 0..n {
        let b = rand::Rng::gen_range(&mut rng, 0..blocks);
        vol.write(b * BS as u64, &payload(BS, i, Fill::Random), false)
            .unwrap();
    }
}

/// Lifetime counters (docs/format.md §4.3) survive a clean close exactly, and a
/// crash as what the last checkpoint recorded; the session counters restart.
#[test]
fn lifetime_counters_persist_in_the_checkpoint() {
    let (create, bytes) = small_create(256, 0.2);
    let media = Arc::new(MemMedia::new(bytes));
    let m = || media.clone() as Arc<dyn Media>;
    let vol = Volume::create(m(), &create, &det_open(1 << 40)).unwrap();
    let created = vol.superblock().created_unix_s;
    random_writes(&vol, 256, 3000, 0);
    vol.close().unwrap();
    let s1 = vol.stats();
    assert!(s1.gc_runs > 0, "the workload should make GC run");
    assert_eq!(s1.lifetime.host_write_bytes, 3000 * BS as u64);
    drop(vol);

    // clean close: the next mount starts from exactly the last session's totals
    let vol = open(m(), &det_open(1 << 40));
    let s2 = vol.stats();
    let l = s2.lifetime;
    assert_eq!(l.since_unix_s, created, "counting started at create");
    assert_eq!(l.host_write_bytes, s1.host_write_bytes);
    // this mount marked the volume open (one superblock write, to its head and
    // tail copy): in its session
    let sb_write = 2 * 4096;
    assert_eq!(s2.media_write_bytes, sb_write);
    assert_eq!(l.media_write_bytes(), s1.media_write_bytes + sb_write);
    assert_eq!(l.media_gc_data_bytes, s1.media_gc_data_bytes);
    assert_eq!(l.media_checkpoint_bytes, s1.media_checkpoint_bytes);
    assert_eq!(
        l.media_superblock_bytes,
        s1.media_superblock_bytes + sb_write
    );
    assert_eq!(l.gc_runs, s1.gc_runs);
    assert_eq!(l.gc_blocks_moved, s1.gc_blocks_moved);
    assert_eq!(l.gc_class_blocks_moved, s1.gc_class_blocks_moved);
    assert_eq!(l.mounts, 2);
    assert_eq!(vol.stats().host_write_bytes, 0, "session counters restart");
    let wa = (s1.media_write_bytes + sb_write) as f64 / s1.host_write_bytes as f64;
    assert!((s2.lifetime_write_amplification - wa).abs() < 1e-9);

    // crash after a checkpoint: lifetime = the checkpoint's value (the writes
    // after it are not counted), plus what the recovery mount itself writes
    vol.write(0, &payload(64 * BS, 9, Fill::Random), true)
        .unwrap();
    vol.checkpoint().unwrap();
    let at_ckpt = vol.stats().lifetime;
    vol.write(0, &payload(64 * BS, 10, Fill::Random), true)
        .unwrap();
    drop(vol); // crash
    let vol = open(m(), &det_open(1 << 40));
    let l = vol.stats().lifetime;
    assert_eq!(l.host_write_bytes, at_ckpt.host_write_bytes);
    assert_eq!(
        l.host_write_bytes,
        s1.host_write_bytes + 64 * BS as u64,
        "writes after the last checkpoint are not in the lifetime counters"
    );
    assert!(l.media_user_data_bytes >= at_ckpt.media_user_data_bytes);
    assert_eq!(l.mounts, 3);
}

/// A checkpoint written before the counters existed (bytes 64.. of its header
/// zero, as format v1 always wrote them) still mounts: counting starts now.
#[test]
fn a_checkpoint_without_lifetime_counters_still_mounts() {
    use sluice::format::superblock::Superblock;
    let (create, bytes) = small_create(256, 0.2);
    let media = Arc::new(MemMedia::new(bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    vol.write(0, &payload(32 * BS, 1, Fill::Random), true)
        .unwrap();
    vol.close().unwrap();
    drop(vol);
    let img = media.image();
    let sb = Superblock::decode(&img[..BS])
        .or_else(|_| Superblock::decode(&img[BS..2 * BS]))
        .unwrap();
    let sb = [0, 1]
        .into_iter()
        .filter_map(|i| Superblock::decode(&img[i * BS..(i + 1) * BS]).ok())
        .max_by_key(|s| s.generation)
        .unwrap_or(sb);
    let off = sb.checkpoint_offset[sb.checkpoint_slot as usize] as usize;
    let mut h = img[off..off + BS].to_vec();
    assert_eq!(&h[64..68], b"LIFE");
    h[64..4092].fill(0);
    let crc = crc32c::crc32c(&h[..4092]);
    h[4092..].copy_from_slice(&crc.to_le_bytes());
    media.poke(off as u64, &h);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let vol = open(media.clone() as Arc<dyn Media>, &det_open(1 << 40));
    assert!(vol.mount_report().clean, "the old-style checkpoint is used");
    let l = vol.stats().lifetime;
    assert_eq!((l.host_write_bytes, l.mounts), (0, 1));
    assert!(l.since_unix_s >= before, "counting starts at this mount");
    let mut buf = vec![0u8; 32 * BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(buf, payload(32 * BS, 1, Fill::Random));
}

/// GC moves are counted per GC output class: a generational policy sends data
/// GC moved again to its next class.
#[test]
fn gc_moves_are_counted_per_class() {
    let (mut create, bytes) = small_create(256, 0.2);
    create.gc_policy = sluice::GcPolicy::Generational;
    let media = Arc::new(MemMedia::new(bytes));
    let vol = Volume::create(media as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    random_writes(&vol, 256, 6000, 1);
    vol.flush().unwrap();
    let s = vol.stats();
    assert!(s.gc_runs > 0);
    assert_eq!(s.gc_class_runs.iter().sum::<u64>(), s.gc_runs);
    assert_eq!(
        s.gc_class_blocks_moved.iter().sum::<u64>(),
        s.gc_blocks_moved + s.gc_virtual_moved
    );
    assert!(
        s.gc_class_blocks_moved[1] > 0,
        "data moved twice joins class 1: {:?}",
        s.gc_class_blocks_moved
    );
}

/// One request larger than the engine's batch (64 blocks per hold of the
/// engine lock) and than a chunk: zero and ones blocks at the batch edges are
/// classified, every data block carries the CRC of its own bytes (computed
/// outside the lock), and the whole request reads back, from memory before
/// the flush and verified from the media after a remount.
#[test]
fn a_request_larger_than_a_batch_keeps_every_block_and_its_crc() {
    let (media, vol) = mem_volume(2048, 0.1);
    let n = 600;
    let mut data = payload(n * BS, 21, Fill::Random);
    let special = [0usize, 63, 64, 65, 127, 128, 255, 256, 511, 599];
    for (k, &i) in special.iter().enumerate() {
        let fill = if k % 2 == 0 { 0u8 } else { 0xff };
        data[i * BS..(i + 1) * BS].fill(fill);
    }
    vol.write(BS as u64, &data, false).unwrap();
    let mut buf = vec![0u8; n * BS];
    vol.read(BS as u64, &mut buf).unwrap();
    assert!(buf == data, "read back from memory differs");
    vol.flush().unwrap();
    let st = vol.stats();
    assert_eq!(
        st.media_user_data_bytes,
        ((n - special.len()) * BS) as u64,
        "zero and ones blocks must cost no data bytes"
    );
    vol.close().unwrap();
    drop(vol);
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let mut buf = vec![0u8; n * BS];
    vol.read(BS as u64, &mut buf).unwrap();
    assert!(buf == data, "read back from the media differs");
}

/// The model of a batch: each write applied in turn to a byte image.
fn apply_in_order(image: &mut [u8], writes: &[(u64, Vec<u8>)]) {
    for (off, d) in writes {
        image[*off as usize..*off as usize + d.len()].copy_from_slice(d);
    }
}

#[test]
fn write_many_appends_every_write_in_order_and_a_later_write_of_a_block_wins() {
    let (media, vol) = mem_volume(512, 0.1);
    let b = BS as u64;
    // whole-block runs, an overwrite of the same blocks later in the batch,
    // zeros and ones (virtual records), and sub-block writes between them
    let writes: Vec<(u64, Vec<u8>)> = vec![
        (5 * b, payload(2 * BS, 1, Fill::Random)),
        (6 * b, payload(BS, 2, Fill::Random)),
        (100, payload(300, 3, Fill::Random)),
        (10 * b, vec![0u8; 3 * BS]),
        (13 * b, vec![0xffu8; BS]),
        (5 * b, payload(BS, 4, Fill::Random)),
        (200 * b, payload(64 * BS, 5, Fill::Random)),
        (230 * b + 7, payload(BS, 6, Fill::Random)),
        (6 * b, payload(BS, 7, Fill::Random)),
        (300 * b, payload(70 * BS, 8, Fill::Random)),
        (301 * b, payload(2 * BS, 9, Fill::Random)),
    ];
    let mut model = vec![0u8; vol.size_bytes() as usize];
    apply_in_order(&mut model, &writes);
    let refs: Vec<(u64, &[u8])> = writes.iter().map(|(o, d)| (*o, &d[..])).collect();
    let (done, r) = vol.write_many(&refs);
    r.unwrap();
    assert_eq!(done, writes.len());
    let host: u64 = writes.iter().map(|w| w.1.len() as u64).sum();
    assert_eq!(vol.stats().host_write_bytes, host);
    assert!(read_all(&vol) == model, "read back after the batch");
    // durable after a FLUSH, through a crash (drop without close) and replay
    vol.flush().unwrap();
    drop(vol);
    let vol = Volume::open(media as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    assert!(!vol.mount_report().clean);
    assert!(read_all(&vol) == model, "read back after replay");
}

#[test]
fn write_many_says_how_many_writes_were_appended_before_an_error() {
    let (_, vol) = mem_volume(64, 0.1);
    let size = vol.size_bytes();
    let a = payload(BS, 1, Fill::Random);
    let c = payload(BS, 3, Fill::Random);
    let writes: Vec<(u64, &[u8])> = vec![(0, &a), (BS as u64, &a), (size, &c), (2 * BS as u64, &c)];
    let (done, r) = vol.write_many(&writes);
    assert_eq!(done, 2, "the two writes before the out-of-range one");
    assert!(matches!(r, Err(Error::OutOfRange { .. })));
    let mut buf = vec![0u8; 3 * BS];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(&buf[..BS], &a[..]);
    assert_eq!(&buf[BS..2 * BS], &a[..]);
    assert!(
        buf[2 * BS..].iter().all(|&x| x == 0),
        "nothing after the error"
    );
    assert_eq!(vol.stats().host_write_bytes, 2 * BS as u64);
    // an empty batch appends nothing and succeeds
    let (done, r) = vol.write_many(&[]);
    assert_eq!(done, 0);
    r.unwrap();
}
