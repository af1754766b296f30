//! Recovery: mount as a sequence of named steps, each testable.
//!
//! 1. `read_superblocks`: newest valid of the two copies.
//! 2. `load_checkpoint`: newest valid slot, else the older one, else an empty map.
//! 3. `scan_segments` (skipped after a clean close): find chunks with seq >= the
//!    checkpoint's next_seq, from block 0 of any segment whose first chunk is that
//!    new, or from the recorded fill of a segment that was open at the checkpoint.
//! 4. `replay`: apply chunks in sequence order. A missing sequence number below the
//!    durable watermark W is a dead chunk whose segment was reused (skip it); the
//!    first one at or above W ends the log; a chunk that fails verification below W
//!    is damage: refuse to mount.
//! 5. `rebuild_segments`: live counts from the map; segments with nothing live are
//!    free (their first block is wiped so no stale chunk looks current).
//!
//! Invariant: the mounted map equals the state after a prefix of the chunk sequence
//! that contains every chunk durable at the crash.

use crate::checkpoint;
use crate::error::{Error, Result};
use crate::format::chunk::{self, ChunkHeader, Kind};
use crate::format::superblock::{Superblock, NO_CHECKPOINT};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::map::{Loc, Map};
use crate::media::{AlignedBuf, Media};
use crate::segments::{SegInfo, SegState, SegmentTable};
use crate::volume::core::virt_of;
use crate::volume::MountReport;

macro_rules! rules {
    ($($(#[doc = $d:literal])* $f:ident,)*) => {
        /// How often each recovery rule fired during one mount (`MountReport::rules`).
        /// A mount that refuses returns an error instead, so `damage_refused` is only
        /// seen through the error (the caller counts refusals itself).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
        pub struct RecoveryRules {
            $($(#[doc = $d])* pub $f: u64,)*
        }
        impl RecoveryRules {
            /// Every counter with its name, in declaration order.
            pub fn named(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f),)*]
            }
            /// Add another mount's counts to these.
            pub fn add(&mut self, o: &RecoveryRules) {
                $(self.$f += o.$f;)*
            }
        }
    };
}

rules! {
    /// One superblock copy was unusable; the other was used.
    superblock_copy_fallback,
    /// The current checkpoint slot was unusable; the older slot was used.
    checkpoint_slot_fallback,
    /// A checkpoint slot newer than the superblock names was ignored.
    checkpoint_newer_slot_ignored,
    /// No usable checkpoint: the map was rebuilt from every segment.
    full_rebuild,
    /// The volume was closed cleanly: nothing was scanned or replayed.
    clean_mount,
    /// A segment was walked from block 0 (its first chunk is newer than the checkpoint).
    segment_walked_from_start,
    /// A segment open at the checkpoint was walked from its recorded fill.
    segment_walked_from_fill,
    /// A segment's first block was zero (tombstone, or never written): not walked.
    tombstone_seen,
    /// A valid chunk header with an older sequence number ended a segment walk.
    stale_header_ends_walk,
    /// A header with this volume's identity but a bad checksum was recorded as invalid.
    damaged_header_recorded,
    /// An unrecognised block was skipped by scanning ahead for the next valid header.
    resync_past_unrecognised,
    /// A chunk whose header is valid but whose data fails its checksum was stepped over.
    chunk_data_invalid,
    /// A chunk header claimed more blocks than its segment has left.
    chunk_past_segment_end,
    /// A chunk was applied to the map.
    chunk_replayed,
    /// A GC relocation entry was applied to the map.
    relocation_replayed,
    /// A missing sequence number below the durable watermark was skipped as dead.
    gap_below_watermark_skipped,
    /// The log ended at the first missing sequence number at or above the watermark.
    log_end_at_missing_seq,
    /// A chunk after the end of the log was discarded.
    chunk_after_log_end_discarded,
    /// A chunk that failed verification at or above the watermark was dropped (torn tail).
    invalid_tail_dropped,
    /// Damage below the durable watermark refused the mount.
    damage_refused,
    /// A segment found free still started with a chunk header: scheduled for wiping.
    free_segment_wipe_scheduled,
}

pub struct Mounted {
    pub sb: Superblock,
    pub geo: Geometry,
    pub map: Map,
    pub segs: SegmentTable,
    pub next_seq: u64,
    /// Replay ran (or a fallback was taken): persist the result before writing.
    pub needs_checkpoint: bool,
    /// Free segments whose first block still holds an old chunk header.
    pub wipe: Vec<u32>,
    pub report: MountReport,
}

/// Step 1. Returns the chosen superblock and what each copy held.
pub fn read_superblocks(
    media: &dyn Media,
) -> Result<(Superblock, [std::result::Result<Superblock, String>; 2])> {
    if media.len() < 2 * BLOCK_BYTES as u64 {
        return Err(Error::Corrupt(format!(
            "media of {} bytes is too small to hold a sluice volume",
            media.len()
        )));
    }
    let mut buf = AlignedBuf::new(2 * BLOCK_BYTES);
    media.read_at(&mut buf, 0)?;
    let copies = [0, 1].map(|i| {
        Superblock::decode(&buf[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]).map_err(|e| e.to_string())
    });
    let best = copies
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .max_by_key(|s| s.generation)
        .cloned();
    match best {
        Some(sb) => {
            if media.len() < sb.media_bytes() {
                return Err(Error::Corrupt(format!("the volume needs {} bytes but the media holds only {}", sb.media_bytes(), media.len())));
            }
            Ok((sb, copies))
        }
        None => Err(Error::Corrupt(format!(
            "no valid superblock (copy 0 at byte 0: {}; copy 1 at byte 4096: {}): not a sluice volume, or both copies are damaged",
            copies[0].as_ref().err().unwrap(),
            copies[1].as_ref().err().unwrap()
        ))),
    }
}

/// A chunk found by the scan.
#[derive(Debug, Clone)]
pub struct Found {
    pub seq: u64,
    pub segment: u32,
    pub pos: u32,
    pub header: ChunkHeader,
}

/// A chunk whose header decodes but which fails verification.
#[derive(Debug, Clone)]
pub struct Invalid {
    pub seq: u64,
    pub segment: u32,
    pub pos: u32,
    pub why: String,
}

/// Walk the chunks of `seg` from block `pos`: each must belong to this volume and
/// segment and have seq >= min_seq and above its predecessor. Chunks that fail
/// verification are recorded in `invalid` and stepped over. Returns the block
/// after the last valid chunk.
pub fn walk_segment(
    media: &dyn Media,
    geo: &Geometry,
    uuid: &[u8; 16],
    seg: u32,
    start: u32,
    min_seq: u64,
    found: &mut Vec<Found>,
    invalid: &mut Vec<Invalid>,
    rules: &mut RecoveryRules,
) -> Result<u32> {
    let sbk = geo.segment_blocks;
    if start >= sbk {
        return Ok(start);
    }
    let mut img = AlignedBuf::new((sbk - start) as usize * BLOCK_BYTES);
    media.read_at(
        &mut img,
        geo.segment_offset(seg) + start as u64 * BLOCK_BYTES as u64,
    )?;
    let mut pos = start;
    let mut prev: Option<u64> = None;
    // end of the verified prefix: replay never applies a chunk past a bad one
    // (the bad one is either a torn tail or damage that refuses the mount)
    let mut valid_end: Option<u32> = None;
    while pos < sbk {
        let at = (pos - start) as usize * BLOCK_BYTES;
        let h = match ChunkHeader::decode(&img[at..at + BLOCK_BYTES]) {
            Ok(h) => h,
            Err(e) => {
                // A header with our magic, uuid and segment whose checksum fails,
                // carrying a sequence number that would continue this walk, is a
                // damaged (or torn) chunk: record it so replay can tell which.
                let b = &img[at..at + BLOCK_BYTES];
                let raw_seq = u64::from_le_bytes(b[32..40].try_into().unwrap());
                let raw_seg = u32::from_le_bytes(b[40..44].try_into().unwrap());
                if b[..8] == chunk::CHUNK_MAGIC
                    && &b[16..32] == uuid
                    && raw_seg == seg
                    && raw_seq >= min_seq
                    && prev.is_none_or(|p| raw_seq > p)
                {
                    invalid.push(Invalid {
                        seq: raw_seq,
                        segment: seg,
                        pos,
                        why: format!("chunk header: {e}"),
                    });
                    rules.damaged_header_recorded += 1;
                    valid_end.get_or_insert(pos);
                    // Step over it by its (unverified) length: a later chunk may
                    // prove it was durable. Garbage here just ends the walk.
                    let raw_data = u32::from_le_bytes(b[12..16].try_into().unwrap());
                    if raw_data <= chunk::MAX_DATA_BLOCKS && pos + 1 + raw_data <= sbk {
                        prev = Some(raw_seq);
                        pos += 1 + raw_data;
                        continue;
                    }
                }
                break;
            }
        };
        if &h.uuid != uuid
            || h.segment != seg
            || h.seq < min_seq
            || prev.is_some_and(|p| h.seq <= p)
        {
            rules.stale_header_ends_walk += 1;
            break;
        }
        let total = h.total_blocks();
        if pos + total > sbk {
            invalid.push(Invalid {
                seq: h.seq,
                segment: seg,
                pos,
                why: "chunk runs past the end of its segment".into(),
            });
            rules.chunk_past_segment_end += 1;
            break;
        }
        prev = Some(h.seq);
        if let Err(e) = chunk::verify(&img[at..at + total as usize * BLOCK_BYTES], uuid) {
            // Step over it: a later chunk in this segment may prove it was durable
            // (damage, not a torn tail). Replay treats it as a gap either way.
            invalid.push(Invalid {
                seq: h.seq,
                segment: seg,
                pos,
                why: e.to_string(),
            });
            rules.chunk_data_invalid += 1;
            valid_end.get_or_insert(pos);
            pos += total;
            continue;
        }
        found.push(Found {
            seq: h.seq,
            segment: seg,
            pos,
            header: h,
        });
        pos += total;
    }
    Ok(valid_end.unwrap_or(pos))
}

/// Apply one chunk's entries to the map (replay). Relocations are applied like any
/// record: the engine sequences them before any user record that supersedes them.
pub fn apply(map: &mut Map, geo: &Geometry, f: &Found, rules: &mut RecoveryRules) -> Result<()> {
    let mut di = 0u32;
    let base = f.segment * geo.segment_blocks + f.pos + 1;
    for e in &f.header.entries {
        if e.lba + e.count as u64 > map.len() {
            return Err(Error::Corrupt(format!(
                "chunk seq {} (segment {} block {}) names blocks beyond the volume",
                f.seq, f.segment, f.pos
            )));
        }
        if e.is_relocation() {
            rules.relocation_replayed += 1;
        }
        match e.kind {
            Kind::Data => {
                for k in 0..e.count {
                    map.set(e.lba + k as u64, Loc::Data(base + di));
                    di += 1;
                }
            }
            k => {
                let v = virt_of(k).expect("virtual kind");
                for i in 0..e.count as u64 {
                    map.set(e.lba + i, Loc::Virtual(v, f.segment));
                }
            }
        }
    }
    Ok(())
}

/// Threads that probe and walk segments at mount.
const SCAN_THREADS: u32 = 8;

/// What step 3 found in one segment.
struct SegScan {
    /// Block 0 holds a chunk header of this volume and segment (valid or not).
    ours: bool,
    /// (end of the verified prefix, chunks found, chunks that failed) if walked.
    walked: Option<(u32, Vec<Found>, Vec<Invalid>)>,
    rules: RecoveryRules,
}

/// Probe block 0 of `seg` and walk it if it holds chunks newer than the checkpoint
/// (from 0), or if it was open at the checkpoint (from its recorded fill).
fn scan_segment(
    media: &dyn Media,
    geo: &Geometry,
    uuid: &[u8; 16],
    seg: u32,
    fill: u32,
    c_next: u64,
    head: &mut AlignedBuf,
) -> Result<SegScan> {
    media.read_at(head, geo.segment_offset(seg))?;
    // Identity from the raw header fields: a damaged first header must still lead
    // to a walk (which records it as invalid).
    let ours = head[..8] == chunk::CHUNK_MAGIC
        && head[16..32] == *uuid
        && u32::from_le_bytes(head[40..44].try_into().unwrap()) == seg;
    let raw_seq = u64::from_le_bytes(head[32..40].try_into().unwrap());
    let start = match ours {
        true if raw_seq >= c_next => Some(0),
        true if fill > 0 && fill < geo.segment_blocks => Some(fill),
        _ => None,
    };
    let mut rules = RecoveryRules::default();
    if head.iter().all(|&b| b == 0) {
        rules.tombstone_seen += 1;
    }
    let walked = match start {
        Some(start) => {
            if start == 0 {
                rules.segment_walked_from_start += 1;
            } else {
                rules.segment_walked_from_fill += 1;
            }
            let (mut f, mut inv) = (Vec::new(), Vec::new());
            let end = walk_segment(
                media, geo, uuid, seg, start, c_next, &mut f, &mut inv, &mut rules,
            )?;
            Some((end, f, inv))
        }
        None => None,
    };
    Ok(SegScan {
        ours,
        walked,
        rules,
    })
}

/// Mount `media`: steps 1-5 above. Performs no writes.
pub fn mount(media: &dyn Media) -> Result<Mounted> {
    let mut report = MountReport::default();
    let (sb, copies) = read_superblocks(media)?;
    for (i, c) in copies.iter().enumerate() {
        if let Err(e) = c {
            report.notes.push(format!(
                "superblock copy {i} is unusable ({e}); using the other copy"
            ));
            report.rules.superblock_copy_fallback += 1;
        }
    }
    let geo = Geometry::from_superblock(&sb);

    // Step 2.
    let mut loaded = None;
    if sb.checkpoint_slot != NO_CHECKPOINT {
        for slot in [sb.checkpoint_slot, 1 - sb.checkpoint_slot] {
            match checkpoint::load(media, &sb, slot) {
                Ok(l) if slot == sb.checkpoint_slot || l.next_seq <= sb.checkpoint_next_seq => {
                    if slot != sb.checkpoint_slot {
                        report.rules.checkpoint_slot_fallback += 1;
                    }
                    loaded = Some((slot, l));
                    break;
                }
                Ok(_) => {
                    report.rules.checkpoint_newer_slot_ignored += 1;
                    report.notes.push(format!(
                        "checkpoint slot {slot} is newer than the superblock says; ignored"
                    ))
                }
                Err(e) => report
                    .notes
                    .push(format!("checkpoint slot {slot} is unusable: {e}")),
            }
        }
        if loaded.is_none() {
            report.rules.full_rebuild += 1;
            report
                .notes
                .push("no usable checkpoint: rebuilding the map from every segment".into());
        }
    }
    let newest = loaded
        .as_ref()
        .is_some_and(|(s, _)| *s == sb.checkpoint_slot);
    report.checkpoint_slot = loaded.as_ref().map(|(s, _)| *s);
    let (mut map, records, c_next) = match loaded {
        Some((_, l)) => (l.map, l.segments, l.next_seq),
        None => (
            Map::new(geo.logical_blocks),
            checkpoint::empty_records(geo.segment_count),
            1,
        ),
    };
    let clean = sb.is_clean() && (newest || sb.checkpoint_slot == NO_CHECKPOINT);
    report.clean = clean;
    if clean {
        report.rules.clean_mount += 1;
    }

    let mut fills: Vec<u32> = records.iter().map(|r| r.fill).collect();
    let mut last_seq: Vec<u64> = records.iter().map(|r| r.last_seq).collect();
    let mut next_seq = c_next;
    let mut wipe = Vec::new();

    if !clean {
        // Step 3: probe every segment's first block and walk the ones with new
        // chunks, in parallel (the walks are whole-segment reads; a device serves
        // several at once much faster than one after another).
        let n = geo.segment_count;
        let threads = SCAN_THREADS.min(n).max(1);
        let per = n.div_ceil(threads);
        let uuid = sb.uuid;
        let records = &records;
        let geo_ref = &geo;
        let parts: Vec<Result<Vec<SegScan>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        let mut head = AlignedBuf::new(BLOCK_BYTES);
                        let mut v = Vec::new();
                        for seg in t * per..((t + 1) * per).min(n) {
                            let fill = records[seg as usize].fill;
                            v.push(scan_segment(
                                media, geo_ref, &uuid, seg, fill, c_next, &mut head,
                            )?);
                        }
                        Ok(v)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::Corrupt("segment scan thread panicked".into()))
                    })
                })
                .collect()
        });
        let mut found = Vec::new();
        let mut invalid = Vec::new();
        let mut first_header_ok = Vec::with_capacity(n as usize);
        let mut seg = 0usize;
        for part in parts {
            for sc in part? {
                report.rules.add(&sc.rules);
                first_header_ok.push(sc.ours);
                if let Some((end, f, inv)) = sc.walked {
                    if !f.is_empty() {
                        fills[seg] = end;
                    }
                    found.extend(f);
                    invalid.extend(inv);
                }
                seg += 1;
            }
        }
        // Step 4.
        let w = found
            .iter()
            .map(|f| f.header.durable_seq)
            .chain([sb.durable_seq])
            .max()
            .unwrap_or(0);
        if let Some(bad) = invalid.iter().find(|i| i.seq >= c_next && i.seq < w) {
            report.rules.damage_refused += 1;
            return Err(Error::Corrupt(format!(
                "chunk seq {} in segment {} at block {} fails verification ({}) although a flush had made it durable; refusing to mount rather than return stale data (run `sluice check` for the full list)",
                bad.seq, bad.segment, bad.pos, bad.why
            )));
        }
        report.rules.invalid_tail_dropped += invalid.iter().filter(|i| i.seq >= w).count() as u64;
        found.sort_by_key(|f| f.seq);
        let max_seen = found
            .iter()
            .map(|f| f.seq)
            .chain(
                invalid
                    .iter()
                    .map(|i| i.seq)
                    .filter(|&s| s < c_next + (1 << 32)),
            )
            .max();
        let mut expected = c_next;
        let mut stopped = false;
        for f in &found {
            if stopped {
                report.rules.chunk_after_log_end_discarded += 1;
                report.chunks_discarded += 1;
                continue;
            }
            if f.seq < expected {
                continue;
            }
            if f.seq > expected && f.seq > w {
                report.notes.push(format!("log ends at seq {expected} (not found; the crash lost it); {} newer chunk(s) discarded", found.iter().filter(|g| g.seq > expected).count()));
                stopped = true;
                report.rules.log_end_at_missing_seq += 1;
                report.rules.chunk_after_log_end_discarded += 1;
                report.chunks_discarded += 1;
                continue;
            }
            if f.seq > expected {
                report.rules.gap_below_watermark_skipped += 1;
            }
            apply(&mut map, &geo, f, &mut report.rules)?;
            report.rules.chunk_replayed += 1;
            last_seq[f.segment as usize] = last_seq[f.segment as usize].max(f.seq);
            report.chunks_replayed += 1;
            expected = f.seq + 1;
        }
        next_seq = next_seq.max(expected).max(max_seen.map_or(0, |s| s + 1));
        // Segments whose first block looks like a chunk but end up free get wiped.
        for (i, ok) in first_header_ok.iter().enumerate() {
            if *ok {
                wipe.push(i as u32);
            }
        }
    }

    // Step 5.
    let mut infos: Vec<SegInfo> = (0..geo.segment_count as usize)
        .map(|i| SegInfo {
            state: SegState::Closed,
            live: 0,
            data_live: 0,
            fill: fills[i],
            last_seq: last_seq[i],
            ..SegInfo::EMPTY
        })
        .collect();
    for loc in map.iter() {
        if let Some(s) = loc.segment(geo.segment_blocks) {
            let info = infos.get_mut(s as usize).ok_or_else(|| {
                Error::Corrupt(format!("map points into segment {s}, beyond the volume"))
            })?;
            info.live += 1;
            if let Loc::Data(p) = loc {
                info.data_live += 1;
                if p % geo.segment_blocks >= info.fill.max(1) {
                    return Err(Error::Corrupt(format!(
                        "map points at block {} of segment {s}, past its fill {}",
                        p % geo.segment_blocks,
                        info.fill
                    )));
                }
            }
        }
    }
    if clean {
        for (i, r) in records.iter().enumerate() {
            if r.live != infos[i].live {
                return Err(Error::Corrupt(format!(
                    "checkpoint says segment {i} holds {} live entries but its map points {} there",
                    r.live, infos[i].live
                )));
            }
        }
    }
    let segs = SegmentTable::rebuild(infos, geo.segment_blocks);
    wipe.retain(|&s| segs.segs[s as usize].state == SegState::Free);
    report.rules.free_segment_wipe_scheduled += wipe.len() as u64;
    Ok(Mounted {
        sb,
        geo,
        map,
        segs,
        next_seq,
        needs_checkpoint: !clean,
        wipe,
        report,
    })
}
