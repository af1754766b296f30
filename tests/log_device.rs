//! The separate intent log device (issue 18, docs/format-v2.md §4.3): the
//! ring lives on its own device with its own flush; a FLUSH that only logs
//! flushes the log device and not the main media; a crash keeps what the log
//! device made durable; a device of another volume, or none, is refused by
//! name; a mirrored pair keeps every acknowledged record on each device, so
//! either alone mounts with every flushed write; one of a pair failing while
//! serving costs nothing (counted, degraded) and replay takes the longer chain.

use sluice::geometry::Geometry;
use sluice::media::{Loss, Media, SimMedia};
use sluice::{CreateOptions, LogDevice, OpenOptions, Volume};
use std::sync::Arc;

const BS: usize = 4096;
/// Two superblock copies and a 64 KiB ring.
const LOG_LEN: u64 = 8192 + (64 << 10);

fn main_len() -> u64 {
    Geometry::for_logical_log(256, 32, 0.1, 0).media_bytes()
}

fn create_opts(uuid: u8, logs: &[Arc<SimMedia>]) -> CreateOptions {
    CreateOptions {
        logical_bytes: Some(256 * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        uuid: Some([uuid; 16]),
        intent_log: Some(64 << 10),
        log_devices: devs(logs),
        ..Default::default()
    }
}

fn devs(logs: &[Arc<SimMedia>]) -> Vec<LogDevice> {
    logs.iter()
        .map(|l| LogDevice(l.clone() as Arc<dyn Media>))
        .collect()
}

fn det(logs: &[Arc<SimMedia>]) -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 30),
        log_devices: devs(logs),
        ..Default::default()
    }
}

fn block(v: u8) -> Vec<u8> {
    let mut b = vec![v; BS];
    b[0] = 1; // never all-zero or all-ones
    b
}

fn crashed(m: &SimMedia, loss: Loss) -> Arc<SimMedia> {
    Arc::new(SimMedia::from_image(m.crash_image(loss, 5)))
}

fn new_volume(uuid: u8, n: usize) -> (Arc<SimMedia>, Vec<Arc<SimMedia>>, Volume) {
    let main = Arc::new(SimMedia::new(main_len()));
    let logs: Vec<_> = (0..n).map(|_| Arc::new(SimMedia::new(LOG_LEN))).collect();
    let vol = Volume::create(
        main.clone() as Arc<dyn Media>,
        &create_opts(uuid, &logs),
        &det(&logs),
    )
    .unwrap();
    (main, logs, vol)
}

fn open_err(main: &Arc<SimMedia>, logs: &[Arc<SimMedia>]) -> String {
    match Volume::open(main.clone() as Arc<dyn Media>, &det(logs)) {
        Ok(_) => panic!("the mount must be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_flush_logs_to_the_device_only_and_a_crash_keeps_it() {
    let (main, logs, vol) = new_volume(3, 1);
    let sb = vol.superblock();
    assert_eq!(sb.version(), 2);
    assert!(sb.log_device().is_some() && sb.log_ring().is_none());
    for i in 0..3u64 {
        vol.write(i * BS as u64, &block(10 + i as u8), false)
            .unwrap();
    }
    let before = vol.stats();
    vol.flush().unwrap();
    let s = vol.stats();
    assert_eq!(s.log_records, 1);
    assert_eq!(s.chunks_sealed, 0);
    assert_eq!(s.log_flushes, before.log_flushes + 1);
    assert_eq!(
        s.media_flushes, before.media_flushes,
        "a FLUSH that only logs does not flush the main media"
    );
    drop(vol);
    for loss in [Loss::DropAll, Loss::Subset] {
        let (m2, l2) = (crashed(&main, loss), crashed(&logs[0], Loss::DropAll));
        let v2 = Volume::open(
            m2.clone() as Arc<dyn Media>,
            &det(std::slice::from_ref(&l2)),
        )
        .unwrap();
        assert_eq!(v2.mount_report().rules.log_record_replayed, 1, "{loss:?}");
        let mut buf = vec![0u8; BS];
        for i in 0..3u64 {
            v2.read(i * BS as u64, &mut buf).unwrap();
            assert_eq!(buf, block(10 + i as u8), "block {i} {loss:?}");
        }
        // re-homed and checkpointed: a second crash keeps them, and the
        // next mount replays nothing from the device
        drop(v2);
        let v3 = Volume::open(
            crashed(&m2, Loss::DropAll) as Arc<dyn Media>,
            &det(&[crashed(&l2, Loss::DropAll)]),
        )
        .unwrap();
        assert_eq!(v3.mount_report().rules.log_record_replayed, 0);
        v3.read(2 * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(12));
    }
}

#[test]
fn a_missing_or_foreign_log_device_is_refused_by_name() {
    let (main, logs, vol) = new_volume(3, 1);
    vol.close().unwrap();
    drop(vol);
    let (_, other_logs, other) = new_volume(4, 1);
    other.close().unwrap();
    let e = open_err(&main, &[]);
    assert!(
        e.contains("separate log device") && e.contains("none was given"),
        "{e}"
    );
    let e = open_err(&main, &other_logs);
    assert!(e.contains("another volume"), "{e}");
    assert!(e.contains(&other_logs[0].describe()), "{e}");
    // a device that is no log device at all, alone: refused too
    let blank = Arc::new(SimMedia::new(LOG_LEN));
    let e = open_err(&main, &[blank]);
    assert!(e.contains("no usable log device"), "{e}");
    // the right one mounts
    Volume::open(main.clone() as Arc<dyn Media>, &det(&logs)).unwrap();
    // three devices are refused at create
    let three: Vec<_> = (0..3).map(|_| Arc::new(SimMedia::new(LOG_LEN))).collect();
    let m = Arc::new(SimMedia::new(main_len()));
    assert!(Volume::format(&*m, &create_opts(5, &three)).is_err());
}

#[test]
fn a_mirrored_record_survives_on_either_device_alone() {
    let (main, logs, vol) = new_volume(3, 2);
    vol.write(5 * BS as u64, &block(55), false).unwrap();
    vol.flush().unwrap();
    vol.write(6 * BS as u64, &block(66), true).unwrap();
    let s = vol.stats();
    assert_eq!((s.log_records, s.chunks_sealed), (2, 0));
    assert_eq!(s.log_flushes, 4, "each record flushed on both devices");
    drop(vol);
    let m = crashed(&main, Loss::DropAll);
    let a = crashed(&logs[0], Loss::DropAll);
    let b = crashed(&logs[1], Loss::DropAll);
    for (name, given) in [
        ("a", vec![a.clone()]),
        ("b", vec![b.clone()]),
        ("b a", vec![b.clone(), a.clone()]),
    ] {
        let mm = Arc::new(SimMedia::from_image(m.current_image()));
        let v = Volume::open(mm as Arc<dyn Media>, &det(&given)).unwrap();
        let mut buf = vec![0u8; BS];
        v.read(5 * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(55), "{name}");
        v.read(6 * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(66), "{name}");
        let degraded = v.stats().log_devices_degraded;
        assert_eq!(degraded, (given.len() == 1) as u64, "{name}");
        if given.len() == 1 {
            assert!(
                v.mount_report()
                    .notes
                    .iter()
                    .any(|n| n.contains("degraded")),
                "{:?}",
                v.mount_report().notes
            );
        }
    }
    // neither: refused
    let e = open_err(&m, &[]);
    assert!(e.contains("log device"), "{e}");
}

#[test]
fn one_mirror_failing_while_serving_costs_nothing_and_replay_takes_the_longer_chain() {
    let (main, logs, vol) = new_volume(3, 2);
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    // device b dies: every later write and flush on it fails
    logs[1].cut_at_op(logs[1].ops());
    vol.write(BS as u64, &block(2), false).unwrap();
    vol.flush().unwrap();
    vol.write(2 * BS as u64, &block(3), true).unwrap();
    let s = vol.stats();
    assert!(!s.failed);
    assert!(s.log_device_errors >= 1);
    assert_eq!(s.log_devices_degraded, 1);
    assert_eq!(s.log_records, 3);
    let state = vol.log_devices();
    assert_eq!(state.iter().map(|d| d.1).collect::<Vec<_>>(), [true, false]);
    // marked stale in the superblock before anything relied on a alone
    assert_eq!(vol.superblock().v2.unwrap().log_stale, 0b10);
    drop(vol);
    let m = crashed(&main, Loss::DropAll);
    let a = crashed(&logs[0], Loss::DropAll);
    let b = crashed(&logs[1], Loss::DropAll);
    // b alone would replay a shorter chain (writes 2 and 3 missing): refused
    let e = open_err(&m, std::slice::from_ref(&b));
    assert!(e.contains("missed records"), "{e}");
    let mm = Arc::new(SimMedia::from_image(m.current_image()));
    let v = Volume::open(mm as Arc<dyn Media>, &det(&[b, a])).unwrap();
    let r = v.mount_report();
    assert_eq!(r.rules.log_record_replayed, 3);
    assert!(r.notes.iter().any(|n| n.contains("stale")), "{:?}", r.notes);
    assert_eq!(
        v.superblock().v2.unwrap().log_stale,
        0,
        "both written again from this mount on"
    );
    let mut buf = vec![0u8; BS];
    for i in 0..3u64 {
        v.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(1 + i as u8), "block {i}");
    }
}

/// The log device fails while serving (FaultMedia: every write and flush
/// from then on fails): the volume falls back to sealing on FLUSH, logs and
/// counts it once, keeps serving, and a crash keeps every acknowledged write.
#[test]
fn the_only_log_device_failing_falls_back_to_sealing_and_keeps_serving() {
    use sluice::media::{CrashPolicy, FaultMedia};
    let main = Arc::new(SimMedia::new(main_len()));
    let log = Arc::new(FaultMedia::new(LOG_LEN));
    let logs = vec![LogDevice(log.clone() as Arc<dyn Media>)];
    let opts = OpenOptions {
        log_devices: logs.clone(),
        ..det(&[])
    };
    let c = CreateOptions {
        log_devices: logs.clone(),
        ..create_opts(3, &[])
    };
    let vol = Volume::create(main.clone() as Arc<dyn Media>, &c, &opts).unwrap();
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_records, 1);
    // the device dies: a record written, not yet flushed, is never durable
    vol.write(BS as u64, &block(2), false).unwrap();
    log.cut_power_after_writes(log.writes_issued() + 1);
    vol.flush().unwrap();
    let s = vol.stats();
    assert!(!s.failed, "{:?}", s.failure);
    assert_eq!(s.log_fallbacks, 1);
    assert!(s.log_device_errors >= 1);
    assert!(s.chunks_sealed >= 1, "the FLUSH sealed instead");
    // it keeps serving, FLUSH and FUA seal from now on, counted once
    vol.write(2 * BS as u64, &block(3), true).unwrap();
    vol.write(3 * BS as u64, &block(4), false).unwrap();
    vol.flush().unwrap();
    let s2 = vol.stats();
    assert_eq!((s2.log_fallbacks, s2.log_records), (1, 2));
    assert!(!s2.failed);
    let mut buf = vec![0u8; BS];
    vol.read(2 * BS as u64, &mut buf).unwrap();
    assert_eq!(buf, block(3));
    drop(vol);
    // every acknowledged write survives a crash of both devices
    let m = crashed(&main, Loss::DropAll);
    let l = Arc::new(SimMedia::from_image(log.crash_image(CrashPolicy {
        drop_probability: 1.0,
        tear_last: false,
        seed: 1,
    })));
    let v = Volume::open(m as Arc<dyn Media>, &det(&[l])).unwrap();
    for i in 0..4u64 {
        v.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(1 + i as u8), "block {i}");
    }
}

/// A volume whose log device is gone mounts only with the explicit option,
/// which says what may be lost (LSNs from the main log's end on) and, for a
/// cleanly closed volume, that nothing is; the old device, found again
/// later, is never replayed over newer writes (fresh chain at the start).
#[test]
fn a_missing_log_device_mounts_only_when_asked_and_says_what_is_lost() {
    let (main, logs, vol) = new_volume(3, 1);
    vol.write(0, &block(1), false).unwrap();
    vol.write(BS as u64, &block(2), false).unwrap();
    vol.flush().unwrap(); // one record: blocks 0, 1 only in the log
    drop(vol);
    let m = crashed(&main, Loss::DropAll);
    let old_log = crashed(&logs[0], Loss::DropAll);
    assert!(open_err(&m, &[]).contains("--log-device-missing-ok"));
    let ok = OpenOptions {
        log_device_missing_ok: true,
        ..det(&[])
    };
    let v = Volume::open(m.clone() as Arc<dyn Media>, &ok).unwrap();
    let note = v
        .mount_report()
        .notes
        .iter()
        .find(|n| n.contains("WITHOUT"))
        .cloned()
        .expect("a note on what is lost");
    assert!(note.contains("LSN) of 0 or more"), "{note}");
    // the logged writes are gone (only the log had them); FLUSH now seals
    let mut buf = vec![0u8; BS];
    v.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; BS]);
    v.write(0, &block(9), false).unwrap();
    v.flush().unwrap();
    assert_eq!(v.stats().log_records, 0);
    assert!(v.stats().chunks_sealed >= 1);
    drop(v);
    // the old device comes back: its record must not replay over block 0
    let m2 = crashed(&m, Loss::DropAll);
    let v2 = Volume::open(m2 as Arc<dyn Media>, &det(&[old_log])).unwrap();
    assert_eq!(v2.mount_report().rules.log_record_replayed, 0);
    v2.read(0, &mut buf).unwrap();
    assert_eq!(buf, block(9));
    v2.close().unwrap();
    drop(v2);
    // a cleanly closed volume loses nothing without its log device
    let (main, _logs, vol) = new_volume(4, 1);
    vol.write(0, &block(5), false).unwrap();
    vol.flush().unwrap();
    vol.close().unwrap();
    drop(vol);
    let v = Volume::open(main.clone() as Arc<dyn Media>, &ok).unwrap();
    assert!(
        v.mount_report()
            .notes
            .iter()
            .any(|n| n.contains("nothing is lost")),
        "{:?}",
        v.mount_report().notes
    );
    v.read(0, &mut buf).unwrap();
    assert_eq!(buf, block(5));
}

/// `replace_log_device`: a failed mirror is replaced by a new device while
/// the volume is not mounted (the survivor's records are replayed, the stale
/// mark cleared, both written again); the only device of a volume not closed
/// cleanly is replaced only when the loss is accepted.
#[test]
fn a_failed_mirror_is_replaced_and_an_unclean_single_device_only_when_asked() {
    use sluice::volume::replace_log_device;
    let (main, logs, vol) = new_volume(3, 2);
    vol.write(0, &block(1), false).unwrap();
    vol.flush().unwrap();
    logs[1].cut_at_op(logs[1].ops());
    vol.write(BS as u64, &block(2), true).unwrap();
    drop(vol);
    let m = crashed(&main, Loss::DropAll);
    let a = crashed(&logs[0], Loss::DropAll);
    let c = Arc::new(SimMedia::new(LOG_LEN));
    let notes = replace_log_device(
        m.clone() as Arc<dyn Media>,
        LogDevice(c.clone() as Arc<dyn Media>),
        1,
        devs(std::slice::from_ref(&a)),
        false,
    )
    .unwrap();
    assert!(notes.iter().any(|n| n.contains("stale")), "{notes:?}");
    let v = Volume::open(m.clone() as Arc<dyn Media>, &det(&[a.clone(), c.clone()])).unwrap();
    assert_eq!(v.superblock().v2.unwrap().log_stale, 0);
    let mut buf = vec![0u8; BS];
    for i in 0..2u64 {
        v.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(1 + i as u8), "block {i}");
    }
    // the new mirror alone mounts (nothing was live in the log at the close)
    v.write(5 * BS as u64, &block(5), true).unwrap();
    drop(v);
    let m2 = crashed(&m, Loss::DropAll);
    let v = Volume::open(m2 as Arc<dyn Media>, &det(&[crashed(&c, Loss::DropAll)])).unwrap();
    v.read(5 * BS as u64, &mut buf).unwrap();
    assert_eq!(buf, block(5), "the FUA write is on the new mirror");
    drop(v);

    // a single device, volume not closed cleanly: refused, unless accepted
    let (main, _logs, vol) = new_volume(4, 1);
    vol.write(0, &block(7), true).unwrap();
    drop(vol);
    let m = crashed(&main, Loss::DropAll);
    let d = Arc::new(SimMedia::new(LOG_LEN));
    let e = replace_log_device(
        m.clone() as Arc<dyn Media>,
        LogDevice(d.clone() as Arc<dyn Media>),
        0,
        Vec::new(),
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not closed cleanly"), "{e}");
    let notes = replace_log_device(
        m.clone() as Arc<dyn Media>,
        LogDevice(d.clone() as Arc<dyn Media>),
        0,
        Vec::new(),
        true,
    )
    .unwrap();
    assert!(notes.iter().any(|n| n.contains("WITHOUT")), "{notes:?}");
    Volume::open(m as Arc<dyn Media>, &det(&[d])).unwrap();
}
