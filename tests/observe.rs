//! Observability of a live server (issue 11): `sluice serve --metrics` answers
//! Prometheus text whose counters match what a client did, the access pattern shows
//! random writes in front and sequential appends behind, and `sluice top --json`
//! reports the live rates. Every volume series carries `export="name"`, one per
//! export (issue 17), and a scrape answers within a second whatever other
//! clients of the endpoint do.

use sluice::bench::nbd_client::NbdClient;
use sluice::bench::target::Target;
use sluice::metrics::http;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// `sluice create ARGS` in `dir`, which must succeed.
fn create(dir: &std::path::Path, args: &[&str]) {
    let o = Command::new(BIN)
        .arg("create")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Start `serve --create --metrics 127.0.0.1:0`; returns the server, its NBD URI
/// and its metrics address.
fn start(dir: &std::path::Path) -> (Serve, String, String) {
    start_with(dir, &[])
}

/// `start` with more `serve` arguments.
fn start_with(dir: &std::path::Path, extra: &[&str]) -> (Serve, String, String) {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--create",
            "v.img",
            "--size",
            "64M",
            "--socket",
            "s.sock",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let srv = Serve(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(rest) = l.strip_prefix("sluice: metrics at http://") {
                let _ = tx.send(rest.trim_end_matches("/metrics").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the server never printed its metrics address");
    let sock = dir.join("s.sock");
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    (srv, format!("nbd+unix:///?socket={}", sock.display()), addr)
}

/// The default export's series (its `export=""` label removed) and the server's.
fn scrape(addr: &str) -> HashMap<String, f64> {
    http::of_export(&http::parse(&http::fetch(addr).unwrap()), "")
}

fn random_writes(c: &NbdClient, n: u64, seed: u64) {
    let blocks = (64u64 << 20) / 4096;
    let mut x = seed | 1;
    let buf = vec![0x33u8; 4096];
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.write((x % blocks) * 4096, &buf).unwrap();
    }
}

#[test]
fn metrics_count_what_the_client_did_and_show_random_in_front_sequential_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    random_writes(&c, 3000, 42);
    c.flush().unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..100u64 {
        c.read(i * 4096, &mut buf).unwrap();
    }
    let m = scrape(&addr);
    let v = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no metric {k}"));
    assert_eq!(v("sluice_requests_total{op=\"write\"}"), 3000.0);
    assert_eq!(v("sluice_requests_total{op=\"read\"}"), 100.0);
    assert_eq!(v("sluice_requests_total{op=\"flush\"}"), 1.0);
    assert_eq!(
        v("sluice_request_latency_seconds_count{op=\"write\"}"),
        3000.0
    );
    assert_eq!(
        v("sluice_request_latency_seconds_bucket{op=\"write\",le=\"+Inf\"}"),
        3000.0
    );
    assert_eq!(v("sluice_host_bytes_total{op=\"write\"}"), 3000.0 * 4096.0);
    assert!(v("sluice_media_bytes_total{class=\"user_data\"}") >= 2900.0 * 4096.0);
    assert_eq!(v("sluice_connections"), 1.0);
    assert_eq!(v("sluice_volume_failed"), 0.0, "a healthy volume");
    assert!(v("sluice_write_amplification{window=\"session\"}") >= 1.0);
    // Random in front...
    let hs = v("sluice_access_requests_total{side=\"host\",pattern=\"sequential\"}");
    let hr = v("sluice_access_requests_total{side=\"host\",pattern=\"random\"}");
    assert_eq!(hs + hr, 3100.0, "reads and writes carry data");
    assert!(hr / (hs + hr) > 0.9, "host: {hs} sequential, {hr} random");
    // ...sequential behind.
    let ms = v("sluice_access_requests_total{side=\"media\",pattern=\"sequential\"}");
    let mr = v("sluice_access_requests_total{side=\"media\",pattern=\"random\"}");
    assert!(ms + mr > 0.0);
    assert!(ms / (ms + mr) > 0.7, "media: {ms} sequential, {mr} random");
    c.disconnect();
}

/// A client writing random blocks over and over (each round of `blocks`
/// writes followed by a FLUSH when `flush`), until `stop`. `start` returns
/// once a few rounds are done, so a `top` started after it samples a writer
/// already under way: a loaded CI machine can take longer than a sampling
/// interval to connect one (a 0.3 s interval once saw no write at all).
struct BusyWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl BusyWriter {
    fn start(uri: &str, blocks: u64, flush: bool) -> BusyWriter {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let rounds = std::sync::Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, rounds, uri) = (stop.clone(), rounds.clone(), uri.to_string());
            std::thread::spawn(move || {
                let c = NbdClient::connect(&uri).unwrap();
                let mut seed = 1;
                while !stop.load(Relaxed) {
                    random_writes(&c, blocks, seed);
                    if flush {
                        c.flush().unwrap();
                    }
                    rounds.fetch_add(1, Relaxed);
                    seed += 1;
                }
                c.disconnect();
            })
        };
        let t0 = std::time::Instant::now();
        while rounds.load(Relaxed) < 3 {
            assert!(
                t0.elapsed().as_secs() < 60,
                "the writer made no progress in 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        BusyWriter { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

#[test]
fn top_json_reports_live_rates() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start(dir.path());
    let writer = BusyWriter::start(&uri, 200, false);
    let o = Command::new(BIN)
        .args(["top", &addr, "--json", "--count", "3", "--interval", "0.5"])
        .output()
        .unwrap();
    writer.stop();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert!(r["write_iops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["write_mb_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["segments_total"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["host_sequential_share"].as_f64().unwrap() < 0.2, "{r}");
    }
    // Without --json and without a terminal: one plain line per sample.
    let o = Command::new(BIN)
        .args(["top", &addr, "--count", "1", "--interval", "0.1"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("WA"), "{out}");
}

/// The intent log in `top`: small synchronous writes log instead of sealing, so
/// records per second show, and the log's bytes count in the WA's media bytes.
#[test]
fn top_shows_the_intent_log() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), &["v.img", "--size", "64M", "--intent-log"]);
    let (_srv, uri, addr) = start(dir.path());
    let writer = BusyWriter::start(&uri, 2, true); // 8 KiB, then a FLUSH: one record
    let o = Command::new(BIN)
        .args(["top", &addr, "--json", "--count", "2", "--interval", "1"])
        .output()
        .unwrap();
    writer.stop();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(r["log_records_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["log_mb_s"].as_f64().unwrap() > 0.0, "{r}");
        // each 8 KiB record costs a header block too: the media bytes the WA
        // counts include the log's, so WA now is above the data alone
        assert!(r["wa_interval"].as_f64().unwrap() > 1.0, "{r}");
        assert_eq!(r["log_degraded"].as_f64().unwrap(), 0.0, "{r}");
        // every FLUSH of the writer logged: the logged path has a p99
        assert!(r["flush_log_p99_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let m = scrape(&addr);
    let log = m["sluice_media_bytes_total{class=\"log\"}"];
    assert!(log > 0.0 && log == m["sluice_log_bytes_total"], "{m:?}");
}

/// The FLUSH latency histogram counts every FLUSH a client sent, on the
/// path it took: on a volume with an intent log (version 3 records, data
/// written once in place), a FLUSH logs after small and large writes alike
/// and leaves the chunk open; without an intent log every FLUSH seals.
#[test]
fn flush_latency_histogram_counts_the_flushes_by_path() {
    let count = |m: &HashMap<String, f64>, path: &str| {
        m.get(&format!(
            "sluice_flush_latency_seconds_count{{path=\"{path}\"}}"
        ))
        .copied()
        .unwrap_or_else(|| panic!("no FLUSH latency series for {path}: {m:?}"))
    };
    let big = vec![0x5au8; 64 * 4096];
    // with an intent log
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), &["v.img", "--size", "64M", "--intent-log"]);
    let (srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    let (small_n, big_n) = (30u64, 12u64);
    for i in 0..small_n {
        random_writes(&c, 2, i + 1); // 8 KiB: one record
        c.flush().unwrap();
    }
    for i in 0..big_n {
        // 256 KiB: version 3 logs it too (a version 2 ring sealed it)
        c.write(i * big.len() as u64, &big).unwrap();
        c.flush().unwrap();
    }
    let m = scrape(&addr);
    let (log, seal) = (
        count(&m, "log"),
        m.get("sluice_flush_latency_seconds_count{path=\"seal\"}")
            .copied()
            .unwrap_or(0.0),
    );
    assert_eq!(
        log + seal,
        (small_n + big_n) as f64,
        "every FLUSH is counted once: {log} logged, {seal} sealed"
    );
    // a FLUSH seals only when its record would not fit the ring (16 MiB
    // here) or the log failed: neither happens
    assert_eq!(log, (small_n + big_n) as f64, "{log} logged, {seal} sealed");
    assert_eq!(
        m["sluice_flush_latency_seconds_bucket{path=\"log\",le=\"+Inf\"}"],
        log
    );
    assert!(m["sluice_flush_latency_seconds_sum{path=\"log\"}"] > 0.0);
    assert_eq!(m["sluice_requests_total{op=\"flush\"}"], log + seal);
    // the 256 KiB writes streamed their blocks, and (the open chunk holding
    // nothing unlogged but theirs after each FLUSH) wrote their records with
    // them; a write that filled its chunk to the end leaves no open chunk to
    // log (its seal writes the header)
    assert_eq!(
        m["sluice_streamed_blocks_total"],
        (big_n * 64) as f64,
        "{m:?}"
    );
    let streamed = m["sluice_streamed_records_total"];
    assert!(
        streamed >= (big_n - 2) as f64 && streamed <= big_n as f64,
        "{streamed} streamed records for {big_n} large writes"
    );
    c.disconnect();
    drop(srv);
    // without one, every FLUSH seals
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    for i in 0..small_n {
        random_writes(&c, 2, i + 1);
        c.flush().unwrap();
    }
    let m = scrape(&addr);
    assert_eq!(count(&m, "seal"), small_n as f64);
    assert_eq!(count(&m, "log"), 0.0);
    c.disconnect();
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    let run = |args: &[&str]| {
        let o = Command::new(BIN).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let bash = run(&["completions", "bash"]);
    assert!(
        bash.contains("_sluice") && bash.contains("--metrics"),
        "bash completions"
    );
    assert!(run(&["completions", "zsh"]).contains("#compdef sluice"));
    let man = run(&["man"]);
    assert!(man.contains(".TH sluice 1") && man.contains("serve"));
    let serve = run(&["man", "serve"]);
    assert!(
        serve.contains("sluice\\-serve") && serve.contains("metrics"),
        "{serve}"
    );
    assert!(!Command::new(BIN)
        .args(["man", "nope"])
        .status()
        .unwrap()
        .success());
}

#[test]
fn info_shows_the_live_counters_of_the_server_holding_the_volume() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    random_writes(&c, 500, 9);
    c.flush().unwrap();
    let o = Command::new(BIN)
        .args(["info", "v.img", "--json", "--metrics", &addr])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["in_use"], true);
    assert_eq!(
        v["live"]["sluice_host_bytes_total{op=\"write\"}"],
        500.0 * 4096.0
    );
    let o = Command::new(BIN)
        .args(["info", "v.img", "--metrics", &addr])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("live          WA"), "{out}");
    c.disconnect();
}

/// 4 KiB writes at blocks `first..first + n` (modulo the 64 MiB volume):
/// random bytes, except that one block in `zero_tail_every` on average (0:
/// none) is half zeros (kept by LZ4).
fn data_writes(c: &NbdClient, first: u64, n: u64, seed: u64, zero_tail_every: u64) {
    let blocks = (64u64 << 20) / 4096;
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; 4096];
    for i in 0..n {
        for w in buf.chunks_exact_mut(8) {
            w.copy_from_slice(&next().to_le_bytes());
        }
        if zero_tail_every > 0 && next() % zero_tail_every == 0 {
            buf[2048..].fill(0);
        }
        c.write(((first + i) % blocks) * 4096, &buf).unwrap();
    }
}

/// The number just before the first `unit` in `out`.
fn number_before(out: &str, unit: &str) -> f64 {
    let end = out
        .find(unit)
        .unwrap_or_else(|| panic!("no {unit:?} in {out}"));
    let start = out[..end]
        .rfind(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .map_or(0, |k| k + 1);
    out[start..end]
        .parse()
        .unwrap_or_else(|e| panic!("{:?} before {unit:?}: {e}", &out[start..end]))
}

/// A compressed volume stores an incompressible user stream in direct
/// chunks (part of the skipped share): `top` (plain line and JSON) and `info`
/// (live line) show that share beside the skipped share. First a stream with
/// a compressible block now and then (skipped, never direct), then one of
/// random data only (mostly direct).
#[test]
fn info_and_top_show_the_share_stored_in_direct_chunks() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), &["v.img", "--size", "64M", "--compress", "lz4"]);
    let (_srv, uri, addr) = start(dir.path());

    // top, while a client writes the mixed stream
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, uri) = (stop.clone(), uri.clone());
        std::thread::spawn(move || {
            let c = NbdClient::connect(&uri).unwrap();
            let mut seed = 11;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                data_writes(&c, seed * 200, 200, seed, 4);
                seed += 1;
            }
            c.disconnect();
        })
    };
    let top = |json: bool| {
        let mut args = vec!["top", &addr, "--count", "1", "--interval", "0.5"];
        if json {
            args.push("--json");
        }
        let o = Command::new(BIN).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let plain = top(false);
    let row: serde_json::Value = serde_json::from_str(top(true).trim()).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let after = |key: &str| {
        let at = plain
            .find(key)
            .unwrap_or_else(|| panic!("no {key} in {plain}"));
        number_before(&plain[at..], "%")
    };
    assert!(after(" skipped=") >= 40.0, "{plain}");
    assert_eq!(after(" direct="), 0.0, "{plain}");
    assert!(
        row["compress_skipped_share"].as_f64().unwrap() >= 0.4,
        "{row}"
    );
    assert_eq!(row["compress_direct_share"].as_f64(), Some(0.0), "{row}");

    // info, after random data only
    let c = NbdClient::connect(&uri).unwrap();
    data_writes(&c, 0, 3000, 5, 0);
    c.flush().unwrap();
    let m = scrape(&addr);
    let (direct, host) = (
        m["sluice_compress_direct_blocks_total"],
        m["sluice_compress_host_bytes_total"] / 4096.0,
    );
    assert!(direct >= 2000.0, "{direct} blocks direct");
    let o = Command::new(BIN)
        .args(["info", "v.img", "--metrics", &addr])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("live          compression:"))
        .unwrap_or_else(|| panic!("no compression line in {out}"));
    let shown = number_before(line, "% in direct chunks");
    let want = 100.0 * direct / host;
    assert!((shown - want).abs() < 0.051, "{line}: {want:.1}% expected");
    assert!(shown < number_before(line, "% skipped"), "{line}");
    c.disconnect();
}

#[test]
fn bench_json_carries_the_access_pattern_random_in_front_sequential_behind() {
    use sluice::bench::target::{self, OpenSpec, TargetSpec};
    use sluice::bench::{self, BenchConfig, Workload};
    sluice::metrics::enable();
    let dir = tempfile::tempdir().unwrap();
    let mut c = BenchConfig::defaults(Workload::Mix);
    c.region_bytes = 16 << 20;
    // (1 s, not 0.2: a short run on a loaded machine wrote ~30 chunks
    // beside the ~30 small metadata requests of create, mount and close,
    // and the media's sequential share fell to 0.38-0.40; 1 s gave
    // 0.63-0.67 with four busy loops beside it)
    c.seconds = 1.0;
    c.threads = vec![2];
    let spec = format!("sluice:{}", dir.path().join("a.vol").display());
    let t = target::open(
        &TargetSpec::parse(&spec).unwrap(),
        &OpenSpec {
            create_size: 128 << 20,
            overprovision: 0.2,
            writes: true,
            force: false,
        },
    )
    .unwrap();
    let r = bench::run_target(&c, &spec, &*t, &bench::run::Ctx::quiet(5));
    t.close().unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    let ap = r
        .access_pattern
        .clone()
        .expect("no access pattern for an in-process target");
    assert!(ap.host.requests > 100, "{ap:?}");
    assert!(ap.host.sequential_share < 0.3, "host {:?}", ap.host);
    assert!(ap.media.requests > 0);
    // The 16 MiB region lives in a 128 MiB volume: on a volume no larger than the
    // region, GC, barriers and checkpoints of 4 MiB segments dominate the media
    // writes (0.42 sequential in one run), which is not what a real volume shows.
    // A small volume still switches segments and writes checkpoints often, so
    // the share stays below a real volume's; it is still far above the host's.
    assert!(
        ap.media.sequential_share > 0.5
            && ap.media.sequential_share > ap.host.sequential_share + 0.3,
        "media {:?} host {:?}",
        ap.media,
        ap.host
    );
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["access_pattern"]["media"]["size_bytes"].is_array());
}

/// Lifetime counters outlive the server: after it stops, `info` (a read-only
/// mount) shows what clients wrote and the lifetime WA, from the checkpoint.
#[test]
fn info_shows_lifetime_counters_after_the_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    random_writes(&c, 700, 4);
    c.flush().unwrap();
    let live = scrape(&addr);
    assert_eq!(
        live["sluice_lifetime_bytes_total{class=\"host_write\"}"],
        700.0 * 4096.0
    );
    let classes: f64 = (0..3)
        .map(|k| live[&format!("sluice_gc_class_blocks_moved_total{{gc_class=\"{k}\"}}")])
        .sum();
    assert_eq!(
        classes,
        live["sluice_gc_blocks_moved_total{class=\"data\"}"]
            + live["sluice_gc_blocks_moved_total{class=\"virtual\"}"]
    );
    // the housekeeper's counters are exported (each barrier flushes at
    // least three times; every kind of work has its own series)
    assert!(
        live["sluice_reuse_barrier_flushes_total"] >= 3.0 * live["sluice_reuse_barriers_total"],
        "barrier flushes"
    );
    for work in ["gc_read", "gc_submit", "barrier", "checkpoint"] {
        let k = format!("sluice_housekeeper_seconds_total{{work=\"{work}\"}}");
        assert!(live.get(&k).is_some_and(|s| *s >= 0.0), "{k} missing");
    }
    c.disconnect();
    drop(srv); // SIGTERM: clean close, final checkpoint
    let o = Command::new(BIN)
        .args(["info", "v.img", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let lt = &v["stats"]["lifetime"];
    assert_eq!(lt["host_write_bytes"], 700 * 4096, "{lt}");
    assert!(lt["media_user_data_bytes"].as_u64().unwrap() >= 700 * 4096);
    assert!(v["stats"]["lifetime_write_amplification"].as_f64().unwrap() >= 1.0);
    // host space: st_blocks * 512 of the sparse file, at least what was written
    let used = v["host_bytes_used"].as_u64().unwrap();
    let media = v["media_bytes"].as_u64().unwrap();
    assert!(
        used >= 700 * 4096 && used <= media + (1 << 20),
        "{used} of {media}"
    );
    let o = Command::new(BIN)
        .args(["info", "v.img"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("lifetime      WA "), "{out}");
    assert!(out.contains("2.7 MiB written by clients"), "{out}");
    assert!(out.contains("host space    "), "{out}");
}

/// `--no-access-pattern` keeps the other metrics and leaves the access-pattern
/// counters at zero (scripts/bench-metrics.sh measures their cost apart with it).
#[test]
fn no_access_pattern_turns_only_the_pattern_counters_off() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start_with(dir.path(), &["--no-access-pattern"]);
    let c = NbdClient::connect(&uri).unwrap();
    random_writes(&c, 300, 5);
    c.flush().unwrap();
    let m = scrape(&addr);
    assert_eq!(m["sluice_requests_total{op=\"write\"}"], 300.0);
    let pattern: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("sluice_access_requests_total"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        pattern, 0.0,
        "access-pattern counters counted with --no-access-pattern"
    );
    c.disconnect();
}

/// Issue 17: with several exports, every export's volume counters are shown,
/// each labelled with its export name; `sluice top --export` picks one.
#[test]
fn every_export_has_its_own_labelled_volume_counters() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), &["w.img", "--size", "32M"]);
    let (_srv, _uri, addr) = start_with(dir.path(), &["-x", "a", "--export", "b=w.img"]);
    let b = format!(
        "nbd+unix:///b?socket={}",
        dir.path().join("s.sock").display()
    );
    let c = NbdClient::connect(&b).unwrap();
    for i in 0..40u64 {
        c.write(i * 4096, &[7u8; 4096]).unwrap();
    }
    c.flush().unwrap();
    let all: HashMap<String, f64> = http::parse(&http::fetch(&addr).unwrap())
        .into_iter()
        .collect();
    let v = |k: &str| *all.get(k).unwrap_or_else(|| panic!("no {k} in the scrape"));
    assert_eq!(
        v("sluice_host_bytes_total{export=\"b\",op=\"write\"}"),
        40.0 * 4096.0
    );
    assert_eq!(v("sluice_host_bytes_total{export=\"a\",op=\"write\"}"), 0.0);
    assert_eq!(v("sluice_logical_bytes{export=\"a\"}"), 64.0 * 1048576.0);
    assert_eq!(v("sluice_logical_bytes{export=\"b\"}"), 32.0 * 1048576.0);
    let w = std::fs::canonicalize(dir.path().join("w.img")).unwrap();
    assert_eq!(
        v(&format!(
            "sluice_export_info{{export=\"b\",path=\"{}\"}}",
            w.display()
        )),
        1.0
    );
    // No volume series without its export label.
    for k in all.keys() {
        if k.starts_with("sluice_segments") || k.starts_with("sluice_lifetime") {
            assert!(k.contains("export=\""), "{k}");
        }
    }
    let top = |export: &str| {
        Command::new(BIN)
            .args(["top", &addr, "--json", "--count", "1", "--interval", "0.1"])
            .args(["--export", export])
            .output()
            .unwrap()
    };
    let o = top("b");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let row: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(row["logical_bytes"], 32.0 * 1048576.0);
    let o = top("nope");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no export \"nope\""));
    // `info --metrics` shows the live counters of the export serving that file.
    let o = Command::new(BIN)
        .args(["info", "w.img", "--json", "--metrics", &addr])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        j["live"]["sluice_host_bytes_total{op=\"write\"}"],
        40.0 * 4096.0
    );
    c.disconnect();
}

/// Issue 17: a scrape answers within a second while 100 other connections
/// trickle their request one byte a second and 10 more send nothing (the old
/// endpoint served one connection at a time with a per-read timeout: the first
/// trickler blocked every scrape, ten silent ones blocked it for 20 s).
#[test]
fn a_scrape_answers_within_a_second_while_100_connections_trickle() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (_srv, _uri, addr) = start(dir.path());
    let mut slow: Vec<std::net::TcpStream> = (0..100)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let _silent: Vec<std::net::TcpStream> = (0..10)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let req = b"GET /metrics HTTP/1.0\r\n\r\n";
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < req.len() {
                for s in &mut slow {
                    let _ = s.write_all(&req[i..i + 1]);
                }
                i += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            slow
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let t0 = Instant::now();
        let text = http::fetch(&addr).unwrap();
        let took = t0.elapsed();
        assert!(text.contains("sluice_host_bytes_total"));
        worst = worst.max(took);
        std::thread::sleep(Duration::from_millis(700));
    }
    // the tricklers were still open and trickling while the scrapes ran
    assert!(!trickler.is_finished());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(trickler.join().unwrap());
    eprintln!("slowest scrape among 100 trickling connections: {worst:?}");
    assert!(worst < Duration::from_secs(1), "a scrape took {worst:?}");
}

/// `serve --discard off` is accepted and gives nothing back (the default is on;
/// what discard does is tested in tests/host_full.rs).
#[test]
fn serve_discard_off_gives_nothing_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start_with(dir.path(), &["--discard", "off"]);
    let c = NbdClient::connect(&uri).unwrap();
    random_writes(&c, 300, 7);
    c.flush().unwrap();
    let m = scrape(&addr);
    assert_eq!(m["sluice_discarded_bytes_total"], 0.0);
    assert_eq!(m["sluice_volume_failed"], 0.0);
    c.disconnect();
}

/// Large NBD WRITEs (16 blocks or more) are received into 4 KiB-aligned
/// buffers, so the volume streams them to their places from there without a
/// copy; what a client reads back is what it wrote, at every size and
/// offset (one not on a block boundary: a read-modify-write).
#[test]
fn large_nbd_writes_stream_from_the_received_buffer_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (_srv, uri, addr) = start(dir.path());
    let c = NbdClient::connect(&uri).unwrap();
    // (offset, bytes): 64 KiB, 1 MiB, 16 blocks + 1 sector at an offset
    // one sector into a block, 4 MiB
    let writes = [
        (0u64, 64 << 10),
        (1 << 20, 1 << 20),
        (3 * (1 << 20) + 512, (64 << 10) + 512),
        (8 << 20, 4 << 20),
    ];
    let pattern = |off: u64, len: usize| -> Vec<u8> {
        // every 512 B sector differs (its own offset in it), never all zeros
        (0..len as u64)
            .map(|i| {
                let a = off + i;
                ((a >> 9) as u8).wrapping_mul(13) ^ (a as u8) ^ 0x80
            })
            .collect()
    };
    for &(off, len) in &writes {
        c.write(off, &pattern(off, len)).unwrap();
    }
    c.flush().unwrap();
    for &(off, len) in &writes {
        let mut back = vec![0u8; len];
        c.read(off, &mut back).unwrap();
        assert!(
            back == pattern(off, len),
            "the {len}-byte write at {off} reads back different"
        );
    }
    let m = scrape(&addr);
    let aligned_blocks = ((64 << 10) + (1 << 20) + (4 << 20)) / 4096;
    assert!(
        m["sluice_streamed_blocks_total"] >= aligned_blocks as f64,
        "{m:?}"
    );
    assert_eq!(
        m["sluice_streamed_copied_blocks_total"], 0.0,
        "a large WRITE's payload was copied before it streamed"
    );
    c.disconnect();
}
