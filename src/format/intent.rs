//! Intent log records (format v2, docs/format-v2.md §4.2): one header block
//! (fixed fields, entries, one CRC32C per data block) and the data blocks of
//! its data entries, written with one write into the log ring (version 2).
//! Version 3 (`LOG_INDIRECT`, §4.4, docs/intent-log.md §2) carries no data:
//! 1 to 8 sectors of 512 bytes naming where its data blocks were written
//! (`Place`: inside the open chunk's reservation in the main log), whose
//! CRCs replay checks there (`verify_placed`). Records form a
//! chain: each carries a log-local sequence number (+1 per record) and the
//! header CRC of the record before it, so replay (ZFS's `zil_parse` rule)
//! applies records while each verifies and follows, and stops at the first
//! that does not.
//!
//! Invariant: `verify` accepts a record only if its header CRC, every data
//! block's CRC, the volume uuid, the expected seq and the expected chain value
//! all match; a record torn at any 512-byte sector, a stale record of an
//! earlier lap of the ring, or a record of another volume is refused. A
//! version 3 record's header CRC covers all its sectors; its data is checked
//! by `verify_placed`, which accepts only blocks matching every named CRC.

use super::chunk::{Kind, MAX_ENTRY_LBA};
use super::*;

pub const RECORD_MAGIC: [u8; 8] = *b"SLUICELR";
/// Fixed part of the header block; entries start here.
pub const RECORD_FIXED_BYTES: usize = 64;
pub const RECORD_ENTRY_BYTES: usize = 16;
const HEADER_CRC_FIELD: usize = 44;
/// Record version 3: no data blocks, a place, sector-sized.
pub const RECORD_VERSION_3: u16 = 3;
/// Fixed part of a version 3 record; entries start here.
pub const RECORD_V3_FIXED_BYTES: usize = 80;
/// Unit of a version 3 record's size and of its place in the ring.
pub const SECTOR_BYTES: usize = 512;

/// Where a version 3 record's data blocks are: data block `j` of the record
/// is block `chunk_start + 1 + first_index + j` of `segment` (the data area of
/// the open chunk whose header goes at `chunk_start`, docs/format.md §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub segment: u32,
    pub chunk_start: u32,
    pub first_index: u32,
}

impl Place {
    /// Block offset in the segment of the record's first data block.
    pub fn first_block(&self) -> u64 {
        self.chunk_start as u64 + 1 + self.first_index as u64
    }
}

/// `count` consecutive block records of one kind (data, zero, ones, trim) at
/// `lba..lba + count`, with LSNs `first_lsn + lsn_delta ..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordEntry {
    pub lba: u64,
    pub count: u32,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub uuid: [u8; 16],
    /// Log-local sequence number: the previous record's + 1.
    pub seq: u64,
    /// Header CRC of the previous record (or the start's chain seed).
    pub prev_crc: u32,
    /// Every LSN below this was in a chunk sealed before this record was built
    /// (the open chunk the record's blocks sit in starts here); <= first_lsn.
    pub main_lsn: u64,
    /// LSN of the first block record carried; the entries carry consecutive LSNs.
    pub first_lsn: u64,
    pub entries: Vec<RecordEntry>,
    /// CRC32C of each data block, in data order.
    pub block_crcs: Vec<u32>,
    /// Version 3: where the data blocks are (None: version 2, they follow
    /// the header block in the ring).
    pub place: Option<Place>,
    /// Version 3: sectors the record takes in the ring, at least what its
    /// content needs (`v3_bytes`), more when padded to the media's write
    /// unit (a 4Kn device); at most 8. 0 for version 2.
    pub sectors: u16,
}

/// Bytes of a version 3 record with `entries` entries and `data_blocks` CRCs,
/// before rounding up to sectors.
pub fn v3_bytes(entries: usize, data_blocks: usize) -> usize {
    RECORD_V3_FIXED_BYTES + entries * RECORD_ENTRY_BYTES + 4 * data_blocks
}

/// Whether a version 3 record fits in one block (8 sectors).
pub fn fits_v3(entries: usize, data_blocks: usize) -> bool {
    v3_bytes(entries, data_blocks) <= BLOCK_BYTES
}

/// CRC32C of `len` bytes of a record with the CRC field taken as zero.
fn record_crc(b: &[u8], len: usize) -> u32 {
    let crc = crc32c::crc32c(&b[..HEADER_CRC_FIELD]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &b[HEADER_CRC_FIELD + 4..len])
}

/// Whether a header with `entries` entries and `data_blocks` block CRCs fits
/// in one header block.
pub fn fits(entries: usize, data_blocks: usize) -> bool {
    RECORD_FIXED_BYTES + entries * RECORD_ENTRY_BYTES + 4 * data_blocks <= BLOCK_BYTES
}

fn header_crc(block: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&block[..HEADER_CRC_FIELD]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc32c::crc32c_append(crc, &block[HEADER_CRC_FIELD + 4..BLOCK_BYTES])
}

impl RecordHeader {
    pub fn data_blocks(&self) -> u32 {
        self.block_crcs.len() as u32
    }
    /// Blocks the record takes in the ring (header + data); version 3: 1
    /// (an upper bound: see `ring_bytes`).
    pub fn total_blocks(&self) -> u32 {
        match self.place {
            Some(_) => 1,
            None => 1 + self.data_blocks(),
        }
    }
    /// Bytes the record takes in the ring: version 2 whole blocks, version 3
    /// whole sectors.
    pub fn ring_bytes(&self) -> usize {
        match self.place {
            Some(_) => self.sectors as usize * SECTOR_BYTES,
            None => self.total_blocks() as usize * BLOCK_BYTES,
        }
    }
    /// Block records carried (one LSN each).
    pub fn lsn_count(&self) -> u64 {
        self.entries.iter().map(|e| e.count as u64).sum()
    }
    pub fn lsn_end(&self) -> u64 {
        self.first_lsn + self.lsn_count()
    }

    /// Encode into `block` (exactly BLOCK_BYTES), with its header CRC; returns
    /// that CRC (the next record's `prev_crc`).
    pub fn encode_into(&self, block: &mut [u8]) -> u32 {
        if self.place.is_some() {
            return self.encode_v3(block);
        }
        assert_eq!(block.len(), BLOCK_BYTES);
        assert!(fits(self.entries.len(), self.block_crcs.len()));
        debug_assert_eq!(
            self.entries
                .iter()
                .filter(|e| e.kind == Kind::Data)
                .map(|e| e.count as usize)
                .sum::<usize>(),
            self.block_crcs.len()
        );
        self.put_fixed(block, FORMAT_VERSION_2);
        self.put_entries_crcs(block, RECORD_FIXED_BYTES);
        let crc = header_crc(block);
        put_u32(block, HEADER_CRC_FIELD, crc);
        crc
    }

    /// Zero `buf` and write the fixed fields both versions share (bytes
    /// 0..64: magic, version, counts, uuid, seq, chain, LSNs).
    fn put_fixed(&self, buf: &mut [u8], version: u16) {
        buf.fill(0);
        buf[0..8].copy_from_slice(&RECORD_MAGIC);
        put_u16(buf, 8, version);
        put_u16(buf, 10, self.entries.len() as u16);
        put_u32(buf, 12, self.data_blocks());
        buf[16..32].copy_from_slice(&self.uuid);
        put_u64(buf, 32, self.seq);
        put_u32(buf, 40, self.prev_crc);
        put_u64(buf, 48, self.main_lsn);
        put_u64(buf, 56, self.first_lsn);
    }

    /// Encode a version 3 record into `buf` (exactly `ring_bytes()`), with
    /// its CRC over every sector; returns that CRC.
    fn encode_v3(&self, buf: &mut [u8]) -> u32 {
        let place = self.place.expect("a version 3 record");
        let len = self.ring_bytes();
        assert_eq!(buf.len(), len, "a version 3 record is its sectors");
        assert!(
            v3_bytes(self.entries.len(), self.block_crcs.len()) <= len && len <= BLOCK_BYTES,
            "a version 3 record's sectors hold its content"
        );
        self.put_fixed(buf, RECORD_VERSION_3);
        put_u32(buf, 64, place.segment);
        put_u32(buf, 68, place.chunk_start);
        put_u32(buf, 72, place.first_index);
        put_u16(buf, 76, (len / SECTOR_BYTES) as u16);
        self.put_entries_crcs(buf, RECORD_V3_FIXED_BYTES);
        let crc = record_crc(buf, len);
        put_u32(buf, HEADER_CRC_FIELD, crc);
        crc
    }

    fn put_entries_crcs(&self, buf: &mut [u8], at: usize) {
        let mut delta = 0u32;
        for (i, e) in self.entries.iter().enumerate() {
            let off = at + i * RECORD_ENTRY_BYTES;
            put_u64(buf, off, (e.kind as u64) << 56 | e.lba);
            put_u32(buf, off + 8, e.count);
            put_u32(buf, off + 12, delta);
            delta += e.count;
        }
        let crcs = at + self.entries.len() * RECORD_ENTRY_BYTES;
        for (i, c) in self.block_crcs.iter().enumerate() {
            put_u32(buf, crcs + 4 * i, *c);
        }
    }

    /// Decode and validate a record's header: version 2 (one header block)
    /// or version 3 (its sectors, the CRC over all of them); returns the
    /// header and its CRC. Data blocks are checked by `verify` (version 2)
    /// or `verify_placed` (version 3).
    pub fn decode(block: &[u8]) -> Result<(RecordHeader, u32), FormatError> {
        if block.len() >= SECTOR_BYTES
            && block[0..8] == RECORD_MAGIC
            && get_u16(block, 8) == RECORD_VERSION_3
        {
            return Self::decode_v3(block);
        }
        if block.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: block.len(),
            });
        }
        if block[0..8] != RECORD_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let crc = get_u32(block, HEADER_CRC_FIELD);
        if header_crc(block) != crc {
            return Err(FormatError::Checksum);
        }
        let version = get_u16(block, 8);
        if version != FORMAT_VERSION_2 {
            return Err(FormatError::Version(version));
        }
        let n = get_u16(block, 10) as usize;
        let data_blocks = get_u32(block, 12) as usize;
        if !fits(n, data_blocks) {
            return Err(invalid(
                "record entry_count",
                format!("{n} entries and {data_blocks} data blocks do not fit a header block"),
            ));
        }
        let (entries, delta) = decode_entries(block, RECORD_FIXED_BYTES, n, data_blocks)?;
        let main_lsn = get_u64(block, 48);
        let first_lsn = get_u64(block, 56);
        if main_lsn > first_lsn || first_lsn.checked_add(delta).is_none() {
            return Err(invalid("record main_lsn", "above the record's first LSN"));
        }
        let crcs = RECORD_FIXED_BYTES + n * RECORD_ENTRY_BYTES;
        Ok((
            RecordHeader {
                uuid: block[16..32].try_into().unwrap(),
                seq: get_u64(block, 32),
                prev_crc: get_u32(block, 40),
                main_lsn,
                first_lsn,
                entries,
                block_crcs: (0..data_blocks)
                    .map(|i| get_u32(block, crcs + 4 * i))
                    .collect(),
                place: None,
                sectors: 0,
            },
            crc,
        ))
    }
}

impl RecordHeader {
    fn decode_v3(b: &[u8]) -> Result<(RecordHeader, u32), FormatError> {
        let sectors = get_u16(b, 76) as usize;
        if sectors == 0 || sectors * SECTOR_BYTES > BLOCK_BYTES {
            return Err(invalid("record sectors", sectors.to_string()));
        }
        let len = sectors * SECTOR_BYTES;
        if b.len() < len {
            return Err(FormatError::Short {
                need: len,
                have: b.len(),
            });
        }
        let crc = get_u32(b, HEADER_CRC_FIELD);
        if record_crc(b, len) != crc {
            return Err(FormatError::Checksum);
        }
        let n = get_u16(b, 10) as usize;
        let data_blocks = get_u32(b, 12) as usize;
        if v3_bytes(n, data_blocks) > len {
            return Err(invalid(
                "record sectors",
                format!("{sectors} for {n} entries and {data_blocks} data blocks"),
            ));
        }
        let (entries, delta) = decode_entries(b, RECORD_V3_FIXED_BYTES, n, data_blocks)?;
        let main_lsn = get_u64(b, 48);
        let first_lsn = get_u64(b, 56);
        if main_lsn > first_lsn || first_lsn.checked_add(delta).is_none() {
            return Err(invalid("record main_lsn", "above the record's first LSN"));
        }
        let place = Place {
            segment: get_u32(b, 64),
            chunk_start: get_u32(b, 68),
            first_index: get_u32(b, 72),
        };
        if place.first_block() + data_blocks as u64 > u32::MAX as u64 {
            return Err(invalid("record place", format!("{place:?}")));
        }
        let crcs = RECORD_V3_FIXED_BYTES + n * RECORD_ENTRY_BYTES;
        Ok((
            RecordHeader {
                uuid: b[16..32].try_into().unwrap(),
                seq: get_u64(b, 32),
                prev_crc: get_u32(b, 40),
                main_lsn,
                first_lsn,
                entries,
                block_crcs: (0..data_blocks).map(|i| get_u32(b, crcs + 4 * i)).collect(),
                place: Some(place),
                sectors: sectors as u16,
            },
            crc,
        ))
    }
}

/// The `n` entries at `at`: consecutive LSN deltas, raw kinds only, their
/// data blocks adding up to `data_blocks`. Returns them and their LSN count.
fn decode_entries(
    b: &[u8],
    at: usize,
    n: usize,
    data_blocks: usize,
) -> Result<(Vec<RecordEntry>, u64), FormatError> {
    let mut entries = Vec::with_capacity(n);
    let (mut delta, mut data) = (0u64, 0usize);
    for i in 0..n {
        let off = at + i * RECORD_ENTRY_BYTES;
        let word = get_u64(b, off);
        // records carry raw blocks only: fragments are packed at seal
        let kind = Kind::from_u8((word >> 56) as u8)
            .filter(|&k| k != Kind::Packed)
            .ok_or_else(|| invalid("record entry.kind", (word >> 56).to_string()))?;
        let lba = word & MAX_ENTRY_LBA;
        let count = get_u32(b, off + 8);
        if count == 0 || lba + count as u64 > MAX_ENTRY_LBA {
            return Err(invalid("record entry.count", count.to_string()));
        }
        if get_u32(b, off + 12) as u64 != delta {
            return Err(invalid(
                "record entry.lsn_delta",
                "entries do not carry consecutive LSNs",
            ));
        }
        delta += count as u64;
        if kind == Kind::Data {
            data += count as usize;
        }
        entries.push(RecordEntry { lba, count, kind });
    }
    if data != data_blocks {
        return Err(invalid(
            "record data_blocks",
            format!("{data_blocks} but entries carry {data}"),
        ));
    }
    Ok((entries, delta))
}

/// Check a version 3 record's data as read from its place: `data` holds its
/// data blocks in order, each must match its CRC. Err(j): data block `j` does
/// not (torn, never written, or overwritten): the record is the end of the
/// log (its data and the record are made durable by one flush, so a record
/// whose data does not verify was never acknowledged).
pub fn verify_placed(h: &RecordHeader, data: &[u8]) -> Result<(), usize> {
    assert_eq!(data.len(), h.block_crcs.len() * BLOCK_BYTES);
    for (j, &c) in h.block_crcs.iter().enumerate() {
        let b = &data[j * BLOCK_BYTES..(j + 1) * BLOCK_BYTES];
        // MUTANT: placed-crc-unchecked s|crc32c::crc32c(b) != c|false && c == 0|
        if crc32c::crc32c(b) != c {
            return Err(j);
        }
    }
    Ok(())
}

/// Why a record does not follow (replay stops there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotNext {
    /// The header or a data block fails verification (torn, damaged, never written).
    Invalid(FormatError),
    /// A valid record of another volume.
    ForeignUuid,
    /// A valid record that is not the successor (stale: an earlier lap of the ring,
    /// or a record written after a lost one).
    Seq { found: u64, want: u64 },
    /// Right seq, but it does not chain to the previous record's header CRC.
    Chain,
}

/// Check that `image` (header block + at least its data blocks) is the record
/// that follows: seq `want_seq`, chained to `chain`, of volume `uuid`, every
/// data block matching its CRC. Returns the header and its CRC.
pub fn verify(
    image: &[u8],
    uuid: &[u8; 16],
    want_seq: u64,
    chain: u32,
) -> Result<(RecordHeader, u32), NotNext> {
    let (h, crc) = RecordHeader::decode(image).map_err(NotNext::Invalid)?;
    if &h.uuid != uuid {
        return Err(NotNext::ForeignUuid);
    }
    if h.seq != want_seq {
        return Err(NotNext::Seq {
            found: h.seq,
            want: want_seq,
        });
    }
    if h.prev_crc != chain {
        return Err(NotNext::Chain);
    }
    if h.place.is_some() {
        // version 3: the data is at its place (`verify_placed`)
        return Ok((h, crc));
    }
    let need = h.total_blocks() as usize * BLOCK_BYTES;
    if image.len() < need {
        return Err(NotNext::Invalid(FormatError::Short {
            need,
            have: image.len(),
        }));
    }
    for (i, &c) in h.block_crcs.iter().enumerate() {
        let off = (1 + i) * BLOCK_BYTES;
        // MUTANT: record-crc-unchecked s|crc32c::crc32c(&image[off..off + BLOCK_BYTES]) != c|false && c == 0|
        if crc32c::crc32c(&image[off..off + BLOCK_BYTES]) != c {
            return Err(NotNext::Invalid(invalid(
                "record data",
                format!("data block {i} fails its checksum"),
            )));
        }
    }
    Ok((h, crc))
}

/// The chain value the first record after a newly persisted start links to:
/// derived from the superblock generation that persists the start, so a record
/// of an earlier life of the ring (which chained to a real header CRC) does not
/// follow it but by a 2^-32 chance.
pub fn chain_seed(uuid: &[u8; 16], generation: u64) -> u32 {
    let c = crc32c::crc32c(b"SLUICELS");
    let c = crc32c::crc32c_append(c, uuid);
    crc32c::crc32c_append(c, &generation.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: [u8; 16] = [4; 16];

    fn record(seq: u64, prev: u32) -> (RecordHeader, Vec<u8>, u32) {
        let data: Vec<u8> = (0..2 * BLOCK_BYTES)
            .map(|i| (i * 7 + seq as usize) as u8)
            .collect();
        let h = RecordHeader {
            uuid: U,
            seq,
            prev_crc: prev,
            main_lsn: 90,
            first_lsn: 100,
            entries: vec![
                RecordEntry {
                    lba: 7,
                    count: 1,
                    kind: Kind::Data,
                },
                RecordEntry {
                    lba: 50,
                    count: 3,
                    kind: Kind::Trim,
                },
                RecordEntry {
                    lba: 8,
                    count: 1,
                    kind: Kind::Data,
                },
            ],
            block_crcs: data.chunks(BLOCK_BYTES).map(crc32c::crc32c).collect(),
            place: None,
            sectors: 0,
        };
        let mut img = vec![0u8; BLOCK_BYTES];
        let crc = h.encode_into(&mut img);
        img.extend_from_slice(&data);
        (h, img, crc)
    }

    #[test]
    fn record_roundtrips_and_chains() {
        let (h, img, crc) = record(5, 0x1234);
        assert_eq!(verify(&img, &U, 5, 0x1234).unwrap(), (h.clone(), crc));
        assert_eq!(h.lsn_count(), 5);
        assert_eq!(h.lsn_end(), 105);
        assert_eq!(h.total_blocks(), 3);
        let (_, next, _) = record(6, crc);
        assert!(verify(&next, &U, 6, crc).is_ok());
    }

    #[test]
    fn record_torn_at_any_sector_is_refused() {
        let (_, img, _) = record(5, 0x1234);
        // the previous content of the place: an older record of the same volume
        let (_, old, _) = record(1, 0x9999);
        let sectors = img.len() / 512;
        for s in 0..sectors {
            // one sector of the new record missing (old bytes there)
            let mut torn = img.clone();
            torn[s * 512..(s + 1) * 512].copy_from_slice(&old[s * 512..(s + 1) * 512]);
            if torn != img {
                assert!(verify(&torn, &U, 5, 0x1234).is_err(), "sector {s} torn");
            }
            // only sectors up to s landed, over zeros
            let mut prefix = vec![0u8; img.len()];
            prefix[..(s + 1) * 512].copy_from_slice(&img[..(s + 1) * 512]);
            if s + 1 < sectors {
                assert!(verify(&prefix, &U, 5, 0x1234).is_err(), "prefix {s}");
            }
        }
    }

    #[test]
    fn wrong_seq_chain_uuid_or_bits_are_refused() {
        let (_, img, _) = record(5, 0x1234);
        assert_eq!(
            verify(&img, &U, 6, 0x1234),
            Err(NotNext::Seq { found: 5, want: 6 })
        );
        assert_eq!(verify(&img, &U, 5, 0x1235), Err(NotNext::Chain));
        assert_eq!(verify(&img, &[5; 16], 5, 0x1234), Err(NotNext::ForeignUuid));
        for byte in [0usize, 9, 33, 41, 50, 64, 80, 4095, 4096, 3 * 4096 - 1] {
            let mut bad = img.clone();
            bad[byte] ^= 0x20;
            assert!(verify(&bad, &U, 5, 0x1234).is_err(), "byte {byte}");
        }
        assert!(verify(&img[..2 * BLOCK_BYTES], &U, 5, 0x1234).is_err());
        assert!(verify(&[0u8; BLOCK_BYTES], &U, 5, 0x1234).is_err());
    }

    fn record_v3(seq: u64, prev: u32, sectors: u16) -> (RecordHeader, Vec<u8>, u32, Vec<u8>) {
        let data: Vec<u8> = (0..3 * BLOCK_BYTES)
            .map(|i| (i * 13 + i / BLOCK_BYTES * 7 + seq as usize) as u8)
            .collect();
        let h = RecordHeader {
            uuid: U,
            seq,
            prev_crc: prev,
            main_lsn: 90,
            first_lsn: 100,
            entries: vec![
                RecordEntry {
                    lba: 7,
                    count: 2,
                    kind: Kind::Data,
                },
                RecordEntry {
                    lba: 50,
                    count: 3,
                    kind: Kind::Zero,
                },
                RecordEntry {
                    lba: 9,
                    count: 1,
                    kind: Kind::Data,
                },
            ],
            block_crcs: data.chunks(BLOCK_BYTES).map(crc32c::crc32c).collect(),
            place: Some(Place {
                segment: 6,
                chunk_start: 40,
                first_index: 5,
            }),
            sectors,
        };
        let mut img = vec![0u8; sectors as usize * SECTOR_BYTES];
        let crc = h.encode_into(&mut img);
        (h, img, crc, data)
    }

    #[test]
    fn v3_record_roundtrips_in_one_sector_or_padded() {
        // 80 + 3 * 16 + 3 * 4 = 140 bytes: one sector
        assert_eq!(v3_bytes(3, 3), 140);
        for sectors in [1u16, 8] {
            let (h, img, crc, data) = record_v3(5, 0x1234, sectors);
            assert_eq!(img.len(), sectors as usize * 512);
            assert_eq!(h.ring_bytes(), img.len());
            assert_eq!(verify(&img, &U, 5, 0x1234).unwrap(), (h.clone(), crc));
            // a longer read (the rest of the block after it) decodes the same
            let mut more = img.clone();
            more.resize(BLOCK_BYTES, 0xee);
            assert_eq!(RecordHeader::decode(&more).unwrap(), (h.clone(), crc));
            assert_eq!(h.place.unwrap().first_block(), 46);
            assert_eq!((h.lsn_count(), h.data_blocks()), (6, 3));
            assert_eq!(verify_placed(&h, &data), Ok(()));
        }
        // 22 one-block entries fit one sector (80 + 22 * 20 = 520 > 512: 21 do)
        assert!(v3_bytes(21, 21) <= 512 && v3_bytes(22, 22) > 512);
        assert!(fits_v3(100, 100) && !fits_v3(250, 250));
    }

    #[test]
    fn v3_record_torn_at_any_sector_is_refused() {
        // an 8-sector record (padded): every sector is under the CRC
        let (_, img, _, _) = record_v3(5, 0x1234, 8);
        let (_, old, _, _) = record_v3(1, 0x9999, 8);
        for s in 0..8 {
            let mut torn = img.clone();
            torn[s * 512..(s + 1) * 512].copy_from_slice(&old[s * 512..(s + 1) * 512]);
            if torn != img {
                assert!(verify(&torn, &U, 5, 0x1234).is_err(), "sector {s} torn");
            }
            // (the padding sectors are zero already)
            let mut zeroed = img.clone();
            zeroed[s * 512..(s + 1) * 512].fill(0);
            if zeroed != img {
                assert!(verify(&zeroed, &U, 5, 0x1234).is_err(), "sector {s} zero");
            }
            let mut ones = img.clone();
            ones[s * 512..(s + 1) * 512].fill(0xff);
            assert!(verify(&ones, &U, 5, 0x1234).is_err(), "sector {s} garbage");
        }
        // short read, wrong sector count, flipped bits
        assert!(verify(&img[..7 * 512], &U, 5, 0x1234).is_err());
        for byte in [0usize, 8, 64, 68, 72, 76, 80, 140, 511, 512, 4095] {
            let mut bad = img.clone();
            bad[byte] ^= 0x10;
            assert!(verify(&bad, &U, 5, 0x1234).is_err(), "byte {byte}");
        }
        assert_eq!(
            verify(&img, &U, 6, 0x1234),
            Err(NotNext::Seq { found: 5, want: 6 })
        );
        assert_eq!(verify(&img, &U, 5, 1), Err(NotNext::Chain));
    }

    #[test]
    fn placed_data_must_match_every_crc() {
        let (h, _, _, data) = record_v3(5, 0x1234, 1);
        for j in 0..3 {
            // a torn data block: one sector of it still the old content
            for s in 0..8 {
                let mut torn = data.clone();
                torn[j * BLOCK_BYTES + s * 512] ^= 1;
                assert_eq!(verify_placed(&h, &torn), Err(j), "block {j} sector {s}");
            }
        }
        // the blocks in the wrong order
        let mut swapped = data.clone();
        swapped.rotate_left(BLOCK_BYTES);
        assert_eq!(verify_placed(&h, &swapped), Err(0));
    }

    #[test]
    fn chain_seed_changes_with_generation() {
        assert_ne!(chain_seed(&U, 1), chain_seed(&U, 2));
        assert!(fits(8, 8) && !fits(200, 300));
    }
}
