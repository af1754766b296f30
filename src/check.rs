//! Check: verify a volume without changing it: both superblock copies, both
//! checkpoint slots, a read-only mount (which replays and verifies every chunk
//! newer than the checkpoint), then every chunk of every segment that holds live
//! data, and finally that each mapped data block is described by a verified chunk
//! entry for that logical block with a matching block CRC.
//!
//! Invariant: a clean report means every readable block's content is what the
//! chunk that wrote it recorded.

use crate::checkpoint;
use crate::format::chunk::{self, Kind};
use crate::format::superblock::NO_CHECKPOINT;
use crate::format::BLOCK_BYTES;
use crate::map::Loc;
use crate::media::{AlignedBuf, Media};
use crate::recovery;
use crate::segments::SegState;
use serde::Serialize;

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
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

pub fn check(media: &dyn Media) -> CheckReport {
    let mut r = CheckReport::default();
    let (sb, copies) = match recovery::read_superblocks(media) {
        Ok(x) => x,
        Err(e) => {
            r.damage.push(e.to_string());
            return r;
        }
    };
    for (i, c) in copies.iter().enumerate() {
        match c {
            Ok(s) => r
                .superblocks
                .push(format!("copy {i}: ok (generation {})", s.generation)),
            Err(e) => {
                r.superblocks.push(format!("copy {i}: damaged ({e})"));
                r.damage.push(format!(
                    "superblock copy {i} at byte {}: {e}",
                    i * BLOCK_BYTES
                ));
            }
        }
    }
    for slot in 0..2u32 {
        if sb.checkpoint_slot == NO_CHECKPOINT {
            r.checkpoints.push(format!("slot {slot}: none written yet"));
            continue;
        }
        let current = slot == sb.checkpoint_slot;
        match checkpoint::load(media, &sb, slot) {
            Ok(l) => r.checkpoints.push(format!(
                "slot {slot}: ok (next_seq {}){}",
                l.next_seq,
                if current { ", current" } else { "" }
            )),
            Err(e) if current => {
                r.checkpoints
                    .push(format!("slot {slot}: damaged ({e}), current"));
                r.damage.push(format!(
                    "checkpoint slot {slot} (current) at byte {}: {e}",
                    sb.checkpoint_offset[slot as usize]
                ));
            }
            Err(e) => r
                .checkpoints
                .push(format!("slot {slot}: not usable ({e}); older, not needed")),
        }
    }
    let m = match recovery::mount(media) {
        Ok(m) => m,
        Err(e) => {
            r.mount = format!("fails: {e}");
            r.damage.push(format!("mount: {e}"));
            // every damaged place below the durable point, not just the first
            if let Ok(all) = recovery::damage(media) {
                r.damage
                    .extend(all.into_iter().map(|d| format!("log damage at {d}")));
            }
            return r;
        }
    };
    r.mount = format!(
        "ok ({} chunks replayed, {} discarded, {})",
        m.report.chunks_replayed,
        m.report.chunks_discarded,
        if m.report.clean {
            "clean"
        } else {
            "after a crash"
        }
    );
    r.notes.extend(m.report.notes.iter().cloned());
    let geo = m.geo;
    let sbk = geo.segment_blocks;
    // phys block -> (lba, crc ok) for every data block of every verified chunk.
    let mut described: std::collections::HashMap<u32, (u64, bool)> =
        std::collections::HashMap::new();
    for seg in 0..geo.segment_count {
        let info = m.segs.segs[seg as usize];
        if info.state != SegState::Closed || info.fill == 0 {
            continue;
        }
        r.segments_checked += 1;
        let mut img = AlignedBuf::new(info.fill as usize * BLOCK_BYTES);
        if let Err(e) = media.read_at(&mut img, geo.segment_offset(seg)) {
            r.damage.push(format!("segment {seg}: read failed: {e}"));
            continue;
        }
        // The one chunk walker, over the segment up to its fill.
        let mut rules = recovery::RecoveryRules::default();
        let walk = recovery::walk_image(&img, 0, &sb.uuid, seg, 0, &mut rules);
        for b in &walk.bad {
            r.damage.push(match &b.kind {
                recovery::BadKind::Data { seq } => format!(
                    "segment {seg} block {}: chunk seq {seq} fails its checksum ({})",
                    b.pos, b.why
                ),
                recovery::BadKind::Header { .. } => format!(
                    "{}: chunk header unreadable ({}); {} block(s) up to the next valid chunk are unverifiable",
                    b.place(),
                    b.why,
                    b.blocks
                ),
            });
        }
        if walk.stop != recovery::Stop::End {
            r.damage.push(format!(
                "segment {seg}: the chunk walk ends at block {} before the segment's fill {}",
                walk.valid_end, info.fill
            ));
        }
        r.chunks_verified += walk.chunks.len() as u64;
        for f in &walk.chunks {
            let h = &f.header;
            let at = f.pos as usize * BLOCK_BYTES;
            let mut di = 0usize;
            for e in &h.entries {
                if e.kind != Kind::Data {
                    continue;
                }
                for k in 0..e.count as u64 {
                    let off = at + (1 + di) * BLOCK_BYTES;
                    let ok = h
                        .block_crcs
                        .get(di)
                        .is_some_and(|&c| chunk::block_crc(&img[off..off + BLOCK_BYTES]) == c);
                    described.insert(seg * sbk + f.pos + 1 + di as u32, (e.lba + k, ok));
                    di += 1;
                }
            }
        }
    }
    let mut bad_blocks = 0u64;
    let mut first_bad = Vec::new();
    for (lba, loc) in m.map.iter().enumerate() {
        if let Loc::Data(p) = loc {
            match described.get(&p) {
                Some(&(l, true)) if l == lba as u64 => r.data_blocks_verified += 1,
                Some(&(l, _)) if l != lba as u64 => r.damage.push(format!("logical block {lba} maps to physical block {p}, which a chunk records as logical block {l}")),
                _ => {
                    bad_blocks += 1;
                    if first_bad.len() < 8 {
                        first_bad.push(lba);
                    }
                }
            }
        }
    }
    if bad_blocks > 0 {
        r.damage.push(format!("{bad_blocks} live data block(s) fail their block checksum or lie in an unverifiable chunk (logical blocks {first_bad:?}{})", if bad_blocks > 8 { ", ..." } else { "" }));
    }
    r
}
