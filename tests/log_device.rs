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

// ---------------------------------------------------------------------------
// `log-device add` and `remove` (volume::add_log_device, remove_log_device):
// each transition cut by a power failure before every media operation it
// makes, on the volume and its devices together (one SimMedia, a part each),
// must leave a volume that mounts with its devices and reads back every
// acknowledged FLUSH; a mount with a device set that could miss records may
// refuse, but never serve without them.

const RING: u64 = 64 << 10;

struct Rig {
    sim: Arc<SimMedia>,
    main_len: u64,
}

impl Rig {
    fn new(ring_in_volume: bool) -> Rig {
        let ring = if ring_in_volume { RING } else { 0 };
        let main_len = Geometry::for_logical_log(256, 32, 0.1, ring).media_bytes();
        Rig {
            sim: Arc::new(SimMedia::new(main_len + 2 * LOG_LEN)),
            main_len,
        }
    }
    fn crashed(&self, loss: Loss, seed: u64) -> Rig {
        Rig {
            sim: Arc::new(SimMedia::from_image(self.sim.crash_image(loss, seed))),
            main_len: self.main_len,
        }
    }
    fn main(&self) -> Arc<dyn Media> {
        Arc::new(self.sim.part(0, self.main_len))
    }
    fn log(&self, i: usize) -> LogDevice {
        LogDevice(Arc::new(
            self.sim.part(self.main_len + i as u64 * LOG_LEN, LOG_LEN),
        ))
    }
    fn logs(&self, which: &[usize]) -> Vec<LogDevice> {
        which.iter().map(|&i| self.log(i)).collect()
    }
    fn open(&self, which: &[usize]) -> sluice::Result<Volume> {
        Volume::open(
            self.main(),
            &OpenOptions {
                background: false,
                checkpoint_interval_bytes: Some(1 << 30),
                log_devices: self.logs(which),
                ..Default::default()
            },
        )
    }
}

/// A volume with `logs` log devices (0: its ring in the volume) whose
/// FLUSHed writes are only in its intent log (records, no chunk sealed), after
/// a power cut: the rig and the (block, value) pairs that must read back.
fn unclean(logs: usize) -> (Rig, Vec<(u64, u8)>) {
    let rig = Rig::new(logs == 0);
    let which: Vec<usize> = (0..logs).collect();
    let c = CreateOptions {
        logical_bytes: Some(256 * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        uuid: Some([9; 16]),
        intent_log: Some(RING),
        log_devices: rig.logs(&which),
        ..Default::default()
    };
    let vol = Volume::create(
        rig.main(),
        &c,
        &OpenOptions {
            background: false,
            checkpoint_interval_bytes: Some(1 << 30),
            log_devices: rig.logs(&which),
            ..Default::default()
        },
    )
    .unwrap();
    let mut want = Vec::new();
    for i in 0..6u64 {
        vol.write(i * BS as u64, &block(40 + i as u8), false)
            .unwrap();
        want.push((i, 40 + i as u8));
        if i % 2 == 1 {
            vol.flush().unwrap();
        }
    }
    let s = vol.stats();
    assert!(s.log_records >= 3 && s.chunks_sealed == 0, "{s:?}");
    drop(vol);
    (rig.crashed(Loss::DropAll, 1), want)
}

/// Mount `rig` with `which` devices: Ok(true) when it mounted and every value
/// of `want` reads back, Ok(false) when the mount was refused, Err when it
/// mounted and lost or changed an acknowledged write.
fn mounts_whole(rig: &Rig, which: &[usize], want: &[(u64, u8)]) -> Result<bool, String> {
    let vol = match rig.open(which) {
        Ok(v) => v,
        Err(_) => return Ok(false),
    };
    let mut buf = vec![0u8; BS];
    for &(b, v) in want {
        vol.read(b * BS as u64, &mut buf)
            .map_err(|e| format!("block {b}: {e}"))?;
        if buf != block(v) {
            return Err(format!(
                "block {b} holds {:?}, want {v} (mounted with devices {which:?})",
                &buf[..2]
            ));
        }
    }
    Ok(true)
}

/// Run `step` on a copy of `base` cut by a power failure before each of its
/// media operations in turn (and once uncut); after each cut (every unflushed
/// write lost, or some), a mount with each of `must` device sets serves every
/// write of `want`, and one with each of `may` sets either refuses or does.
/// Returns the uncut run's rig.
fn sweep(
    base: &Rig,
    want: &[(u64, u8)],
    step: impl Fn(&Rig) -> sluice::Result<Vec<String>>,
    must: &[&[usize]],
    may: &[&[usize]],
) -> Rig {
    let whole = base.crashed(Loss::KeepAll, 0);
    let ops0 = whole.sim.ops();
    step(&whole).unwrap_or_else(|e| panic!("the uncut transition failed: {e}"));
    let total = whole.sim.ops() - ops0;
    assert!(total > 4, "{total} media ops");
    for cut in 0..=total {
        let r = base.crashed(Loss::KeepAll, 0);
        r.sim.cut_at_op(r.sim.ops() + cut);
        let _ = step(&r);
        for loss in [Loss::DropAll, Loss::Subset] {
            let img = r.crashed(loss, cut);
            for w in must {
                match mounts_whole(&img.crashed(Loss::KeepAll, 0), w, want) {
                    Ok(true) => {}
                    Ok(false) => panic!(
                        "cut before op {cut} of {total} ({loss:?}): the mount with devices {w:?} was refused: {}",
                        img.open(w).err().unwrap()
                    ),
                    Err(e) => panic!("cut before op {cut} of {total} ({loss:?}): {e}"),
                }
            }
            for w in may {
                if let Err(e) = mounts_whole(&img.crashed(Loss::KeepAll, 0), w, want) {
                    panic!("cut before op {cut} of {total} ({loss:?}): {e}");
                }
            }
        }
    }
    whole
}

#[test]
fn adding_a_log_device_to_a_volume_with_its_ring_inside_survives_a_power_cut_anywhere() {
    let (base, want) = unclean(0);
    let done = sweep(
        &base,
        &want,
        |r| sluice::volume::add_log_device(r.main(), r.log(0), Vec::new(), 7),
        &[&[0]],
        &[],
    );
    let vol = done.open(&[0]).unwrap();
    let sb = vol.superblock();
    assert!(sb.log_device().is_some() && sb.log_ring().is_none());
    // the volume logs to the device now
    vol.write(100 * BS as u64, &block(7), false).unwrap();
    vol.flush().unwrap();
    let s = vol.stats();
    assert_eq!((s.log_records, s.log_flushes), (1, 1), "{s:?}");
    drop(vol);
    assert!(mounts_whole(&done.crashed(Loss::DropAll, 3), &[0], &[(100, 7)]).unwrap());
}

#[test]
fn adding_a_mirror_survives_a_power_cut_anywhere_and_never_replays_the_new_one_alone() {
    let (base, want) = unclean(1);
    let done = sweep(
        &base,
        &want,
        |r| sluice::volume::add_log_device(r.main(), r.log(1), r.logs(&[0]), 7),
        &[&[0, 1], &[0]],
        &[&[1]],
    );
    // a pair now: a record reaches both, and either alone serves it
    let vol = done.open(&[0, 1]).unwrap();
    assert_eq!(vol.superblock().v2.unwrap().log_stale, 0);
    vol.write(100 * BS as u64, &block(8), false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_flushes, 2);
    drop(vol);
    let c = done.crashed(Loss::DropAll, 4);
    for which in [&[0usize][..], &[1]] {
        assert!(
            mounts_whole(&c.crashed(Loss::KeepAll, 0), which, &[(100, 8)]).unwrap(),
            "{which:?}"
        );
    }
}

#[test]
fn removing_one_of_a_pair_survives_a_power_cut_anywhere() {
    let (base, want) = unclean(2);
    let done = sweep(
        &base,
        &want,
        |r| sluice::volume::remove_log_device(r.main(), Some(r.log(1)), r.logs(&[0]), false),
        &[&[0, 1], &[0]],
        &[&[1]],
    );
    // one device now; the removed one is no longer taken for the volume's
    let vol = done.open(&[0]).unwrap();
    vol.write(100 * BS as u64, &block(9), false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_flushes, 1);
    assert_eq!(vol.stats().log_devices_degraded, 0);
    drop(vol);
    let c = done.crashed(Loss::DropAll, 5);
    assert!(c.open(&[1]).is_err(), "the removed device alone is refused");
    assert!(mounts_whole(&c, &[0], &[(100, 9)]).unwrap());
}

#[test]
fn removing_the_last_log_device_homes_its_records_first_and_then_flush_seals() {
    let (base, want) = unclean(1);
    let done = sweep(
        &base,
        &want,
        |r| sluice::volume::remove_log_device(r.main(), Some(r.log(0)), Vec::new(), false),
        &[&[0]],
        &[&[]],
    );
    let vol = done.open(&[]).unwrap();
    let sb = vol.superblock();
    assert!(!sb.has_intent_log(), "no intent log left");
    assert_eq!(sb.version(), 2, "the chunks keep their LSNs");
    vol.write(100 * BS as u64, &block(10), false).unwrap();
    vol.flush().unwrap();
    let s = vol.stats();
    assert_eq!(
        (s.log_records, s.chunks_sealed),
        (0, 1),
        "FLUSH seals: {s:?}"
    );
    drop(vol);
    let c = done.crashed(Loss::DropAll, 6);
    let mut all = want.clone();
    all.push((100, 10));
    assert!(mounts_whole(&c, &[], &all).unwrap());
    // and a log device can be added back
    sluice::volume::add_log_device(c.main(), c.log(1), Vec::new(), 8).unwrap();
    let vol = c.open(&[1]).unwrap();
    vol.write(101 * BS as u64, &block(11), false).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats().log_records, 1);
}

#[test]
fn add_and_remove_refuse_what_they_cannot_do_safely() {
    let e = |r: sluice::Result<Vec<String>>| r.expect_err("refused").to_string();
    // a v1 volume has no LSNs to build a log on
    let rig = Rig::new(false);
    let c = CreateOptions {
        logical_bytes: Some(256 * BS as u64),
        overprovision: 0.1,
        segment_bytes: 32 * BS as u64,
        ..Default::default()
    };
    Volume::create(rig.main(), &c, &OpenOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let m = e(sluice::volume::add_log_device(
        rig.main(),
        rig.log(0),
        Vec::new(),
        1,
    ));
    assert!(m.contains("format v1"), "{m}");
    let m = e(sluice::volume::remove_log_device(
        rig.main(),
        Some(rig.log(0)),
        Vec::new(),
        false,
    ));
    assert!(m.contains("no intent log on a log device"), "{m}");
    // a pair takes no third; a mirror needs the first device given; a
    // device is not added twice
    let (pair, _) = unclean(2);
    let m = e(sluice::volume::add_log_device(
        pair.main(),
        pair.log(1),
        pair.logs(&[0]),
        1,
    ));
    assert!(m.contains("mirrored pair"), "{m}");
    let (one, want) = unclean(1);
    let m = e(sluice::volume::add_log_device(
        one.main(),
        one.log(1),
        Vec::new(),
        1,
    ));
    assert!(m.contains("give it"), "{m}");
    let m = e(sluice::volume::add_log_device(
        one.main(),
        one.log(0),
        one.logs(&[0]),
        1,
    ));
    assert!(m.contains("already"), "{m}");
    // the last device of a volume not closed cleanly, lost: only when asked
    let m = e(sluice::volume::remove_log_device(
        one.main(),
        None,
        Vec::new(),
        false,
    ));
    assert!(m.contains("--log-device-missing-ok"), "{m}");
    // nothing changed by the refusals: the records are all there
    assert!(mounts_whole(&one, &[0], &want).unwrap());
}

/// The CLI: `log-device add` refuses a file holding data unless --force,
/// makes a mirror with --log-device, and `remove` takes them away again;
/// `info` says where the log is after each step.
#[test]
fn the_log_device_add_and_remove_commands() {
    let bin = env!("CARGO_BIN_EXE_sluice");
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(bin)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let ok = |args: &[&str]| {
        let (s, out) = run(args);
        assert!(s, "{args:?}: {out}");
        out
    };
    ok(&["create", "v.img", "--size", "64M", "--intent-log"]);
    std::fs::write(
        dir.path().join("junk.log"),
        (0..(1u32 << 20))
            .map(|i| (i * 7 + 3) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let (s, out) = run(&["log-device", "add", "v.img", "junk.log"]);
    assert!(!s && out.contains("--force"), "{out}");
    ok(&["log-device", "add", "v.img", "junk.log", "--force"]);
    let info = ok(&["info", "v.img", "--log-device", "junk.log"]);
    assert!(info.contains("ring on log device"), "{info}");
    ok(&[
        "log-device",
        "add",
        "v.img",
        "b.log",
        "--log-device",
        "junk.log",
    ]);
    let info = ok(&[
        "info",
        "v.img",
        "--log-device",
        "junk.log",
        "--log-device",
        "b.log",
    ]);
    assert!(
        info.contains("junk.log") && info.contains("b.log") && !info.contains("DEGRADED"),
        "{info}"
    );
    ok(&[
        "log-device",
        "remove",
        "v.img",
        "b.log",
        "--log-device",
        "junk.log",
    ]);
    ok(&["log-device", "remove", "v.img", "junk.log"]);
    let info = ok(&["info", "v.img"]);
    assert!(info.contains("intent log    none"), "{info}");
    // a removed device has its log superblock wiped but still holds old
    // records: data, so --force again
    let (s, out) = run(&["log-device", "add", "v.img", "b.log"]);
    assert!(!s && out.contains("--force"), "{out}");
    ok(&["log-device", "add", "v.img", "b.log", "--force"]);
    ok(&["check", "v.img", "--log-device", "b.log"]);
    // an in-volume ring: removed with no device named
    ok(&["create", "w.img", "--size", "64M", "--intent-log"]);
    let info = ok(&["info", "w.img"]);
    assert!(info.contains("ring at byte"), "{info}");
    let (s, out) = run(&["log-device", "remove", "w.img", "--log-device", "b.log"]);
    assert!(
        !s,
        "a device to keep makes no sense without one to remove: {out}"
    );
    let out = ok(&["log-device", "remove", "w.img"]);
    assert!(out.contains("removed     the intent log ring"), "{out}");
    let info = ok(&["info", "w.img"]);
    assert!(info.contains("intent log    none"), "{info}");
    let (s, out) = run(&["log-device", "remove", "w.img"]);
    assert!(!s && out.contains("no intent log"), "{out}");
    ok(&["check", "w.img"]);
}

/// `sluice log-device remove VOL` with no device: the in-volume ring of a
/// volume not closed cleanly (its FLUSHed writes only in ring records) is
/// replayed and re-homed into the main log before the superblocks drop it;
/// a power cut before any media operation of the removal loses nothing, and
/// afterwards FLUSH seals (no record written).
#[test]
fn removing_the_in_volume_ring_survives_a_power_cut_anywhere() {
    let (base, want) = unclean(0);
    let done = sweep(
        &base,
        &want,
        |r| sluice::volume::remove_log_device(r.main(), None, Vec::new(), false),
        &[&[]],
        &[],
    );
    let vol = done.open(&[]).unwrap();
    let sb = vol.superblock();
    assert!(!sb.has_intent_log() && sb.log_ring().is_none(), "{sb:?}");
    assert_eq!(sb.version(), 2, "the chunks keep their LSNs");
    vol.write(100 * BS as u64, &block(7), false).unwrap();
    vol.flush().unwrap();
    let s = vol.stats();
    assert_eq!(s.log_records, 0, "no ring any more: {s:?}");
    assert!(s.chunks_sealed >= 1, "the FLUSH sealed: {s:?}");
    drop(vol);
    assert!(mounts_whole(&done.crashed(Loss::DropAll, 3), &[], &[(100, 7)]).unwrap());
    // a second removal has nothing to remove, and says so
    let e = sluice::volume::remove_log_device(done.main(), None, Vec::new(), false).unwrap_err();
    assert!(e.to_string().contains("no intent log"), "{e}");
}
