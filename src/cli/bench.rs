//! `sluice bench`: parse flags into a `BenchConfig`, open every target (refusing
//! unsafe write tests before any IO), run the workload on each in turn with a
//! progress bar, and print / save the results. Ctrl-C stops the run and prints what
//! was measured so far (a second Ctrl-C exits at once).

use anyhow::{bail, Context};
use sluice::bench::run::{Ctx, Observer};
use sluice::bench::target::{
    self, ObjectsSpec, OpenSpec, SluiceTarget, StoreCounters, Target, TargetSpec,
};
use sluice::bench::{self as b, BenchConfig, Report, Workload};
use sluice::media::outfile::{self, Output};
use sluice::media::{FileMedia, Media};
use sluice::objseg::ObjSegStore;
use sluice::stats::Stats;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// grid | slog | steady | mix | ceiling | fill | durable (each of
    /// --threads threads a 4 KiB random write then a FLUSH, over and over:
    /// `sluice bench durable --threads 32,1 --seconds 20 --target ...`)
    #[arg(value_parser = Workload::parse)]
    pub workload: Workload,
    /// Target to measure, optionally named (LABEL=KIND:WHERE); repeat to compare
    /// (ratios are to the first):
    /// sluice:PATH (in-process engine; sluice-noverify:PATH, a diagnostic, mounts it
    /// with verified reads off; sluice-nodiscard:PATH with discard of freed
    /// segments off; sluice-batch:PATH whose random writes are submitted from
    /// one thread as one batch of all outstanding writes per call
    /// (Volume::write_many); sluice-ilog:PATH a volume with its intent log in it,
    /// sluice-logdev:PATH,LOG with its intent log on the log device LOG,
    /// sluice-stripe:A,B,C,...[;parity=N] a stripe set over those member files),
    /// sluice-objects:URL,CACHEDIR[;flush-to=store][;no-intent-log] a volume
    /// in an object store, URL s3://BUCKET/PREFIX or rados://POOL/PREFIX, its
    /// metadata and staging in CACHEDIR, opened as `serve --store` opens it
    /// (lease, cache) and created as `create --store` would when CACHEDIR
    /// holds none (a prefix holding objects is refused without --force);
    /// flush-to=store the store-durable mode, else the local-log mode with
    /// its intent log ring unless no-intent-log; endpoint and credentials
    /// as `create` takes them: --endpoint / --ceph-conf or the environment),
    /// nbd:URI (nbd+unix:///NAME?socket=PATH or
    /// nbd://HOST:PORT/NAME), file:PATH, dev:PATH (raw, O_DIRECT).
    #[arg(long = "target", required = true, value_name = "KIND:WHERE")]
    pub targets: Vec<String>,
    /// sluice-objects: targets on s3://: the S3 endpoint (default
    /// AWS_ENDPOINT_URL, else the AWS config file's, else AWS), as `create
    /// --endpoint`.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// sluice-objects: targets on rados://: the ceph.conf (default
    /// CEPH_CONF, else /etc/ceph/ceph.conf), as `create --ceph-conf`.
    #[arg(long)]
    pub ceph_conf: Option<PathBuf>,
    /// sluice-objects: targets on rados://: the client id.
    #[arg(long, default_value = "admin")]
    pub ceph_user: String,
    /// Size of a sluice volume or raw file created because it is missing
    /// (default: the region size).
    #[arg(long, value_parser = super::parse_size)]
    pub size: Option<u64>,
    /// Sample region at the start of each target (default 4G, clamped to the target).
    #[arg(long, value_parser = super::parse_size)]
    pub region: Option<u64>,
    /// Block sizes, comma separated (grid: 512..4M, slog: 512..8M).
    #[arg(long, value_delimiter = ',', value_parser = super::parse_size)]
    pub sizes: Option<Vec<u64>>,
    /// Threads = outstanding IOs, comma separated (grid: 1,10,40; steady/mix/ceiling: 32).
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Seconds per grid cell / mix or ceiling phase / slog size (minimum).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// steady: total run time, e.g. 80m, 10m, 90s (default 80m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<f64>,
    /// steady: sampling interval, e.g. 60s (default 60s).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<f64>,
    /// mix: read percentage (default 70).
    #[arg(long)]
    pub read_pct: Option<u32>,
    /// Do not write the region before read tests (reads may then hit holes).
    #[arg(long)]
    pub no_prefill: bool,
    /// Write the region before the workload even when it does not read.
    #[arg(long, conflicts_with = "no_prefill")]
    pub prefill: bool,
    /// slog: issue writes above 128K as one IO instead of parallel 128K pieces.
    #[arg(long)]
    pub no_split: bool,
    /// slog: pause between the flushes before each size, seconds (default 1).
    #[arg(long)]
    pub settle: Option<f64>,
    /// slog: writes per batch (default 250).
    #[arg(long)]
    pub batch: Option<u64>,
    /// Over-provisioning percent of a sluice volume created because it is missing.
    #[arg(long, default_value_t = 10.0)]
    pub overprovision: f64,
    /// Write every phase and sample as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw a chart (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Run write tests on files or devices that hold data or a signature; replace
    /// an existing --json/--plot file that is not sluice's own.
    #[arg(long)]
    pub force: bool,
    /// Seed of the workload generators (same seed, same offsets on every target).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Payloads of a chosen compressibility: PCT percent of every 4 KiB block
    /// written is zeros after a random head, as fio's
    /// `buffer_compress_percentage=PCT` with `buffer_compress_chunk=4k`
    /// (default 0: random, incompressible). Example: `--compressible 50`.
    #[arg(long, value_name = "PCT")]
    pub compressible: Option<u32>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// "90", "90s", "10m", "1.5h" -> seconds.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(format!(
            "not a duration: {s:?} (examples: 90, 90s, 10m, 1h)"
        )),
    }
}

pub fn config_from(a: &Args) -> anyhow::Result<BenchConfig> {
    let mut c = BenchConfig::defaults(a.workload);
    if let Some(r) = a.region {
        if r < 1 << 20 {
            bail!("--region {r} is too small (at least 1M)");
        }
        c.region_bytes = r;
    }
    if let Some(s) = &a.sizes {
        if s.is_empty() {
            bail!("--sizes is empty");
        }
        for &z in s {
            if z < 512 || z % 512 != 0 || z > 64 << 20 {
                bail!("--sizes: {z} must be a multiple of 512 between 512 and 64M");
            }
        }
        c.sizes = s.clone();
    }
    if let Some(t) = &a.threads {
        if t.is_empty() || t.iter().any(|&n| n == 0 || n > 1024) {
            bail!("--threads must list counts between 1 and 1024");
        }
        c.threads = t.clone();
    }
    if let Some(s) = a.seconds {
        if !(s > 0.0 && s <= 86_400.0) {
            bail!("--seconds {s} must be positive");
        }
        c.seconds = s;
    }
    if let Some(d) = a.duration {
        c.duration_s = d;
    }
    if let Some(i) = a.interval {
        c.interval_s = i;
    }
    if a.workload == Workload::Steady && c.interval_s > c.duration_s {
        bail!(
            "--interval {}s is longer than --duration {}s",
            c.interval_s,
            c.duration_s
        );
    }
    if let Some(p) = a.read_pct {
        if p > 100 {
            bail!("--read-pct {p} is above 100");
        }
        c.read_pct = p;
    }
    if a.no_prefill {
        c.prefill = false;
    }
    if a.prefill {
        c.prefill = true;
    }
    if a.no_split {
        c.slog_split = false;
    }
    if let Some(s) = a.settle {
        if !(0.0..=60.0).contains(&s) {
            bail!("--settle {s} must be between 0 and 60 seconds");
        }
        c.slog_settle_s = s;
    }
    if let Some(n) = a.batch {
        if n == 0 {
            bail!("--batch must be at least 1");
        }
        c.slog_batch = n;
    }
    if let Some(s) = a.seed {
        c.seed = s;
    }
    if let Some(p) = a.compressible {
        if p > 100 {
            bail!("--compressible {p} is above 100 (percent of each 4 KiB block that is zeros)");
        }
        c.compressible = p;
    }
    Ok(c)
}

struct Bar(indicatif::ProgressBar);

impl Observer for Bar {
    fn phase(&self, target: &str, label: &str) {
        self.0.set_message(format!("{target}: {label}"));
    }
    fn advance(&self, secs: f64) {
        self.0.inc((secs * 1000.0).round() as u64);
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cfg = config_from(&a)?;
    // Access-pattern counters for in-process sluice targets (report's access_pattern).
    sluice::metrics::enable();
    if !(3.0..=50.0).contains(&a.overprovision) {
        bail!(
            "--overprovision {} is outside 3..50 percent",
            a.overprovision
        );
    }
    // [LABEL=]KIND:WHERE
    let specs: Vec<(String, TargetSpec)> = a
        .targets
        .iter()
        .map(|s| {
            let (label, spec) = match s.split_once('=') {
                Some((l, rest)) if !l.contains(':') && !l.is_empty() && rest.contains(':') => {
                    (Some(l.to_string()), rest)
                }
                _ => (None, s.as_str()),
            };
            let t = TargetSpec::parse(spec)?;
            Ok((label.unwrap_or_else(|| t.to_string()), t))
        })
        .collect::<anyhow::Result<_>>()?;
    if let Some(p) = &a.plot {
        if !p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            bail!("--plot {}: only .svg output is supported", p.display());
        }
    }
    let open_spec = OpenSpec {
        create_size: a.size.unwrap_or(cfg.region_bytes),
        overprovision: a.overprovision / 100.0,
        writes: cfg.workload.writes(),
        force: a.force,
    };
    // Every target is open at once: two in-process mounts of one volume would
    // each write its own log over the other's (the volume ends up damaged).
    let mut sluice_paths = std::collections::HashSet::new();
    for (_, s) in &specs {
        if let TargetSpec::Sluice(p)
        | TargetSpec::SluiceNoVerify(p)
        | TargetSpec::SluiceNoDiscard(p)
        | TargetSpec::SluiceBatch(p)
        | TargetSpec::SluiceLog(p, _)
        | TargetSpec::SluiceObjects(ObjectsSpec { cache_dir: p, .. }) = s
        {
            // a volume in a store: its metadata file in the cache directory
            let vol;
            let p = match s {
                TargetSpec::SluiceObjects(_) => {
                    vol = p.join("volume");
                    &vol
                }
                _ => p,
            };
            // (the file may not exist yet: resolve its directory)
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            let key = std::fs::canonicalize(p).unwrap_or_else(|_| {
                std::fs::canonicalize(dir)
                    .unwrap_or_else(|_| dir.to_path_buf())
                    .join(p.file_name().unwrap_or_default())
            });
            if !sluice_paths.insert(key) {
                bail!(
                    "{} is named by two sluice targets; they would mount it twice at once (use one file per target)",
                    p.display()
                );
            }
        }
    }
    // Output files are judged before anything runs (media::outfile): a bad
    // name fails now, not after the benchmark.
    let volumes: Vec<PathBuf> = specs
        .iter()
        .flat_map(|(_, s)| match s {
            TargetSpec::Sluice(p)
            | TargetSpec::SluiceNoVerify(p)
            | TargetSpec::SluiceNoDiscard(p)
            | TargetSpec::SluiceBatch(p)
            | TargetSpec::SluiceLog(p, _)
            | TargetSpec::File(p)
            | TargetSpec::Dev(p) => vec![p.clone()],
            TargetSpec::SluiceStripe(ps, _) => ps.clone(),
            TargetSpec::SluiceObjects(o) => vec![o.cache_dir.join("volume")],
            TargetSpec::Nbd(_) => vec![],
        })
        .collect();
    let json_out = Output {
        flag: "--json",
        force: Some(a.force),
        ours: is_bench_json,
        volumes: &volumes,
    };
    let plot_out = Output {
        flag: "--plot",
        force: Some(a.force),
        ours: outfile::is_sluice_chart,
        volumes: &volumes,
    };
    if let Some(p) = &a.json {
        json_out.check(p)?;
    }
    if let Some(p) = &a.plot {
        plot_out.check(p)?;
    }
    // Open (and safety-check) every target before measuring anything.
    let mut targets = Vec::new();
    for (label, s) in &specs {
        let t = match s {
            TargetSpec::SluiceObjects(o) => open_objects(o, &a, &open_spec),
            _ => target::open(s, &open_spec),
        }
        .with_context(|| format!("target {s}"))?;
        targets.push((label.clone(), t));
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        stop.clone(),
    )
    .context("installing the Ctrl-C handler")?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .context("installing the Ctrl-C handler")?;
    let planned_ms = (cfg.planned_seconds() * 1000.0 * targets.len() as f64) as u64;
    let bar = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = indicatif::ProgressBar::new(planned_ms.max(1));
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "[{elapsed_precise}] {bar:30.cyan/blue} {percent:>3}% ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    };
    let ctx = Ctx {
        stop: stop.clone(),
        observer: Arc::new(Bar(bar.clone())),
        seed: cfg.seed,
        compressible: cfg.compressible,
    };
    let mut report = Report::new(&cfg);
    let mut failed = false;
    let mut pending = targets.into_iter();
    for (label, t) in pending.by_ref() {
        let r = b::run_target(&cfg, &label, &*t, &ctx);
        failed |= r.error.is_some();
        if let Err(e) = t.close() {
            eprintln!("sluice: closing {label}: {e:#}");
            failed = true;
        }
        report.targets.push(r);
        if stop.load(Ordering::Relaxed) {
            break;
        }
    }
    for (label, t) in pending {
        if let Err(e) = t.close() {
            eprintln!("sluice: closing {label}: {e:#}");
        }
    }
    bar.finish_and_clear();
    report.interrupted = stop.load(Ordering::Relaxed);
    print!("{}", b::report::render(&report));
    std::io::Write::flush(&mut std::io::stdout())?;
    if let Some(p) = &a.json {
        let mut j = serde_json::to_vec_pretty(&report)?;
        j.push(b'\n');
        json_out
            .write(p, &j)
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &a.plot {
        plot_out
            .write(p, outfile::mark_chart(&b::plot::svg(&report)?).as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(if report.interrupted {
        130
    } else if failed {
        1
    } else {
        0
    })
}

/// `StoreArgs` as `create` and `serve` parse them (their defaults: cache,
/// uploads, staging bound), for a `sluice-objects:` target.
#[derive(clap::Parser)]
struct StoreOnly {
    #[command(flatten)]
    s: super::objects::StoreArgs,
}

/// A volume in an object store, in process (`sluice-objects:`).
struct ObjectsTarget {
    inner: SluiceTarget,
    store: Arc<ObjSegStore>,
    name: String,
}

impl Target for ObjectsTarget {
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
        self.inner.write(offset, buf)
    }
    fn flush(&self) -> anyhow::Result<()> {
        self.inner.flush()
    }
    fn engine_stats(&self) -> Option<Stats> {
        self.inner.engine_stats()
    }
    fn store_counters(&self) -> Option<StoreCounters> {
        let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let st = self.store.stats();
        let mut c = StoreCounters {
            uploads: n(&st.uploaded_objects),
            upload_bytes: n(&st.uploaded_bytes),
            gets: n(&st.gets),
            ..StoreCounters::default()
        };
        if let Some(l) = self.store.flush_log() {
            c.log_puts = n(&l.stats.objects_put);
            c.log_bytes = n(&l.stats.bytes_put);
            c.log_put_us = n(&l.stats.put_us);
        }
        Some(c)
    }
    fn close(&self) -> anyhow::Result<()> {
        let host = self.inner.volume().stats().host_write_bytes;
        self.inner.close()?;
        // its uploads waited for (30 s at most), the lease released: as
        // serve, only after a clean close
        super::objects::finish_store(&self.name, &self.store, host)
    }
    fn write_many(&self, writes: &[(u64, &[u8])]) -> anyhow::Result<()> {
        self.inner.write_many(writes)
    }
}

/// Open a `sluice-objects:` target with `serve`'s opener
/// (`StoreArgs::mount`: the volume lock on CACHEDIR/volume, then the
/// store's lease), creating the volume first as `create --store` would when
/// CACHEDIR holds none (`create_volume`: a prefix holding objects is
/// refused unless --force). An existing volume holding live data is
/// refused unless --force, as every write target is.
fn open_objects(o: &ObjectsSpec, a: &Args, spec: &OpenSpec) -> anyhow::Result<Arc<dyn Target>> {
    let mut argv: Vec<std::ffi::OsString> = vec![
        "sluice bench".into(),
        "--store".into(),
        o.store.clone().into(),
        "--cache-dir".into(),
        o.cache_dir.clone().into(),
        "--flush-to".into(),
        if o.flush_to_store { "store" } else { "local" }.into(),
        "--ceph-user".into(),
        a.ceph_user.clone().into(),
    ];
    if let Some(e) = &a.endpoint {
        argv.extend(["--endpoint".into(), e.into()]);
    }
    if let Some(c) = &a.ceph_conf {
        argv.extend(["--ceph-conf".into(), c.into()]);
    }
    let sa = <StoreOnly as clap::Parser>::try_parse_from(argv)
        .context("the target's store options")?
        .s;
    let path = o.cache_dir.join("volume");
    let created = !path.exists();
    if created {
        sa.prepare_create()?;
        let mut c = super::create::Args::defaults(&path, spec.create_size, sa.clone());
        c.overprovision = spec.overprovision * 100.0;
        // MUTANT: bench-objects-create-forced s|spec.force;|true;|
        c.force = spec.force;
        c.no_intent_log = o.no_intent_log;
        super::create::create_volume(&c)?.close()?;
    }
    // the volume lock (named holder if another process has it), as serve
    let file =
        FileMedia::open(&path, false).with_context(|| format!("opening {}", path.display()))?;
    let media: Arc<dyn Media> = if sluice::metrics::get().is_some() {
        Arc::new(sluice::metrics::MeteredMedia { inner: file })
    } else {
        Arc::new(file)
    };
    let vol = sa.mount(media, sluice::OpenOptions::default())?;
    let store = sa
        .attached()
        .context("the volume's store was not registered by its attach")?;
    let live = vol.stats().live_data_blocks;
    // MUTANT: bench-objects-live-unchecked s|if !created|if false && !created|
    if !created && spec.writes && !spec.force && live > 0 {
        let host = vol.stats().host_write_bytes;
        let _ = vol.close();
        let _ = super::objects::finish_store(&o.store, &store, host);
        bail!(
            "{} holds a volume with {} of live data; a write test would overwrite it (use --force to run anyway, or give a new prefix and cache directory)",
            o.store,
            sluice::size::human(live * 4096)
        );
    }
    let desc = format!(
        "sluice in-process on {} ({}), cache {}",
        o.store,
        match (o.flush_to_store, vol.superblock().has_intent_log()) {
            (true, _) => "store-durable: a FLUSH answered once its log object is stored",
            (false, true) => "local-log mode, intent log ring",
            (false, false) => "local-log mode, no intent log",
        },
        o.cache_dir.display()
    );
    Ok(Arc::new(ObjectsTarget {
        inner: SluiceTarget::from_volume(vol, desc),
        store,
        name: o.store.clone(),
    }))
}

/// A `bench --json` report (replaced without --force).
fn is_bench_json(head: &[u8]) -> bool {
    let t = String::from_utf8_lossy(&head[..head.len().min(256)]);
    t.trim_start().starts_with('{') && t.contains("\"workload\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert_eq!(parse_duration("10m").unwrap(), 600.0);
        assert_eq!(parse_duration("1.5h").unwrap(), 5400.0);
        assert_eq!(parse_duration("30s").unwrap(), 30.0);
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("-3m").is_err());
    }
}
