//! Metrics: what a serving volume is doing, in Prometheus text format
//! (`sluice serve --metrics ADDR`, read by `sluice top`). Owns the request latency
//! histograms, the access-pattern counters (host requests and media writes: share of
//! sequential requests, seek-distance and request-size histograms), the connection
//! gauge, the last-minute WA window and the text exposition; the engine's own
//! counters come from `Volume::stats()` of every export at scrape time, each
//! series labelled `export="NAME"` (request-path metrics are the server's).
//!
//! Invariant: the request path only touches relaxed atomics (no locks, no
//! allocation), and does nothing but one relaxed load while metrics are off; the
//! exposition is built on the scraper's thread.

pub mod http;
pub mod pattern;

use crate::media::Media;
use crate::Volume;
use pattern::Pattern;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub use crate::stats::{Log2Hist, BUCKETS};

/// Request kinds with their own latency histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Req {
    Read = 0,
    Write = 1,
    Flush = 2,
    Trim = 3,
    Zero = 4,
}
pub const REQ_NAMES: [&str; 5] = ["read", "write", "flush", "trim", "zero"];

/// Everything the request path updates.
#[derive(Default)]
pub struct Metrics {
    /// Latency in microseconds, per request kind.
    pub latency_us: [Log2Hist; 5],
    pub errors: [AtomicU64; 5],
    pub connections: AtomicU64,
    pub connections_total: AtomicU64,
    /// Host requests that carry data (reads, writes, zeroes, trims), in order of arrival.
    pub host: Pattern,
    /// Media writes the engine issued (chunk appends, checkpoints, superblocks).
    pub media: Pattern,
}

static ON: AtomicBool = AtomicBool::new(false);
/// The access-pattern counters (host side here, media side by `MeteredMedia`).
static PATTERN: AtomicBool = AtomicBool::new(true);

/// Turn the host access-pattern counters on or off (on by default); the media
/// side is counted only when the volume's media is a `MeteredMedia`.
pub fn set_access_pattern(on: bool) {
    PATTERN.store(on, Relaxed);
}
static GLOBAL: OnceLock<Metrics> = OnceLock::new();
/// Clock ticks per microsecond (f64 bits), set by `enable`.
static TICKS_PER_US: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// A cheap monotonic tick count: the TSC on x86_64 (about 25 ns to read here,
/// against 65 ns for `Instant::now`), nanoseconds since a process epoch elsewhere.
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Measure ticks per microsecond against `Instant` over a short interval.
fn calibrate() -> f64 {
    let e = *EPOCH.get_or_init(Instant::now);
    let (t0, k0) = (e.elapsed(), ticks());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (t1, k1) = (e.elapsed(), ticks());
    let us = (t1 - t0).as_secs_f64() * 1e6;
    (k1.wrapping_sub(k0) as f64 / us).max(1e-3)
}

/// Turn metrics on for this process and return them.
pub fn enable() -> &'static Metrics {
    let m = GLOBAL.get_or_init(Metrics::default);
    if TICKS_PER_US.load(Relaxed) == 0 {
        TICKS_PER_US.store(calibrate().to_bits(), Relaxed);
    }
    ON.store(true, Relaxed);
    m
}

/// The process's metrics if they are on.
#[inline]
pub fn get() -> Option<&'static Metrics> {
    if ON.load(Relaxed) {
        GLOBAL.get()
    } else {
        None
    }
}

/// When a request started (clock ticks), from `start`.
#[derive(Clone, Copy, Debug)]
pub struct Started(u64);

/// Request path hook: call when a request starts; None while metrics are off.
#[inline]
pub fn start() -> Option<Started> {
    if ON.load(Relaxed) {
        Some(Started(ticks()))
    } else {
        None
    }
}

/// Request path hook: the request of `kind` at `offset`+`len` that `start`
/// timed has finished (`ok` false when it failed).
#[inline]
pub fn done(kind: Req, offset: u64, len: u64, ok: bool, t0: Option<Started>) {
    let (Some(t0), Some(m)) = (t0, GLOBAL.get()) else {
        return;
    };
    let k = kind as usize;
    let per_us = f64::from_bits(TICKS_PER_US.load(Relaxed));
    let us = (ticks().wrapping_sub(t0.0) as f64 / per_us) as u64;
    // The request count is the histogram's count (no separate counter).
    m.latency_us[k].observe(us);
    if !ok {
        m.errors[k].fetch_add(1, Relaxed);
    }
    if kind != Req::Flush && PATTERN.load(Relaxed) {
        m.host.observe(offset, len);
    }
}

/// Connection gauge hooks.
#[inline]
pub fn connection_opened() {
    if let Some(m) = get() {
        m.connections.fetch_add(1, Relaxed);
        m.connections_total.fetch_add(1, Relaxed);
    }
}
#[inline]
pub fn connection_closed() {
    if let Some(m) = get() {
        m.connections.fetch_sub(1, Relaxed);
    }
}

/// Media wrapper that feeds the media-side access pattern (every write the engine
/// issues: offset and length). Reads and flushes pass straight through.
pub struct MeteredMedia<M: Media> {
    pub inner: M,
}

impl<M: Media> Media for MeteredMedia<M> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        self.inner.read_batch(reads)
    }
    fn read_checked(
        &self,
        buf: &mut [u8],
        offset: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> io::Result<bool> {
        self.inner.read_checked(buf, offset, check)
    }
    fn check_copies(
        &self,
        buf: &mut [u8],
        offset: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> Option<io::Result<crate::media::CopiesChecked>> {
        self.inner.check_copies(buf, offset, check)
    }
    fn uring_reads(&self, entries: u32) -> Option<io::Result<crate::media::UringReads>> {
        self.inner.uring_reads(entries)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(m) = get() {
            m.media.observe(offset, buf.len() as u64);
        }
        self.inner.write_at(buf, offset)
    }
    // Forwarded, not left to the trait's default (one `write_at` after
    // another): the inner media's batch is one io_uring submission, which a
    // streamed write's runs and a version 3 record with its data rely on
    // (docs/intent-log.md §4.5: without it the bench, which turns metrics on,
    // wrote them one at a time).
    fn write_batch(&self, writes: &[(&[u8], u64)]) -> io::Result<()> {
        if let Some(m) = get() {
            for (buf, offset) in writes {
                m.media.observe(*offset, buf.len() as u64);
            }
        }
        // MUTANT: metered-batch-unforwarded s|self.inner.write_batch(writes)|crate::media::write_one_by_one(&self.inner, writes)|
        self.inner.write_batch(writes)
    }
    fn direct_unit(&self) -> u64 {
        self.inner.direct_unit()
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn flush_parallelism(&self) -> usize {
        self.inner.flush_parallelism()
    }
    fn flush_overlaps(&self) -> bool {
        self.inner.flush_overlaps()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn size_now(&self) -> io::Result<u64> {
        self.inner.size_now()
    }
    fn allocate(&self, ranges: &[(u64, u64)]) -> io::Result<()> {
        self.inner.allocate(ranges)
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        self.inner.discard(offset, len)
    }
}

/// Last-minute WA: (time, host bytes, media bytes) samples, one per second.
#[derive(Default)]
pub struct Window {
    samples: std::collections::VecDeque<(Instant, u64, u64)>,
}

impl Window {
    /// Add a sample and return WA over the last minute (0 if nothing was written).
    pub fn wa(&mut self, host: u64, media: u64) -> f64 {
        let now = Instant::now();
        self.samples.push_back((now, host, media));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0).as_secs_f64() > 60.0 {
            self.samples.pop_front();
        }
        let (_, h0, m0) = self.samples[0];
        let dh = host.saturating_sub(h0);
        if dh == 0 {
            0.0
        } else {
            media.saturating_sub(m0) as f64 / dh as f64
        }
    }
}

struct Text(String);

impl Text {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn val(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {v}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {v}");
        }
    }
    fn one(&mut self, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
        self.head(name, kind, help);
        self.val(name, "", v);
    }
    fn hist(&mut self, name: &str, labels: &str, h: &Log2Hist, scale: f64) {
        write_hist(&mut self.0, name, labels, h, scale);
    }
}

/// A Prometheus histogram from log2 buckets, values scaled by `scale` (e.g.
/// microseconds to seconds).
pub(crate) fn write_hist(out: &mut String, name: &str, labels: &str, h: &Log2Hist, scale: f64) {
    let c = h.counts();
    let last = c.iter().rposition(|&n| n > 0).unwrap_or(0);
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cum = 0u64;
    for (k, n) in c.iter().enumerate().take(last + 1) {
        cum += n;
        let le = Log2Hist::upper(k) as f64 * scale;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cum}");
    }
    let total: u64 = c.iter().sum();
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {total}");
    let sum = h.sum() as f64 * scale;
    if labels.is_empty() {
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {total}");
    } else {
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {total}"
        );
    }
}

/// The segment stores in object stores this server serves from (issue 21),
/// each labelled `store="s3://..."`.
pub mod objects {
    use super::{label_value, Text};
    use crate::objseg::ObjSegStore;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{Arc, Mutex, Weak};

    /// Weak: the registry never keeps a store alive (its drop releases the
    /// lease after the last upload).
    static STORES: Mutex<Vec<(String, Weak<ObjSegStore>)>> = Mutex::new(Vec::new());

    /// Show `store`'s counters under `name` (`serve --store`).
    pub fn register(name: &str, store: &Arc<ObjSegStore>) {
        STORES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((label_value(name), Arc::downgrade(store)));
    }

    pub(super) fn render(t: &mut Text) {
        let stores: Vec<(String, Arc<ObjSegStore>)> = STORES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|(n, w)| Some((n.clone(), w.upgrade()?)))
            .collect();
        if stores.is_empty() {
            return;
        }
        type Get = fn(&ObjSegStore) -> f64;
        let series: [(&str, &str, &str, Get); 20] = [
            ("sluice_objects_uploads_in_flight", "gauge", "Segment uploads running now.", |s| s.stats().uploads_in_flight.load(Relaxed) as f64),
            ("sluice_objects_uploads_pending", "gauge", "Full segments waiting for (or in) their upload: their staging copy is their only copy.", |s| s.uploads_pending() as f64),
            ("sluice_objects_uploaded_total", "counter", "Segment objects stored.", |s| s.stats().uploaded_objects.load(Relaxed) as f64),
            ("sluice_objects_uploaded_bytes_total", "counter", "Bytes of segment objects stored.", |s| s.stats().uploaded_bytes.load(Relaxed) as f64),
            ("sluice_objects_upload_retries_total", "counter", "Uploads and deletes tried again after a failure.", |s| s.stats().upload_retries.load(Relaxed) as f64),
            ("sluice_objects_deleted_total", "counter", "Segment objects deleted (old lives, orphans).", |s| s.stats().deleted_objects.load(Relaxed) as f64),
            ("sluice_objects_deleted_bytes_total", "counter", "Bytes of segment objects deleted.", |s| s.stats().deleted_bytes.load(Relaxed) as f64),
            ("sluice_objects_get_total", "counter", "Ranged GETs (reads of segments not in the cache).", |s| s.stats().gets.load(Relaxed) as f64),
            ("sluice_objects_get_bytes_total", "counter", "Bytes read with ranged GETs.", |s| s.stats().get_bytes.load(Relaxed) as f64),
            ("sluice_objects_get_seconds_total", "counter", "Time spent in ranged GETs (divide by sluice_objects_get_total for the mean latency).", |s| s.stats().get_us.load(Relaxed) as f64 / 1e6),
            ("sluice_objects_cache_reads_total", "counter", "Segment reads served by the staging file / cache (hits).", |s| s.stats().local_reads.load(Relaxed) as f64),
            ("sluice_objects_gc_victims_cached_total", "counter", "GC victims read from the cache (their staging copy kept).", |s| s.stats().gc_victims_cached.load(Relaxed) as f64),
            ("sluice_objects_gc_victims_fetched_total", "counter", "GC victims read from the store (one whole-object GET each).", |s| s.stats().gc_victims_fetched.load(Relaxed) as f64),
            ("sluice_objects_staging_max", "gauge", "The bound on full segments waiting in staging for their upload (--staging-max; 0: none).", |s| s.staging_bound().0 as f64),
            ("sluice_objects_staging_waits_total", "counter", "Writes that waited for room in staging (the bound reached: the store down or slow).", |s| s.stats().staging_waits.load(Relaxed) as f64),
            ("sluice_objects_staging_full_total", "counter", "Writes refused after --staging-wait without room in staging (the volume stopped).", |s| s.stats().staging_full.load(Relaxed) as f64),
            ("sluice_objects_cache_check_left", "gauge", "Staging copies of an earlier mount the background cache check has still to read (0: done).", |s| s.stats().cache_check_left.load(Relaxed) as f64),
            ("sluice_objects_cache_checked_total", "counter", "Staging copies of an earlier mount the cache check read.", |s| s.stats().cache_checked.load(Relaxed) as f64),
            ("sluice_objects_cache_kept_total", "counter", "Of those, copies found whole (their CRC32C the object's) and read locally again.", |s| s.stats().cache_kept.load(Relaxed) as f64),
            ("sluice_objects_cache_check_seconds", "gauge", "How long the cache check took (set when it is done).", |s| s.stats().cache_check_ms.load(Relaxed) as f64 / 1e3),
        ];
        for (name, kind, help, get) in series {
            t.head(name, kind, help);
            for (label, s) in &stores {
                t.val(name, &format!("store=\"{label}\""), get(s));
            }
        }
    }
}

/// One export's volume as the endpoint shows it: its metrics carry
/// `export="name"`; `sluice_export_info` maps the name to the path.
pub struct Export {
    pub name: String,
    pub path: std::path::PathBuf,
    pub vol: Arc<Volume>,
}

/// `s` as a Prometheus label value (backslash, double quote and newline escaped).
pub fn label_value(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// What one volume shows at a scrape.
struct Shown<'a> {
    export: String,
    e: &'a Export,
    st: crate::stats::Stats,
    wa_1m: f64,
}

impl Shown<'_> {
    /// The label set: `export="..."` first, then `more`.
    fn labels(&self, more: &str) -> String {
        if more.is_empty() {
            format!("export=\"{}\"", self.export)
        } else {
            format!("export=\"{}\",{more}", self.export)
        }
    }
}

/// A family of per-volume series: HELP/TYPE once, then one line per export and
/// per (extra labels, value) that `f` gives.
fn per_volume<V: std::fmt::Display>(
    t: &mut Text,
    vols: &[Shown],
    name: &str,
    kind: &str,
    help: &str,
    f: impl Fn(&Shown) -> Vec<(String, V)>,
) {
    t.head(name, kind, help);
    for v in vols {
        for (more, x) in f(v) {
            t.val(name, &v.labels(&more), x);
        }
    }
}

/// One unlabelled value per volume.
fn one<V: std::fmt::Display>(v: V) -> Vec<(String, V)> {
    vec![(String::new(), v)]
}

/// `(label="value", v)` pairs for a family split by one label.
fn by<V: std::fmt::Display + Copy>(label: &str, pairs: &[(&str, V)]) -> Vec<(String, V)> {
    pairs
        .iter()
        .map(|(k, v)| (format!("{label}=\"{k}\""), *v))
        .collect()
}

/// The whole exposition: every export's volume counters (labelled `export`),
/// and the request-path metrics of the whole server from `m`. `wa_1m[i]` is
/// the last-minute WA of `vols[i]`.
pub fn render(vols: &[Export], wa_1m: &[f64], m: &Metrics) -> String {
    let shown: Vec<Shown> = vols
        .iter()
        .zip(wa_1m)
        .map(|(e, &wa)| Shown {
            export: label_value(&e.name),
            e,
            st: e.vol.stats(),
            wa_1m: wa,
        })
        .collect();
    let v = &shown;
    let mut t = Text(String::with_capacity(16 << 10));
    t.head(
        "sluice_export_info",
        "gauge",
        "One series per export: its name and the volume's path (value 1).",
    );
    for x in v {
        let path = label_value(&x.e.path.to_string_lossy());
        t.val(
            "sluice_export_info",
            &x.labels(&format!("path=\"{path}\"")),
            1,
        );
    }
    per_volume(
        &mut t,
        v,
        "sluice_host_bytes_total",
        "counter",
        "Bytes clients wrote, read, zeroed and trimmed since the server started.",
        |x| {
            by(
                "op",
                &[
                    ("write", x.st.host_write_bytes),
                    ("read", x.st.host_read_bytes),
                    ("zero", x.st.host_zero_bytes),
                    ("trim", x.st.host_trim_bytes),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_host_flushes_total",
        "counter",
        "Flushes clients asked for.",
        |x| one(x.st.host_flushes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_media_bytes_total",
        "counter",
        "Bytes the engine wrote to the media, by class (log: intent log records, in the volume or on its log devices; the classes sum to the media bytes of the WA).",
        |x| {
            by(
                "class",
                &[
                    ("user_data", x.st.media_user_data_bytes),
                    ("gc", x.st.media_gc_data_bytes),
                    ("headers", x.st.media_chunk_header_bytes),
                    ("checkpoints", x.st.media_checkpoint_bytes),
                    ("superblocks", x.st.media_superblock_bytes),
                    ("log", x.st.media_log_bytes),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_media_flushes_total",
        "counter",
        "Media flushes (fdatasync).",
        |x| one(x.st.media_flushes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_write_amplification",
        "gauge",
        "Media bytes written per host byte written: since the server started, and over the last minute.",
        |x| {
            by(
                "window",
                &[("session", x.st.write_amplification), ("1m", x.wa_1m)],
            )
        },
    );
    t.head(
        "sluice_requests_total",
        "counter",
        "NBD requests answered, by type (all exports).",
    );
    for (k, name) in REQ_NAMES.iter().enumerate() {
        t.val(
            "sluice_requests_total",
            &format!("op=\"{name}\""),
            m.latency_us[k].count(),
        );
    }
    t.head(
        "sluice_request_errors_total",
        "counter",
        "NBD requests answered with an error, by type (all exports).",
    );
    for (k, name) in REQ_NAMES.iter().enumerate() {
        t.val(
            "sluice_request_errors_total",
            &format!("op=\"{name}\""),
            m.errors[k].load(Relaxed),
        );
    }
    t.head(
        "sluice_request_latency_seconds",
        "histogram",
        "Time from a request's dispatch to its completion in the engine, by type (all exports).",
    );
    for (k, name) in REQ_NAMES.iter().enumerate() {
        t.hist(
            "sluice_request_latency_seconds",
            &format!("op=\"{name}\""),
            &m.latency_us[k],
            1e-6,
        );
    }
    per_volume(
        &mut t,
        v,
        "sluice_segments",
        "gauge",
        "Segments by state.",
        |x| {
            by(
                "state",
                &[
                    ("free", x.st.segments_free),
                    ("open", x.st.segments_open),
                    ("closed", x.st.segments_closed),
                    ("pending", x.st.segments_pending),
                    ("damaged", x.st.segments_damaged),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_live_data_bytes",
        "gauge",
        "Bytes of live (mapped) data.",
        |x| one(x.st.live_data_blocks * 4096),
    );
    // compressed volumes (issue 19): what the packer did since mount
    per_volume(
        &mut t,
        v,
        "sluice_compress_host_bytes_total",
        "counter",
        "Host data bytes the packer placed (compressed volumes; 0 otherwise).",
        |x| one(x.st.compress.host_bytes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_compress_stored_bytes_total",
        "counter",
        "Bytes those host blocks take in their chunks (raw and packed blocks).",
        |x| one(x.st.compress.stored_bytes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_compress_fragments_total",
        "counter",
        "Host blocks stored as LZ4 fragments.",
        |x| one(x.st.compress.fragments),
    );
    per_volume(
        &mut t,
        v,
        "sluice_compress_skipped_blocks_total",
        "counter",
        "Host blocks the entropy sample stored raw without trying LZ4.",
        |x| one(x.st.compress.skipped_blocks),
    );
    per_volume(
        &mut t,
        v,
        "sluice_compress_direct_blocks_total",
        "counter",
        "Of the skipped blocks, those stored untested in direct chunks (an incompressible stream, sampled one block in 16).",
        |x| one(x.st.compress.direct_blocks),
    );
    per_volume(
        &mut t,
        v,
        "sluice_logical_bytes",
        "gauge",
        "Exported size.",
        |x| one(x.e.vol.size_bytes()),
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_runs_total",
        "counter",
        "GC victim segments cleaned.",
        |x| one(x.st.gc_runs),
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_blocks_moved_total",
        "counter",
        "Blocks GC relocated: data copied, and entries moved without data (virtual).",
        |x| {
            by(
                "class",
                &[
                    ("data", x.st.gc_blocks_moved),
                    ("virtual", x.st.gc_virtual_moved),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_bytes_read_total",
        "counter",
        "Bytes GC read of its victims: chunk headers and live runs, or whole segments where that is cheaper.",
        |x| one(x.st.gc_bytes_read),
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_victims_read_total",
        "counter",
        "GC victims by how they were read: their chunk headers and live runs, or the whole segment.",
        |x| {
            by(
                "how",
                &[
                    ("runs", x.st.gc_victims_read_runs),
                    ("whole", x.st.gc_victims_read_whole),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_reuse_barriers_total",
        "counter",
        "Reuse barriers run: each makes the records that emptied GC's victims durable and frees those segments (docs/gc.md).",
        |x| one(x.st.reuse_barriers),
    );
    per_volume(
        &mut t,
        v,
        "sluice_reuse_barrier_flushes_total",
        "counter",
        "Media flushes made while reuse barriers ran.",
        |x| one(x.st.barrier_flushes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_housekeeper_seconds_total",
        "counter",
        "Time spent on housekeeping work: reading GC victims, submitting the blocks GC moved, reuse barriers, checkpoints.",
        |x| {
            by(
                "work",
                &[
                    ("gc_read", x.st.hk_gc_read_us as f64 / 1e6),
                    ("gc_submit", x.st.hk_gc_submit_us as f64 / 1e6),
                    ("barrier", x.st.hk_barrier_us as f64 / 1e6),
                    ("checkpoint", x.st.hk_checkpoint_us as f64 / 1e6),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_class_runs_total",
        "counter",
        "GC victims cleaned, by the GC output class the policy sent their data to (0 = first relocation; generational and SepBIT-style policies use 1 and 2 for older data).",
        |x| {
            x.st.gc_class_runs
                .iter()
                .enumerate()
                .map(|(k, n)| (format!("gc_class=\"{k}\""), *n))
                .collect()
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_gc_class_blocks_moved_total",
        "counter",
        "Blocks (data and virtual) GC moved, by GC output class.",
        |x| {
            x.st.gc_class_blocks_moved
                .iter()
                .enumerate()
                .map(|(k, n)| (format!("gc_class=\"{k}\""), *n))
                .collect()
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_lifetime_bytes_total",
        "counter",
        "Bytes over the volume's life (persisted in each checkpoint; after a crash, the last checkpoint's value plus this session): host writes and media writes by class.",
        |x| {
            let lt = &x.st.lifetime;
            by(
                "class",
                &[
                    ("host_write", lt.host_write_bytes),
                    ("user_data", lt.media_user_data_bytes),
                    ("gc", lt.media_gc_data_bytes),
                    ("headers", lt.media_chunk_header_bytes),
                    ("checkpoints", lt.media_checkpoint_bytes),
                    ("superblocks", lt.media_superblock_bytes),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_lifetime_write_amplification",
        "gauge",
        "Media bytes written per host byte written over the volume's life.",
        |x| one(x.st.lifetime_write_amplification),
    );
    per_volume(
        &mut t,
        v,
        "sluice_lifetime_gc_runs_total",
        "counter",
        "GC victims cleaned over the volume's life.",
        |x| one(x.st.lifetime.gc_runs),
    );
    per_volume(
        &mut t,
        v,
        "sluice_checkpoints_total",
        "counter",
        "Checkpoints written.",
        |x| one(x.st.checkpoints),
    );
    per_volume(
        &mut t,
        v,
        "sluice_chunks_sealed_total",
        "counter",
        "Chunks sealed.",
        |x| one(x.st.chunks_sealed),
    );
    per_volume(
        &mut t,
        v,
        "sluice_mount_seconds",
        "gauge",
        "Time the last mount took (replay included).",
        |x| one(x.e.vol.mount_report().mount_ms as f64 / 1000.0),
    );
    per_volume(
        &mut t,
        v,
        "sluice_mount_chunks_replayed",
        "gauge",
        "Chunks the last mount replayed beyond the checkpoint.",
        |x| one(x.e.vol.mount_report().chunks_replayed),
    );
    per_volume(
        &mut t,
        v,
        "sluice_mount_clean",
        "gauge",
        "1 if the last mount found the volume closed cleanly.",
        |x| one(u8::from(x.e.vol.mount_report().clean)),
    );
    t.one(
        "sluice_connections",
        "gauge",
        "Client connections open now (all exports).",
        m.connections.load(Relaxed),
    );
    t.one(
        "sluice_connections_total",
        "counter",
        "Client connections accepted (all exports).",
        m.connections_total.load(Relaxed),
    );
    per_volume(
        &mut t,
        v,
        "sluice_crc_errors_total",
        "counter",
        "Blocks whose CRC did not match on read (the request got EIO).",
        |x| one(x.st.crc_errors),
    );
    per_volume(
        &mut t,
        v,
        "sluice_scrub_errors_total",
        "counter",
        "Damaged blocks the background scrub found.",
        |x| one(x.st.scrub_errors),
    );
    per_volume(
        &mut t,
        v,
        "sluice_volume_failed",
        "gauge",
        "1 once the volume stopped after a media write error or a full host file system (writes fail, reads go on; the log says why).",
        |x| one(u8::from(x.st.failed)),
    );
    per_volume(
        &mut t,
        v,
        "sluice_discarded_bytes_total",
        "counter",
        "Bytes of GC-freed segments given back to the host (punched holes) or device (discard).",
        |x| one(x.st.discarded_bytes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_scrub_bytes_total",
        "counter",
        "Bytes the background scrub read and verified.",
        |x| one(x.st.scrub_bytes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_streamed_blocks_total",
        "counter",
        "Data blocks large host writes (16 blocks or more) wrote at their places themselves, before their chunk's seal.",
        |x| one(x.st.streamed_blocks),
    );
    per_volume(
        &mut t,
        v,
        "sluice_streamed_copied_blocks_total",
        "counter",
        "Of the streamed blocks, those written from a copy because the request's buffer was not aligned for direct IO.",
        |x| one(x.st.streamed_copied_blocks),
    );
    per_volume(
        &mut t,
        v,
        "sluice_streamed_records_total",
        "counter",
        "Intent log records large host writes wrote in the submission of their own data (counted in sluice_log_records_total too).",
        |x| one(x.st.streamed_records),
    );
    per_volume(
        &mut t,
        v,
        "sluice_group_commit_waits_total",
        "counter",
        "Media flushes that first waited for another FLUSH's chunk or record to be written (group commit).",
        |x| one(x.st.group_commit_waits),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_records_total",
        "counter",
        "Intent log records written (FLUSH/FUA that logged instead of sealing).",
        |x| one(x.st.log_records),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_bytes_total",
        "counter",
        "Bytes of intent log records written (headers and data), on the volume or its log device(s).",
        |x| one(x.st.media_log_bytes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_device_flushes_total",
        "counter",
        "Flushes of log devices (an in-volume log shares the media flush and counts none).",
        |x| one(x.st.log_flushes),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_device_errors_total",
        "counter",
        "Write or flush errors of log devices while serving.",
        |x| one(x.st.log_device_errors),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_devices_degraded",
        "gauge",
        "Log devices of the volume it runs without (missing at mount or failed since): the log is degraded.",
        |x| one(x.st.log_devices_degraded),
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_members_down",
        "gauge",
        "Stripe set members missing or failed: the set serves degraded (0: healthy, or not a stripe set).",
        |x| one(x.st.stripe_members_down),
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_reconstructed_total",
        "counter",
        "Pieces a stripe set rebuilt from the rest of their row (degraded reads).",
        |x| one(x.st.stripe_reconstructed),
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_healed_total",
        "counter",
        "Blocks that failed their CRC while every stripe set member answered, found right from the rest of their row and rewritten on their member.",
        |x| one(x.st.stripe_healed),
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_meta_copies_total",
        "counter",
        "Stripe set members' copies of a checkpoint or intent-log record that failed their check while another member's passed, by what became of them (bad: all such copies; rewritten: of those, rewritten from the good one).",
        |x| {
            by(
                "state",
                &[
                    ("bad", x.st.stripe_meta_copies_bad),
                    ("rewritten", x.st.stripe_meta_copies_rewritten),
                ],
            )
        },
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_rebuild_segments_done",
        "gauge",
        "Segments of the stripe set member being rebuilt that are done (copied, or only marked when free); 0 when none is.",
        |x| one(x.st.stripe_rebuild_done),
    );
    per_volume(
        &mut t,
        v,
        "sluice_stripe_rebuild_segments_total",
        "gauge",
        "Segments a member rebuild walks (the set's segment count); 0 when no member is being rebuilt.",
        |x| one(x.st.stripe_rebuild_total),
    );
    per_volume(
        &mut t,
        v,
        "sluice_log_fallbacks_total",
        "counter",
        "1 once every log device failed and FLUSH fell back to sealing into the main log.",
        |x| one(x.st.log_fallbacks),
    );
    t.head(
        "sluice_flush_latency_seconds",
        "histogram",
        "Time from a FLUSH's arrival at the volume to its acknowledgement, by durability path (log: it sealed no chunk, its blocks went to the intent log; seal: it sealed the open chunk into the main log).",
    );
    for x in v {
        for p in crate::stats::FlushPath::ALL {
            let labels = x.labels(&format!("path=\"{}\"", p.name()));
            t.hist(
                "sluice_flush_latency_seconds",
                &labels,
                x.e.vol.flush_latency(p),
                1e-6,
            );
        }
    }
    pattern::render(&mut t.0, &[("host", &m.host), ("media", &m.media)]);
    objects::render(&mut t);
    t.0
}

/// Shared state of a metrics endpoint: the exports and their WA windows.
pub struct Endpoint {
    pub exports: Vec<Export>,
    pub metrics: &'static Metrics,
    windows: Vec<parking_lot::Mutex<Window>>,
}

impl Endpoint {
    pub fn new(exports: Vec<Export>, metrics: &'static Metrics) -> Endpoint {
        let windows = exports.iter().map(|_| Default::default()).collect();
        Endpoint {
            exports,
            metrics,
            windows,
        }
    }
    /// Take a WA sample of every export (the sampler thread calls this each
    /// second); the last-minute WA of each.
    pub fn sample(&self) -> Vec<f64> {
        self.exports
            .iter()
            .zip(&self.windows)
            .map(|(e, w)| {
                let st = e.vol.stats();
                w.lock().wa(st.host_write_bytes, st.media_write_bytes)
            })
            .collect()
    }
    pub fn scrape(&self) -> String {
        let wa = self.sample();
        render(&self.exports, &wa, self.metrics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::MemMedia;
    use std::sync::atomic::AtomicUsize;

    /// A media that counts the batches it is handed whole.
    struct Batches {
        inner: MemMedia,
        batches: AtomicUsize,
    }

    impl Media for Batches {
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.inner.write_at(buf, offset)
        }
        fn write_batch(&self, writes: &[(&[u8], u64)]) -> io::Result<()> {
            self.batches.fetch_add(1, Relaxed);
            crate::media::write_one_by_one(&self.inner, writes)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn describe(&self) -> String {
            "batches".into()
        }
    }

    #[test]
    fn metered_media_hands_a_batch_on_whole() {
        let m = MeteredMedia {
            inner: Batches {
                inner: MemMedia::new(1 << 16),
                batches: AtomicUsize::new(0),
            },
        };
        let (a, b) = (vec![1u8; 4096], vec![2u8; 512]);
        m.write_batch(&[(&a, 8192), (&b, 512)]).unwrap();
        assert_eq!(
            m.inner.batches.load(Relaxed),
            1,
            "the batch reached the inner media as one (one io_uring submission on a file)"
        );
        let mut back = vec![0u8; 4096];
        m.read_at(&mut back, 8192).unwrap();
        assert_eq!(back, a);
        m.read_at(&mut back[..512], 512).unwrap();
        assert_eq!(&back[..512], &b[..]);
    }
}
