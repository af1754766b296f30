//! `sluice tune`: change a setting of a volume that is not served (issue
//! 19: whether a compressed volume compresses its new writes). The volume
//! is opened for writing, so it is locked first (a served volume is refused
//! by its lock); the change is one superblock write (`volume::set_compression`).

use anyhow::Context;
use sluice::compress::Compression;
use sluice::media::FileMedia;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The volume (file or block device), not served.
    pub volume: PathBuf,
    /// Compress new writes (lz4) or store them raw (off). Only for a volume
    /// created with --compress lz4: its fragments stay readable either way.
    #[arg(long, value_name = "lz4|off")]
    pub compress: Compression,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let media = FileMedia::open(&a.volume, false)
        .with_context(|| format!("opening {}", a.volume.display()))?;
    let before = sluice::recovery::read_superblocks(&media)
        .with_context(|| format!("reading {}", a.volume.display()))?
        .sb;
    let sb = sluice::volume::set_compression(&media, a.compress)
        .with_context(|| format!("tuning {}", a.volume.display()))?;
    let now = if sb.compresses_new_writes() {
        "lz4"
    } else {
        "off"
    };
    if sb.generation == before.generation {
        println!(
            "compression {now} for new writes of {} (unchanged)",
            a.volume.display()
        );
    } else {
        println!("compression {now} for new writes of {}", a.volume.display());
    }
    Ok(0)
}
