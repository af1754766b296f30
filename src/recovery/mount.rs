//! Mount as a table of named steps (SPDK FTL's `ftl_mngt_recovery.c` shape).
//!
//! Owns the order of the mount and the state one step hands to the next:
//! `STEPS` is a static list of rows `{name, applies, run}` that `run` executes
//! in order over one `MountCtx`, timing each row that applies into
//! `MountReport::steps`. The rules themselves stay in the parent module's
//! functions each row calls (`read_superblocks`, `load_checkpoint`,
//! `scan_segments`, `judge_spans`, `replay`, `rebuild_segments`,
//! `replay_intent_log`, `replay_log_devices`), so a feature (log replay, stripe
//! assembly, object listing) adds a row instead of editing a long function.
//!
//! Invariant: a row reads only state that rows before it produced; the state a
//! later row needs is an `Option` filled by the row that makes it, and reading
//! it before then is a broken table, asserted (`MountCtx::sb` and friends),
//! never a default silently taken. A row that fails ends the mount with its
//! error and is not recorded in `steps`.

use super::{
    chain, judge_spans, load_checkpoint, read_superblocks, rebuild_segments, replay,
    replay_intent_log, replay_log_devices, scan_segments, unseen_chunks_bound, unvouched_ranges,
    Base, End, LogReplay, MountReport, Mounted, SbCopy, SegScan, Span,
};
use crate::error::{Error, Result};
use crate::format::superblock::Superblock;
use crate::geometry::Geometry;
use crate::media::Media;
use crate::segments::{SegState, SegmentTable};
use crate::store::{FlatStore, SegmentStore};

/// One row of the mount table.
pub struct Step {
    /// Its name in `MountReport::steps`.
    pub name: &'static str,
    /// Whether it runs for this mount (decided on what earlier rows found).
    pub applies: fn(&MountCtx) -> bool,
    pub run: fn(&mut MountCtx) -> Result<()>,
}

/// The mount, in order. `Volume::open` appends its own `finish` row after it
/// (checkpoint, tombstones, re-homing the log's blocks: it writes, these do not).
pub const STEPS: &[Step] = &[
    Step {
        name: "read_superblocks",
        applies: always,
        run: step_read_superblocks,
    },
    Step {
        name: "load_checkpoint",
        applies: always,
        run: step_load_checkpoint,
    },
    Step {
        name: "scan_segments",
        applies: not_clean,
        run: step_scan_segments,
    },
    Step {
        name: "judge",
        applies: not_clean,
        run: step_judge,
    },
    Step {
        name: "replay",
        applies: not_clean,
        run: step_replay,
    },
    Step {
        name: "rebuild_segments",
        applies: always,
        run: step_rebuild_segments,
    },
    Step {
        name: "replay_intent_log",
        applies: has_intent_log,
        run: step_replay_intent_log,
    },
];

fn always(_: &MountCtx) -> bool {
    true
}

fn not_clean(c: &MountCtx) -> bool {
    !c.base().clean
}

fn has_intent_log(c: &MountCtx) -> bool {
    c.sb().has_intent_log()
}

/// What `judge` found, for `replay`.
struct Judged {
    w: u64,
    ignore: Vec<u32>,
    spans: Vec<Span>,
}

/// Everything one mount carries from row to row: its inputs, then what each
/// row found.
pub struct MountCtx<'a, 'r> {
    media: &'a dyn Media,
    store: Option<&'a dyn SegmentStore>,
    /// The segment area of `media` as a store with redundancy (a stripe
    /// set's), which the scan reads through to heal damaged blocks; None:
    /// `store`, else the flat view of `media`.
    scan: Option<&'a dyn SegmentStore>,
    logs: &'a [&'a dyn Media],
    salvage: bool,
    missing_ok: bool,
    report: &'r mut MountReport,
    // read_superblocks
    sb: Option<Superblock>,
    geo: Option<Geometry>,
    copies: Vec<SbCopy>,
    sb_fallback: bool,
    superblock_repair: bool,
    log_ring: Option<(u64, u64)>,
    // load_checkpoint
    base: Option<Base>,
    fills: Vec<u32>,
    last_seq: Vec<u64>,
    next_seq: u64,
    /// Every user block record below it is in the main log (format v2).
    main_lsn: u64,
    // scan_segments, judge, replay
    scans: Vec<SegScan>,
    judged: Option<Judged>,
    wipe: Vec<u32>,
    unvouched: Vec<(u64, u64)>,
    // rebuild_segments
    segs: Option<SegmentTable>,
    // replay_intent_log
    log: Option<LogReplay>,
    log_devices: Vec<usize>,
    log_missing: Vec<String>,
    log_mirrors: Vec<u16>,
    log_absent: u32,
}

impl<'a, 'r> MountCtx<'a, 'r> {
    fn sb(&self) -> &Superblock {
        self.sb
            .as_ref()
            .expect("mount table: read_superblocks runs first")
    }
    fn geo(&self) -> Geometry {
        self.geo.expect("mount table: read_superblocks runs first")
    }
    fn base(&self) -> &Base {
        self.base
            .as_ref()
            .expect("mount table: load_checkpoint runs first")
    }
}

/// Run every row of `STEPS` that applies, in order, then hand over what they
/// found. Performs no writes.
pub fn run(
    media: &dyn Media,
    store: Option<&dyn SegmentStore>,
    scan: Option<&dyn SegmentStore>,
    logs: &[&dyn Media],
    report: &mut MountReport,
    salvage: bool,
    missing_ok: bool,
) -> Result<Mounted> {
    let mut c = MountCtx {
        media,
        store,
        scan,
        logs,
        salvage,
        missing_ok,
        report,
        sb: None,
        geo: None,
        copies: Vec::new(),
        sb_fallback: false,
        superblock_repair: false,
        log_ring: None,
        base: None,
        fills: Vec::new(),
        last_seq: Vec::new(),
        next_seq: 0,
        main_lsn: 0,
        scans: Vec::new(),
        judged: None,
        wipe: Vec::new(),
        unvouched: Vec::new(),
        segs: None,
        log: None,
        log_devices: Vec::new(),
        log_missing: Vec::new(),
        log_mirrors: Vec::new(),
        log_absent: 0,
    };
    for step in STEPS {
        if !(step.applies)(&c) {
            continue;
        }
        let t = std::time::Instant::now();
        (step.run)(&mut c)?;
        let us = t.elapsed().as_micros() as u64;
        c.report.steps.push((step.name, us));
    }
    c.finish()
}

impl MountCtx<'_, '_> {
    /// The mount's result, from the state the rows left.
    fn finish(self) -> Result<Mounted> {
        let base = self.base.expect("mount table: load_checkpoint ran");
        Ok(Mounted {
            sb: self.sb.expect("mount table: read_superblocks ran"),
            geo: self.geo.expect("mount table: read_superblocks ran"),
            map: base.map,
            segs: self.segs.expect("mount table: rebuild_segments ran"),
            next_seq: self.next_seq,
            lifetime: base.lifetime,
            needs_checkpoint: !base.clean,
            superblock_repair: self.superblock_repair,
            wipe: self.wipe,
            unvouched: self.unvouched,
            report: std::mem::take(self.report),
            log: self.log,
            // the engine numbers from the main log's end; re-homing the log's
            // blocks gives them their LSNs again
            next_lsn: self.main_lsn,
            log_ring: self.log_ring,
            log_devices: self.log_devices,
            log_missing: self.log_missing,
            log_mirrors: self.log_mirrors,
            log_absent: self.log_absent,
            healed: self.scans.iter().flat_map(|s| s.healed.clone()).collect(),
            replayed: self
                .scans
                .iter()
                .filter_map(|s| s.walk.as_ref())
                .flat_map(|w| w.chunks.iter())
                .filter(|f| f.seq >= base.c_next)
                .map(|f| {
                    let sb = self.geo.expect("read_superblocks ran").segment_blocks as u64;
                    (
                        f.segment as u64 * sb + f.pos as u64,
                        f.header.total_blocks(),
                    )
                })
                .collect(),
        })
    }
}

/// Newest valid head copy, else tail copy; notes and counts every copy lost.
fn step_read_superblocks(c: &mut MountCtx) -> Result<()> {
    let read = read_superblocks(c.media)?;
    let report = &mut *c.report;
    for cp in read.lost() {
        let e = cp.found.as_ref().err().cloned().unwrap_or_default();
        match (cp.end, read.from_tail) {
            (End::Head, false) => {
                report.notes.push(format!(
                    "{} is unusable ({e}); using the other copy",
                    cp.name()
                ));
                report.rules.superblock_copy_fallback += 1;
            }
            (End::Head, true) => report
                .notes
                .push(format!("{} is unusable ({e})", cp.name())),
            (End::Tail, _) => {
                report
                    .notes
                    .push(format!("{} is unusable ({e})", cp.name()));
            }
        }
    }
    if read.from_tail {
        report.rules.superblock_tail_fallback += 1;
        report.notes.push(format!(
            "both superblock copies at the head are unusable; mounted from the tail copy (generation {}) at byte {}",
            read.sb.generation,
            read.sb.tail_copy_offset(read.sb.generation % 2).unwrap_or(0)
        ));
    }
    c.superblock_repair = read.lost().next().is_some();
    c.sb_fallback = read.fallback;
    c.copies = read.copies;
    c.geo = Some(Geometry::from_superblock(&read.sb));
    c.log_ring = read.sb.log_ring();
    c.sb = Some(read.sb);
    Ok(())
}

/// The map at the newest usable checkpoint slot, and the per-segment state
/// replay continues from.
fn step_load_checkpoint(c: &mut MountCtx) -> Result<()> {
    let sb =
        c.sb.as_ref()
            .expect("mount table: read_superblocks runs first");
    let base = load_checkpoint(c.media, sb, c.sb_fallback, c.report);
    // The mount's own checkpoint goes to the slot not loaded, so it never
    // overwrites the only usable one when the slot the superblock names is lost.
    if let Some(s) = c.report.checkpoint_slot {
        c.sb.as_mut().expect("read_superblocks ran").checkpoint_slot = s;
    }
    c.fills = base.records.iter().map(|r| r.fill).collect();
    c.last_seq = base.records.iter().map(|r| r.last_seq).collect();
    c.next_seq = base.c_next;
    c.main_lsn = base.c_lsn;
    c.base = Some(base);
    Ok(())
}

/// Walk every segment that may hold chunks newer than the checkpoint.
fn step_scan_segments(c: &mut MountCtx) -> Result<()> {
    let geo = c.geo();
    let flat = FlatStore::new(c.media, &geo);
    let uuid = c.sb().uuid;
    let base = c.base.as_ref().expect("load_checkpoint ran");
    let via = c.store.or(c.scan).unwrap_or(&flat);
    c.scans = scan_segments(via, &uuid, base, c.report)?;
    for h in c.scans.iter().flat_map(|s| &s.healed) {
        c.report.notes.push(format!(
            "segment {} block {}: failed its check on the members and was read right from the rest of its row ({})",
            h.segment,
            h.phys - h.segment as u64 * geo.segment_blocks as u64,
            match h.check {
                crate::recovery::HealCheck::Header => "a chunk header",
                crate::recovery::HealCheck::Crc(_) => "a data block",
            }
        ));
    }
    Ok(())
}

/// The durable watermark W; damage below it refuses (a salvage mount notes it
/// and goes on).
fn step_judge(c: &mut MountCtx) -> Result<()> {
    let c_next = c.base().c_next;
    let durable = c.sb().durable_seq;
    let (w, mut damage, ignore, mut spans) =
        judge_spans(&c.scans, c_next, durable, &mut c.report.rules);
    let seg_blocks = c.geo().segment_blocks;
    chain::extend(
        &c.scans,
        seg_blocks,
        w,
        c_next,
        &mut c.report.rules,
        &mut damage,
        &mut spans,
    );
    if c.salvage && !damage.is_empty() {
        c.report.notes.push(format!(
            "salvage: {} damaged place(s) below the durable point skipped; blocks they may have written answer EIO",
            damage.len()
        ));
    } else if let Some(first) = damage.first() {
        c.report.rules.damage_refused += 1;
        return Err(Error::Corrupt(format!(
            "chunk at {first}: fails verification although a flush had made it durable{}; refusing to mount rather than return stale data (run `sluice check` for the full list)",
            if damage.len() > 1 { format!(" (and {} more damaged place(s))", damage.len() - 1) } else { String::new() }
        )));
    }
    c.judged = Some(Judged { w, ignore, spans });
    Ok(())
}

/// Apply the chunks in seq order; then where each segment's fill is, and which
/// segments may need wiping.
fn step_replay(c: &mut MountCtx) -> Result<()> {
    let geo = c.geo();
    let salvage = c.salvage;
    let sb_fallback = c.sb_fallback;
    let judged = c
        .judged
        .take()
        .expect("mount table: judge runs before replay");
    let base = c.base.as_mut().expect("load_checkpoint ran");
    let report = &mut *c.report;
    let mut last_write = salvage.then(|| vec![0u32; geo.logical_blocks as usize]);
    c.next_seq = replay(
        &mut base.map,
        &geo,
        &c.scans,
        &judged.ignore,
        base.c_next,
        judged.w,
        &mut c.last_seq,
        last_write.as_deref_mut().map(|lw| (lw, sb_fallback)),
        &mut c.main_lsn,
        report,
    )?;
    if let Some(lw) = &last_write {
        c.unvouched = unvouched_ranges(&judged.spans, lw, base.c_next);
        if sb_fallback && report.rules.log_end_at_missing_seq > 0 {
            report.notes.push(
                "salvage: the log ends at a gap on a fallback mount; blocks the chunks after it name answer EIO".into(),
            );
        }
    }
    let jump = unseen_chunks_bound(&geo);
    c.next_seq += jump;
    for s in c.last_seq.iter_mut().filter(|s| **s > 0) {
        *s += jump;
    }
    if sb_fallback && report.rules.log_end_at_missing_seq > 0 && !salvage {
        // The lost copy may have held a higher watermark (a reuse barrier
        // after the kept copy): the missing chunk may be a dead one whose
        // segment was wiped, and the discarded chunks after it flushed
        // writes. A power cut can leave the same picture (a lost tail), and
        // nothing on the media tells the two apart: refuse, never guess.
        report.rules.damage_refused += 1;
        let (bad, lost) = match c.copies.iter().find(|cp| cp.found.is_err()) {
            Some(cp) => (
                cp.name(),
                cp.found.as_ref().err().cloned().unwrap_or_default(),
            ),
            None => ("superblock copy".to_string(), String::new()),
        };
        let end = report
            .notes
            .iter()
            .rev()
            .find(|n| n.starts_with("log ends at seq"));
        return Err(Error::Corrupt(format!(
            "{bad} is unusable ({lost}) and the copy mounted may be older; the {}, {} newer chunk(s) after it. The lost copy may have recorded a watermark that makes that gap a dead chunk of a reused segment and the newer chunks flushed writes: refusing to mount rather than discard them",
            end.map_or("log has a gap", |n| n.split(" (").next().unwrap_or(n)),
            report.chunks_discarded
        )));
    }
    for (seg, sc) in c.scans.iter().enumerate() {
        if let Some(walk) = &sc.walk {
            if !walk.chunks.is_empty() && !judged.ignore.contains(&(seg as u32)) {
                c.fills[seg] = walk.valid_end;
                if salvage {
                    // chunks after a skipped damaged stretch are mapped too
                    let end = walk.chunks.iter().map(|f| f.pos + f.header.total_blocks());
                    c.fills[seg] = end.chain([walk.valid_end]).max().unwrap_or(0);
                }
            }
        }
        // Segments whose first block looks like a chunk but end up free get wiped.
        if sc.ours {
            c.wipe.push(seg as u32);
        }
    }
    Ok(())
}

/// Live counts from the map; segments holding nothing live are free (and
/// wiped by `finish` when their first block still looks like a chunk).
fn step_rebuild_segments(c: &mut MountCtx) -> Result<()> {
    let geo = c.geo();
    let base = c.base();
    let segs = rebuild_segments(
        &base.map,
        &geo,
        &c.fills,
        &c.last_seq,
        base.clean.then_some(&base.records[..]),
    )?;
    c.wipe
        .retain(|&s| segs.segs[s as usize].state == SegState::Free);
    c.report.rules.free_segment_wipe_scheduled += c.wipe.len() as u64;
    c.segs = Some(segs);
    Ok(())
}

/// Format v2 with an intent log: after the main log, the records above what it
/// holds (re-homed by `Volume::open`), from the in-volume ring or the log
/// device(s).
fn step_replay_intent_log(c: &mut MountCtx) -> Result<()> {
    let sb = c.sb.as_ref().expect("read_superblocks ran");
    let geo = c.geo();
    // version 3 records name places in the volume's own segments
    let places = c.store.is_none().then_some((c.media, &geo));
    let r = match c.log_ring {
        Some(ring) => replay_intent_log(
            c.media,
            ring,
            sb,
            c.main_lsn,
            c.salvage,
            places,
            &mut c.report.rules,
        )?,
        None => {
            let (r, ring, used, missing, absent) =
                replay_log_devices(c.logs, sb, c.main_lsn, c.salvage, c.missing_ok, c.report)?;
            c.log_ring = ring;
            c.log_devices = used.iter().map(|u| u.0).collect();
            c.log_mirrors = used.iter().map(|u| u.1).collect();
            c.log_missing = missing;
            c.log_absent = absent;
            r
        }
    };
    if !r.unvouched.is_empty() {
        c.unvouched.extend_from_slice(&r.unvouched);
        c.unvouched.sort_unstable();
        // merge overlapping ranges (readers search them sorted)
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in c.unvouched.drain(..) {
            match merged.last_mut() {
                Some(m) if s <= m.1 => m.1 = m.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        c.unvouched = merged;
    }
    // The places version 3 records named stay unwritten until the mount has
    // re-homed their blocks and moved the log start past them (`finish_log`
    // releases them): a chunk of this life written there, then a power cut
    // before the start moved, would leave records naming overwritten data.
    // A segment still holding live chunks is Closed (nothing appends to it)
    // and kept from GC (the mount may clean before it re-homes); one found
    // empty would be free: hold it.
    let segs = c.segs.as_mut().expect("rebuild_segments ran");
    for &(seg, _) in &r.placed {
        let state = segs.segs[seg as usize].state;
        // MUTANT: placed-segment-not-held s|== SegState::Free {|== SegState::Damaged {|
        if state == SegState::Free {
            segs.hold(seg);
            c.wipe.retain(|&w| w != seg);
            c.report.rules.log_placed_segment_held += 1;
        } else if state == SegState::Closed {
            segs.hold_live(seg);
        }
    }
    if r.records > 0 {
        c.report.notes.push(format!(
            "intent log: {} record(s) replayed, {} block record(s) to re-home",
            r.records,
            r.blocks.len()
        ));
    }
    c.log = Some(r);
    Ok(())
}
