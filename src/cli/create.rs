//! `sluice create`: format a volume on a file or block device.

use anyhow::{bail, Context};
use sluice::geometry::Geometry;
use sluice::media::{FileMedia, Media};
use sluice::size::human;
use sluice::{CreateOptions, GcPolicy, Volume};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// File or block device to hold the volume.
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
    /// Overwrite an existing file or device that is not empty.
    #[arg(long)]
    pub force: bool,
}

/// Validate options and format `path`; shared with `serve --create`.
pub fn create_volume(a: &Args) -> anyhow::Result<Volume> {
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
    }
    let exists = a.path.exists();
    if exists && !a.force {
        refuse_if_in_use(&a.path)?;
    }
    let media: std::sync::Arc<dyn Media> = match (exists, a.size) {
        (false, None) => bail!(
            "{} does not exist: give --size to create it",
            a.path.display()
        ),
        (false, Some(size)) | (true, Some(size)) if !is_block_device(&a.path) => {
            let need = Geometry::for_logical(size / 4096, seg_blocks as u32, op).media_bytes();
            std::sync::Arc::new(
                FileMedia::create(&a.path, need)
                    .with_context(|| format!("creating {}", a.path.display()))?,
            )
        }
        _ => std::sync::Arc::new(
            FileMedia::open(&a.path, false)
                .with_context(|| format!("opening {}", a.path.display()))?,
        ),
    };
    let opts = CreateOptions {
        logical_bytes: a.size,
        overprovision: op,
        segment_bytes: a.segment_size,
        gc_policy: a.gc,
    };
    let vol = Volume::create(media, &opts, &sluice::OpenOptions::default())
        .with_context(|| format!("creating a volume on {}", a.path.display()))?;
    Ok(vol)
}

fn is_block_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false)
}

/// Refuse to format over something that holds data, unless --force.
fn refuse_if_in_use(p: &Path) -> anyhow::Result<()> {
    let meta = std::fs::metadata(p)?;
    if meta.is_file() && meta.len() == 0 {
        return Ok(());
    }
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let mut head = vec![0u8; 64 << 10];
    let n = std::io::Read::read(&mut f, &mut head).unwrap_or(0);
    if head[..n].iter().all(|&b| b == 0) {
        return Ok(());
    }
    if head[..8] == *b"SLUICESB" || head.get(4096..4104) == Some(b"SLUICESB") {
        bail!(
            "{} already holds a sluice volume; use --force to destroy it and create a new one",
            p.display()
        );
    }
    bail!("{} is not empty (it may hold a filesystem or partition table); use --force to overwrite it", p.display());
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let vol = create_volume(&a)?;
    let g = vol.geometry();
    println!(
        "created {}: {} exported, {} segments of {}, {:.0}% over-provisioning, GC {}",
        a.path.display(),
        human(vol.size_bytes()),
        g.segment_count,
        human(g.segment_bytes()),
        a.overprovision,
        vol.gc_policy().name()
    );
    vol.close()?;
    Ok(0)
}
