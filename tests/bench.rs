//! Smoke runs of every `sluice bench` workload against a small in-process sluice
//! volume and a raw O_DIRECT file, an NBD run against qemu-nbd or nbdkit when one is
//! installed, Ctrl-C behaviour, and the CLI's safety refusal. Each run is a fraction
//! of a second per phase: these check plumbing and invariants, not speed.

use sluice::bench::run::Ctx;
use sluice::bench::target::{self, OpenSpec, Target, TargetSpec};
use sluice::bench::{self, BenchConfig, Report, Workload};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn small(w: Workload) -> BenchConfig {
    let mut c = BenchConfig::defaults(w);
    c.region_bytes = 48 * MIB;
    c.seconds = 0.25;
    c.duration_s = 1.2;
    c.interval_s = 0.2;
    c.slog_settle_s = 0.0;
    c.slog_batch = 8;
    match w {
        Workload::Grid => {
            c.sizes = vec![512, 4096, 256 << 10];
            c.threads = vec![1, 4];
            c.seconds = 0.15;
        }
        Workload::Slog => {
            c.sizes = vec![4096, 64 << 10, 512 << 10];
            c.seconds = 0.15;
        }
        _ => c.threads = vec![4],
    }
    c
}

fn open(spec: &str) -> Arc<dyn Target> {
    target::open(
        &TargetSpec::parse(spec).unwrap(),
        &OpenSpec {
            create_size: 64 * MIB,
            overprovision: 0.2,
            writes: true,
            force: false,
        },
    )
    .unwrap()
}

fn run_all(dir: &Path, w: Workload) -> Report {
    let cfg = small(w);
    let ctx = Ctx::quiet(7);
    let mut rep = Report::new(&cfg);
    for spec in [
        format!("sluice:{}", dir.join(format!("{}.vol", w.name())).display()),
        format!("file:{}", dir.join(format!("{}.raw", w.name())).display()),
    ] {
        let t = open(&spec);
        let r = bench::run_target(&cfg, &spec, &*t, &ctx);
        t.close().unwrap();
        assert!(r.error.is_none(), "{spec}: {:?}", r.error);
        rep.targets.push(r);
    }
    // Everything renders and serialises.
    let text = bench::report::render(&rep);
    assert!(!text.is_empty());
    let json = serde_json::to_string(&rep).unwrap();
    assert!(json.contains("\"phases\""));
    let svg = bench::plot::svg(&rep).unwrap();
    assert!(svg.contains("<svg"));
    rep
}

#[test]
fn grid_smoke_fills_the_seed_table() {
    // the access-pattern counters (as `sluice bench` turns them on)
    sluice::metrics::enable();
    let dir = tempfile::tempdir().unwrap();
    let rep = run_all(dir.path(), Workload::Grid);
    // one panel per request type and thread count; the access pattern of the
    // in-process sluice target, host against media
    let svg = bench::plot::svg(&rep).unwrap();
    for title in [
        "random read, 1 thread",
        "random write, 1 thread",
        "Sequential share of requests",
        "Seek distance of random requests",
        "Request size",
    ] {
        assert!(svg.contains(title), "no panel {title:?} in the grid chart");
    }
    assert!(
        svg.contains(".vol host") && svg.contains(".vol media"),
        "no host and media series in the legend"
    );
    for t in &rep.targets {
        let pre = t.prefill.as_ref().expect("grid prefills");
        assert_eq!(pre.bytes, 48 * MIB, "prefill writes the region once");
        // 3 sizes x 2 thread counts x read/write
        assert_eq!(t.phases.len(), 12);
        for p in &t.phases {
            assert!(p.complete, "{} {}: {:?}", t.target, p.name, p);
            if p.skipped.is_none() {
                assert!(p.ops > 0 && p.iops > 0.0 && p.latency.p99_us > 0.0);
                assert_eq!(p.bytes, p.ops * p.block_bytes);
                // what each operation cost in CPU, next to its speed
                let c = p.cpu.expect("a measured phase reports its CPU");
                assert!(c.user_s + c.sys_s > 0.0, "{c:?}");
                let per_op = (c.user_s + c.sys_s) * 1e6 / p.ops as f64;
                assert!(
                    (c.us_per_op - per_op).abs() < 1e-6 * per_op.max(1.0),
                    "{c:?}"
                );
            }
        }
        assert!(t.find("randwrite", 4096, 4).unwrap().measured());
    }
    let text = bench::report::grid_table(&rep.targets[0]);
    assert!(text.contains("Random Read Tests") && text.contains("Random Write Tests"));
    assert!(text.contains("4 Threads") && text.contains("1 Thread"));
    assert!(text.lines().any(|l| l.starts_with("256K")));
    let all = bench::report::render(&rep);
    assert!(all.contains("CPU us per operation"), "{all}");
    // in-process sluice reports write amplification, raw files do not
    assert!(rep.targets[0].write_amplification.is_some());
    assert!(rep.targets[1].write_amplification.is_none());
}

#[test]
fn slog_smoke_flushes_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let rep = run_all(dir.path(), Workload::Slog);
    let t = &rep.targets[0];
    assert_eq!(t.phases.len(), 3);
    for p in &t.phases {
        assert!(p.ops >= 8, "at least one batch per size: {}", p.ops);
        assert_eq!(p.ops % 8, 0, "whole batches only");
    }
    let st = t.stats_after.as_ref().unwrap();
    let before = t.stats_before.as_ref().unwrap();
    let writes: u64 = t.phases.iter().map(|p| p.ops).sum();
    assert!(
        st.host_flushes - before.host_flushes >= writes,
        "one flush per write"
    );
    let text = bench::report::render(&rep);
    assert!(text.contains("usec/IO") && text.contains("Mbytes/s"));
}

#[test]
fn steady_smoke_samples_intervals_and_judges() {
    let dir = tempfile::tempdir().unwrap();
    let rep = run_all(dir.path(), Workload::Steady);
    for t in &rep.targets {
        let p = &t.phases[0];
        let full = p.samples.iter().filter(|s| !s.partial).count();
        assert!((4..=7).contains(&full), "{} samples", p.samples.len());
        let ss = t.steady_state.as_ref().unwrap();
        assert_eq!(ss.window, 5);
        let sum: u64 = p.samples.iter().map(|s| s.ops).sum();
        assert_eq!(sum, p.ops, "samples add up to the phase");
    }
    // WA per interval for sluice only
    assert!(rep.targets[0].phases[0]
        .samples
        .iter()
        .any(|s| s.write_amplification.is_some()));
    assert!(rep.targets[1].phases[0]
        .samples
        .iter()
        .all(|s| s.write_amplification.is_none()));
}

#[test]
fn mix_smoke_normalises() {
    let dir = tempfile::tempdir().unwrap();
    let rep = run_all(dir.path(), Workload::Mix);
    for t in &rep.targets {
        let m = t.mix.as_ref().unwrap();
        let n = m.normalised_iops.unwrap();
        assert!(n > 0.0 && n <= m.read_iops.max(m.write_iops) + 1e-9);
        assert!(n >= m.read_iops.min(m.write_iops) - 1e-9);
    }
    assert!(bench::report::render(&rep).contains("composite"));
}

#[test]
fn ceiling_and_fill_smoke() {
    let dir = tempfile::tempdir().unwrap();
    let rep = run_all(dir.path(), Workload::Ceiling);
    for t in &rep.targets {
        let c = t.ceiling.as_ref().unwrap();
        assert!(c.seq_write_mib_s > 0.0 && c.rand_write_iops > 0.0);
    }
    let rep = run_all(dir.path(), Workload::Fill);
    for t in &rep.targets {
        assert_eq!(t.phases[0].bytes, 48 * MIB);
        assert!(t.phases[0].complete);
    }
}

#[test]
fn stop_flag_returns_partial_results_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small(Workload::Steady);
    cfg.duration_s = 30.0;
    cfg.interval_s = 0.1;
    let ctx = Ctx::quiet(1);
    let stop = ctx.stop.clone();
    let t = open(&format!("sluice:{}", dir.path().join("v").display()));
    let s = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        stop.store(true, Ordering::SeqCst);
    });
    let t0 = Instant::now();
    let r = bench::run_target(&cfg, "x", &*t, &ctx);
    s.join().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    let p = &r.phases[0];
    assert!(!p.complete);
    assert!(p.ops > 0 && !p.samples.is_empty());
    t.close().unwrap();
}

fn which(bin: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn nbd_smoke_against_qemu_nbd_or_nbdkit() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("nbd.raw");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let sock = dir.path().join("nbd.sock");
    let child = if which("qemu-nbd") {
        std::process::Command::new("qemu-nbd")
            .args(["-f", "raw", "-x", "bench", "--cache=none", "-k"])
            .arg(&sock)
            .arg(&img)
            .spawn()
    } else if which("nbdkit") {
        std::process::Command::new("nbdkit")
            .args(["-f", "-e", "bench", "-U"])
            .arg(&sock)
            .arg("file")
            .arg(&img)
            .spawn()
    } else {
        if std::env::var_os("CI").is_some() {
            panic!("neither qemu-nbd nor nbdkit is installed (CI is set: a test that cannot run fails)");
        }
        eprintln!("SKIP: neither qemu-nbd nor nbdkit is installed");
        return;
    };
    let _child = Child(child.unwrap());
    let t0 = Instant::now();
    while !sock.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let spec = format!("nbd:nbd+unix:///bench?socket={}", sock.display());
    let t = open(&spec);
    assert_eq!(t.size(), 64 * MIB);
    // round trip across pipelined requests
    let mut w = sluice::media::AlignedBuf::new(8192);
    w.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8);
    t.write(4096, &w).unwrap();
    t.flush().unwrap();
    let mut r = sluice::media::AlignedBuf::new(8192);
    t.read(4096, &mut r).unwrap();
    assert_eq!(&r[..], &w[..]);
    let cfg = small(Workload::Mix);
    let rep = bench::run_target(&cfg, &spec, &*t, &Ctx::quiet(3));
    assert!(rep.error.is_none(), "{:?}", rep.error);
    assert!(rep.mix.unwrap().normalised_iops.unwrap() > 0.0);
    t.close().unwrap();
}

#[test]
fn cli_refuses_to_overwrite_data_and_explains() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("precious.img");
    std::fs::write(&f, vec![0x42u8; 1 << 20]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "mix", "--quiet", "--target"])
        .arg(format!("file:{}", f.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&f).unwrap(),
        vec![0x42u8; 1 << 20],
        "untouched"
    );
    // also for a sluice target (it would be formatted)
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "steady", "--quiet", "--target"])
        .arg(format!("sluice:{}", f.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    // bad target and bad flags are errors, not panics
    for args in [
        vec!["bench", "grid", "--target", "bogus"],
        vec!["bench", "grid", "--target", "file:/x", "--sizes", "100"],
        vec!["bench", "steady", "--target", "file:/x", "--duration", "0"],
        vec!["bench", "warp", "--target", "file:/x"],
        vec!["bench", "grid", "--target", "file:/x", "--plot", "a.png"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(1) | Some(2)),
            "{args:?}: {:?}",
            out
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn cli_runs_end_to_end_with_json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let svg = dir.path().join("r.svg");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench",
            "grid",
            "--quiet",
            "--size",
            "32M",
            "--region",
            "16M",
            "--overprovision",
            "25",
            "--sizes",
            "4K,64K",
            "--threads",
            "1,2",
            "--seconds",
            "0.1",
        ])
        .arg("--target")
        .arg(format!("sluice:{}", dir.path().join("v.img").display()))
        .arg("--target")
        .arg(format!("file:{}", dir.path().join("r.img").display()))
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Random Write Tests") && text.contains("IOPS ratio"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["targets"].as_array().unwrap().len(), 2);
    assert_eq!(v["targets"][0]["phases"].as_array().unwrap().len(), 8);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    // the sluice volume was closed cleanly and is reopened by the next run
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["info", "--json"])
        .arg(dir.path().join("v.img"))
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(info["clean"], serde_json::Value::Bool(true));
}

/// Forwards to a target and counts how the workload called it.
struct Counting {
    inner: Arc<dyn Target>,
    /// (thread, writes) of every `write_many` call.
    many: parking_lot::Mutex<Vec<(std::thread::ThreadId, usize)>>,
    writes: std::sync::atomic::AtomicU64,
}

impl Target for Counting {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn min_io(&self) -> u64 {
        self.inner.min_io()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> anyhow::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write(offset, buf)
    }
    fn flush(&self) -> anyhow::Result<()> {
        self.inner.flush()
    }
    fn engine_stats(&self) -> Option<sluice::Stats> {
        self.inner.engine_stats()
    }
    fn batches(&self) -> bool {
        self.inner.batches()
    }
    fn write_many(&self, writes: &[(u64, &[u8])]) -> anyhow::Result<()> {
        self.many
            .lock()
            .push((std::thread::current().id(), writes.len()));
        self.inner.write_many(writes)
    }
}

#[test]
fn batch_target_submits_a_random_write_phase_as_batches_from_one_thread() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("sluice-batch:{}", dir.path().join("b.vol").display());
    let inner = open(&spec);
    assert!(inner.batches());
    let t = Counting {
        inner,
        many: Default::default(),
        writes: Default::default(),
    };
    let cfg = small(Workload::Ceiling); // 4 outstanding
    let r = bench::run_target(&cfg, &spec, &t, &Ctx::quiet(7));
    assert!(r.error.is_none(), "{:?}", r.error);
    let rand = r.phases.iter().find(|p| p.name == "randwrite").unwrap();
    let seq = r.phases.iter().find(|p| p.name == "seqwrite").unwrap();
    let many = t.many.lock().clone();
    assert!(!many.is_empty(), "no write_many call");
    assert!(many.iter().all(|&(_, n)| n == 4), "batches of the depth");
    assert!(many.iter().all(|&(id, _)| id == many[0].0), "one thread");
    assert_eq!(
        many.len() as u64 * 4,
        rand.ops,
        "every batched write counted"
    );
    // the sequential phase (1 outstanding) writes one at a time
    assert_eq!(t.writes.load(Ordering::Relaxed), seq.ops);
    // every write reached the engine
    let host = r.stats_after.as_ref().unwrap().host_write_bytes
        - r.stats_before.as_ref().unwrap().host_write_bytes;
    assert_eq!(host, rand.bytes + seq.bytes);
    t.inner.close().unwrap();
}

#[test]
fn durable_smoke_counts_each_write_once_its_flush_returned_on_every_target_kind() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small(Workload::Durable);
    cfg.threads = vec![4, 1];
    let ctx = Ctx::quiet(7);
    let mut rep = Report::new(&cfg);
    for spec in [
        format!("sluice:{}", dir.path().join("d.vol").display()),
        format!("sluice-ilog:{}", dir.path().join("i.vol").display()),
        format!("file:{}", dir.path().join("d.raw").display()),
    ] {
        let t = open(&spec);
        let r = bench::run_target(&cfg, &spec, &*t, &ctx);
        t.close().unwrap();
        assert!(r.error.is_none(), "{spec}: {:?}", r.error);
        assert_eq!(r.phases.len(), 2, "{spec}: one phase per thread count");
        for (p, th) in r.phases.iter().zip([4usize, 1]) {
            assert_eq!((p.name.as_str(), p.threads), ("durable", th), "{spec}");
            assert!(p.ops > 0 && p.complete, "{spec}: {p:?}");
            let fl = p.flush_latency.as_ref().expect("FLUSH latency");
            assert!(fl.p50_us > 0.0 && fl.p99_us >= fl.p50_us, "{spec}: {fl:?}");
            // the FLUSH is part of each op's time
            assert!(p.latency.mean_us >= fl.mean_us, "{spec}");
            assert!(p.cpu.unwrap().us_per_op > 0.0);
            if spec.starts_with("file:") {
                assert!(p.durable.is_none(), "a raw file has no engine");
                continue;
            }
            let d = p.durable.as_ref().expect("engine counters");
            assert_eq!(d.writes, p.ops);
            // every counted write had its own FLUSH, each FLUSH was a write's
            assert_eq!(d.host_flushes, p.ops, "{spec} x{th}");
            // (the housekeeper's idle seals and checkpoints flush too)
            assert!(d.media_flushes >= 1, "{spec}: {d:?}");
            assert!(d.writes_per_media_flush > 0.0);
            if spec.starts_with("sluice-ilog:") {
                // a FLUSH of a few blocks writes a record, it does not seal
                assert!(d.log_records > 0, "{spec}: {d:?}");
            }
            assert!(d.store.is_none(), "no object store");
        }
        rep.targets.push(r);
    }
    let text = bench::report::render(&rep);
    assert!(text.contains("each followed by a FLUSH"), "{text}");
    assert!(text.contains("media flushes"), "{text}");
    let json = serde_json::to_string(&rep).unwrap();
    assert!(json.contains("\"flush_latency\"") && json.contains("\"writes_per_media_flush\""));
    assert!(bench::plot::svg(&rep).unwrap().contains("<svg"));
}

/// Records, per thread, the order of writes and FLUSHes the workload made.
struct Ordered {
    inner: Arc<dyn Target>,
    last_was_write: parking_lot::Mutex<std::collections::HashMap<std::thread::ThreadId, bool>>,
    writes: std::sync::atomic::AtomicU64,
    flushes: std::sync::atomic::AtomicU64,
    out_of_order: std::sync::atomic::AtomicU64,
}

impl Target for Ordered {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn min_io(&self) -> u64 {
        self.inner.min_io()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> anyhow::Result<()> {
        let prev = self
            .last_was_write
            .lock()
            .insert(std::thread::current().id(), true);
        if prev == Some(true) {
            self.out_of_order.fetch_add(1, Ordering::Relaxed); // two writes, no FLUSH between
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write(offset, buf)
    }
    fn flush(&self) -> anyhow::Result<()> {
        let r = self.inner.flush();
        let prev = self
            .last_was_write
            .lock()
            .insert(std::thread::current().id(), false);
        if prev != Some(true) {
            self.out_of_order.fetch_add(1, Ordering::Relaxed); // a FLUSH of no write of its own
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        r
    }
    fn engine_stats(&self) -> Option<sluice::Stats> {
        self.inner.engine_stats()
    }
}

#[test]
fn durable_workload_flushes_after_every_write_of_every_thread_and_counts_only_flushed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let t = Ordered {
        inner: open(&format!("sluice:{}", dir.path().join("o.vol").display())),
        last_was_write: Default::default(),
        writes: Default::default(),
        flushes: Default::default(),
        out_of_order: Default::default(),
    };
    let mut cfg = small(Workload::Durable);
    cfg.threads = vec![8];
    let r = bench::run_target(&cfg, "ordered", &t, &Ctx::quiet(3));
    assert!(r.error.is_none(), "{:?}", r.error);
    let p = &r.phases[0];
    let (w, f) = (
        t.writes.load(Ordering::Relaxed),
        t.flushes.load(Ordering::Relaxed),
    );
    assert_eq!(
        t.out_of_order.load(Ordering::Relaxed),
        0,
        "write, FLUSH, write, FLUSH on each thread"
    );
    assert_eq!(w, f, "every write is followed by its FLUSH");
    assert_eq!(p.ops, f, "IOPS counts the writes whose FLUSH returned");
    t.inner.close().unwrap();
}
