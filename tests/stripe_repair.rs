//! Stripe sets repairing themselves (issue 20 items 4 and 5): a block whose
//! bytes on one member were flipped is healed from its row by a read and by
//! scrub (the right bytes returned, the member's bytes rewritten on disk,
//! counted); two wrong members on RAID-5 answer EIO and rewrite nothing;
//! RAID-6 places a wrong data member together with a wrong P. A member
//! replaced and rebuilt (free segments only marked) carries the set with
//! another member gone; a power cut during the rebuild resumes and loses
//! nothing.

use sluice::format::stripe::StripeIdentity;
use sluice::media::{FileMedia, Loss, Media, SimMedia};
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
    assert!(peek(&paths[ma], oa) != want[10]);
    let vol = open(&paths);
    let mut buf = vec![0u8; BS];
    vol.read(10 * BS as u64, &mut buf).unwrap();
    assert!(buf == want[10], "the healed read returns the right bytes");
    assert_eq!(vol.stats().stripe_healed, 1);
    assert!(peek(&paths[ma], oa) == want[10], "member bytes rewritten");
    // scrub finds the other and heals it
    let mut lines = Vec::new();
    for _ in 0..vol.geometry().segment_count {
        lines.extend(vol.scrub_step().unwrap().damage);
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("healed"), "{lines:?}");
    assert!(
        peek(&paths[mb], ob) == want[70],
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
    assert!(peek(&paths[m], o) == bad_d, "nothing rewritten");
    assert!(peek(&paths[pm], po) == bad_p, "nothing rewritten");
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
    assert!(peek(&paths[m], o) == want[30]);
    assert!(peek(&paths[pm], po) == good_p, "P rewritten too");
    vol.close().unwrap();
}

/// Random writes (overwrites, so GC runs and some segments end up free and
/// others live), flushed; what each block holds.
fn scribble(vol: &Volume, n: usize, seed: u64) -> std::collections::HashMap<u64, Vec<u8>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let blocks = vol.size_bytes() / BS as u64;
    let mut want = std::collections::HashMap::new();
    for i in 0..n {
        let b = rng.gen_range(0..blocks / 3);
        let mut buf = vec![0u8; BS * rng.gen_range(1..4usize)];
        rng.fill(&mut buf[..]);
        vol.write(b * BS as u64, &buf, false).unwrap();
        for (k, c) in buf.chunks(BS).enumerate() {
            want.insert(b + k as u64, c.to_vec());
        }
        if i % 50 == 49 {
            vol.flush().unwrap();
        }
    }
    vol.flush().unwrap();
    want
}

fn verify(vol: &Volume, want: &std::collections::HashMap<u64, Vec<u8>>, what: &str) {
    let mut buf = vec![0u8; BS];
    for (b, v) in want {
        vol.read(b * BS as u64, &mut buf)
            .unwrap_or_else(|e| panic!("{what}: block {b}: {e}"));
        assert!(buf == *v, "{what}: block {b} reads back wrong");
    }
}

#[test]
fn a_replaced_member_is_rebuilt_in_proportion_to_live_data_and_carries_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 1);
    let want = {
        let vol = open(&paths);
        let w = scribble(&vol, 1500, 7);
        vol.close().unwrap();
        w
    };
    let lost = 2;
    let new = dir.path().join("new.img");
    FileMedia::create(&new, MEMBER).unwrap();
    let mut now = paths.clone();
    now[lost] = new.clone();
    let rest: Vec<PathBuf> = (0..5)
        .filter(|&i| i != lost)
        .map(|i| paths[i].clone())
        .collect();
    let vol = Volume::replace_member(
        devices(&rest),
        lost as u32,
        devices(std::slice::from_ref(&new)).pop().unwrap(),
        &det(),
    )
    .unwrap();
    let st = vol.stripe_set().unwrap().status();
    assert!(
        st.degraded() && st.describe().contains("rebuilding"),
        "{}",
        st.describe()
    );
    // reads while rebuilding are served degraded
    verify(&vol, &want, "before the rebuild");
    let mut steps = 0;
    let p = vol.rebuild_member(None, &mut |_| steps += 1).unwrap();
    let total = vol.geometry().segment_count as u64;
    assert_eq!(p.copied + p.skipped, total);
    assert!(p.copied > 0 && p.skipped > 0, "{p:?}");
    assert!(p.copied * 2 < total, "only live segments are copied: {p:?}");
    let st = vol.stripe_set().unwrap().status();
    assert!(!st.degraded(), "{}", st.describe());
    verify(&vol, &want, "rebuilt");
    vol.close().unwrap();
    drop(vol);
    // the old member is stale now
    let mut with_old = now.clone();
    with_old.push(paths[lost].clone());
    assert!(Volume::open_striped(devices(&with_old), &det()).is_err());
    // a different member gone: its pieces come from the rebuilt one
    for gone in [0usize, 4] {
        let some: Vec<PathBuf> = (0..5)
            .filter(|&i| i != gone)
            .map(|i| now[i].clone())
            .collect();
        let vol = Volume::open_striped(
            devices(&some),
            &OpenOptions {
                read_only: true,
                ..det()
            },
        )
        .unwrap();
        verify(&vol, &want, &format!("rebuilt, then member {gone} gone"));
    }
    let vol = open(&now);
    assert!(!vol.stripe_set().unwrap().status().degraded());
    verify(&vol, &want, "healthy with the replacement");
    assert_eq!(vol.stats().stripe_healed, 0, "no rebuilt piece was wrong");
    let lines = vol.scrub_parity_all();
    assert!(lines.is_empty(), "every row's parity agrees: {lines:?}");
    vol.close().unwrap();
}

/// RAID-6 (3+2) with one member missing and another replaced: the rebuild
/// reads the three members left in batches (several segments per read) and
/// rebuilds each row's piece with two of its pieces lost (the other lost one
/// in a spare buffer); then, the missing member still gone and one more
/// taken away, every block reads back through the rebuilt member.
#[test]
fn raid6_rebuilds_a_member_while_another_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 2);
    let want = {
        let vol = open(&paths);
        let w = scribble(&vol, 1500, 11);
        vol.close().unwrap();
        w
    };
    let (lost, missing) = (1usize, 3usize);
    let new = dir.path().join("new.img");
    FileMedia::create(&new, MEMBER).unwrap();
    let rest: Vec<PathBuf> = (0..5)
        .filter(|&i| i != lost && i != missing)
        .map(|i| paths[i].clone())
        .collect();
    let vol = Volume::replace_member(
        devices(&rest),
        lost as u32,
        devices(std::slice::from_ref(&new)).pop().unwrap(),
        &det(),
    )
    .unwrap();
    assert!(
        vol.stripe_set().unwrap().rebuild_batch_segments() > 1,
        "batches of several segments"
    );
    let p = vol.rebuild_member(None, &mut |_| {}).unwrap();
    assert!(p.copied > 1, "{p:?}");
    verify(&vol, &want, "rebuilt, one member still missing");
    vol.close().unwrap();
    drop(vol);
    let mut now = paths.clone();
    now[lost] = new.clone();
    // (with member 2 gone as well a block of the last segment's partial
    // row failed its CRC until the rebuild wrote the row's scratch copy on
    // the new member: docs/stripes.md §0, "Windows that remain" (4))
    for gone in [0usize, 2, 4] {
        let some: Vec<PathBuf> = (0..5)
            .filter(|&i| i != gone && i != missing)
            .map(|i| now[i].clone())
            .collect();
        let vol = Volume::open_striped(
            devices(&some),
            &OpenOptions {
                read_only: true,
                ..det()
            },
        )
        .unwrap();
        verify(
            &vol,
            &want,
            &format!("rebuilt, member {missing} missing and {gone} gone"),
        );
    }
}

fn sim_devs(ms: &[Arc<SimMedia>], skip: Option<usize>) -> Vec<(String, Arc<dyn Media>)> {
    ms.iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(i, m)| (format!("sim{i}"), m.clone() as Arc<dyn Media>))
        .collect()
}

fn copies(ms: &[Arc<SimMedia>]) -> Vec<Arc<SimMedia>> {
    ms.iter()
        .map(|m| Arc::new(SimMedia::from_image(m.current_image())))
        .collect()
}

/// A power cut at many points of a rebuild (the new member's writes cut,
/// what it cached kept in part, all, or none), then the rebuild run again:
/// it resumes from its record, and every block reads back with the
/// replacement and then with a different member gone; no rebuilt piece is
/// wrong (nothing to heal).
#[test]
fn a_power_cut_during_a_rebuild_resumes_and_loses_nothing() {
    let lost = 1;
    let (mut cases, mut resumed) = (0, 0);
    // every op of the first segments, twice with different losses (a cut
    // at a record's flush must keep it while dropping a piece), a few later
    let cuts: Vec<(u64, Loss)> = (1..=40u64)
        .flat_map(|c| [(c, Loss::Subset), (c, Loss::Subset)])
        .chain([
            (9, Loss::DropAll),
            (23, Loss::KeepAll),
            (90, Loss::Subset),
            (130, Loss::DropAll),
        ])
        .collect();
    for (k, (cut, loss)) in cuts.into_iter().enumerate() {
        let ms: Vec<Arc<SimMedia>> = (0..5).map(|_| Arc::new(SimMedia::new(8 << 20))).collect();
        let c = CreateOptions {
            segment_bytes: 256 << 10,
            uuid: Some([k as u8 + 1; 16]),
            ..Default::default()
        };
        Volume::format_striped(sim_devs(&ms, None), 1, UNIT, &c).unwrap();
        let want = {
            let vol = Volume::open_striped(sim_devs(&ms, None), &det()).unwrap();
            let w = scribble(&vol, 300, k as u64);
            vol.close().unwrap();
            w
        };
        let mut ms = copies(&ms);
        ms[lost] = Arc::new(SimMedia::new(8 << 20));
        let vol = Volume::replace_member(
            sim_devs(&ms, Some(lost)),
            lost as u32,
            ("new".into(), ms[lost].clone() as Arc<dyn Media>),
            &det(),
        )
        .unwrap();
        let new = &ms[lost];
        new.cut_at_op(new.ops() + cut);
        let r = vol.rebuild_member(None, &mut |_| {});
        for m in &ms {
            m.freeze();
        }
        drop(vol);
        if r.is_ok() {
            continue;
        }
        cases += 1;
        let after: Vec<Arc<SimMedia>> = ms
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Arc::new(SimMedia::from_image(
                    m.crash_image(loss, k as u64 * 7 + i as u64),
                ))
            })
            .collect();
        let what = format!("cut {cut} {loss:?}");
        let vol = match Volume::replace_member(
            sim_devs(&after, Some(lost)),
            lost as u32,
            ("new".into(), after[lost].clone() as Arc<dyn Media>),
            &det(),
        ) {
            Ok(vol) => {
                resumed += 1;
                // the part not rebuilt is served degraded, never from the
                // new member
                verify(&vol, &want, &format!("{what}: part rebuilt"));
                vol.rebuild_member(None, &mut |_| {}).unwrap();
                vol
            }
            // cut while the record was being voided, after the last
            // segment's mark was durable: the member is whole
            Err(e) if e.to_string().contains("whole") => {
                Volume::open_striped(sim_devs(&after, None), &det()).unwrap()
            }
            Err(e) => panic!("{what}: resume: {e}"),
        };
        vol.close().unwrap();
        drop(vol);
        for gone in [0usize, 2, 3] {
            let vol = Volume::open_striped(
                sim_devs(&copies(&after), Some(gone)),
                &OpenOptions {
                    read_only: true,
                    ..det()
                },
            )
            .unwrap();
            verify(
                &vol,
                &want,
                &format!("{what}: resumed, then member {gone} gone"),
            );
        }
        let vol = Volume::open_striped(sim_devs(&after, None), &det()).unwrap();
        verify(&vol, &want, &format!("{what}: resumed, healthy"));
        assert_eq!(
            vol.stats().stripe_healed,
            0,
            "{what}: a rebuilt piece was wrong"
        );
        let lines = vol.scrub_parity_all();
        assert!(lines.is_empty(), "{what}: {lines:?}");
    }
    // (a row completed since the last FLUSH loses its scratch tags at that
    // flush, and the mount that attaches the new member resyncs the rows
    // partial at the last close (docs/stripes.md §0 finding 7), so the
    // rebuild copies every row in batches: 7 operations on the new member
    // here, each cut twice)
    assert!(
        cases >= 12 && resumed + 1 >= cases,
        "only {cases} cuts landed in the rebuild, {resumed} resumed"
    );
}

fn sluice(args: &[&str], dir: &Path) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// `sluice replace`: a new file holding data is refused without --force; a
/// missing one is created and rebuilt; `info` and `check` then see a
/// healthy set, and the data reads back without the member replaced.
#[test]
fn cli_replace_refuses_a_device_with_data_and_rebuilds_onto_a_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 1);
    let want = {
        let vol = open(&paths);
        let w = scribble(&vol, 400, 9);
        vol.close().unwrap();
        w
    };
    std::fs::write(dir.path().join("busy.img"), vec![0x42u8; 1 << 20]).unwrap();
    let mut args: Vec<String> = vec!["replace".into()];
    for p in &paths {
        args.push("--device".into());
        args.push(p.display().to_string());
    }
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        a.extend_from_slice(extra);
        sluice(&a, dir.path())
    };
    let (rc, out) = run(&["--old", "3", "--new", "busy.img"]);
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("--force"), "{out}");
    let old = paths[3].display().to_string();
    let (rc, out) = run(&["--old", &old, "--new", "fresh.img"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("rebuilt") && out.contains("only marked"),
        "{out}"
    );
    let mut now = paths.clone();
    now[3] = dir.path().join("fresh.img");
    let mut info: Vec<String> = vec!["info".into()];
    for p in &now {
        info.push("--device".into());
        info.push(p.display().to_string());
    }
    let a: Vec<&str> = info.iter().map(|s| s.as_str()).collect();
    let (rc, out) = sluice(&a, dir.path());
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("healthy") && !out.contains("rebuild "),
        "{out}"
    );
    let some: Vec<PathBuf> = (0..5).filter(|&i| i != 1).map(|i| now[i].clone()).collect();
    let vol = Volume::open_striped(
        devices(&some),
        &OpenOptions {
            read_only: true,
            ..det()
        },
    )
    .unwrap();
    verify(&vol, &want, "after sluice replace, member 1 gone");
}

/// A flipped byte in a parity unit: scrub on a read-write mount names the
/// row and rewrites the parity (the member's bytes right again); `sluice
/// check --device` names it and exits 1, `check --repair` rewrites it, and
/// the next check is clean.
#[test]
fn a_flipped_parity_byte_is_named_by_scrub_and_check_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let paths = files(dir.path(), 5);
    make(&paths, 1);
    let want = fill(&paths, 96, 4);
    let (_, l) = layout(&paths);
    let (m, o) = find(&paths, &want[12]);
    let (pm, po) = parity_piece(&l, o, 0);
    let row = (o - l.member_offset) / l.unit;
    let good = peek(&paths[pm], po);
    flip(&paths[pm], po);
    assert!(peek(&paths[pm], po) != good);
    let _ = m;
    // the volume's scrub
    {
        let vol = open(&paths);
        let mut lines = Vec::new();
        for _ in 0..vol.geometry().segment_count {
            lines.extend(vol.scrub_step().unwrap().damage);
        }
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(&format!("row {row} "))
                && lines[0].contains("rewritten from the data"),
            "{lines:?}"
        );
        assert!(
            peek(&paths[pm], po) == good,
            "parity rewritten on its member"
        );
        assert_eq!(vol.stripe_set().unwrap().status().parity_mismatches, 1);
        lines.clear();
        for _ in 0..vol.geometry().segment_count {
            lines.extend(vol.scrub_step().unwrap().damage);
        }
        assert!(lines.is_empty(), "{lines:?}");
        vol.close().unwrap();
    }
    // the CLI
    flip(&paths[pm], po);
    let mut args: Vec<String> = vec!["check".into()];
    for p in &paths {
        args.push("--device".into());
        args.push(p.display().to_string());
    }
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        a.extend_from_slice(extra);
        sluice(&a, dir.path())
    };
    let (rc, out) = run(&[]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains(&format!("row {row} ")) && out.contains("parity disagrees"),
        "{out}"
    );
    assert!(peek(&paths[pm], po) != good, "checking writes nothing");
    let (rc, out) = run(&["--repair"]);
    assert_eq!(rc, 0, "{out}");
    assert!(peek(&paths[pm], po) == good);
    let (rc, out) = run(&[]);
    assert_eq!(rc, 0, "{out}");
}
