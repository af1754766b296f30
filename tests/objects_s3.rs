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

use sluice::format::objname::ObjName;
use sluice::lease::{self, Holder, LeaseError};
use sluice::media::objects::{self, ObjError, ObjectStore, S3Objects, S3Options};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Barrier};
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

/// Bytes that differ at every offset and between objects.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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
    let w = Arc::new(w);
    const N: u64 = 1205; // S3 answers 1,000 names a page
                         // created out of order, from 6 threads
    let mut seqs: Vec<u64> = (0..N).map(|i| (i * 7919) % N).collect();
    seqs.reverse();
    let chunks: Vec<Vec<u64>> = seqs
        .chunks(N.div_ceil(6) as usize)
        .map(|c| c.to_vec())
        .collect();
    let hs: Vec<_> = chunks
        .into_iter()
        .map(|c| {
            let w = w.clone();
            std::thread::spawn(move || {
                let s = w.store("t/list");
                for seq in c {
                    let n = ObjName::Segment { seq, epoch: 1 }.encode();
                    s.put_new(&n, &seq.to_le_bytes()).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let s = w.store("t/list");
    // neighbours the prefix must not catch
    s.put_new("segx", b"1").unwrap();
    s.put_new("seg-other/1", b"1").unwrap();
    w.store("t/list2").put_new("seg/x", b"1").unwrap();
    let all = s.list("seg/").unwrap();
    let want: Vec<String> = (0..N)
        .map(|seq| ObjName::Segment { seq, epoch: 1 }.encode())
        .collect();
    let names: Vec<String> = all.iter().map(|o| o.name.clone()).collect();
    assert_eq!(names.len(), want.len(), "listed {} of {N}", names.len());
    assert_eq!(names, want, "the listing is not the sorted set of names");
    assert!(all.iter().all(|o| o.len == 8));
    // a string prefix inside a directory: seq 1000..1099
    let part = s.list("seg/000000000000000010").unwrap();
    assert_eq!(part.len(), 100);
    assert_eq!(
        part[0].name,
        ObjName::Segment {
            seq: 1000,
            epoch: 1
        }
        .encode()
    );
    // the whole root, neighbours included, still sorted
    let root = s.list("").unwrap();
    assert_eq!(root.len() as u64, N + 2);
    assert!(root.windows(2).all(|p| p[0].name < p[1].name));
}

#[test]
fn delete_removes_and_is_idempotent() {
    let Some(w) = Weed::start("delete") else {
        return;
    };
    let s = w.store("t/delete");
    s.put_new("a/1", b"one").unwrap();
    s.put_new("a/2", b"two").unwrap();
    s.delete("a/1").unwrap();
    assert!(matches!(s.get("a/1"), Err(ObjError::NotFound(_))));
    assert!(matches!(s.head("a/1"), Err(ObjError::NotFound(_))));
    s.delete("a/1").unwrap();
    let names: Vec<_> = s.list("a/").unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(names, ["a/2"]);
    assert_eq!(s.get("a/2").unwrap(), b"two");
    // a deleted name can be created again (segment names never are: their
    // sequence numbers only rise; this is the store's behaviour)
    s.put_new("a/1", b"again").unwrap();
    assert_eq!(s.get("a/1").unwrap(), b"again");
}

#[test]
fn two_concurrent_lease_takers_exactly_one_wins_20_rounds() {
    let Some(w) = Weed::start("lease_race") else {
        return;
    };
    let w = Arc::new(w);
    for round in 0..20 {
        let prefix = format!("t/lease/round-{round}");
        let go = Arc::new(Barrier::new(2));
        let hs: Vec<_> = ["host-a", "host-b"]
            .into_iter()
            .map(|host| {
                let (w, go, prefix) = (w.clone(), go.clone(), prefix.clone());
                std::thread::spawn(move || {
                    let s = w.store(&prefix);
                    let me = Holder {
                        host: host.into(),
                        ..Holder::this_process()
                    };
                    go.wait();
                    (host, lease::take(&s, &me, false))
                })
            })
            .collect();
        let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<_> = rs.iter().filter(|(_, r)| r.is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {rs:?}");
        let (won_host, won) = winners[0];
        let won = won.as_ref().unwrap();
        assert_eq!(won.epoch, 1, "round {round}");
        for (host, r) in &rs {
            if let Err(e) = r {
                match e {
                    LeaseError::Held { epoch: 1, holder } => {
                        assert_eq!(&holder.host, won_host, "round {round}: {host} told {e}")
                    }
                    other => panic!("round {round}: {host} lost with {other}"),
                }
                let msg = e.to_string();
                assert!(
                    msg.starts_with(&format!(
                        "volume is held by epoch 1 created by host {won_host}"
                    )),
                    "{msg}"
                );
            }
        }
        let s = w.store(&prefix);
        assert_eq!(lease::epochs(&s).unwrap(), [1], "round {round}");
        assert_eq!(lease::holder_of(&s, 1).unwrap(), won.holder);
    }
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
