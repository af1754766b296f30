//! Check: verify a volume without changing it: the superblock copies at the head
//! and at the tail, both
//! checkpoint slots, a read-only mount (which replays and verifies every chunk
//! newer than the checkpoint), then every chunk of every segment that holds live
//! data, and finally that each mapped data block is described by a verified chunk
//! entry for that logical block with a matching block CRC, and each mapped LZ4
//! fragment (compressed volumes) by a Packed entry for it whose packed
//! block(s) match their CRCs and which unpacks to its raw CRC (a bad one is
//! named by logical block).
//!
//! The report carries each finding twice: as fields a script can test
//! (`superblock_copies`, `checkpoint_slots`, `mount_result`, `found`) and as the
//! sentences `sluice check` prints for people. `check_with` reports progress.
//!
//! Invariant: a clean report means every readable block's content is what the
//! chunk that wrote it recorded; `found` and `damage` list the same problems.

use crate::checkpoint;
use crate::format::chunk;
use crate::format::codec::{self, Place};
use crate::format::superblock::NO_CHECKPOINT;
use crate::format::BLOCK_BYTES;
use crate::map::Loc;
use crate::media::{AlignedBuf, Media};
use crate::recovery;
use crate::segments::SegState;
use crate::store::{FlatStore, SegmentStore};
use serde::Serialize;

/// One superblock copy, as found.
#[derive(Debug, Clone, Serialize)]
pub struct CopyCheck {
    pub copy: u32,
    /// "head" (bytes 0 and 4096) or "tail" (the tail area).
    pub end: recovery::End,
    pub byte: u64,
    pub ok: bool,
    pub generation: Option<u64>,
    /// The decoder's reason when not ok.
    pub cause: Option<String>,
}

/// One checkpoint slot, as found.
#[derive(Debug, Clone, Serialize)]
pub struct SlotCheck {
    pub slot: u32,
    /// "ok", "damaged" (the current slot), "unusable" (the older one), "none"
    /// (never written).
    pub state: &'static str,
    pub current: bool,
    pub next_seq: Option<u64>,
    pub cause: Option<String>,
}

/// The read-only mount check runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MountCheck {
    pub ok: bool,
    /// Closed cleanly (no replay needed).
    pub clean: bool,
    pub chunks_replayed: u64,
    pub chunks_discarded: u64,
    /// Each recovery rule that fired, with its count.
    pub rules: std::collections::BTreeMap<&'static str, u64>,
    pub cause: Option<String>,
}

/// One problem, located: `kind` says what, the other fields where.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Found {
    /// "superblock", "superblock_head_lost", "superblock_tail_lost", "checkpoint",
    /// "mount", "log", "segment_read",
    /// "chunk_data", "chunk_header", "walk_end", "map_mismatch", "bad_blocks".
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<recovery::End>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub byte: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lba: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lbas: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phys: Option<u32>,
    /// Logical block ranges `[start, end)` (kind "salvage": what a salvage
    /// mount answers EIO for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<(u64, u64)>>,
    /// The decoder's or the media's reason, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct CheckReport {
    pub superblocks: Vec<String>,
    pub checkpoints: Vec<String>,
    pub mount: String,
    pub segments_checked: u32,
    pub chunks_verified: u64,
    pub data_blocks_verified: u64,
    /// Each problem found, with where it is.
    pub damage: Vec<String>,
    /// Things worth knowing that are not damage (e.g. a crash was recovered).
    pub notes: Vec<String>,
    pub superblock_copies: Vec<CopyCheck>,
    pub checkpoint_slots: Vec<SlotCheck>,
    pub mount_result: MountCheck,
    /// The problems of `damage`, as fields.
    pub found: Vec<Found>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
    /// A finding from outside the volume's media (e.g. an object store).
    pub fn add_finding(&mut self, kind: &'static str, text: String) {
        self.add(
            Found {
                kind,
                cause: Some(text.clone()),
                ..Found::default()
            },
            text,
        );
    }

    fn add(&mut self, f: Found, text: String) {
        self.found.push(f);
        self.damage.push(text);
    }
}

/// Where a check is: `step` ("superblocks", "checkpoints", "mount", "segments",
/// "map") and, for the long steps, `done` of `total` units.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub step: &'static str,
    pub done: u64,
    pub total: u64,
}

pub fn check(media: &dyn Media) -> CheckReport {
    check_with(media, &mut |_| {})
}

/// `check`, calling `progress` at each step and as segments and map entries are
/// verified.
pub fn check_with(media: &dyn Media, progress: &mut dyn FnMut(Progress)) -> CheckReport {
    check_logs(media, &[], progress)
}

/// `check_with` for a volume whose intent log is on separate device(s):
/// `logs` are the devices given (any order); the mount identifies each (one
/// of another volume is a finding) and replays the longest chain.
pub fn check_logs(
    media: &dyn Media,
    logs: &[&dyn Media],
    progress: &mut dyn FnMut(Progress),
) -> CheckReport {
    check_store(media, None, logs, progress)
}

/// `check_logs` reading segment data through `store` when given (a volume
/// whose segments live outside the media: objseg).
pub fn check_store(
    media: &dyn Media,
    store: Option<&dyn SegmentStore>,
    logs: &[&dyn Media],
    progress: &mut dyn FnMut(Progress),
) -> CheckReport {
    let mut r = CheckReport::default();
    let mut step = |step, done, total| progress(Progress { step, done, total });
    step("superblocks", 0, 2);
    let read = match recovery::read_superblocks(media) {
        Ok(x) => x,
        Err(e) => {
            r.mount_result.cause = Some(e.to_string());
            r.add(
                Found {
                    kind: "superblock",
                    cause: Some(e.to_string()),
                    ..Found::default()
                },
                e.to_string(),
            );
            return r;
        }
    };
    let sb = read.sb.clone();
    for c in &read.copies {
        let end = match c.end {
            recovery::End::Head => "",
            recovery::End::Tail => "tail ",
        };
        let i = c.index;
        match &c.found {
            Ok(s) => {
                r.superblocks
                    .push(format!("{end}copy {i}: ok (generation {})", s.generation));
                r.superblock_copies.push(CopyCheck {
                    copy: i,
                    end: c.end,
                    byte: c.byte,
                    ok: true,
                    generation: Some(s.generation),
                    cause: None,
                });
            }
            Err(e) => {
                r.superblocks.push(format!("{end}copy {i}: damaged ({e})"));
                r.superblock_copies.push(CopyCheck {
                    copy: i,
                    end: c.end,
                    byte: c.byte,
                    ok: false,
                    generation: None,
                    cause: Some(e.clone()),
                });
                r.add(
                    Found {
                        kind: "superblock",
                        copy: Some(i),
                        byte: Some(c.byte),
                        end: Some(c.end),
                        cause: Some(e.clone()),
                        ..Found::default()
                    },
                    format!("{}: {e}", c.name()),
                );
            }
        }
    }
    if read.from_tail {
        r.damage.push(format!(
            "superblock copies 0 and 1 at the head are unreadable ({}); mounted from the tail copy (generation {}). `sluice repair` rewrites them",
            read.copies[0].found.as_ref().err().cloned().unwrap_or_default(),
            sb.generation
        ));
        r.found.push(Found {
            kind: "superblock_head_lost",
            cause: Some("mounted from the tail copy".into()),
            ..Found::default()
        });
    } else if read.copies.len() > 2 && read.copies[2..].iter().all(|c| c.found.is_err()) {
        r.add(
            Found {
                kind: "superblock_tail_lost",
                byte: Some(sb.tail_offset),
                ..Found::default()
            },
            format!(
                "superblock copies 0 and 1 at the tail (byte {}) are unreadable ({}); the head copies are used. `sluice repair` rewrites them",
                sb.tail_offset,
                read.copies[2].found.as_ref().err().cloned().unwrap_or_default()
            ),
        );
    }
    if sb.tail_offset == 0 {
        r.notes.push(
            "this volume has no superblock copies at the tail of the media (created before they existed, or last written by such a build): a lost head cannot be recovered from the tail".into(),
        );
    }
    step("checkpoints", 0, 2);
    for slot in 0..2u32 {
        if sb.checkpoint_slot == NO_CHECKPOINT {
            r.checkpoints.push(format!("slot {slot}: none written yet"));
            r.checkpoint_slots.push(SlotCheck {
                slot,
                state: "none",
                current: false,
                next_seq: None,
                cause: None,
            });
            continue;
        }
        let current = slot == sb.checkpoint_slot;
        let mut sc = SlotCheck {
            slot,
            state: "ok",
            current,
            next_seq: None,
            cause: None,
        };
        match checkpoint::load(media, &sb, slot) {
            Ok(l) => {
                sc.next_seq = Some(l.next_seq);
                r.checkpoints.push(format!(
                    "slot {slot}: ok (next_seq {}){}",
                    l.next_seq,
                    if current { ", current" } else { "" }
                ));
            }
            Err(e) if current => {
                sc.state = "damaged";
                sc.cause = Some(e.clone());
                r.checkpoints
                    .push(format!("slot {slot}: damaged ({e}), current"));
                let byte = sb.checkpoint_offset[slot as usize];
                r.add(
                    Found {
                        kind: "checkpoint",
                        slot: Some(slot),
                        byte: Some(byte),
                        cause: Some(e.clone()),
                        ..Found::default()
                    },
                    format!("checkpoint slot {slot} (current) at byte {byte}: {e}"),
                );
            }
            Err(e) => {
                sc.state = "unusable";
                sc.cause = Some(e.clone());
                r.checkpoints
                    .push(format!("slot {slot}: not usable ({e}); older, not needed"));
            }
        }
        r.checkpoint_slots.push(sc);
    }
    step("mount", 0, 1);
    let m = match recovery::mount_store(
        media,
        store,
        None,
        logs,
        &mut recovery::MountReport::default(),
        false,
        false,
    ) {
        Ok(m) => m,
        Err(e) => {
            r.mount = format!("fails: {e}");
            r.mount_result.cause = Some(e.to_string());
            r.add(
                Found {
                    kind: "mount",
                    cause: Some(e.to_string()),
                    ..Found::default()
                },
                format!("mount: {e}"),
            );
            // every damaged place below the durable point, not just the first
            if let Ok(all) = recovery::damage(media) {
                for d in all {
                    r.add(
                        Found {
                            kind: "log",
                            cause: Some(d.clone()),
                            ..Found::default()
                        },
                        format!("log damage at {d}"),
                    );
                }
            }
            salvage_ranges(media, logs, &mut r);
            return r;
        }
    };
    r.mount_result = MountCheck {
        ok: true,
        clean: m.report.clean,
        chunks_replayed: m.report.chunks_replayed,
        chunks_discarded: m.report.chunks_discarded,
        rules: m
            .report
            .rules
            .named()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
        cause: None,
    };
    for &i in &m.log_devices {
        r.notes.push(format!(
            "log device {}: belongs to this volume, its records verified up to the end of the chain replay took",
            logs[i].describe()
        ));
    }
    for w in &m.log_missing {
        r.notes.push(format!(
            "intent log degraded: {w} (a mirrored record now has one copy)"
        ));
    }
    r.mount = format!(
        "ok ({} chunks replayed, {} discarded, {})",
        m.report.chunks_replayed,
        m.report.chunks_discarded,
        if m.report.clean {
            "clean"
        } else {
            // a crash, or a volume still in use (`check --force`)
            "not closed cleanly"
        }
    );
    r.notes.extend(m.report.notes.iter().cloned());
    let geo = m.geo;
    let flat = FlatStore::new(media, &geo);
    let store = store.unwrap_or(&flat);
    let sbk = geo.segment_blocks;
    // phys block -> (lba, crc ok) for every data block of every verified chunk.
    let mut described: std::collections::HashMap<u32, (u64, bool)> =
        std::collections::HashMap::new();
    // (packed block, slot) -> (lba, unpacks to its raw CRC) for every fragment
    let mut fragments: std::collections::HashMap<(u32, u8), (u64, bool)> =
        std::collections::HashMap::new();
    let mut raw = vec![0u8; BLOCK_BYTES];
    let nseg = geo.segment_count as u64;
    for seg in 0..geo.segment_count {
        step("segments", seg as u64, nseg);
        let info = m.segs.segs[seg as usize];
        if info.state != SegState::Closed || info.fill == 0 {
            continue;
        }
        r.segments_checked += 1;
        let mut img = AlignedBuf::new(info.fill as usize * BLOCK_BYTES);
        if let Err(e) = store.read_segment(seg, 0, &mut img) {
            r.add(
                Found {
                    kind: "segment_read",
                    segment: Some(seg),
                    cause: Some(e.to_string()),
                    ..Found::default()
                },
                format!("segment {seg}: read failed: {e}"),
            );
            continue;
        }
        // The log's chunk walker (recovery's), over the segment up to its fill.
        let mut rules = recovery::RecoveryRules::default();
        let walk = recovery::walk_image(&img, 0, &sb.uuid, seg, 0, &mut rules);
        for b in &walk.bad {
            let mut f = Found {
                kind: "chunk_data",
                segment: Some(seg),
                block: Some(b.pos),
                blocks: Some(b.blocks as u64),
                cause: Some(b.why.clone()),
                ..Found::default()
            };
            let text = match &b.kind {
                recovery::BadKind::Data { seq } => {
                    f.seq = Some(*seq);
                    format!(
                        "segment {seg} block {}: chunk seq {seq} fails its checksum ({})",
                        b.pos, b.why
                    )
                }
                recovery::BadKind::Header { hint } => {
                    f.kind = "chunk_header";
                    f.seq = *hint;
                    format!(
                        "{}: chunk header unreadable ({}); {} block(s) up to the next valid chunk are unverifiable",
                        b.place(),
                        b.why,
                        b.blocks
                    )
                }
            };
            r.add(f, text);
        }
        if walk.stop != recovery::Stop::End {
            r.add(
                Found {
                    kind: "walk_end",
                    segment: Some(seg),
                    block: Some(walk.valid_end),
                    blocks: Some(info.fill as u64),
                    ..Found::default()
                },
                format!(
                    "segment {seg}: the chunk walk ends at block {} before the segment's fill {}",
                    walk.valid_end, info.fill
                ),
            );
        }
        r.chunks_verified += walk.chunks.len() as u64;
        for f in &walk.chunks {
            let h = &f.header;
            let at = f.pos as usize * BLOCK_BYTES;
            let chunk_phys = seg as u64 * sbk as u64 + f.pos as u64;
            for r in codec::records(h, chunk_phys) {
                if let Place::Fragment { k } = r.place {
                    let Some(fp) = f.fragments.get(k as usize) else {
                        continue;
                    };
                    // (fp.phys is relative to the chunk's header block)
                    let ok = codec::fragment_verifies(h, 0, &img[at..], fp, &mut raw);
                    fragments.insert(((chunk_phys + fp.phys) as u32, fp.slot), (r.lba, ok));
                    continue;
                }
                let Place::Block { phys, data, crc } = r.place else {
                    continue;
                };
                let off = at + (1 + data as usize) * BLOCK_BYTES;
                let ok = chunk::block_crc(&img[off..off + BLOCK_BYTES]) == crc;
                described.insert(phys as u32, (r.lba, ok));
            }
        }
    }
    let mut bad_blocks = 0u64;
    let mut first_bad = Vec::new();
    let mut bad_fragments = Vec::new();
    step("segments", nseg, nseg);
    let nmap = m.map.len();
    for (lba, loc) in m.map.iter().enumerate() {
        if lba % (1 << 20) == 0 {
            step("map", lba as u64, nmap);
        }
        if let Loc::Fragment { phys, slot, .. } = loc {
            match fragments.get(&(phys, slot)) {
                Some(&(l, true)) if l == lba as u64 => r.data_blocks_verified += 1,
                Some(&(l, _)) if l != lba as u64 => r.add(
                    Found {
                        kind: "map_mismatch",
                        lba: Some(lba as u64),
                        phys: Some(phys),
                        seq: None,
                        cause: Some(format!("fragment recorded as logical block {l}")),
                        ..Found::default()
                    },
                    format!("logical block {lba} maps to the fragment in slot {slot} of packed block {phys}, which a chunk records as logical block {l}"),
                ),
                _ => bad_fragments.push((lba as u64, phys, slot)),
            }
        }
        if let Loc::Data(p) = loc {
            match described.get(&p) {
                Some(&(l, true)) if l == lba as u64 => r.data_blocks_verified += 1,
                Some(&(l, _)) if l != lba as u64 => r.add(
                    Found {
                        kind: "map_mismatch",
                        lba: Some(lba as u64),
                        phys: Some(p),
                        seq: None,
                        cause: Some(format!("recorded as logical block {l}")),
                        ..Found::default()
                    },
                    format!("logical block {lba} maps to physical block {p}, which a chunk records as logical block {l}"),
                ),
                _ => {
                    bad_blocks += 1;
                    if first_bad.len() < 8 {
                        first_bad.push(lba);
                    }
                }
            }
        }
    }
    step("map", nmap, nmap);
    for &(lba, phys, slot) in &bad_fragments {
        r.add(
            Found {
                kind: "bad_fragment",
                lba: Some(lba),
                phys: Some(phys),
                ..Found::default()
            },
            format!(
                "logical block {lba}: its LZ4 fragment (slot {slot} of packed block {phys}) fails its checksum or lies in an unverifiable chunk"
            ),
        );
    }
    if bad_blocks > 0 {
        let f = Found {
            kind: "bad_blocks",
            blocks: Some(bad_blocks),
            lbas: Some(first_bad.iter().map(|&l| l as u64).collect()),
            ..Found::default()
        };
        r.add(f, format!("{bad_blocks} live data block(s) fail their block checksum or lie in an unverifiable chunk (logical blocks {first_bad:?}{})", if bad_blocks > 8 { ", ..." } else { "" }));
    }
    r
}

/// After a refused mount: what a salvage mount (`serve --read-only --salvage`)
/// would serve, and the logical block ranges it answers EIO for.
fn salvage_ranges(media: &dyn Media, logs: &[&dyn Media], r: &mut CheckReport) {
    let Ok(m) = recovery::mount_logs(media, logs, &mut recovery::MountReport::default(), true)
    else {
        r.notes
            .push("a salvage mount is not possible either (the damage is not in the log)".into());
        return;
    };
    let n: u64 = m.unvouched.iter().map(|(s, e)| e - s).sum();
    let shown: Vec<String> = m
        .unvouched
        .iter()
        .take(32)
        .map(|&(s, e)| {
            if e == s + 1 {
                s.to_string()
            } else {
                format!("{s}-{}", e - 1)
            }
        })
        .collect();
    let more = m.unvouched.len().saturating_sub(32);
    r.add(
        Found {
            kind: "salvage",
            blocks: Some(n),
            ranges: Some(m.unvouched.clone()),
            ..Found::default()
        },
        format!(
            "salvage: `sluice serve --read-only --salvage` serves this volume and answers EIO for {n} of {} logical block(s) it cannot vouch for: {}{}",
            m.geo.logical_blocks,
            if shown.is_empty() { "none".to_string() } else { shown.join(", ") },
            if more > 0 { format!(" (and {more} more range(s); --json lists all)") } else { String::new() }
        ),
    );
}
