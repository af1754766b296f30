//! Intent log ring, engine side (memory only, under the engine lock): where
//! the next record goes, which records are live, and what start mount would
//! replay from. Records are built here from the open user chunk's unlogged
//! block records; the commit stage writes them (`Commit::write_record`).
//! With `LOG_INDIRECT` (docs/intent-log.md §2) a record is version 3: the
//! unlogged data blocks are written once, at their final places in the open
//! chunk's reservation, and the record (a few 512-byte sectors in the ring)
//! names them; the chunk's seal then writes only what no record placed.
//!
//! Invariants kept here (asserted in release):
//! - a record's ring space is reused only after a persisted start has passed
//!   it, and a start passes a record only once every LSN it carries is in a
//!   durable main-log chunk (`durable_lsn`);
//! - records never overlap: `used` (bytes from the persisted start to `head`,
//!   the waste at a wrap included) never exceeds the ring;
//! - a version 3 record names only data blocks of the open chunk it was built
//!   from, inside that chunk's reservation, which nothing else writes before
//!   the chunk's seal.
//! - a streamed record that names blocks other writes were still placing
//!   (`Company`) counts written only once every one of them is placed
//!   (`Commit::place`).

use crate::format::intent::{Place, RecordHeader, SECTOR_BYTES};
use crate::format::superblock::LogStart;
use crate::format::BLOCK_BYTES;
use crate::log::{ChunkPool, OpenChunk, Placed};
use crate::media::AlignedBuf;
use std::collections::VecDeque;
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

/// A FLUSH or FUA logs the open chunk's unlogged block records when they hold
/// at most this many data blocks (32 KiB); more seal the chunk as before. The
/// value is ZFS's `zfs_immediate_write_sz` (32 KiB): above it, writing the data
/// twice (log now, main log at seal) costs more device bandwidth than a partial
/// chunk's extra header block, and ZFS's `zil_slog_bulk` lesson (bulk
/// synchronous data belongs in the main pool, not the log) says the same for
/// large writes: they stream to the main log and never wait behind the ring.
/// Version 3 records (`LOG_INDIRECT`) have no such limit: their data is
/// written once, at its place in the main log, whether logged or sealed.
pub const LOG_MAX_DATA_BLOCKS: u32 = 8;

/// One record since the persisted start.
#[derive(Debug, Clone, Copy)]
pub struct RecInfo {
    pub offset: u64,
    pub seq: u64,
    pub prev_crc: u32,
    /// Every LSN the record carries is below this.
    pub lsn_end: u64,
}

/// A record built under the engine lock, for the commit stage to write.
pub struct PlannedRecord {
    pub seq: u64,
    /// Media byte offset.
    pub at: u64,
    pub image: AlignedBuf,
    /// Version 3: the data blocks the record names, written before it.
    pub data: Option<PlacedData>,
    /// A streamed record that names blocks other writes were still placing
    /// when it was planned (`Ring::plan_streamed` with company): it counts
    /// written only once every one of them is placed (`Commit::place`).
    pub company: Option<Company>,
}

/// The data blocks `from..to` of an open chunk a streamed record names,
/// some of them claimed by other writes whose placing writes were in
/// flight when it was planned.
pub struct Company {
    pub placed: Arc<Placed>,
    pub from: u32,
    pub to: u32,
}

/// A version 3 record's data blocks: data indexes `from..to` of the open
/// chunk, written at block `block` of `segment` (contiguous).
pub struct PlacedData {
    pub segment: u32,
    pub block: u32,
    /// A chunk buffer from the engine's pool (back to it once written): its
    /// first `bytes()` hold the blocks, the rest is whatever it held before.
    pub buf: AlignedBuf,
    pub from: u32,
    pub to: u32,
    /// The open chunk's map of placed blocks: set once the write completed.
    pub placed: Arc<Placed>,
}

impl PlacedData {
    /// The data blocks, as written.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..(self.to - self.from) as usize * BLOCK_BYTES]
    }
}

pub struct Ring {
    /// Media byte offset and size of the ring.
    pub offset: u64,
    pub bytes: u64,
    /// Ring offset of the next record.
    pub head: u64,
    pub next_seq: u64,
    /// Header CRC of the last record (the next record's `prev_crc`).
    pub chain: u32,
    /// The start the superblock holds: mount replays from there.
    pub persisted: LogStart,
    /// Bytes from `persisted.offset` to `head` (the tail skipped at a wrap
    /// included): space a record may not take.
    pub used: u64,
    /// Records at or after the persisted start, oldest first.
    pub recs: VecDeque<RecInfo>,
    /// A start is being persisted (one at a time).
    pub persisting: bool,
    /// Records written since mount (`sluice info`, stats).
    pub records: u64,
    /// The mount has re-homed what the log's replay found and persisted its
    /// start: until then no start may be persisted (not even by the mount's
    /// own checkpoint, which runs before the re-homed blocks are durable).
    pub claimed: bool,
    /// Records are version 3 (`LOG_INDIRECT`).
    pub indirect: bool,
    /// Granularity of record places in the ring: a block for version 2; for
    /// version 3 a sector, or the media's direct-write unit when larger.
    pub unit: u64,
}

impl Ring {
    /// The ring at mount: `start` is what the superblock holds (its chain the
    /// fresh seed of this mount), `head` and `next_seq` where the replayed
    /// records end.
    pub fn new(offset: u64, bytes: u64, start: LogStart) -> Ring {
        Ring {
            offset,
            bytes,
            head: start.offset,
            next_seq: start.seq,
            chain: start.chain,
            persisted: start,
            used: 0,
            recs: VecDeque::new(),
            persisting: false,
            records: 0,
            claimed: false,
            indirect: false,
            unit: BS,
        }
    }

    /// Version 3 records of `unit` bytes' granularity (512 or the media's
    /// direct-write unit, at most a block).
    pub fn indirect(mut self, unit: u64) -> Ring {
        assert!(
            unit >= SECTOR_BYTES as u64 && unit <= BS && BS.is_multiple_of(unit),
            "record unit {unit}"
        );
        self.indirect = true;
        self.unit = unit;
        self
    }

    /// Ring offset for a record of `blocks`, and the bytes skipped to get
    /// there (a record never wraps: it goes to offset 0 when it does not fit
    /// before the end; replay looks there when the next place does not follow).
    fn place(&self, len: u64) -> Option<(u64, u64)> {
        let free = self.bytes - self.used;
        if self.head + len <= self.bytes {
            (len <= free).then_some((self.head, 0))
        } else {
            let waste = self.bytes - self.head;
            (waste + len <= free).then_some((0, waste))
        }
    }

    /// Build the record of `ch`'s unlogged block records if it fits in the
    /// ring; marks them logged. `main_lsn`: where `ch` starts (every LSN
    /// below it is in a sealed chunk). Version 3 (`indirect`, a chunk with a
    /// place): the record names the blocks, `data` carries them to their
    /// places, in a buffer from `pool` (no fresh zeroed allocation per FLUSH).
    pub fn plan(
        &mut self,
        ch: &mut OpenChunk,
        uuid: [u8; 16],
        pool: &ChunkPool,
    ) -> Option<PlannedRecord> {
        self.plan_with(ch, uuid, pool, &|_| false)
    }

    /// A version 3 record of `ch`'s unlogged block records for a streamed
    /// host write to write in the same submission as its own data
    /// (`Commit::place`), so that the FLUSH after it finds nothing to log
    /// (docs/intent-log.md §4.5). Only when every unlogged data block is
    /// already placed or is `ours` (claimed by that write, in that
    /// submission): the record then carries no data, and it is counted
    /// written only once the submission, that data with it, has completed.
    /// A block another write claimed and has not placed yet is not in this
    /// submission, so a record naming it could be counted written (and a
    /// FLUSH answered) while that block is not on the media: None then,
    /// unless `company` (the last write of a burst, `Shared::append_run`):
    /// then such blocks are named too, and the record says so (`company`
    /// of the record): it counts written only once they are all placed.
    pub fn plan_streamed(
        &mut self,
        ch: &mut OpenChunk,
        uuid: [u8; 16],
        pool: &ChunkPool,
        ours: &dyn Fn(u32) -> bool,
        company: bool,
    ) -> Option<PlannedRecord> {
        if !self.indirect || ch.staged.is_some() {
            return None;
        }
        let placed = ch.placed.clone()?;
        let (records, data) = ch.unlogged_counts();
        if records == 0 {
            return None;
        }
        let first = ch.data_blocks() - data;
        let last = ch.data_blocks();
        // a block the record may name: on the media, or in this submission;
        // with company also one another write is placing (claimed, not yet
        // placed), which the record then waits for before it counts written
        // MUTANT: streamed-record-names-others s|ours(i)|placed.is_claimed(i)|
        let nameable = |i: u32| placed.get(i) || ours(i) || (company && placed.is_claimed(i));
        if !(first..last).all(&nameable) {
            return None;
        }
        let others = company && (first..last).any(|i| !placed.get(i) && !ours(i));
        let mut r = self.plan_with(ch, uuid, pool, &nameable)?;
        assert!(
            r.data.is_none(),
            "a streamed write's record carries no data"
        );
        r.company = others.then_some(Company {
            placed,
            from: first,
            to: last,
        });
        Some(r)
    }

    /// `plan`; `done` names data blocks to count as placed besides those
    /// the chunk's map says are (`plan_streamed`).
    fn plan_with(
        &mut self,
        ch: &mut OpenChunk,
        uuid: [u8; 16],
        pool: &ChunkPool,
        also_done: &dyn Fn(u32) -> bool,
    ) -> Option<PlannedRecord> {
        let un = ch.unlogged();
        let ndata = un.data.len();
        let v3 = self.indirect && ch.staged.is_none();
        // the data blocks the record copies from the chunk image: version 3
        // those between the first and the last not yet placed (nor `also_done`),
        // version 2 all. A streamed block is not in the image (log.rs): with
        // one among them there is no record (the FLUSH seals the chunk, whose
        // write waits for the streamed blocks' own)
        let mut w = un.data.clone();
        if v3 {
            let placed_now = |i: u32| ch.placed.as_ref().is_some_and(|p| p.get(i));
            // MUTANT: record-rewrites-placed s|placed_now(i)|false|
            let done = |i: u32| placed_now(i) || also_done(i);
            while w.start < w.end && done(w.start) {
                w.start += 1;
            }
            while w.start < w.end && done(w.end - 1) {
                w.end -= 1;
            }
        }
        let copies_streamed = w.clone().any(|i| ch.is_streamed(i));
        // MUTANT: record-copies-streamed s|if copies_streamed {|if false {|
        if copies_streamed {
            return None;
        }
        let len = if v3 {
            let need = crate::format::intent::v3_bytes(un.entries.len(), ndata) as u64;
            if need > BS {
                return None;
            }
            need.div_ceil(self.unit) * self.unit
        } else {
            if !crate::format::intent::fits(un.entries.len(), ndata) {
                return None;
            }
            (1 + ndata as u64) * BS
        };
        let (at, waste) = self.place(len)?;
        let h = RecordHeader {
            uuid,
            seq: self.next_seq,
            prev_crc: self.chain,
            main_lsn: ch.lsn.map_or(0, |l| l.first),
            first_lsn: un.first_lsn,
            block_crcs: un.data.clone().map(|i| ch.crcs[i as usize]).collect(),
            entries: un.entries,
            place: v3.then_some(Place {
                segment: ch.segment,
                chunk_start: ch.start,
                first_index: un.data.start,
            }),
            sectors: if v3 {
                (len / SECTOR_BYTES as u64) as u16
            } else {
                0
            },
        };
        let mut image = AlignedBuf::new(len as usize);
        let (crc, data) = if v3 {
            let crc = h.encode_into(&mut image[..]);
            let placed = ch.placed.get_or_insert_with(Default::default).clone();
            // blocks already at their places (a streamed host write's, an
            // earlier record's) are not written again: the record's data is
            // `w` above, the rest trimmed at both ends (a block placed by an
            // earlier record in between is written again, the same bytes)
            let nw = w.len();
            let data = (nw > 0).then(|| {
                let (n, from) = (nw * BLOCK_BYTES, (1 + w.start as usize) * BLOCK_BYTES);
                let mut buf = pool.get();
                if buf.len() < n {
                    // (an open chunk's image is a pool buffer: not reached)
                    buf = AlignedBuf::new(n);
                }
                buf[..n].copy_from_slice(&ch.image[from..from + n]);
                PlacedData {
                    segment: ch.segment,
                    block: ch.start + 1 + w.start,
                    buf,
                    from: w.start,
                    to: w.end,
                    placed,
                }
            });
            (crc, data)
        } else {
            for (k, i) in un.data.clone().enumerate() {
                let off = (1 + k) * BLOCK_BYTES;
                image[off..off + BLOCK_BYTES].copy_from_slice(ch.data_block(i));
            }
            (h.encode_into(&mut image[..BLOCK_BYTES]), None)
        };
        self.recs.push_back(RecInfo {
            offset: at,
            seq: h.seq,
            prev_crc: h.prev_crc,
            lsn_end: h.lsn_end(),
        });
        self.used += waste + len;
        assert!(self.used <= self.bytes, "intent log records overlap");
        self.head = (at + len) % self.bytes;
        self.chain = crc;
        self.next_seq += 1;
        self.records += 1;
        ch.mark_logged();
        Some(PlannedRecord {
            seq: h.seq,
            at: self.offset + at,
            image,
            data,
            company: None,
        })
    }

    /// Whether a new start is worth persisting: half the ring is taken.
    pub fn wants_new_start(&self) -> bool {
        self.claimed && !self.persisting && self.used > self.bytes / 2
    }

    /// The start mount could replay from now: the first record whose blocks
    /// are not all in a durable main-log chunk, else the head.
    pub fn candidate_start(&self, durable_lsn: u64) -> LogStart {
        // MUTANT: ring-freed-early s|r.lsn_end > durable_lsn|false|
        match self.recs.iter().find(|r| r.lsn_end > durable_lsn) {
            Some(r) => LogStart {
                offset: r.offset,
                seq: r.seq,
                chain: r.prev_crc,
            },
            None => LogStart {
                offset: self.head,
                seq: self.next_seq,
                chain: self.chain,
            },
        }
    }

    /// `start` is persisted: the space of the records before it is free.
    pub fn advance(&mut self, start: LogStart, durable_lsn: u64) {
        if start.seq <= self.persisted.seq {
            return;
        }
        while self.recs.front().is_some_and(|r| r.seq < start.seq) {
            let r = self.recs.pop_front().expect("present");
            assert!(
                r.lsn_end <= durable_lsn,
                "intent log record {} freed before its blocks are durable in the main log",
                r.seq
            );
        }
        self.persisted = start;
        self.used = if self.recs.is_empty() {
            assert_eq!(start.offset, self.head, "an empty ring starts at its head");
            0
        } else {
            match (self.head + self.bytes - start.offset) % self.bytes {
                0 => self.bytes,
                d => d,
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::chunk::{Kind, LsnRange, Stream, NO_SRC};
    use crate::format::intent::verify;

    fn pool() -> ChunkPool {
        ChunkPool::new(33 * BLOCK_BYTES)
    }

    fn chunk(first_lsn: u64) -> OpenChunk {
        let mut ch = OpenChunk::new(Stream::User, 0, 0, 32, AlignedBuf::new(33 * BLOCK_BYTES));
        ch.lsn = Some(LsnRange {
            first: first_lsn,
            count: 0,
        });
        ch
    }

    #[test]
    fn records_chain_wrap_and_free_only_when_durable() {
        let uuid = [1; 16];
        let start = LogStart {
            offset: 0,
            seq: 1,
            chain: 77,
        };
        let mut ring = Ring::new(1 << 20, 16 * BS, start);
        ring.claimed = true;
        let mut ch = chunk(100);
        let mut prev = 77;
        let mut recs = Vec::new();
        for i in 0..5u64 {
            let b = vec![i as u8 + 1; BLOCK_BYTES];
            ch.push_data(i, &b, NO_SRC);
            ch.count_lsn();
            ch.push_virtual(50 + i, Kind::Trim, NO_SRC);
            ch.count_lsn();
            let r = ring.plan(&mut ch, uuid, &pool()).expect("room");
            let (h, crc) = verify(&r.image, &uuid, 1 + i, prev).expect("valid");
            assert_eq!(h.first_lsn, 100 + 2 * i);
            assert_eq!(h.lsn_count(), 2);
            prev = crc;
            recs.push(r.at);
        }
        // 5 records of 2 blocks: 10 of 16 blocks; a sixth of 2 fits, the
        // seventh wraps only if the start moved
        assert_eq!(ring.used, 10 * BS);
        assert!(ring.wants_new_start());
        // nothing durable: the start stays at the first record
        let s = ring.candidate_start(100);
        assert_eq!((s.offset, s.seq, s.chain), (0, 1, 77));
        // the first three records' blocks are durable in the main log
        let s = ring.candidate_start(106);
        assert_eq!((s.offset, s.seq), (6 * BS, 4));
        ring.advance(s, 106);
        assert_eq!(ring.used, 4 * BS);
        // fill to the end and wrap to 0, never over the start (block 6)
        let mut wrapped = false;
        for i in 5..12u64 {
            ch.push_data(i, &[9; BLOCK_BYTES], NO_SRC);
            ch.count_lsn();
            ch.push_data(i + 100, &[8; BLOCK_BYTES], NO_SRC);
            ch.count_lsn();
            match ring.plan(&mut ch, uuid, &pool()) {
                Some(r) => {
                    wrapped |= r.at == 1 << 20;
                    let off = r.at - (1 << 20);
                    assert!(
                        off + 3 * BS <= 6 * BS || off >= 10 * BS,
                        "over live records"
                    );
                }
                None => {
                    // full until a durable main log frees more
                    assert!(wrapped && ring.used + 3 * BS > ring.bytes);
                    return;
                }
            }
        }
        panic!("the ring never filled");
    }

    #[test]
    fn a_streamed_record_names_only_placed_blocks_and_the_writers_own() {
        let mut ring = Ring::new(1 << 20, 64 * BS, LogStart::default()).indirect(512);
        let mut ch = chunk(10);
        let placed = ch.placed.get_or_insert_with(Default::default).clone();
        for i in 0..4u64 {
            ch.push_data(i, &[i as u8 + 1; BLOCK_BYTES], NO_SRC);
            ch.count_lsn();
        }
        // 0 and 1 claimed by the streamed write asking, 2 by another one
        // still in flight, 3 placed already
        for i in 0..3 {
            placed.claim(i);
        }
        placed.set(3, 4);
        let seq = ring.next_seq;
        assert!(
            ring.plan_streamed(&mut ch, [2; 16], &pool(), &|i| i < 2, false)
                .is_none(),
            "a record named a block another write has not placed yet"
        );
        assert_eq!(
            ring.next_seq, seq,
            "a refused record took a sequence number"
        );
        assert_eq!(
            ch.unlogged_counts(),
            (4, 4),
            "a refused record marked blocks logged"
        );
        // once the other write's block is placed, the record names all four
        // and carries none of them
        placed.finish(2, 3, true);
        let r = ring
            .plan_streamed(&mut ch, [2; 16], &pool(), &|i| i < 2, false)
            .expect("every block placed or the writer's own");
        assert!(r.data.is_none());
        let (h, _) = verify(&r.image, &[2; 16], seq, 0).expect("valid");
        assert_eq!((h.first_lsn, h.lsn_count()), (10, 4));
        assert_eq!(ch.unlogged_counts(), (0, 0));
        // a block appended since (a small write's, neither placed nor
        // claimed) is for the FLUSH's record, which carries it
        ch.push_data(9, &[9; BLOCK_BYTES], NO_SRC);
        ch.count_lsn();
        assert!(ring
            .plan_streamed(&mut ch, [2; 16], &pool(), &|_| false, false)
            .is_none());
    }

    #[test]
    fn a_burst_end_record_names_the_company_blocks_and_says_so() {
        let mut ring = Ring::new(1 << 20, 64 * BS, LogStart::default()).indirect(512);
        let mut ch = chunk(20);
        let placed = ch.placed.get_or_insert_with(Default::default).clone();
        for i in 0..4u64 {
            ch.push_data(i, &[i as u8 + 1; BLOCK_BYTES], NO_SRC);
            ch.count_lsn();
        }
        // 0 placed, 1 claimed by another write in flight, 2 and 3 the asker's
        placed.claim_range(0, 4);
        placed.finish(0, 1, true);
        let r = ring
            .plan_streamed(&mut ch, [2; 16], &pool(), &|i| i >= 2, true)
            .expect("with company a block another write is placing may be named");
        assert!(r.data.is_none());
        let c = r
            .company
            .expect("the record must say it waits for its company");
        assert_eq!((c.from, c.to), (0, 4));
        assert_eq!(ch.unlogged_counts(), (0, 0));
        // with every named block placed or the asker's, nothing to wait for
        ch.push_data(7, &[7; BLOCK_BYTES], NO_SRC);
        ch.count_lsn();
        placed.claim(4);
        let r = ring
            .plan_streamed(&mut ch, [2; 16], &pool(), &|i| i == 4, true)
            .expect("the asker's own block");
        assert!(r.company.is_none());
        // a block neither placed nor claimed (a small write's, in the image)
        // is still the FLUSH's record's
        ch.push_data(9, &[9; BLOCK_BYTES], NO_SRC);
        ch.count_lsn();
        assert!(ring
            .plan_streamed(&mut ch, [2; 16], &pool(), &|_| false, true)
            .is_none());
    }

    #[test]
    #[should_panic(expected = "freed before its blocks are durable")]
    fn freeing_a_record_whose_blocks_are_not_durable_panics() {
        let mut ring = Ring::new(0, 16 * BS, LogStart::default());
        let mut ch = chunk(0);
        ch.push_data(1, &[3; BLOCK_BYTES], NO_SRC);
        ch.count_lsn();
        ring.plan(&mut ch, [0; 16], &pool()).unwrap();
        let s = ring.candidate_start(1);
        ring.advance(s, 0);
    }
}
