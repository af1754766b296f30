//! `--device A --device B ...`: the stripe-set forms of `create`, `serve`,
//! `info` and `check` (issue 20). Members are opened (and locked) here, in
//! the order given; the set's own identity puts them in their slots.
//!
//! Invariant: every member is locked before it is probed or written (a member
//! in use by another process is refused, --force or not), and without
//! --force a member that holds data or another volume is refused by name
//! before anything is written to any member.

use anyhow::{bail, Context};
use sluice::media::{FileMedia, Media};
use sluice::size::human;
use sluice::{CreateOptions, OpenOptions, Volume};
use std::path::PathBuf;
use std::sync::Arc;

pub type Devices = Vec<(String, Arc<dyn Media>)>;

/// `sluice create --device ...`: lock every member (a missing file is
/// created with the size `--size` needs per member), probe, format.
pub fn create(a: &super::create::Args) -> anyhow::Result<Volume> {
    let n = a.devices.len() as u32;
    if a.parity > 2 || n < a.parity + 2 {
        bail!(
            "{n} --device given with --parity {}: a set needs parity 0, 1 or 2 and more members than parity + 1",
            a.parity
        );
    }
    if !(3.0..=50.0).contains(&a.overprovision) {
        bail!(
            "--overprovision {} is outside 3..50 percent",
            a.overprovision
        );
    }
    let op = a.overprovision / 100.0;
    let log = if a.intent_log {
        sluice::DEFAULT_INTENT_LOG_BYTES
    } else {
        0
    };
    if a.compress != sluice::compress::Compression::Off {
        bail!(
            "--compress with --device is not built yet (a stripe set stores blocks uncompressed)"
        );
    }
    if !a.log_devices.is_empty() {
        bail!("--log-device with --device is not built yet (use --intent-log: the ring is mirrored on every member)");
    }
    let per_member = match a.size {
        Some(s) => Some(
            sluice::stripe_set::open::member_bytes_for(
                n,
                a.parity,
                a.stripe_unit,
                a.segment_size,
                s,
                op,
                log,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        None => None,
    };
    let mut devs: Devices = Vec::new();
    let mut created: Vec<PathBuf> = Vec::new();
    let r = (|| -> anyhow::Result<Volume> {
        for p in &a.devices {
            let m = match FileMedia::create_new(p, per_member.unwrap_or(0)) {
                Ok(m) if per_member.is_some() => {
                    created.push(p.clone());
                    m
                }
                Ok(m) => {
                    let _ = m.remove_created();
                    bail!(
                        "{} does not exist: give --size to create the members",
                        p.display()
                    );
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let m = FileMedia::open(p, false)
                        .with_context(|| format!("opening {}", p.display()))?;
                    if !a.force {
                        super::create::refuse_if_holds_data(p)?;
                    }
                    if let Some(need) = per_member {
                        if m.len() < need && !m.is_block_device() {
                            bail!(
                                "{} holds {}, a member of this set needs {}",
                                p.display(),
                                human(m.len()),
                                human(need)
                            );
                        }
                    }
                    m
                }
                Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
            };
            devs.push((p.display().to_string(), Arc::new(m) as Arc<dyn Media>));
        }
        let opts = CreateOptions {
            logical_bytes: a.size,
            overprovision: op,
            segment_bytes: a.segment_size,
            gc_policy: a.gc,
            intent_log: a.intent_log.then_some(log),
            ..Default::default()
        };
        let set = Volume::format_striped(devs.clone(), a.parity, a.stripe_unit, &opts)
            .context("creating the stripe set")?;
        Volume::open_set(set, &OpenOptions::default()).context("mounting the new stripe set")
    })();
    if r.is_err() {
        drop(devs);
        for p in created {
            // only files this run created, and only while still empty of
            // anything else: they hold at most a half-made set
            let _ = std::fs::remove_file(p);
        }
    }
    r
}

/// Open the members given (locked; shared when `read_only`, or without a
/// lock when `unlocked`). A path that cannot be opened is left out with a
/// warning: the set may assemble degraded without it.
pub fn open_members(paths: &[PathBuf], read_only: bool, unlocked: bool) -> anyhow::Result<Devices> {
    let mut out: Devices = Vec::new();
    for p in paths {
        let m = if unlocked {
            FileMedia::open_unlocked_read_only(p)
        } else {
            FileMedia::open(p, read_only)
        };
        match m {
            Ok(m) => out.push((p.display().to_string(), Arc::new(m) as Arc<dyn Media>)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(e).with_context(|| format!("opening member {}", p.display()))
            }
            Err(e) => eprintln!(
                "sluice: warning: member {} cannot be opened ({e}); assembling without it",
                p.display()
            ),
        }
    }
    Ok(out)
}

/// Mount the set `paths` make with `opts`, saying if it runs degraded.
pub fn mount(paths: &[PathBuf], opts: &OpenOptions, unlocked: bool) -> anyhow::Result<Volume> {
    let devs = open_members(paths, opts.read_only, unlocked)?;
    let vol = Volume::open_striped(devs, opts).context("assembling the stripe set")?;
    let st = vol.stripe_set().expect("a stripe set").status();
    if st.degraded() {
        eprintln!("sluice: warning: stripe set {}", st.describe());
    }
    Ok(vol)
}

/// Lines `info` and `check` print about the set.
pub fn describe(vol: &Volume) -> Vec<String> {
    let Some(set) = vol.stripe_set() else {
        return Vec::new();
    };
    let st = set.status();
    let mut out = vec![format!(
        "stripe set  {} members, parity {} ({}), unit {}: {}",
        st.members,
        st.parity,
        ["RAID-0", "RAID-5", "RAID-6"][st.parity as usize],
        human(st.unit),
        st.describe()
    )];
    if let Some(p) = st.rebuild {
        out.push(format!(
            "rebuild     member {}: {} of {} segments done (sluice replace with the same --new resumes it)",
            p.slot, p.next_segment, p.segment_count
        ));
    }
    for (i, m) in set.members().iter().enumerate() {
        out.push(format!(
            "member {i}    {} (uuid {}, generation {})",
            m.name,
            sluice::format::stripe::hex(&m.ident.member_uuid),
            m.ident.generation
        ));
    }
    out
}

/// `sluice info --device ...`.
pub fn info(paths: &[PathBuf], json: bool) -> anyhow::Result<i32> {
    let vol = mount(
        paths,
        &OpenOptions {
            read_only: true,
            background: false,
            ..Default::default()
        },
        true,
    )?;
    let st = vol.stripe_set().expect("a stripe set").status();
    if json {
        let v = serde_json::json!({
            "devices": paths,
            "logical_bytes": vol.size_bytes(),
            "segment_bytes": vol.geometry().segment_bytes(),
            "segment_count": vol.geometry().segment_count,
            "stripe_set": {
                "members": st.members,
                "parity": st.parity,
                "stripe_unit": st.unit,
                "degraded": st.degraded(),
                "state": st.describe(),
                "scratch_rows_at_mount": vol.stripe_set().expect("a stripe set").rows_tagged(),
            },
            "stats": vol.stats(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "volume      {} on {} devices",
            human(vol.size_bytes()),
            paths.len()
        );
        for l in describe(&vol) {
            println!("{l}");
        }
    }
    Ok(0)
}

/// `sluice check --device ...`: the volume check on the set's flat view
/// (degraded pieces rebuilt), the parity of every full row of every closed
/// segment against its data (a read-only mount), plus the set's state.
/// Exit 1 when damaged; a degraded set that checks clean exits 0 and says
/// so. `repair`: first a read-write mount scrubs every segment (blocks
/// failing their CRC healed from their row, disagreeing parity rewritten).
pub fn check(paths: &[PathBuf], json: bool, force: bool, repair: bool) -> anyhow::Result<i32> {
    if repair {
        let vol = mount(
            paths,
            &OpenOptions {
                background: false,
                ..Default::default()
            },
            false,
        )?;
        for _ in 0..vol.geometry().segment_count {
            for d in vol.scrub_step()?.damage {
                eprintln!("repair      {d}");
            }
        }
        vol.close()?;
    }
    let devs = open_members(paths, true, force)?;
    let set = sluice::stripe_set::open::open(devs).context("assembling the stripe set")?;
    let media = sluice::stripe_set::media::SetMedia::new(set.clone());
    let mut r = sluice::check::check(&media);
    match Volume::open_set(
        set.clone(),
        &OpenOptions {
            read_only: true,
            background: false,
            ..Default::default()
        },
    ) {
        Ok(vol) => {
            for d in vol.scrub_parity_all() {
                r.add_finding("stripe_parity", d);
            }
        }
        Err(e) => eprintln!("sluice: the set does not mount read-only ({e}): parity not checked"),
    }
    let st = set.status();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "devices": paths,
                "clean": r.is_clean(),
                "degraded": st.degraded(),
                "stripe_set": st.describe(),
                "mount_ok": r.mount_result.ok,
                "chunks_verified": r.chunks_verified,
                "data_blocks_verified": r.data_blocks_verified,
                "damage": r.found,
            }))?
        );
    } else {
        println!("stripe set  {}", st.describe());
        println!("mount       {}", r.mount);
        println!(
            "verified    {} chunks in {} segments, {} live data blocks",
            r.chunks_verified, r.segments_checked, r.data_blocks_verified
        );
        for d in &r.damage {
            println!("DAMAGE      {d}");
        }
        println!("{}", if r.is_clean() { "clean" } else { "damaged" });
    }
    Ok(if r.is_clean() { 0 } else { 1 })
}

/// When `path` is one member of a stripe set (its superblock carries
/// `STRIPE_SET`): the words that tell the user to give them all.
pub fn member_hint(path: &std::path::Path) -> Option<String> {
    let m = FileMedia::open_unlocked_read_only(path).ok()?;
    let (id, _) = sluice::stripe_set::open::read_member(&m).ok()??;
    Some(format!(
        "{} is member {} of the {}-member stripe set {}: give every member with --device",
        path.display(),
        id.member_index,
        id.member_count,
        sluice::format::stripe::hex(&id.set_uuid)
    ))
}
