//! Adding and removing the intent log devices of a volume that is not mounted
//! (`sluice log-device add` / `remove`; `replace_log_device` is in mod.rs).
//! Owns the order of the few writes each transition takes, so that a power
//! cut between any two of them leaves a volume that mounts with every
//! acknowledged write:
//!
//! - **add** to a volume with no log device (its ring in the volume, or no
//!   intent log but LSNs): the volume is first closed cleanly (a mount and
//!   close: the in-volume ring's records are re-homed), then the device is
//!   formatted with a fresh log identity, and only then do the volume's two
//!   superblock indexes name it (`LOG_DEVICE`);
//! - **add** a second device (a mirror): mirror 1 is marked stale in the
//!   volume superblock *before* it is formatted and before the first device
//!   says the log has two mirrors, so no mount ever replays the new, empty
//!   device alone; a mount with both then writes both and clears the mark;
//! - **remove** one of a pair: closed cleanly with both, the stale marks
//!   cleared, then the kept device becomes mirror 0 of 1, then the removed
//!   one's superblock copies are wiped;
//! - **remove** the last device: only once its records are in the main log
//!   (a mount with it, then a clean close: asserted by the clean flag), the
//!   volume's superblocks drop the log (`LSN` alone: FLUSH seals), then the
//!   device's superblock copies are wiped;
//! - **remove** the in-volume ring (no device given): a mount replays the
//!   ring and re-homes its records, a clean close checkpoints them (asserted
//!   by the clean flag), then the superblocks drop the log as above. The
//!   ring's bytes stay reserved (the data area does not move) and unused.
//!
//! Invariant: a superblock naming a log device is never on the media before
//! the device says whose it is, and a device's records are never given up
//! before a clean close has put them in the main log.

use super::{commit, format_log_device, LogDevice, OpenOptions, Volume};
use crate::error::{Error, Result};
use crate::format::logdev::{LogDevSuperblock, LOGDEV_RING_OFFSET, MAX_LOG_MIRRORS};
use crate::format::superblock::{incompat, LogStart, Superblock, MIN_LOG_BYTES};
use crate::format::BLOCK_BYTES;
use crate::media::{AlignedBuf, Media};
use crate::recovery;
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

/// Write `sb` as the next two generations (both superblock indexes, each
/// flushed), so a mount that falls back to the other copy finds the same.
pub(in crate::volume) fn write_both_indexes(
    media: &dyn Media,
    sb: &Superblock,
) -> Result<Superblock> {
    let mut next = sb.clone();
    for _ in 0..2 {
        next.generation += 1;
        commit::write_superblock(media, &next)?;
        media.flush()?;
    }
    Ok(next)
}

/// Write a log device superblock over both copies of `dev`, one at a time,
/// each flushed (a torn write leaves the other copy whole); the ring is not
/// touched.
fn rewrite_device_superblock(dev: &dyn Media, ls: &LogDevSuperblock) -> Result<()> {
    let b = ls.encode();
    for copy in 0..2u64 {
        commit::write_block(dev, &b, copy * BS)?;
        dev.flush()?;
    }
    Ok(())
}

/// Zero both superblock copies of a log device that no longer belongs to
/// the volume, so no later mount takes it for one.
fn wipe_device_superblock(dev: &dyn Media) -> Result<()> {
    let z = AlignedBuf::new(2 * BLOCK_BYTES);
    dev.write_at(&z, 0)?;
    dev.flush()?;
    Ok(())
}

/// Mount `media` with `devs` and close it cleanly (replays and re-homes what
/// the log holds); the notes of the mount.
fn mount_and_close(
    media: &Arc<dyn Media>,
    devs: Vec<LogDevice>,
    missing_ok: bool,
) -> Result<Vec<String>> {
    let vol = Volume::open(
        media.clone(),
        &OpenOptions {
            background: false,
            log_devices: devs,
            log_device_missing_ok: missing_ok,
            ..OpenOptions::default()
        },
    )?;
    let notes = vol.mount_report().notes.clone();
    vol.close()?;
    Ok(notes)
}

fn superblock(media: &dyn Media) -> Result<Superblock> {
    Ok(recovery::read_superblocks(media)?.sb)
}

/// Add `new` as a log device of the volume on `media` (not mounted). A volume
/// with its log in the volume, or with LSNs and no log, gets `new` as its only
/// log device (ring of the volume's ring size, or the default, capped by
/// `new`); a volume with one log device (`existing`, which must be given)
/// gets `new` as its mirror. The caller has locked and probed `new` (it is
/// overwritten). The mount notes of the transition are returned.
pub fn add_log_device(
    media: Arc<dyn Media>,
    new: LogDevice,
    existing: Vec<LogDevice>,
    now_unix_s: u64,
) -> Result<Vec<String>> {
    let sb = superblock(&*media)?;
    let Some(v) = sb.v2.filter(|v| v.has(incompat::LSN)) else {
        return Err(Error::InvalidArgument(format!(
            "{} is a format v1 volume (no order numbers in its chunks): an intent log needs a volume created with --intent-log or --log-device",
            media.describe()
        )));
    };
    if let Some((_, ring)) = sb.log_device() {
        return add_mirror(media, new, existing, sb, ring, now_unix_s);
    }
    if !existing.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{} has no log device yet: give only the new one",
            media.describe()
        )));
    }
    // 1. everything the in-volume ring holds into the main log
    let mut notes = Vec::new();
    if !sb.is_clean() {
        notes = mount_and_close(&media, Vec::new(), false)?;
    }
    let sb = superblock(&*media)?;
    if !sb.is_clean() {
        return Err(Error::InvalidArgument(format!(
            "{} did not close cleanly: not adding a log device",
            media.describe()
        )));
    }
    // 2. the device, with a fresh log identity the volume does not name yet
    let want = match v.log_bytes {
        0 => crate::DEFAULT_INTENT_LOG_BYTES,
        n => n,
    };
    let room = new.0.len().saturating_sub(LOGDEV_RING_OFFSET) / BS * BS;
    let ring = want.min(room);
    if ring < MIN_LOG_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{} holds {} bytes: a log device needs at least {}",
            new.0.describe(),
            new.0.len(),
            LOGDEV_RING_OFFSET + MIN_LOG_BYTES
        )));
    }
    let mut next = sb.clone();
    {
        let nv = next.v2.as_mut().expect("v2");
        // a log device keeps version 2 records (data copied: it is the fast medium)
        nv.features_incompat |= incompat::INTENT_LOG | incompat::LOG_DEVICE;
        nv.features_incompat &= !incompat::LOG_INDIRECT;
        nv.log_uuid = rand::random();
        nv.log_offset = 0;
        nv.log_bytes = ring;
        nv.log_start = LogStart {
            offset: 0,
            seq: v.log_start.seq.max(1),
            chain: crate::format::intent::chain_seed(&sb.uuid, sb.generation + 1),
        };
        nv.log_stale = 0;
    }
    Superblock::decode(&next.encode())
        .map_err(|e| Error::Corrupt(format!("the new superblock does not validate: {e}")))?;
    format_log_device(&*new.0, &next, 0, 1, now_unix_s)?;
    // 3. only now does the volume name it
    write_both_indexes(&*media, &next)?;
    notes.extend(mount_and_close(&media, vec![new], false)?);
    Ok(notes)
}

/// `add_log_device` to a volume with one log device: `new` becomes mirror 1.
fn add_mirror(
    media: Arc<dyn Media>,
    new: LogDevice,
    existing: Vec<LogDevice>,
    sb: Superblock,
    ring: u64,
    now_unix_s: u64,
) -> Result<Vec<String>> {
    let mut first = None;
    for d in &existing {
        let s = recovery::identify_log_device(&*d.0, &sb).map_err(|why| {
            Error::InvalidArgument(format!("log device {}: {why}", d.0.describe()))
        })?;
        if s.mirror_count >= MAX_LOG_MIRRORS {
            return Err(Error::InvalidArgument(format!(
                "{} already has a mirrored pair of log devices (at most {MAX_LOG_MIRRORS}): replace one instead (sluice log-device replace)",
                media.describe()
            )));
        }
        first = Some((d.clone(), s));
    }
    let Some((first, s)) = first.filter(|_| existing.len() == 1) else {
        return Err(Error::InvalidArgument(format!(
            "{} has a log device: give it (--log-device PATH) to add a mirror to it",
            media.describe()
        )));
    };
    if recovery::identify_log_device(&*new.0, &sb).is_ok() {
        return Err(Error::InvalidArgument(format!(
            "{} is already this volume's log device",
            new.0.describe()
        )));
    }
    if new.0.len() < LOGDEV_RING_OFFSET + ring {
        return Err(Error::InvalidArgument(format!(
            "{} holds {} bytes; the volume's log ring needs {}",
            new.0.describe(),
            new.0.len(),
            LOGDEV_RING_OFFSET + ring
        )));
    }
    // 1. mirror 1 is stale before it exists: no mount replays it alone
    let mut marked = sb.clone();
    // MUTANT: add-mirror-unmarked s|= 1 << 1;|= 0;|
    marked.v2.as_mut().expect("v2").log_stale |= 1 << 1;
    let sb = write_both_indexes(&*media, &marked)?;
    // 2. the new device, then the first says the log has two mirrors
    format_log_device(&*new.0, &sb, 1, 2, now_unix_s)?;
    rewrite_device_superblock(
        &*first.0,
        &LogDevSuperblock {
            mirror_count: 2,
            ..s
        },
    )?;
    // 3. a mount with both replays the first, writes both, clears the mark
    mount_and_close(&media, vec![first, new], false)
}

/// Remove log device `gone` from the volume on `media` (not mounted). With a
/// mirrored pair, `keep` (the other device) must be given and stays as the
/// only one. The last device is removed only once its records are in the
/// main log (a mount with it and a clean close); the volume then keeps its
/// LSNs and FLUSH seals. `gone` may be None when the device is lost: then
/// only with `missing_ok` for the last device of a volume not closed cleanly
/// (what only it held is lost; the mount's notes say so).
pub fn remove_log_device(
    media: Arc<dyn Media>,
    gone: Option<LogDevice>,
    keep: Vec<LogDevice>,
    missing_ok: bool,
) -> Result<Vec<String>> {
    let sb = superblock(&*media)?;
    if sb.log_device().is_none() {
        if sb.log_ring().is_some() && gone.is_none() && keep.is_empty() {
            return remove_ring(media);
        }
        return Err(Error::InvalidArgument(format!(
            "{} keeps no intent log on a log device{}",
            media.describe(),
            if sb.log_ring().is_some() {
                " (its ring is in the volume: give no device to remove it)"
            } else {
                ""
            }
        )));
    }
    if let Some(g) = &gone {
        recovery::identify_log_device(&*g.0, &sb).map_err(|why| {
            Error::InvalidArgument(format!("log device {}: {why}", g.0.describe()))
        })?;
    }
    let mut kept = Vec::new();
    for d in &keep {
        let s = recovery::identify_log_device(&*d.0, &sb).map_err(|why| {
            Error::InvalidArgument(format!("log device {}: {why}", d.0.describe()))
        })?;
        kept.push((d.clone(), s));
    }
    if kept.len() > 1 {
        return Err(Error::InvalidArgument(
            "give at most one log device to keep".into(),
        ));
    }
    let mut all: Vec<LogDevice> = keep.clone();
    all.extend(gone.clone());
    match kept.pop() {
        Some((k, s)) => {
            // one of a pair: home everything with both (or the kept one)
            let mut notes = mount_and_close(&media, all, false)?;
            let sb = superblock(&*media)?;
            if !sb.is_clean() {
                return Err(Error::InvalidArgument(format!(
                    "{} did not close cleanly: not removing a log device",
                    media.describe()
                )));
            }
            let mut next = sb.clone();
            next.v2.as_mut().expect("v2").log_stale = 0;
            write_both_indexes(&*media, &next)?;
            rewrite_device_superblock(
                &*k.0,
                &LogDevSuperblock {
                    mirror_index: 0,
                    mirror_count: 1,
                    ..s
                },
            )?;
            if let Some(g) = &gone {
                wipe_device_superblock(&*g.0)?;
            }
            notes.extend(mount_and_close(&media, vec![k], false)?);
            Ok(notes)
        }
        None => remove_last(media, sb, gone, missing_ok),
    }
}

/// `remove_log_device` of the only device: the volume returns to
/// seal-on-FLUSH, its records first homed into the main log.
/// Drop the in-volume ring of the volume on `media` (module comment): its
/// records into the main log first, then superblocks without the log.
fn remove_ring(media: Arc<dyn Media>) -> Result<Vec<String>> {
    // MUTANT: ring-removed-before-homed s|let home_first = true;|let home_first = false;|
    let home_first = true;
    let mut notes = Vec::new();
    if home_first {
        // the ring is on the volume's media: any mount replays and re-homes it
        notes = mount_and_close(&media, Vec::new(), false)?;
    }
    let sb = superblock(&*media)?;
    if home_first && !sb.is_clean() {
        return Err(Error::InvalidArgument(format!(
            "{} did not close cleanly: not removing its intent log",
            media.describe()
        )));
    }
    write_without_log(&*media, &sb, incompat::INTENT_LOG | incompat::LOG_INDIRECT)?;
    notes.extend(mount_and_close(&media, Vec::new(), false)?);
    Ok(notes)
}

/// Write both superblock copies as `sb` without its intent log: the
/// feature bits `bits` cleared and every log field zeroed (validated first).
fn write_without_log(media: &dyn Media, sb: &Superblock, bits: u64) -> Result<()> {
    let mut next = sb.clone();
    {
        let v = next.v2.as_mut().expect("an intent log is a v2 feature");
        v.features_incompat &= !bits;
        v.log_uuid = [0; 16];
        v.log_offset = 0;
        v.log_bytes = 0;
        v.log_start = LogStart::default();
        v.log_stale = 0;
    }
    Superblock::decode(&next.encode())
        .map_err(|e| Error::Corrupt(format!("the new superblock does not validate: {e}")))?;
    write_both_indexes(media, &next).map(|_| ())
}

fn remove_last(
    media: Arc<dyn Media>,
    sb: Superblock,
    gone: Option<LogDevice>,
    missing_ok: bool,
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if gone.is_none() && !sb.is_clean() && !missing_ok {
        return Err(Error::InvalidArgument(format!(
            "{} was not closed cleanly and its log device may hold acknowledged writes: give the device, or accept losing them (--log-device-missing-ok)",
            media.describe()
        )));
    }
    // MUTANT: remove-before-records-homed s|let home_first = true;|let home_first = false;|
    let home_first = true;
    if home_first {
        // every record of the device into the main log: a mount replays and
        // re-homes them, a clean close checkpoints them
        notes = mount_and_close(&media, gone.iter().cloned().collect(), missing_ok)?;
    }
    let sb = superblock(&*media)?;
    if home_first && !sb.is_clean() {
        return Err(Error::InvalidArgument(format!(
            "{} did not close cleanly: not removing its log device",
            media.describe()
        )));
    }
    write_without_log(&*media, &sb, incompat::INTENT_LOG | incompat::LOG_DEVICE)?;
    if let Some(g) = &gone {
        wipe_device_superblock(&*g.0)?;
    }
    notes.extend(mount_and_close(&media, Vec::new(), false)?);
    Ok(notes)
}
