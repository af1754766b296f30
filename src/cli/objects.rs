//! `--store s3://BUCKET/PREFIX --endpoint URL --cache-dir DIR` (or
//! `--store rados://POOL/PREFIX --ceph-conf FILE` in a `rados` build): the
//! options of a volume whose segments live in an object store (objseg,
//! issue 21), shared by `create`, `serve`, `info` and `check`. The local metadata file (the
//! superblocks, checkpoint slots, intent ring and the segments' staging
//! area) is `DIR/volume`, the slot table `DIR/objects.tab`.
//!
//! Invariant: the store is attached only after the local metadata file is
//! open, so its volume lock (exclusive for create/serve, shared for check)
//! is held first: two processes never share one cache directory.

use anyhow::{bail, Context};
use sluice::media::objects::{Location, ObjectStore, S3Objects, S3Options};
use sluice::media::Media;
use sluice::objseg::{self, ObjSegOptions, ObjSegStore};
use sluice::StoreHandle;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// The stores `attach` made (weak: a volume's drop still finishes its
/// store), finished by `finish_attached` once the volumes are closed.
static ATTACHED: Mutex<Vec<(String, Weak<ObjSegStore>)>> = Mutex::new(Vec::new());

/// Bytes put per byte the host wrote, for people. A serve that wrote nothing
/// still puts checkpoint objects: no ratio then (it read 18,694,604).
fn store_ratio(put: u64, host_written: u64) -> String {
    match host_written {
        0 => "n/a (nothing written)".to_string(),
        h => format!("{:.2}", put as f64 / h as f64),
    }
}

/// `serve`, after closing its volumes: wait for each store's queued uploads
/// (30 s at most) and release its lease, saying what is left and how many
/// bytes went to the store per byte the host wrote (`host_written`).
pub fn finish_attached(host_written: u64) -> anyhow::Result<()> {
    let stores: Vec<_> = ATTACHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect();
    for (name, w) in stores {
        let Some(s) = w.upgrade() else { continue };
        finish_store(&name, &s, host_written)?;
    }
    Ok(())
}

/// One store of a closed volume: wait for its queued uploads (30 s at
/// most), release its lease, and say what it put (`serve`, through
/// `finish_attached`, and `bench`'s `sluice-objects:` target at its close).
pub fn finish_store(name: &str, s: &ObjSegStore, host_written: u64) -> anyhow::Result<()> {
    let left = s.finish().with_context(|| format!("closing {name}"))?;
    let (seg, log, ck) = s.bytes_put();
    let mib = |b: u64| b as f64 / 1048576.0;
    let ratio = store_ratio(seg + log + ck, host_written);
    say!(
        "sluice: {name}: put {:.1} MiB: {:.1} MiB of segment objects, {:.1} MiB of FLUSH log objects, {:.1} MiB of checkpoint objects; store bytes per host byte {ratio}",
        mib(seg + log + ck),
        mib(seg),
        mib(log),
        mib(ck),
    );
    // what the store was asked, by kind (docs/objects.md §4.8: the
    // OSD's CPU per GiB broken down)
    let st = s.stats();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    say!(
        "sluice: {name}: objects: {} segment object(s) put ({:.1} MiB of them written by the volume), {} checkpoint object(s) ({:.1} MiB), {} delete(s) ({:.1} MiB), {} GET(s) ({:.1} MiB), {} upload retries, GC victims {} from the cache and {} from the store",
        n(&st.uploaded_objects),
        mib(n(&st.uploaded_written_bytes)),
        n(&st.checkpoints_stored),
        mib(n(&st.checkpoint_bytes)),
        n(&st.deleted_objects),
        mib(n(&st.deleted_bytes)),
        n(&st.gets),
        mib(n(&st.get_bytes)),
        n(&st.upload_retries),
        n(&st.gc_victims_cached),
        n(&st.gc_victims_fetched),
    );
    if let Some(l) = s.flush_log() {
        let n = l.stats.objects_put.load(Ordering::Relaxed);
        say!(
            "sluice: {name}: FLUSH log: {n} object(s) put, {:.2} ms a PUT on average, {:.1} KiB an object, {:.3} log bytes per byte the volume wrote to its metadata file, at most {} in flight, pieces of at most {} KiB (0: one object a FLUSH group)",
            l.stats.put_us.load(Ordering::Relaxed) as f64 / 1000.0 / n.max(1) as f64,
            l.stats.bytes_put.load(Ordering::Relaxed) as f64 / 1024.0 / n.max(1) as f64,
            l.stats.bytes_put.load(Ordering::Relaxed) as f64
                / l.stats.record_bytes.load(Ordering::Relaxed).max(1) as f64,
            l.stats.most_in_flight.load(Ordering::Relaxed),
            l.piece_bytes() >> 10,
        );
    }
    match left {
        0 => say!("sluice: {name}: every segment uploaded; epoch {} released", s.epoch()),
        n => say!(
            "sluice: {name}: {n} segment upload(s) still pending (kept in the cache, uploaded at the next serve); epoch {} released",
            s.epoch()
        ),
    }
    Ok(())
}

#[derive(clap::Args, Clone, Default)]
pub struct StoreArgs {
    /// Keep the volume's segments in an object store: s3://BUCKET/PREFIX.
    /// Credentials, region and endpoint: the command line (--endpoint), then
    /// the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL), then the AWS shared
    /// files (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials;
    /// AWS_CONFIG_FILE, default ~/.aws/config, with region and endpoint_url;
    /// profile AWS_PROFILE, default `default`). The volume's metadata is kept in
    /// --cache-dir and stored as checkpoint objects: `serve` with an empty
    /// --cache-dir rebuilds it from the store (docs/objects.md §5.6).
    /// Or rados://POOL/PREFIX: a Ceph pool through librados (a build with
    /// the cargo feature `rados`; cluster and key from --ceph-conf).
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub store: Option<String>,
    /// rados:// stores: the ceph.conf to read (default CEPH_CONF, else
    /// /etc/ceph/ceph.conf); the client is client.admin unless
    /// --ceph-user says otherwise.
    #[arg(long, requires = "store")]
    pub ceph_conf: Option<PathBuf>,
    /// rados:// stores: the client id (the `admin` of client.admin).
    #[arg(long, requires = "store", default_value = "admin")]
    pub ceph_user: String,
    /// The S3 endpoint (http://127.0.0.1:8333 for a local server; default
    /// AWS_ENDPOINT_URL, else the profile's endpoint_url in the AWS config
    /// file, else AWS).
    #[arg(long, requires = "store")]
    pub endpoint: Option<String>,
    /// Local directory of the volume's metadata file, segment staging and
    /// slot table (created by `create`).
    #[arg(long, requires = "store")]
    pub cache_dir: Option<PathBuf>,
    /// Take the volume over from a writer that is gone (its lease was never
    /// released). A writer still alive is fenced: it fails its FLUSHes from
    /// then on. Waits 2T first (T: the old writer's lease term, 30 s unless
    /// SLUICE_LEASE_TERM_MS said otherwise; docs/objects.md §5.6.1).
    #[arg(long, requires = "store")]
    pub takeover: bool,
    /// Uploaded segments kept in the cache directory for reads (each one
    /// segment of space); beyond, a read is a ranged GET. `auto` (the
    /// default): every segment when the cache directory's file system can
    /// hold the whole segment area and still keep 1 GiB and 5% of itself
    /// free, else 64. A cache that holds the volume keeps GC's victims
    /// local: oldest-first eviction punches exactly the segments GC picks
    /// next. A restart keeps the copies the last mount left whole (checked
    /// against their objects' CRC32C at attach; docs/objects.md §5.7).
    #[arg(long, requires = "store", default_value = "auto", value_parser = parse_cache_segments)]
    pub cache_segments: CacheSegments,
    /// Segment uploads in flight at once.
    #[arg(long, requires = "store", default_value_t = 2)]
    pub uploads: usize,
    /// The bound on local staging while the store does not take uploads
    /// (down or slow): at most this many full segments wait in the cache
    /// directory for their upload (0: no bound). A write that opens another
    /// segment then waits for an upload, up to --staging-wait seconds, and
    /// fails after it (the volume stops; every FLUSH answered before is
    /// durable in the cache directory). docs/objects.md §5.0.
    #[arg(long, requires = "store", default_value_t = objseg::STAGING_MAX)]
    pub staging_max: usize,
    /// How long a write waits for room in staging (seconds).
    #[arg(long, requires = "store", default_value_t = 30)]
    pub staging_wait: u64,
    /// Where a FLUSH is durable (chosen at create, recorded in the volume,
    /// honoured by every serve): `local`, the cache directory's metadata
    /// file (segments reach the store behind the writes: a lost host loses
    /// what was not uploaded yet); `store`, the object store itself (each
    /// FLUSH also puts the writes since the last one as a small write-once
    /// `log/` object and is answered once the store acknowledged it: a lost
    /// host loses nothing acknowledged). docs/objects.md §5.4.
    #[arg(long, requires = "store", value_enum)]
    pub flush_to: Option<FlushTo>,
}

/// `--cache-segments`: a number, or `auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheSegments {
    #[default]
    Auto,
    Count(usize),
}

/// What `auto` keeps when the volume does not fit (the old default).
pub const CACHE_SEGMENTS_FALLBACK: usize = 64;

fn parse_cache_segments(s: &str) -> Result<CacheSegments, String> {
    match s {
        "auto" => Ok(CacheSegments::Auto),
        n => n
            .parse()
            .map(CacheSegments::Count)
            .map_err(|_| format!("{s:?}: give a number of segments or `auto`")),
    }
}

/// Bytes the cache file `vol` may still grow by (its sparse holes), and
/// the free and total bytes of the file system holding it.
fn cache_room(vol: &Path) -> Option<(u64, u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(vol).ok()?;
    let holes = m.len().saturating_sub(m.blocks() * 512);
    let dir = vol.parent()?;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let f = st.f_frsize as u64;
    Some((holes, st.f_bavail as u64 * f, st.f_blocks as u64 * f))
}

/// `auto`: every segment when the holes of the cache file fit with 1 GiB
/// and 5% of the file system to spare; the decision and why, for the log.
pub fn cache_auto(vol: &Path) -> (usize, String) {
    match cache_room(vol) {
        Some((holes, free, total)) if free >= holes + (1u64 << 30).max(total / 20) => (
            usize::MAX,
            format!(
                "every segment (auto: the cache file may grow by {} MiB, its file system has {} MiB free)",
                holes >> 20,
                free >> 20
            ),
        ),
        Some((holes, free, _)) => (
            CACHE_SEGMENTS_FALLBACK,
            format!(
                "{CACHE_SEGMENTS_FALLBACK} segments (auto: the cache file may grow by {} MiB, more than its file system's {} MiB free leaves to spare)",
                holes >> 20,
                free >> 20
            ),
        ),
        None => (
            CACHE_SEGMENTS_FALLBACK,
            format!("{CACHE_SEGMENTS_FALLBACK} segments (auto: the cache file system's free space unknown)"),
        ),
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushTo {
    Local,
    Store,
}

/// What `attach` gives `serve`.
pub struct Attached {
    pub handle: StoreHandle,
    /// The media to open the volume on (the FLUSH log over the file in the
    /// store-durable mode).
    pub media: Arc<dyn Media>,
    pub store: Arc<ObjSegStore>,
}

impl StoreArgs {
    fn dir(&self) -> anyhow::Result<&Path> {
        self.cache_dir
            .as_deref()
            .context("--store needs --cache-dir DIR (the volume's local metadata and staging)")
    }

    /// With --store, the local metadata file (`DIR/volume`) replaces the
    /// PATH argument, which must then be absent.
    pub fn resolve(&self, path: &mut Option<PathBuf>) -> anyhow::Result<()> {
        if self.store.is_none() {
            return Ok(());
        }
        if path.as_ref().is_some_and(|p| !p.as_os_str().is_empty()) {
            bail!("give either a volume PATH or --store with --cache-dir, not both");
        }
        *path = Some(self.dir()?.join("volume"));
        Ok(())
    }

    fn client(&self) -> anyhow::Result<Arc<dyn ObjectStore>> {
        let s = self.store.as_deref().unwrap_or_default();
        let (bucket, prefix) = match Location::parse(s)? {
            Location::S3 { bucket, prefix } => (bucket, prefix),
            Location::Rados { pool, prefix } => return self.rados(&pool, &prefix),
        };
        let c = S3Objects::open(
            &bucket,
            &prefix,
            &S3Options {
                endpoint: self.endpoint.clone(),
                ..S3Options::default()
            },
        )?;
        Ok(Arc::new(c))
    }

    #[cfg(feature = "rados")]
    fn rados(&self, pool: &str, prefix: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
        let opts = sluice::media::objects::RadosOptions {
            conf: self.ceph_conf.clone(),
            user: self.ceph_user.clone(),
            ..Default::default()
        };
        Ok(Arc::new(sluice::media::objects::RadosObjects::open(
            pool, prefix, &opts,
        )?))
    }

    #[cfg(not(feature = "rados"))]
    fn rados(&self, pool: &str, prefix: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
        bail!(
            "--store rados://{pool}/{prefix}: this sluice was built without RADOS (build with `cargo build --release --features rados`, which needs librados-dev)"
        )
    }

    /// The cache's size in segments, and how it was chosen.
    fn cache_segments(&self) -> (usize, String) {
        match (self.cache_segments, self.dir()) {
            (CacheSegments::Count(n), _) => (n, format!("{n} segments (--cache-segments)")),
            (CacheSegments::Auto, Ok(d)) => cache_auto(&d.join("volume")),
            (CacheSegments::Auto, Err(_)) => (CACHE_SEGMENTS_FALLBACK, String::new()),
        }
    }

    fn opts(&self) -> ObjSegOptions {
        ObjSegOptions {
            uploads: self.uploads.max(1),
            cache_segments: self.cache_segments().0,
            staging_max: self.staging_max,
            staging_wait: std::time::Duration::from_secs(self.staging_wait),
            on_cache_checked: Some(objseg::OnChecked(Arc::new({
                let name = self.store.clone().unwrap_or_default();
                move |c: &objseg::CacheCheck| {
                    if c.stored > 0 {
                        say!(
                            "sluice: {name}: cache check done: {} stored segment(s) of an earlier mount kept (their copies whole), {} read from the store; {} cop(ies) read in {} ms{}",
                            c.kept,
                            c.dropped,
                            c.checked,
                            c.ms,
                            c.cut_short.map(|w| format!(" (stopped early: {w})")).unwrap_or_default()
                        );
                    }
                }
            }))),
            ..ObjSegOptions::default()
        }
    }

    /// `create`: a volume in a store in the local-log mode gets the intent
    /// log ring unless `--no-intent-log` (docs/objects.md §4.9).
    pub fn ring_by_default(&self) -> bool {
        // MUTANT: ring-default-off s|self.store.is_some() && self|false && self|
        self.store.is_some() && self.flush_to != Some(FlushTo::Store)
    }

    /// `create`: make the cache directory (it must not hold a volume).
    pub fn prepare_create(&self) -> anyhow::Result<()> {
        if self.store.is_none() {
            return Ok(());
        }
        let d = self.dir()?;
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        if d.join(objseg::TABLE_FILE).exists() {
            bail!(
                "{} already holds a volume's slot table ({}): use another --cache-dir",
                d.display(),
                objseg::TABLE_FILE
            );
        }
        Ok(())
    }

    /// `create`, after the local metadata file was formatted (and is
    /// locked): the store's first lease and a new slot table.
    pub fn after_format(
        &self,
        media: Arc<dyn Media>,
        force: bool,
    ) -> anyhow::Result<Option<(StoreHandle, Arc<dyn Media>)>> {
        if self.store.is_none() {
            return Ok(None);
        }
        let (s, _) = objseg::create_in_mode(
            media,
            objseg::Place {
                objects: self.client()?,
                dir: self.dir()?,
                takeover: false,
                opts: self.opts(),
            },
            force,
            self.flush_to == Some(FlushTo::Store),
        )
        .with_context(|| {
            format!(
                "creating the volume's objects in {}",
                self.store.as_deref().unwrap_or_default()
            )
        })?;
        let m = s.media();
        Ok(Some((StoreHandle(s), m)))
    }

    /// `serve` of a volume whose cache directory holds no volume (a new
    /// host, or the cache was lost): rebuild it from the store's newest
    /// checkpoint object and the segment objects after it (objseg::recover).
    pub fn restore(&self) -> anyhow::Result<()> {
        let store = self.store.as_deref().unwrap_or_default();
        let r = objseg::recover::restore(&*self.client()?, self.dir()?, self.takeover)
            .with_context(|| {
                format!("mounting {store} from the store alone (no volume in the cache directory)")
            })?;
        for n in &r.notes {
            say!("sluice: {store}: {n}");
        }
        if let Some(lost) = &r.intent_log_lost {
            say!("sluice: {store}: {lost}");
        }
        say!(
            "sluice: {store}: rebuilt {} from {} and {} segment object(s) after it ({})",
            self.dir()?.display(),
            r.checkpoint,
            r.rolled.len(),
            r.stop
        );
        if let Some(l) = &r.log {
            say!(
                "sluice: {store}: store-durable: replayed {} FLUSH log record(s) from {} log object(s) ({})",
                l.records,
                l.objects,
                l.stop
            );
        }
        Ok(())
    }

    /// `info`: the newest checkpoint object and the segment objects above it.
    pub fn summary(&self) -> anyhow::Result<Option<String>> {
        if self.store.is_none() {
            return Ok(None);
        }
        Ok(Some(objseg::recover::summary(&*self.client()?)?))
    }

    /// `serve`: attach to the objects of the volume whose local metadata
    /// file `media` is open (and locked).
    pub fn attach(&self, media: Arc<dyn Media>) -> anyhow::Result<Option<Attached>> {
        if self.store.is_none() {
            return Ok(None);
        }
        let (s, rep) = objseg::open(
            media,
            objseg::Place {
                objects: self.client()?,
                dir: self.dir()?,
                takeover: self.takeover,
                opts: self.opts(),
            },
        )
        .with_context(|| format!("attaching to {}", self.store.as_deref().unwrap_or_default()))?;
        say!(
            "sluice: {}: epoch {}, {} segment object(s), {} orphan(s) to delete once two later checkpoint objects are stored, {} segment(s) to upload",
            self.store.as_deref().unwrap_or_default(),
            rep.epoch,
            rep.objects,
            rep.orphans_deferred,
            rep.uploads_queued
        );
        if rep.cache_checking > 0 {
            say!(
                "sluice: {}: cache check: {} staging cop(ies) of an earlier mount to read in the background; their segments are read from the store until each is found whole",
                self.store.as_deref().unwrap_or_default(),
                rep.cache_checking
            );
        }
        for n in &rep.notes {
            say!("sluice: {}: {n}", self.store.as_deref().unwrap_or_default());
        }
        say!(
            "sluice: {}: cache: {}",
            self.store.as_deref().unwrap_or_default(),
            self.cache_segments().1
        );
        if let Some(f) = self.flush_to {
            if (f == FlushTo::Store) != s.flush_log().is_some() {
                bail!(
                    "--flush-to {}: the volume was created with --flush-to {} (the mode is chosen at create)",
                    if f == FlushTo::Store { "store" } else { "local" },
                    if f == FlushTo::Store { "local" } else { "store" }
                );
            }
        }
        sluice::metrics::objects::register(self.store.as_deref().unwrap_or_default(), &s);
        ATTACHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.store.clone().unwrap_or_default(), Arc::downgrade(&s)));
        Ok(Some(Attached {
            handle: StoreHandle(s.clone()),
            media: s.media(),
            store: s,
        }))
    }

    /// `serve` and `bench`: mount the volume whose local metadata file
    /// `media` is open (and locked): attach to its objects (the lease),
    /// open the volume on the store's media with `opts` (its `store` set
    /// here), and in the store-durable mode store this epoch's first
    /// checkpoint object before any FLUSH is answered (the log a mount from
    /// the store replays is the one of its checkpoint object's epoch).
    pub fn mount(
        &self,
        media: Arc<dyn Media>,
        opts: sluice::OpenOptions,
    ) -> anyhow::Result<sluice::Volume> {
        let Some(at) = self.attach(media)? else {
            bail!("mounting a volume in an object store needs --store");
        };
        let vol = sluice::Volume::open(
            at.media,
            &sluice::OpenOptions {
                store: Some(at.handle),
                ..opts
            },
        )?;
        let name = self.store.as_deref().unwrap_or_default();
        if at.store.flush_log().is_some() {
            vol.checkpoint()
                .and_then(|_| at.store.checkpoint_now().map_err(Into::into))
                .with_context(|| format!("{name}: storing this epoch's first checkpoint object"))?;
            say!(
                "sluice: {name}: store-durable: a FLUSH is answered once its log object is stored (epoch {})",
                at.store.epoch()
            );
        }
        Ok(vol)
    }

    /// The store `attach` registered last for this location (`bench`
    /// reads its counters and finishes it at close).
    pub fn attached(&self) -> Option<Arc<ObjSegStore>> {
        let name = self.store.as_deref()?;
        ATTACHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, w)| w.upgrade())
    }

    /// `check`: the store for reading only, and what its attach found.
    pub fn read_only(
        &self,
        media: Arc<dyn Media>,
    ) -> anyhow::Result<Option<(Arc<ObjSegStore>, Vec<String>)>> {
        if self.store.is_none() {
            return Ok(None);
        }
        let (s, rep) = objseg::open_read_only(media, self.client()?, self.dir()?)
            .with_context(|| format!("reading {}", self.store.as_deref().unwrap_or_default()))?;
        Ok(Some((s, rep.notes)))
    }
}

#[cfg(test)]
mod tests {
    use super::store_ratio;

    #[test]
    fn the_store_ratio_of_a_serve_that_wrote_nothing_is_not_a_number() {
        assert_eq!(store_ratio(18_694_604, 0), "n/a (nothing written)");
        assert_eq!(store_ratio(3 << 20, 2 << 20), "1.50");
    }
}
