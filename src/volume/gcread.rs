//! GC's read of one victim (issues 22 and 21): its chunk headers first, one
//! small read per chunk, then only the blocks the map still points at,
//! coalesced into runs, each block checked against its chunk's CRC.
//!
//! Owns: the plan of what to read from a victim (`Plan`), the read itself and
//! the verification of what was read (`VictimRead::verified`).
//!
//! Invariant: every block `Core::relocate` may move from a victim was read and
//! passed its CRC (`verified[block]`); relocate refuses a live block that was
//! not (the victim is then left alone, as a damaged one). A block left unread
//! was dead when the map was consulted (`live_blocks`, under the engine lock)
//! and stays dead: a Victim is never written, and only an append into an open
//! segment points the map anywhere new.
//!
//! The read falls back to the whole segment (as before) when the plan would
//! cost more than that: the per-read cost (`store::GC_GAP_BLOCKS`) was measured on the
//! shared machine's disk (docs/gc.md, "Reading a victim"); a store whose
//! ranged reads are dear (an object not cached locally) says so through
//! `SegmentStore::gc_read_cost_blocks`.

use crate::format::chunk::{self, ChunkHeader};
use crate::format::codec::{self, Place};
use crate::format::BLOCK_BYTES;
use crate::map::{Loc, Map};
use crate::store::SegmentStore;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Most round trips of header reads before a segment of small chunks (a
/// FLUSH-heavy workload seals many) is read whole instead: each round trip
/// is made in turn ...
const HEADER_READS_MAX: u32 = 8;
/// ... unless its chunks so far average at least this many blocks per trip.
const HEADER_MEAN_MIN: u32 = 64;
/// Most predicted header places read in one batch.
const PREDICT_MAX: usize = 64;
/// After this many victims in a row whose plan fell back to a whole read
/// (uniform random overwrites: dead blocks scattered one or two at a time),
/// the header walk is skipped and victims are read whole at once ...
const MISSES_SKIP: u32 = 4;
/// ... but every this many a plan is tried again (the workload may change).
const MISSES_RETRY: u32 = 8;

/// `SLUICE_GC_READ_WHOLE=1`: every victim is read whole, as before issue
/// 22's change (for A/B measurements in one build).
fn whole_forced() -> bool {
    static W: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *W.get_or_init(|| std::env::var("SLUICE_GC_READ_WHOLE").is_ok_and(|v| v == "1"))
}

/// `SLUICE_GC_READ_COST=N`: a separate read costs N blocks whatever the
/// store says (0: every victim read as its live blocks alone, which the
/// simulator runs to exercise this path on workloads whose plans would fall
/// back).
fn cost_override() -> Option<u32> {
    static C: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *C.get_or_init(|| {
        std::env::var("SLUICE_GC_READ_COST")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

/// A victim's chunks, as walked (`Ok`), or why the victim is damaged.
pub(super) type Chunks = std::result::Result<Vec<(usize, ChunkHeader)>, String>;

/// What GC read of a victim.
pub(super) struct VictimRead {
    pub chunks: Chunks,
    /// Per block of the victim below its fill: read and verified against its
    /// CRC (data blocks) or decoded (headers). Relocate moves only these.
    pub verified: Vec<bool>,
    /// Bytes read from the store for this victim (headers included).
    pub bytes_read: u64,
    /// Read as the walked headers and live runs (`false`: read whole, or
    /// the header walk found damage).
    pub runs: bool,
}

/// Walk the victim's chunk headers over `[0, fill)` into `img` at their
/// places. A header's length predicts where the next ones start (chunks of
/// one stream are mostly alike: full ones under random writes), so after
/// each header read by itself the predicted next ones are read in one batch;
/// a wrong guess costs a block read for nothing, and the walk reads the real
/// next header by itself. `Ok(None)`: the chunks are small (too many round
/// trips), read it whole.
fn read_headers(
    store: &dyn SegmentStore,
    victim: u32,
    fill: usize,
    uuid: &[u8; 16],
    img: &mut [u8],
    bytes: &mut u64,
) -> io::Result<Option<Chunks>> {
    let mut chunks = Vec::new();
    let mut pos = 0usize;
    let mut prev: Option<u64> = None;
    let mut have = vec![false; fill];
    let mut trips = 0u32;
    while pos < fill {
        if !have[pos] {
            if trips >= HEADER_READS_MAX && (pos as u32) < trips * HEADER_MEAN_MIN {
                return Ok(None);
            }
            store.read_segment(
                victim,
                pos as u32,
                &mut img[pos * BLOCK_BYTES..(pos + 1) * BLOCK_BYTES],
            )?;
            *bytes += BLOCK_BYTES as u64;
            have[pos] = true;
            trips += 1;
        }
        // the walker's rules (recovery::classify): a header of this volume
        // and segment, newer than the previous chunk
        let h = match ChunkHeader::decode(&img[pos * BLOCK_BYTES..(pos + 1) * BLOCK_BYTES]) {
            Ok(h) if &h.uuid == uuid && h.segment == victim && prev.is_none_or(|p| h.seq > p) => h,
            Ok(h) => {
                return Ok(Some(Err(format!(
                    "chunk at segment {victim} block {pos}: a header of segment {} seq {} \
                     where chunk after seq {prev:?} should start",
                    h.segment, h.seq
                ))))
            }
            Err(e) => {
                return Ok(Some(Err(format!(
                    "chunk at segment {victim} block {pos}: chunk header: {e}"
                ))))
            }
        };
        let total = h.total_blocks() as usize;
        if pos + total > fill {
            return Ok(Some(Err(format!(
                "chunk at segment {victim} block {pos}: runs past the segment's fill {fill}"
            ))));
        }
        prev = Some(h.seq);
        chunks.push((pos, h));
        pos += total;
        if pos < fill && !have[pos] {
            // the next headers where this one's length says, in one batch
            let guesses: Vec<usize> = (pos..fill)
                .step_by(total)
                .filter(|&g| !have[g])
                .take(PREDICT_MAX)
                .collect();
            let mut reads: Vec<(&mut [u8], u64)> = Vec::with_capacity(guesses.len());
            let mut rest: &mut [u8] = img;
            let mut at = 0usize;
            for &g in &guesses {
                let (_, tail) = rest.split_at_mut((g - at) * BLOCK_BYTES);
                let (b, tail) = tail.split_at_mut(BLOCK_BYTES);
                reads.push((b, store.phys(victim, g as u32)));
                rest = tail;
                at = g + 1;
            }
            store.read_batch(&mut reads)?;
            *bytes += (guesses.len() * BLOCK_BYTES) as u64;
            for g in guesses {
                have[g] = true;
            }
            trips += 1;
        }
    }
    Ok(Some(Ok(chunks)))
}

/// The victim's blocks the map still points at (memory only: call under the
/// engine lock). A chunk with a live fragment needs all its packed blocks
/// (the packed tables place the fragments).
pub(super) fn live_blocks(
    map: &Map,
    base: u64,
    chunks: &[(usize, ChunkHeader)],
    fill: usize,
) -> Vec<bool> {
    let mut need = vec![false; fill];
    for (pos, h) in chunks {
        let chunk_phys = base + *pos as u64;
        let packed = chunk_phys + 1 + h.raw_blocks() as u64..chunk_phys + 1 + h.data_blocks as u64;
        let mut frag_live = false;
        for placed in codec::entries(h, chunk_phys) {
            for r in placed.records() {
                if r.lba >= map.len() {
                    continue; // relocate refuses the chunk by name
                }
                match r.place {
                    Place::Block { phys, data, .. } => {
                        // MUTANT: gc-read-misses-live s|if map.get(r.lba) == Loc::Data(phys as u32) {|if map.get(r.lba) == Loc::Data(phys as u32) && data % 8 != 5 {|
                        if map.get(r.lba) == Loc::Data(phys as u32) {
                            need[pos + 1 + data as usize] = true;
                        }
                    }
                    Place::Fragment { .. } => {
                        if let Loc::Fragment { phys, .. } = map.get(r.lba) {
                            frag_live |= packed.contains(&(phys as u64));
                        }
                    }
                    Place::Virtual(_) => {}
                }
            }
        }
        if frag_live {
            for b in &mut need[(packed.start - base) as usize..(packed.end - base) as usize] {
                *b = true;
            }
        }
    }
    need
}

/// Runs `[start, end)` covering every needed block, gaps of at most `gap`
/// dead blocks read through.
pub(super) fn runs(need: &[bool], gap: u32) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, _) in need.iter().enumerate().filter(|(_, &n)| n) {
        match out.last_mut() {
            Some(r) if i - r.1 <= gap as usize => r.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Check every block `need` names against its chunk's CRC (packed areas'
/// tables are checked where relocate places their fragments).
fn verify(
    chunks: &[(usize, ChunkHeader)],
    img: &[u8],
    need: &[bool],
    victim: u32,
) -> std::result::Result<(), String> {
    for (pos, h) in chunks {
        for (i, &crc) in h.block_crcs.iter().enumerate() {
            let b = pos + 1 + i;
            // MUTANT: gc-read-skips-crc s|if need[b] && chunk::block_crc|if false && chunk::block_crc|
            if need[b] && chunk::block_crc(&img[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES]) != crc {
                return Err(format!(
                    "chunk at segment {victim} block {pos}, seq {}: data block {i} fails its checksum",
                    h.seq
                ));
            }
        }
    }
    Ok(())
}

/// Read what GC needs of `victim` (`fill` blocks written) into `img`:
/// headers, then the live runs, or the whole segment when that is cheaper.
/// `live` computes the needed blocks from the walked chunks (under the
/// engine lock). Io errors are the store's; damage is in `chunks`.
pub(super) fn read_victim(
    store: &dyn SegmentStore,
    victim: u32,
    fill: usize,
    uuid: &[u8; 16],
    img: &mut [u8],
    misses: &AtomicU32,
    live: impl FnOnce(&[(usize, ChunkHeader)]) -> Vec<bool>,
) -> io::Result<VictimRead> {
    let img = &mut img[..fill * BLOCK_BYTES];
    let cost = if whole_forced() {
        fill as u32
    } else {
        cost_override().unwrap_or_else(|| store.gc_read_cost_blocks(victim))
    };
    let mut bytes = 0u64;
    let m = misses.load(Ordering::Relaxed);
    let walked = if cost as usize >= fill {
        None
    } else if m >= MISSES_SKIP && !m.is_multiple_of(MISSES_RETRY) {
        misses.fetch_add(1, Ordering::Relaxed);
        None
    } else {
        let w = read_headers(store, victim, fill, uuid, img, &mut bytes)?;
        if w.is_none() {
            misses.fetch_add(1, Ordering::Relaxed);
        }
        w
    };
    let plan = match walked {
        None => None,
        Some(Err(why)) => {
            return Ok(VictimRead {
                chunks: Err(why),
                verified: vec![false; fill],
                bytes_read: bytes,
                runs: false,
            })
        }
        Some(Ok(chunks)) => {
            let need = live(&chunks);
            let runs = runs(&need, cost);
            let blocks: usize = runs.iter().map(|r| r.1 - r.0).sum();
            // one read of the whole costs `fill` blocks and one read
            let pays = blocks + runs.len() * cost as usize <= fill + cost as usize;
            if pays {
                misses.store(0, Ordering::Relaxed);
            } else {
                misses.fetch_add(1, Ordering::Relaxed);
            }
            pays.then_some((chunks, need, runs))
        }
    };
    let Some((chunks, mut need, runs)) = plan else {
        store.read_segment(victim, 0, img)?;
        bytes += img.len() as u64;
        let chunks = super::parse_victim(img, uuid, victim);
        let ok = chunks.is_ok();
        return Ok(VictimRead {
            chunks,
            verified: vec![ok; fill],
            bytes_read: bytes,
            runs: false,
        });
    };
    // the runs, in one batch (a store that can overlaps them)
    let mut reads: Vec<(&mut [u8], u64)> = Vec::with_capacity(runs.len());
    let mut rest: &mut [u8] = img;
    let mut at = 0usize;
    for &(s, e) in &runs {
        let (_, tail) = rest.split_at_mut((s - at) * BLOCK_BYTES);
        let (run, tail) = tail.split_at_mut((e - s) * BLOCK_BYTES);
        bytes += run.len() as u64;
        reads.push((run, store.phys(victim, s as u32)));
        rest = tail;
        at = e;
    }
    store.read_batch(&mut reads)?;
    drop(reads);
    let img = &*img;
    if let Err(why) = verify(&chunks, img, &need, victim) {
        return Ok(VictimRead {
            chunks: Err(why),
            verified: vec![false; fill],
            bytes_read: bytes,
            runs: true,
        });
    }
    for (pos, _) in &chunks {
        need[*pos] = true; // decoded
    }
    Ok(VictimRead {
        chunks: Ok(chunks),
        verified: need,
        bytes_read: bytes,
        runs: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::{Media, MemMedia};
    use crate::segments::SegState;
    use crate::volume::{CreateOptions, OpenOptions, Volume};
    use std::sync::Arc;

    const BS: u64 = BLOCK_BYTES as u64;
    const SEG: u32 = 64;

    #[test]
    fn runs_read_through_short_gaps_only() {
        let mut need = vec![false; 40];
        for i in [1, 2, 5, 20, 21, 39] {
            need[i] = true;
        }
        assert_eq!(runs(&need, 3), vec![(1, 6), (20, 22), (39, 40)]);
        assert_eq!(runs(&need, 0), vec![(1, 3), (5, 6), (20, 22), (39, 40)]);
        assert_eq!(runs(&need, 20), vec![(1, 40)]);
        assert!(runs(&[false; 8], 4).is_empty());
    }

    fn block(lba: u64, gen: u8) -> Vec<u8> {
        let mut b = vec![gen; BLOCK_BYTES];
        b[..8].copy_from_slice(&lba.to_le_bytes());
        b
    }

    /// A volume whose segment `victim` holds one chunk of lbas 0..63 with
    /// lbas 10..40 overwritten since: live runs at its blocks 1..11 and
    /// 41..64, a dead gap of 30 blocks between (more than `GC_GAP_BLOCKS`).
    fn gapped() -> (Volume, Arc<MemMedia>, u32) {
        let blocks = 512u64;
        let create = CreateOptions {
            logical_bytes: Some(blocks * BS),
            overprovision: 0.25,
            segment_bytes: SEG as u64 * BS,
            ..Default::default()
        };
        let open = OpenOptions {
            background: false,
            ..Default::default()
        };
        let geo = crate::geometry::Geometry::for_logical_with(blocks, SEG, 0.25, 0, 5);
        let media = Arc::new(MemMedia::new(geo.media_bytes()));
        let vol = Volume::create(media.clone(), &create, &open).unwrap();
        let data: Vec<u8> = (0..63).flat_map(|l| block(l, 1)).collect();
        vol.write(0, &data, false).unwrap();
        vol.flush().unwrap();
        let data: Vec<u8> = (10..40).flat_map(|l| block(l, 2)).collect();
        vol.write(10 * BS, &data, false).unwrap();
        let data: Vec<u8> = (100..300).flat_map(|l| block(l, 3)).collect();
        vol.write(100 * BS, &data, false).unwrap();
        vol.flush().unwrap();
        let victim = {
            let c = vol.sh.core.lock();
            let Loc::Data(p) = c.map.get(0) else {
                panic!("lba 0 is not a data block")
            };
            assert_eq!(p % SEG, 1, "lba 0 opens its segment's first chunk");
            let v = p / SEG;
            assert_eq!(c.segs.segs[v as usize].state, SegState::Closed);
            assert_eq!(c.segs.segs[v as usize].live, 33);
            v
        };
        (vol, media, victim)
    }

    fn want(lba: u64) -> Vec<u8> {
        match lba {
            10..40 => block(lba, 2),
            0..63 => block(lba, 1),
            100..300 => block(lba, 3),
            _ => vec![0; BLOCK_BYTES],
        }
    }

    fn reads_back(vol: &Volume) {
        let mut b = vec![0u8; BLOCK_BYTES];
        for lba in (0..64).chain(100..300) {
            vol.read(lba * BS, &mut b).unwrap();
            assert!(b == want(lba), "lba {lba} reads wrong after GC");
        }
    }

    fn flip(vol: &Volume, media: &MemMedia, victim: u32, blk: u32) {
        let off = vol
            .sh
            .geo
            .phys_offset(victim as u64 * SEG as u64 + blk as u64)
            + 100;
        let mut b = [0u8; 1];
        media.read_at(&mut b, off).unwrap();
        b[0] ^= 0x10;
        media.write_at(&b, off).unwrap();
    }

    /// GC reads the header and the two live runs, not the dead gap, moves
    /// every live block (none skipped: the victim empties) and reads back
    /// right; a flipped byte in the dead gap is never read (the victim is
    /// cleaned), one in a live block leaves the victim alone with nothing
    /// moved (mutations `gc-read-misses-live`, `gc-read-skips-crc`).
    #[test]
    fn gc_reads_only_live_runs_and_verifies_every_block_it_moves() {
        let (vol, media, victim) = gapped();
        // damage in the dead gap: never read
        flip(&vol, &media, victim, 25);
        let before = vol
            .sh
            .counters
            .gc_bytes_read
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(vol.sh.gc_one(1).unwrap());
        let read = vol
            .sh
            .counters
            .gc_bytes_read
            .load(std::sync::atomic::Ordering::Relaxed)
            - before;
        {
            let c = vol.sh.core.lock();
            let s = &c.segs.segs[victim as usize];
            assert_eq!(s.live, 0, "GC skipped a live block of the victim");
            assert_ne!(s.state, SegState::Damaged, "the victim was refused");
        }
        // header + blocks 1..11 + 41..64
        assert_eq!(read, (1 + 10 + 23) * BS, "GC read more than the live runs");
        let st = vol.stats();
        assert_eq!(
            (st.gc_victims_read_runs, st.gc_victims_read_whole),
            (1, 0),
            "the victim is counted as read by its live runs"
        );
        reads_back(&vol);

        // damage in a live block: the victim is left alone, nothing moved
        let (vol, media, victim) = gapped();
        flip(&vol, &media, victim, 50);
        let moved = vol
            .sh
            .counters
            .gc_blocks_moved
            .load(std::sync::atomic::Ordering::Relaxed);
        let _ = vol.sh.gc_one(1).unwrap();
        let c = vol.sh.core.lock();
        assert_eq!(
            c.segs.segs[victim as usize].state,
            SegState::Damaged,
            "GC relocated a victim whose live block fails its CRC"
        );
        assert_eq!(c.segs.segs[victim as usize].live, 33);
        assert_eq!(
            vol.sh
                .counters
                .gc_blocks_moved
                .load(std::sync::atomic::Ordering::Relaxed),
            moved
        );
    }

    /// A victim of chunks of many sizes (a FLUSH after each write): the
    /// header walk's guesses miss and it reads the real headers one by one;
    /// every live block moves and reads back, nothing is refused.
    #[test]
    fn gc_walks_a_victim_of_mixed_chunk_sizes() {
        let (vol, _media, _) = gapped();
        // lbas 300..363 in chunks of 7, 7, 7, 12, 3, 23 (+ headers: 65 blocks,
        // across two segments)
        let mut lba = 300u64;
        for n in [7u64, 7, 7, 12, 3, 23] {
            let data: Vec<u8> = (lba..lba + n).flat_map(|l| block(l, 4)).collect();
            vol.write(lba * BS, &data, false).unwrap();
            vol.flush().unwrap();
            lba += n;
        }
        // kill every third block of them, and fill on so their segments close
        let data: Vec<u8> = (300..lba).step_by(3).flat_map(|l| block(l, 5)).collect();
        for (i, l) in (300..lba).step_by(3).enumerate() {
            vol.write(l * BS, &data[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES], false)
                .unwrap();
        }
        let data: Vec<u8> = (400..500).flat_map(|l| block(l, 6)).collect();
        vol.write(400 * BS, &data, false).unwrap();
        vol.flush().unwrap();
        let segs: Vec<u32> = {
            let c = vol.sh.core.lock();
            let mut v: Vec<u32> = (300..lba)
                .filter_map(|l| match c.map.get(l) {
                    Loc::Data(p) if (l - 300) % 3 != 0 => Some(p / SEG),
                    _ => None,
                })
                .collect();
            v.dedup();
            v
        };
        while vol.sh.gc_one(1).unwrap() {}
        let c = vol.sh.core.lock();
        for s in &segs {
            let st = &c.segs.segs[*s as usize];
            assert_ne!(st.state, SegState::Damaged, "segment {s} was refused");
        }
        drop(c);
        let mut b = vec![0u8; BLOCK_BYTES];
        for l in 300..lba {
            vol.read(l * BS, &mut b).unwrap();
            let gen = if (l - 300) % 3 == 0 { 5 } else { 4 };
            assert!(b == block(l, gen), "lba {l} reads wrong after GC");
        }
        for l in 400..500 {
            vol.read(l * BS, &mut b).unwrap();
            assert!(b == block(l, 6), "lba {l} reads wrong after GC");
        }
        reads_back(&vol);
    }

    /// Relocate refuses a live block the read did not verify, whatever the
    /// image holds there (mutation `gc-moves-unverified`).
    #[test]
    fn relocate_refuses_a_live_block_that_was_not_verified() {
        let (vol, _media, victim) = gapped();
        let fill = SEG as usize;
        let mut img = crate::media::AlignedBuf::new(fill * BLOCK_BYTES);
        let base = victim as u64 * SEG as u64;
        let uuid = vol.sh.core.lock().uuid;
        let misses = AtomicU32::new(0);
        let read = read_victim(
            &*vol.sh.store,
            victim,
            fill,
            &uuid,
            &mut img,
            &misses,
            |chunks| live_blocks(&vol.sh.core.lock().map, base, chunks, fill),
        )
        .unwrap();
        let mut verified = read.verified.clone();
        assert!(verified[50] && !verified[25]);
        verified[50] = false; // as if the read had not covered it
        let mut c = vol.sh.core.lock();
        c.segs.segs[victim as usize].state = SegState::Victim;
        let mut out = Vec::new();
        let r = c.relocate(
            victim,
            &img[..fill * BLOCK_BYTES],
            &verified,
            read.chunks,
            2,
            0,
            &mut out,
        );
        match r {
            Err(crate::volume::core::RelocateError::Damaged(why)) => {
                assert!(why.contains("not read and verified"), "{why}")
            }
            Ok(_) => panic!("relocate moved a block that was not verified"),
            Err(_) => panic!("relocate: out of space"),
        }
    }
}
