//! Recovery: mount as a table of named steps (`mount::STEPS`, SPDK FTL's
//! ftl_mngt_recovery.c shape: rows run in order over one `mount::MountCtx`,
//! each timed in `MountReport::steps`); this module owns each step's rules as a
//! short function tested on its own, and the log's chunk walker (`walk_image`)
//! that GC and check use too (the CRC index and the scrub have their own,
//! narrower walks: ARCHITECTURE.md).
//!
//! 1. `read_superblocks`: newest valid of the two head copies, else of the two
//!    tail copies at the end of the media (a fallback mount).
//! 2. `load_checkpoint`: newest valid slot, else the older one, else an empty map.
//! 3. `scan_segments` (skipped after a clean close): walk every segment that may
//!    hold chunks with seq >= the checkpoint's next_seq (from block 0, or from the
//!    recorded fill of a segment open at the checkpoint). Walks resync past a
//!    header they do not recognise, so damage cannot hide later chunks.
//! 4. `judge`: the durable watermark W; any bad stretch that held a chunk < W is
//!    damage: refuse to mount, naming segment, block and seq.
//! 5. `replay`: apply chunks in sequence order. A missing sequence number below W
//!    is a dead chunk whose segment was reused (skip it); the first one at or above
//!    W ends the log.
//! 6. `rebuild_segments`: live counts from the map; segments with nothing live are
//!    free.
//! 7. `replay_intent_log` (format v2 with an intent log): the records above
//!    what the main log holds. (8. `finish`, in `Volume::open`: checkpoint, then
//!    wipe the free segments' first block, then re-home the log's blocks.)
//!
//! Invariant: the mounted map equals the state after a prefix of the chunk sequence
//! that contains every chunk durable at the crash. `MountReport::rules` counts
//! each rule as it fires.

mod chain;
mod mount;

use crate::checkpoint;
use crate::error::{Error, Result};
use crate::format::chunk::{self, ChunkHeader, Kind};
use crate::format::codec::{self, Place};
use crate::format::superblock::{Superblock, NO_CHECKPOINT, TAIL_AREA_BYTES};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::map::virt_of;
use crate::map::{Loc, Map};
use crate::media::{AlignedBuf, Media};
use crate::segments::{SegInfo, SegState, SegmentTable};
use crate::store::{FlatStore, SegmentStore};

/// What the last mount found (printed by `sluice info` and the server).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct MountReport {
    pub clean: bool,
    pub checkpoint_slot: Option<u32>,
    pub chunks_replayed: u64,
    pub chunks_discarded: u64,
    pub notes: Vec<String>,
    pub mount_ms: u64,
    /// How often each recovery rule fired during this mount.
    pub rules: RecoveryRules,
    /// Each mount step with its duration in microseconds, in order.
    pub steps: Vec<(&'static str, u64)>,
}

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
    /// One head superblock copy was unusable; the other was used.
    superblock_copy_fallback,
    /// Both head superblock copies were unusable; a tail copy was used.
    superblock_tail_fallback,
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
    /// An intent log record verified, followed its predecessor and was replayed.
    log_record_replayed,
    /// A block of a replayed record was skipped: the main log already holds its LSN.
    log_block_already_in_main,
    /// A record did not fit before the ring's end and was found at its start.
    log_record_found_after_wrap,
    /// Log replay ended: the next place holds no record that verifies and follows
    /// (torn, never written, stale from an earlier lap, or of another volume).
    log_end_at_unverified_record,
    /// Mirrored log devices: one device's chain of records ended before the
    /// other's (a record it lost at the power cut, or it missed records while
    /// it failed); replay took the longer chain.
    log_mirror_shorter_chain_ignored,
    /// A record carries LSNs above what the main log and the records before it
    /// hold (a chunk before it was lost in the crash): replay ends before it.
    log_record_after_lsn_gap_ends_replay,
    /// A version 3 record verified and followed, but a data block it names
    /// does not match its CRC at its place (torn, never written): replay ends.
    log_end_at_unverified_placed_data,
    /// Version 3 records named places in a segment the mount found empty: it
    /// is held (not reused) until the mount has re-homed their blocks.
    log_placed_segment_held,
    /// A segment ended in a damaged stretch right after a chunk X, and the
    /// chain bounds X's successor below the loaded checkpoint: the successor
    /// went to another segment (X's had too little room for it) since freed
    /// and reused, so the stretch is stale bytes, not damage
    /// (`recovery::chain`).
    chain_successor_below_checkpoint,
}

pub struct Mounted {
    pub sb: Superblock,
    pub geo: Geometry,
    pub map: Map,
    pub segs: SegmentTable,
    pub next_seq: u64,
    /// Lifetime counters of the checkpoint mount started from (None: none
    /// recorded). Work after that checkpoint is not in them.
    pub lifetime: Option<crate::format::checkpoint::Lifetime>,
    /// Replay ran (or a fallback was taken): persist the result before writing.
    pub needs_checkpoint: bool,
    /// A superblock copy (head or tail) is unusable: a read-write mount rewrites
    /// both indexes, so every copy is whole again.
    pub superblock_repair: bool,
    /// Salvage mounts: logical block ranges `[start, end)` that must answer EIO.
    pub unvouched: Vec<(u64, u64)>,
    /// Free segments whose first block still holds an old chunk header.
    pub wipe: Vec<u32>,
    pub report: MountReport,
    /// Format v2 with an intent log: what its replay found (None: no log).
    pub log: Option<LogReplay>,
    /// Every user block record below this LSN is in the main log (format v2;
    /// 0 otherwise); the intent log's blocks to re-home follow it.
    pub next_lsn: u64,
    /// Where the log ring is: `(media byte offset, bytes)` on the volume's
    /// media (no log device) or on each of `log_devices`.
    pub log_ring: Option<(u64, u64)>,
    /// Log devices (indexes into the `logs` given to the mount, in mirror
    /// order) that belong to this volume and are used; empty without a log
    /// device.
    pub log_devices: Vec<usize>,
    /// Devices the volume was created with that this mount runs without,
    /// each with why (a mirrored pair with one device missing or unusable).
    pub log_missing: Vec<String>,
    /// The mirror index of each of `log_devices`.
    pub log_mirrors: Vec<u16>,
    /// Bit i: mirror i is not among `log_devices` (this mount writes no
    /// records to it, so it is stale from now on).
    pub log_absent: u32,
    /// Blocks the scan read right from the store's redundancy (a stripe
    /// set) after they failed their check: a mount that may write repairs
    /// them in place before it writes anything else.
    pub healed: Vec<Healed>,
    /// Physical extents `(first block, blocks)` of every chunk the walks
    /// found at or above the checkpoint's next seq (replayed or not): a
    /// crash may have left them on a stripe set's rows without those rows'
    /// parity, so a writable mount with every member present puts that
    /// parity right before its checkpoint adopts them (docs/stripes.md §0,
    /// finding 4). Empty after a clean shutdown (nothing is walked).
    pub replayed: Vec<(u64, u32)>,
}

/// Read and check the superblock of log device `dev` for volume `sb`: either
/// copy that verifies (both are written at create with the same content),
/// its volume uuid, log uuid and ring size equal to the volume's, and the
/// device large enough for its ring. Err: why not, in words.
pub fn identify_log_device(
    dev: &dyn Media,
    sb: &Superblock,
) -> std::result::Result<crate::format::logdev::LogDevSuperblock, String> {
    use crate::format::logdev::LogDevSuperblock;
    let Some((log_uuid, ring_bytes)) = sb.log_device() else {
        return Err("the volume has no log device".into());
    };
    let mut errs = Vec::new();
    let mut found = None;
    for copy in 0..2u64 {
        let mut b = AlignedBuf::new(BLOCK_BYTES);
        match dev.read_at(&mut b[..], copy * BLOCK_BYTES as u64) {
            Ok(()) => match LogDevSuperblock::decode(&b) {
                Ok(s) => {
                    found = Some(s);
                    break;
                }
                Err(e) => errs.push(format!("copy {copy}: {e}")),
            },
            Err(e) => errs.push(format!("copy {copy}: {e}")),
        }
    }
    let Some(s) = found else {
        return Err(format!(
            "no valid log device superblock ({})",
            errs.join("; ")
        ));
    };
    let hex = |u: &[u8; 16]| u.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let ours = s.volume_uuid == sb.uuid && s.log_uuid == log_uuid;
    // MUTANT: logdev-foreign-accepted s|if !ours {|if false {|
    if !ours {
        return Err(format!(
            "it belongs to another volume or log (volume {}, log {}; this volume is {} with log {})",
            hex(&s.volume_uuid),
            hex(&s.log_uuid),
            hex(&sb.uuid),
            hex(&log_uuid)
        ));
    }
    if s.ring_bytes != ring_bytes {
        return Err(format!(
            "its ring holds {} bytes, the volume's superblock says {ring_bytes}",
            s.ring_bytes
        ));
    }
    if dev.len() < s.device_bytes() {
        return Err(format!(
            "it holds {} bytes, its ring needs {}",
            dev.len(),
            s.device_bytes()
        ));
    }
    Ok(s)
}

/// The log step of a volume whose ring is on log device(s): identify each
/// given device (one of another volume or log refuses the mount, naming it),
/// replay each usable one's chain and take the longest (mirrors hold the same
/// records at the same places; a device that lost or missed records holds a
/// prefix of the other's chain). Refuses when no device is usable; runs
/// degraded (noted, `Mounted::log_missing`) when one of a pair is.
/// What `replay_log_devices` found: the replay, the ring, the devices used
/// (indexes into `logs`, mirror index), what is missing, and the mask of
/// absent mirrors.
type LogDevicesFound = (
    LogReplay,
    Option<(u64, u64)>,
    Vec<(usize, u16)>,
    Vec<String>,
    u32,
);

fn replay_log_devices(
    logs: &[&dyn Media],
    sb: &Superblock,
    main_lsn: u64,
    salvage: bool,
    missing_ok: bool,
    report: &mut MountReport,
) -> Result<LogDevicesFound> {
    let (log_uuid, ring_bytes) = sb.log_device().expect("a log device volume");
    let hex: String = log_uuid.iter().map(|b| format!("{b:02x}")).collect();
    let v = sb.v2.expect("v2");
    // Mounting without the log (`missing_ok`): nothing to replay; the new
    // start's fresh chain seed (persisted by a read-write mount) keeps a
    // device that comes back later from replaying its old records over
    // newer writes.
    let without = |report: &mut MountReport, why: String| {
        let lost = if sb.is_clean() {
            "it was closed cleanly, so its log held nothing the main log lacks: nothing is lost"
                .to_string()
        } else {
            format!(
                "writes acknowledged by FLUSH or FUA that were only in the log are lost: those with an order number (LSN) of {main_lsn} or more; the main log holds every write below it. The format does not record how many such writes or which blocks (the log device held them)"
            )
        };
        report.notes.push(format!(
            "mounted WITHOUT its intent log device (log {hex}; {why}): {lost}"
        ));
        tracing::warn!("mounted without the intent log device (log {hex}; {why}): {lost}");
        (
            LogReplay {
                next_lsn: main_lsn,
                start: crate::format::superblock::LogStart {
                    // MUTANT: missing-ok-keeps-old-chain s|crate::format::intent::chain_seed(&sb.uuid, sb.generation)|v.log_start.chain|
                    chain: crate::format::intent::chain_seed(&sb.uuid, sb.generation),
                    ..v.log_start
                },
                ..LogReplay::default()
            },
            None,
            Vec::new(),
            vec![format!("every log device ({why})")],
            0,
        )
    };
    if logs.is_empty() && missing_ok {
        return Ok(without(report, "none given".into()));
    }
    if logs.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the volume's intent log is on a separate log device (log {hex}, ring of {ring_bytes} bytes) and none was given: name it (serve --log-device PATH), or mount without it (serve --log-device-missing-ok: loses what only the log held)"
        )));
    }
    let mut usable: Vec<(usize, crate::format::logdev::LogDevSuperblock)> = Vec::new();
    let mut missing = Vec::new();
    let mut count = 1u16;
    for (i, d) in logs.iter().enumerate() {
        match identify_log_device(*d, sb) {
            Ok(s) => {
                if usable.iter().any(|(_, u)| u.mirror_index == s.mirror_index) {
                    return Err(Error::InvalidArgument(format!(
                        "log device {} is mirror {} of the volume's log, and so is another one given: give each device once",
                        d.describe(),
                        s.mirror_index
                    )));
                }
                count = count.max(s.mirror_count);
                usable.push((i, s));
            }
            Err(why) if why.contains("another volume") => {
                return Err(Error::InvalidArgument(format!(
                    "log device {}: {why}",
                    d.describe()
                )))
            }
            Err(why) => missing.push(format!("{}: {why}", d.describe())),
        }
    }
    if usable.is_empty() && missing_ok {
        return Ok(without(report, missing.join("; ")));
    }
    if usable.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "no usable log device for the volume's intent log (log {hex}): {}",
            missing.join("; ")
        )));
    }
    usable.sort_by_key(|(_, s)| s.mirror_index);
    // a stale mirror (it missed records) is written to again but never
    // replayed while the other is here; alone it cannot vouch for anything
    let stale =
        |s: &crate::format::logdev::LogDevSuperblock| v.log_stale & (1 << s.mirror_index) != 0;
    // MUTANT: stale-mirror-replayed s|let skip_stale = true;|let skip_stale = false;|
    let skip_stale = true;
    let replay_from: Vec<_> = usable
        .iter()
        .filter(|(_, s)| !(skip_stale && stale(s)))
        .cloned()
        .collect();
    if replay_from.is_empty() {
        let why = format!(
            "only log device mirror {} is here, and it missed records while the volume ran without it (the other mirror holds acknowledged writes)",
            usable[0].1.mirror_index
        );
        if missing_ok {
            return Ok(without(report, why));
        }
        return Err(Error::InvalidArgument(format!(
            "{}: {why}; give the other log device too (or --log-device-missing-ok)",
            logs[usable[0].0].describe()
        )));
    }
    for (_, s) in usable.iter().filter(|(_, s)| stale(s)) {
        report.notes.push(format!(
            "intent log: log device mirror {} is stale (it missed records): not replayed, written again from this mount on",
            s.mirror_index
        ));
    }
    for m in 0..count {
        if !usable.iter().any(|(_, s)| s.mirror_index == m)
            && missing.len() < (count - usable.len() as u16) as usize
        {
            missing.push(format!("log device mirror {m}: not given"));
        }
    }
    let ring = (usable[0].1.ring_offset, usable[0].1.ring_bytes);
    let mut best: Option<(LogReplay, RecoveryRules)> = None;
    for (i, s) in &replay_from {
        let mut rules = RecoveryRules::default();
        let r = replay_intent_log(
            logs[*i],
            (s.ring_offset, s.ring_bytes),
            sb,
            main_lsn,
            salvage,
            None,
            &mut rules,
        )?;
        // the longer chain wins (records, then LSNs); a tie keeps the first
        let take = match &best {
            None => true,
            Some((b, _)) => {
                let (mine, theirs) = ((r.records, r.next_lsn), (b.records, b.next_lsn));
                if mine != theirs {
                    report.rules.log_mirror_shorter_chain_ignored += 1;
                }
                // MUTANT: mirror-first-chain-kept s|mine > theirs|false|
                mine > theirs
            }
        };
        if take {
            best = Some((r, rules));
        }
    }
    let (r, rules) = best.expect("one usable device");
    report.rules.add(&rules);
    for m in &missing {
        report
            .notes
            .push(format!("intent log degraded, running without {m}"));
    }
    let absent = (0..count)
        .filter(|m| !usable.iter().any(|(_, s)| s.mirror_index == *m))
        .fold(0u32, |a, m| a | 1 << m);
    Ok((
        r,
        Some(ring),
        usable.iter().map(|(i, s)| (*i, s.mirror_index)).collect(),
        missing,
        absent,
    ))
}

/// What the intent log's replay found: the blocks to re-home into the main
/// log (claim before reuse), in LSN order, and where new records go.
#[derive(Debug, Clone, Default)]
pub struct LogReplay {
    /// (lba, kind, index of its data block in `data` for data blocks).
    pub blocks: Vec<(u64, Kind, Option<usize>)>,
    pub data: Vec<u8>,
    /// The mount's start: the place after the last replayed record, the next
    /// record seq, and a fresh chain seed (persisted by the mount's first
    /// superblock write, before any record is written).
    pub start: crate::format::superblock::LogStart,
    /// LSN after the last block replayed (the main log's when none was).
    pub next_lsn: u64,
    pub records: u64,
    /// Salvage: logical block ranges of records after an LSN gap (EIO).
    pub unvouched: Vec<(u64, u64)>,
    /// Version 3 records replayed: (segment, end of the blocks they named):
    /// no chunk may be written there until the start has passed them (the
    /// mount holds these segments, `hold_placed`).
    pub placed: Vec<(u32, u32)>,
}

impl LogReplay {
    pub fn data_block(&self, i: usize) -> &[u8] {
        &self.data[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]
    }
}

/// Read the record expected at ring offset `at` (seq `seq`, chained to
/// `chain`): header, then the whole record if its header says it fits. The
/// reads are block-aligned (a version 3 record may start on any 512-byte
/// boundary; O_DIRECT media may take only 4 KiB-aligned reads).
fn read_record(
    media: &dyn Media,
    ring: (u64, u64),
    at: u64,
    uuid: &[u8; 16],
    seq: u64,
    chain: u32,
) -> Result<Option<(crate::format::intent::RecordHeader, u32, Vec<u8>)>> {
    use crate::format::intent;
    let bs = BLOCK_BYTES as u64;
    let sector = intent::SECTOR_BYTES as u64;
    if !at.is_multiple_of(sector) || at + sector > ring.1 {
        return Ok(None);
    }
    // the block holding `at` and, when the record may run into it, the next
    let base = at / bs * bs;
    let win = (2 * bs).min(ring.1 - base);
    let mut hdr = AlignedBuf::new(win as usize);
    let rel = (at - base) as usize;
    // Read checked (a stripe set: the first member's copy that passes, the
    // failing ones before it rewritten): the header must decode as record
    // `seq` of this volume and fit; a record in the window (version 3) must
    // verify whole, and only its bytes are vouched for (the window's others
    // are other records'); of a version 2 record the header block (its own
    // CRC), its whole image checked by its own read below.
    let header_ok = |b: &[u8]| -> Option<std::ops::Range<usize>> {
        let (h, _) = intent::RecordHeader::decode(&b[rel..]).ok()?;
        let len = h.ring_bytes();
        if h.seq != seq || h.uuid != *uuid || at + len as u64 > ring.1 {
            return None;
        }
        match h.place {
            Some(_) => {
                let img = b.get(rel..rel + len)?;
                intent::verify(img, uuid, seq, chain).ok()?;
                Some(rel..rel + len)
            }
            None => Some(rel..(rel + BLOCK_BYTES).min(b.len())),
        }
    };
    media.read_checked(&mut hdr[..], ring.0 + base, &header_ok)?;
    let Ok((h, _)) = intent::RecordHeader::decode(&hdr[rel..]) else {
        return Ok(None);
    };
    let len = h.ring_bytes() as u64;
    if h.seq != seq || at + len > ring.1 {
        return Ok(None);
    }
    let img = if h.place.is_some() {
        hdr[rel..rel + len as usize].to_vec()
    } else {
        let mut img = AlignedBuf::new(len as usize);
        media.read_checked(&mut img[..], ring.0 + at, &|b| {
            intent::verify(b, uuid, seq, chain).ok().map(|_| 0..b.len())
        })?;
        img.to_vec()
    };
    Ok(match intent::verify(&img, uuid, seq, chain) {
        Ok((h, crc)) => Some((h, crc, img)),
        Err(_) => None,
    })
}

/// A version 3 record's data blocks, read from their places in the main log
/// (`geo` of `media`); None when the place is outside the segment area.
fn read_placed(
    media: &dyn Media,
    geo: &Geometry,
    h: &crate::format::intent::RecordHeader,
) -> Result<Option<Vec<u8>>> {
    let p = h.place.expect("a version 3 record");
    let n = h.block_crcs.len() as u64;
    if p.segment >= geo.segment_count || p.first_block() + n > geo.segment_blocks as u64 {
        return Ok(None);
    }
    let mut buf = AlignedBuf::new(n as usize * BLOCK_BYTES);
    let phys = p.segment as u64 * geo.segment_blocks as u64 + p.first_block();
    media.read_at(&mut buf[..], geo.phys_offset(phys))?;
    Ok(Some(buf.to_vec()))
}

/// Mount step `replay_intent_log` (format v2 with INTENT_LOG), after the main
/// log's replay: from the persisted start, apply records while each verifies,
/// has seq = previous + 1 and chains to the previous header's CRC (ZFS's
/// `zil_parse` rule); a record that does not fit before the ring's end was
/// written at its start. Blocks whose LSN the main log already holds
/// (`main_lsn`: every LSN below it) are skipped; a record whose first LSN lies
/// above what is held ends replay (the chunk before it was lost, so applying
/// it would break the prefix); a salvage mount, whose main log may have
/// skipped a damaged chunk, walks on and lists the blocks of the records after
/// the gap as unvouched (EIO) instead.
pub fn replay_intent_log(
    media: &dyn Media,
    ring: (u64, u64),
    sb: &Superblock,
    main_lsn: u64,
    salvage: bool,
    places: Option<(&dyn Media, &Geometry)>,
    rules: &mut RecoveryRules,
) -> Result<LogReplay> {
    let v = sb.v2.expect("a v2 superblock");
    let sector = crate::format::intent::SECTOR_BYTES as u64;
    let mut out = LogReplay {
        next_lsn: main_lsn,
        ..LogReplay::default()
    };
    let (mut at, mut seq, mut chain) = (v.log_start.offset, v.log_start.seq, v.log_start.chain);
    let mut after_gap = false;
    // every record takes at least one sector, and a place holds one record:
    // the walk cannot go round the ring more than once
    // MUTANT: ring-replay-skipped s|0..=ring.1 / sector|0..0|
    for _ in 0..=ring.1 / sector {
        let mut found = read_record(media, ring, at, &sb.uuid, seq, chain)?;
        let mut pos = at;
        if found.is_none() && at != 0 {
            found = read_record(media, ring, 0, &sb.uuid, seq, chain)?;
            pos = 0;
            if found.is_some() {
                rules.log_record_found_after_wrap += 1;
            }
        }
        let Some((h, crc, mut img)) = found else {
            rules.log_end_at_unverified_record += 1;
            break;
        };
        if let Some(p) = h.place.filter(|_| h.lsn_end() > out.next_lsn) {
            // version 3: its data at its places must verify, else the record
            // is the end of the log (data and record are made durable by one
            // flush: a record whose data is torn was never acknowledged). A
            // record wholly in the main log is not checked: its places may
            // have been reused since its chunk was sealed and durable.
            let data = match places {
                Some((m, geo)) => read_placed(m, geo, &h)?,
                // A log device's ring and an object-store or stripe-set
                // volume's ring are never indirect (`Volume::open` makes a
                // ring indirect only over the flat store, `create` sets
                // LOG_INDIRECT only for the in-volume ring): a verified
                // record here that places its data is a bug or a volume
                // this build does not understand, never a torn FLUSH, so
                // ending the log quietly would drop acknowledged writes.
                // A salvage mount ends the log there (counted as unverified
                // placed data).
                // MUTANT: placed-record-without-places-ends-quietly s|None if !salvage =>|None if false =>|
                None if !salvage => {
                    return Err(Error::Corrupt(format!(
                        "intent log record seq {seq} places its data in the volume's segments \
                         (a version 3 record), but this log cannot hold such records (a log \
                         device, an object store's or a stripe set's ring); refusing to end \
                         the log before it (salvage ends it there)"
                    )))
                }
                None => None,
            };
            match data.filter(|d| crate::format::intent::verify_placed(&h, d).is_ok()) {
                Some(d) => {
                    // as a version 2 record's image: header block, then its data
                    img = vec![0u8; BLOCK_BYTES];
                    img.extend_from_slice(&d);
                    out.placed
                        .push((p.segment, p.first_block() as u32 + h.data_blocks()));
                }
                None => {
                    rules.log_end_at_unverified_placed_data += 1;
                    break;
                }
            }
        }
        if h.first_lsn > out.next_lsn && !after_gap {
            rules.log_record_after_lsn_gap_ends_replay += 1;
            if !salvage {
                break;
            }
            // salvage: the main log's damaged stretch held the missing LSNs;
            // the blocks of this and every later record answer EIO
            after_gap = true;
        }
        if after_gap {
            for e in &h.entries {
                out.unvouched.push((e.lba, e.lba + e.count as u64));
            }
            at = (pos + h.ring_bytes() as u64) % ring.1;
            seq += 1;
            chain = crc;
            continue;
        }
        let mut lsn = h.first_lsn;
        let mut di = 0usize;
        for e in &h.entries {
            if e.lba + e.count as u64 > sb.logical_blocks {
                return Err(Error::Corrupt(format!(
                    "intent log record {} names blocks beyond the volume",
                    h.seq
                )));
            }
            for k in 0..e.count as u64 {
                let data = (e.kind == Kind::Data).then(|| {
                    di += 1;
                    di - 1
                });
                if lsn < out.next_lsn {
                    rules.log_block_already_in_main += 1;
                } else {
                    let idx = data.map(|d| {
                        let off = (1 + d) * BLOCK_BYTES;
                        out.data.extend_from_slice(&img[off..off + BLOCK_BYTES]);
                        out.data.len() / BLOCK_BYTES - 1
                    });
                    out.blocks.push((e.lba + k, e.kind, idx));
                    out.next_lsn = lsn + 1;
                }
                lsn += 1;
            }
        }
        rules.log_record_replayed += 1;
        out.records += 1;
        at = (pos + h.ring_bytes() as u64) % ring.1;
        seq += 1;
        chain = crc;
    }
    out.start = crate::format::superblock::LogStart {
        offset: at,
        seq,
        chain: crate::format::intent::chain_seed(&sb.uuid, sb.generation),
    };
    Ok(out)
}

/// Which end of the media a superblock copy sits at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    Head,
    Tail,
}

/// One superblock copy as read (`index` 0 or 1: the generation parity it holds).
#[derive(Debug, Clone)]
pub struct SbCopy {
    pub index: u32,
    pub end: End,
    pub byte: u64,
    pub found: std::result::Result<Superblock, String>,
}

impl SbCopy {
    /// "superblock copy 0 at the head (byte 0)", for messages.
    pub fn name(&self) -> String {
        let end = match self.end {
            End::Head => "head",
            End::Tail => "tail",
        };
        format!(
            "superblock copy {} at the {end} (byte {})",
            self.index, self.byte
        )
    }
}

/// What step 1 found: the copy mount uses and every copy it read.
#[derive(Debug, Clone)]
pub struct SbRead {
    pub sb: Superblock,
    /// Head copies 0 and 1, then tail copies 0 and 1 when they were read: the
    /// volume names a tail area, or both head copies are unusable and the tail
    /// area was looked for at the end of the media.
    pub copies: Vec<SbCopy>,
    /// Both head copies are unusable: `sb` is a tail copy.
    pub from_tail: bool,
    /// `sb` may be older than the newest durable superblock (a head copy is
    /// unusable and its tail twin too, or `sb` is a tail copy): the
    /// "superblock fallback" rules apply.
    pub fallback: bool,
}

impl SbRead {
    /// Copies that should be there and are not usable.
    pub fn lost(&self) -> impl Iterator<Item = &SbCopy> {
        self.copies.iter().filter(|c| c.found.is_err())
    }
}

/// Where a volume whose head copies are lost keeps its tail area: the last
/// `TAIL_AREA_BYTES` of the media (rounded down to a block), as `create` places it.
pub fn tail_offset_for_len(len: u64) -> Option<u64> {
    let end = len / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
    end.checked_sub(TAIL_AREA_BYTES)
        .filter(|&t| t >= 2 * BLOCK_BYTES as u64)
}

/// Read and decode the two copies at `at`; a tail copy must name the tail area
/// it was read from (else it is a stray block) and carry `uuid` when known.
fn read_copies(media: &dyn Media, at: u64, end: End, uuid: Option<[u8; 16]>) -> Vec<SbCopy> {
    let mut buf = AlignedBuf::new(2 * BLOCK_BYTES);
    let read = media
        .read_at(&mut buf, at)
        .map_err(|e| format!("read failed: {e}"));
    (0..2u32)
        .map(|i| {
            let b = &buf[i as usize * BLOCK_BYTES..(i as usize + 1) * BLOCK_BYTES];
            let found = read.clone().and_then(|_| {
                if crate::format::is_filled_with(b, 0) {
                    return Err("zeroed".into());
                }
                let sb = Superblock::decode(b).map_err(|e| e.to_string())?;
                if end == End::Tail && sb.tail_offset != at {
                    return Err(format!(
                        "a superblock naming its tail area at byte {}, not here",
                        sb.tail_offset
                    ));
                }
                if uuid.is_some_and(|u| u != sb.uuid) {
                    return Err("a superblock of another volume (uuid differs)".into());
                }
                Ok(sb)
            });
            SbCopy {
                index: i,
                end,
                byte: at + (i as u64) * BLOCK_BYTES as u64,
                found,
            }
        })
        .collect()
}

/// Step 1. The newest valid head copy; when both head copies are unusable, the
/// newest valid tail copy (a fallback mount). The tail copies of a volume that
/// has them are read and reported either way.
pub fn read_superblocks(media: &dyn Media) -> Result<SbRead> {
    if media.len() < 2 * BLOCK_BYTES as u64 {
        return Err(Error::Corrupt(format!(
            "media of {} bytes is too small to hold a sluice volume",
            media.len()
        )));
    }
    let newest = |copies: &[SbCopy]| {
        copies
            .iter()
            .filter_map(|c| c.found.as_ref().ok())
            .max_by_key(|s| s.generation)
            .cloned()
    };
    let mut copies = read_copies(media, 0, End::Head, None);
    let head = newest(&copies);
    // A head copy names its tail area; with no head copy, look at the media's end.
    let tail_at = match &head {
        Some(h) => (h.tail_offset != 0).then_some(h.tail_offset),
        None => tail_offset_for_len(media.len()),
    };
    if let Some(t) = tail_at.filter(|t| t.saturating_add(2 * BLOCK_BYTES as u64) <= media.len()) {
        copies.extend(read_copies(
            media,
            t,
            End::Tail,
            head.as_ref().map(|h| h.uuid),
        ));
    } else if let Some(t) = tail_at {
        // named by a head copy but beyond the media (the media shrank)
        for i in 0..2u32 {
            copies.push(SbCopy {
                index: i,
                end: End::Tail,
                byte: t + (i as u64) * BLOCK_BYTES as u64,
                found: Err(format!(
                    "beyond the end of the media ({} bytes)",
                    media.len()
                )),
            });
        }
    }
    let from_tail = head.is_none();
    // The tail copy of index i is written and flushed before the head copy
    // of index i (`write_superblock`): the twin of an unusable head copy
    // tells an update torn in flight by a power cut (twin as new: it stands
    // in; twin older: a volume written before that order, whose head write
    // was torn, the kept head copy is exact) from damage to a durable copy
    // (twin as new: it stands in for the damaged copy). A power cut cannot
    // leave both unusable; only then can the kept copy be older than a
    // durable one (damage: the fallback rules apply).
    let twin = |i: u32| {
        copies[2..]
            .iter()
            .find(|c| c.index == i)
            .and_then(|c| c.found.as_ref().ok())
    };
    let mut best = head.or_else(|| newest(&copies[2..]));
    for c in copies[..2].iter().filter(|c| c.found.is_err()) {
        if let Some(t) = twin(c.index) {
            if best.as_ref().is_none_or(|b| t.generation > b.generation) {
                best = Some(t.clone());
            }
        }
    }
    match best {
        Some(sb) => {
            if media.len() < sb.media_bytes() {
                return Err(Error::Corrupt(format!(
                    "the volume needs {} bytes but the media holds only {}",
                    sb.media_bytes(),
                    media.len()
                )));
            }
            let fallback = from_tail
                || copies[..2]
                    .iter()
                    // MUTANT: damaged-head-never-falls-back s|c.found.is_err() && twin(c.index).is_none()|false|
                    .any(|c| c.found.is_err() && twin(c.index).is_none());
            Ok(SbRead {
                sb,
                copies,
                from_tail,
                fallback,
            })
        }
        None => {
            let each: Vec<String> = copies
                .iter()
                .map(|c| format!("{}: {}", c.name(), c.found.as_ref().err().unwrap()))
                .collect();
            Err(Error::Corrupt(format!(
                "no valid superblock ({}): not a sluice volume, or the superblock copies at {} are damaged",
                each.join("; "),
                if copies.len() > 2 { "both ends of the media" } else { "its head" }
            )))
        }
    }
}

/// A verified chunk found by a walk.
#[derive(Debug, Clone)]
pub struct Found {
    pub seq: u64,
    pub segment: u32,
    pub pos: u32,
    pub header: ChunkHeader,
    /// Its fragments (Packed entries, compressed volumes), placed by its
    /// packed tables; `phys` relative to the chunk's header block.
    pub fragments: Vec<codec::FragmentPlace>,
}

/// What a walk could not accept at some position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadKind {
    /// The header is valid (its seq is trusted) but the data fails its checksum, or
    /// the chunk runs past the end of the walked area.
    Data { seq: u64 },
    /// The block is not a valid header of this volume and segment although the walk
    /// expected one. `hint` is the raw seq field when magic, uuid and segment read
    /// right (a torn header, or damage elsewhere in it), else unknown.
    Header { hint: Option<u64> },
}

/// A damaged or unrecognised stretch of a segment, found by a walk.
#[derive(Debug, Clone)]
pub struct Bad {
    pub segment: u32,
    pub pos: u32,
    /// Blocks from `pos` to the next valid chunk (or to the end of the walked area).
    pub blocks: u32,
    pub kind: BadKind,
    /// Seq of the last trusted chunk before it in this walk (if any).
    pub after: Option<u64>,
    /// Seq of the next valid chunk after it (if the walk found one).
    pub before: Option<u64>,
    pub why: String,
    /// The logical ranges `(lba, count)` its entries name, when its header is
    /// valid (bad data); None when its header is unreadable (entries unknown).
    pub entries: Option<Vec<(u64, u64)>>,
}

impl Bad {
    /// Where it is, for messages: "segment S block P (seq N)".
    pub fn place(&self) -> String {
        let seq = match &self.kind {
            BadKind::Data { seq } => format!(", seq {seq}"),
            BadKind::Header { hint: Some(h) } => format!(", seq {h} if its seq field is intact"),
            BadKind::Header { hint: None } => match (self.after, self.before) {
                (Some(a), Some(b)) => format!(", between seq {a} and {b}"),
                (None, Some(b)) => format!(", before seq {b}"),
                (Some(a), None) => format!(", after seq {a}"),
                (None, None) => String::new(),
            },
        };
        format!("segment {} block {}{seq}", self.segment, self.pos)
    }
}

/// Why a walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It reached the end of the walked area.
    End,
    /// A valid header of this segment with an older seq: what follows is stale.
    Stale,
    /// A block whose first sector is zero: a tombstone, or never written.
    Zero,
    /// An unrecognised block with no valid chunk after it (a torn or damaged tail).
    Tail,
}

/// The result of walking the chunks of one segment image.
#[derive(Debug, Clone)]
pub struct Walk {
    pub chunks: Vec<Found>,
    pub bad: Vec<Bad>,
    /// Block after the verified prefix (the first bad position, else where it stopped).
    pub valid_end: u32,
    pub stop: Stop,
}

/// How a walk sees one block.
enum Class {
    Chunk(ChunkHeader),
    Stale,
    Zero,
    Unrecognised { hint: Option<u64>, why: String },
}

fn classify(b: &[u8], uuid: &[u8; 16], seg: u32, min_seq: u64, prev: Option<u64>) -> Class {
    match ChunkHeader::decode(b) {
        Ok(h) if &h.uuid == uuid && h.segment == seg => {
            if h.seq >= min_seq && prev.is_none_or(|p| h.seq > p) {
                Class::Chunk(h)
            } else {
                Class::Stale
            }
        }
        Ok(h) => Class::Unrecognised {
            hint: None,
            why: format!(
                "a valid chunk header of {} (segment {})",
                if &h.uuid == uuid {
                    "this volume"
                } else {
                    "another volume"
                },
                h.segment
            ),
        },
        Err(_) if b[..512].iter().all(|&x| x == 0) => Class::Zero,
        // a wipe, whole or torn at any subset of its sectors (`chunk::tombstone`)
        Err(_) if chunk::has_tombstone_sector(b, uuid, seg) => Class::Zero,
        Err(e) => Class::Unrecognised {
            hint: chunk::peek_seq(b, uuid, seg),
            why: format!("chunk header: {e}"),
        },
    }
}

/// The log's chunk walker (recovery, GC and check all use it). `img` holds blocks
/// `first..first + img.len() / 4096` of segment `seg`. Each block where a chunk
/// should start is either a verified chunk of this segment with seq >= `min_seq`
/// and above the previous one (accepted), a valid but older header or a zero first
/// sector (the walk ends: what follows is stale or never written), or anything else
/// (recorded as bad; the walk resyncs at the next block that is a valid header of
/// this segment with a newer seq, so damage cannot hide the chunks after it).
pub fn walk_image(
    img: &[u8],
    first: u32,
    uuid: &[u8; 16],
    seg: u32,
    min_seq: u64,
    rules: &mut RecoveryRules,
) -> Walk {
    let n = (img.len() / BLOCK_BYTES) as u32;
    let block = |i: u32| &img[i as usize * BLOCK_BYTES..(i as usize + 1) * BLOCK_BYTES];
    let mut w = Walk {
        chunks: Vec::new(),
        bad: Vec::new(),
        valid_end: first + n,
        stop: Stop::End,
    };
    let mut prev: Option<u64> = None;
    let mut i = 0u32;
    while i < n {
        let (hint, why) = match classify(block(i), uuid, seg, min_seq, prev) {
            Class::Chunk(h) => {
                let total = h.total_blocks();
                if i + total > n {
                    rules.chunk_past_segment_end += 1;
                    (
                        Some(h.seq),
                        "chunk runs past the end of its segment (or fill)".to_string(),
                    )
                } else {
                    let whole = &img[i as usize * BLOCK_BYTES..(i + total) as usize * BLOCK_BYTES];
                    prev = Some(h.seq);
                    // a chunk with Packed entries: its packed tables must chain
                    // and hold the fragments its entries name
                    // MUTANT: replay-skips-crc s|chunk::verify(whole, uuid)|ChunkHeader::decode(whole)|
                    let placed = chunk::verify(whole, uuid)
                        .and_then(|_| codec::fragments(&h, 0, &whole[BLOCK_BYTES..]));
                    match placed {
                        Ok(fragments) => w.chunks.push(Found {
                            seq: h.seq,
                            segment: seg,
                            pos: first + i,
                            header: h,
                            fragments,
                        }),
                        Err(e) => {
                            // Header trusted: step over it by its length; a later
                            // chunk may prove it was durable (damage, not a torn tail).
                            rules.chunk_data_invalid += 1;
                            w.valid_end = w.valid_end.min(first + i);
                            w.bad.push(Bad {
                                segment: seg,
                                pos: first + i,
                                blocks: total,
                                kind: BadKind::Data { seq: h.seq },
                                after: w.chunks.last().map(|c| c.seq),
                                before: None,
                                why: e.to_string(),
                                entries: Some(
                                    h.entries.iter().map(|e| (e.lba, e.count as u64)).collect(),
                                ),
                            });
                        }
                    }
                    i += total;
                    continue;
                }
            }
            Class::Stale => {
                rules.stale_header_ends_walk += 1;
                w.stop = Stop::Stale;
                break;
            }
            Class::Zero => {
                w.stop = Stop::Zero;
                break;
            }
            Class::Unrecognised { hint, why } => (hint, why),
        };
        // Resync: the next block that is a valid header of this segment, newer
        // than the last trusted chunk.
        let next = (i + 1..n).find_map(|j| match classify(block(j), uuid, seg, min_seq, prev) {
            Class::Chunk(h) => Some((j, h.seq)),
            _ => None,
        });
        if hint.is_some() {
            rules.damaged_header_recorded += 1;
        }
        w.valid_end = w.valid_end.min(first + i);
        w.bad.push(Bad {
            segment: seg,
            pos: first + i,
            blocks: next.map_or(n, |(j, _)| j) - i,
            kind: match hint {
                Some(s) if why.starts_with("chunk runs past") => BadKind::Data { seq: s },
                _ => BadKind::Header { hint },
            },
            after: prev,
            before: next.map(|(_, s)| s),
            why,
            entries: None,
        });
        match next {
            Some((j, _)) => {
                rules.resync_past_unrecognised += 1;
                i = j;
            }
            None => {
                w.stop = Stop::Tail;
                break;
            }
        }
    }
    w.valid_end = w.valid_end.min(first + i);
    w
}

/// Apply one chunk's entries to the map (replay). Relocations are applied like any
/// record: the engine sequences them before any user record that supersedes them.
pub fn apply(map: &mut Map, geo: &Geometry, f: &Found, rules: &mut RecoveryRules) -> Result<()> {
    let chunk_phys = f.segment as u64 * geo.segment_blocks as u64 + f.pos as u64;
    for placed in codec::entries(&f.header, chunk_phys) {
        let e = placed.entry;
        if e.lba + e.count as u64 > map.len() {
            return Err(Error::Corrupt(format!(
                "chunk seq {} (segment {} block {}) names blocks beyond the volume",
                f.seq, f.segment, f.pos
            )));
        }
        if e.is_relocation() {
            rules.relocation_replayed += 1;
        }
        for r in placed.records() {
            let loc = match r.place {
                Place::Block { phys, .. } => Loc::Data(phys as u32),
                Place::Virtual(k) => Loc::Virtual(virt_of(k).expect("virtual kind"), f.segment),
                // a Packed run points the map at its fragments (the walk
                // placed them through the chunk's packed tables)
                Place::Fragment { k } => {
                    let fp = f
                        .fragments
                        .get(k as usize)
                        .filter(|_| map.is_wide())
                        .ok_or_else(|| {
                            Error::Corrupt(format!(
                            "chunk seq {} (segment {} block {}) holds compressed (Packed) entries \
                             on a volume without compression",
                            f.seq, f.segment, f.pos
                        ))
                        })?;
                    Loc::Fragment {
                        phys: (chunk_phys + fp.phys) as u32,
                        slot: fp.slot,
                        spans: fp.spans,
                    }
                }
            };
            map.set(r.lba, loc);
        }
    }
    Ok(())
}

/// Threads that probe and walk segments at mount.
const SCAN_THREADS: u32 = 8;

/// What step 3 found in one segment.
pub struct SegScan {
    /// Block 0 holds a chunk header of this volume and segment (valid or not).
    pub ours: bool,
    /// The walk, if the segment was walked.
    pub walk: Option<Walk>,
    pub rules: RecoveryRules,
    /// Blocks that failed their check as read and were read right from the
    /// store's redundancy (`heal_damage`); the walk saw the right bytes.
    pub healed: Vec<Healed>,
}

/// A block recovery found failing its check and read right from the
/// store's redundancy (a stripe set's row, `SegmentStore::heal_read`). The
/// media still holds the wrong bytes: a mount that may write repairs it in
/// place (`SegmentStore::damaged` with `HealCheck::judge`) before anything
/// else is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healed {
    /// Physical block.
    pub phys: u64,
    pub segment: u32,
    pub check: HealCheck,
    /// What else recovery knew of the segment's blocks when it found them
    /// (the block's chunk: its header and data CRCs), by block of the
    /// segment: the repair judges the row's other blocks by the same.
    pub known: Vec<(u32, HealCheck)>,
}

impl Healed {
    /// Judge physical block `q` holding `b` as recovery did (None: unknown).
    pub fn judge(&self, q: u64, b: &[u8], uuid: &[u8; 16], segment_blocks: u32) -> Option<bool> {
        if q == self.phys {
            return Some(self.check.judge(b, uuid, self.segment));
        }
        let first = self.segment as u64 * segment_blocks as u64;
        let k = q.checked_sub(first).and_then(|k| u32::try_from(k).ok())?;
        self.known
            .iter()
            .find(|(p, _)| *p == k)
            .map(|(_, c)| c.judge(b, uuid, self.segment))
    }
}

/// What the right bytes of a healed block pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealCheck {
    /// A chunk header of this volume and segment (its own check).
    Header,
    /// A data block with this CRC (from its chunk's header).
    Crc(u32),
}

impl HealCheck {
    /// Do `b` pass this check (a header: of volume `uuid`, segment `seg`)?
    pub fn judge(&self, b: &[u8], uuid: &[u8; 16], seg: u32) -> bool {
        match self {
            HealCheck::Header => {
                ChunkHeader::decode(b).is_ok_and(|h| &h.uuid == uuid && h.segment == seg)
            }
            HealCheck::Crc(c) => chunk::block_crc(b) == *c,
        }
    }
}

/// Ask `store` for the right bytes of block `pos` of segment `seg` (held at
/// `img[at..]`), which must pass `ok`; the other blocks of its row count as
/// unknown, except those in `known` (block of the segment, its check). On
/// success `img` holds them and the block is recorded in `healed`. The
/// store rewrites nothing here (recovery performs no writes).
#[allow(clippy::too_many_arguments)]
fn heal_block(
    store: &dyn SegmentStore,
    seg: u32,
    pos: u32,
    img: &mut [u8],
    at: usize,
    check: HealCheck,
    ok: &dyn Fn(&[u8]) -> bool,
    known: &[(u32, HealCheck)],
    uuid: &[u8; 16],
    healed: &mut Vec<Healed>,
) -> bool {
    let phys = store.phys(seg, pos);
    let first = store.phys(seg, 0);
    let mut judge = |q: u64, b: &[u8]| -> Option<bool> {
        if q == phys {
            return Some(ok(b));
        }
        let k = q.checked_sub(first).and_then(|k| u32::try_from(k).ok())?;
        known
            .iter()
            .find(|(p, _)| *p == k)
            .map(|(_, c)| c.judge(b, uuid, seg))
    };
    // MUTANT: recovery-heal-skipped s|store.heal_read(phys, &mut judge)|None::<AlignedBuf>|
    let Some(right) = store.heal_read(phys, &mut judge) else {
        return false;
    };
    if !ok(&right) {
        return false;
    }
    img[at..at + BLOCK_BYTES].copy_from_slice(&right);
    healed.push(Healed {
        phys,
        segment: seg,
        check,
        known: known.to_vec(),
    });
    true
}

/// A store with redundancy (a stripe set): read right, from the rest of
/// their rows, the blocks for which the walk `w` of `img` (blocks `first..`
/// of `seg`) recorded damage: a chunk header that fails its check (the
/// right bytes must be a header the walk accepts there), or data blocks of
/// a chunk whose header verified that fail the CRCs it lists. Without it a
/// bit flipped on one member in a durable chunk header refused the mount
/// (damage below the watermark) or ended the log early, losing
/// acknowledged writes (docs/stripes.md §0 finding 4). True when a block
/// of `img` was replaced (walk again).
#[allow(clippy::too_many_arguments)]
fn heal_damage(
    store: &dyn SegmentStore,
    img: &mut [u8],
    first: u32,
    uuid: &[u8; 16],
    seg: u32,
    min_seq: u64,
    w: &Walk,
    healed: &mut Vec<Healed>,
) -> bool {
    let blocks = img.len() / BLOCK_BYTES;
    for bad in &w.bad {
        let at = (bad.pos - first) as usize * BLOCK_BYTES;
        match bad.kind {
            BadKind::Header { .. } => {
                let prev = bad.after;
                let ok =
                    |b: &[u8]| matches!(classify(b, uuid, seg, min_seq, prev), Class::Chunk(_));
                if heal_block(
                    store,
                    seg,
                    bad.pos,
                    img,
                    at,
                    HealCheck::Header,
                    &ok,
                    &[],
                    uuid,
                    healed,
                ) {
                    return true;
                }
            }
            BadKind::Data { .. } => {
                let Ok(h) = ChunkHeader::decode(&img[at..at + BLOCK_BYTES]) else {
                    continue;
                };
                if at / BLOCK_BYTES + 1 + h.block_crcs.len() > blocks {
                    continue;
                }
                let known: Vec<(u32, HealCheck)> = std::iter::once((bad.pos, HealCheck::Header))
                    .chain(
                        h.block_crcs
                            .iter()
                            .enumerate()
                            .map(|(i, &c)| (bad.pos + 1 + i as u32, HealCheck::Crc(c))),
                    )
                    .collect();
                let mut any = false;
                for (i, &crc) in h.block_crcs.iter().enumerate() {
                    let b_at = at + (i + 1) * BLOCK_BYTES;
                    if chunk::block_crc(&img[b_at..b_at + BLOCK_BYTES]) == crc {
                        continue;
                    }
                    let ok = |b: &[u8]| chunk::block_crc(b) == crc;
                    any |= heal_block(
                        store,
                        seg,
                        bad.pos + 1 + i as u32,
                        img,
                        b_at,
                        HealCheck::Crc(crc),
                        &ok,
                        &known,
                        uuid,
                        healed,
                    );
                }
                if any {
                    return true;
                }
            }
        }
    }
    false
}

/// Probe block 0 of `seg` and walk it if it may hold chunks newer than the
/// checkpoint: from 0 if block 0 is (or may be) such a chunk, or from the recorded
/// fill if the segment was open at the checkpoint.
pub fn scan_segment(
    store: &dyn SegmentStore,
    uuid: &[u8; 16],
    seg: u32,
    fill: u32,
    c_next: u64,
    head: &mut AlignedBuf,
) -> Result<SegScan> {
    let segment_blocks = store.segment_blocks();
    store.read_segment(seg, 0, head)?;
    let mut rules = RecoveryRules::default();
    let mut healed = Vec::new();
    let redundant = store.members() > 1;
    if redundant
        && matches!(
            classify(head, uuid, seg, 0, None),
            Class::Unrecognised { .. }
        )
    {
        // a damaged block 0 on one member: its right bytes, if its row
        // has them, decide how the segment is walked. Any chunk header of
        // the segment, older than the checkpoint too: a bit flipped in an
        // old header's seq field makes it claim a seq past the checkpoint,
        // and taken for damage there it refused the mount ("fails
        // verification although a flush had made it durable"; DST seed
        // 2^20+14, docs/stripes.md §0 finding 10); read right it is stale
        // and the segment is walked from its fill as without the flip
        // MUTANT: block-zero-heal-needs-new-seq s|classify(b, uuid, seg, 0, None)|classify(b, uuid, seg, c_next, None)|
        let ok = |b: &[u8]| matches!(classify(b, uuid, seg, 0, None), Class::Chunk(_));
        heal_block(
            store,
            seg,
            0,
            head,
            0,
            HealCheck::Header,
            &ok,
            &[],
            uuid,
            &mut healed,
        );
    }
    let ours = chunk::peek_seq(head, uuid, seg).is_some();
    let open_at_checkpoint = fill > 0 && fill < segment_blocks;
    let start = match classify(head, uuid, seg, c_next, None) {
        Class::Chunk(_) => Some(0),
        Class::Zero => {
            rules.tombstone_seen += 1;
            None
        }
        // a damaged block 0 that claims a new chunk, or is unrecognisable in a
        // segment that held nothing at the checkpoint: walk it (the walk records it)
        Class::Unrecognised { hint, .. } if hint.is_some_and(|h| h >= c_next) || fill == 0 => {
            Some(0)
        }
        _ if open_at_checkpoint => Some(fill),
        _ => None,
    };
    let walk = match start {
        Some(start) => {
            if start == 0 {
                rules.segment_walked_from_start += 1;
            } else {
                rules.segment_walked_from_fill += 1;
            }
            let mut img = AlignedBuf::new((segment_blocks - start) as usize * BLOCK_BYTES);
            store.read_segment(seg, start, &mut img)?;
            if start == 0 && !healed.is_empty() {
                img[..BLOCK_BYTES].copy_from_slice(head);
            }
            // each round heals at least one block: a walk again sees it
            let mut rounds = 0;
            loop {
                let mut r = RecoveryRules::default();
                let w = walk_image(&img, start, uuid, seg, c_next, &mut r);
                rounds += 1;
                if w.bad.is_empty()
                    || !redundant
                    || rounds > segment_blocks
                    || !heal_damage(store, &mut img, start, uuid, seg, c_next, &w, &mut healed)
                {
                    rules.add(&r);
                    break Some(w);
                }
            }
        }
        None => None,
    };
    Ok(SegScan {
        ours,
        walk,
        rules,
        healed,
    })
}

/// Step 2's result: where replay starts.
pub struct Base {
    pub map: Map,
    pub records: Vec<crate::format::checkpoint::SegmentRecord>,
    /// The checkpoint reflects exactly the chunks with seq < c_next.
    pub c_next: u64,
    /// Format v2: every user block record below this LSN is in the checkpoint.
    pub c_lsn: u64,
    pub clean: bool,
    pub lifetime: Option<crate::format::checkpoint::Lifetime>,
}

/// Step 2. Newest usable checkpoint slot, else the older one (if the superblock
/// allows it), else an empty map.
///
/// `sb_fallback`: one superblock copy was unusable, so `sb` may be the older
/// copy: the lost one may have named a newer checkpoint slot and cleared (or set)
/// the clean flag after it. Then the clean flag is not trusted (the log is
/// scanned) and the newest valid slot is used whatever `sb` names: a slot that
/// verifies was written in full after every chunk below its next_seq was flushed
/// (checkpoint::write), so it is a durable state of the volume either way.
pub fn load_checkpoint(
    media: &dyn Media,
    sb: &Superblock,
    sb_fallback: bool,
    report: &mut MountReport,
) -> Base {
    let geo = Geometry::from_superblock(sb);
    let mut loaded = None;
    if sb_fallback {
        let mut best: Option<(u32, checkpoint::Loaded)> = None;
        for slot in [0u32, 1] {
            match checkpoint::load(media, sb, slot) {
                Ok(l) => {
                    if best.as_ref().is_none_or(|(_, b)| l.next_seq > b.next_seq) {
                        best = Some((slot, l));
                    }
                }
                Err(e) => report
                    .notes
                    .push(format!("checkpoint slot {slot} is unusable: {e}")),
            }
        }
        if let Some((slot, _)) = &best {
            if *slot != sb.checkpoint_slot {
                report.rules.checkpoint_slot_fallback += 1;
                report.notes.push(format!(
                    "using checkpoint slot {slot}, the newest valid one (the usable superblock copy names {})",
                    if sb.checkpoint_slot == NO_CHECKPOINT { "none".to_string() } else { format!("slot {}", sb.checkpoint_slot) }
                ));
            }
        } else if sb.checkpoint_slot != NO_CHECKPOINT {
            report.rules.full_rebuild += 1;
            report
                .notes
                .push("no usable checkpoint: rebuilding the map from every segment".into());
        }
        loaded = best;
    } else if sb.checkpoint_slot != NO_CHECKPOINT {
        for slot in [sb.checkpoint_slot, 1 - sb.checkpoint_slot] {
            match checkpoint::load(media, sb, slot) {
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
    let clean = !sb_fallback && sb.is_clean() && (newest || sb.checkpoint_slot == NO_CHECKPOINT);
    report.clean = clean;
    if clean {
        report.rules.clean_mount += 1;
    }
    let (map, records, c_next, lifetime, c_lsn) = match loaded {
        Some((_, l)) => (l.map, l.segments, l.next_seq, l.lifetime, l.next_lsn),
        None => (
            Map::with_value_bytes(geo.logical_blocks, geo.map_value_bytes),
            checkpoint::empty_records(geo.segment_count),
            1,
            None,
            0,
        ),
    };
    Base {
        map,
        records,
        c_next,
        clean,
        lifetime,
        c_lsn,
    }
}

/// Step 3: probe every segment's first block and walk the ones that may hold new
/// chunks, in parallel (a device serves several whole-segment reads at once much
/// faster than one after another).
pub fn scan_segments(
    store: &dyn SegmentStore,
    uuid: &[u8; 16],
    base: &Base,
    report: &mut MountReport,
) -> Result<Vec<SegScan>> {
    let n = store.segment_count();
    let threads = SCAN_THREADS.min(n).max(1);
    let per = n.div_ceil(threads);
    let records = &base.records;
    let c_next = base.c_next;
    let parts: Vec<Result<Vec<SegScan>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut head = AlignedBuf::new(BLOCK_BYTES);
                    let mut v = Vec::new();
                    for seg in t * per..((t + 1) * per).min(n) {
                        let fill = records[seg as usize].fill;
                        v.push(scan_segment(store, uuid, seg, fill, c_next, &mut head)?);
                    }
                    Ok(v)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Corrupt("segment scan thread panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(n as usize);
    for part in parts {
        for sc in part? {
            report.rules.add(&sc.rules);
            out.push(sc);
        }
    }
    Ok(out)
}

/// Count of seqs in [lo, hi) present in the sorted `seqs`.
fn present(seqs: &[u64], lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        return 0;
    }
    (seqs.partition_point(|&s| s < hi) - seqs.partition_point(|&s| s < lo)) as u64
}

/// Step 4a: the durable watermark W (every chunk with seq < W was flushed), and
/// every bad stretch the walks found that lies below it (damage: refuse). A bad
/// stretch is below W when its seq is known and < W, or, with its seq unknown,
/// when every sequence number it could hold (missing ones between the trusted
/// chunks around it) is < W. Returns (W, damage, segments to ignore).
pub fn judge(
    scans: &[SegScan],
    c_next: u64,
    sb_durable: u64,
    rules: &mut RecoveryRules,
) -> (u64, Vec<String>, Vec<u32>) {
    let (w, damage, ignore, _) = judge_spans(scans, c_next, sb_durable, rules);
    (w, damage, ignore)
}

/// A durable damaged stretch, as salvage needs it: the highest seq it may hold
/// and the logical ranges its entries name (None: unknown, any block).
#[derive(Debug, Clone)]
pub struct Span {
    pub seq_hi: u64,
    pub entries: Option<Vec<(u64, u64)>>,
    pub segment: u32,
    pub place: String,
}

/// `judge`, also returning each damaged stretch as a `Span`.
pub fn judge_spans(
    scans: &[SegScan],
    c_next: u64,
    sb_durable: u64,
    rules: &mut RecoveryRules,
) -> (u64, Vec<String>, Vec<u32>, Vec<Span>) {
    let mut spans = Vec::new();
    let found = || {
        scans
            .iter()
            .filter_map(|s| s.walk.as_ref())
            .flat_map(|w| w.chunks.iter())
    };
    let w = found()
        .map(|f| f.header.durable_seq)
        .chain([sb_durable])
        .max()
        .unwrap_or(0);
    let mut seqs: Vec<u64> = found().map(|f| f.seq).collect();
    seqs.sort_unstable();
    let mut damage = Vec::new();
    let mut ignore = Vec::new();
    for walk in scans.iter().filter_map(|s| s.walk.as_ref()) {
        for b in &walk.bad {
            let durable = match (&b.kind, b.before) {
                (BadKind::Data { seq }, _) => (c_next..w).contains(seq),
                (BadKind::Header { hint }, Some(c)) => {
                    let lo = b.after.map_or(c_next, |a| a + 1);
                    let missing = (c - lo.min(c)) - present(&seqs, lo, c);
                    let hi_lo = lo.max(w);
                    let missing_above_w = c.saturating_sub(hi_lo) - present(&seqs, hi_lo, c);
                    let hint_says = hint.is_some_and(|h| (lo..c).contains(&h) && h < w);
                    if b.after.is_none()
                        && b.pos == 0
                        && c < sb_durable
                        && hint.is_some_and(|h| h >= c)
                    {
                        // Block 0 claims a seq above the chunk after it and that chunk
                        // predates the last barrier: a torn first chunk of a reused
                        // segment over the stale chunks of its previous life. Nothing
                        // in this segment is both current and durable.
                        ignore.push(b.segment);
                        false
                    } else {
                        missing == 0 || missing_above_w == 0 || hint_says
                    }
                }
                (BadKind::Header { hint }, None) => {
                    let lo = b.after.map_or(c_next, |a| a + 1);
                    hint.is_some_and(|h| h >= lo && (c_next..w).contains(&h))
                }
            };
            if durable {
                damage.push(format!("{}: {}", b.place(), b.why));
                // the highest seq the stretch may hold: its own (valid header),
                // else below the next trusted chunk, else below W
                let seq_hi = match (&b.kind, b.before) {
                    (BadKind::Data { seq }, _) => *seq,
                    (BadKind::Header { .. }, Some(c)) => c.saturating_sub(1),
                    (BadKind::Header { .. }, None) => w.saturating_sub(1),
                };
                spans.push(Span {
                    seq_hi,
                    entries: b.entries.clone(),
                    segment: b.segment,
                    place: b.place(),
                });
            } else {
                rules.invalid_tail_dropped += 1;
            }
        }
    }
    (w, damage, ignore, spans)
}

/// Step 4b: apply the found chunks in seq order from `c_next`. A missing seq below
/// W is a dead chunk whose segment was reused (skip it); the first missing seq at
/// or above W ends the log. Returns the seq after every chunk seen (the mount adds
/// `unseen_chunks_bound`).
#[allow(clippy::too_many_arguments)]
pub fn replay(
    map: &mut Map,
    geo: &Geometry,
    scans: &[SegScan],
    ignore: &[u32],
    c_next: u64,
    w: u64,
    last_seq: &mut [u64],
    salvage: Option<(&mut [u32], bool)>,
    main_lsn: &mut u64,
    report: &mut MountReport,
) -> Result<u64> {
    // salvage: (the record each block's mapping comes from, whether blocks that
    // chunks after the end of the log name become DISCARDED)
    let (mut last_write, mark_discarded) = match salvage {
        Some((lw, mark)) => (Some(lw), mark),
        None => (None, false),
    };
    // salvage: blocks a chunk after the end of the log names become unvouched
    // (DISCARDED) when that chunk may have been durable (a fallback mount)
    let discard = |f: &Found, lw: Option<&mut [u32]>| {
        if let (Some(lw), true) = (lw, mark_discarded) {
            for e in &f.header.entries {
                for x in e.lba..(e.lba + e.count as u64).min(lw.len() as u64) {
                    lw[x as usize] = DISCARDED;
                }
            }
        }
    };
    let mut found: Vec<&Found> = scans
        .iter()
        .filter_map(|s| s.walk.as_ref())
        .flat_map(|w| w.chunks.iter())
        .filter(|f| !ignore.contains(&f.segment))
        .collect();
    found.sort_by_key(|f| f.seq);
    let max_seen = scans
        .iter()
        .filter_map(|s| s.walk.as_ref())
        .flat_map(|w| {
            w.chunks
                .iter()
                .map(|f| f.seq)
                .chain(w.bad.iter().filter_map(|b| match b.kind {
                    BadKind::Data { seq } => Some(seq),
                    BadKind::Header { hint } => hint,
                }))
        })
        .filter(|&s| s < c_next + (1 << 32))
        .max();
    let mut expected = c_next;
    let mut stopped = false;
    for f in found {
        if stopped {
            report.rules.chunk_after_log_end_discarded += 1;
            report.chunks_discarded += 1;
            discard(f, last_write.as_deref_mut());
            continue;
        }
        if f.seq < expected {
            continue;
        }
        if f.seq > expected && f.seq > w {
            report.notes.push(format!(
                "log ends at seq {expected} (not found; the crash lost it); newer chunks discarded"
            ));
            stopped = true;
            report.rules.log_end_at_missing_seq += 1;
            report.rules.chunk_after_log_end_discarded += 1;
            report.chunks_discarded += 1;
            discard(f, last_write.as_deref_mut());
            continue;
        }
        if f.seq > expected {
            report.rules.gap_below_watermark_skipped += 1;
        }
        apply(map, geo, f, &mut report.rules)?;
        if let Some(l) = f.header.lsn {
            // a user chunk: its LSNs; a GC chunk (count 0): its first_lsn,
            // the user stream's sealed LSN end (every user record below it is
            // in a chunk below this one: replayed, or dead below W with its
            // blocks superseded or moved), 0 from builds before seed 72's fix
            // MUTANT: gc-lsn-ignored s|l.end()|if f.header.stream == chunk::Stream::User { l.end() } else { 0 }|
            *main_lsn = (*main_lsn).max(l.end());
        }
        if let Some(lw) = last_write.as_deref_mut() {
            // salvage: which record each block's mapping now comes from
            let rel = (f.seq - c_next + 1).min(DISCARDED as u64 - 1) as u32;
            for e in &f.header.entries {
                for x in e.lba..(e.lba + e.count as u64).min(lw.len() as u64) {
                    lw[x as usize] = rel;
                }
            }
        }
        report.rules.chunk_replayed += 1;
        last_seq[f.segment as usize] = last_seq[f.segment as usize].max(f.seq);
        report.chunks_replayed += 1;
        expected = f.seq + 1;
    }
    Ok(expected.max(max_seen.map_or(0, |s| s + 1)))
}

/// How far above every chunk it saw a recovering mount starts numbering. The
/// crash may have left chunks on the media that no walk reaches: a reused
/// segment's first chunk lost (its block 0 still the barrier's tombstone, so the
/// segment is not walked) with later chunks of it written. Each such chunk was
/// sealed after the last durable one (which the walk does see) and, not being
/// durable, still owned its own media blocks, so there are fewer of them than
/// media blocks. New chunks must be numbered above them: a chunk later written
/// at the same place with the same or a lower seq would let a second crash bring
/// one back as part of the log. Capped at 2^31 (8 TiB of 4 KiB blocks), which
/// keeps a jump far inside `replay`'s 2^32 plausibility window for seqs. The
/// mount raises every segment's `last_seq` by the same amount, so GC's age
/// (next seq minus last seq) is not distorted by the jump.
pub fn unseen_chunks_bound(geo: &Geometry) -> u64 {
    (geo.segment_count as u64 * geo.segment_blocks as u64).min(1 << 31)
}

/// Step 5: live counts from the map; segments with nothing live are free.
pub fn rebuild_segments(
    map: &Map,
    geo: &Geometry,
    fills: &[u32],
    last_seq: &[u64],
    clean_records: Option<&[crate::format::checkpoint::SegmentRecord]>,
) -> Result<SegmentTable> {
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
            if let Loc::Fragment { phys, spans, .. } = loc {
                info.frag_live += 1;
                if (phys + spans as u32) % geo.segment_blocks >= info.fill.max(1) {
                    return Err(Error::Corrupt(format!(
                        "map points at a fragment in block {} of segment {s}, past its fill {}",
                        phys % geo.segment_blocks,
                        info.fill
                    )));
                }
            }
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
    if let Some(records) = clean_records {
        for (i, r) in records.iter().enumerate() {
            if r.live != infos[i].live {
                return Err(Error::Corrupt(format!(
                    "checkpoint says segment {i} holds {} live entries but its map points {} there",
                    r.live, infos[i].live
                )));
            }
        }
    }
    Ok(SegmentTable::rebuild(infos, geo.segment_blocks))
}

/// Steps 1-4a: what mount would refuse for. `Ok(list)` is empty when the log
/// holds no damage below the durable watermark (`sluice check` lists each).
pub fn damage(media: &dyn Media) -> Result<Vec<String>> {
    let mut report = MountReport::default();
    let read = read_superblocks(media)?;
    let sb = read.sb;
    let geo = Geometry::from_superblock(&sb);
    let base = load_checkpoint(media, &sb, read.fallback, &mut report);
    if base.clean {
        return Ok(Vec::new());
    }
    let scans = scan_segments(&FlatStore::new(media, &geo), &sb.uuid, &base, &mut report)?;
    let (w, mut list, _) = judge(&scans, base.c_next, sb.durable_seq, &mut report.rules);
    let mut r = report.rules;
    chain::extend(
        &scans,
        geo.segment_blocks,
        w,
        base.c_next,
        &mut r,
        &mut list,
        &mut Vec::new(),
    );
    Ok(list)
}

/// Mount `media`: the named steps above, each timed in `report.steps`. Performs
/// no writes.
pub fn mount(media: &dyn Media) -> Result<Mounted> {
    mount_with(media, &mut MountReport::default())
}

/// `mount` with the report kept by the caller, so a mount that refuses still
/// tells which rules fired on the way (`damage_refused` among them). On success
/// the report moves into `Mounted::report`.
pub fn mount_with(media: &dyn Media, report: &mut MountReport) -> Result<Mounted> {
    mount_inner(media, &[], report, false, false)
}

/// `mount_with` (or, with `salvage`, `mount_salvage`) for a volume whose
/// intent log is on separate device(s): `logs` are the devices given, in any
/// order (each one's superblock says which mirror it is).
pub fn mount_logs(
    media: &dyn Media,
    logs: &[&dyn Media],
    report: &mut MountReport,
    salvage: bool,
) -> Result<Mounted> {
    mount_inner(media, logs, report, salvage, false)
}

/// `mount_logs` that, when no given log device is usable (none given, or
/// none that is this volume's and readable), mounts without the log instead
/// of refusing: what only the log held is lost, and `Mounted::log_lost_note`
/// says what the format can tell about it. A device of another volume is
/// still refused.
pub fn mount_logs_missing_ok(
    media: &dyn Media,
    logs: &[&dyn Media],
    report: &mut MountReport,
    salvage: bool,
) -> Result<Mounted> {
    mount_inner(media, logs, report, salvage, true)
}

/// A salvage mount (read-only use only): like `mount_with`, but damage below the
/// durable watermark does not refuse. The damaged stretches are skipped and
/// `Mounted::unvouched` lists the logical blocks whose content the mount cannot
/// vouch for (docs/salvage.md, "what salvage vouches for"):
/// - a damaged chunk whose header is valid (bad data): the blocks its entries
///   name, unless a later replayed record (seq above it) superseded them;
/// - a damaged stretch whose header is unreadable (entries unknown): every block
///   whose newest replayed record is not newer than the newest seq the stretch
///   may hold, including blocks mapped by the checkpoint or never written (the
///   lost chunk may have written any block).
pub fn mount_salvage(media: &dyn Media, report: &mut MountReport) -> Result<Mounted> {
    mount_inner(media, &[], report, true, false)
}

/// `last_write` value of a block named by a chunk after the end of the log that
/// a salvage mount cannot call a torn tail.
pub const DISCARDED: u32 = u32::MAX;

/// LBA ranges `[start, end)` the `spans` leave unvouched, given for every block
/// the replayed record its mapping comes from (`last_write`: seq - c_next + 1, 0
/// for older than every replayed chunk, `DISCARDED`: always unvouched).
pub fn unvouched_ranges(spans: &[Span], last_write: &[u32], c_next: u64) -> Vec<(u64, u64)> {
    // a block is vouched for against `seq` when its newest record is newer
    let newer = |x: usize, seq: u64| last_write[x] > 0 && c_next + last_write[x] as u64 - 1 > seq;
    let unknown = spans
        .iter()
        .filter(|s| s.entries.is_none())
        .map(|s| s.seq_hi)
        .max();
    let mut bad: Vec<bool> = last_write.iter().map(|&l| l == DISCARDED).collect();
    if let Some(h) = unknown {
        for (x, b) in bad.iter_mut().enumerate() {
            *b |= !newer(x, h);
        }
    }
    for s in spans {
        for &(lba, count) in s.entries.iter().flatten() {
            for x in lba..(lba + count).min(last_write.len() as u64) {
                let x = x as usize;
                bad[x] |= !newer(x, s.seq_hi);
            }
        }
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (x, &b) in bad.iter().enumerate() {
        if b {
            match out.last_mut() {
                Some((_, e)) if *e == x as u64 => *e += 1,
                _ => out.push((x as u64, x as u64 + 1)),
            }
        }
    }
    out
}

/// `mount_logs` (or, with `missing_ok`, `mount_logs_missing_ok`) reading
/// segment data through `store` when given (a volume whose segments live
/// elsewhere than the media's segment area: objseg), else the media's.
/// Mount `media` (`store`: its segments live elsewhere, an object store;
/// `scan`: its segment area as a store with redundancy, a stripe set's,
/// which the scan reads through so it can read damaged blocks right).
pub fn mount_store(
    media: &dyn Media,
    store: Option<&dyn SegmentStore>,
    scan: Option<&dyn SegmentStore>,
    logs: &[&dyn Media],
    report: &mut MountReport,
    salvage: bool,
    missing_ok: bool,
) -> Result<Mounted> {
    mount::run(media, store, scan, logs, report, salvage, missing_ok)
}

fn mount_inner(
    media: &dyn Media,
    logs: &[&dyn Media],
    report: &mut MountReport,
    salvage: bool,
    missing_ok: bool,
) -> Result<Mounted> {
    mount::run(media, None, None, logs, report, salvage, missing_ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::chunk::{Entry, LsnRange, Stream, NO_SRC};

    const UUID: [u8; 16] = [7; 16];

    /// A segment image of `blocks` blocks with one-data-block chunks of `seqs`
    /// from block 0 (each 2 blocks).
    fn image(blocks: usize, seqs: &[u64], seg: u32) -> Vec<u8> {
        let chunks: Vec<_> = seqs.iter().map(|&s| (s, Stream::User, None)).collect();
        image_of(blocks, &chunks, seg)
    }

    /// `image` with each chunk's stream and LSN range (None: a v1 header).
    fn image_of(blocks: usize, chunks: &[(u64, Stream, Option<LsnRange>)], seg: u32) -> Vec<u8> {
        let mut img = vec![0u8; blocks * BLOCK_BYTES];
        for (i, &(seq, stream, lsn)) in chunks.iter().enumerate() {
            let at = 2 * i * BLOCK_BYTES;
            img[at + BLOCK_BYTES..at + 2 * BLOCK_BYTES].fill(seq as u8);
            let h = ChunkHeader {
                uuid: UUID,
                seq,
                segment: seg,
                stream,
                timestamp_ns: 0,
                durable_seq: seq,
                data_blocks: 1,
                entries: vec![Entry {
                    lba: seq,
                    count: 1,
                    kind: Kind::Data,
                    src: NO_SRC,
                }],
                block_crcs: vec![chunk::block_crc(
                    &img[at + BLOCK_BYTES..at + 2 * BLOCK_BYTES],
                )],
                lsn,
                chain: None,
                mixed_check: false,
            };
            h.encode_into(&mut img[at..at + BLOCK_BYTES]);
            chunk::seal_crc(&mut img[at..at + 2 * BLOCK_BYTES]);
        }
        img
    }

    fn walk(img: &[u8], min_seq: u64) -> Walk {
        walk_image(img, 0, &UUID, 3, min_seq, &mut RecoveryRules::default())
    }

    #[test]
    fn walk_accepts_chunks_and_ends_at_a_zero_sector() {
        let w = walk(&image(16, &[5, 6, 7], 3), 1);
        assert_eq!(
            w.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [5, 6, 7]
        );
        assert!(w.bad.is_empty());
        assert_eq!((w.stop, w.valid_end), (Stop::Zero, 6));
    }

    #[test]
    fn walk_ends_at_an_older_header_and_ignores_chunks_below_min_seq() {
        let mut img = image(16, &[5, 6, 7], 3);
        let old = image(16, &[1, 2], 3);
        img[4 * BLOCK_BYTES..6 * BLOCK_BYTES].copy_from_slice(&old[..2 * BLOCK_BYTES]);
        let w = walk(&img, 1);
        assert_eq!(w.chunks.len(), 2);
        assert_eq!((w.stop, w.valid_end), (Stop::Stale, 4));
        assert_eq!(walk(&image(16, &[5, 6], 3), 6).stop, Stop::Stale);
    }

    #[test]
    fn walk_resyncs_past_a_damaged_header_and_records_it() {
        let mut img = image(16, &[5, 6, 7], 3);
        img[2 * BLOCK_BYTES + 33] ^= 0x10; // seq field of chunk 6
        let w = walk(&img, 1);
        assert_eq!(w.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [5, 7]);
        assert_eq!(w.bad.len(), 1);
        let b = &w.bad[0];
        assert_eq!(
            (b.pos, b.blocks, b.after, b.before),
            (2, 2, Some(5), Some(7))
        );
        assert_eq!(w.valid_end, 2);
        // in another segment nothing of this one is accepted
        assert!(
            walk_image(&img, 0, &UUID, 4, 1, &mut RecoveryRules::default())
                .chunks
                .is_empty()
        );
    }

    /// `chunk_past_segment_end`: a header with a valid checksum that claims
    /// more blocks than its segment (or the walked area) has left. No bit flip
    /// or torn write makes one (the checksum covers the length), so the DST
    /// cannot reach this rule; this test does.
    #[test]
    fn a_chunk_longer_than_what_is_left_is_bad_data_with_its_seq() {
        let img = image(16, &[5, 6, 7], 3);
        let mut rules = RecoveryRules::default();
        let w = walk_image(&img[..5 * BLOCK_BYTES], 0, &UUID, 3, 1, &mut rules);
        assert_eq!(rules.chunk_past_segment_end, 1);
        assert_eq!(w.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [5, 6]);
        assert_eq!(w.bad.len(), 1);
        assert_eq!(w.bad[0].kind, BadKind::Data { seq: 7 });
        assert_eq!((w.valid_end, w.stop), (4, Stop::Tail));
    }

    #[test]
    fn a_torn_tombstone_ends_the_walk_but_a_flipped_bit_is_damage() {
        // block 0 holds dead chunk 5; the barrier's tombstone reached the media
        // in only some of its 512-byte sectors (sector 0 still the old header)
        let mut tomb = vec![0u8; BLOCK_BYTES];
        chunk::tombstone(&mut tomb, &UUID, 3);
        for landed in [vec![3usize], vec![1, 7], vec![0], vec![2, 4, 6]] {
            let mut img = image(16, &[5, 6, 7], 3);
            for &s in &landed {
                img[s * 512..(s + 1) * 512].copy_from_slice(&tomb[s * 512..(s + 1) * 512]);
            }
            let w = walk(&img, 1);
            assert!(
                w.chunks.is_empty() && w.bad.is_empty(),
                "sectors {landed:?}"
            );
            assert_eq!((w.stop, w.valid_end), (Stop::Zero, 0), "sectors {landed:?}");
        }
        // a tombstone of another segment or volume is no wipe of this block
        let mut other = vec![0u8; BLOCK_BYTES];
        chunk::tombstone(&mut other, &UUID, 4);
        let mut img = image(16, &[5, 6, 7], 3);
        img[512..1024].copy_from_slice(&other[512..1024]);
        assert_eq!(walk(&img, 1).bad.len(), 1);
        // one flipped bit in the header is damage, not a wipe
        let mut img = image(16, &[5, 6, 7], 3);
        img[1000] ^= 4;
        assert_eq!(walk(&img, 1).bad.len(), 1);
    }

    #[test]
    fn walk_records_bad_data_with_its_trusted_seq() {
        let mut img = image(16, &[5, 6, 7], 3);
        img[3 * BLOCK_BYTES + 9] ^= 1; // data of chunk 6
        let w = walk(&img, 1);
        assert_eq!(w.chunks.len(), 2);
        assert_eq!(w.bad[0].kind, BadKind::Data { seq: 6 });
    }

    fn scan(walk: Walk) -> SegScan {
        SegScan {
            ours: true,
            walk: Some(walk),
            rules: RecoveryRules::default(),
            healed: Vec::new(),
        }
    }

    #[test]
    fn judge_refuses_damage_below_the_watermark_only() {
        let mut img = image(16, &[5, 6, 7], 3);
        img[2 * BLOCK_BYTES] ^= 1; // magic of chunk 6
                                   // chunk 7 says 6 was durable (durable_seq = 7 > 6): damage
        let (w, damage, _) = judge(&[scan(walk(&img, 1))], 5, 0, &mut RecoveryRules::default());
        assert_eq!(w, 7);
        assert_eq!(damage.len(), 1);
        assert!(damage[0].contains("segment 3 block 2"), "{damage:?}");
        // the same stretch as a torn tail (nothing after it): not durable
        let mut img = image(16, &[5, 6], 3);
        img[2 * BLOCK_BYTES] ^= 1;
        let (_, damage, _) = judge(&[scan(walk(&img, 1))], 5, 0, &mut RecoveryRules::default());
        assert!(damage.is_empty());
    }

    /// Seed 72: the main log's LSN after replay covers a dead user chunk
    /// (seq 5, skipped below W) through the GC chunk after it, whose
    /// `first_lsn` is the user stream's sealed LSN end; a user chunk's end
    /// raises it too; a GC chunk of an older build (first_lsn 0) does not
    /// lower it.
    #[test]
    fn replay_takes_the_main_log_lsn_from_gc_chunks_too() {
        let geo = Geometry::for_logical(64, 16, 0.1);
        let run = |chunks: &[(u64, Stream, Option<LsnRange>)]| {
            let img = image_of(16, chunks, 3);
            let mut map = Map::with_value_bytes(geo.logical_blocks, geo.map_value_bytes);
            let mut last_seq = vec![0u64; geo.segment_count as usize];
            let mut main_lsn = 10;
            let mut report = MountReport::default();
            let next = replay(
                &mut map,
                &geo,
                &[scan(walk(&img, 1))],
                &[],
                5,
                7,
                &mut last_seq,
                None,
                &mut main_lsn,
                &mut report,
            )
            .unwrap();
            assert_eq!(next, 8);
            assert_eq!(report.rules.gap_below_watermark_skipped, 1);
            main_lsn
        };
        let gc = |first| Some(LsnRange { first, count: 0 });
        let user = Some(LsnRange {
            first: 30,
            count: 1,
        });
        assert_eq!(run(&[(6, Stream::Gc, gc(20)), (7, Stream::Gc, gc(20))]), 20);
        assert_eq!(run(&[(6, Stream::Gc, gc(20)), (7, Stream::User, user)]), 31);
        assert_eq!(run(&[(6, Stream::Gc, gc(0)), (7, Stream::Gc, gc(0))]), 10);
    }

    #[test]
    fn present_counts_seqs_in_a_range() {
        let s = [2, 3, 5, 9];
        assert_eq!(present(&s, 0, 10), 4);
        assert_eq!(present(&s, 3, 9), 2);
        assert_eq!(present(&s, 9, 3), 0);
    }

    #[test]
    fn unvouched_ranges_follow_the_salvage_rule() {
        // c_next 10; blocks 0..8: last record seq 0 (checkpoint), 12, 15, 20, ...
        let c = 10u64;
        let rel = |seq: u64| (seq - c + 1) as u32;
        let lw = [0, rel(12), rel(15), rel(20), 0, rel(11), DISCARDED, rel(30)];
        let span = |seq_hi, entries| Span {
            seq_hi,
            entries,
            segment: 0,
            place: String::new(),
        };
        // known entries (blocks 1..3 at seq 15): block 1 (seq 12) and 2 (seq 15,
        // not newer) are unvouched, block 3 (seq 20) is; DISCARDED always is
        assert_eq!(
            unvouched_ranges(&[span(15, Some(vec![(1, 3)]))], &lw, c),
            vec![(1, 3), (6, 7)]
        );
        // unknown entries up to seq 14: every block not rewritten after 14,
        // checkpoint-mapped and never-written ones included
        assert_eq!(
            unvouched_ranges(&[span(14, None)], &lw, c),
            vec![(0, 2), (4, 7)]
        );
        assert_eq!(unvouched_ranges(&[], &[0, 0], c), vec![]);
    }
}
