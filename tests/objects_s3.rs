//! The object-store client and the writer lease against a real S3 server
//! (issue 21): SeaweedFS (`weed mini`), started by scripts/s3-server.sh in a
//! temporary directory on free ports, one server per test, stopped when the
//! test ends (pass or panic: the guard's Drop). No mocks: these are the
//! durability tests of `S3Objects`.
//!
//! When the server cannot start (no `weed`: run scripts/install-deps), a test
//! prints SKIP and returns, except under CI, where it fails.
//!
//! By hand, against another S3 server (radosgw of scripts/ceph-cluster.sh
//! --rgw): set SLUICE_S3_ENDPOINT (and AWS_ACCESS_KEY_ID,
//! AWS_SECRET_ACCESS_KEY; bucket SLUICE_S3_BUCKET, default "sluice", must
//! exist). Every run then writes under a fresh random prefix, and the kill -9
//! test, which needs a server of its own, says so and does nothing.

mod objects_common;

use objects_common::{pattern, Clients};
use sluice::format::objname::ObjName;
use sluice::media::objects::{self, ObjError, ObjectStore, S3Objects, S3Options};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.sh")
}

/// A SeaweedFS of this test (stopped on drop), or the external server.
struct Weed {
    dir: tempfile::TempDir,
    port: u16,
    /// SLUICE_S3_ENDPOINT: not ours, nothing to start or stop.
    external: Option<String>,
    /// Prepended to every prefix (random for an external server).
    run: String,
}

/// A base port whose 10 ports (the server's listeners) are free now.
fn free_ports() -> u16 {
    for _ in 0..200 {
        let base = 20_000 + (rand::random::<u16>() % 4000) * 10;
        let held: Vec<_> = (0..10)
            .map_while(|i| TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == 10 {
            return base;
        }
    }
    panic!("no 10 free consecutive ports on 127.0.0.1");
}

impl Weed {
    /// None (after a SKIP line) when the server cannot start outside CI.
    fn start(test: &str) -> Option<Weed> {
        let dir = tempfile::tempdir().unwrap();
        if let Ok(e) = std::env::var("SLUICE_S3_ENDPOINT") {
            return Some(Weed {
                dir,
                port: 0,
                external: Some(e),
                run: format!("run-{:016x}/", rand::random::<u64>()),
            });
        }
        for _ in 0..3 {
            let port = free_ports();
            let out = Command::new(script())
                .arg("start")
                .arg(dir.path())
                .arg(port.to_string())
                .output()
                .expect("run scripts/s3-server.sh");
            if out.status.success() {
                return Some(Weed {
                    dir,
                    port,
                    external: None,
                    run: String::new(),
                });
            }
            let why = String::from_utf8_lossy(&out.stderr).to_string();
            if why.contains("in use") {
                continue; // someone took a port since we looked
            }
            if std::env::var_os("CI").is_some() {
                panic!("{test}: the S3 server did not start (CI is set): {why}");
            }
            eprintln!("\n*** SKIP: {test}: no S3 server: {why} ***\n");
            return None;
        }
        panic!("{test}: ports kept being taken");
    }

    fn opts(&self) -> S3Options {
        if let Some(e) = &self.external {
            // keys and region from the environment
            return S3Options {
                endpoint: Some(e.clone()),
                ..S3Options::default()
            };
        }
        S3Options {
            endpoint: Some(format!("http://127.0.0.1:{}", self.port)),
            region: Some("us-east-1".into()),
            access_key_id: Some("sluice-test".into()),
            secret_access_key: Some("sluice-test-secret".into()),
            request_timeout: Duration::from_secs(10),
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..S3Options::default()
        }
    }

    /// A client rooted at `prefix` (each its own connections, as another host).
    fn store(&self, prefix: &str) -> S3Objects {
        let bucket = std::env::var("SLUICE_S3_BUCKET").unwrap_or_else(|_| "sluice".into());
        S3Objects::open(&bucket, &format!("{}{prefix}", self.run), &self.opts()).unwrap()
    }

    fn pid(&self) -> i32 {
        std::fs::read_to_string(self.dir.path().join("weed.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn run(&self, what: &str) {
        let st = Command::new(script())
            .arg(what)
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .status()
            .unwrap();
        assert!(st.success(), "s3-server.sh {what} failed");
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        if self.external.is_some() {
            return;
        }
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Every client of this test's server, for the shared contract checks.
fn clients(w: &Arc<Weed>) -> Clients {
    let w = w.clone();
    Arc::new(move |p: &str| Box::new(w.store(p)) as Box<dyn ObjectStore>)
}

#[test]
fn put_new_refuses_an_existing_object_and_the_first_content_survives() {
    let Some(w) = Weed::start("put_new_refuses") else {
        return;
    };
    let s = w.store("t/put-new");
    // the server honours If-None-Match (the check a writer runs first)
    objects::verify_write_once(&s, "probe/1").unwrap();
    assert!(s.list("probe/").unwrap().is_empty());
    let first = pattern(1, 100_000);
    let second = pattern(2, 100_000);
    s.put_new("seg/a", &first).unwrap();
    match s.put_new("seg/a", &second) {
        Err(ObjError::Exists(n)) => assert_eq!(n, "seg/a"),
        other => panic!("a second create of seg/a answered {other:?}"),
    }
    // a shorter object of other bytes is refused too
    assert!(matches!(s.put_new("seg/a", b"x"), Err(ObjError::Exists(_))));
    assert_eq!(
        s.get("seg/a").unwrap(),
        first,
        "the first content was replaced"
    );
    // the same bytes again are the same create (an answer lost and resent)
    s.put_new("seg/a", &first).unwrap();
    assert_eq!(s.get("seg/a").unwrap(), first);
    // another client (another host) is refused the same way
    let other = w.store("t/put-new");
    assert!(matches!(
        other.put_new("seg/a", &second),
        Err(ObjError::Exists(_))
    ));
    assert_eq!(other.get("seg/a").unwrap(), first);
    // a client rooted elsewhere does not see it
    assert!(matches!(
        w.store("t/elsewhere").get("seg/a"),
        Err(ObjError::NotFound(_))
    ));
}

#[test]
fn ranged_reads_are_exact_at_odd_offsets() {
    let Some(w) = Weed::start("ranged_reads") else {
        return;
    };
    let s = w.store("t/ranges");
    let len = (1 << 20) + 37;
    let data = pattern(3, len);
    s.put_new("obj", &data).unwrap();
    assert_eq!(s.head("obj").unwrap(), len as u64);
    let l = len as u64;
    for r in [
        0..1,
        1..2,
        3..4099,
        4095..4097,
        12_345..654_321,
        (1 << 20) - 1..(1 << 20) + 1,
        l - 1..l,
        l - 4096..l,
        0..l,
    ] {
        let got = s.get_range("obj", r.clone()).unwrap();
        assert_eq!(got.len() as u64, r.end - r.start, "{r:?}");
        assert!(
            got == data[r.start as usize..r.end as usize],
            "bytes {r:?} differ"
        );
    }
    assert!(s.get_range("obj", 9..9).unwrap().is_empty());
    for r in [l - 1..l + 1, l..l + 10, l + 100..l + 200] {
        match s.get_range("obj", r.clone()) {
            Err(ObjError::Short { len: got, .. }) => assert_eq!(got, l),
            other => panic!("{r:?} past the end answered {other:?}"),
        }
    }
    assert!(matches!(
        s.get_range("none", 0..10),
        Err(ObjError::NotFound(_))
    ));
    assert!(matches!(s.head("none"), Err(ObjError::NotFound(_))));
}

#[test]
fn list_is_sorted_and_complete_past_a_thousand_objects() {
    let Some(w) = Weed::start("list_sorted") else {
        return;
    };
    objects_common::list_sorted_and_scoped(&clients(&Arc::new(w)));
}

#[test]
fn delete_removes_and_is_idempotent() {
    let Some(w) = Weed::start("delete") else {
        return;
    };
    objects_common::delete_is_idempotent(&clients(&Arc::new(w)));
}

#[test]
fn two_concurrent_lease_takers_exactly_one_wins_20_rounds() {
    let Some(w) = Weed::start("lease_race") else {
        return;
    };
    objects_common::lease_race(&clients(&Arc::new(w)), 20);
}

#[test]
fn an_acknowledged_object_survives_kill_9_of_the_server() {
    let Some(w) = Weed::start("kill_9") else {
        return;
    };
    if w.external.is_some() {
        eprintln!("kill_9: not run against SLUICE_S3_ENDPOINT (needs a server of its own)");
        return;
    }
    let s = w.store("t/kill");
    let objs: Vec<(String, Vec<u8>)> = (0..8u64)
        .map(|i| {
            let len = if i == 0 {
                4 << 20
            } else {
                4096 * (i as usize) + 13
            };
            (
                ObjName::Segment { seq: i, epoch: 1 }.encode(),
                pattern(100 + i, len),
            )
        })
        .collect();
    for (n, b) in &objs {
        s.put_new(n, b).unwrap();
    }
    let pid = w.pid();
    // SAFETY: kill(2) on the pid our own script started for this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    for _ in 0..100 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // down: a read fails (not an answer from nowhere)
    assert!(matches!(s.get(&objs[1].0), Err(ObjError::Store(_))));
    w.run("start");
    assert_ne!(w.pid(), pid);
    for (n, b) in &objs {
        assert!(&s.get(n).unwrap() == b, "{n} lost or changed by kill -9");
    }
    let names: Vec<_> = s
        .list("seg/")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(names.len(), objs.len());
    // and a create after the restart is still conditional
    assert!(matches!(
        s.put_new(&objs[2].0, b"other"),
        Err(ObjError::Exists(_))
    ));
}
