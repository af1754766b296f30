//! `sluice top ADDR`: a live view of a serving volume, read from its metrics
//! endpoint (`sluice serve --metrics ADDR`) once a second: IOPS, MB/s, WA, GC
//! activity, free space, the access pattern front and back, the intent log and
//! FLUSH latency by durability path (p50/p99, logged vs sealed). Plain text redraw
//! (fine over ssh), one line per sample when stdout is not a terminal, or JSON
//! lines for scripts. Volume counters are one export's (`--export`, default the
//! first); requests, latency and connections are the whole server's.
//!
//! Invariant: read-only; a sample that cannot be fetched is reported, and the
//! view goes on (exit 1 only if the first fetch fails).

use anyhow::Context;
use sluice::metrics::http;
use sluice::size::human;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Metrics address of a server started with --metrics (e.g. 127.0.0.1:9100 or :9100).
    pub addr: String,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many samples (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
    /// Print one JSON object per sample (one a line) instead of the text view.
    #[arg(long)]
    pub json: bool,
    /// Export whose volume to show, when the server has several (default: the
    /// first it lists).
    #[arg(long, value_name = "NAME")]
    pub export: Option<String>,
}

type Sample = HashMap<String, f64>;

/// One sample: the chosen export's volume series (export label removed) and
/// the server's series.
fn fetch(addr: &str, export: Option<&str>) -> anyhow::Result<(Sample, String)> {
    let text = http::fetch(addr).with_context(|| format!("reading metrics from {addr}"))?;
    let all = http::parse(&text);
    let listed = http::exports(&all);
    let name = match export {
        Some(n) => {
            let n = sluice::metrics::label_value(n);
            if !listed.iter().any(|(e, _)| *e == n) {
                let names: Vec<&str> = listed.iter().map(|(e, _)| e.as_str()).collect();
                anyhow::bail!("{addr} has no export {n:?} (it has {names:?})");
            }
            n
        }
        None => listed.first().map(|(e, _)| e.clone()).unwrap_or_default(),
    };
    Ok((http::of_export(&all, &name), name))
}

fn g(s: &Sample, k: &str) -> f64 {
    s.get(k).copied().unwrap_or(0.0)
}

/// Quantile `q` of the latency histogram of `op` between two samples (seconds,
/// upper bound of the bucket it falls in), None with no requests.
fn quantile(a: &Sample, b: &Sample, op: &str, q: f64) -> Option<f64> {
    let prefix = format!("sluice_request_latency_seconds_bucket{{op=\"{op}\",le=\"");
    quantile_of(a, b, &prefix, q)
}

/// Quantile `q` of the FLUSH latency histogram of durability path `path`
/// (`log` or `seal`) between two samples, as `quantile`.
fn flush_quantile(a: &Sample, b: &Sample, path: &str, q: f64) -> Option<f64> {
    let prefix = format!("sluice_flush_latency_seconds_bucket{{path=\"{path}\",le=\"");
    quantile_of(a, b, &prefix, q)
}

/// Quantile `q` of the histogram whose bucket series start with `prefix`
/// (up to the `le` value) between two samples.
fn quantile_of(a: &Sample, b: &Sample, prefix: &str, q: f64) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = b
        .iter()
        .filter_map(|(k, &v)| {
            let le = k.strip_prefix(prefix)?.strip_suffix("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, v - a.get(k).copied().unwrap_or(0.0)))
        })
        .collect();
    buckets.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|&(le, _)| le)
}

#[derive(serde::Serialize)]
struct Row {
    time_s: f64,
    read_iops: f64,
    write_iops: f64,
    flush_per_s: f64,
    trim_per_s: f64,
    read_mb_s: f64,
    write_mb_s: f64,
    media_mb_s: f64,
    wa_session: f64,
    wa_1m: f64,
    wa_interval: f64,
    gc_runs_per_s: f64,
    gc_blocks_moved_per_s: f64,
    segments_free: f64,
    segments_total: f64,
    live_bytes: f64,
    logical_bytes: f64,
    connections: f64,
    write_p99_s: Option<f64>,
    read_p99_s: Option<f64>,
    host_sequential_share: f64,
    media_sequential_share: f64,
    /// Data large host writes streamed to their places (MB/s).
    streamed_mb_s: f64,
    log_records_per_s: f64,
    log_mb_s: f64,
    log_flushes_per_s: f64,
    log_degraded: f64,
    log_fallbacks: f64,
    /// FLUSH latency by durability path over the interval (None: no FLUSH
    /// took that path).
    flush_log_p50_s: Option<f64>,
    flush_log_p99_s: Option<f64>,
    flush_seal_p50_s: Option<f64>,
    flush_seal_p99_s: Option<f64>,
    stripe_down: f64,
    /// Blocks a stripe set healed (total since mount).
    stripe_healed: f64,
    /// Members' metadata copies found bad / rewritten from a good one.
    stripe_meta_bad: f64,
    stripe_meta_rewritten: f64,
    /// Segments of a member rebuild done, of how many (0: none running).
    stripe_rebuild_done: f64,
    stripe_rebuild_total: f64,
    /// Compressed volumes: host and stored bytes and skipped blocks over the
    /// interval (0 host bytes: no line).
    compress_host_mb_s: f64,
    compress_stored_mb_s: f64,
    compress_skipped_share: f64,
    /// Share of the host blocks stored untested in direct chunks (an
    /// incompressible stream; part of the skipped share).
    compress_direct_share: f64,
    /// Segments in an object store (`serve --store`): 0 stores, no line.
    objects: ObjRow,
}

/// The object-store series (`sluice_objects_*`), summed over stores.
#[derive(serde::Serialize, Default)]
struct ObjRow {
    stores: f64,
    uploads_in_flight: f64,
    uploads_pending: f64,
    /// The bound on `uploads_pending` (`--staging-max`; 0: none).
    staging_max: f64,
    /// Writes that waited for room in staging, and writes refused after
    /// `--staging-wait` (the store down or slow), per second.
    staging_waits_per_s: f64,
    staging_full_per_s: f64,
    upload_mb_s: f64,
    deletes_per_s: f64,
    gets_per_s: f64,
    get_mean_s: Option<f64>,
    cache_hit_share: Option<f64>,
    /// Staging copies of an earlier mount the cache check has still to
    /// read (docs/objects.md §5.7; 0: done).
    cache_check_left: f64,
}

/// Sum of every series `name{...}` (one per store).
fn sum(s: &Sample, name: &str) -> f64 {
    let p = format!("{name}{{");
    s.iter()
        .filter(|(k, _)| k.starts_with(&p))
        .map(|(_, v)| v)
        .sum()
}

fn obj_row(a: &Sample, b: &Sample, dt: f64) -> ObjRow {
    let d = |k: &str| (sum(b, k) - sum(a, k)).max(0.0);
    let gets = d("sluice_objects_get_total");
    let hits = d("sluice_objects_cache_reads_total");
    ObjRow {
        stores: b
            .keys()
            .filter(|k| k.starts_with("sluice_objects_uploads_in_flight{"))
            .count() as f64,
        uploads_in_flight: sum(b, "sluice_objects_uploads_in_flight"),
        uploads_pending: sum(b, "sluice_objects_uploads_pending"),
        staging_max: sum(b, "sluice_objects_staging_max"),
        staging_waits_per_s: d("sluice_objects_staging_waits_total") / dt,
        staging_full_per_s: d("sluice_objects_staging_full_total") / dt,
        upload_mb_s: d("sluice_objects_uploaded_bytes_total") / dt / 1e6,
        deletes_per_s: d("sluice_objects_deleted_total") / dt,
        gets_per_s: gets / dt,
        get_mean_s: (gets > 0.0).then(|| d("sluice_objects_get_seconds_total") / gets),
        cache_hit_share: (gets + hits > 0.0).then(|| hits / (gets + hits)),
        cache_check_left: sum(b, "sluice_objects_cache_check_left"),
    }
}

/// Staging's bound and pressure: `<=N` (or `unbounded`), then the writes that
/// waited for room and those refused, per second, when there were any.
fn staging(o: &ObjRow) -> String {
    let mut t = if o.staging_max > 0.0 {
        format!("<={:.0}", o.staging_max)
    } else {
        "unbounded".into()
    };
    if o.staging_waits_per_s > 0.0 {
        t += &format!(" waits={:.1}/s", o.staging_waits_per_s);
    }
    if o.staging_full_per_s > 0.0 {
        t += &format!(" REFUSED={:.1}/s", o.staging_full_per_s);
    }
    t
}

/// The screen's object-store line (empty without a store).
fn obj_line(o: &ObjRow) -> String {
    if o.stores == 0.0 {
        return String::new();
    }
    let checking = match o.cache_check_left {
        n if n > 0.0 => format!("   cache check: {n:.0} copies left"),
        _ => String::new(),
    };
    format!(
        "objects uploads {:.0} in flight, {:.0} pending (staging {}), {:.1} MB/s   deletes {:.1}/s   GETs {:.0}/s mean {}   cache hits {}{checking}\n",
        o.uploads_in_flight,
        o.uploads_pending,
        staging(o),
        o.upload_mb_s,
        o.deletes_per_s,
        o.gets_per_s,
        lat(o.get_mean_s),
        o.cache_hit_share
            .map(|h| format!("{:.0}%", h * 100.0))
            .unwrap_or_else(|| "-".into())
    )
}

fn share(a: &Sample, b: &Sample, side: &str) -> f64 {
    let k = |p: &str| format!("sluice_access_requests_total{{side=\"{side}\",pattern=\"{p}\"}}");
    let seq = g(b, &k("sequential")) - g(a, &k("sequential"));
    let rnd = g(b, &k("random")) - g(a, &k("random"));
    if seq + rnd <= 0.0 {
        0.0
    } else {
        seq / (seq + rnd)
    }
}

fn row(a: &Sample, b: &Sample, dt: f64, t: f64) -> Row {
    let d = |k: &str| (g(b, k) - g(a, k)).max(0.0);
    let r = |k: &str| d(k) / dt;
    let media_keys = [
        "user_data",
        "gc",
        "headers",
        "checkpoints",
        "superblocks",
        "log",
    ]
    .map(|c| format!("sluice_media_bytes_total{{class=\"{c}\"}}"));
    let media: f64 = media_keys.iter().map(|k| d(k)).sum();
    let host_w = d("sluice_host_bytes_total{op=\"write\"}");
    let seg = |s: &str| g(b, &format!("sluice_segments{{state=\"{s}\"}}"));
    Row {
        time_s: t,
        read_iops: r("sluice_requests_total{op=\"read\"}"),
        write_iops: r("sluice_requests_total{op=\"write\"}"),
        flush_per_s: r("sluice_requests_total{op=\"flush\"}"),
        trim_per_s: r("sluice_requests_total{op=\"trim\"}"),
        read_mb_s: r("sluice_host_bytes_total{op=\"read\"}") / 1e6,
        write_mb_s: host_w / dt / 1e6,
        media_mb_s: media / dt / 1e6,
        wa_session: g(b, "sluice_write_amplification{window=\"session\"}"),
        wa_1m: g(b, "sluice_write_amplification{window=\"1m\"}"),
        wa_interval: if host_w > 0.0 { media / host_w } else { 0.0 },
        gc_runs_per_s: r("sluice_gc_runs_total"),
        gc_blocks_moved_per_s: r("sluice_gc_blocks_moved_total{class=\"data\"}"),
        segments_free: seg("free"),
        segments_total: ["free", "open", "closed", "pending", "damaged"]
            .iter()
            .map(|s| seg(s))
            .sum(),
        live_bytes: g(b, "sluice_live_data_bytes"),
        logical_bytes: g(b, "sluice_logical_bytes"),
        connections: g(b, "sluice_connections"),
        write_p99_s: quantile(a, b, "write", 0.99),
        read_p99_s: quantile(a, b, "read", 0.99),
        host_sequential_share: share(a, b, "host"),
        media_sequential_share: share(a, b, "media"),
        streamed_mb_s: r("sluice_streamed_blocks_total") * 4096.0 / 1e6,
        log_records_per_s: r("sluice_log_records_total"),
        log_mb_s: r("sluice_log_bytes_total") / 1e6,
        log_flushes_per_s: r("sluice_log_device_flushes_total"),
        log_degraded: g(b, "sluice_log_devices_degraded"),
        log_fallbacks: g(b, "sluice_log_fallbacks_total"),
        compress_host_mb_s: r("sluice_compress_host_bytes_total") / 1e6,
        compress_stored_mb_s: r("sluice_compress_stored_bytes_total") / 1e6,
        compress_skipped_share: {
            let host = d("sluice_compress_host_bytes_total") / 4096.0;
            if host > 0.0 {
                d("sluice_compress_skipped_blocks_total") / host
            } else {
                0.0
            }
        },
        compress_direct_share: {
            let host = d("sluice_compress_host_bytes_total") / 4096.0;
            if host > 0.0 {
                d("sluice_compress_direct_blocks_total") / host
            } else {
                0.0
            }
        },
        objects: obj_row(a, b, dt),
        flush_log_p50_s: flush_quantile(a, b, "log", 0.5),
        flush_log_p99_s: flush_quantile(a, b, "log", 0.99),
        flush_seal_p50_s: flush_quantile(a, b, "seal", 0.5),
        flush_seal_p99_s: flush_quantile(a, b, "seal", 0.99),
        stripe_down: g(b, "sluice_stripe_members_down"),
        stripe_healed: g(b, "sluice_stripe_healed_total"),
        stripe_meta_bad: g(b, "sluice_stripe_meta_copies_total{state=\"bad\"}"),
        stripe_meta_rewritten: g(b, "sluice_stripe_meta_copies_total{state=\"rewritten\"}"),
        stripe_rebuild_done: g(b, "sluice_stripe_rebuild_segments_done"),
        stripe_rebuild_total: g(b, "sluice_stripe_rebuild_segments_total"),
    }
}

fn lat(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(s) if s.is_infinite() => "inf".into(),
        Some(s) if s < 1e-3 => format!("{:.0}us", s * 1e6),
        Some(s) => format!("{:.1}ms", s * 1e3),
    }
}

fn screen(addr: &str, export: &str, r: &Row) -> String {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    format!(
        "sluice top {addr}{}   t={:.0}s   connections {}\n\n\
         host    read  {:>9.0} IOPS {:>8.1} MB/s   p99 {}\n\
         \x20       write {:>9.0} IOPS {:>8.1} MB/s   p99 {}\n\
         \x20       flush {:>9.0} /s   trim {:.0} /s   flush latency logged p50 {} p99 {}, sealed p50 {} p99 {}\n\
         media   write {:>23.1} MB/s   streamed by large writes {:.1} MB/s\n\
         WA      now {:.2}   last minute {:.2}   session {:.2}\n\
         GC      {:.1} runs/s, {:.0} blocks moved/s\n\
         space   {} of {} segments free, live data {} of {}\n\
         pattern host {} sequential   media {} sequential\n\
         log     {:.0} records/s {:.1} MB/s, {:.0} device flushes/s{}\n{}",
        if export.is_empty() {
            String::new()
        } else {
            format!(" export {export}")
        },
        r.time_s,
        r.connections,
        r.read_iops,
        r.read_mb_s,
        lat(r.read_p99_s),
        r.write_iops,
        r.write_mb_s,
        lat(r.write_p99_s),
        r.flush_per_s,
        r.trim_per_s,
        lat(r.flush_log_p50_s),
        lat(r.flush_log_p99_s),
        lat(r.flush_seal_p50_s),
        lat(r.flush_seal_p99_s),
        r.media_mb_s,
        r.streamed_mb_s,
        r.wa_interval,
        r.wa_1m,
        r.wa_session,
        r.gc_runs_per_s,
        r.gc_blocks_moved_per_s,
        r.segments_free,
        r.segments_total,
        human(r.live_bytes as u64),
        human(r.logical_bytes as u64),
        pct(r.host_sequential_share),
        pct(r.media_sequential_share),
        r.log_records_per_s,
        r.log_mb_s,
        r.log_flushes_per_s,
        log_state(r),
        obj_line(&r.objects),
    ) + &compress_line(r)
}

/// `top`'s line for a compressed volume: host and stored bytes packed over
/// the interval, their ratio, the share the entropy sample skipped and, of
/// it, the share stored untested in direct chunks.
fn compress_line(r: &Row) -> String {
    if r.compress_host_mb_s <= 0.0 {
        return String::new();
    }
    format!(
        "compress host {:.1} MB/s stored {:.1} MB/s (ratio {:.2}), {:.0}% skipped as incompressible ({:.0}% in direct chunks)\n",
        r.compress_host_mb_s,
        r.compress_stored_mb_s,
        r.compress_stored_mb_s / r.compress_host_mb_s,
        r.compress_skipped_share * 100.0,
        r.compress_direct_share * 100.0
    )
}

/// What `top` says about the intent log's and a stripe set's health, after its rates.
fn log_state(r: &Row) -> String {
    let mut s = String::new();
    if r.log_degraded > 0.0 {
        s += &format!(
            "   DEGRADED: {:.0} log device(s) missing or failed",
            r.log_degraded
        );
    }
    if r.stripe_down > 0.0 {
        s += &format!(
            "   STRIPE SET DEGRADED: {:.0} member(s) missing or failed",
            r.stripe_down
        );
    }
    if r.stripe_rebuild_total > 0.0 {
        s += &format!(
            "   REBUILDING a member: {:.0}/{:.0} segments",
            r.stripe_rebuild_done, r.stripe_rebuild_total
        );
    }
    if r.stripe_healed > 0.0 {
        s += &format!(
            "   stripe set healed {:.0} block(s) from parity",
            r.stripe_healed
        );
    }
    if r.stripe_meta_bad > 0.0 {
        s += &format!(
            "   stripe set metadata copies bad {:.0} (rewritten {:.0})",
            r.stripe_meta_bad, r.stripe_meta_rewritten
        );
    }
    if r.log_fallbacks > 0.0 {
        s += "   FALLBACK: the intent log failed (its ring or every log device), FLUSH seals into the main log";
    }
    s
}

fn line(r: &Row) -> String {
    format!(
        "t={:.0}s r={:.0}/s w={:.0}/s w={:.1}MB/s media={:.1}MB/s WA now={:.2} 1m={:.2} gc={:.1}/s free={}/{} seq host={:.0}% media={:.0}% p99w={} flush p99 log={} seal={} log={:.0}/s{}{}{}",
        r.time_s,
        r.read_iops,
        r.write_iops,
        r.write_mb_s,
        r.media_mb_s,
        r.wa_interval,
        r.wa_1m,
        r.gc_runs_per_s,
        r.segments_free,
        r.segments_total,
        r.host_sequential_share * 100.0,
        r.media_sequential_share * 100.0,
        lat(r.write_p99_s),
        lat(r.flush_log_p99_s),
        lat(r.flush_seal_p99_s),
        r.log_records_per_s,
        log_state(r),
        if r.objects.stores > 0.0 {
            let o = &r.objects;
            format!(
                " objects up={:.0}+{:.0}pending staging={} {:.1}MB/s del={:.1}/s get={:.0}/s mean={} hits={}",
                o.uploads_in_flight,
                o.uploads_pending,
                staging(o).replace(' ', ","),
                o.upload_mb_s,
                o.deletes_per_s,
                o.gets_per_s,
                lat(o.get_mean_s),
                o.cache_hit_share
                    .map(|h| format!("{:.0}%", h * 100.0))
                    .unwrap_or_else(|| "-".into())
            )
        } else {
            String::new()
        },
        if r.compress_host_mb_s > 0.0 {
            format!(
                " lz4 ratio={:.2} skipped={:.0}% direct={:.0}%",
                r.compress_stored_mb_s / r.compress_host_mb_s,
                r.compress_skipped_share * 100.0,
                r.compress_direct_share * 100.0
            )
        } else {
            String::new()
        }
    )
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !(a.interval > 0.0 && a.interval <= 3600.0) {
        anyhow::bail!("--interval must be between 0 and 3600 seconds");
    }
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let (mut prev, _) = fetch(&a.addr, a.export.as_deref())?;
    let mut t_prev = Instant::now();
    let mut n = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs_f64(a.interval));
        let (cur, export) = match fetch(&a.addr, a.export.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                say!("sluice top: {e:#}");
                continue;
            }
        };
        let now = Instant::now();
        let r = row(
            &prev,
            &cur,
            now.duration_since(t_prev).as_secs_f64(),
            start.elapsed().as_secs_f64(),
        );
        let mut out = std::io::stdout().lock();
        if a.json {
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
        } else if tty {
            write!(out, "\x1b[H\x1b[2J{}", screen(&a.addr, &export, &r))?;
        } else {
            writeln!(out, "{}", line(&r))?;
        }
        out.flush()?;
        prev = cur;
        t_prev = now;
        n += 1;
        if a.count > 0 && n >= a.count {
            return Ok(0);
        }
    }
}
