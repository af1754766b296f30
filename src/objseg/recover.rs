//! Mounting a volume from its object store alone (docs/objects.md §5.6): a
//! host whose cache directory is empty or missing (the volume moved hosts,
//! or the cache was lost) rebuilds the local metadata file and the slot
//! table from the store, then the ordinary attach and engine mount run on
//! them (their recovery replays what the roll-forward found).
//!
//! 1. Take the writer lease (the old writer's epoch must be released, or
//!    `takeover`), then list `ckpt/` and `seg/` (after the lease, so nothing
//!    a superseded writer stored before it is missed).
//! 2. The newest checkpoint object that decodes, whose superblock and image
//!    verify and whose named segment objects are all there at full size; a
//!    damaged or incomplete one falls back to the previous one, saying why;
//!    none: refused, naming each.
//! 3. Roll forward from its `seg_start` over segment objects of consecutive
//!    sequence numbers: each one's first chunk header says its slot; a gap,
//!    an object whose slot the table already names with another object, or
//!    whose slot the checkpoint holds blocks of that start otherwise (a slot
//!    reused after the checkpoint: its image may need the old life), a
//!    header that does not verify, or two objects with one number end it.
//! 4. Write `DIR/volume` (sparse: the captured superblock, not clean, its
//!    durable watermark kept, so replay ends the log at the first chunk
//!    missing at or above it; the checkpoint image; the open segments'
//!    blocks the checkpoint object holds, into their staging slots) and
//!    `DIR/objects.tab`, under temporary names renamed into place at the end.
//! 5. Store-durable mode (the checkpoint object names a `log_start`,
//!    `durable.rs`): the captured superblock keeps its generation (the
//!    log's later superblock writes must stay newer), then the FLUSH log of
//!    the checkpoint's epoch replays over the file from `log_start` up to
//!    the first missing or bad log object; a record into a slot the table
//!    names an object for first brings that object into the staging slot
//!    and clears the record (the write starts or continues its new life).
//!
//! 6. A volume with an intent log: its ring was on the lost host, never in
//!    the store; the rebuilt ring is empty (a new sparse file), so the
//!    engine's mount replays none of it, and `Restored::intent_log_lost`
//!    says what that loses (the writes after the cut; which ones only the
//!    lost log knew).
//!
//! Invariant: the rebuilt volume is the checkpoint plus a run of segment
//! objects that starts where its table ends, so the engine's replay over it
//! gives a prefix of the write stream; every object the rebuilt table names
//! is in the store at full size.

use super::table::{ObjRef, Table};
use super::{io_err, TABLE_FILE};
use crate::format::checkpoint::{body_bytes_with, CheckpointHeader};
use crate::format::chunk::ChunkHeader;
use crate::format::objckpt::{ObjCheckpoint, SlotObject};
use crate::format::objname::{ObjKind, ObjName};
use crate::format::superblock::{Superblock, FLAG_CLEAN};
use crate::format::BLOCK_BYTES;
use crate::lease::{self, Holder};
use crate::media::objects::ObjectStore;
use crate::media::{AlignedBuf, FileMedia, Media};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// What `restore` did.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// The checkpoint object mounted from.
    pub checkpoint: String,
    /// The epoch taken (the serve that follows takes the next one over).
    pub epoch: u64,
    /// Segment objects rolled forward over, in order.
    pub rolled: Vec<String>,
    /// Why the roll-forward ended.
    pub stop: String,
    /// Checkpoint objects passed over, and why.
    pub notes: Vec<String>,
    /// Store-durable mode: what the FLUSH log replay applied.
    pub log: Option<super::durable::Replayed>,
    /// The volume has an intent log, which the store does not hold: what
    /// its loss loses (None: no intent log).
    pub intent_log_lost: Option<String>,
}

/// The volume the store holds, ready to write.
struct Plan {
    checkpoint: String,
    ckpt: ObjCheckpoint,
    sb: Superblock,
    rolled: Vec<String>,
    stop: String,
    notes: Vec<String>,
    max_seq: u64,
}

fn bad(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Rebuild `dir/volume` and `dir/objects.tab` from `objects` (see the
/// module comment). `dir` must not hold either.
pub fn restore(objects: &dyn ObjectStore, dir: &Path, takeover: bool) -> crate::Result<Restored> {
    for f in ["volume", TABLE_FILE] {
        if dir.join(f).exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists: the cache directory is not empty, nothing to restore",
                    dir.join(f).display()
                ),
            )
            .into());
        }
    }
    let lease = lease::take(objects, &Holder::this_process(), takeover).map_err(|e| {
        io_err(format!(
            "{}: {e}{}",
            objects.describe(),
            if matches!(e, lease::LeaseError::Held { .. }) {
                " (--takeover if that writer is gone)"
            } else {
                ""
            }
        ))
    })?;
    let epoch = lease.epoch;
    // a superseded writer still alive is fenced, and its last sends have
    // landed, before anything is listed (fence.rs, §5.6)
    if let Err(e) = super::fence::take_over(objects, &lease, false) {
        let _ = lease.release(objects);
        return Err(e.into());
    }
    let r = plan(objects).and_then(|mut p| write(&mut p, dir, epoch, objects).map(|l| (p, l)));
    match r {
        Ok((p, log)) => Ok(Restored {
            intent_log_lost: intent_log_lost(&p),
            checkpoint: p.checkpoint,
            epoch,
            rolled: p.rolled,
            stop: p.stop,
            notes: p.notes,
            log,
        }),
        Err(e) => {
            // nothing was written to the store: let the next try take over
            let _ = lease.release(objects);
            Err(e.into())
        }
    }
}

/// A volume with an intent log (`create --intent-log`, or `--log-device`)
/// mounted from the store alone: the records in its ring were on the lost
/// host (its cache directory, or its log device), never in the store. What
/// is rebuilt is the main log as far as the store holds it: a prefix of the
/// write stream, as for a volume without one (the engine's mount finds the
/// rebuilt ring empty and replays nothing from it). Lost: every write after
/// that prefix, FLUSHed or not, whether its FLUSH was answered from the
/// ring or by a sealed chunk. The ring named those writes; the store does
/// not, so how many and which blocks is not known here (`zpool import -m`
/// says as much of a lost log device).
fn intent_log_lost(p: &Plan) -> Option<String> {
    if !p.sb.has_intent_log() {
        return None;
    }
    let place = match p.sb.log_device() {
        Some((uuid, _)) => format!(
            "on its log device (log {}), which this host does not have: serve it with --log-device-missing-ok",
            uuid.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        None => "in the lost host's cache directory (the ring in its metadata file); this host's ring starts empty".to_string(),
    };
    if p.sb.is_clean() {
        // a clean close seals every chunk: the log holds nothing more
        return Some(format!(
            "the volume's intent log was {place}. {} was captured after a clean close, whose main log holds every write the log did: nothing is lost",
            p.checkpoint
        ));
    }
    Some(format!(
        "the volume's intent log was {place}. The store holds the write stream up to the last chunk in {} and the {} segment object(s) rolled forward over; the writes after it that the lost host acknowledged (a FLUSH answered from its intent log, or a chunk it never uploaded) are lost. How many and which blocks only that log knew: the rebuilt volume is a prefix of the write stream, nothing after the cut",
        p.checkpoint,
        p.rolled.len()
    ))
}

/// One checkpoint object, verified: Err says why it is unusable.
fn verify(
    objects: &dyn ObjectStore,
    name: &str,
    segs: &BTreeMap<u64, Vec<(u64, u64)>>,
) -> Result<(ObjCheckpoint, Superblock), String> {
    let bytes = objects.get(name).map_err(|e| format!("unreadable: {e}"))?;
    let c = ObjCheckpoint::decode(&bytes).map_err(|e| format!("damaged: {e}"))?;
    let sb = Superblock::decode(&c.superblock).map_err(|e| format!("superblock: {e}"))?;
    if sb.uuid != c.uuid
        || sb.segment_count as usize != c.slots.len()
        || sb.segment_blocks != c.segment_blocks
    {
        return Err("its superblock is another volume's or another geometry's".into());
    }
    // (a volume with an intent log mounts too: its records were only on
    // the lost host, `restore` reports what that loses)
    let body = body_bytes_with(sb.logical_blocks, sb.segment_count, sb.map_value_bytes()) as usize;
    if c.image.len() != BLOCK_BYTES + body {
        return Err(format!(
            "its checkpoint image has {} bytes, {} expected",
            c.image.len(),
            BLOCK_BYTES + body
        ));
    }
    let h = CheckpointHeader::decode(&c.image).map_err(|e| format!("checkpoint header: {e}"))?;
    if h.uuid != sb.uuid
        || h.next_seq != sb.checkpoint_next_seq
        || crc32c::crc32c(&c.image[BLOCK_BYTES..]) != h.body_crc
    {
        return Err("its checkpoint image does not match its superblock".into());
    }
    let seg_bytes = sb.segment_blocks as u64 * BLOCK_BYTES as u64;
    let mut missing = Vec::new();
    for (i, s) in c.slots.iter().enumerate() {
        if let Some(s) = s {
            let n = ObjName::Segment {
                seq: s.seq,
                epoch: s.epoch,
            }
            .encode();
            match segs
                .get(&s.seq)
                .and_then(|v| v.iter().find(|(e, _)| *e == s.epoch))
            {
                Some((_, l)) if *l == seg_bytes => {}
                Some((_, l)) => missing.push(format!("{n} (segment {i}) has {l} bytes")),
                None => missing.push(format!("{n} (segment {i}) is missing")),
            }
        }
    }
    if !missing.is_empty() {
        return Err(format!("it names {}", missing.join(", ")));
    }
    // (the map may point into a slot the capture holds neither an object
    // nor blocks of: reused after GC's relocations became durable, which the
    // replay applies over the map, as a local mount would: the watermark
    // stays the captured one, so those dead chunks are skipped)
    Ok((c, sb))
}

fn plan(objects: &dyn ObjectStore) -> io::Result<Plan> {
    let mut segs: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for o in objects.list(ObjKind::Segment.dir()).map_err(io_err)? {
        match ObjName::parse(&o.name) {
            Ok(ObjName::Segment { seq, epoch }) => {
                segs.entry(seq).or_default().push((epoch, o.len))
            }
            _ => {
                return Err(bad(format!(
                    "{}: {} is not a segment object name",
                    objects.describe(),
                    o.name
                )))
            }
        }
    }
    let mut cks = Vec::new();
    for o in objects.list(ObjKind::Checkpoint.dir()).map_err(io_err)? {
        match ObjName::parse(&o.name) {
            Ok(ObjName::Checkpoint { seq, .. }) => cks.push((seq, o.name)),
            _ => {
                return Err(bad(format!(
                    "{}: {} is not a checkpoint object name",
                    objects.describe(),
                    o.name
                )))
            }
        }
    }
    cks.sort();
    let mut notes = Vec::new();
    let mut chosen = None;
    for (_, name) in cks.iter().rev() {
        match verify(objects, name, &segs) {
            Ok(v) => {
                chosen = Some((name.clone(), v));
                break;
            }
            Err(why) => notes.push(format!("{name} is unusable: {why}")),
        }
    }
    let Some((checkpoint, (mut ckpt, sb))) = chosen else {
        return Err(bad(format!(
            "{}: no usable checkpoint object, the volume cannot be mounted from the store alone{}",
            objects.describe(),
            if notes.is_empty() {
                " (there is none: was the volume ever served long enough to store one?)".to_string()
            } else {
                format!(": {}", notes.join("; "))
            }
        )));
    };
    // roll forward
    let seg_bytes = sb.segment_blocks as u64 * BLOCK_BYTES as u64;
    let mut rolled = Vec::new();
    let mut expected = ckpt.seg_start;
    let stop = loop {
        let Some(found) = segs.get(&expected) else {
            let later = segs.range(expected..).count();
            if later == 0 {
                break format!("no segment object after seq {}", expected.saturating_sub(1));
            }
            // MUTANT: roll-forward-past-gap s|break format!("seq {expected} is missing: roll-forward ends, {later} later segment object(s) ignored");|{ expected = *segs.range(expected..).next().unwrap().0; continue; }|
            break format!("seq {expected} is missing: roll-forward ends, {later} later segment object(s) ignored");
        };
        if found.len() != 1 {
            break format!(
                "{} segment objects have seq {expected}: roll-forward ends",
                found.len()
            );
        }
        let (epoch, len) = found[0];
        let name = ObjName::Segment {
            seq: expected,
            epoch,
        }
        .encode();
        if ckpt
            .slots
            .iter()
            .flatten()
            .any(|s| s.seq == expected && s.epoch == epoch)
        {
            // stored while the checkpoint waited for it: named already
            expected += 1;
            continue;
        }
        if len != seg_bytes {
            break format!("{name} has {len} bytes, a segment {seg_bytes}: roll-forward ends");
        }
        let bytes = match objects.get(&name) {
            Ok(b) if b.len() as u64 == seg_bytes => b,
            Ok(b) => break format!("{name} read back {} bytes: roll-forward ends", b.len()),
            Err(e) => break format!("{name} is unreadable ({e}): roll-forward ends"),
        };
        let slot = match ChunkHeader::decode(&bytes[..BLOCK_BYTES]) {
            Ok(h) if h.uuid == sb.uuid && h.segment < sb.segment_count => h.segment,
            Ok(_) => {
                break format!(
                    "{name} starts with another volume's or slot's chunk: roll-forward ends"
                )
            }
            Err(e) => {
                break format!("{name}'s first chunk header is unusable ({e}): roll-forward ends")
            }
        };
        if let Some(o) = ckpt.slots[slot as usize] {
            break format!(
                "{name} is a new life of segment {slot}, which {} holds in the table: roll-forward ends",
                ObjName::Segment { seq: o.seq, epoch: o.epoch }.encode()
            );
        }
        if let Some(i) = ckpt.partials.iter().position(|(s, _)| *s == slot) {
            // the same life, uploaded after the capture, starts with the
            // same chunk header; another one is a new life
            if ckpt.partials[i].1.get(..BLOCK_BYTES) != Some(&bytes[..BLOCK_BYTES]) {
                break format!(
                    "{name} is a new life of segment {slot}, whose earlier life the checkpoint holds: roll-forward ends"
                );
            }
            ckpt.partials.remove(i);
        }
        ckpt.slots[slot as usize] = Some(SlotObject {
            seq: expected,
            epoch,
            crc: crc32c::crc32c(&bytes),
        });
        rolled.push(name);
        expected += 1;
    };
    let max_seq = segs.keys().next_back().copied().unwrap_or(0);
    Ok(Plan {
        checkpoint,
        ckpt,
        sb,
        rolled,
        stop,
        notes,
        max_seq,
    })
}

fn write_block(media: &dyn Media, bytes: &[u8], at: u64) -> io::Result<()> {
    let mut b = AlignedBuf::new(bytes.len().div_ceil(BLOCK_BYTES) * BLOCK_BYTES);
    b[..bytes.len()].copy_from_slice(bytes);
    media.write_at(&b, at)
}

/// A file of ours left by a restore that stopped: removed under its lock
/// (a restore running now holds it: then this one fails).
fn remove_stale(path: &Path) -> io::Result<()> {
    match FileMedia::open(path, false) {
        Ok(m) => {
            std::fs::remove_file(path)?;
            drop(m);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn write(
    p: &mut Plan,
    dir: &Path,
    epoch: u64,
    objects: &dyn ObjectStore,
) -> io::Result<Option<super::durable::Replayed>> {
    std::fs::create_dir_all(dir)?;
    let vol_tmp = dir.join("volume.restore");
    let tab_tmp = dir.join(format!("{TABLE_FILE}.restore"));
    remove_stale(&vol_tmp)?;
    let mut sb = p.sb.clone();
    // not clean: the mount replays what the roll-forward found. The
    // durable watermark W stays the captured one: every chunk below it was
    // durable before the capture, so it is in the capture (a named object
    // or the blocks it holds) or dead (its slot reused); a chunk missing at
    // or above W (only on the lost host) ends the log, never skipped over
    sb.flags &= !FLAG_CLEAN;
    let media = FileMedia::create_new(&vol_tmp, sb.media_bytes())?;
    if tab_tmp.exists() {
        // ours: a restore that stopped (the volume file's lock is ours now)
        std::fs::remove_file(&tab_tmp)?;
    }
    // store-durable: the captured generation (and one below for the other
    // copy), so the superblock writes the log replays stay the newest
    let gens = match p.ckpt.log_start {
        Some(_) => vec![sb.generation.saturating_sub(1), sb.generation],
        None => vec![sb.generation + 1, sb.generation + 2],
    };
    let newest = *gens.last().expect("two");
    for g in gens {
        let mut s = sb.clone();
        s.generation = g;
        let bytes = s.encode();
        write_block(&media, &bytes, (g % 2) * BLOCK_BYTES as u64)?;
        if let Some(t) = s.tail_copy_offset(g % 2) {
            write_block(&media, &bytes, t)?;
        }
    }
    write_block(
        &media,
        &p.ckpt.image,
        sb.checkpoint_offset[sb.checkpoint_slot as usize & 1],
    )?;
    // the open segments' blocks into the staging area (their slots have no
    // object: the attach queues their upload)
    let seg_bytes = sb.segment_blocks as u64 * BLOCK_BYTES as u64;
    for (slot, bytes) in &p.ckpt.partials {
        write_block(&media, bytes, sb.data_offset + *slot as u64 * seg_bytes)?;
    }
    media.flush()?;
    let read = crate::recovery::read_superblocks(&media).map_err(io_err)?;
    assert_eq!(
        read.sb.generation, newest,
        "the rebuilt superblock reads back"
    );
    let log = match p.ckpt.log_start {
        // MUTANT: log-replay-skipped s|Some(replay_log(p, &media, &sb, from, objects)?)|{ let _ = (from, replay_log); None }|
        Some(from) => Some(replay_log(p, &media, &sb, from, objects)?),
        None => None,
    };
    media.flush()?;
    let mut table = Table::create(
        &tab_tmp,
        sb.uuid,
        sb.segment_count,
        sb.segment_blocks,
        epoch,
    )?;
    let refs: Vec<Option<ObjRef>> = p
        .ckpt
        .slots
        .iter()
        .map(|s| {
            s.map(|s| ObjRef {
                seq: s.seq,
                epoch: s.epoch,
                crc: s.crc,
            })
        })
        .collect();
    table.set_all(&refs)?;
    table.set_floor(p.max_seq + 1)?;
    if p.ckpt.log_start.is_some() {
        table.set_store_durable(true)?;
    }
    drop(table);
    std::fs::rename(&tab_tmp, dir.join(TABLE_FILE))?;
    std::fs::rename(&vol_tmp, dir.join("volume"))?;
    std::fs::File::open(dir)?.sync_all()?;
    drop(media);
    Ok(log)
}

/// Step 5: the FLUSH log of the checkpoint's epoch over the rebuilt file.
fn replay_log(
    p: &mut Plan,
    media: &FileMedia,
    sb: &Superblock,
    from: u64,
    objects: &dyn ObjectStore,
) -> io::Result<super::durable::Replayed> {
    let ck_epoch = ObjName::parse(&p.checkpoint)
        .map(|n| n.epoch())
        .map_err(bad)?;
    let seg_bytes = sb.segment_blocks as u64 * BLOCK_BYTES as u64;
    let seg_area = sb.data_offset..sb.data_offset + sb.segment_count as u64 * seg_bytes;
    let len = media.len();
    let slots = &mut p.ckpt.slots;
    // slots whose object was brought into staging for a record
    let mut taken: Vec<(u64, SlotObject)> = Vec::new();
    let mut apply = |at: u64, d: &[u8]| -> io::Result<()> {
        let end = at + d.len() as u64;
        if end > len {
            return Err(bad(format!(
                "a FLUSH log record writes bytes {at}..{end}, past the volume's {len}"
            )));
        }
        if end > seg_area.start && at < seg_area.end {
            let first = (at.max(seg_area.start) - seg_area.start) / seg_bytes;
            let last = (end.min(seg_area.end) - 1 - seg_area.start) / seg_bytes;
            for slot in first..=last {
                let Some(o) = slots[slot as usize].take() else {
                    continue;
                };
                // the slot's object into staging first: the record writes
                // over (part of) that life
                let name = ObjName::Segment {
                    seq: o.seq,
                    epoch: o.epoch,
                }
                .encode();
                let body = objects.get(&name).map_err(|e| {
                    bad(format!(
                        "{name} (segment {slot}), needed by the FLUSH log: {e}"
                    ))
                })?;
                if body.len() as u64 != seg_bytes {
                    return Err(bad(format!("{name} has {} bytes", body.len())));
                }
                write_block(media, &body, seg_area.start + slot * seg_bytes)?;
                taken.push((slot, o));
            }
        }
        if at.is_multiple_of(BLOCK_BYTES as u64) && d.len().is_multiple_of(BLOCK_BYTES) {
            write_block(media, d, at)
        } else {
            // (the engine writes whole blocks; this keeps an odd one exact)
            let a = at / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
            let n = (end - a).div_ceil(BLOCK_BYTES as u64) as usize * BLOCK_BYTES;
            let mut b = AlignedBuf::new(n);
            media.read_at(&mut b, a)?;
            b[(at - a) as usize..(end - a) as usize].copy_from_slice(d);
            media.write_at(&b, a)
        }
    };
    let out = super::durable::replay(objects, &sb.uuid, ck_epoch, from, &mut apply)?;
    // the records rewrite slots with what the store often holds already:
    // the chunks an object was uploaded with (a slot taken above), or a
    // slot's next life, uploaded past the roll-forward's end. A slot with
    // no object whose staging copy is now byte for byte a segment object
    // gets that object in the table (the copy is its cache), instead of
    // an upload of the same bytes at attach and the object left an orphan
    let candidates: Vec<(String, Option<SlotObject>)> = {
        let named: std::collections::HashSet<(u64, u64)> =
            slots.iter().flatten().map(|o| (o.seq, o.epoch)).collect();
        let mut c: Vec<(String, Option<SlotObject>)> = taken
            .into_iter()
            .map(|(_, o)| {
                let n = ObjName::Segment {
                    seq: o.seq,
                    epoch: o.epoch,
                }
                .encode();
                (n, Some(o))
            })
            .collect();
        for o in objects.list(ObjKind::Segment.dir()).map_err(io_err)? {
            if let Ok(ObjName::Segment { seq, epoch }) = ObjName::parse(&o.name) {
                if o.len == seg_bytes
                    && !named.contains(&(seq, epoch))
                    && !c.iter().any(|(n, _)| *n == o.name)
                {
                    c.push((o.name, None));
                }
            }
        }
        c
    };
    let mut staged = AlignedBuf::new(seg_bytes as usize);
    for (name, known) in candidates {
        // block 0 first (its chunk header names the slot): one small GET
        // for an object that is no slot's staging copy
        let head = match objects.get_range(&name, 0..BLOCK_BYTES as u64) {
            Ok(h) => h,
            Err(_) => continue,
        };
        let slot = match ChunkHeader::decode(&head) {
            Ok(h) if h.uuid == sb.uuid && h.segment < sb.segment_count => h.segment,
            _ => continue,
        };
        if slots[slot as usize].is_some() {
            continue;
        }
        let at = seg_area.start + slot as u64 * seg_bytes;
        media.read_at(&mut staged, at)?;
        if staged[..BLOCK_BYTES] != head[..] {
            continue;
        }
        let body = match objects.get(&name) {
            Ok(b) => b,
            Err(_) => continue,
        };
        let same = body[..] == staged[..];
        if same {
            let ObjName::Segment { seq, epoch } = ObjName::parse(&name).map_err(bad)? else {
                continue;
            };
            let crc = crc32c::crc32c(&body);
            debug_assert!(known.is_none_or(|k| k.crc == crc));
            slots[slot as usize] = Some(SlotObject { seq, epoch, crc });
        }
    }
    Ok(out)
}

/// `sluice info` on a volume in an object store: the newest checkpoint
/// object and how many segment objects sit above its table.
pub fn summary(objects: &dyn ObjectStore) -> io::Result<String> {
    let segs = objects.list(ObjKind::Segment.dir()).map_err(io_err)?;
    let mut cks: Vec<(u64, String)> = objects
        .list(ObjKind::Checkpoint.dir())
        .map_err(io_err)?
        .into_iter()
        .filter_map(|o| match ObjName::parse(&o.name) {
            Ok(ObjName::Checkpoint { seq, .. }) => Some((seq, o.name)),
            _ => None,
        })
        .collect();
    cks.sort();
    let Some((_, newest)) = cks.last() else {
        return Ok(format!(
            "no checkpoint object; {} segment object(s)",
            segs.len()
        ));
    };
    let c = objects
        .get(newest)
        .map_err(io_err)
        .and_then(|b| ObjCheckpoint::decode(&b).map_err(bad));
    Ok(match c {
        Ok(c) => {
            let above = segs
                .iter()
                .filter(|o| {
                    matches!(ObjName::parse(&o.name), Ok(ObjName::Segment { seq, .. }) if seq >= c.seg_start)
                })
                .count();
            format!(
                "newest checkpoint object {newest} (of {}), names {} segment object(s); {above} segment object(s) above it (seq >= {}); {} segment object(s) in all",
                cks.len(),
                c.slots.iter().flatten().count(),
                c.seg_start,
                segs.len()
            )
        }
        Err(e) => format!(
            "newest checkpoint object {newest} (of {}) is unusable: {e}; {} segment object(s)",
            cks.len(),
            segs.len()
        ),
    })
}
