//! The read path: map lookup under the engine lock (copies of blocks still in
//! memory, virtual blocks), then the media reads of a whole batch at once, then
//! verification of every block that came from the media against the CRC index
//! (`crate::crc_index`). A block whose CRC does not match is never returned: its
//! request fails with `Error::BadBlock` (EIO), the block is logged with its
//! segment and chunk, counted (`crc_errors`) and its segment is queued for scrub.
//! `ReadRing` does the same per request, asynchronously: a read is looked up
//! and submitted by one thread and verified by another when its media reads
//! complete (the NBD server's reads, answered in completion order).
//! A streamed block of a chunk still in memory is in no chunk image (log.rs):
//! it is read at its place once its placing write completed and checked
//! against its chunk's CRC (`read_once`; the ring reads it synchronously).
//!
//! Invariant: the reuse lock is held shared from the map lookup until the last
//! block is verified, so the bytes read and the CRC they are checked against
//! belong to the same incarnation of their segment (ARCHITECTURE.md, reuse).
//! A ring read holds its share across the asynchronous completion (taken on
//! the submitting thread, released on the completing one); while any share is
//! held, nested takes use `read_recursive`, which never waits for a barrier
//! queued behind that share (a plain `read` there could deadlock).

use super::core::{Buffered, Core};
use super::{ReadBuf, Shared, Volume};
use crate::crc_index::{self, Expect};
use crate::error::{Error, Result};
use crate::format::chunk::block_crc;
use crate::format::BLOCK_BYTES;
use crate::log::ChunkPool;
use crate::map::{Loc, Virt};
use crate::media::{AlignedBuf, UringReads, URING_WAKE};
use crate::segments::SegState;
use crate::stats::Counters;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A run of blocks contiguous on the media: (first physical block, index of its
/// first block in the request, blocks).
type Run = (u64, usize, usize);

/// A fragment to read from the media (compressed volumes): its block's index
/// in the request and its map value (`Loc::Fragment`).
type FragRead = (usize, Loc);

/// A streamed block of a chunk still in memory (not in its image, log.rs),
/// read at its place once its placing write completed: its index in the
/// request, its physical block, and what `Core::buffered_data` said.
struct StreamedRead {
    i: usize,
    p: u32,
    placed: Arc<crate::log::Placed>,
    idx: u32,
    crc: u32,
}

/// A fragment's packed blocks: (first physical block, 1 or 2 blocks).
fn frag_blocks(loc: Loc) -> (u32, usize) {
    match loc {
        Loc::Fragment { phys, spans, .. } => (phys, 1 + spans as usize),
        _ => unreachable!("fragment reads are of fragments"),
    }
}

/// The physical block a failed value names (for the damage report).
fn phys_of(loc: Loc) -> u32 {
    match loc {
        Loc::Data(p) | Loc::Fragment { phys: p, .. } => p,
        _ => unreachable!("only media blocks fail verification"),
    }
}

const BS: u64 = BLOCK_BYTES as u64;

/// Buffers for the packed blocks of fragment reads, reused. A read of one
/// fragment needs one block, or two when it spans; a fresh aligned buffer
/// costs an allocation and its zeroing (8 KiB), more than the fragment's
/// decode. A buffer handed out holds what an earlier read left in it: its
/// user reads from the media every byte it then verifies and parses.
pub(crate) struct PackedBufs(ChunkPool);

impl PackedBufs {
    /// Blocks of a pooled buffer (a fragment touches at most two).
    const BLOCKS: usize = 2;
    /// Buffers kept (at most one per read in flight is in use).
    const KEEP: usize = 64;

    pub(crate) fn new() -> PackedBufs {
        let len = Self::BLOCKS * BLOCK_BYTES;
        PackedBufs(ChunkPool::with_cap(len, Self::KEEP * len))
    }

    /// A buffer of at least `blocks` blocks (exactly that many when more
    /// than a pooled one holds; empty for none).
    fn get(&self, blocks: usize) -> AlignedBuf {
        if blocks == 0 || blocks > Self::BLOCKS {
            return AlignedBuf::new(blocks * BLOCK_BYTES);
        }
        self.0.get()
    }

    /// Give back a buffer `get` made (one of another size is dropped).
    fn put(&self, buf: AlignedBuf) {
        self.0.put(buf)
    }
}

impl Shared {
    pub(crate) fn read_blocks(&self, first: u64, out: &mut [u8]) -> Result<()> {
        let mut reqs = [(first, out)];
        let mut res = [Ok(())];
        self.read_blocks_batch(&mut reqs, &mut res)?;
        let [r] = res;
        r
    }

    /// Fill each `(first block, buffer)` with the volume's blocks from `first` on.
    /// Blocks in memory and virtual blocks are copied under the engine lock; the
    /// media reads of every request are then issued together. Err: a media error
    /// (every request failed); otherwise `res[i]` says whether request i verified.
    pub(crate) fn read_blocks_batch(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        res: &mut [Result<()>],
    ) -> Result<()> {
        debug_assert_eq!(reqs.len(), res.len());
        let failed = self.read_once(reqs, res, false)?;
        self.settle(reqs, res, failed, false)
    }

    /// Judge the requests whose first read failed verification: `failed` holds
    /// (request, logical block, physical block) of each. A block that fails
    /// while the map no longer points at it was overwritten (and its segment
    /// perhaps emptied and its first block wiped) during the read: that
    /// request is read again, it is not damage. `nested`: the caller holds a
    /// share of the reuse lock (a ring read), so takes here are recursive.
    fn settle(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        res: &mut [Result<()>],
        mut failed: Vec<(usize, u64, Loc)>,
        nested: bool,
    ) -> Result<()> {
        for _ in 0..3 {
            let mut again = Vec::new();
            for (k, lba, p) in failed {
                let here = self.core.lock().map.get(lba) == p;
                // a stripe set heals raw blocks (fragments are not on stripe sets)
                let healed =
                    here && matches!(p, Loc::Data(_)) && self.heal(Some(lba), phys_of(p), nested);
                if here && !healed {
                    res[k] = Err(self.bad_block(lba, phys_of(p), nested));
                } else {
                    // overwritten during the read, or healed by the store
                    again.push(k);
                }
            }
            failed = Vec::new();
            for k in again {
                let (first, out) = &mut reqs[k];
                let mut one = [(*first, &mut out[..])];
                let mut r = [Ok(())];
                if let Some(&(_, lba, p)) = self.read_once(&mut one, &mut r, nested)?.first() {
                    failed.push((k, lba, p));
                } else {
                    let [r] = r;
                    res[k] = r;
                }
            }
            if failed.is_empty() {
                break;
            }
        }
        for (k, lba, p) in failed {
            res[k] = Err(self.bad_block(lba, phys_of(p), nested));
        }
        // the caller's buffer must not hold bytes that failed verification
        for ((_, out), r) in reqs.iter_mut().zip(res.iter()) {
            if r.is_err() {
                out.fill(0);
            }
        }
        Ok(())
    }

    /// Look up one request's blocks under the engine lock: blocks in memory and
    /// virtual blocks are copied into `out` now; the blocks to read from the
    /// media come back as runs. Segments whose CRCs must be loaded first (written
    /// before this mount) are added to `load` as (segment, fill).
    fn plan(
        &self,
        c: &Core,
        first: u64,
        out: &mut [u8],
        load: &mut Vec<(u32, u32)>,
        frags: &mut Vec<FragRead>,
        streamed: &mut Vec<StreamedRead>,
    ) -> Vec<Run> {
        let verify = self.opts.verify_reads;
        let sb = self.geo.segment_blocks;
        let mut mine: Vec<Run> = Vec::new();
        for i in 0..out.len() / BLOCK_BYTES {
            let dst = &mut out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            let loc = c.map.get(first + i as u64);
            match loc {
                // (a ring read's buffer may be reused: it holds old bytes)
                // MUTANT: ring-spare-unfilled s|dst.fill(0)|{}|
                Loc::Unmapped | Loc::Virtual(Virt::Trim | Virt::Zero, _) => dst.fill(0),
                Loc::Virtual(Virt::Ones, _) => dst.fill(0xff),
                Loc::StagedVirt(Virt::Ones, _) => dst.fill(0xff),
                Loc::StagedVirt(..) => dst.fill(0),
                Loc::Staged { id, idx } => dst.copy_from_slice(c.staged_block(id, idx)),
                Loc::Fragment { phys, slot, spans } => {
                    // in memory (an open GC chunk or an image in flight): both
                    // blocks are in the same chunk image
                    let here = c.buffered(phys).map(|b| (b, c.buffered(phys + 1)));
                    match here {
                        Some((b, next)) if !spans || next.is_some() => {
                            let next = if spans { next } else { None };
                            crate::format::packed::unpack(b, next, slot, dst)
                                .expect("a fragment in memory unpacks");
                        }
                        _ => {
                            let seg = phys / sb;
                            if verify
                                && !self.crc_index.is_loaded(seg)
                                && !load.iter().any(|&(s, _)| s == seg)
                            {
                                load.push((seg, c.segs.segs[seg as usize].fill));
                            }
                            frags.push((i, loc));
                        }
                    }
                }
                Loc::Data(p) => match c.buffered_data(p) {
                    Some(Buffered::Bytes(b)) => dst.copy_from_slice(b),
                    Some(Buffered::Streamed { placed, idx, crc }) => streamed.push(StreamedRead {
                        i,
                        p,
                        placed,
                        idx,
                        crc,
                    }),
                    None => {
                        let seg = p / sb;
                        if verify
                            && !self.crc_index.is_loaded(seg)
                            && !load.iter().any(|&(s, _)| s == seg)
                        {
                            load.push((seg, c.segs.segs[seg as usize].fill));
                        }
                        match mine.last_mut() {
                            Some((rp, ri, rn))
                                if *rp + *rn as u64 == p as u64 && *ri + *rn == i =>
                            {
                                *rn += 1
                            }
                            _ => mine.push((p as u64, i, 1)),
                        }
                    }
                },
            }
        }
        mine
    }

    /// Load the CRCs of segments written before this mount (`plan`'s `load`),
    /// under the caller's share of the reuse lock.
    fn load_crcs(&self, load: &[(u32, u32)]) -> Result<()> {
        for &(seg, fill) in load {
            let end = self.crc_index.load_segment(&*self.store, seg, fill)?;
            if end < fill {
                // A header there does not verify. If the segment still holds live
                // data that is damage; if it was emptied meanwhile, its first
                // block may just have been wiped by a barrier (not damage).
                let c = self.core.lock();
                if matches!(
                    c.segs.segs[seg as usize].state,
                    SegState::Closed | SegState::Damaged | SegState::Victim
                ) {
                    self.crc_index.set_unverifiable_from(seg, end, fill);
                }
            }
        }
        Ok(())
    }

    /// One attempt of `read_blocks_batch`: returns (request, logical block,
    /// physical block) of the first block of each request that failed
    /// verification; the caller decides whether that is damage.
    fn read_once(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        res: &mut [Result<()>],
        nested: bool,
    ) -> Result<Vec<(usize, u64, Loc)>> {
        let verify = self.opts.verify_reads;
        let _r = if nested {
            self.reuse.read_recursive()
        } else {
            self.reuse.read()
        };
        let mut runs: Vec<Vec<Run>> = Vec::with_capacity(reqs.len());
        let mut frags: Vec<Vec<FragRead>> = Vec::new();
        let mut streamed: Vec<Vec<StreamedRead>> = Vec::new();
        let mut load: Vec<(u32, u32)> = Vec::new();
        {
            let c = self.core.lock();
            let mut f = Vec::new();
            let mut st = Vec::new();
            for (k, (first, out)) in reqs.iter_mut().enumerate() {
                runs.push(self.plan(&c, *first, out, &mut load, &mut f, &mut st));
                if !f.is_empty() {
                    frags.resize_with(k + 1, Vec::new);
                    frags[k] = std::mem::take(&mut f);
                }
                if !st.is_empty() {
                    streamed.resize_with(k + 1, Vec::new);
                    streamed[k] = std::mem::take(&mut st);
                }
            }
        }
        self.load_crcs(&load)?;
        // streamed blocks (in no chunk image): wait for their placing writes
        // (which never wait for a barrier: `place_claims`), then read them at
        // their places and check them against their chunk's CRC
        for (k, st) in streamed.iter().enumerate() {
            for s in st {
                if !s.placed.get(s.idx) {
                    s.placed.wait_idle();
                }
                if !s.placed.get(s.idx) {
                    // its placing write failed: the volume failed with it
                    self.check_failed()?;
                    return Err(Error::Failed(crate::error::Failure::io(
                        format_args!("streamed block at {}", s.p),
                        &std::io::Error::other("its write did not complete"),
                    )));
                }
                let (_, out) = &mut reqs[k];
                let dst = &mut out[s.i * BLOCK_BYTES..(s.i + 1) * BLOCK_BYTES];
                self.store.read_batch(&mut [(dst, s.p as u64)])?;
            }
        }
        {
            let mut io: Vec<(&mut [u8], u64)> = Vec::new();
            for ((_, out), mine) in reqs.iter_mut().zip(&runs) {
                // runs are in increasing block order and disjoint: carve them off in turn
                let mut rest: &mut [u8] = out;
                let mut at = 0;
                for &(p, i, k) in mine {
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut((i - at) * BLOCK_BYTES);
                    let (run, tail) = tail.split_at_mut(k * BLOCK_BYTES);
                    io.push((run, p));
                    rest = tail;
                    at = i + k;
                }
            }
            if !io.is_empty() {
                self.store.read_batch(&mut io)?;
            }
        }
        let mut failed = Vec::new();
        for (k, r) in res.iter_mut().enumerate() {
            *r = Ok(());
            // MUTANT: streamed-read-unverified s|block_crc(b) != s.crc|false|
            let bad = |s: &&StreamedRead, b: &[u8]| block_crc(b) != s.crc;
            let out = &reqs[k].1;
            if let Some(s) = streamed.get(k).and_then(|st| {
                st.iter()
                    .find(|s| bad(s, &out[s.i * BLOCK_BYTES..(s.i + 1) * BLOCK_BYTES]))
            }) {
                failed.push((k, reqs[k].0 + s.i as u64, Loc::Data(s.p)));
                continue;
            }
            if verify {
                if let Some((lba, p)) = self.verify_runs(reqs[k].0, &reqs[k].1[..], &runs[k]) {
                    failed.push((k, lba, Loc::Data(p)));
                    continue;
                }
            }
            if let Some(f) = frags.get(k).filter(|f| !f.is_empty()) {
                let (first, out) = &mut reqs[k];
                if let Some((lba, loc)) = self.read_fragments(*first, out, f)? {
                    failed.push((k, lba, loc));
                }
            }
        }
        Ok(failed)
    }

    /// Read the packed blocks of `frags` (one media read of 4 KiB, 8 KiB when
    /// a fragment spans) and unpack them (`unpack_fragments`). The first
    /// fragment that fails a check, as (logical block, value).
    fn read_fragments(
        &self,
        first: u64,
        out: &mut [u8],
        frags: &[FragRead],
    ) -> Result<Option<(u64, Loc)>> {
        let total: usize = frags.iter().map(|&(_, l)| frag_blocks(l).1).sum();
        let mut pooled = self.packed_bufs.get(total);
        let buf = &mut pooled[..total * BLOCK_BYTES];
        {
            let mut io: Vec<(&mut [u8], u64)> = Vec::with_capacity(frags.len());
            let mut rest: &mut [u8] = &mut *buf;
            for &(_, loc) in frags {
                let (p, n) = frag_blocks(loc);
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut(n * BLOCK_BYTES);
                io.push((mine, p as u64));
                rest = tail;
            }
            self.store.read_batch(&mut io)?;
        }
        let failed = self.unpack_fragments(first, out, frags, buf);
        self.packed_bufs.put(pooled);
        Ok(failed)
    }

    /// `packed` holds the packed blocks of `frags` end to end, as read from
    /// the media: check each block against the CRC index, and unpack each
    /// fragment into its place in `out`, which checks the fragment's raw
    /// CRC. The first fragment that fails either check, as (logical block,
    /// value); its bytes are never handed out (the caller zeroes failed
    /// requests).
    fn unpack_fragments(
        &self,
        first: u64,
        out: &mut [u8],
        frags: &[FragRead],
        packed: &[u8],
    ) -> Option<(u64, Loc)> {
        let verify = self.opts.verify_reads;
        let mut at = 0;
        for &(i, loc) in frags {
            let (p, n) = frag_blocks(loc);
            let Loc::Fragment { slot, .. } = loc else {
                unreachable!()
            };
            let got = &packed[at * BLOCK_BYTES..(at + n) * BLOCK_BYTES];
            at += n;
            let lba = first + i as u64;
            if verify {
                let ok = (0..n).all(|j| {
                    let b = &got[j * BLOCK_BYTES..(j + 1) * BLOCK_BYTES];
                    matches!(self.crc_index.expected(p + j as u32), Expect::Crc(want) if block_crc(b) == want)
                });
                if !ok {
                    return Some((lba, loc));
                }
            }
            let (block, next) = got.split_at(BLOCK_BYTES);
            let next = (n == 2).then_some(next);
            let dst = &mut out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
            if crate::format::packed::unpack(block, next, slot, dst).is_err() {
                return Some((lba, loc));
            }
        }
        None
    }

    /// Check every media block of one request against the CRC index; the first
    /// block that fails, as (logical block, physical block).
    fn verify_runs(&self, first: u64, out: &[u8], runs: &[Run]) -> Option<(u64, u32)> {
        for &(p0, i0, k) in runs {
            for j in 0..k {
                let (p, i) = (p0 as u32 + j as u32, i0 + j);
                let block = &out[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
                let ok = match self.crc_index.expected(p) {
                    // MUTANT: read-crc s|block_crc(block) == want|true|
                    Expect::Crc(want) => block_crc(block) == want,
                    Expect::NotLoaded | Expect::Unverifiable => false,
                };
                if !ok {
                    return Some((first + i as u64, p));
                }
            }
        }
        None
    }

    /// A block failed verification: log where it is, count it, queue its
    /// segment for scrub, and make the request's error. (Error path: it reads
    /// chunk headers to name the chunk.)
    fn bad_block(&self, lba: u64, p: u32, nested: bool) -> Error {
        // (the segment stays this incarnation while its headers are read)
        let _r = if nested {
            self.reuse.read_recursive()
        } else {
            self.reuse.read()
        };
        let sb = self.geo.segment_blocks;
        let (seg, off) = (p / sb, p % sb);
        let fill = self.core.lock().segs.segs[seg as usize].fill;
        let mut chunk = format!("no verified chunk header covers block {off}");
        let uuid = self.crc_index_uuid();
        let _ = crc_index::walk(&*self.store, &uuid, seg, fill, |at, _| {
            if at.pos < off && off < at.pos + at.blocks {
                chunk = format!(
                    "chunk seq {} at block {} (data block {})",
                    at.seq,
                    at.pos,
                    off - at.pos - 1
                );
            }
        });
        tracing::warn!(
            "read of logical block {lba}: data fails its checksum (segment {seg} block {off}, {chunk}); answering EIO"
        );
        Counters::add(&self.counters.crc_errors, 1);
        self.scrub.mark(seg);
        Error::BadBlock {
            lba,
            segment: seg,
            chunk,
        }
    }

    fn crc_index_uuid(&self) -> [u8; 16] {
        self.core.lock().uuid
    }
}

/// Slots of one `ReadRing` (media reads in flight at once; one more stays free
/// for the wake-up). A READ of more blocks than this goes through
/// `Volume::read_batch` instead.
pub const RING_SLOTS: u32 = 256;

/// One-block read buffers a ring keeps for reuse (256 KiB): a QD32 client's
/// reads, with room for bursts.
const SPARE_BUFS: usize = 64;

/// Reads submitted on one thread and finished on another, as their media reads
/// complete (`Volume::read_ring`). The NBD server keeps one per connection
/// that reads: its reader thread `start`s each READ as it arrives, a
/// completion thread `reap`s them in the order the device finishes them.
/// `T` is the caller's context of a read, handed back with its result.
///
/// Owns: the reads in flight (their buffers, runs, and each one's share of
/// the reuse lock), the ring, and the one-block buffers given back by
/// `recycle` for later reads. `start`/`submit`/`stop` are for one thread
/// (the submitter), `reap` and `recycle` for one other thread.
///
/// Invariants: a read's buffer lives in its slot until every one of its
/// media reads completed; a read holds a share of the reuse lock from its map
/// lookup until its last block was verified (so a segment is never reused
/// under it); at most `capacity` media reads are in flight; every byte of a
/// read's buffer is written by this read (`plan` fills what it does not
/// leave to the media, a failed read is zeroed), so a reused buffer never
/// hands out an earlier read's bytes.
pub struct ReadRing<T> {
    io: UringReads,
    vol: Arc<Volume>,
    /// Media reads queued and not yet submitted.
    queued: AtomicUsize,
    state: Mutex<RingState<T>>,
    room: Condvar,
}

struct RingState<T> {
    slots: Vec<Option<InFlight<T>>>,
    free: Vec<usize>,
    /// Media reads reserved by `start` or in flight.
    reserved: usize,
    stopping: bool,
    /// One-block buffers of replies already sent (`recycle`), for the next
    /// one-block reads: a fresh buffer costs an aligned allocation, its
    /// zeroing and a free on the other thread (issue 22, docs/nbd.md).
    spare: Vec<AlignedBuf>,
}

/// One read in flight.
struct InFlight<T> {
    ctx: T,
    buf: ReadBuf,
    first: u64,
    runs: Vec<Run>,
    /// Fragments to unpack once read (compressed volumes), and the buffer
    /// their packed blocks are read into, end to end.
    frags: Vec<FragRead>,
    packed: AlignedBuf,
    /// Media reads of the read (the pieces its runs and fragments lie in).
    pieces: usize,
    /// Media reads not completed yet.
    left: usize,
    /// The first error a media read returned (errno).
    err: Option<i32>,
    /// Runs a piece of which the kernel read only in part (read again whole
    /// through the store).
    short: Vec<usize>,
}

impl Volume {
    /// A ring for reads started here and finished on another thread. None:
    /// the media has no such ring (memory, fault injection) or io_uring cannot
    /// be set up now; the caller reads with `read_batch` then.
    pub fn read_ring<T: Send>(self: &Arc<Self>) -> Option<ReadRing<T>> {
        match self.sh.store.uring_reads(RING_SLOTS)? {
            Ok(io) => Some(ReadRing {
                io,
                vol: self.clone(),
                queued: AtomicUsize::new(0),
                state: Mutex::new(RingState {
                    slots: Vec::new(),
                    free: Vec::new(),
                    reserved: 0,
                    stopping: false,
                    spare: Vec::new(),
                }),
                room: Condvar::new(),
            }),
            Err(e) => {
                tracing::debug!("read ring not available ({e}): reads go in batches");
                None
            }
        }
    }
}

impl<T: Send> ReadRing<T> {
    /// Read `len` bytes at `offset` synchronously, outside the ring (`start`'s
    /// fallback). A synchronous read takes the reuse lock: what is queued
    /// goes to the kernel first.
    fn read_sync(&self, offset: u64, len: u32) -> Result<ReadBuf> {
        self.submit();
        self.vol
            .read_batch(&[(offset, len)])
            .pop()
            .expect("one range, one result")
    }

    /// A read of `len` bytes at `offset` goes through the ring (else `start`
    /// reads it synchronously).
    pub fn fits(&self, offset: u64, len: u32) -> bool {
        let first = offset / BS;
        let last = (offset + (len as u64).max(1) - 1) / BS;
        len > 0 && (last - first + 1) as usize <= self.io.capacity()
    }

    /// Start reading `len` bytes at byte `offset` (any alignment). The map is
    /// looked up now; blocks in memory and virtual blocks are copied now; the
    /// media reads are queued for `submit`. Some: the read is answered already
    /// (an error, no media read needed, or too large for the ring: read
    /// synchronously); None: it is in flight and `reap` returns it. Waits
    /// (after submitting what is queued) while the ring is full.
    pub fn start(&self, ctx: T, offset: u64, len: u32) -> Option<(T, Result<ReadBuf>)> {
        let vol = &*self.vol;
        let sh = &*vol.sh;
        let first = offset / BS;
        let last = (offset + (len as u64).max(1) - 1) / BS;
        let checked = vol
            .check_usable(false)
            .and_then(|_| vol.check_range(offset, len as u64))
            .and_then(|_| vol.check_vouched(first, last));
        if let Err(e) = checked {
            return Some((ctx, Err(e)));
        }
        let blocks = (last - first + 1) as usize;
        if len == 0 || blocks > self.io.capacity() {
            return Some((ctx, self.read_sync(offset, len)));
        }
        let spare = {
            let mut st = self.state.lock();
            while st.reserved + blocks > self.io.capacity() {
                // full: what is queued must reach the kernel before we wait
                parking_lot::MutexGuard::unlocked(&mut st, || self.submit());
                if st.reserved + blocks > self.io.capacity() {
                    self.room.wait(&mut st);
                }
            }
            st.reserved += blocks;
            // (its old bytes are all overwritten: plan fills the blocks it
            // does not leave to the media, the media reads the others, and a
            // failed read is zeroed)
            if blocks == 1 {
                st.spare.pop()
            } else {
                None
            }
        };
        let mut rb = ReadBuf {
            buf: spare.unwrap_or_else(|| AlignedBuf::new(blocks * BLOCK_BYTES)),
            skip: (offset % BS) as usize,
            len: len as usize,
        };
        // This read's share of the reuse lock: released by `finish`, on
        // whichever thread completes the read.
        // Reads queued and not submitted hold shares: should a barrier be
        // waiting, they must reach the device before this thread waits too.
        let share = match sh.reuse.try_read() {
            Some(g) => g,
            None => {
                self.submit();
                sh.reuse.read()
            }
        };
        std::mem::forget(share);
        let mut load = Vec::new();
        let mut frags = Vec::new();
        let mut streamed = Vec::new();
        let runs = sh.plan(
            &sh.core.lock(),
            first,
            &mut rb.buf,
            &mut load,
            &mut frags,
            &mut streamed,
        );
        if !streamed.is_empty() {
            // a streamed block of a chunk in memory (a read right after a
            // large write): the synchronous path waits for its placing write
            // SAFETY: the share forgotten above, released once.
            unsafe { sh.reuse.force_unlock_read() };
            self.unreserve(blocks);
            return Some((ctx, self.read_sync(offset, len)));
        }
        let loaded = sh.load_crcs(&load);
        if (runs.is_empty() && frags.is_empty()) || loaded.is_err() {
            // SAFETY: the share forgotten above, released once.
            unsafe { sh.reuse.force_unlock_read() };
            self.unreserve(blocks);
            let r = loaded.map(|_| {
                Counters::add(&sh.counters.host_read_bytes, len as u64);
                rb
            });
            return Some((ctx, r));
        }
        // The CRCs `finish` compares with, into the cache now (this thread's
        // time overlaps the client's; the completion thread's delays replies).
        for &(p, _, k) in runs.iter().take(4) {
            for b in 0..k.min(4) {
                sh.crc_index.touch(p as u32 + b as u32);
            }
        }
        // Each run becomes the media reads of the pieces the store places it
        // in (one for a flat store), each tagged with its run.
        let base = rb.buf.as_mut_ptr();
        let mut io: Vec<(*mut u8, u32, u64, usize)> = Vec::with_capacity(runs.len());
        for (r, &(p, i, k)) in runs.iter().enumerate() {
            sh.store.locate(p, k as u32, &mut |pc| {
                assert!(
                    pc.member == 0 && pc.at as usize + pc.len as usize <= k * BLOCK_BYTES,
                    "read ring: a piece on member {} (a ring over several members is not built)",
                    pc.member
                );
                // SAFETY: i + k blocks lie within the buffer (plan's runs), and
                // the piece lies within its run (asserted).
                let at = unsafe { base.add(i * BLOCK_BYTES + pc.at as usize) };
                io.push((at, pc.len, pc.offset, r));
            });
        }
        // Fragments (compressed volumes): each one's packed block(s) are read
        // into `packed`, end to end, tagged runs.len() + its index; `finish`
        // verifies and unpacks them.
        let packed_blocks: usize = frags.iter().map(|&(_, l)| frag_blocks(l).1).sum();
        let mut packed = sh.packed_bufs.get(packed_blocks);
        let pbase = packed.as_mut_ptr();
        let mut at = 0;
        for (k, &(_, loc)) in frags.iter().enumerate() {
            let (p, n) = frag_blocks(loc);
            sh.store.locate(p as u64, n as u32, &mut |pc| {
                assert!(
                    pc.member == 0 && pc.at as usize + pc.len as usize <= n * BLOCK_BYTES,
                    "read ring: a fragment's piece on member {}",
                    pc.member
                );
                // SAFETY: the fragment's n blocks lie within `packed` from
                // block `at`, and the piece within them (asserted).
                let to = unsafe { pbase.add(at * BLOCK_BYTES + pc.at as usize) };
                io.push((to, pc.len, pc.offset, runs.len() + k));
            });
            at += n;
        }
        // the reservation counted a media read per block: at most one piece
        // each (a fragment, of one request block, is one piece on the flat
        // store, the only one with a ring)
        assert!(io.len() <= blocks && runs.len() + frags.len() < 1 << 16);
        self.unreserve(blocks - io.len());
        let slot = {
            let mut st = self.state.lock();
            let f = InFlight {
                ctx,
                buf: rb,
                first,
                left: io.len(),
                pieces: io.len(),
                runs,
                frags,
                packed,
                err: None,
                short: Vec::new(),
            };
            match st.free.pop() {
                Some(s) => {
                    st.slots[s] = Some(f);
                    s
                }
                None => {
                    st.slots.push(Some(f));
                    st.slots.len() - 1
                }
            }
        };
        assert!(
            slot < 0xffff,
            "read ring: slot {slot} beyond the user data's 16 bits"
        );
        for &(at, n, off, r) in &io {
            // SAFETY: the buffer lives in its slot (its heap block never moves)
            // until `reap` took every completion of this read; the
            // reservation above keeps the ring within its capacity.
            let user = (slot as u64) << 48 | (r as u64) << 32 | n as u64;
            let pushed = unsafe { self.io.push(at, n, off, user) };
            assert!(
                pushed.is_ok(),
                "read ring: submission queue full within its reservation"
            );
        }
        self.queued.fetch_add(io.len(), Ordering::Relaxed);
        None
    }

    fn unreserve(&self, n: usize) {
        if n > 0 {
            self.state.lock().reserved -= n;
            self.room.notify_one();
        }
    }

    /// Hand the reads started so far to the device.
    pub fn submit(&self) {
        if self.queued.swap(0, Ordering::Relaxed) == 0 {
            return;
        }
        let mut failures = 0;
        while let Err(e) = self.io.submit() {
            // EBADF, EFAULT...: a bug, not a client's doing. Reads may be in
            // flight into buffers we own, so there is no way to give up cleanly.
            failures += 1;
            if failures > 1000 {
                tracing::error!("read ring: cannot submit ({e}); aborting");
                std::process::abort();
            }
            std::thread::yield_now();
        }
    }

    /// Wait for reads to complete and append each finished one (verified, or
    /// its error) to `out`, in the order they completed. False: `stop` was
    /// called (the caller's completion thread ends).
    pub fn reap(&self, out: &mut Vec<(T, Result<ReadBuf>)>) -> bool {
        let mut cqes = Vec::new();
        if let Err(e) = self.io.wait(&mut cqes) {
            tracing::error!("read ring: cannot reap completions ({e}); aborting");
            std::process::abort();
        }
        let mut done = Vec::new();
        let mut woken = false;
        {
            let mut st = self.state.lock();
            for (user, res) in cqes {
                if user == URING_WAKE {
                    woken = true;
                    continue;
                }
                let (slot, run, len) = (
                    (user >> 48) as usize,
                    ((user >> 32) & 0xffff) as usize,
                    (user & 0xffff_ffff) as usize,
                );
                let f = st.slots[slot]
                    .as_mut()
                    .expect("a completion of a read in flight");
                f.left -= 1;
                if res < 0 {
                    f.err.get_or_insert(-res);
                } else if (res as usize) < len && !f.short.contains(&run) {
                    f.short.push(run);
                }
                if f.left == 0 {
                    let f = st.slots[slot].take().expect("just seen");
                    st.free.push(slot);
                    st.reserved -= f.pieces;
                    done.push(f);
                }
            }
            if !done.is_empty() {
                self.room.notify_one();
            }
            woken &= st.stopping;
        }
        for f in done {
            out.push(self.finish(f));
        }
        !woken
    }

    /// Take back the buffers of reads whose replies were sent (one-block
    /// ones are kept for later reads, at most `SPARE_BUFS`), emptying `done`.
    pub fn recycle(&self, done: &mut Vec<(T, Result<ReadBuf>)>) {
        let mut st = self.state.lock();
        for (_, r) in done.drain(..) {
            if let Ok(rb) = r {
                if rb.buf.len() == BLOCK_BYTES && st.spare.len() < SPARE_BUFS {
                    st.spare.push(rb.buf);
                }
            }
        }
    }

    /// A read whose media reads all completed: finish short reads, verify,
    /// release its share of the reuse lock.
    fn finish(&self, f: InFlight<T>) -> (T, Result<ReadBuf>) {
        let sh = &*self.vol.sh;
        let InFlight {
            ctx,
            mut buf,
            first,
            runs,
            frags,
            mut packed,
            err,
            short,
            ..
        } = f;
        let res = (|| -> Result<()> {
            if let Some(errno) = err {
                return Err(Error::Io(std::io::Error::from_raw_os_error(errno)));
            }
            for k in short {
                if let Some(&(p, i, n)) = runs.get(k) {
                    let run = &mut buf.buf[i * BLOCK_BYTES..(i + n) * BLOCK_BYTES];
                    sh.store.read(p, run)?;
                } else {
                    let k = k - runs.len();
                    let at: usize = frags[..k].iter().map(|&(_, l)| frag_blocks(l).1).sum();
                    let (p, n) = frag_blocks(frags[k].1);
                    sh.store.read(
                        p as u64,
                        &mut packed[at * BLOCK_BYTES..(at + n) * BLOCK_BYTES],
                    )?;
                }
            }
            // MUTANT: ring-skips-verify s|!sh.opts.verify_reads|true|
            let mut failed = if !sh.opts.verify_reads {
                None
            } else {
                sh.verify_runs(first, &buf.buf, &runs)
                    .map(|(lba, p)| (lba, Loc::Data(p)))
            };
            if failed.is_none() && !frags.is_empty() {
                // MUTANT: ring-fragments-not-unpacked s|sh.unpack_fragments(first, &mut buf.buf, &frags, &packed)|None|
                failed = sh.unpack_fragments(first, &mut buf.buf, &frags, &packed);
            }
            let Some((lba, loc)) = failed else {
                return Ok(());
            };
            // Rare: judge it the synchronous way, still under this read's
            // share (so every take of the reuse lock there is recursive).
            let mut reqs = [(first, &mut buf.buf[..])];
            let mut r = [Ok(())];
            sh.settle(&mut reqs, &mut r, vec![(0, lba, loc)], true)?;
            let [r] = r;
            r
        })();
        // SAFETY: this read's share, taken in `start`, released once.
        unsafe { sh.reuse.force_unlock_read() };
        sh.packed_bufs.put(packed);
        match res {
            Ok(()) => {
                Counters::add(&sh.counters.host_read_bytes, buf.len as u64);
                (ctx, Ok(buf))
            }
            Err(e) => {
                buf.buf.fill(0);
                (ctx, Err(e))
            }
        }
    }

    /// End `reap`: the next (or current) call returns false. Called by the
    /// submitting thread once nothing is in flight.
    pub fn stop(&self) {
        self.state.lock().stopping = true;
        if let Err(e) = self.io.wake() {
            tracing::error!("read ring: cannot wake its completion thread ({e}); aborting");
            std::process::abort();
        }
    }

    /// Reads started and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.state
            .lock()
            .slots
            .iter()
            .filter(|s| s.is_some())
            .count()
    }
}

impl<T> Drop for ReadRing<T> {
    fn drop(&mut self) {
        // The kernel may still write into buffers of reads in flight: wait them
        // out before the slots (and the buffers) go. Normally there are none.
        // Reads queued and never submitted would never complete: submit first.
        if self.queued.swap(0, Ordering::Relaxed) > 0 && self.io.submit().is_err() {
            std::process::abort();
        }
        let mut cqes = Vec::new();
        loop {
            let left = {
                let st = self.state.lock();
                st.slots.iter().flatten().map(|f| f.left).sum::<usize>()
            };
            if left == 0 {
                return;
            }
            cqes.clear();
            if self.io.wait(&mut cqes).is_err() {
                std::process::abort();
            }
            let mut st = self.state.lock();
            for &(user, _) in &cqes {
                if user == URING_WAKE {
                    continue;
                }
                let slot = (user >> 48) as usize;
                if let Some(f) = st.slots[slot].as_mut() {
                    f.left -= 1;
                    if f.left == 0 {
                        st.slots[slot] = None;
                        // SAFETY: this read's share, taken in `start`.
                        unsafe { self.vol.sh.reuse.force_unlock_read() };
                    }
                }
            }
        }
    }
}
