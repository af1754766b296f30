//! Benchmark targets: what `--target` names (sluice:PATH, nbd:URI, file:PATH,
//! dev:PATH, sluice-objects:URL,CACHEDIR), opened behind one blocking,
//! thread-safe interface. Queue depth is the number of threads calling a target
//! at once. A volume in an object store is opened by the `sluice bench`
//! command with the opener `create` and `serve` use (src/cli/objects.rs) and
//! handed in as a `SluiceTarget::from_volume`; `open` here refuses that kind.
//!
//! Invariant: a target never writes anything the workload did not ask for, except
//! that a missing sluice volume or raw file is created at `--size`; opening refuses
//! (see `safety`) before any byte of an existing non-sluice file, signed device or
//! sluice volume holding live data could be overwritten without `--force`.

use super::nbd_client::NbdClient;
use crate::media::probe as safety;
use crate::media::{AlignedBuf, FileMedia, Media};
use crate::stats::Stats;
use crate::{CreateOptions, OpenOptions, Volume};
use anyhow::{anyhow, bail, Context, Result};
use std::fs::{File, OpenOptions as FsOpen};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A parsed `--target` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    Sluice(PathBuf),
    /// Diagnostic: the in-process engine with verified reads off
    /// (`sluice-noverify:PATH`), to measure what verification costs.
    SluiceNoVerify(PathBuf),
    /// The in-process engine with discard of freed segments off
    /// (`sluice-nodiscard:PATH`), to measure what hole punching costs.
    SluiceNoDiscard(PathBuf),
    /// The in-process engine driven through `Volume::write_many`
    /// (`sluice-batch:PATH`): a random-write phase's N outstanding writes
    /// are one batch per call from one thread, not N threads.
    SluiceBatch(PathBuf),
    /// The in-process engine on a volume with an intent log (format v2):
    /// in the volume (`sluice-ilog:VOL`) or on a log device
    /// (`sluice-logdev:VOL,LOG`); created with it when VOL is missing.
    SluiceLog(PathBuf, Option<PathBuf>),
    /// A stripe set over these member files (`sluice-stripe:A,B,C;parity=N`,
    /// parity 1 when not given), created at `--size` when they are not one.
    SluiceStripe(Vec<PathBuf>, u32),
    /// A volume in an object store, in process
    /// (`sluice-objects:URL,CACHEDIR[;flush-to=store][;no-intent-log]`):
    /// URL `s3://BUCKET/PREFIX` or `rados://POOL/PREFIX`, its local metadata
    /// file and staging in CACHEDIR; created (as `sluice create --store`
    /// would) when CACHEDIR holds no volume.
    SluiceObjects(ObjectsSpec),
    Nbd(String),
    File(PathBuf),
    Dev(PathBuf),
}

/// Where and how a `sluice-objects:` target's volume lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectsSpec {
    /// `s3://BUCKET/PREFIX` or `rados://POOL/PREFIX`.
    pub store: String,
    pub cache_dir: PathBuf,
    /// The store-durable mode (`create --flush-to store`): a FLUSH is
    /// answered once its log object is stored.
    pub flush_to_store: bool,
    /// `create --no-intent-log` (the local-log mode's ring is the default).
    pub no_intent_log: bool,
}

impl ObjectsSpec {
    fn parse(s: &str, rest: &str) -> Result<ObjectsSpec> {
        let mut parts = rest.split(';');
        let main = parts.next().unwrap_or_default();
        let (store, dir) = match main.split_once(',') {
            Some((u, d)) if !u.is_empty() && !d.is_empty() => (u, d),
            _ => bail!(
                "target {s:?}: give sluice-objects:URL,CACHEDIR[;flush-to=store][;no-intent-log]"
            ),
        };
        if !(store.starts_with("s3://") || store.starts_with("rados://")) {
            bail!("target {s:?}: the store is s3://BUCKET/PREFIX or rados://POOL/PREFIX");
        }
        let mut o = ObjectsSpec {
            store: store.to_string(),
            cache_dir: dir.into(),
            flush_to_store: false,
            no_intent_log: false,
        };
        for opt in parts {
            match opt {
                "flush-to=store" => o.flush_to_store = true,
                "flush-to=local" => o.flush_to_store = false,
                "no-intent-log" => o.no_intent_log = true,
                other => bail!(
                    "target {s:?}: unknown option {other:?} (flush-to=store, flush-to=local, no-intent-log)"
                ),
            }
        }
        if o.flush_to_store && o.no_intent_log {
            bail!("target {s:?}: the store-durable mode has no intent log anyway (drop no-intent-log)");
        }
        Ok(o)
    }
}

impl TargetSpec {
    pub fn parse(s: &str) -> Result<TargetSpec> {
        let (kind, rest) = s.split_once(':').ok_or_else(|| {
            anyhow!("target {s:?} needs a kind: sluice:PATH, nbd:URI, file:PATH or dev:PATH")
        })?;
        if rest.is_empty() {
            bail!("target {s:?} names no path or URI");
        }
        Ok(match kind {
            "sluice" => TargetSpec::Sluice(rest.into()),
            "sluice-noverify" => TargetSpec::SluiceNoVerify(rest.into()),
            "sluice-nodiscard" => TargetSpec::SluiceNoDiscard(rest.into()),
            "sluice-batch" => TargetSpec::SluiceBatch(rest.into()),
            "sluice-ilog" => TargetSpec::SluiceLog(rest.into(), None),
            "sluice-logdev" => match rest.split_once(',') {
                Some((v, l)) if !v.is_empty() && !l.is_empty() => {
                    TargetSpec::SluiceLog(v.into(), Some(l.into()))
                }
                _ => bail!("target {s:?}: give sluice-logdev:VOLUME,LOGDEVICE"),
            },
            "sluice-stripe" => {
                let (members, parity) = match rest.split_once(';') {
                    Some((m, opt)) => (
                        m,
                        opt.strip_prefix("parity=")
                            .and_then(|v| v.parse::<u32>().ok())
                            .ok_or_else(|| {
                                anyhow!("target {s:?}: after ';' give parity=0, 1 or 2")
                            })?,
                    ),
                    None => (rest, 1),
                };
                let paths: Vec<PathBuf> = members.split(',').map(PathBuf::from).collect();
                if paths.iter().any(|p| p.as_os_str().is_empty()) {
                    bail!("target {s:?}: give sluice-stripe:MEMBER,MEMBER,...[;parity=N]");
                }
                TargetSpec::SluiceStripe(paths, parity)
            }
            "sluice-objects" => TargetSpec::SluiceObjects(ObjectsSpec::parse(s, rest)?),
            "nbd" => TargetSpec::Nbd(rest.to_string()),
            "file" => TargetSpec::File(rest.into()),
            "dev" => TargetSpec::Dev(rest.into()),
            other => {
                bail!("unknown target kind {other:?} in {s:?} (use sluice:, sluice-objects:, nbd:, file: or dev:)")
            }
        })
    }
    pub fn kind(&self) -> &'static str {
        match self {
            TargetSpec::Sluice(_)
            | TargetSpec::SluiceNoVerify(_)
            | TargetSpec::SluiceNoDiscard(_)
            | TargetSpec::SluiceBatch(_)
            | TargetSpec::SluiceLog(..)
            | TargetSpec::SluiceStripe(..)
            | TargetSpec::SluiceObjects(_) => "sluice",
            TargetSpec::Nbd(_) => "nbd",
            TargetSpec::File(_) => "file",
            TargetSpec::Dev(_) => "dev",
        }
    }
}

impl std::fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetSpec::Sluice(p) => write!(f, "sluice:{}", p.display()),
            TargetSpec::SluiceNoVerify(p) => write!(f, "sluice-noverify:{}", p.display()),
            TargetSpec::SluiceNoDiscard(p) => write!(f, "sluice-nodiscard:{}", p.display()),
            TargetSpec::SluiceBatch(p) => write!(f, "sluice-batch:{}", p.display()),
            TargetSpec::SluiceLog(p, None) => write!(f, "sluice-ilog:{}", p.display()),
            TargetSpec::SluiceLog(p, Some(l)) => {
                write!(f, "sluice-logdev:{},{}", p.display(), l.display())
            }
            TargetSpec::SluiceStripe(ps, parity) => {
                let names: Vec<String> = ps.iter().map(|p| p.display().to_string()).collect();
                write!(f, "sluice-stripe:{};parity={parity}", names.join(","))
            }
            TargetSpec::SluiceObjects(o) => write!(
                f,
                "sluice-objects:{},{}{}{}",
                o.store,
                o.cache_dir.display(),
                if o.flush_to_store {
                    ";flush-to=store"
                } else {
                    ""
                },
                if o.no_intent_log {
                    ";no-intent-log"
                } else {
                    ""
                }
            ),
            TargetSpec::Nbd(u) => write!(f, "nbd:{u}"),
            TargetSpec::File(p) => write!(f, "file:{}", p.display()),
            TargetSpec::Dev(p) => write!(f, "dev:{}", p.display()),
        }
    }
}

/// How to open targets.
#[derive(Clone, Debug)]
pub struct OpenSpec {
    /// Size of a sluice volume or raw file created because it was missing.
    pub create_size: u64,
    /// Over-provisioning of a created sluice volume (fraction).
    pub overprovision: f64,
    /// The workload writes.
    pub writes: bool,
    pub force: bool,
}

/// A block target driven by benchmark threads. Buffers passed in are 4 KiB aligned.
pub trait Target: Send + Sync {
    fn describe(&self) -> String;
    fn size(&self) -> u64;
    /// Smallest IO size (and alignment) the target accepts.
    fn min_io(&self) -> u64;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()>;
    fn flush(&self) -> Result<()>;
    /// Engine counters, for in-process sluice targets.
    fn engine_stats(&self) -> Option<Stats> {
        None
    }
    /// The object store's counters, for a volume in one (`sluice-objects:`).
    fn store_counters(&self) -> Option<StoreCounters> {
        None
    }
    /// Clean shutdown (sluice: close with a checkpoint; nbd: disconnect).
    fn close(&self) -> Result<()> {
        Ok(())
    }
    /// Random-write phases submit their outstanding writes as one batch per
    /// call from one thread (`write_many`) instead of one thread each
    /// (`sluice-batch:`).
    fn batches(&self) -> bool {
        false
    }
    /// Several writes; returns once all are done (as `write` each).
    fn write_many(&self, writes: &[(u64, &[u8])]) -> Result<()> {
        for &(offset, buf) in writes {
            self.write(offset, buf)?;
        }
        Ok(())
    }
}

/// What a volume in an object store asked of the store so far (totals; a
/// phase reports differences).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Segment objects put, and their bytes.
    pub uploads: u64,
    pub upload_bytes: u64,
    /// Ranged or whole GETs.
    pub gets: u64,
    /// FLUSH log objects put (the store-durable mode), their bytes and the
    /// microseconds their PUTs took, summed.
    pub log_puts: u64,
    pub log_bytes: u64,
    pub log_put_us: u64,
}

pub fn open(spec: &TargetSpec, o: &OpenSpec) -> Result<Arc<dyn Target>> {
    Ok(match spec {
        TargetSpec::SluiceObjects(_) => bail!(
            "{spec}: a volume in an object store is opened by `sluice bench` (the store's client, \
             lease and create options are the CLI's: src/cli/objects.rs)"
        ),
        TargetSpec::Sluice(p) => Arc::new(SluiceTarget::open(p, o)?),
        TargetSpec::SluiceBatch(p) => {
            let mut t = SluiceTarget::open(p, o)?;
            t.batch = true;
            t.desc += " (writes batched: write_many)";
            Arc::new(t)
        }
        TargetSpec::SluiceNoVerify(p) => Arc::new(SluiceTarget::open_with(
            p,
            o,
            OpenOptions {
                verify_reads: false,
                ..Default::default()
            },
        )?),
        TargetSpec::SluiceNoDiscard(p) => Arc::new(SluiceTarget::open_with(
            p,
            o,
            OpenOptions {
                discard: false,
                ..Default::default()
            },
        )?),
        TargetSpec::SluiceLog(p, log) => Arc::new(SluiceTarget::open_log(p, log.as_deref(), o)?),
        TargetSpec::SluiceStripe(ps, parity) => {
            Arc::new(SluiceTarget::open_stripe(ps, *parity, o)?)
        }
        TargetSpec::File(p) => Arc::new(RawTarget::open(p, false, o)?),
        TargetSpec::Dev(p) => Arc::new(RawTarget::open(p, true, o)?),
        TargetSpec::Nbd(uri) => {
            let c = NbdClient::connect(uri).with_context(|| format!("connecting to {uri}"))?;
            if o.writes && !o.force {
                let mut head = AlignedBuf::new(safety::PROBE_BYTES.min(c.size() as usize));
                c.read(0, &mut head)?;
                if let Some(why) = safety::signature(&head) {
                    bail!("{uri} holds {why}; a write test would destroy it (use --force to run anyway)");
                }
            }
            Arc::new(c)
        }
    })
}

/// The media of an in-process volume, seen by the media-side access pattern when
/// metrics are on.
fn metered(m: FileMedia) -> Arc<dyn Media> {
    if crate::metrics::get().is_some() {
        Arc::new(crate::metrics::MeteredMedia { inner: m })
    } else {
        Arc::new(m)
    }
}

/// The engine in-process.
pub struct SluiceTarget {
    vol: Volume,
    desc: String,
    /// `sluice-batch:`: random writes go in batches (`Target::batches`).
    batch: bool,
}

impl SluiceTarget {
    /// A volume already mounted (`sluice bench` hands in a volume in an
    /// object store this way), described as `desc`.
    pub fn from_volume(vol: Volume, desc: String) -> SluiceTarget {
        SluiceTarget {
            vol,
            desc,
            batch: false,
        }
    }

    /// The mounted volume.
    pub fn volume(&self) -> &Volume {
        &self.vol
    }

    pub fn open(path: &Path, o: &OpenSpec) -> Result<SluiceTarget> {
        Self::open_with(path, o, OpenOptions::default())
    }

    pub fn open_with(path: &Path, o: &OpenSpec, open_opts: OpenOptions) -> Result<SluiceTarget> {
        Self::open_full(path, o, open_opts, None)
    }

    /// A volume with an intent log: in the volume (`log` None) or on the
    /// log device `log` (locked; created if missing, probed unless --force).
    pub fn open_log(path: &Path, log: Option<&Path>, o: &OpenSpec) -> Result<SluiceTarget> {
        let mut devs = Vec::new();
        if let Some(l) = log {
            let size = crate::format::logdev::LOGDEV_RING_OFFSET + crate::DEFAULT_INTENT_LOG_BYTES;
            let m = match FileMedia::create_new(l, size) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let m = FileMedia::open(l, false)
                        .with_context(|| format!("opening log device {}", l.display()))?;
                    // a log device of this volume is kept; anything else that
                    // holds data is refused without --force
                    if !o.force && !path.exists() {
                        if let Some(why) = safety::refuse_write(l, false)? {
                            bail!("log device {} {why} (use --force)", l.display());
                        }
                    }
                    m
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("creating log device {}", l.display()))
                }
            };
            devs.push(crate::LogDevice(Arc::new(m) as Arc<dyn Media>));
        }
        let open_opts = OpenOptions {
            log_devices: devs.clone(),
            ..OpenOptions::default()
        };
        Self::open_full(path, o, open_opts, Some(devs))
    }

    /// A stripe set over `paths` (issue 20): mounted when they are one
    /// (refused with live data unless --force), else created at `--size`
    /// (members locked, probed unless --force, grown to what each needs).
    pub fn open_stripe(paths: &[PathBuf], parity: u32, o: &OpenSpec) -> Result<SluiceTarget> {
        use crate::stripe_set::open::{member_bytes_for, read_member};
        let member = |p: &Path| {
            FileMedia::open_unlocked_read_only(p)
                .ok()
                .and_then(|m| read_member(&m).ok().flatten())
                .is_some()
        };
        let vol = if paths.iter().all(|p| p.exists() && member(p)) {
            let mut devs = Vec::new();
            for p in paths {
                let m = FileMedia::open(p, false)
                    .with_context(|| format!("opening {}", p.display()))?;
                devs.push((p.display().to_string(), metered(m)));
            }
            let vol = Volume::open_striped(devs, &OpenOptions::default())
                .context("mounting the stripe set")?;
            let live = vol.stats().live_data_blocks;
            if o.writes && !o.force && live > 0 {
                let _ = vol.close();
                bail!(
                    "the stripe set holds live data; a write test would overwrite it (use --force)"
                );
            }
            vol
        } else {
            let unit = crate::stripe::DEFAULT_STRIPE_UNIT;
            let seg = crate::geometry::DEFAULT_SEGMENT_BYTES;
            let need = member_bytes_for(
                paths.len() as u32,
                parity,
                unit,
                seg,
                o.create_size,
                o.overprovision,
                0,
            )?;
            let mut devs = Vec::new();
            for p in paths {
                let m = if p.exists() {
                    let mut m = FileMedia::open(p, false)
                        .with_context(|| format!("opening {}", p.display()))?;
                    if !o.force {
                        if let Some(why) = safety::refuse_write(p, false)? {
                            bail!(
                                "{} {why}; a stripe set there would destroy it (use --force)",
                                p.display()
                            );
                        }
                    }
                    m.grow(need)?;
                    m
                } else {
                    FileMedia::create_new(p, need)
                        .with_context(|| format!("creating {}", p.display()))?
                };
                devs.push((p.display().to_string(), metered(m)));
            }
            let set = Volume::format_striped(
                devs,
                parity,
                unit,
                &CreateOptions {
                    logical_bytes: Some(o.create_size),
                    overprovision: o.overprovision,
                    segment_bytes: seg,
                    ..Default::default()
                },
            )
            .context("creating the stripe set")?;
            Volume::open_set(set, &OpenOptions::default()).context("mounting the stripe set")?
        };
        let desc = format!(
            "sluice in-process on {}",
            vol.stripe_set().expect("a stripe set").describe()
        );
        Ok(SluiceTarget {
            vol,
            desc,
            batch: false,
        })
    }

    fn open_full(
        path: &Path,
        o: &OpenSpec,
        open_opts: OpenOptions,
        log: Option<Vec<crate::LogDevice>>,
    ) -> Result<SluiceTarget> {
        let exists = path.exists();
        let holds_volume = exists && safety::is_sluice(path)?;
        let vol = if holds_volume {
            let media = metered(
                FileMedia::open(path, false)
                    .with_context(|| format!("opening {}", path.display()))?,
            );
            let vol = Volume::open(media, &open_opts)
                .with_context(|| format!("mounting {}", path.display()))?;
            let live = vol.stats().live_data_blocks;
            if o.writes && !o.force && live > 0 {
                let _ = vol.close();
                bail!(
                    "sluice:{} holds a volume with {} of live data; a write test would \
                     overwrite it (use --force to run anyway, or give a new path)",
                    path.display(),
                    crate::size::human(live * 4096)
                );
            }
            vol
        } else {
            if o.create_size == 0 || !o.create_size.is_multiple_of(4096) {
                bail!(
                    "--size {} must be a positive multiple of 4K to create {}",
                    o.create_size,
                    path.display()
                );
            }
            let seg = crate::geometry::DEFAULT_SEGMENT_BYTES;
            let in_volume_ring = match &log {
                Some(d) if d.is_empty() => crate::DEFAULT_INTENT_LOG_BYTES,
                _ => 0,
            };
            let need = crate::geometry::Geometry::for_logical_log(
                o.create_size / 4096,
                (seg / 4096) as u32,
                o.overprovision,
                in_volume_ring,
            )
            .media_bytes();
            // The volume lock first (FileMedia::open/create_new), then the probe:
            // nothing is judged or written while another opener holds the file.
            let file = if exists {
                let mut m = FileMedia::open(path, false)
                    .with_context(|| format!("opening {}", path.display()))?;
                if !o.force {
                    if let Some(why) = safety::refuse_write(path, false)? {
                        bail!(
                            "sluice:{} {why}; creating a volume there would destroy it (use --force)",
                            path.display()
                        );
                    }
                }
                m.grow(need)?;
                m
            } else {
                FileMedia::create_new(path, need)
                    .with_context(|| format!("creating {}", path.display()))?
            };
            let media = metered(file);
            Volume::create(
                media,
                &CreateOptions {
                    logical_bytes: Some(o.create_size),
                    overprovision: o.overprovision,
                    segment_bytes: seg,
                    intent_log: log.as_ref().map(|_| crate::DEFAULT_INTENT_LOG_BYTES),
                    log_devices: log.clone().unwrap_or_default(),
                    ..Default::default()
                },
                &open_opts,
            )
            .with_context(|| format!("creating a volume on {}", path.display()))?
        };
        let desc = format!(
            "sluice in-process{}{}, {}",
            if open_opts.verify_reads {
                ""
            } else {
                " (verified reads off)"
            },
            match &log {
                None => String::new(),
                Some(d) if d.is_empty() => " (intent log in the volume)".into(),
                Some(d) => format!(" (intent log on {})", d[0].0.describe()),
            },
            path.display()
        );
        Ok(SluiceTarget {
            vol,
            desc,
            batch: false,
        })
    }
}

impl Target for SluiceTarget {
    fn describe(&self) -> String {
        self.desc.clone()
    }
    fn size(&self) -> u64 {
        self.vol.size_bytes()
    }
    fn min_io(&self) -> u64 {
        512
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(m) = crate::metrics::get() {
            m.host.observe(offset, buf.len() as u64);
        }
        Ok(self.vol.read(offset, buf)?)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        if let Some(m) = crate::metrics::get() {
            m.host.observe(offset, buf.len() as u64);
        }
        Ok(self.vol.write(offset, buf, false)?)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.vol.flush()?)
    }
    fn engine_stats(&self) -> Option<Stats> {
        Some(self.vol.stats())
    }
    fn close(&self) -> Result<()> {
        Ok(self.vol.close()?)
    }
    fn batches(&self) -> bool {
        self.batch
    }
    fn write_many(&self, writes: &[(u64, &[u8])]) -> Result<()> {
        if let Some(m) = crate::metrics::get() {
            for &(offset, buf) in writes {
                m.host.observe(offset, buf.len() as u64);
            }
        }
        let (_, r) = self.vol.write_many(writes);
        Ok(r?)
    }
}

/// A raw file or block device with O_DIRECT, pread/pwrite from the calling thread.
pub struct RawTarget {
    file: File,
    size: u64,
    min_io: u64,
    desc: String,
}

impl RawTarget {
    pub fn open(path: &Path, device: bool, o: &OpenSpec) -> Result<RawTarget> {
        let exists = path.exists();
        if device && !exists {
            bail!("{} does not exist", path.display());
        }
        if exists {
            let is_dev = std::fs::metadata(path)?.file_type().is_block_device();
            if device && !is_dev {
                bail!(
                    "{} is not a block device (use file:{} for a regular file)",
                    path.display(),
                    path.display()
                );
            }
            if !device && is_dev {
                bail!(
                    "{} is a block device (use dev:{})",
                    path.display(),
                    path.display()
                );
            }
            if o.writes && !o.force {
                if let Some(why) = safety::refuse_write(path, device)? {
                    bail!(
                        "{} {why}; a write test would destroy it (use --force to run anyway)",
                        path.display()
                    );
                }
            }
        } else {
            if o.create_size == 0 {
                bail!(
                    "{} does not exist: give --size to create it",
                    path.display()
                );
            }
            let f = FsOpen::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            // Allocate (unwritten extents) so the first pass does not measure the
            // filesystem's block allocator; fall back to a sparse file.
            let r = unsafe {
                libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, o.create_size as i64)
            };
            if r != 0 {
                f.set_len(o.create_size)?;
            }
        }
        let file = FsOpen::new()
            .read(true)
            .write(o.writes)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
        // the volume lock, as every opener takes it: a raw write test never
        // runs on a file or device a server (or another bench) has open
        crate::media::lock_file(&file, path, o.writes)?;
        let size = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0))?;
        if size < 4096 {
            bail!("{} holds only {size} bytes", path.display());
        }
        // The smallest O_DIRECT read that works is the smallest IO we issue.
        let mut probe = AlignedBuf::new(4096);
        let min_io = if file.read_exact_at(&mut probe[..512], 0).is_ok() {
            512
        } else {
            4096
        };
        Ok(RawTarget {
            file,
            size,
            min_io,
            desc: format!(
                "raw {} {}, O_DIRECT",
                if device { "device" } else { "file" },
                path.display()
            ),
        })
    }
}

impl Target for RawTarget {
    fn describe(&self) -> String {
        self.desc.clone()
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn min_io(&self) -> u64 {
        self.min_io
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.file.read_exact_at(buf, offset)?)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        Ok(self.file.write_all_at(buf, offset)?)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.file.sync_data()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn target_specs_parse_and_reject_garbage() {
        assert_eq!(
            TargetSpec::parse("sluice:/tmp/v.img").unwrap(),
            TargetSpec::Sluice("/tmp/v.img".into())
        );
        assert_eq!(
            TargetSpec::parse("nbd:nbd+unix:///x?socket=/s").unwrap(),
            TargetSpec::Nbd("nbd+unix:///x?socket=/s".into())
        );
        assert_eq!(
            TargetSpec::parse("dev:/dev/sdb").unwrap().to_string(),
            "dev:/dev/sdb"
        );
        let st = TargetSpec::parse("sluice-stripe:a,b,c;parity=2").unwrap();
        assert_eq!(
            st,
            TargetSpec::SluiceStripe(vec!["a".into(), "b".into(), "c".into()], 2)
        );
        assert_eq!(st.to_string(), "sluice-stripe:a,b,c;parity=2");
        assert_eq!(
            TargetSpec::parse("sluice-stripe:a,b").unwrap(),
            TargetSpec::SluiceStripe(vec!["a".into(), "b".into()], 1)
        );
        let b = TargetSpec::parse("sluice-batch:/tmp/v.img").unwrap();
        assert_eq!(b, TargetSpec::SluiceBatch("/tmp/v.img".into()));
        assert_eq!(b.to_string(), "sluice-batch:/tmp/v.img");
        assert_eq!(b.kind(), "sluice");
        let o = TargetSpec::parse("sluice-objects:rados://sluice/v1,/var/tmp/c;flush-to=store")
            .unwrap();
        assert_eq!(
            o,
            TargetSpec::SluiceObjects(ObjectsSpec {
                store: "rados://sluice/v1".into(),
                cache_dir: "/var/tmp/c".into(),
                flush_to_store: true,
                no_intent_log: false,
            })
        );
        assert_eq!(
            o.to_string(),
            "sluice-objects:rados://sluice/v1,/var/tmp/c;flush-to=store"
        );
        assert_eq!(o.kind(), "sluice");
        let l = TargetSpec::parse("sluice-objects:s3://b/p,c;no-intent-log").unwrap();
        assert_eq!(l.to_string(), "sluice-objects:s3://b/p,c;no-intent-log");
        for bad in [
            "sluice-objects:s3://b/p",
            "sluice-objects:,c",
            "sluice-objects:/tmp/x,c",
            "sluice-objects:s3://b/p,c;flush-to=disk",
            "sluice-objects:s3://b/p,c;flush-to=store;no-intent-log",
        ] {
            assert!(TargetSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(TargetSpec::parse("sluice-stripe:a,,b").is_err());
        assert!(TargetSpec::parse("sluice-stripe:a,b;parity=x").is_err());
        assert!(TargetSpec::parse("/tmp/x").is_err());
        assert!(TargetSpec::parse("disk:/tmp/x").is_err());
        assert!(TargetSpec::parse("file:").is_err());
    }
}
