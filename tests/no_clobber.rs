//! No command destroys a volume (issue 17, findings 1-6), each through the built
//! binary: one volume lock for every opener that writes (serve, bench `sluice:`
//! targets, create with or without --force), `create` probing like bench and
//! never racing itself, and output files (--pid-file, --record) that never
//! replace a volume or write through a symlink.

mod nbd_common;

use nbd_common::{Server, BIN};
use sluice::bench::nbd_client::NbdClient;
use sluice::bench::target::{self, OpenSpec, Target, TargetSpec};
use std::path::Path;
use std::process::{Command, Output};

fn sluice(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Run a command that must be refused: it must exit, unsuccessfully, within
/// 30 s (a server that started instead is killed and the test fails).
fn refused(args: &[&str], dir: &Path) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if nbd_common::wait_timeout(&mut c, std::time::Duration::from_secs(30)).is_none() {
        let _ = c.kill();
        let _ = c.wait();
        panic!("{args:?} was not refused: it was still running after 30 s");
    }
    let o = c.wait_with_output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded: {}", err(&o));
    o
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn create(dir: &Path, name: &str) {
    let o = sluice(&["create", name, "--size", "64M"], dir);
    assert!(o.status.success(), "{}", err(&o));
}

/// `check` exits 0: a valid volume, closed cleanly, no damage.
fn assert_clean(dir: &Path, name: &str) {
    let o = sluice(&["check", name], dir);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{name}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        err(&o)
    );
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..4 << 20)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Finding 1: bench on a served volume is refused naming the server, and serve
/// on a volume a bench target holds is refused naming the bench.
#[test]
fn bench_and_serve_never_share_a_volume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "v.img");
    let img = d.join("v.img");
    let srv = Server::start(d, &img, "64M", &[]);
    let o = refused(
        &[
            "bench",
            "mix",
            "--quiet",
            "--seconds",
            "1",
            "--no-prefill",
            "--target",
            "sluice:v.img",
        ],
        d,
    );
    let e = err(&o);
    assert!(!o.status.success(), "bench ran on a served volume: {e}");
    assert!(
        e.contains(&format!("in use by pid {}", srv.pid())) && e.contains("sluice serve"),
        "{e}"
    );
    let o = refused(
        &[
            "bench",
            "mix",
            "--quiet",
            "--seconds",
            "1",
            "--no-prefill",
            "--target",
            "sluice-noverify:v.img",
        ],
        d,
    );
    assert!(err(&o).contains("in use by pid"), "{}", err(&o));
    // a raw write test, even with --force, takes the same lock
    let o = refused(
        &[
            "bench",
            "mix",
            "--quiet",
            "--seconds",
            "1",
            "--no-prefill",
            "--force",
            "--target",
            "file:v.img",
        ],
        d,
    );
    assert!(err(&o).contains("in use by pid"), "{}", err(&o));
    let (code, e) = srv.stop();
    assert_eq!(code, Some(0), "{e}");
    assert_clean(d, "v.img");

    // a bench target (in this process) holds the volume: serve is refused
    let spec = OpenSpec {
        create_size: 64 << 20,
        overprovision: 0.1,
        writes: true,
        force: false,
    };
    let t = target::open(&TargetSpec::Sluice(img.clone()), &spec).unwrap();
    let o = refused(&["serve", "v.img", "--socket", "s.sock"], d);
    let e = err(&o);
    assert!(!o.status.success(), "serve started beside a bench: {e}");
    assert!(
        e.contains(&format!("in use by pid {}", std::process::id())),
        "{e}"
    );
    t.close().unwrap();
    drop(t);
    assert_clean(d, "v.img");
}

/// Finding 2: `--pid-file` never replaces a volume, never writes through a
/// symlink, and is removed at exit only while it holds the server's pid.
#[test]
fn pid_file_never_replaces_a_volume_or_follows_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "v.img");
    let img = d.join("v.img");
    let data = pattern(7);
    {
        let srv = Server::start(d, &img, "64M", &[]);
        let c = NbdClient::connect(&srv.uri).unwrap();
        c.write(0, &data).unwrap();
        c.flush().unwrap();
        c.disconnect();
        assert_eq!(srv.stop().0, Some(0));
    }
    for pid_file in ["v.img", "./v.img"] {
        let o = refused(
            &[
                "serve",
                "v.img",
                "--socket",
                "s.sock",
                "--pid-file",
                pid_file,
            ],
            d,
        );
        assert!(!o.status.success(), "--pid-file {pid_file} accepted");
        assert!(err(&o).contains("--pid-file"), "{}", err(&o));
    }
    // the volume still mounts with its data
    let srv = Server::start(d, &img, "64M", &[]);
    let c = NbdClient::connect(&srv.uri).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(0, &mut back).unwrap();
    assert!(back == data, "the volume lost its data");
    c.disconnect();
    assert_eq!(srv.stop().0, Some(0));

    // symlinks: neither the old `<name>.tmp` sibling nor the name itself
    let victim = d.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, d.join("s.tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, d.join("link.pid")).unwrap();
    let o = refused(
        &[
            "serve",
            "v.img",
            "--socket",
            "s.sock",
            "--pid-file",
            "link.pid",
        ],
        d,
    );
    assert!(!o.status.success(), "--pid-file through a symlink accepted");
    assert!(err(&o).contains("symbolic link"), "{}", err(&o));
    let pid_path = d.join("s.pid");
    let srv = Server::start(d, &img, "64M", &["--pid-file", pid_path.to_str().unwrap()]);
    let pid = std::fs::read_to_string(d.join("s.pid")).unwrap();
    assert_eq!(pid.trim(), srv.pid().to_string());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // a second server on another volume may not take over a live pid file
    create(d, "w.img");
    let o = refused(
        &[
            "serve",
            "w.img",
            "--socket",
            "w.sock",
            "--pid-file",
            "s.pid",
        ],
        d,
    );
    assert!(err(&o).contains("is running"), "{}", err(&o));
    // the pid file now names someone else: left alone at exit
    std::fs::write(d.join("s.pid"), b"1\n").unwrap();
    assert_eq!(srv.stop().0, Some(0));
    assert_eq!(std::fs::read(d.join("s.pid")).unwrap(), b"1\n");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert_clean(d, "v.img");
}

/// Finding 3: `--record` never truncates the served volume or another volume.
#[test]
fn record_never_truncates_a_volume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "v.img");
    create(d, "w.img");
    let before = std::fs::read(d.join("w.img")).unwrap();
    for rec in ["v.img", "w.img"] {
        let o = refused(
            &["serve", "v.img", "--socket", "s.sock", "--record", rec],
            d,
        );
        assert!(!o.status.success(), "--record {rec} accepted");
        assert!(err(&o).contains("--record"), "{}", err(&o));
    }
    assert_clean(d, "v.img");
    assert_clean(d, "w.img");
    assert!(std::fs::read(d.join("w.img")).unwrap() == before);
    // an earlier trace is ours to replace; a file of notes is not
    std::fs::write(d.join("old.trace"), "# sluice-trace v1\n1 W 0 4096\n").unwrap();
    std::fs::write(d.join("notes"), "mine\n").unwrap();
    let o = refused(
        &["serve", "v.img", "--socket", "s.sock", "--record", "notes"],
        d,
    );
    assert!(!o.status.success());
    assert_eq!(std::fs::read(d.join("notes")).unwrap(), b"mine\n");
    let old = d.join("old.trace");
    let srv = Server::start(
        d,
        &d.join("v.img"),
        "64M",
        &["--record", old.to_str().unwrap()],
    );
    assert_eq!(srv.stop().0, Some(0));
    let t = std::fs::read_to_string(d.join("old.trace")).unwrap();
    assert!(
        t.starts_with("# sluice-trace v1") && !t.contains("1 W 0 4096"),
        "{t}"
    );
}

/// Finding 4: `create --force` on a served volume is refused; the served data
/// still reads back and the server closes cleanly.
#[test]
fn create_force_never_formats_a_served_volume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "v.img");
    let srv = Server::start(d, &d.join("v.img"), "64M", &[]);
    let c = NbdClient::connect(&srv.uri).unwrap();
    let data = pattern(3);
    c.write(4 << 20, &data).unwrap();
    c.flush().unwrap();
    for args in [
        &["create", "v.img", "--size", "64M", "--force"][..],
        &["create", "v.img", "--size", "64M"][..],
    ] {
        let o = refused(args, d);
        let e = err(&o);
        assert!(!o.status.success(), "{args:?} succeeded on a served volume");
        assert!(e.contains(&format!("in use by pid {}", srv.pid())), "{e}");
    }
    let mut back = vec![0u8; data.len()];
    c.read(4 << 20, &mut back).unwrap();
    assert!(back == data, "flushed data changed under the server");
    c.disconnect();
    let (code, e) = srv.stop();
    assert_eq!(code, Some(0), "{e}");
    assert_clean(d, "v.img");
}

/// Finding 5: `create` without --force refuses a btrfs image (superblock at
/// 64 KiB) and a file whose first 64 KiB are zero but that holds data later.
#[test]
fn create_refuses_what_holds_data_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut btrfs = vec![0u8; 1 << 20];
    btrfs[65536 + 64..65536 + 72].copy_from_slice(b"_BHRfS_M");
    std::fs::write(d.join("btrfs.img"), &btrfs).unwrap();
    let mut late = vec![0u8; 1 << 20];
    late[512 << 10] = 1;
    std::fs::write(d.join("late.img"), &late).unwrap();
    for (name, what, img) in [
        ("btrfs.img", "btrfs", &btrfs),
        ("late.img", "not empty", &late),
    ] {
        let o = refused(&["create", name, "--size", "64M"], d);
        let e = err(&o);
        assert!(!o.status.success(), "create formatted {name}");
        assert!(e.contains(what) && e.contains("--force"), "{e}");
        assert!(
            std::fs::read(d.join(name)).unwrap() == *img,
            "{name} changed"
        );
    }
    let o = sluice(&["create", "late.img", "--size", "64M", "--force"], d);
    assert!(o.status.success(), "{}", err(&o));
    assert_clean(d, "late.img");
}

/// Finding 6: two `create` runs of one new path: exactly one succeeds, and the
/// file is a valid volume (the loser never deletes the winner's file).
#[test]
fn concurrent_creates_of_one_path_never_race() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for round in 0..30 {
        let name = format!("r{round}.img");
        let spawn = || {
            Command::new(BIN)
                .args(["create", &name, "--size", "64M"])
                .current_dir(d)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let ok = [&a, &b].iter().filter(|o| o.status.success()).count();
        assert_eq!(
            ok,
            1,
            "round {round}: {ok} creates succeeded:\n{}\n{}",
            err(&a),
            err(&b)
        );
        assert_clean(d, &name);
        std::fs::remove_file(d.join(&name)).unwrap();
    }
}
