//! The intent log (issue 18, format v2): a FLUSH after a few small writes
//! writes one record into the ring and leaves the chunk open; a crash after it
//! keeps the flushed writes (the mount replays the record and re-homes its
//! blocks); v1 volumes stay v1; `sluice info`'s superblock shows the ring; a
//! write error into the ring makes FLUSH seal instead, losing nothing.

use sluice::geometry::Geometry;
use sluice::media::{CrashPolicy, FaultMedia, Loss, Media, SimMedia};
use sluice::stats::FlushPath;
use sluice::{CreateOptions, OpenOptions, Volume};
use std::sync::Arc;

const BS: usize = 4096;

fn create(log: Option<u64>) -> (CreateOptions, u64) {
    let c = CreateOptions {
        logical_bytes: Some(256 * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        uuid: Some([3; 16]),
        intent_log: log,
        ..Default::default()
    };
    let g = Geometry::for_logical_log(256, 32, 0.1, log.unwrap_or(0));
    (c, g.media_bytes())
}

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 30),
        ..Default::default()
    }
}

fn block(v: u8) -> Vec<u8> {
    let mut b = vec![v; BS];
    b[0] = 1; // never all-zero or all-ones
    b
}

#[test]
fn flush_logs_a_record_and_a_crash_keeps_the_flushed_writes() {
    for v2_records in [false, true] {
        flush_logs_a_record_and_a_crash_keeps(v2_records);
    }
}

/// `v2_records`: a volume made before `LOG_INDIRECT` (records carry their
/// data); else version 3 records (data written once, in place).
fn flush_logs_a_record_and_a_crash_keeps(v2_records: bool) {
    let (mut c, len) = create(Some(256 << 10));
    c.log_v2_records = v2_records;
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    assert_eq!(vol.superblock().version(), 2);
    for i in 0..3u64 {
        vol.write(i * BS as u64, &block(10 + i as u8), false)
            .unwrap();
    }
    vol.trim(7 * BS as u64, BS as u64, false).unwrap();
    vol.flush().unwrap();
    // a FUA write: one more record
    vol.write(20 * BS as u64, &block(99), true).unwrap();
    // not flushed: may be lost
    vol.write(30 * BS as u64, &block(77), false).unwrap();
    let s = vol.stats();
    assert_eq!(
        s.log_records, 2,
        "two records, no chunk sealed by the flushes"
    );
    assert_eq!(s.chunks_sealed, 0);
    let sb = vol.superblock();
    assert_eq!(sb.log_indirect(), !v2_records);
    if v2_records {
        // a header block and a copy of each data block per record
        assert_eq!(s.media_log_bytes, 4 * BS as u64 + 2 * BS as u64);
    } else {
        // one sector per record; the 4 data blocks once, at their places
        assert_eq!(s.media_log_bytes, 2 * 512);
    }
    assert_eq!(
        s.media_user_data_bytes,
        if v2_records { 0 } else { 4 * BS as u64 }
    );
    drop(vol);
    for loss in [Loss::DropAll, Loss::Subset, Loss::KeepAll] {
        let img = media.crash_image(loss, 7);
        let m2 = Arc::new(SimMedia::from_image(img));
        let v2 = Volume::open(m2.clone() as Arc<dyn Media>, &det()).unwrap();
        let r = v2.mount_report();
        assert_eq!(r.rules.log_record_replayed, 2, "{loss:?}");
        assert!(r.rules.log_end_at_unverified_record >= 1);
        let mut buf = vec![0u8; BS];
        for i in 0..3u64 {
            v2.read(i * BS as u64, &mut buf).unwrap();
            assert_eq!(buf, block(10 + i as u8), "block {i} {loss:?}");
        }
        v2.read(20 * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(99));
        // re-homed and checkpointed by the mount: a second crash keeps them
        // without the log (the new start is past the replayed records)
        drop(v2);
        let m3 = Arc::new(SimMedia::from_image(m2.crash_image(Loss::DropAll, 1)));
        let v3 = Volume::open(m3 as Arc<dyn Media>, &det()).unwrap();
        assert_eq!(v3.mount_report().rules.log_record_replayed, 0);
        v3.read(BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(11));
    }
}

#[test]
fn many_flushes_wrap_the_ring_and_persist_new_starts() {
    let (c, len) = create(Some(64 << 10));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    for i in 0..400u64 {
        vol.write((i % 200) * BS as u64, &block(i as u8), false)
            .unwrap();
        vol.flush().unwrap();
    }
    let s = vol.stats();
    assert!(s.log_records > 300, "{} records", s.log_records);
    drop(vol);
    let img = media.crash_image(Loss::DropAll, 3);
    let v2 = Volume::open(
        Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>,
        &det(),
    )
    .unwrap();
    let mut buf = vec![0u8; BS];
    for i in 200..400u64 {
        v2.read((i % 200) * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i as u8), "block {}", i % 200);
    }
}

#[test]
fn large_flushes_seal_as_before_and_v1_stays_v1() {
    let (mut c, len) = create(Some(256 << 10));
    c.log_v2_records = true;
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media as Arc<dyn Media>, &c, &det()).unwrap();
    let big: Vec<u8> = (0..16 * BS).map(|i| (i % 251) as u8 + 1).collect();
    vol.write(0, &big, false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_records, 0, "16 blocks > 8: sealed");
    assert_eq!(vol.stats().chunks_sealed, 1);
    // version 3: the data goes to its place once either way, so it is logged
    // (the chunk stays open) and the seal later writes the header alone
    c.log_v2_records = false;
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    vol.write(0, &big, false).unwrap();
    vol.flush().unwrap();
    let s = vol.stats();
    assert_eq!((s.log_records, s.chunks_sealed), (1, 0));
    assert_eq!(s.media_user_data_bytes, 16 * BS as u64);
    vol.close().unwrap();
    let s2 = vol.stats();
    assert_eq!(s2.chunks_sealed, 1);
    assert_eq!(
        s2.media_user_data_bytes,
        16 * BS as u64,
        "the seal wrote no data block a second time"
    );
    drop(vol);
    let v = Volume::open(media as Arc<dyn Media>, &det()).unwrap();
    let mut back = vec![0u8; 16 * BS];
    v.read(0, &mut back).unwrap();
    assert!(back == big, "the sealed chunk reads back from its places");
    let (c1, len1) = create(None);
    let m1 = Arc::new(SimMedia::new(len1));
    let v1 = Volume::create(m1 as Arc<dyn Media>, &c1, &det()).unwrap();
    assert_eq!(v1.superblock().version(), 1);
    assert!(v1.superblock().v2.is_none());
    v1.write(0, &block(5), false).unwrap();
    v1.flush().unwrap();
    assert_eq!(v1.stats().log_records, 0);
}

/// A write error into the in-volume ring (a bad region of the media: FaultMedia
/// fails every write there from some FLUSH on) does not stop the volume: the
/// FLUSH whose record failed, and every later one, seal into the main log
/// instead (counted once in `log_fallbacks`), FUA too; after a power cut (all,
/// half or none of the unflushed writes lost, the last one torn) every write
/// acknowledged by a FLUSH or FUA reads back, those logged before the failure
/// (replayed from the ring) and those sealed after it.
/// Both record versions: a version 3 record goes out with its data in one
/// batch (`SegmentStore::write_with`), a version 2 record alone.
#[test]
fn a_ring_write_error_falls_back_to_sealing_and_loses_no_flushed_write() {
    let policies = [(1.0, false), (0.5, true), (0.0, true)];
    for v2_records in [false, true] {
        for fail_at in [0u64, 1, 6, 23] {
            for (pi, &(drop_probability, tear_last)) in policies.iter().enumerate() {
                let (mut c, len) = create(Some(256 << 10));
                c.log_v2_records = v2_records;
                let media = Arc::new(FaultMedia::new(len));
                let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
                let g = vol.geometry();
                assert!(g.log_bytes > 0);
                let ring = g.log_offset..g.log_offset + g.log_bytes;
                let mut cur: Vec<Option<u8>> = vec![None; 256];
                let mut flushed = cur.clone();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ fail_at;
                let mut records_at_failure = None;
                const FLUSHES: u64 = 40;
                for i in 0..FLUSHES {
                    if i == fail_at {
                        records_at_failure = Some(vol.stats().log_records);
                        media.fail_writes_in(Some(ring.clone()));
                    }
                    for k in 0..1 + i % 3 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let b = (x % 200) as usize;
                        let v = (i * 3 + k) as u8 | 2;
                        vol.write(b as u64 * BS as u64, &block(v), false).unwrap();
                        cur[b] = Some(v);
                    }
                    vol.flush()
                        .unwrap_or_else(|e| panic!("FLUSH {i} (ring failing from {fail_at}): {e}"));
                    flushed = cur.clone();
                }
                // a FUA write after the fallback is durable by itself
                vol.write(250 * BS as u64, &block(0xee), true).unwrap();
                flushed[250] = Some(0xee);
                // not flushed: may be lost
                vol.write(251 * BS as u64, &block(0xdd), false).unwrap();
                let st = vol.stats();
                assert!(!st.failed, "the volume stopped: {:?}", st.failure);
                assert_eq!(st.log_fallbacks, 1, "fell back once (fail at {fail_at})");
                assert_eq!(
                    Some(st.log_records),
                    records_at_failure,
                    "no record counts as written once the ring fails"
                );
                let sealed = vol.flush_latency(FlushPath::Seal).count();
                let logged = vol.flush_latency(FlushPath::Log).count();
                assert_eq!(sealed + logged, FLUSHES);
                assert!(
                sealed >= FLUSHES - fail_at && logged <= fail_at,
                "every FLUSH from the failing one on seals: {logged} logged, {sealed} sealed (fail at {fail_at})"
            );
                let img = media.crash_image(CrashPolicy {
                    drop_probability,
                    tear_last,
                    seed: fail_at * 7 + pi as u64,
                });
                drop(vol); // no close: a crash as far as the media goes
                let v2 = Volume::open(
                    Arc::new(FaultMedia::from_image(img)) as Arc<dyn Media>,
                    &det(),
                )
                .unwrap();
                let mut buf = vec![0u8; BS];
                for (b, v) in flushed.iter().enumerate() {
                    if let Some(v) = v {
                        v2.read(b as u64 * BS as u64, &mut buf).unwrap();
                        assert!(
                        buf == block(*v),
                        "block {b} after a crash (ring failing from FLUSH {fail_at}, policy {pi}, v2 {v2_records}): holds {:?}, want {v}",
                        &buf[..4]
                    );
                    }
                }
            }
        }
    }
}

#[test]
fn mount_runs_the_rows_of_its_table_that_apply_in_order() {
    // `recovery::mount`'s table: which rows run is decided by what earlier
    // rows found (a clean close skips the log walk; only a volume with an
    // intent log replays it), and each row that runs is timed in order.
    let names =
        |v: &Volume| -> Vec<&'static str> { v.mount_report().steps.iter().map(|s| s.0).collect() };
    let dirty = [
        "read_superblocks",
        "load_checkpoint",
        "scan_segments",
        "judge",
        "replay",
        "rebuild_segments",
    ];
    let clean = ["read_superblocks", "load_checkpoint", "rebuild_segments"];
    for log in [None, Some(256 << 10)] {
        let (c, len) = create(log);
        let media = Arc::new(SimMedia::new(len));
        let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
        vol.write(0, &block(5), false).unwrap();
        vol.flush().unwrap();
        drop(vol); // crash
        let img = media.crash_image(Loss::KeepAll, 1);
        let m2 = Arc::new(SimMedia::from_image(img));
        let v2 = Volume::open(m2.clone() as Arc<dyn Media>, &det()).unwrap();
        let mut want: Vec<&str> = dirty.to_vec();
        want.extend(log.map(|_| "replay_intent_log"));
        want.push("finish");
        assert_eq!(names(&v2), want, "after a crash, log {log:?}");
        let mut buf = vec![0u8; BS];
        v2.read(0, &mut buf).unwrap();
        assert_eq!(buf, block(5));
        v2.close().unwrap();
        let v3 = Volume::open(m2 as Arc<dyn Media>, &det()).unwrap();
        let mut want: Vec<&str> = clean.to_vec();
        want.extend(log.map(|_| "replay_intent_log"));
        want.push("finish");
        assert_eq!(names(&v3), want, "after a clean close, log {log:?}");
        assert!(v3.mount_report().clean);
    }
}

/// `sluice info --metrics ADDR` of a volume whose intent log failed while
/// serving prints the FALLBACK line (the counters come from the metrics
/// endpoint of the process holding the volume, as `serve --metrics` runs
/// it); a volume that did not fall back prints none.
#[test]
fn info_says_fallback_once_the_ring_failed_while_serving() {
    use sluice::metrics::{self, http, Endpoint, Export};
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let m = metrics::enable();
    for fail in [false, true] {
        let (c, len) = create(Some(256 << 10));
        let media = Arc::new(FaultMedia::new(len));
        let vol = Arc::new(Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap());
        let g = vol.geometry();
        vol.write(0, &block(1), false).unwrap();
        vol.flush().unwrap();
        if fail {
            media.fail_writes_in(Some(g.log_offset..g.log_offset + g.log_bytes));
        }
        vol.write(BS as u64, &block(2), false).unwrap();
        vol.flush().unwrap();
        assert_eq!(vol.stats().log_fallbacks, fail as u64);
        // the same volume's bytes as a file for `info` to read
        let path = dir.path().join(format!("v{}.img", fail as u8));
        std::fs::write(&path, media.current_image()).unwrap();
        let path = std::fs::canonicalize(&path).unwrap();
        let ep = Arc::new(Endpoint::new(
            vec![Export {
                name: "v".into(),
                path: path.clone(),
                vol: vol.clone(),
            }],
            m,
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let addr = http::spawn("127.0.0.1:0", ep, stop.clone()).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "info",
                path.to_str().unwrap(),
                "--metrics",
                &addr.to_string(),
            ])
            .output()
            .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("live          WA"), "the live counters: {out}");
        assert_eq!(
            out.contains("live          FALLBACK: the intent log"),
            fail,
            "ring failed: {fail}\n{out}"
        );
    }
}

/// Version 3 records (`LOG_INDIRECT`, docs/intent-log.md §3): a FLUSH writes
/// its data blocks at their places in the open chunk's reservation and a
/// record naming them, then one media flush. A power cut before that flush
/// completes may keep either write, torn at any 512-byte sector:
/// - the record durable and its data torn: replay refuses the record (the
///   end of the log, `log_end_at_unverified_placed_data`): the FLUSH was
///   never acknowledged, the writes before it are all there;
/// - the data durable and the record torn: nothing to replay past the
///   record before (`log_end_at_unverified_record`);
/// - both: replayed. Then a power cut at every media operation of the
///   mount that re-homes it (the re-homed chunk, checkpoint, new start):
///   the next mount replays the records again from the same places, or not
///   at all once the start moved; the flushed writes read back either way,
///   and no write of the mount lands on a place a replayable record names
///   before the new start is durable (the segment is held).
#[test]
fn v3_record_and_its_data_torn_apart_and_a_cut_during_re_homing() {
    let (c, len) = create(Some(256 << 10));
    let media = Arc::new(SimMedia::new(len));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &c, &det()).unwrap();
    assert!(vol.superblock().log_indirect());
    let g = vol.geometry();
    let ring = g.log_offset..g.log_offset + g.log_bytes;
    for i in 0..3u64 {
        vol.write(i * BS as u64, &block(10 + i as u8), false)
            .unwrap();
    }
    vol.flush().unwrap();
    let base = media.current_image();
    media.record();
    vol.write(5 * BS as u64, &block(55), false).unwrap();
    vol.write(6 * BS as u64, &block(66), false).unwrap();
    vol.flush().unwrap();
    let ev = media.take_events();
    let writes: Vec<(u64, Vec<u8>)> = ev
        .iter()
        .filter_map(|e| match e {
            sluice::media::SimEvent::Write { offset, data } => Some((*offset, data.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 2, "one data write and one record: {ev:?}");
    let (data, rec) = match ring.contains(&writes[0].0) {
        true => (&writes[1], &writes[0]),
        false => (&writes[0], &writes[1]),
    };
    assert!(ring.contains(&rec.0) && !ring.contains(&data.0));
    assert_eq!(
        (data.1.len(), rec.1.len()),
        (2 * BS, 512),
        "two blocks, one sector"
    );
    let apply = |img: &mut Vec<u8>, w: &(u64, Vec<u8>), skip_sector: Option<usize>| {
        for (k, s) in w.1.chunks(512).enumerate() {
            if Some(k) != skip_sector {
                let o = w.0 as usize + k * 512;
                img[o..o + 512].copy_from_slice(s);
            }
        }
    };
    let mount = |img: Vec<u8>| {
        let m = Arc::new(SimMedia::from_image(img));
        let v = Volume::open(m.clone() as Arc<dyn Media>, &det()).unwrap();
        (m, v)
    };
    let read = |v: &Volume, b: u64| {
        let mut buf = vec![0u8; BS];
        v.read(b * BS as u64, &mut buf).unwrap();
        buf
    };
    let first_kept = |v: &Volume| {
        for i in 0..3u64 {
            assert_eq!(read(v, i), block(10 + i as u8), "block {i}");
        }
    };
    // the record durable, one sector of its data not
    for sector in [0usize, 7, 8, 15] {
        let mut img = base.clone();
        apply(&mut img, rec, None);
        apply(&mut img, data, Some(sector));
        let (_, v) = mount(img);
        let r = v.mount_report().rules;
        assert_eq!(
            (r.log_record_replayed, r.log_end_at_unverified_placed_data),
            (1, 1),
            "data sector {sector} torn"
        );
        first_kept(&v);
        assert_eq!(
            read(&v, 5),
            vec![0u8; BS],
            "the unacknowledged FLUSH is not replayed"
        );
        assert_eq!(read(&v, 6), vec![0u8; BS]);
    }
    // the data durable, the record not (or not whole)
    for skip in [None, Some(0)] {
        let mut img = base.clone();
        apply(&mut img, data, None);
        if skip.is_some() {
            apply(&mut img, rec, skip);
        }
        let (_, v) = mount(img);
        let r = v.mount_report().rules;
        assert_eq!(r.log_record_replayed, 1);
        assert_eq!(r.log_end_at_unverified_placed_data, 0);
        assert!(r.log_end_at_unverified_record >= 1);
        first_kept(&v);
        assert_eq!(read(&v, 5), vec![0u8; BS]);
    }
    // both durable: replayed, its segment held while its blocks are re-homed
    let mut both = base.clone();
    apply(&mut both, rec, None);
    apply(&mut both, data, None);
    let m = Arc::new(SimMedia::from_image(both.clone()));
    m.record();
    let v = Volume::open(m.clone() as Arc<dyn Media>, &det()).unwrap();
    let r = v.mount_report().rules;
    assert_eq!(r.log_record_replayed, 2);
    assert_eq!(
        r.log_placed_segment_held, 1,
        "the reservation's segment was empty"
    );
    assert_eq!((read(&v, 5), read(&v, 6)), (block(55), block(66)));
    drop(v);
    let mount_ev = m.take_events();
    // until a superblock with a new log start is durable (written, then a
    // flush), no write of the mount may touch the places the records name
    let old_start = sluice::format::superblock::Superblock::decode(&both[..BS])
        .unwrap()
        .v2
        .unwrap()
        .log_start;
    let named = data.0..data.0 + data.1.len() as u64;
    let (mut start_written, mut start_moved) = (false, false);
    let mut ops = 0;
    for e in &mount_ev {
        match e {
            sluice::media::SimEvent::Write { offset, data } => {
                let end = offset + data.len() as u64;
                if !start_moved {
                    assert!(
                        end <= named.start || *offset >= named.end,
                        "the mount wrote {offset}+{} over a place a record names before the new start was durable",
                        data.len()
                    );
                }
                if *offset < 2 * BS as u64 && data.len() == BS {
                    let sb = sluice::format::superblock::Superblock::decode(data).unwrap();
                    start_written |= sb.v2.unwrap().log_start != old_start;
                }
                ops += 1;
            }
            sluice::media::SimEvent::Flush => {
                start_moved |= start_written;
                ops += 1
            }
            _ => {}
        }
    }
    assert!(start_moved && ops > 3, "{mount_ev:?}");
    // The same ring replayed without the volume's places (as a log device's,
    // an object store's or a stripe set's ring is, which never hold version
    // 3 records): a verified record that places data there refuses, naming
    // it, instead of ending the log quietly before acknowledged writes; a
    // salvage replay ends the log there.
    let sb = sluice::format::superblock::Superblock::decode(&both[..BS]).unwrap();
    let img = SimMedia::from_image(both.clone());
    let ring_at = (g.log_offset, g.log_bytes);
    let replay = |places: Option<(&dyn Media, &Geometry)>, salvage: bool| {
        let mut rules = sluice::recovery::RecoveryRules::default();
        sluice::recovery::replay_intent_log(&img, ring_at, &sb, 0, salvage, places, &mut rules)
    };
    let with_places = replay(Some((&img, &g)), false).unwrap();
    assert_eq!(
        with_places.records, 2,
        "both records replay with their places"
    );
    let err = replay(None, false).unwrap_err().to_string();
    assert!(err.contains("version 3 record"), "{err}");
    let salvaged = replay(None, true).unwrap();
    assert_eq!(
        salvaged.records, 0,
        "salvage ends the log at the first placed record"
    );
    // a power cut at every media operation of that mount (each prefix, its
    // unflushed writes kept or dropped): the flushed writes survive and a
    // later mount replays again or finds them in the main log
    for n in 0..=ops {
        for keep_unflushed in [false, true] {
            let mut img = both.clone();
            let mut pending: Vec<&(u64, Vec<u8>)> = Vec::new();
            let mut owned = Vec::new();
            for e in mount_ev.iter().take(n) {
                match e {
                    sluice::media::SimEvent::Write { offset, data } => {
                        owned.push((*offset, data.clone()))
                    }
                    sluice::media::SimEvent::Flush => {
                        for w in owned.drain(..) {
                            let o = w.0 as usize;
                            img[o..o + w.1.len()].copy_from_slice(&w.1);
                        }
                    }
                    _ => {}
                }
            }
            if keep_unflushed {
                pending.extend(owned.iter());
                for w in pending {
                    let o = w.0 as usize;
                    img[o..o + w.1.len()].copy_from_slice(&w.1);
                }
            }
            let (m2, v2) = mount(img);
            first_kept(&v2);
            assert_eq!(
                (read(&v2, 5), read(&v2, 6)),
                (block(55), block(66)),
                "cut at mount op {n} (unflushed kept: {keep_unflushed})"
            );
            // and once more, with nothing of that mount's own writes lost
            drop(v2);
            let (_, v3) = mount(m2.crash_image(Loss::DropAll, 1));
            first_kept(&v3);
            assert_eq!(read(&v3, 5), block(55), "op {n}: second mount");
        }
    }
}
