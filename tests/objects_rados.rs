//! The object-store trait on a real Ceph pool through librados (issue 21):
//! a single-node cluster (one monitor, one manager, one BlueStore OSD on a
//! file) made by scripts/ceph-cluster.sh in a temporary directory on free
//! ports, stopped when the test ends (pass or panic: the guard's Drop). No
//! mocks: these are the durability tests of `RadosObjects`.
//!
//! Built only with the cargo feature `rados` (scripts/test turns it on).
//! When Ceph is not installed (scripts/install-deps installs it) the test
//! prints SKIP and returns, except under CI, where it fails.
//!
//! One test runs the phases in order on one cluster (a cluster takes ~12 s
//! to make, and the last phase kills the OSD).
#![cfg(feature = "rados")]

mod nbd_common;
mod objects_common;

use objects_common::{pattern, Clients};
use sluice::format::objname::ObjName;
use sluice::media::objects::{self, ObjError, ObjectStore, RadosObjects, RadosOptions};
use sluice::media::{FileMedia, Media};
use sluice::objseg::{self, ObjSegOptions};
use sluice::{OpenOptions, StoreHandle, Volume};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/ceph-cluster.sh")
}

/// A cluster of this test, stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
}

/// A base port whose 3 ports (monitor v2, v1, radosgw) are free now.
fn free_ports() -> u16 {
    for _ in 0..200 {
        let base = 40_000 + (rand::random::<u16>() % 2000) * 10;
        let held: Vec<_> = (0..3)
            .map_while(|i| TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == 3 {
            return base;
        }
    }
    panic!("no 3 free consecutive ports on 127.0.0.1");
}

fn cannot_run(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("RADOS tests cannot run: {why} (CI is set: a test that cannot run fails)");
    }
    eprintln!("\n*** SKIP: RADOS tests: {why} ***\n");
}

impl Cluster {
    fn start() -> Option<Cluster> {
        if !Path::new("/usr/bin/ceph-osd").exists() {
            cannot_run("Ceph is not installed (scripts/install-deps installs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_ports();
        let out = Command::new(script())
            .args(["start"])
            .arg(dir.path())
            .args(["--port", &port.to_string(), "--osd-gib", "1"])
            .output()
            .expect("run scripts/ceph-cluster.sh");
        let c = Cluster { dir };
        if !out.status.success() {
            let why = format!(
                "the cluster did not start: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            cannot_run(&why);
            return None;
        }
        Some(c)
    }

    fn opts(&self) -> RadosOptions {
        RadosOptions {
            conf: Some(self.dir.path().join("ceph.conf")),
            op_timeout: Duration::from_secs(5),
            ..RadosOptions::default()
        }
    }

    /// A client rooted at `prefix` (each its own connection, as another host).
    fn store(&self, prefix: &str) -> RadosObjects {
        RadosObjects::open("sluice", prefix, &self.opts()).unwrap()
    }

    fn osd_pid(&self) -> i32 {
        let f = self.dir.path().join("run/osd.0.pid");
        std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
            .trim()
            .parse()
            .unwrap()
    }

    fn restart(&self) {
        let st = Command::new(script())
            .arg("start")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "ceph-cluster.sh start (restart) failed");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Every client of this test's cluster, for the shared contract checks.
fn clients(c: &Arc<Cluster>) -> Clients {
    let c = c.clone();
    Arc::new(move |p: &str| Box::new(c.store(p)) as Box<dyn ObjectStore>)
}

#[test]
fn rados_objects_keep_the_object_store_contract() {
    let Some(c) = Cluster::start() else {
        return;
    };
    let c = Arc::new(c);
    eprintln!("phase: write once");
    write_once(&c);
    eprintln!("phase: ranged reads");
    ranged_reads(&c);
    eprintln!("phase: list");
    objects_common::list_sorted_and_scoped(&clients(&c));
    eprintln!("phase: delete");
    objects_common::delete_is_idempotent(&clients(&c));
    eprintln!("phase: lease race");
    objects_common::lease_race(&clients(&c), 10);
    eprintln!("phase: a volume in the pool");
    a_volume_in_rados_reads_back_through_ranged_reads(&c);
    eprintln!("phase: store-durable takeovers");
    store_durable_takeovers(&c);
    eprintln!("phase: kill -9 of the OSD");
    acknowledged_objects_survive_kill_9_of_the_osd(&c);
}

/// `sluice create --store rados://...` (the CLI), then the engine on the
/// segment store over RADOS: written, flushed, uploaded, closed; a fresh
/// mount with no cache reads every block back through ranged reads;
/// `sluice check --store` is clean.
fn a_volume_in_rados_reads_back_through_ranged_reads(c: &Cluster) {
    let dir = c.dir.path().join("cache");
    let conf = c.dir.path().join("ceph.conf");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .args(["--store", "rados://sluice/v1", "--cache-dir"])
            .arg(&dir)
            .arg("--ceph-conf")
            .arg(&conf)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "sluice {args:?}: {text}");
        text
    };
    cli(&["create", "--size", "32M", "--segment-size", "64K"]);
    let mount = || {
        let media: Arc<dyn Media> = Arc::new(FileMedia::open(&dir.join("volume"), false).unwrap());
        let (store, _) = objseg::open(
            media.clone(),
            objseg::Place {
                objects: Arc::new(c.store("v1")),
                dir: &dir,
                takeover: false,
                opts: ObjSegOptions {
                    cache_segments: 0,
                    close_wait: Duration::from_secs(60),
                    ckpt_every: 1,
                    ..ObjSegOptions::default()
                },
            },
        )
        .unwrap();
        let vol = Volume::open(
            media,
            &OpenOptions {
                store: Some(StoreHandle(store.clone())),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        (vol, store)
    };
    let bs = sluice::format::BLOCK_BYTES;
    let block = |lba: u64, v: u64| pattern(lba * 1000 + v, bs);
    let n = 2048u64; // 8 MiB: 128 segments' worth
    let (vol, store) = mount();
    for lba in 0..n {
        vol.write(lba * bs as u64, &block(lba, 1), false).unwrap();
    }
    for lba in (0..n).step_by(5) {
        vol.write(lba * bs as u64, &block(lba, 2), false).unwrap();
    }
    vol.flush().unwrap();
    assert!(
        store.wait_idle(Duration::from_secs(120)),
        "uploads did not finish"
    );
    let uploaded = store.stats().uploaded_objects.load(Ordering::Relaxed);
    assert!(uploaded >= 100, "{uploaded} segments uploaded");
    vol.close().unwrap();
    drop((vol, store));
    let (vol, store) = mount();
    let mut b = vec![0u8; bs];
    for lba in 0..n {
        vol.read(lba * bs as u64, &mut b).unwrap();
        let v = if lba % 5 == 0 { 2 } else { 1 };
        assert!(b == block(lba, v), "block {lba}: not version {v}");
    }
    let gets = store.stats().gets.load(Ordering::Relaxed);
    assert!(gets > 100, "{gets} ranged reads");
    vol.close().unwrap();
    drop((vol, store));
    let text = cli(&["check"]);
    assert!(text.contains("\nclean"), "{text}");
}

fn write_once(c: &Cluster) {
    let s = c.store("t/once");
    let name = ObjName::Segment { seq: 7, epoch: 1 }.encode();
    let first = pattern(1, 3 << 20);
    s.put_new(&name, &first).unwrap();
    // the same create again (its answer lost): the same create, Ok
    s.put_new(&name, &first).unwrap();
    let mut other = first.clone();
    other[12345] ^= 1;
    assert!(matches!(s.put_new(&name, &other), Err(ObjError::Exists(_))));
    assert!(
        s.get(&name).unwrap() == first,
        "a refused create changed it"
    );
    assert_eq!(s.head(&name).unwrap(), first.len() as u64);
    // another client sees the same; the store passes the write-once probe
    let s2 = c.store("t/once");
    assert!(s2.get(&name).unwrap() == first);
    objects::verify_write_once(&s2, "probe/e1").unwrap();
    assert!(matches!(s.get("nothing/here"), Err(ObjError::NotFound(_))));
    assert!(matches!(s.head("nothing/here"), Err(ObjError::NotFound(_))));
    // outside input: bad names are errors, never IO elsewhere
    assert!(matches!(
        s.put_new("a/../b", b"x"),
        Err(ObjError::Invalid(_))
    ));
    assert!(matches!(s.get("/abs"), Err(ObjError::Invalid(_))));
    assert!(s.describe().starts_with("rados://sluice/t/once"));
}

fn ranged_reads(c: &Cluster) {
    let s = c.store("t/range");
    let body = pattern(2, (1 << 20) + 4097);
    s.put_new("obj", &body).unwrap();
    let n = body.len() as u64;
    for r in [
        0..1,
        0..4096,
        4095..4097,
        1000..(1 << 20),
        (n - 1)..n,
        0..n,
        17..17,
    ] {
        let got = s.get_range("obj", r.clone()).unwrap();
        assert!(
            got[..] == body[r.start as usize..r.end as usize],
            "range {r:?} read wrong bytes"
        );
    }
    match s.get_range("obj", (n - 10)..(n + 5)) {
        Err(ObjError::Short { len, .. }) => assert_eq!(len, n),
        other => panic!("a read past the end answered {other:?}"),
    }
    assert!(matches!(
        s.get_range("missing", 0..10),
        Err(ObjError::NotFound(_))
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert!(matches!(
        s.get_range("obj", backwards),
        Err(ObjError::Invalid(_))
    ));
}

fn acknowledged_objects_survive_kill_9_of_the_osd(c: &Cluster) {
    let s = c.store("t/kill");
    let objs: Vec<(String, Vec<u8>)> = (0..8u64)
        .map(|i| {
            let len = if i == 0 {
                4 << 20
            } else {
                4096 * i as usize + 13
            };
            let name = ObjName::Segment { seq: i, epoch: 1 }.encode();
            (name, pattern(100 + i, len))
        })
        .collect();
    for (n, b) in &objs {
        s.put_new(n, b).unwrap();
    }
    let pid = c.osd_pid();
    // SAFETY: kill(2) on the pid our own script started for this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    for _ in 0..250 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // the only OSD is down: a read fails within the op timeout (an error,
    // not an answer from nowhere and not a hang)
    let t = std::time::Instant::now();
    assert!(matches!(s.get(&objs[1].0), Err(ObjError::Store(_))));
    assert!(t.elapsed() < Duration::from_secs(60));
    c.restart();
    assert_ne!(c.osd_pid(), pid);
    let s = c.store("t/kill");
    for (n, b) in &objs {
        assert!(&s.get(n).unwrap() == b, "{n} lost or changed by kill -9");
    }
    assert_eq!(s.list("seg/").unwrap().len(), objs.len());
    assert!(matches!(
        s.put_new(&objs[2].0, b"other"),
        Err(ObjError::Exists(_))
    ));
}

struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn last_round(state: &str, what: &str) -> u64 {
    state
        .lines()
        .filter_map(|l| l.strip_prefix(what))
        .filter_map(|n| n.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// The store-durable mode on RADOS (docs/objects.md §5.0.2, §5.6.1), with
/// `sluice serve` processes under tests/nbd_scripts/flush_load.py:
/// 1. host A serves under load; host B (`--takeover`, an empty cache
///    directory) takes over while A is alive: A's load must end on a FLUSH
///    error, and B must hold every round A's FLUSH answered;
/// 2. B serves under load and is killed (-9) under it, its cache directory
///    deleted; host C (`--takeover`, empty cache) holds every round whose
///    FLUSH B answered.
fn store_durable_takeovers(c: &Cluster) {
    let test = "RADOS: store-durable takeovers";
    let Some(probe) = nbd_common::nbdsh(test) else {
        return;
    };
    let nbdsh = || {
        let mut c = Command::new(probe.get_program());
        c.args(probe.get_args());
        c
    };
    let exec = format!(
        "exec(open({:?}).read())",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/nbd_scripts/flush_load.py"
        )
    );
    let conf = c.dir.path().join("ceph.conf");
    let sluice = |args: &[&str], vol: &str, cache: &Path| {
        let mut cmd = Command::new(nbd_common::BIN);
        cmd.args(args)
            .arg("--store")
            .arg(format!("rados://sluice/{vol}"))
            .arg("--cache-dir")
            .arg(cache)
            .arg("--ceph-conf")
            .arg(&conf)
            // a takeover waits 2T: 1 s here
            .env("SLUICE_LEASE_TERM_MS", "500");
        cmd
    };
    let serve = |vol: &str, cache: &Path, sock: &Path, extra: &[&str]| -> (Reap, String) {
        let mut child = Reap(
            sluice(&["serve"], vol, cache)
                .args(extra)
                .arg("--socket")
                .arg(sock)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(child.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            !line.is_empty(),
            "sluice serve on {} did not start",
            cache.display()
        );
        (child, line.trim().to_string())
    };
    let load = |uri: &str, state: &Path| {
        Reap(
            nbdsh()
                .args(["-u", uri, "-c", &exec])
                .env("MODE", "load")
                .env("STATE", state)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let wait_flushed = |state: &Path, n: u64| {
        let t0 = std::time::Instant::now();
        while last_round(
            &std::fs::read_to_string(state).unwrap_or_default(),
            "flushed ",
        ) < n
            && t0.elapsed() < Duration::from_secs(180)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // the volume as a host finds it: a prefix K of the rounds, K returned
    let prefix = |uri: &str, started: u64| -> u64 {
        let out = nbd_common::run(
            nbdsh()
                .args(["-u", uri, "-c", &exec])
                .env("MODE", "prefix")
                .env("STARTED", started.to_string()),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains(": 0 bad"), "{text}");
        eprintln!("  {}", text.trim());
        text.split("prefix ")
            .nth(1)
            .and_then(|t| t.split('+').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{text}"))
    };
    let root = c.dir.path();
    let create = |vol: &str, cache: &Path| {
        let out = sluice(
            &[
                "create",
                "--size",
                "64M",
                "--segment-size",
                "256K",
                "--flush-to",
                "store",
            ],
            vol,
            cache,
        )
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // 1. a live writer superseded
    let host_a = root.join("sd-a");
    create("v2", &host_a);
    let state = root.join("sd-state-1");
    let (server_a, uri_a) = serve("v2", &host_a, &root.join("sd-a.sock"), &[]);
    let mut load_a = load(&uri_a, &state);
    wait_flushed(&state, 40);
    assert!(
        load_a.0.try_wait().unwrap().is_none(),
        "the load on A stopped early"
    );
    let host_b = root.join("sd-b");
    let (server_b, uri_b) = serve("v2", &host_b, &root.join("sd-b.sock"), &["--takeover"]);
    let code = nbd_common::wait_timeout(&mut load_a.0, Duration::from_secs(30))
        .expect("host A still answers FLUSHes 30 s after host B took over");
    assert!(!code.success(), "the load on A ended without an error");
    let st = std::fs::read_to_string(&state).unwrap();
    let (flushed, started) = (last_round(&st, "flushed "), last_round(&st, "start "));
    let k = prefix(&uri_b, started);
    assert!(
        k >= flushed,
        "host B got rounds 1..{k}; host A answered the FLUSH after round {flushed}"
    );
    drop(server_a);
    drop(server_b);
    // 2. kill -9 under load, the cache lost, another host takes over
    let host_d = root.join("sd-d");
    create("v3", &host_d);
    let state = root.join("sd-state-2");
    let (server_d, uri_d) = serve("v3", &host_d, &root.join("sd-d.sock"), &[]);
    let mut load_d = load(&uri_d, &state);
    wait_flushed(&state, 40);
    drop(server_d); // kill -9 under the load
    let _ = load_d.0.kill();
    let _ = load_d.0.wait();
    std::fs::remove_dir_all(&host_d).unwrap();
    let st = std::fs::read_to_string(&state).unwrap();
    let (flushed, started) = (last_round(&st, "flushed "), last_round(&st, "start "));
    assert!(flushed >= 40, "{st}");
    let host_e = root.join("sd-e");
    let (server_e, uri_e) = serve("v3", &host_e, &root.join("sd-e.sock"), &["--takeover"]);
    let k = prefix(&uri_e, started);
    assert!(
        k >= flushed,
        "host E got rounds 1..{k}; host D answered the FLUSH after round {flushed}"
    );
    drop(server_e);
}
