//! Shared test support: small volumes, a trivial reference device kept at block
//! granularity, and the prefix checker used by the model and crash tests.
#![allow(dead_code)]

use rand::{rngs::SmallRng, Rng, SeedableRng};
use sluice::geometry::Geometry;
use sluice::media::Media;
use sluice::{CreateOptions, GcPolicy, OpenOptions, Volume};
use std::sync::Arc;

pub const BS: usize = 4096;

/// A small volume: `logical_blocks` blocks, 128 KiB segments, `op` over-provisioning.
pub fn small_create(logical_blocks: u64, op: f64) -> (CreateOptions, u64) {
    let c = CreateOptions {
        logical_bytes: Some(logical_blocks * BS as u64),
        overprovision: op,
        segment_bytes: 128 << 10,
        gc_policy: GcPolicy::Greedy,
        ..Default::default()
    };
    let g = Geometry::for_logical(logical_blocks, 32, op);
    (c, g.media_bytes())
}

/// Deterministic mount options: no background thread, frequent checkpoints.
pub fn det_open(checkpoint_bytes: u64) -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(checkpoint_bytes),
        // every barrier meets a discard (FaultMedia/MemMedia zero the range)
        discard_every_segment: true,
        ..Default::default()
    }
}

pub fn open(media: Arc<dyn Media>, o: &OpenOptions) -> Volume {
    Volume::open(media, o).expect("mount")
}

/// One host request.
#[derive(Debug, Clone)]
pub enum Op {
    Write {
        offset: u64,
        len: usize,
        seed: u64,
        fill: Fill,
    },
    Zero {
        offset: u64,
        len: u64,
        may_trim: bool,
    },
    Trim {
        offset: u64,
        len: u64,
    },
    Flush,
    /// Writes (offset, len, seed, fill) in one `Volume::write_many` call,
    /// applied in the order given.
    WriteMany(Vec<(u64, usize, u64, Fill)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Random,
    Zeros,
    Ones,
    /// Compressible (for compressed volumes): by 4 KiB block of the
    /// request, random then zero halves (fio's buffer_compress_percentage=50),
    /// text-like, or random.
    Mixed,
}

pub fn payload(len: usize, seed: u64, fill: Fill) -> Vec<u8> {
    match fill {
        Fill::Zeros => vec![0; len],
        Fill::Ones => vec![0xff; len],
        Fill::Random => {
            let mut r = SmallRng::seed_from_u64(seed);
            (0..len).map(|_| r.gen()).collect()
        }
        Fill::Mixed => {
            let mut out = payload(len, seed, Fill::Random);
            for (k, b) in out.chunks_mut(4096).enumerate() {
                match (seed as usize + k) % 3 {
                    0 => {
                        let h = b.len() / 2;
                        b[h..].fill(0)
                    }
                    1 => {
                        let word = format!("block {seed} {k}; ");
                        for (i, x) in b.iter_mut().enumerate() {
                            *x = word.as_bytes()[i % word.len()];
                        }
                    }
                    _ => {}
                }
            }
            out
        }
    }
}

/// Reference device at block granularity. `events` are the block writes since the
/// last completed flush (in the order the engine applies them); `base` is the
/// content at that flush.
pub struct Reference {
    pub cur: Vec<u8>,
    pub base: Vec<u8>,
    pub events: Vec<(u64, Vec<u8>)>,
}

impl Reference {
    pub fn new(blocks: u64) -> Reference {
        let z = vec![0u8; blocks as usize * BS];
        Reference {
            cur: z.clone(),
            base: z,
            events: Vec::new(),
        }
    }

    fn set_block(&mut self, b: u64, content: Vec<u8>) {
        let o = b as usize * BS;
        self.cur[o..o + BS].copy_from_slice(&content);
        self.events.push((b, content));
    }

    /// Byte-range write, expanded to whole-block events in ascending order.
    fn write_bytes(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let first = offset / BS as u64;
        let last = (offset + data.len() as u64 - 1) / BS as u64;
        for b in first..=last {
            let o = b as usize * BS;
            let mut blk = self.cur[o..o + BS].to_vec();
            let s = (b * BS as u64).max(offset);
            let e = ((b + 1) * BS as u64).min(offset + data.len() as u64);
            blk[(s - b * BS as u64) as usize..(e - b * BS as u64) as usize]
                .copy_from_slice(&data[(s - offset) as usize..(e - offset) as usize]);
            self.set_block(b, blk);
        }
    }

    /// Mirror of the engine's semantics for `op` (called only if the op is accepted).
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write {
                offset,
                len,
                seed,
                fill,
            } => self.write_bytes(offset, &payload(len, seed, fill)),
            Op::Zero { offset, len, .. } => {
                let bs = BS as u64;
                let (ff, ef) = (offset.div_ceil(bs), (offset + len) / bs);
                if ff >= ef {
                    self.write_bytes(offset, &vec![0; len as usize]);
                } else {
                    self.write_bytes(offset, &vec![0; (ff * bs - offset) as usize]);
                    for b in ff..ef {
                        self.set_block(b, vec![0; BS]);
                    }
                    self.write_bytes(ef * bs, &vec![0; (offset + len - ef * bs) as usize]);
                }
            }
            Op::Trim { offset, len } => {
                let bs = BS as u64;
                for b in offset.div_ceil(bs)..(offset + len) / bs {
                    self.set_block(b, vec![0; BS]);
                }
            }
            Op::Flush => self.flushed(),
            Op::WriteMany(ref ws) => {
                for &(offset, len, seed, fill) in ws {
                    self.write_bytes(offset, &payload(len, seed, fill));
                }
            }
        }
    }

    /// Everything so far is durable.
    pub fn flushed(&mut self) {
        self.base.clone_from(&self.cur);
        self.events.clear();
    }

    /// Does `actual` equal base + some prefix of events? Returns the prefix length.
    pub fn matching_prefix(&self, actual: &[u8]) -> Result<usize, String> {
        assert_eq!(actual.len(), self.base.len());
        let mut cand = self.base.clone();
        let blk = |v: &[u8], b: usize| v[b * BS..(b + 1) * BS].to_vec();
        let nblocks = actual.len() / BS;
        let mut mismatches: usize = (0..nblocks)
            .filter(|&b| blk(&cand, b) != blk(actual, b))
            .count();
        if mismatches == 0 {
            return Ok(0);
        }
        for (k, (b, content)) in self.events.iter().enumerate() {
            let b = *b as usize;
            let before = cand[b * BS..(b + 1) * BS] == actual[b * BS..(b + 1) * BS];
            cand[b * BS..(b + 1) * BS].copy_from_slice(content);
            let after = cand[b * BS..(b + 1) * BS] == actual[b * BS..(b + 1) * BS];
            match (before, after) {
                (true, false) => mismatches += 1,
                (false, true) => mismatches -= 1,
                _ => {}
            }
            if mismatches == 0 {
                return Ok(k + 1);
            }
        }
        let bad: Vec<usize> = (0..nblocks)
            .filter(|&b| blk(&self.cur, b) != blk(actual, b))
            .take(8)
            .collect();
        Err(format!("volume equals no prefix of the {} unflushed block writes; blocks differing from the newest state: {bad:?}", self.events.len()))
    }
}

/// Issue `op` to the volume (the caller mirrors accepted ops in its Reference).
pub fn issue(vol: &Volume, op: &Op, fua: bool) -> sluice::Result<()> {
    match *op {
        Op::Write {
            offset,
            len,
            seed,
            fill,
        } => vol.write(offset, &payload(len, seed, fill), fua),
        Op::Zero {
            offset,
            len,
            may_trim,
        } => vol.write_zeroes(offset, len, fua, may_trim),
        Op::Trim { offset, len } => vol.trim(offset, len, fua),
        Op::Flush => vol.flush(),
        Op::WriteMany(ref ws) => {
            let data: Vec<Vec<u8>> = ws.iter().map(|w| payload(w.1, w.2, w.3)).collect();
            let refs: Vec<(u64, &[u8])> =
                ws.iter().zip(&data).map(|(w, d)| (w.0, &d[..])).collect();
            let (done, r) = vol.write_many(&refs);
            assert!(
                r.is_err() || done == refs.len(),
                "write_many: Ok with {done} of {} done",
                refs.len()
            );
            r?;
            if fua {
                vol.flush()?;
            }
            Ok(())
        }
    }
}

pub fn read_all(vol: &Volume) -> Vec<u8> {
    let mut buf = vec![0u8; vol.size_bytes() as usize];
    vol.read(0, &mut buf).expect("read whole volume");
    buf
}

/// A random op over a volume of `blocks` blocks: mostly aligned writes with
/// overwrites, some sub-block and unaligned ones, zeros, trims and flushes.
pub fn random_op(rng: &mut SmallRng, blocks: u64) -> Op {
    let size = blocks * BS as u64;
    match rng.gen_range(0..100) {
        0..=59 => {
            let nb = if rng.gen_bool(0.8) {
                1
            } else {
                rng.gen_range(1..=8)
            };
            let b = rng.gen_range(0..blocks - nb + 1);
            let fill = match rng.gen_range(0..20) {
                0 => Fill::Zeros,
                1 => Fill::Ones,
                _ => Fill::Random,
            };
            Op::Write {
                offset: b * BS as u64,
                len: nb as usize * BS,
                seed: rng.gen(),
                fill,
            }
        }
        60..=71 => {
            let len = rng.gen_range(1..3 * BS as u64);
            let off = rng.gen_range(0..size - len);
            Op::Write {
                offset: off,
                len: len as usize,
                seed: rng.gen(),
                fill: Fill::Random,
            }
        }
        72..=79 => {
            let len = rng.gen_range(1..16 * BS as u64);
            let off = rng.gen_range(0..size - len);
            Op::Zero {
                offset: off,
                len,
                may_trim: rng.gen(),
            }
        }
        80..=89 => {
            let len = rng.gen_range(1..32 * BS as u64);
            let off = rng.gen_range(0..size - len);
            Op::Trim { offset: off, len }
        }
        _ => Op::Flush,
    }
}

/// Media byte offset of the header of the newest chunk (in a volume image)
/// whose first entry starts at logical block `lba`.
pub fn newest_chunk_of(image: &[u8], lba: u64) -> usize {
    use sluice::format::chunk::ChunkHeader;
    use sluice::format::superblock::Superblock;
    let sb = [0, 1]
        .into_iter()
        .filter_map(|i| Superblock::decode(&image[i * 4096..(i + 1) * 4096]).ok())
        .max_by_key(|s| s.generation)
        .expect("a valid head superblock");
    let mut best: Option<(u64, usize)> = None;
    for s in 0..sb.segment_count as u64 {
        let seg_off = (sb.data_offset + s * sb.segment_blocks as u64 * 4096) as usize;
        let mut pos = 0usize;
        while pos < sb.segment_blocks as usize {
            let at = seg_off + pos * 4096;
            let Ok(h) = ChunkHeader::decode(&image[at..at + 4096]) else {
                break;
            };
            if h.entries.first().is_some_and(|e| e.lba == lba)
                && best.is_none_or(|(q, _)| h.seq > q)
            {
                best = Some((h.seq, at));
            }
            pos += h.total_blocks() as usize;
        }
    }
    best.expect("a chunk writing that block").1
}
