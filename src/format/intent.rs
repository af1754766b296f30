//! Intent log records (format v2, docs/format-v2.md §4.2): one header block
//! (fixed fields, entries, one CRC32C per data block) and the data blocks of
//! its data entries, written with one write into the log ring. Records form a
//! chain: each carries a log-local sequence number (+1 per record) and the
//! header CRC of the record before it, so replay (ZFS's `zil_parse` rule)
//! applies records while each verifies and follows, and stops at the first
//! that does not.
//!
//! Invariant: `verify` accepts a record only if its header CRC, every data
//! block's CRC, the volume uuid, the expected seq and the expected chain value
//! all match; a record torn at any 512-byte sector, a stale record of an
//! earlier lap of the ring, or a record of another volume is refused.

use super::chunk::{Kind, MAX_ENTRY_LBA};
use super::*;

pub const RECORD_MAGIC: [u8; 8] = *b"SLUICELR";
/// Fixed part of the header block; entries start here.
pub const RECORD_FIXED_BYTES: usize = 64;
pub const RECORD_ENTRY_BYTES: usize = 16;
const HEADER_CRC_FIELD: usize = 44;

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
    /// Blocks the record takes in the ring (header + data).
    pub fn total_blocks(&self) -> u32 {
        1 + self.data_blocks()
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
        block.fill(0);
        block[0..8].copy_from_slice(&RECORD_MAGIC);
        put_u16(block, 8, FORMAT_VERSION_2);
        put_u16(block, 10, self.entries.len() as u16);
        put_u32(block, 12, self.data_blocks());
        block[16..32].copy_from_slice(&self.uuid);
        put_u64(block, 32, self.seq);
        put_u32(block, 40, self.prev_crc);
        put_u64(block, 48, self.main_lsn);
        put_u64(block, 56, self.first_lsn);
        let mut delta = 0u32;
        for (i, e) in self.entries.iter().enumerate() {
            let off = RECORD_FIXED_BYTES + i * RECORD_ENTRY_BYTES;
            put_u64(block, off, (e.kind as u64) << 56 | e.lba);
            put_u32(block, off + 8, e.count);
            put_u32(block, off + 12, delta);
            delta += e.count;
        }
        let crcs = RECORD_FIXED_BYTES + self.entries.len() * RECORD_ENTRY_BYTES;
        for (i, c) in self.block_crcs.iter().enumerate() {
            put_u32(block, crcs + 4 * i, *c);
        }
        let crc = header_crc(block);
        put_u32(block, HEADER_CRC_FIELD, crc);
        crc
    }

    /// Decode and validate a header block (its CRC included); returns the
    /// header and its CRC. The data blocks are checked by `verify`.
    pub fn decode(block: &[u8]) -> Result<(RecordHeader, u32), FormatError> {
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
        let mut entries = Vec::with_capacity(n);
        let (mut delta, mut data) = (0u64, 0usize);
        for i in 0..n {
            let off = RECORD_FIXED_BYTES + i * RECORD_ENTRY_BYTES;
            let word = get_u64(block, off);
            // records carry raw blocks only: fragments are packed at seal
            let kind = Kind::from_u8((word >> 56) as u8)
                .filter(|&k| k != Kind::Packed)
                .ok_or_else(|| invalid("record entry.kind", (word >> 56).to_string()))?;
            let lba = word & MAX_ENTRY_LBA;
            let count = get_u32(block, off + 8);
            if count == 0 || lba + count as u64 > MAX_ENTRY_LBA {
                return Err(invalid("record entry.count", count.to_string()));
            }
            if get_u32(block, off + 12) as u64 != delta {
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
            },
            crc,
        ))
    }
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

    #[test]
    fn chain_seed_changes_with_generation() {
        assert_ne!(chain_seed(&U, 1), chain_seed(&U, 2));
        assert!(fits(8, 8) && !fits(200, 300));
    }
}
