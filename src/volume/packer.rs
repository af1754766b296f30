//! The packer stage of a compressed volume (docs/compression.md): a sealed
//! user chunk is *staged* (sequenced, no place yet), packed off the engine
//! lock by the thread that sealed it (or any thread that finds it waiting),
//! and placed under the lock strictly in seq order by `Core::place_ready`.
//!
//! This module owns the staged queue's entries and the pure packing step:
//! each raw data block of the chunk is tried with LZ4 (`compress::worth_trying`
//! first, kept when `packed::KEEP_MAX` or less) and the final data area is
//! built: raw blocks, then packed blocks, entries in record order (replay's
//! "later record wins inside one chunk" needs record order).
//!
//! Invariant: a packed chunk describes exactly the records of its staged
//! chunk, in the same order, each block's content unchanged (a fragment's raw
//! CRC is the block's CRC computed at append); it is never larger than the
//! raw chunk, so the room promised for the raw chunk always holds it.

use crate::format::chunk::{self, Entry, Kind, LsnRange, MAX_ENTRIES, NO_SRC};
use crate::format::packed::{Compressor, Packer, Place};
use crate::format::BLOCK_BYTES;
use crate::log::ChunkPool;
use crate::map::Virt;
use crate::media::AlignedBuf;
use std::sync::Arc;

/// A sealed user chunk of a compressed volume waiting to be packed and placed.
pub struct StagedChunk {
    pub id: u32,
    pub seq: u64,
    pub durable_seq: u64,
    pub timestamp_ns: u64,
    pub entries: Vec<Entry>,
    pub crcs: Vec<u32>,
    pub lsn: Option<LsnRange>,
    /// Format v2 `CHAIN`: the previous user chunk, named at seal (seq order
    /// is seal order, and placement keeps it).
    pub chain: Option<crate::format::chunk::Chain>,
    /// The raw image (header block unused, data blocks from block 1). Read
    /// under the engine lock (reads of staged blocks) and by the packer off it.
    pub raw: Arc<AlignedBuf>,
    /// A thread is packing it.
    pub taken: bool,
    pub packed: Option<PackedChunk>,
}

/// What the packer hands a thread: everything it needs off the lock.
pub struct PackJob {
    pub id: u32,
    pub entries: Vec<Entry>,
    pub crcs: Vec<u32>,
    pub raw: Arc<AlignedBuf>,
    pub pool: Arc<ChunkPool>,
}

/// Where one record of the staged chunk ends up, relative to its chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rec {
    /// Raw data block: staged index `old`, data index `new` of the packed chunk.
    Raw { lba: u64, old: u8, new: u32 },
    /// Fragment of staged data block `old`, at `place` among the packed blocks.
    Frag {
        lba: u64,
        old: u8,
        place: Place,
        len: u16,
    },
    /// `count` virtual records from `lba`.
    Virt { lba: u64, count: u32, v: Virt },
}

/// The packer's result for one staged chunk.
pub struct PackedChunk {
    pub entries: Vec<Entry>,
    pub crcs: Vec<u32>,
    /// Header block + data area; None: nothing was worth packing, the raw
    /// image is the final one.
    pub image: Option<AlignedBuf>,
    pub raw_blocks: u32,
    pub records: Vec<Rec>,
    pub tally: Tally,
}

impl PackedChunk {
    pub fn data_blocks(&self) -> u32 {
        self.crcs.len() as u32
    }
}

/// Counts of one packing (summed into the engine's stats).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Host data blocks packed (raw or compressed).
    pub blocks: u64,
    /// Of them, stored as fragments.
    pub fragments: u64,
    /// Of them, skipped by the entropy sample (LZ4 never ran).
    pub skipped: u64,
    /// Data blocks the chunk takes on the media after packing.
    pub stored_blocks: u64,
    /// Of `blocks`, those LZ4 kept (even when the chunk was then stored
    /// raw because packing saved no block): 0 means every tested block was
    /// incompressible, what `Core::note_packed` counts towards direct chunks.
    pub kept: u64,
    /// Of `blocks` (all counted in `skipped` too), those never tested: they
    /// went into a direct chunk while the user stream looked incompressible
    /// (`Core::direct`; at most one in `SAMPLE_EVERY` of them was sampled).
    pub untested: u64,
}

impl Tally {
    /// `n` host data blocks stored raw without a test (a direct chunk).
    pub fn untested(n: u64) -> Tally {
        Tally {
            blocks: n,
            skipped: n,
            stored_blocks: n,
            untested: n,
            ..Tally::default()
        }
    }

    pub fn add(&mut self, t: &Tally) {
        self.blocks += t.blocks;
        self.fragments += t.fragments;
        self.skipped += t.skipped;
        self.stored_blocks += t.stored_blocks;
        self.kept += t.kept;
        self.untested += t.untested;
    }
}

fn push_entry(out: &mut Vec<Entry>, lba: u64, kind: Kind, count: u32) {
    match out.last_mut() {
        Some(l)
            if l.kind == kind && l.lba + l.count as u64 == lba && l.count < u32::MAX - count =>
        {
            l.count += count
        }
        _ => out.push(Entry {
            lba,
            count,
            kind,
            src: NO_SRC,
        }),
    }
}

/// The records of a staged chunk with `entries` stored as it was (every
/// data block raw, in its staged place).
pub fn raw_records(entries: &[Entry], data_blocks: usize) -> Vec<Rec> {
    let mut records = Vec::with_capacity(data_blocks + entries.len());
    let mut idx = 0u32;
    for e in entries {
        if e.kind == Kind::Data {
            for k in 0..e.count {
                records.push(Rec::Raw {
                    lba: e.lba + k as u64,
                    old: idx as u8,
                    new: idx,
                });
                idx += 1;
            }
        } else {
            records.push(Rec::Virt {
                lba: e.lba,
                count: e.count,
                v: crate::map::virt_of(e.kind).expect("virtual kind"),
            });
        }
    }
    records
}

/// Pack one staged chunk (off the engine lock).
pub fn pack(job: &PackJob, z: &mut Compressor) -> PackedChunk {
    let block = |i: usize| &job.raw[(1 + i) * BLOCK_BYTES..(2 + i) * BLOCK_BYTES];
    let mut entries = Vec::with_capacity(job.entries.len());
    let mut records = Vec::with_capacity(job.crcs.len() + job.entries.len());
    let mut raw_of = Vec::with_capacity(job.crcs.len()); // staged data index of each raw block kept
    let mut packer = Packer::new();
    let mut tally = Tally::default();
    let mut idx = 0usize;
    for e in &job.entries {
        match e.kind {
            Kind::Data => {
                for k in 0..e.count {
                    let lba = e.lba + k as u64;
                    let b = block(idx);
                    tally.blocks += 1;
                    let frag = if crate::compress::worth_trying(b) {
                        z.compress(b)
                    } else {
                        tally.skipped += 1;
                        None
                    };
                    match frag {
                        Some(f) => {
                            let len = f.len() as u16;
                            let place = packer.push(f, job.crcs[idx]);
                            push_entry(&mut entries, lba, Kind::Packed, 1);
                            records.push(Rec::Frag {
                                lba,
                                old: idx as u8,
                                place,
                                len,
                            });
                            tally.fragments += 1;
                            tally.kept += 1;
                        }
                        None => {
                            push_entry(&mut entries, lba, Kind::Data, 1);
                            records.push(Rec::Raw {
                                lba,
                                old: idx as u8,
                                new: raw_of.len() as u32,
                            });
                            raw_of.push(idx);
                        }
                    }
                    idx += 1;
                }
            }
            Kind::Packed => unreachable!("a staged chunk holds raw blocks"),
            k => {
                push_entry(&mut entries, e.lba, k, e.count);
                records.push(Rec::Virt {
                    lba: e.lba,
                    count: e.count,
                    v: crate::map::virt_of(k).expect("virtual kind"),
                });
            }
        }
    }
    let packed_blocks = packer.blocks();
    let raw_total = job.crcs.len();
    // nothing packed, more entries than a header holds, or no block saved:
    // the raw chunk as it was
    if packed_blocks == 0
        || entries.len() > MAX_ENTRIES
        || raw_of.len() + packed_blocks >= raw_total
    {
        tally.fragments = 0;
        tally.stored_blocks = raw_total as u64;
        // every block stayed raw (random data, the common case here): each
        // `Rec::Raw` above already has `new == old`; else rebuild them so
        let records = if packed_blocks == 0 {
            debug_assert!(raw_of.iter().enumerate().all(|(j, &i)| i == j));
            records
        } else {
            raw_records(&job.entries, job.crcs.len())
        };
        return PackedChunk {
            entries: job.entries.clone(),
            crcs: job.crcs.clone(),
            image: None,
            raw_blocks: raw_total as u32,
            records,
            tally,
        };
    }
    let mut image = job.pool.get();
    let mut crcs = Vec::with_capacity(raw_of.len() + packed_blocks);
    for (j, &i) in raw_of.iter().enumerate() {
        image[(1 + j) * BLOCK_BYTES..(2 + j) * BLOCK_BYTES].copy_from_slice(block(i));
        crcs.push(job.crcs[i]);
    }
    let packed = packer.finish();
    let at = (1 + raw_of.len()) * BLOCK_BYTES;
    image[at..at + packed.len()].copy_from_slice(&packed);
    for b in packed.chunks_exact(BLOCK_BYTES) {
        crcs.push(chunk::block_crc(b));
    }
    tally.stored_blocks = crcs.len() as u64;
    PackedChunk {
        entries,
        crcs,
        image: Some(image),
        raw_blocks: raw_of.len() as u32,
        records,
        tally,
    }
}

/// Tested data blocks in a row, over the chunks a compressed volume packed,
/// that LZ4 did not keep, after which the user stream is taken as
/// incompressible (`Core::direct`): its next chunks are placed at open, as
/// an uncompressed volume's, and only sampled (`sample`). Half a full chunk:
/// a chunk of random data (255 blocks) switches, a chunk with a single
/// compressible block in 128 does not.
pub const DIRECT_AFTER: u64 = 128;

/// A direct chunk's data blocks are sampled one in `SAMPLE_EVERY` (its
/// data blocks 0, 16, 32, ...: at least its first), after its seal and off
/// the lock; the first that LZ4 keeps switches the stream back to staged
/// chunks. Compressible data written while the stream is direct is stored
/// raw for at most the chunk that was sampled and the one opened at its
/// seal (unless one in 16 of a chunk's blocks, at fixed places, never
/// compresses when others do).
pub const SAMPLE_EVERY: usize = 16;

/// Whether a sealed direct chunk's image (header block, then `data_blocks`
/// raw data blocks) holds a sampled block that LZ4 keeps (off the lock).
pub fn sample(image: &[u8], data_blocks: u32, z: &mut Compressor) -> bool {
    let block = |i: usize| &image[(1 + i) * BLOCK_BYTES..(2 + i) * BLOCK_BYTES];
    let every = SAMPLE_EVERY;
    // MUTANT: direct-never-samples s|.step_by(every)|.skip(usize::MAX)|
    let mut sampled = (0..data_blocks as usize).step_by(every);
    sampled.any(|i| crate::compress::worth_trying(block(i)) && z.compress(block(i)).is_some())
}

/// `sample` with this thread's compressor.
pub fn sample_here(image: &[u8], data_blocks: u32) -> bool {
    COMPRESSOR.with(|z| sample(image, data_blocks, &mut z.borrow_mut()))
}

thread_local! {
    /// One LZ4 state per packing thread (its hash table is reused).
    static COMPRESSOR: std::cell::RefCell<Compressor> = std::cell::RefCell::new(Compressor::default());
}

/// `pack` with this thread's compressor.
pub fn pack_here(job: &PackJob) -> PackedChunk {
    COMPRESSOR.with(|z| pack(job, &mut z.borrow_mut()))
}
