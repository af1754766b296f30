//! `sluice replace`: put a new file or device into a stripe set's slot and
//! rebuild it (issue 20, docs/stripes.md §6), on a volume that is not
//! served (`sluice serve --replace` does the same while serving, with
//! `prepare` here). Every member is locked before it is read or written; the new one
//! is refused if it holds data or another volume unless --force (a new
//! member already part rebuilt for this very slot is resumed instead).

use anyhow::{bail, Context};
use sluice::media::{FileMedia, Media};
use sluice::size::human;
use sluice::{OpenOptions, Volume};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The set's members, any order (the one to replace may be among them:
    /// it is left out).
    #[arg(long = "device", required = true)]
    pub devices: Vec<PathBuf>,
    /// The member to replace: its slot index (as `info` shows it) or its path.
    #[arg(long)]
    pub old: String,
    /// The new file (created with the size a member needs if missing) or
    /// block device.
    #[arg(long)]
    pub new: PathBuf,
    /// Overwrite a new member that holds data or another volume.
    #[arg(long)]
    pub force: bool,
    /// Rebuild at most this many bytes per second (default: as fast as it goes).
    #[arg(long, value_parser = super::parse_size)]
    pub rate: Option<u64>,
}

/// A member device as `Volume::replace_member` takes it: (name, media).
pub type Member = (String, Arc<dyn Media>);

/// The members staying (opened and locked), the slot, and the new member
/// (opened and locked, created with the size a member needs if missing;
/// refused if it holds data unless `force`, or is resumed when it already
/// is this slot's member part rebuilt): what `Volume::replace_member`
/// takes. Shared by `sluice replace` and `sluice serve --replace`.
pub fn prepare(
    devices: &[PathBuf],
    old: &str,
    new_path: &std::path::Path,
    force: bool,
) -> anyhow::Result<(super::stripe::Devices, u32, Member)> {
    let slot: u32 = match old.parse() {
        Ok(i) => i,
        Err(_) => {
            let p = PathBuf::from(old);
            let m = FileMedia::open_unlocked_read_only(&p)
                .with_context(|| format!("--old {}: give its slot index if it is gone", old))?;
            let (id, _) = sluice::stripe_set::open::read_member(&m)?.with_context(|| {
                format!(
                    "--old {} is not a stripe set member: give its slot index",
                    old
                )
            })?;
            id.member_index as u32
        }
    };
    let same = |p: &PathBuf| {
        std::fs::canonicalize(p).ok() == std::fs::canonicalize(new_path).ok()
            && std::fs::canonicalize(p).is_ok()
    };
    if devices.iter().any(same) {
        bail!("--new {} is also given as --device", new_path.display());
    }
    // the members staying, without the old one (by path, or by its slot)
    let mut keep = Vec::new();
    let mut set_uuid = None;
    for p in devices {
        if p.as_os_str() == old {
            continue;
        }
        let m = FileMedia::open_unlocked_read_only(p);
        let id = m
            .ok()
            .and_then(|m| sluice::stripe_set::open::read_member(&m).ok().flatten());
        if let Some((id, _)) = id {
            if id.member_index as u32 == slot && set_uuid.is_none_or(|s| s == id.set_uuid) {
                eprintln!(
                    "sluice: leaving out {} (member {slot}, the one replaced)",
                    p.display()
                );
                continue;
            }
            set_uuid.get_or_insert(id.set_uuid);
        }
        keep.push(p.clone());
    }
    let devs = super::stripe::open_members(&keep, false, false)?;
    let new_media = if new_path.exists() {
        let m = FileMedia::open(new_path, false)
            .with_context(|| format!("opening {}", new_path.display()))?;
        let resuming = sluice::stripe_set::open::read_member(&m)
            .ok()
            .flatten()
            .is_some_and(|(id, _)| Some(id.set_uuid) == set_uuid && id.member_index as u32 == slot);
        if !resuming && !force {
            super::create::refuse_if_holds_data(new_path)?;
        }
        m
    } else {
        // the size a member needs: from the set's own shape
        let set =
            sluice::stripe_set::open::open(devs.clone()).context("assembling the stripe set")?;
        let need = set.member_bytes();
        drop(set);
        eprintln!("sluice: creating {} ({})", new_path.display(), human(need));
        FileMedia::create_new(new_path, need)
            .with_context(|| format!("creating {}", new_path.display()))?
    };
    let new: (String, Arc<dyn Media>) = (new_path.display().to_string(), Arc::new(new_media));
    Ok((devs, slot, new))
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let (devs, slot, new) = prepare(&a.devices, &a.old, &a.new, a.force)?;
    let vol = Volume::replace_member(
        devs,
        slot,
        new,
        &OpenOptions {
            background: false,
            ..Default::default()
        },
    )
    .context("attaching the new member")?;
    let t0 = std::time::Instant::now();
    let mut last = std::time::Instant::now();
    let p = vol.rebuild_member(a.rate, &mut |p| {
        if last.elapsed().as_secs_f64() >= 1.0 {
            last = std::time::Instant::now();
            eprintln!(
                "sluice: rebuilding member {}: {} of {} segments",
                p.slot, p.next_segment, p.segment_count
            );
        }
    })?;
    vol.close()?;
    println!(
        "member {slot} rebuilt onto {} in {:.3}s: {} segments copied, {} free segments only marked",
        a.new.display(),
        t0.elapsed().as_secs_f64(),
        p.copied,
        p.skipped
    );
    Ok(0)
}
