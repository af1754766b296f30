//! Metrics: what a serving volume is doing, in Prometheus text format
//! (`sluice serve --metrics ADDR`, read by `sluice top`). Owns the request latency
//! histograms, the access-pattern counters (host requests and media writes: share of
//! sequential requests, seek-distance and request-size histograms), the connection
//! gauge, the last-minute WA window and the text exposition; the engine's own
//! counters come from `Volume::stats()` at scrape time.
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

/// Log2 buckets: bucket k counts values in [2^(k-1), 2^k) (bucket 0: value 0).
pub const BUCKETS: usize = 40;

/// A histogram of u64 values in power-of-two buckets, updated with relaxed atomics.
pub struct Log2Hist {
    buckets: [AtomicU64; BUCKETS],
    sum: AtomicU64,
}

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl Log2Hist {
    #[inline]
    pub fn observe(&self, v: u64) {
        let k = ((64 - v.leading_zeros()) as usize).min(BUCKETS - 1);
        self.buckets[k].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
    }
    pub fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|k| self.buckets[k].load(Relaxed))
    }
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }
    pub fn sum(&self) -> u64 {
        self.sum.load(Relaxed)
    }
    /// Upper bound (inclusive) of bucket k.
    pub fn upper(k: usize) -> u64 {
        if k == 0 {
            0
        } else {
            (1u64 << k) - 1
        }
    }
}

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
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(m) = get() {
            m.media.observe(offset, buf.len() as u64);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
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

/// The whole exposition: engine counters from `vol`, request-path metrics from `m`.
pub fn render(vol: &Volume, m: &Metrics, wa_last_minute: f64) -> String {
    let st = vol.stats();
    let mr = vol.mount_report();
    let mut t = Text(String::with_capacity(16 << 10));
    t.head(
        "sluice_host_bytes_total",
        "counter",
        "Bytes clients wrote, read, zeroed and trimmed since the server started.",
    );
    for (op, v) in [
        ("write", st.host_write_bytes),
        ("read", st.host_read_bytes),
        ("zero", st.host_zero_bytes),
        ("trim", st.host_trim_bytes),
    ] {
        t.val("sluice_host_bytes_total", &format!("op=\"{op}\""), v);
    }
    t.one(
        "sluice_host_flushes_total",
        "counter",
        "Flushes clients asked for.",
        st.host_flushes,
    );
    t.head(
        "sluice_media_bytes_total",
        "counter",
        "Bytes the engine wrote to the media, by class.",
    );
    for (class, v) in [
        ("user_data", st.media_user_data_bytes),
        ("gc", st.media_gc_data_bytes),
        ("headers", st.media_chunk_header_bytes),
        ("checkpoints", st.media_checkpoint_bytes),
        ("superblocks", st.media_superblock_bytes),
    ] {
        t.val("sluice_media_bytes_total", &format!("class=\"{class}\""), v);
    }
    t.one(
        "sluice_media_flushes_total",
        "counter",
        "Media flushes (fdatasync).",
        st.media_flushes,
    );
    t.head(
        "sluice_write_amplification",
        "gauge",
        "Media bytes written per host byte written: since the server started, and over the last minute.",
    );
    t.val(
        "sluice_write_amplification",
        "window=\"session\"",
        st.write_amplification,
    );
    t.val(
        "sluice_write_amplification",
        "window=\"1m\"",
        wa_last_minute,
    );
    t.head(
        "sluice_requests_total",
        "counter",
        "NBD requests answered, by type.",
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
        "NBD requests answered with an error, by type.",
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
        "Time from a request's dispatch to its completion in the engine, by type.",
    );
    for (k, name) in REQ_NAMES.iter().enumerate() {
        t.hist(
            "sluice_request_latency_seconds",
            &format!("op=\"{name}\""),
            &m.latency_us[k],
            1e-6,
        );
    }
    t.head("sluice_segments", "gauge", "Segments by state.");
    for (s, v) in [
        ("free", st.segments_free),
        ("open", st.segments_open),
        ("closed", st.segments_closed),
        ("pending", st.segments_pending),
        ("damaged", st.segments_damaged),
    ] {
        t.val("sluice_segments", &format!("state=\"{s}\""), v);
    }
    t.one(
        "sluice_live_data_bytes",
        "gauge",
        "Bytes of live (mapped) data.",
        st.live_data_blocks * 4096,
    );
    t.one(
        "sluice_logical_bytes",
        "gauge",
        "Exported size.",
        vol.size_bytes(),
    );
    t.one(
        "sluice_gc_runs_total",
        "counter",
        "GC victim segments cleaned.",
        st.gc_runs,
    );
    t.head(
        "sluice_gc_blocks_moved_total",
        "counter",
        "Blocks GC relocated: data copied, and entries moved without data (virtual).",
    );
    t.val(
        "sluice_gc_blocks_moved_total",
        "class=\"data\"",
        st.gc_blocks_moved,
    );
    t.val(
        "sluice_gc_blocks_moved_total",
        "class=\"virtual\"",
        st.gc_virtual_moved,
    );
    t.head(
        "sluice_gc_class_runs_total",
        "counter",
        "GC victims cleaned, by the GC output class the policy sent their data to (0 = first relocation; generational and SepBIT-style policies use 1 and 2 for older data).",
    );
    for (k, v) in st.gc_class_runs.iter().enumerate() {
        t.val(
            "sluice_gc_class_runs_total",
            &format!("gc_class=\"{k}\""),
            v,
        );
    }
    t.head(
        "sluice_gc_class_blocks_moved_total",
        "counter",
        "Blocks (data and virtual) GC moved, by GC output class.",
    );
    for (k, v) in st.gc_class_blocks_moved.iter().enumerate() {
        t.val(
            "sluice_gc_class_blocks_moved_total",
            &format!("gc_class=\"{k}\""),
            v,
        );
    }
    t.head(
        "sluice_lifetime_bytes_total",
        "counter",
        "Bytes over the volume's life (persisted in each checkpoint; after a crash, the last checkpoint's value plus this session): host writes and media writes by class.",
    );
    let lt = &st.lifetime;
    for (class, v) in [
        ("host_write", lt.host_write_bytes),
        ("user_data", lt.media_user_data_bytes),
        ("gc", lt.media_gc_data_bytes),
        ("headers", lt.media_chunk_header_bytes),
        ("checkpoints", lt.media_checkpoint_bytes),
        ("superblocks", lt.media_superblock_bytes),
    ] {
        t.val(
            "sluice_lifetime_bytes_total",
            &format!("class=\"{class}\""),
            v,
        );
    }
    t.one(
        "sluice_lifetime_write_amplification",
        "gauge",
        "Media bytes written per host byte written over the volume's life.",
        st.lifetime_write_amplification,
    );
    t.one(
        "sluice_lifetime_gc_runs_total",
        "counter",
        "GC victims cleaned over the volume's life.",
        lt.gc_runs,
    );
    t.one(
        "sluice_checkpoints_total",
        "counter",
        "Checkpoints written.",
        st.checkpoints,
    );
    t.one(
        "sluice_chunks_sealed_total",
        "counter",
        "Chunks sealed.",
        st.chunks_sealed,
    );
    t.one(
        "sluice_mount_seconds",
        "gauge",
        "Time the last mount took (replay included).",
        mr.mount_ms as f64 / 1000.0,
    );
    t.one(
        "sluice_mount_chunks_replayed",
        "gauge",
        "Chunks the last mount replayed beyond the checkpoint.",
        mr.chunks_replayed,
    );
    t.one(
        "sluice_mount_clean",
        "gauge",
        "1 if the last mount found the volume closed cleanly.",
        u8::from(mr.clean),
    );
    t.one(
        "sluice_connections",
        "gauge",
        "Client connections open now.",
        m.connections.load(Relaxed),
    );
    t.one(
        "sluice_connections_total",
        "counter",
        "Client connections accepted.",
        m.connections_total.load(Relaxed),
    );
    t.one(
        "sluice_crc_errors_total",
        "counter",
        "Blocks whose CRC did not match on read (the request got EIO).",
        st.crc_errors,
    );
    t.one(
        "sluice_scrub_errors_total",
        "counter",
        "Damaged blocks the background scrub found.",
        st.scrub_errors,
    );
    t.one(
        "sluice_volume_failed",
        "gauge",
        "1 once the volume stopped after a media write error or a full host file system (writes fail, reads go on; the log says why).",
        u8::from(st.failed),
    );
    t.one(
        "sluice_discarded_bytes_total",
        "counter",
        "Bytes of GC-freed segments given back to the host (punched holes) or device (discard).",
        st.discarded_bytes,
    );
    t.one(
        "sluice_scrub_bytes_total",
        "counter",
        "Bytes the background scrub read and verified.",
        st.scrub_bytes,
    );
    pattern::render(&mut t.0, &[("host", &m.host), ("media", &m.media)]);
    t.0
}

/// Shared state of a metrics endpoint: the volume and the WA window.
pub struct Endpoint {
    pub vol: Arc<Volume>,
    pub metrics: &'static Metrics,
    window: parking_lot::Mutex<Window>,
}

impl Endpoint {
    pub fn new(vol: Arc<Volume>, metrics: &'static Metrics) -> Endpoint {
        Endpoint {
            vol,
            metrics,
            window: Default::default(),
        }
    }
    /// Take a WA sample (the sampler thread calls this each second).
    pub fn sample(&self) -> f64 {
        let st = self.vol.stats();
        self.window
            .lock()
            .wa(st.host_write_bytes, st.media_write_bytes)
    }
    pub fn scrape(&self) -> String {
        let wa = self.sample();
        render(&self.vol, self.metrics, wa)
    }
}
