//! `sluice info` and `sluice check`.

use anyhow::Context;
use sluice::media::{FileMedia, Media};
use sluice::size::human;
use sluice::{OpenOptions, Volume};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// Volume file or block device.
    pub path: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Volume file or block device.
    pub path: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run_info(a: InfoArgs) -> anyhow::Result<i32> {
    let media: Arc<dyn Media> = Arc::new(
        FileMedia::open(&a.path, true).with_context(|| format!("opening {}", a.path.display()))?,
    );
    let describe = media.describe();
    let vol = Volume::open(
        media,
        &OpenOptions {
            read_only: true,
            background: false,
            ..Default::default()
        },
    )
    .with_context(|| format!("mounting {}", a.path.display()))?;
    let sb = vol.superblock();
    let g = vol.geometry();
    let st = vol.stats();
    let uuid: String = sb.uuid.iter().map(|b| format!("{b:02x}")).collect();
    if a.json {
        let v = serde_json::json!({
            "path": a.path,
            "media": describe,
            "format_version": sluice::format::FORMAT_VERSION,
            "uuid": uuid,
            "logical_bytes": vol.size_bytes(),
            "block_bytes": 4096,
            "segment_bytes": g.segment_bytes(),
            "segment_count": g.segment_count,
            "reserve_segments": g.reserve(),
            "data_offset": g.data_offset,
            "media_bytes": g.media_bytes(),
            "overprovision_percent": sb.overprovision_bp as i32 as f64 / 100.0,
            "gc_policy": vol.gc_policy().name(),
            "generation": sb.generation,
            "clean": sb.is_clean(),
            "mount": vol.mount_report(),
            "stats": st,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("volume        {}", a.path.display());
        println!("media         {describe}");
        println!(
            "format        sluice v{}  uuid {uuid}",
            sluice::format::FORMAT_VERSION
        );
        println!(
            "exported      {} ({} blocks of 4 KiB)",
            human(vol.size_bytes()),
            g.logical_blocks
        );
        println!(
            "segments      {} x {} (reserve {}), data at byte {}",
            g.segment_count,
            human(g.segment_bytes()),
            g.reserve(),
            g.data_offset
        );
        println!(
            "options       over-provisioning {:.1}%, GC {}",
            sb.overprovision_bp as i32 as f64 / 100.0,
            vol.gc_policy().name()
        );
        println!(
            "state         {} (superblock generation {})",
            if sb.is_clean() {
                "closed cleanly"
            } else {
                "not closed cleanly (recovered on mount)"
            },
            sb.generation
        );
        println!(
            "segments      free {} / closed {} / pending {}",
            st.segments_free, st.segments_closed, st.segments_pending
        );
        println!(
            "live data     {} ({:.1}% of exported)",
            human(st.live_data_blocks * 4096),
            100.0 * st.live_data_blocks as f64 / g.logical_blocks as f64
        );
        println!(
            "map memory    {} ({:.2} bytes per logical block; segment table {})",
            human(st.map_bytes),
            st.map_bytes_per_block,
            human(st.segment_table_bytes)
        );
        let r = vol.mount_report();
        println!(
            "mount         {} ms, {} chunks replayed",
            r.mount_ms, r.chunks_replayed
        );
        for n in &r.notes {
            println!("note          {n}");
        }
    }
    Ok(0)
}

pub fn run_check(a: CheckArgs) -> anyhow::Result<i32> {
    // Not being able to open the path is a usage error (exit 2), not damage (exit 1).
    let media = match FileMedia::open(&a.path, true) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("sluice: error: opening {}: {e}", a.path.display());
            return Ok(2);
        }
    };
    let r = sluice::check::check(&media);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"path": a.path, "clean": r.is_clean(), "report": r})
            )?
        );
    } else {
        for s in &r.superblocks {
            println!("superblock  {s}");
        }
        for s in &r.checkpoints {
            println!("checkpoint  {s}");
        }
        println!("mount       {}", r.mount);
        println!(
            "verified    {} chunks in {} segments, {} live data blocks",
            r.chunks_verified, r.segments_checked, r.data_blocks_verified
        );
        for n in &r.notes {
            println!("note        {n}");
        }
        for d in &r.damage {
            println!("DAMAGE      {d}");
        }
        println!("{}", if r.is_clean() { "clean" } else { "damaged" });
    }
    Ok(if r.is_clean() { 0 } else { 1 })
}
