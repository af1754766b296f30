//! `sluice create`: format a volume on a file or block device.
//!
//! Invariant: nothing is probed or written before the volume lock is held (a
//! live volume is refused, --force or not); without --force, anything the
//! signature probe finds (`media::probe`) is refused, naming it; a new file is
//! created O_EXCL, and on failure only that file, still the same inode, is
//! removed.

use anyhow::{bail, Context};
use sluice::geometry::Geometry;
use sluice::media::{FileMedia, Media};
use sluice::size::human;
use sluice::{CreateOptions, GcPolicy, Volume};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// File or block device to hold the volume (or give --device for a
    /// stripe set, or --store with --cache-dir; "-", the default, means none).
    #[arg(default_value = "-", hide_default_value = true)]
    pub path: PathBuf,
    /// Exported (logical) size, e.g. 10G. A file is created large enough for it plus
    /// over-provisioning and metadata; a block device defaults to all it can hold.
    #[arg(long, value_parser = super::parse_size)]
    pub size: Option<u64>,
    /// Spare space kept for GC, percent of the segment area (3-50).
    #[arg(long, default_value_t = 10.0)]
    pub overprovision: f64,
    /// Segment (write block) size, e.g. 4M.
    #[arg(long, value_parser = super::parse_size, default_value = "4M")]
    pub segment_size: u64,
    /// GC policy: decay-cb (default), greedy, cost-benefit, generational,
    /// generational-cb, sepbit, sepbit-cb (docs/gc.md).
    #[arg(long, default_value = sluice::gc::DEFAULT_POLICY.name(), value_parser = GcPolicy::parse)]
    pub gc: GcPolicy,
    /// Overwrite an existing file or device that is not empty (never one another
    /// process has open as a volume: its lock is not overridden).
    #[arg(long)]
    pub force: bool,
    /// Allocate the whole file now (fallocate) instead of leaving it sparse, so a
    /// full host filesystem is found at create time, not by a client's write.
    #[arg(long)]
    pub preallocate: bool,
    /// Keep a 16 MiB intent log ring in the volume (format v2): a FLUSH or FUA
    /// writes the blocks not yet logged once, at their places in the main log,
    /// plus a record of a few hundred bytes naming them, and one media flush,
    /// instead of sealing a partial chunk (docs/intent-log.md; on a compressed
    /// volume the record carries the blocks). Volumes made with it need a
    /// build that knows format v2 (and LOG_INDIRECT).
    #[arg(long)]
    pub intent_log: bool,
    /// A volume in an object store (--store) in the local-log mode gets the
    /// intent log ring unless this is given: without it every FLUSH seals
    /// the open chunk, and the chunk header blocks that costs are uploaded
    /// too (docs/objects.md §4.9: at 70% fill, 2.1 store bytes per host
    /// byte against 1.3-1.4, ~1.5x the OSD CPU per GiB). A flat volume has no ring unless
    /// --intent-log says so; the store-durable mode (--flush-to store) never
    /// has one.
    #[arg(long, conflicts_with_all = ["intent_log", "log_devices"])]
    pub no_intent_log: bool,
    /// Keep the intent log on a separate, faster device instead (an NVMe or
    /// Optane partition, a pmem device; a file in tests), implies
    /// --intent-log. Give it twice to mirror the log on two devices. A file
    /// that does not exist is created (16 MiB of ring); an existing one that
    /// holds data is refused unless --force; one in use never.
    #[arg(long = "log-device", value_name = "PATH")]
    pub log_devices: Vec<PathBuf>,
    /// Compression: lz4 or off (format v2 `COMPRESSION`, docs/compression.md).
    /// lz4 packs compressible blocks as LZ4 fragments (incompressible ones
    /// are skipped after an entropy sample) and gives the map 5 bytes per
    /// block instead of 4 (1.25 GiB of RAM per TiB exported).
    #[arg(long, value_name = "ALGO", default_value = "off")]
    pub compress: sluice::compress::Compression,
    #[command(flatten)]
    pub objects: super::objects::StoreArgs,
    /// A member of a stripe set (give it once per member, more than
    /// --parity + 1 of them) instead of PATH: files or block devices, each
    /// locked and, without --force, refused if it holds data (docs/stripes.md).
    #[arg(long = "device", value_name = "PATH", conflicts_with = "log_devices")]
    pub devices: Vec<PathBuf>,
    /// Parity members per row of a stripe set: 0 (RAID-0), 1 (RAID-5), 2 (RAID-6).
    #[arg(long, default_value_t = 1, requires = "devices")]
    pub parity: u32,
    /// Bytes of one member in one row of a stripe set (a multiple of 4K).
    #[arg(long, value_parser = super::parse_size, default_value = "64K", requires = "devices")]
    pub stripe_unit: u64,
}

impl Args {
    /// `create PATH --size SIZE` with every other option at its default
    /// (and `objects` as given): what `serve --create` and `bench`'s
    /// `sluice-objects:` target create a missing volume with.
    pub fn defaults(path: &Path, size: u64, objects: super::objects::StoreArgs) -> Args {
        Args {
            path: path.to_path_buf(),
            size: Some(size),
            overprovision: 10.0,
            segment_size: 4 << 20,
            gc: sluice::gc::DEFAULT_POLICY,
            force: false,
            preallocate: false,
            intent_log: false,
            // create's default: the ring on a store volume in local-log mode
            no_intent_log: false,
            log_devices: Vec::new(),
            objects,
            compress: Default::default(),
            devices: Vec::new(),
            parity: 1,
            stripe_unit: 64 << 10,
        }
    }

    /// The ring in the volume file: --intent-log, or by default on a
    /// volume in an object store in the local-log mode (not with
    /// --no-intent-log, not with a log device: that is the log then).
    pub fn ring(&self) -> bool {
        self.log_devices.is_empty()
            && (self.intent_log || (!self.no_intent_log && self.objects.ring_by_default()))
    }
}

/// Fewest segments a volume may have: below this the GC reserve and open segments
/// dwarf the requested over-provisioning.
const MIN_SEGMENTS_OF_DATA: u64 = 8;

/// Bytes free for an unprivileged writer on the filesystem holding `p`.
fn free_bytes_near(p: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Allocated bytes of a regular file (0 when missing).
fn allocated_bytes(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map(|m| m.blocks() * 512).unwrap_or(0)
}

/// Reserve the whole file on the host filesystem.
fn preallocate(p: &Path, len: u64) -> anyhow::Result<()> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))?;
    // SAFETY: fallocate on a descriptor we own; returns an errno, sets none.
    let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    if r != 0 {
        bail!(
            "--preallocate: reserving {} for {}: {}",
            human(len),
            p.display(),
            std::io::Error::from_raw_os_error(r)
        );
    }
    Ok(())
}

/// Validate options and format `path`; shared with `serve --create`.
pub fn create_volume(a: &Args) -> anyhow::Result<Volume> {
    if !a.devices.is_empty() {
        if a.path.as_os_str() != "-" {
            bail!("give either PATH or --device, not both");
        }
        return super::stripe::create(a);
    }
    if a.path.as_os_str() == "-" {
        bail!("give the volume's PATH (or --device once per stripe-set member)");
    }
    if !(3.0..=50.0).contains(&a.overprovision) {
        bail!(
            "--overprovision {} is outside 3..50 percent",
            a.overprovision
        );
    }
    let op = a.overprovision / 100.0;
    let seg_blocks = a.segment_size / 4096;
    if !a.segment_size.is_multiple_of(64 << 10) || !(64 << 10..=1 << 30).contains(&a.segment_size) {
        bail!(
            "--segment-size {} must be a multiple of 64K between 64K and 1G",
            a.segment_size
        );
    }
    if let Some(s) = a.size {
        if s == 0 || s % 4096 != 0 {
            bail!("--size must be a positive multiple of 4K (got {s})");
        }
        let min = MIN_SEGMENTS_OF_DATA * a.segment_size;
        if s < min {
            bail!(
                "--size {} is too small for {} segments: give at least {} ({} segments), \
                 or a smaller --segment-size",
                human(s),
                human(a.segment_size),
                human(min),
                MIN_SEGMENTS_OF_DATA
            );
        }
    }
    if a.size.is_none() && std::fs::symlink_metadata(&a.path).is_err() {
        bail!(
            "{} does not exist: give --size to create it",
            a.path.display()
        );
    }
    // The volume lock comes first (FileMedia::create_new / open take it), then
    // the probe, then any write: a live volume is never probed or formatted,
    // with or without --force.
    let (media, fresh) = match FileMedia::create_new(&a.path, 0) {
        Ok(m) => (m, true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = FileMedia::open(&a.path, false)
                .with_context(|| format!("opening {}", a.path.display()))?;
            if !a.force {
                refuse_if_holds_data(&a.path)?;
            }
            (m, false)
        }
        Err(e) => {
            return Err(e).with_context(|| format!("creating {}", a.path.display()));
        }
    };
    if fresh && a.size.is_none() {
        // a half-made new file is no volume: leave nothing behind
        let _ = media.remove_created();
        bail!(
            "{} does not exist: give --size to create it",
            a.path.display()
        );
    }
    let mut media = Arc::new(media);
    let mut logs = Vec::new();
    let r =
        open_log_devices(a, &mut logs).and_then(|_| format(a, &mut media, op, seg_blocks, &logs));
    match r {
        Ok(vol) => Ok(vol),
        Err(e) => {
            if fresh {
                // only the file this run created, and only while it is still
                // the same file (never one another run made at this path)
                if let Ok(m) = Arc::try_unwrap(media) {
                    let _ = m.remove_created();
                }
            }
            for l in logs {
                if let Ok(m) = Arc::try_unwrap(l) {
                    let _ = m.remove_created();
                }
            }
            Err(e)
        }
    }
}

/// Lock (and, without --force, probe) each `--log-device`, creating a
/// missing file; `logs` gets each as it is opened, so a failure removes
/// only the files this run created.
fn open_log_devices(a: &Args, logs: &mut Vec<Arc<FileMedia>>) -> anyhow::Result<()> {
    if a.log_devices.len() > 2 {
        bail!(
            "--log-device given {} times: at most twice (a mirrored pair)",
            a.log_devices.len()
        );
    }
    let size = sluice::format::logdev::LOGDEV_RING_OFFSET + sluice::DEFAULT_INTENT_LOG_BYTES;
    for p in &a.log_devices {
        let m = match FileMedia::create_new(p, size) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // the lock first (a log device in use is never touched), then the probe
                let m = FileMedia::open(p, false)
                    .with_context(|| format!("opening log device {}", p.display()))?;
                if !a.force {
                    if let Some(why) = sluice::media::probe::refuse_write(p, false)? {
                        bail!(
                            "log device {} {why}; use --force to overwrite it",
                            p.display()
                        );
                    }
                }
                m
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating log device {}", p.display()))
            }
        };
        logs.push(Arc::new(m));
    }
    Ok(())
}

/// Size (files only), optionally preallocate, and format the locked media.
fn format(
    a: &Args,
    media: &mut Arc<FileMedia>,
    op: f64,
    seg_blocks: u64,
    logs: &[Arc<FileMedia>],
) -> anyhow::Result<Volume> {
    if let (false, Some(size)) = (media.is_block_device(), a.size) {
        let log = if a.ring() && logs.is_empty() {
            sluice::DEFAULT_INTENT_LOG_BYTES
        } else {
            0
        };
        let width = if a.compress == sluice::compress::Compression::Lz4 {
            sluice::format::checkpoint::MAP_VALUE_BYTES_COMPRESSED
        } else {
            sluice::format::checkpoint::MAP_VALUE_BYTES
        };
        let need = Geometry::for_logical_with(size / 4096, seg_blocks as u32, op, log, width)
            .media_bytes();
        Arc::get_mut(media)
            .context("the media is shared before format")?
            .grow(need)
            .with_context(|| format!("creating {} ({})", a.path.display(), human(need)))?;
        if a.preallocate {
            preallocate(&a.path, need)?;
        }
        let grow = need.saturating_sub(allocated_bytes(&a.path));
        if let Some(free) = free_bytes_near(&a.path) {
            if grow > free {
                eprintln!(
                    "sluice: warning: {} can grow by {} but its filesystem has {} free; \
                     when it fills, clients get ENOSPC and the server stops \
                     (use --preallocate to reserve the space now)",
                    a.path.display(),
                    human(grow),
                    human(free)
                );
            }
        }
    }
    let opts = CreateOptions {
        logical_bytes: a.size,
        overprovision: op,
        segment_bytes: a.segment_size,
        gc_policy: a.gc,
        intent_log: (a.ring() || !logs.is_empty()).then_some(sluice::DEFAULT_INTENT_LOG_BYTES),
        log_devices: log_devices(logs),
        compression: a.compress,
        ..Default::default()
    };
    let on = || format!("creating a volume on {}", a.path.display());
    Volume::format(&**media, &opts).with_context(on)?;
    let (store, on_media) = match a
        .objects
        .after_format(media.clone() as Arc<dyn Media>, a.force)?
    {
        // the store-durable mode's FLUSH log over the file, or the file
        Some((h, m)) => (Some(h), m),
        None => (None, media.clone() as Arc<dyn Media>),
    };
    Volume::open(
        on_media,
        &sluice::OpenOptions {
            log_devices: log_devices(logs),
            store,
            ..Default::default()
        },
    )
    .with_context(on)
}

fn log_devices(logs: &[Arc<FileMedia>]) -> Vec<sluice::LogDevice> {
    logs.iter()
        .map(|l| sluice::LogDevice(l.clone() as Arc<dyn Media>))
        .collect()
}

/// Refuse to format over something that holds data (the probe bench uses:
/// 128 KiB of signatures, and data anywhere in a file), unless --force.
pub(super) fn refuse_if_holds_data(p: &Path) -> anyhow::Result<()> {
    let Some(why) = sluice::media::probe::refuse_write(p, false)? else {
        return Ok(());
    };
    if sluice::media::probe::is_sluice(p)? {
        bail!(
            "{} already holds a sluice volume; use --force to destroy it and create a new one",
            p.display()
        );
    }
    bail!("{} {why}; use --force to overwrite it", p.display());
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    let mut path = (a.path.as_os_str() != "-").then(|| a.path.clone());
    a.objects.resolve(&mut path)?;
    if let Some(p) = path {
        a.path = p;
    }
    a.objects.prepare_create()?;
    let vol = create_volume(&a)?;
    let g = vol.geometry();
    let spare = sluice::sim::drive::effective_spare(&g) * 100.0;
    let made = match vol.stripe_set() {
        Some(set) => set.describe(),
        None => a.path.display().to_string(),
    };
    println!(
        "created {}: {} exported, {} segments of {}, {:.0}% over-provisioning \
         (effective spare {:.1}% with the GC reserve), GC {}",
        made,
        human(vol.size_bytes()),
        g.segment_count,
        human(g.segment_bytes()),
        a.overprovision,
        spare,
        vol.gc_policy().name()
    );
    for (i, l) in a.log_devices.iter().enumerate() {
        println!(
            "intent log on {} (log device {} of {})",
            l.display(),
            i + 1,
            a.log_devices.len()
        );
    }
    if let Some(s) = &a.objects.store {
        println!(
            "segments in {s}, metadata and staging in {}",
            a.path.parent().unwrap_or(Path::new(".")).display()
        );
    }
    vol.close()?;
    Ok(0)
}

/// `sluice log-device`: change the intent log device of a volume that is not
/// mounted.
#[derive(clap::Args)]
pub struct LogDeviceArgs {
    #[command(subcommand)]
    pub action: LogDeviceAction,
}

#[derive(clap::Subcommand)]
pub enum LogDeviceAction {
    /// Make NEW the volume's log device (mirror --mirror of a pair): NEW gets
    /// the log device superblock, then the volume is mounted with NEW and the
    /// other mirror (--log-device) and closed cleanly. Refused for a volume
    /// not closed cleanly with no other mirror given, unless
    /// --log-device-missing-ok (what only the old device held is lost).
    Replace {
        /// The volume (file or block device; not in use).
        volume: PathBuf,
        /// The new log device (a missing file is created with a 16 MiB ring).
        new: PathBuf,
        /// Which mirror NEW replaces (0, or 1 of a pair).
        #[arg(long, default_value_t = 0)]
        mirror: u16,
        /// The volume's other log device, for a mirrored pair.
        #[arg(long = "log-device", value_name = "PATH")]
        others: Vec<PathBuf>,
        /// Overwrite a NEW that holds data (never one in use).
        #[arg(long)]
        force: bool,
        /// Replace the only log device of a volume not closed cleanly: what
        /// only it held is lost (the notes say from which LSN).
        #[arg(long)]
        log_device_missing_ok: bool,
    },
    /// Give the volume log device NEW: its only one (the volume's log was in
    /// the volume, or it had none: the volume is closed cleanly first), or,
    /// with its one device given (--log-device), a mirror of it. NEW is
    /// refused when it holds data or another volume, unless --force (a
    /// leftover log device of this same volume is reused).
    Add {
        /// The volume (file or block device; not in use).
        volume: PathBuf,
        /// The new log device (a missing file is created with a 16 MiB ring).
        new: PathBuf,
        /// The volume's log device, when NEW is to mirror it.
        #[arg(long = "log-device", value_name = "PATH")]
        existing: Vec<PathBuf>,
        /// Overwrite a NEW that holds data (never one in use).
        #[arg(long)]
        force: bool,
    },
    /// Take log device DEV from the volume. One of a mirrored pair: give the
    /// other (--log-device), which stays. The last one: its records are put
    /// into the main log first (a mount with it and a clean close), then the
    /// volume has no intent log (FLUSH seals the open chunk); DEV's log
    /// superblock is wiped. Without DEV: remove the volume's in-volume ring
    /// (`create --intent-log`) the same way (its records into the main log,
    /// then no intent log; its space stays reserved, unused).
    Remove {
        /// The volume (file or block device; not in use).
        volume: PathBuf,
        /// The log device to remove (none: the in-volume ring).
        dev: Option<PathBuf>,
        /// The other log device of a mirrored pair (it stays).
        #[arg(long = "log-device", value_name = "PATH")]
        keep: Vec<PathBuf>,
        /// DEV is lost: remove it without its records (only needed for the
        /// last device of a volume not closed cleanly; what only it held is lost).
        #[arg(long)]
        log_device_missing_ok: bool,
    },
}

pub fn run_log_device(a: LogDeviceArgs) -> anyhow::Result<i32> {
    let (volume, new, mirror, others, force, log_device_missing_ok) = match a.action {
        LogDeviceAction::Replace {
            volume,
            new,
            mirror,
            others,
            force,
            log_device_missing_ok,
        } => (volume, new, mirror, others, force, log_device_missing_ok),
        LogDeviceAction::Add {
            volume,
            new,
            existing,
            force,
        } => return run_add(volume, new, existing, force),
        LogDeviceAction::Remove {
            volume,
            dev,
            keep,
            log_device_missing_ok,
        } => return run_remove(volume, dev, keep, log_device_missing_ok),
    };
    let media =
        FileMedia::open(&volume, false).with_context(|| format!("opening {}", volume.display()))?;
    let others = super::serve::open_log_devices(&others, false, false)?;
    // the new device: locked, and probed unless --force (as create does)
    let args = Args {
        path: volume.clone(),
        size: None,
        overprovision: 10.0,
        segment_size: 4 << 20,
        gc: sluice::gc::DEFAULT_POLICY,
        force,
        preallocate: false,
        compress: Default::default(),
        intent_log: true,
        no_intent_log: false,
        log_devices: vec![new.clone()],
        objects: Default::default(),
        devices: Vec::new(),
        parity: 1,
        stripe_unit: 64 << 10,
    };
    let mut logs = Vec::new();
    if let Err(e) = open_log_devices(&args, &mut logs) {
        for l in logs {
            if let Ok(m) = Arc::try_unwrap(l) {
                let _ = m.remove_created();
            }
        }
        return Err(e);
    }
    let new_dev = sluice::LogDevice(logs[0].clone() as Arc<dyn Media>);
    let notes = sluice::volume::replace_log_device(
        Arc::new(media),
        new_dev,
        mirror,
        others,
        log_device_missing_ok,
    )
    .with_context(|| format!("replacing the log device of {}", volume.display()))?;
    for n in notes {
        println!("mount       {n}");
    }
    println!(
        "replaced    log device mirror {mirror} of {} by {}",
        volume.display(),
        new.display()
    );
    Ok(0)
}

/// Open a new log device for `log-device add`: locked (created when missing,
/// 16 MiB of ring), probed unless `force`; a device holding the log
/// superblock of this same volume (`uuid`: an earlier add, remove or replace
/// of it) may be reused without --force.
fn open_new_log_device(p: &Path, force: bool, uuid: &[u8; 16]) -> anyhow::Result<Arc<FileMedia>> {
    let size = sluice::format::logdev::LOGDEV_RING_OFFSET + sluice::DEFAULT_INTENT_LOG_BYTES;
    match FileMedia::create_new(p, size) {
        Ok(m) => return Ok(Arc::new(m)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating log device {}", p.display())),
    }
    // the lock first (a log device in use is never touched), then the probe
    let m =
        FileMedia::open(p, false).with_context(|| format!("opening log device {}", p.display()))?;
    if force {
        return Ok(Arc::new(m));
    }
    let Some(why) = sluice::media::probe::refuse_write(p, false)? else {
        return Ok(Arc::new(m));
    };
    let mut b = sluice::media::AlignedBuf::new(4096);
    let ours = m.read_at(&mut b[..], 0).is_ok()
        && sluice::format::logdev::LogDevSuperblock::decode(&b)
            .is_ok_and(|ls| ls.volume_uuid == *uuid);
    if ours {
        return Ok(Arc::new(m));
    }
    bail!(
        "log device {} {why}; use --force to overwrite it",
        p.display()
    )
}

/// `sluice log-device add`.
fn run_add(
    volume: PathBuf,
    new: PathBuf,
    existing: Vec<PathBuf>,
    force: bool,
) -> anyhow::Result<i32> {
    let media =
        FileMedia::open(&volume, false).with_context(|| format!("opening {}", volume.display()))?;
    let uuid = sluice::recovery::read_superblocks(&media)
        .with_context(|| format!("reading the superblock of {}", volume.display()))?
        .sb
        .uuid;
    let existing = super::serve::open_log_devices(&existing, false, false)?;
    let created = !new.exists();
    let dev = open_new_log_device(&new, force, &uuid)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let r = sluice::volume::add_log_device(
        Arc::new(media),
        sluice::LogDevice(dev.clone() as Arc<dyn Media>),
        existing,
        now,
    );
    let notes = match r {
        Ok(n) => n,
        Err(e) => {
            if created {
                if let Ok(m) = Arc::try_unwrap(dev) {
                    let _ = m.remove_created();
                }
            }
            return Err(e).with_context(|| format!("adding a log device to {}", volume.display()));
        }
    };
    for n in notes {
        println!("mount       {n}");
    }
    println!(
        "added       log device {} to {}",
        new.display(),
        volume.display()
    );
    Ok(0)
}

/// `sluice log-device remove`.
fn run_remove(
    volume: PathBuf,
    dev: Option<PathBuf>,
    keep: Vec<PathBuf>,
    missing_ok: bool,
) -> anyhow::Result<i32> {
    let media =
        FileMedia::open(&volume, false).with_context(|| format!("opening {}", volume.display()))?;
    let Some(dev) = dev else {
        if !keep.is_empty() || missing_ok {
            anyhow::bail!("without DEV, remove takes the in-volume ring: no --log-device, no --log-device-missing-ok");
        }
        let notes = sluice::volume::remove_log_device(Arc::new(media), None, Vec::new(), false)
            .with_context(|| format!("removing the intent log ring of {}", volume.display()))?;
        for n in notes {
            println!("mount       {n}");
        }
        println!("removed     the intent log ring of {}", volume.display());
        return Ok(0);
    };
    let keep = super::serve::open_log_devices(&keep, false, false)?;
    let gone = match FileMedia::open(&dev, false) {
        Ok(m) => Some(sluice::LogDevice(Arc::new(m) as Arc<dyn Media>)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(e).with_context(|| format!("opening log device {}", dev.display()))
        }
        Err(e) if missing_ok => {
            say!("sluice: warning: log device {}: {e}; removing it without its records", dev.display());
            None
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "opening log device {} (if it is lost, --log-device-missing-ok removes it without its records)",
                    dev.display()
                )
            })
        }
    };
    let notes = sluice::volume::remove_log_device(Arc::new(media), gone, keep, missing_ok)
        .with_context(|| {
            format!(
                "removing log device {} from {}",
                dev.display(),
                volume.display()
            )
        })?;
    for n in notes {
        println!("mount       {n}");
    }
    println!(
        "removed     log device {} from {}",
        dev.display(),
        volume.display()
    );
    Ok(0)
}
