//! `sluice bench` on a volume in an object store, in process
//! (`--target sluice-objects:URL,CACHEDIR`, issue 21, docs/objects.md
//! §4.13): the `durable` workload in the local-log and the store-durable
//! mode against a real S3 server (SeaweedFS `weed mini`, started by
//! scripts/s3-server.sh on free ports, one per test, stopped by a guard's
//! Drop), the volume lock, and the refusals `create` makes (a prefix holding
//! objects) and every write target makes (a volume holding live data). No
//! mocks. A server that cannot start fails the test under CI (a SKIP line
//! otherwise: tests/weed_common).

mod weed_common;

use sluice::media::FileMedia;
use std::path::Path;
use std::process::{Command, Output};
use weed_common::{Weed, KEY, SECRET};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// What the tests here do with their server beyond starting it.
impl Weed {
    /// `sluice bench durable` with this server's endpoint and credentials
    /// (in the environment, as `create` takes them) and `args`.
    fn bench(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args([
                "bench", "durable", "--quiet", "--size", "64M", "--region", "32M",
            ])
            .args(["--endpoint", &self.endpoint()])
            .args(args)
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("run sluice bench")
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn target(prefix: &str, cache: &Path, opts: &str) -> String {
    format!(
        "--target=sluice-objects:s3://sluice/{prefix},{}{opts}",
        cache.display()
    )
}

/// The `durable` phase of target `k` in a `--json` report.
fn phase(j: &serde_json::Value, k: usize) -> &serde_json::Value {
    let p = &j["targets"][k]["phases"][0];
    assert_eq!(p["name"], "durable", "{p}");
    p
}

#[test]
fn durable_writes_on_a_volume_in_s3_in_both_modes_with_the_store_counters() {
    let Some(w) = Weed::start("bench durable on S3, both modes") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (local, durable) = (tmp.path().join("local"), tmp.path().join("durable"));
    let json = tmp.path().join("r.json");
    let out = w.bench(&[
        "--threads",
        "4",
        "--seconds",
        "0.6",
        "--json",
        json.to_str().unwrap(),
        &target("bl", &local, ""),
        &target("bd", &durable, ";flush-to=store"),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for k in 0..2 {
        let p = phase(&j, k);
        let ops = p["ops"].as_u64().unwrap();
        assert!(ops > 0, "{p}");
        let d = &p["durable"];
        // every counted write was followed by its own FLUSH
        assert_eq!(d["host_flushes"].as_u64(), Some(ops), "{d}");
        assert!(d["media_flushes"].as_u64().unwrap() >= 1, "{d}");
        assert!(p["flush_latency"]["p99_us"].as_f64().unwrap() > 0.0, "{p}");
        assert!(
            d["store"].is_object(),
            "a volume in a store reports it: {d}"
        );
    }
    let (l, s) = (&phase(&j, 0)["durable"], &phase(&j, 1)["durable"]);
    // local-log mode: the ring (create's default), no log objects
    assert!(l["log_records"].as_u64().unwrap() > 0, "{l}");
    assert_eq!(l["store"]["log_puts"].as_u64(), Some(0), "{l}");
    // store-durable: each FLUSH group one log object, the FLUSH answered once it is stored
    let puts = s["store"]["log_puts"].as_u64().unwrap();
    assert!(puts > 0, "{s}");
    assert!(puts <= s["media_flushes"].as_u64().unwrap() + 1, "{s}");
    assert!(s["store"]["log_put_ms"].as_f64().unwrap() > 0.0, "{s}");
    assert!(t.contains("FLUSH log PUTs"), "{t}");
    // the close finished each store (uploads, lease released), as serve's
    assert!(
        t.contains("every segment uploaded; epoch") && t.contains("released"),
        "{t}"
    );
    assert!(j["targets"][1]["description"]
        .as_str()
        .unwrap()
        .contains("store-durable"));
    // a second run on a volume that holds live data is refused without --force
    let again = w.bench(&[
        "--threads",
        "1",
        "--seconds",
        "0.2",
        &target("bl", &local, ""),
    ]);
    let t = text(&again);
    assert!(!again.status.success(), "{t}");
    assert!(t.contains("live data") && t.contains("--force"), "{t}");
    // the mode is the volume's: a store-durable volume is not benched as local-log
    let wrong = w.bench(&[
        "--force",
        "--threads",
        "1",
        "--seconds",
        "0.2",
        &target("bd", &durable, ""),
    ]);
    let t = text(&wrong);
    assert!(!wrong.status.success(), "{t}");
    assert!(t.contains("--flush-to"), "{t}");
}

#[test]
fn the_objects_target_takes_the_volume_lock_and_refuses_a_prefix_holding_a_volume() {
    let Some(w) = Weed::start("bench on S3: the volume lock and a prefix holding a volume") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let short = ["--threads", "2", "--seconds", "0.2"];
    let first = w.bench(&[&short[..], &[&target("p", &a, "")]].concat());
    assert!(first.status.success(), "{}", text(&first));
    // another opener holds the cache directory's volume: refused, --force or not
    let held = FileMedia::open(&a.join("volume"), false).unwrap();
    let out = w.bench(&[&short[..], &["--force", &target("p", &a, "")]].concat());
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("is in use by"), "{t}");
    drop(held);
    // a new cache directory on a prefix that holds a volume: create's refusal
    let out = w.bench(&[&short[..], &[&target("p", &b, "")]].concat());
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("holds") && t.contains("object(s) already"),
        "{t}"
    );
    assert!(
        !b.join("volume").exists(),
        "a refused create leaves no volume behind"
    );
    // --force creates over it, as `create --force`
    let out = w.bench(&[&short[..], &["--force", &target("p", &b, "")]].concat());
    assert!(out.status.success(), "{}", text(&out));
}
