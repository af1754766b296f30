//! Black box (issue 17, findings 10 and 11), through the `sluice` binary: a
//! volume file whose head was wiped is damage to `check` (exit 1), `info` still
//! shows it and `repair` makes it check clean; a volume file with a damaged
//! durable chunk refuses `serve`, `check --json` lists the blocks a salvage
//! mount cannot vouch for, and `serve --read-only --salvage` lets `qemu-img
//! convert --salvage` copy every other block out intact.

mod common;
mod nbd_common;

use common::*;
use nbd_common::*;
use sluice::media::{CrashPolicy, FaultMedia, Media};
use sluice::Volume;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

const BLOCKS: u64 = 256;

/// A crash image of a volume holding data (every block written, a checkpoint,
/// then flushed writes of 100..104 and 0..8), and the content.
fn crashed_volume() -> (Vec<u8>, Vec<u8>) {
    let (create, media_bytes) = small_create(BLOCKS, 0.10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(BLOCKS);
    let mut w = |lba: u64, n: u64, seed: u64| {
        let op = Op::Write {
            offset: lba * BS as u64,
            len: n as usize * BS,
            seed,
            fill: Fill::Random,
        };
        issue(&vol, &op, false).unwrap();
        r.apply(&op);
        vol.flush().unwrap();
    };
    for i in 0..BLOCKS / 16 {
        w(i * 16, 16, 10 + i);
    }
    vol.checkpoint().unwrap();
    w(100, 4, 1);
    w(0, 8, 2);
    drop(vol);
    let image = media.crash_image(CrashPolicy {
        drop_probability: 0.0,
        tear_last: false,
        seed: 0,
    });
    (image, r.cur)
}

fn sluice(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn a_wiped_head_is_damage_and_repair_rewrites_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut image, want) = crashed_volume();
    image[..64 << 10].fill(0);
    std::fs::write(dir.path().join("v.img"), &image).unwrap();
    let o = sluice(&["check", "v.img"], dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("superblock copies 0 and 1 at the head are unreadable (zeroed); mounted from the tail copy"), "{out}");
    assert!(!out.contains("not a sluice volume"), "{out}");
    let o = sluice(&["info", "v.img"], dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("head 0 LOST (zeroed)") && out.contains("mounted from the tail copy"),
        "{out}"
    );
    let o = sluice(&["repair", "v.img"], dir.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = sluice(&["check", "v.img", "--json"], dir.path());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["superblock_copies_ok"], 4);
    // every flushed block is still there
    let media = Arc::new(sluice::media::FileMedia::open(&dir.path().join("v.img"), true).unwrap());
    let vol = Volume::open(
        media,
        &sluice::OpenOptions {
            read_only: true,
            ..det_open(1 << 40)
        },
    )
    .unwrap();
    assert!(read_all(&vol) == want, "content after repair");
}

#[test]
fn salvage_export_copies_out_everything_but_the_listed_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (mut image, want) = crashed_volume();
    // a bit in the first data block of the chunk writing 100..104
    let at = newest_chunk_of(&image, 100);
    image[at + 4096 + 5] ^= 0x20;
    let img = dir.path().join("v.img");
    std::fs::write(&img, &image).unwrap();
    // a normal serve refuses, naming the damage
    let o = sluice(
        &["serve", "v.img", "--read-only", "--socket", "x.sock"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("refusing to mount"));
    // check lists what salvage cannot vouch for
    let o = sluice(&["check", "v.img", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ranges = v["damage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "salvage")
        .expect("a salvage entry")["ranges"]
        .clone();
    assert_eq!(ranges, serde_json::json!([[100, 104]]));
    let o = sluice(&["check", "v.img"], dir.path());
    assert!(String::from_utf8_lossy(&o.stdout)
        .contains("answers EIO for 4 of 256 logical block(s) it cannot vouch for: 100-103"));
    require_tools!(
        "salvage_export_copies_out_everything_but_the_listed_blocks",
        "qemu-img"
    );
    let srv = Server::start(dir.path(), &img, "", &["--read-only", "--salvage"]);
    let out = dir.path().join("out.img");
    let o = Command::new("qemu-img")
        .args(["convert", "--salvage", "-f", "raw", "-O", "raw", &srv.uri])
        .arg(&out)
        .output()
        .unwrap();
    let (_, err) = srv.stop();
    assert!(
        o.status.success(),
        "qemu-img: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(err.contains("salvage mount"), "{err}");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), want.len());
    for b in 0..BLOCKS as usize {
        let g = &got[b * BS..(b + 1) * BS];
        if (100..104).contains(&b) {
            assert!(
                g.iter().all(|&x| x == 0),
                "block {b}: EIO reads as zeros with --salvage"
            );
        } else {
            assert!(g == &want[b * BS..(b + 1) * BS], "block {b} copied wrong");
        }
    }
    // the salvage export never wrote
    assert!(
        std::fs::read(&img).unwrap() == image,
        "serve --salvage wrote to the volume"
    );
}
