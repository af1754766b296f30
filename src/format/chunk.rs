//! Chunk: the unit of atomicity of the log. One 4 KiB header block (fixed header,
//! up to MAX_ENTRIES entries, one CRC32C per data block), followed by the data
//! blocks of its data entries, in entry order. The header block carries a CRC32C
//! of itself, and the CRC32C of every data block: together they verify the whole
//! chunk with one CRC pass over the data, done once at append time.
//!
//! Invariant: `ChunkHeader::decode` accepts only headers whose entries are well
//! formed and whose data-entry counts add up to `data_blocks`; `verify` then
//! proves the header's CRC and the data.

use super::*;

pub const CHUNK_MAGIC: [u8; 8] = *b"SLUICECK";
pub const HEADER_BYTES: usize = 72;
pub const ENTRY_BYTES: usize = 16;
/// Largest chunk: one header block plus 255 data blocks = 1 MiB.
pub const MAX_CHUNK_BLOCKS: u32 = 256;
pub const MAX_DATA_BLOCKS: u32 = MAX_CHUNK_BLOCKS - 1;
/// Where the per-data-block CRC32C array starts in the header block.
pub const BLOCK_CRC_OFFSET: usize = BLOCK_BYTES - 12 - 4 * MAX_DATA_BLOCKS as usize; // 3064
pub const MAX_ENTRIES: usize = (BLOCK_CRC_OFFSET - HEADER_BYTES) / ENTRY_BYTES; // 187
/// Reserved (written as zero, not checked) in format version 1; the chain
/// field (`Chain`) in version 2, covered by the header CRC.
const RESERVED_FIELD: usize = 64;
/// Header-block CRC32C, computed with bytes 64..72 zeroed (version 1) or
/// 68..72 zeroed (version 2: the chain field is covered; it was written as
/// zero before the chain existed, so older v2 headers verify the same). It
/// covers the block CRC array, so it and the block CRCs together verify the
/// whole chunk.
const HEADER_CRC_FIELD: usize = 68;

fn header_crc(block: &[u8]) -> u32 {
    let covered = if get_u16(block, 8) == FORMAT_VERSION_2 {
        HEADER_CRC_FIELD
    } else {
        RESERVED_FIELD
    };
    let crc = crc32c::crc32c(&block[..covered]);
    let crc = crc32c::crc32c_append(crc, &[0u8; 8][..HEADER_BYTES - covered]);
    crc32c::crc32c_append(crc, &block[HEADER_BYTES..BLOCK_BYTES])
}

/// Bit 31 of the stream word (byte 44): the header's check is `mix` of its
/// CRC32C, not the CRC itself (format v2 `MIXED_HEADER_CHECK`, docs/format-v2.md
/// §6.1). The flag is covered by the check, and the XOR of an odd number of
/// flagged headers is flagged, so a block rebuilt from stale parity cannot
/// switch itself to the linear check.
pub const MIXED_CHECK_FLAG: u32 = 1 << 31;

/// The non-linear bijection a `MIXED_CHECK_FLAG` header stores instead of its
/// CRC32C: murmur3's 32-bit finalizer (xor-shifts and odd multiplies, each
/// invertible, so no two CRCs share a check). Why: CRC32C is affine over
/// GF(2), so the XOR of an odd number of equal-length blocks whose CRCs
/// verify verifies too; a stripe set that rebuilds a block from a parity
/// that disagrees with its data (the write hole for data no FLUSH
/// acknowledged) then made a stale header that recovery replayed
/// (docs/stripes.md §0, finding 1). `mix(a ^ b ^ c)` equals
/// `mix(a) ^ mix(b) ^ mix(c)` only by chance (tested).
pub fn mix(crc: u32) -> u32 {
    let mut h = crc;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The check a header block stores: its CRC32C, or `mix` of it when the
/// header carries `MIXED_CHECK_FLAG`.
fn header_check(block: &[u8]) -> u32 {
    let crc = header_crc(block);
    // MUTANT: mixed-check-linear s|if get_u32(block, 44) & MIXED_CHECK_FLAG != 0 {|if false {|
    if get_u32(block, 44) & MIXED_CHECK_FLAG != 0 {
        mix(crc)
    } else {
        crc
    }
}

/// Open-segment classes a chain tells apart (the user stream and up to three
/// GC classes): 2 bits of the chain field.
pub const CHAIN_CLASSES: usize = 4;
/// The largest seq distance to a predecessor the chain field holds (29 bits);
/// a farther one is written as unknown.
pub const CHAIN_MAX_DELTA: u64 = (1 << 29) - 1;
const CHAIN_FLAG: u32 = 1 << 31;

/// Format v2 `CHAIN` (docs/format-v2.md §3): the chunk's open-segment class
/// and the seq of the previous chunk of that class (0: unknown, e.g. the
/// first of its class since the mount). On the media, the u32 at byte 64 of
/// a version 2 header: bit 31 set, class in bits 29..31, `seq - prev_seq` in
/// bits 0..29 (0 = unknown); all zero = no chain (builds before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub class: u8,
    pub prev_seq: u64,
}

impl Chain {
    fn encode(&self, seq: u64) -> u32 {
        assert!((self.class as usize) < CHAIN_CLASSES, "chain class");
        let delta = match seq.checked_sub(self.prev_seq) {
            Some(d) if self.prev_seq != 0 && d <= CHAIN_MAX_DELTA => d as u32,
            _ => 0,
        };
        CHAIN_FLAG | (self.class as u32) << 29 | delta
    }

    fn decode(v: u32, seq: u64) -> Result<Option<Chain>, FormatError> {
        if v == 0 {
            return Ok(None);
        }
        if v & CHAIN_FLAG == 0 {
            return Err(invalid("chain", format!("{v:#x} without its flag bit")));
        }
        let delta = (v & CHAIN_MAX_DELTA as u32) as u64;
        if delta > seq {
            return Err(invalid(
                "chain",
                format!("predecessor {delta} below seq {seq}"),
            ));
        }
        Ok(Some(Chain {
            class: ((v >> 29) & 3) as u8,
            prev_seq: if delta == 0 { 0 } else { seq - delta },
        }))
    }
}
/// Magic of a tombstone sector (see `tombstone`).
pub const TOMB_MAGIC: [u8; 8] = *b"SLUICETB";
/// Bytes of a tombstone sector that identify it: magic, volume uuid, segment.
const TOMB_ID_BYTES: usize = 28;
const SECTOR_BYTES: usize = 512;

/// The block the reuse barrier (and mount) writes over a segment's first block.
/// Every 512-byte sector starts with `TOMB_MAGIC`, the volume's uuid and the
/// segment number (the rest is zero), so a wipe torn by a power cut at any
/// subset of its sectors is still recognisable as a wipe from any one sector
/// that landed, while no bit flip in a chunk header can make a sector look like
/// one. (Format v1 volumes made before this wrote zeros; a zero first sector
/// still reads as a tombstone.)
pub fn tombstone(block: &mut [u8], uuid: &[u8; 16], segment: u32) {
    assert_eq!(block.len(), BLOCK_BYTES, "a tombstone is one block");
    block.fill(0);
    for sector in block.chunks_exact_mut(SECTOR_BYTES) {
        sector[0..8].copy_from_slice(&TOMB_MAGIC);
        sector[8..24].copy_from_slice(uuid);
        sector[24..28].copy_from_slice(&segment.to_le_bytes());
    }
}

/// Whether any 512-byte sector of `block` is a tombstone sector of this volume
/// and segment: the barrier issued a wipe of this block (whole or torn).
pub fn has_tombstone_sector(block: &[u8], uuid: &[u8; 16], segment: u32) -> bool {
    let mut id = [0u8; TOMB_ID_BYTES];
    id[0..8].copy_from_slice(&TOMB_MAGIC);
    id[8..24].copy_from_slice(uuid);
    id[24..28].copy_from_slice(&segment.to_le_bytes());
    block
        .chunks_exact(SECTOR_BYTES)
        .any(|sector| sector[..TOMB_ID_BYTES] == id)
}

/// Bits of a header's identity (magic, uuid, segment: 224 bits) that may
/// differ from ours in `peek_seq` and still name our chunk: damage flips a bit
/// or two; another volume's header differs in about half of its 128 random
/// uuid bits (two or fewer by chance: about 2^-110).
pub const PEEK_IDENTITY_FLIPS: u32 = 2;

/// A block that starts like a chunk header of this volume and segment (magic,
/// uuid, segment, allowing `PEEK_IDENTITY_FLIPS` flipped bits among them;
/// nothing else checked, not even its CRC): the seq it names, a hint of which
/// chunk a damaged header was. None: not one of ours, or shorter than a header.
/// (The DST's damage sweep found a flipped uuid bit in the last header of a
/// segment below the watermark taken for the end of the log, which lost a
/// flushed write, when the identity had to match exactly.)
pub fn peek_seq(block: &[u8], uuid: &[u8; 16], segment: u32) -> Option<u64> {
    if block.len() < HEADER_BYTES {
        return None;
    }
    let flips =
        |a: &[u8], b: &[u8]| -> u32 { a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum() };
    let seg = segment.to_le_bytes();
    let off = flips(&block[0..8], &CHUNK_MAGIC)
        + flips(&block[16..32], uuid)
        + flips(&block[40..44], &seg);
    // MUTANT: peek-identity-exact s|off <= PEEK_IDENTITY_FLIPS|off == 0|
    (off <= PEEK_IDENTITY_FLIPS).then(|| get_u64(block, 32))
}

/// Smallest segment the format allows (32 KiB); tests use tiny segments.
pub const MIN_SEGMENT_BLOCKS: u32 = 8;
/// Largest logical block address an entry can carry (56 bits).
pub const MAX_ENTRY_LBA: u64 = (1 << 56) - 1;
/// `src` value meaning "not a relocation".
pub const NO_SRC: u32 = u32::MAX;

/// What an entry says about `count` logical blocks starting at `lba`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `count` data blocks follow in the chunk's data area.
    Data = 0,
    /// Blocks read as all 0x00; no data stored.
    Zero = 1,
    /// Blocks read as all 0xFF; no data stored.
    Ones = 2,
    /// Blocks were discarded; they read as zeros; no data stored.
    Trim = 3,
    /// Format v2 `COMPRESSION` (docs/format-v2.md §5): `count` LZ4 fragments,
    /// in entry order, in the packed blocks that follow the chunk's raw data
    /// blocks (`format::packed`). Takes no raw data block of its own.
    Packed = 4,
}

impl Kind {
    pub(crate) fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Data,
            1 => Kind::Zero,
            2 => Kind::Ones,
            3 => Kind::Trim,
            4 => Kind::Packed,
            _ => return None,
        })
    }
}

/// Flag bit in the kind byte: the entry is a GC relocation. Replay applies it like
/// any record, in seq order: the engine seals a GC chunk before any user record
/// that supersedes one of its blocks (ARCHITECTURE.md, "Relocations replay
/// unconditionally"); recovery only counts it (`relocation_replayed`).
const RELOCATION_FLAG: u8 = 0x80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub lba: u64,
    pub count: u32,
    pub kind: Kind,
    /// For a relocation: data = physical block the first block was copied from;
    /// virtual kinds = segment that held the record. NO_SRC otherwise.
    pub src: u32,
}

impl Entry {
    pub fn is_relocation(&self) -> bool {
        self.src != NO_SRC
    }
    /// Raw data blocks the entry takes (a Packed entry's fragments live in
    /// the chunk's packed blocks, counted by `ChunkHeader::packed_blocks`).
    pub fn data_blocks(&self) -> u32 {
        if self.kind == Kind::Data {
            self.count
        } else {
            0
        }
    }
    /// Fragments the entry carries (Packed entries).
    pub fn fragments(&self) -> u32 {
        if self.kind == Kind::Packed {
            self.count
        } else {
            0
        }
    }
    fn encode(&self, b: &mut [u8]) {
        let flag = if self.is_relocation() {
            RELOCATION_FLAG
        } else {
            0
        };
        let word = ((self.kind as u8 | flag) as u64) << 56 | self.lba;
        put_u64(b, 0, word);
        put_u32(b, 8, self.count);
        put_u32(b, 12, self.src);
    }
    fn decode(b: &[u8]) -> Result<Entry, FormatError> {
        let word = get_u64(b, 0);
        let kind_byte = (word >> 56) as u8;
        let kind = Kind::from_u8(kind_byte & !RELOCATION_FLAG)
            .ok_or_else(|| invalid("entry.kind", kind_byte.to_string()))?;
        let lba = word & MAX_ENTRY_LBA;
        let count = get_u32(b, 8);
        let src = get_u32(b, 12);
        if count == 0 {
            return Err(invalid("entry.count", "0"));
        }
        if (kind_byte & RELOCATION_FLAG != 0) != (src != NO_SRC) {
            return Err(invalid("entry.src", "relocation flag and source disagree"));
        }
        if lba
            .checked_add(count as u64)
            .is_none_or(|end| end > MAX_ENTRY_LBA)
        {
            return Err(invalid("entry.lba", "extent overflows"));
        }
        Ok(Entry {
            lba,
            count,
            kind,
            src,
        })
    }
}

/// Stream that wrote a chunk: new host data, or GC relocation (kept apart: GC data is colder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    User = 0,
    Gc = 1,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkHeader {
    pub uuid: [u8; 16],
    pub seq: u64,
    pub segment: u32,
    pub stream: Stream,
    pub timestamp_ns: u64,
    /// Every chunk with seq < this was durable (flushed) when this one was sealed.
    pub durable_seq: u64,
    pub data_blocks: u32,
    pub entries: Vec<Entry>,
    /// CRC32C of each data block, in data order (len == data_blocks).
    pub block_crcs: Vec<u32>,
    /// Format v2 (volumes with the LSN feature): the LSNs of the user block
    /// records the chunk carries, `first..first + count`, one per block record
    /// in entry order (count 0 for GC chunks). None: a version 1 header.
    pub lsn: Option<LsnRange>,
    /// Format v2 with `CHAIN`: class and predecessor (None: no chain, v1 or
    /// a build before it). Written only in version 2 headers.
    pub chain: Option<Chain>,
    /// The header's check is `mix(CRC32C)` (`MIXED_CHECK_FLAG`, volumes with
    /// `MIXED_HEADER_CHECK`); false: the CRC32C itself.
    pub mixed_check: bool,
}

/// The order numbers of a chunk's user block records (docs/format-v2.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LsnRange {
    pub first: u64,
    pub count: u32,
}

impl LsnRange {
    pub fn end(&self) -> u64 {
        self.first + self.count as u64
    }
}

/// Where a v2 header keeps `first_lsn` (u64) and `lsn_count` (u32): the 12
/// bytes after the block CRC array, reserved (zero) in version 1.
const LSN_FIELD: usize = BLOCK_CRC_OFFSET + 4 * MAX_DATA_BLOCKS as usize; // 4084

impl ChunkHeader {
    /// Total blocks the chunk occupies on the media (header + data).
    pub fn total_blocks(&self) -> u32 {
        1 + self.data_blocks
    }

    /// Raw data blocks (those of Data entries, in entry order): data
    /// indexes `0..raw_blocks()`.
    pub fn raw_blocks(&self) -> u32 {
        self.entries.iter().map(|e| e.data_blocks()).sum()
    }

    /// Packed blocks after the raw ones (data indexes
    /// `raw_blocks()..data_blocks`), holding the fragments of the Packed
    /// entries.
    pub fn packed_blocks(&self) -> u32 {
        self.data_blocks - self.raw_blocks()
    }

    /// Encode into `block` (exactly BLOCK_BYTES) with the CRC field zero; call
    /// `seal_crc` to add the header CRC.
    pub fn encode_into(&self, block: &mut [u8]) {
        debug_assert_eq!(block.len(), BLOCK_BYTES);
        debug_assert!(self.entries.len() <= MAX_ENTRIES);
        debug_assert!(packed_count_ok(
            self.data_blocks as u64 - self.raw_blocks() as u64,
            self.entries.iter().map(|e| e.fragments() as u64).sum()
        ));
        debug_assert_eq!(self.block_crcs.len(), self.data_blocks as usize);
        block.fill(0);
        block[0..8].copy_from_slice(&CHUNK_MAGIC);
        put_u16(
            block,
            8,
            if self.lsn.is_some() {
                FORMAT_VERSION_2
            } else {
                FORMAT_VERSION
            },
        );
        put_u16(block, 10, self.entries.len() as u16);
        put_u32(block, 12, self.data_blocks);
        block[16..32].copy_from_slice(&self.uuid);
        put_u64(block, 32, self.seq);
        put_u32(block, 40, self.segment);
        put_u32(
            block,
            44,
            self.stream as u32
                | if self.mixed_check {
                    MIXED_CHECK_FLAG
                } else {
                    0
                },
        );
        put_u64(block, 48, self.timestamp_ns);
        put_u64(block, 56, self.durable_seq);
        for (i, e) in self.entries.iter().enumerate() {
            let off = HEADER_BYTES + i * ENTRY_BYTES;
            e.encode(&mut block[off..off + ENTRY_BYTES]);
        }
        for (i, c) in self.block_crcs.iter().enumerate() {
            put_u32(block, BLOCK_CRC_OFFSET + 4 * i, *c);
        }
        if let Some(l) = self.lsn {
            put_u64(block, LSN_FIELD, l.first);
            put_u32(block, LSN_FIELD + 8, l.count);
        }
        if let Some(c) = self.chain {
            assert!(self.lsn.is_some(), "a chain only in a version 2 header");
            put_u32(block, RESERVED_FIELD, c.encode(self.seq));
        }
    }

    /// Decode and validate a header block. Does not check the CRC (the data is not
    /// here yet); use `verify` for that.
    pub fn decode(block: &[u8]) -> Result<ChunkHeader, FormatError> {
        if block.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: block.len(),
            });
        }
        if block[0..8] != CHUNK_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if header_check(block) != get_u32(block, HEADER_CRC_FIELD) {
            return Err(FormatError::Checksum);
        }
        let version = get_u16(block, 8);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_2 {
            return Err(FormatError::Version(version));
        }
        let n = get_u16(block, 10) as usize;
        if n > MAX_ENTRIES {
            return Err(invalid("entry_count", n.to_string()));
        }
        let data_blocks = get_u32(block, 12);
        if data_blocks > MAX_DATA_BLOCKS {
            return Err(invalid("data_blocks", data_blocks.to_string()));
        }
        let mixed_check = get_u32(block, 44) & MIXED_CHECK_FLAG != 0;
        let stream = match get_u32(block, 44) & !MIXED_CHECK_FLAG {
            0 => Stream::User,
            1 => Stream::Gc,
            s => return Err(invalid("stream", s.to_string())),
        };
        let mut entries = Vec::with_capacity(n);
        let (mut sum, mut fragments): (u64, u64) = (0, 0);
        for i in 0..n {
            let off = HEADER_BYTES + i * ENTRY_BYTES;
            let e = Entry::decode(&block[off..off + ENTRY_BYTES])?;
            sum += e.data_blocks() as u64;
            fragments += e.fragments() as u64;
            entries.push(e);
        }
        // raw blocks first, then the packed blocks of the fragments (none
        // without Packed entries: the version 1 rule, sum == data_blocks)
        if sum > data_blocks as u64 || !packed_count_ok(data_blocks as u64 - sum, fragments) {
            return Err(invalid(
                "data_blocks",
                format!(
                    "{data_blocks} but entries carry {sum} raw blocks and {fragments} fragments"
                ),
            ));
        }
        let block_crcs = (0..data_blocks as usize)
            .map(|i| get_u32(block, BLOCK_CRC_OFFSET + 4 * i))
            .collect();
        let lsn = (version == FORMAT_VERSION_2).then(|| LsnRange {
            first: get_u64(block, LSN_FIELD),
            count: get_u32(block, LSN_FIELD + 8),
        });
        if let Some(l) = lsn {
            if l.first.checked_add(l.count as u64).is_none() {
                return Err(invalid("first_lsn", "LSN range overflows"));
            }
        }
        let seq = get_u64(block, 32);
        let chain = match version {
            FORMAT_VERSION_2 => Chain::decode(get_u32(block, RESERVED_FIELD), seq)?,
            _ => None,
        };
        Ok(ChunkHeader {
            uuid: block[16..32].try_into().unwrap(),
            seq,
            segment: get_u32(block, 40),
            stream,
            timestamp_ns: get_u64(block, 48),
            durable_seq: get_u64(block, 56),
            data_blocks,
            entries,
            block_crcs,
            lsn,
            chain,
            mixed_check,
        })
    }
}

/// Whether `packed` packed blocks can hold `fragments` fragments: none
/// without fragments; else at least one and at most one per fragment (a
/// fragment is shorter than a block's payload, so every packed block but a
/// last one holding only the end of a spanning fragment has a fragment
/// starting in it, and that last one's fragment started in a block that
/// already had one before it).
fn packed_count_ok(packed: u64, fragments: u64) -> bool {
    if fragments == 0 {
        packed == 0
    } else {
        (1..=fragments).contains(&packed)
    }
}

/// Write the header CRC into a complete chunk image. The header already holds the
/// CRC of every data block, so header CRC + block CRCs cover the whole chunk.
pub fn seal_crc(image: &mut [u8]) {
    if get_u16(image, 8) != FORMAT_VERSION_2 {
        put_u32(image, RESERVED_FIELD, 0);
    }
    let h = header_check(&image[..BLOCK_BYTES]);
    put_u32(image, HEADER_CRC_FIELD, h);
}

/// The CRC of data block `i` as stored in the block CRC array of `header`
/// (a sealed chunk's first block, not decoded: the commit stage records a
/// chunk's CRCs just before its write, and decoding would cost a header
/// parse per chunk on the write path). `i` < `MAX_DATA_BLOCKS`.
pub fn stored_block_crc(header: &[u8], i: usize) -> u32 {
    assert!(i < MAX_DATA_BLOCKS as usize, "data block {i} of a chunk");
    get_u32(header, BLOCK_CRC_OFFSET + 4 * i)
}

/// CRC32C of one data block, as stored in the header's block CRC array.
/// The same function as `crc32c::crc32c` (a test compares them on random
/// blocks), computed by `crc-fast`: carry-less multiply folding (VPCLMULQDQ
/// where the CPU has it, chosen at run time), ~40 ns per 4 KiB here against
/// ~300 ns for the SSE4.2 `crc32` instruction loop; every host block written
/// and every block read is checksummed, so this is on both hot paths.
pub fn block_crc(block: &[u8]) -> u32 {
    // CRC-32/ISCSI is CRC32C; its 32-bit result comes back widened to u64
    // MUTANT: block-crc-wrong-polynomial s|Crc32Iscsi|Crc32IsoHdlc|
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, block) as u32
}

/// Check a complete chunk image (header block + exactly its data blocks) against its
/// header CRC, every block CRC, and the expected volume UUID. Returns the header.
pub fn verify(image: &[u8], uuid: &[u8; 16]) -> Result<ChunkHeader, FormatError> {
    let h = ChunkHeader::decode(image)?;
    let need = h.total_blocks() as usize * BLOCK_BYTES;
    if image.len() != need {
        return Err(FormatError::Short {
            need,
            have: image.len(),
        });
    }
    if &h.uuid != uuid {
        return Err(invalid("uuid", "chunk belongs to another volume"));
    }
    for (i, &c) in h.block_crcs.iter().enumerate() {
        let off = (1 + i) * BLOCK_BYTES;
        if block_crc(&image[off..off + BLOCK_BYTES]) != c {
            return Err(invalid(
                "data",
                format!("data block {i} fails its checksum"),
            ));
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_crc_is_crc32c_on_every_length_and_content() {
        // the check value of CRC-32C (RFC 3720 test vector set's "123456789")
        assert_eq!(block_crc(b"123456789"), 0xE306_9283);
        // differential: the stored format was written with `crc32c::crc32c`
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut buf = vec![0u8; 3 * BLOCK_BYTES + 7];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        for len in (0..600).chain([4095, 4096, 4097, 8192, 3 * BLOCK_BYTES + 7]) {
            for start in [0, 1, 3] {
                let end = (start + len).min(buf.len());
                let d = &buf[start..end];
                assert_eq!(block_crc(d), crc32c::crc32c(d), "length {len} at {start}");
            }
        }
        for v in [0u8, 0xff] {
            let b = [v; BLOCK_BYTES];
            assert_eq!(block_crc(&b), crc32c::crc32c(&b));
        }
    }

    fn sample_image() -> (ChunkHeader, Vec<u8>) {
        let h = ChunkHeader {
            uuid: [9; 16],
            seq: 77,
            segment: 3,
            stream: Stream::Gc,
            timestamp_ns: 123,
            durable_seq: 70,
            data_blocks: 2,
            block_crcs: vec![block_crc(&[0xab; BLOCK_BYTES]); 2],
            entries: vec![
                Entry {
                    lba: 10,
                    count: 2,
                    kind: Kind::Data,
                    src: 55,
                },
                Entry {
                    lba: 100,
                    count: 1 << 20,
                    kind: Kind::Trim,
                    src: NO_SRC,
                },
                Entry {
                    lba: 5,
                    count: 1,
                    kind: Kind::Ones,
                    src: 4,
                },
            ],
            lsn: None,
            chain: None,
            mixed_check: false,
        };
        let mut img = vec![0u8; 3 * BLOCK_BYTES];
        h.encode_into(&mut img[..BLOCK_BYTES]);
        img[BLOCK_BYTES..].fill(0xab);
        seal_crc(&mut img);
        (h, img)
    }

    #[test]
    fn chunk_roundtrips() {
        let (h, img) = sample_image();
        assert_eq!(verify(&img, &[9; 16]).unwrap(), h);
    }

    /// A header of `sample_image`'s shape with this seq, entries' lbas and
    /// check, as the segment's chunk headers of one life and another would be.
    fn header_block(seq: u64, lba: u64, mixed_check: bool, v2: bool) -> Vec<u8> {
        let (mut h, _) = sample_image();
        h.seq = seq;
        h.entries[0].lba = lba;
        h.block_crcs = vec![seq as u32 ^ 0x5555, lba as u32];
        h.mixed_check = mixed_check;
        if v2 {
            h.lsn = Some(LsnRange {
                first: seq * 3,
                count: 2,
            });
            h.chain = Some(Chain {
                class: 1,
                prev_seq: seq - 1,
            });
        }
        let mut b = vec![0u8; BLOCK_BYTES];
        h.encode_into(&mut b);
        seal_crc(&mut b);
        assert_eq!(ChunkHeader::decode(&b).unwrap(), h);
        b
    }

    /// docs/stripes.md §0 finding 1: a stripe set rebuilding a block from
    /// parity that disagrees with its data (the write hole, for data no FLUSH
    /// acknowledged) returns the XOR of other blocks. With the CRC32C as the
    /// check, the XOR of three valid headers is a valid header (CRC32C is
    /// affine); with `mix` of it (`MIXED_CHECK_FLAG`) it is not.
    #[test]
    fn the_xor_of_three_headers_verifies_with_the_crc_and_not_with_the_mixed_check() {
        let xor3 = |a: &[u8], b: &[u8], c: &[u8]| -> Vec<u8> {
            (0..BLOCK_BYTES).map(|i| a[i] ^ b[i] ^ c[i]).collect()
        };
        for v2 in [false, true] {
            let plain = [110, 111, 136].map(|s| header_block(s, s * 7, false, v2));
            let x = xor3(&plain[0], &plain[1], &plain[2]);
            let forged = ChunkHeader::decode(&x).expect("linear: the XOR verifies");
            assert_eq!(forged.seq, 110 ^ 111 ^ 136);
            let mixed = [110, 111, 136].map(|s| header_block(s, s * 7, true, v2));
            let x = xor3(&mixed[0], &mixed[1], &mixed[2]);
            assert_eq!(get_u32(&x, 44) & MIXED_CHECK_FLAG, MIXED_CHECK_FLAG);
            assert_eq!(
                ChunkHeader::decode(&x),
                Err(FormatError::Checksum),
                "v2 {v2}"
            );
            // an old life's plain headers with a new life's mixed one, either
            // way round: the flag says mixed or plain, neither check holds
            for (a, b, c) in [
                (&plain[0], &plain[1], &mixed[2]),
                (&mixed[0], &mixed[1], &plain[2]),
            ] {
                let x = xor3(a, b, c);
                assert_eq!(ChunkHeader::decode(&x), Err(FormatError::Checksum));
            }
        }
        // one flipped bit in a mixed header (its flag included) fails too
        let mut b = header_block(9, 1, true, true);
        for bit in [0, 44 * 8 + 31, 68 * 8, 100 * 8 + 3, 4095 * 8 + 7] {
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(ChunkHeader::decode(&b).is_err(), "bit {bit}");
            b[bit / 8] ^= 1 << (bit % 8);
        }
        assert!(ChunkHeader::decode(&b).unwrap().mixed_check);
    }

    /// `mix` is a bijection (no two CRCs share a check) and not linear: over
    /// many triples of CRCs, `mix(a ^ b ^ c) == mix(a) ^ mix(b) ^ mix(c)`
    /// never holds (a linear map would make it hold for all).
    #[test]
    fn mix_is_a_bijection_and_not_linear_over_xor() {
        // invert each step: xorshift by >= 16 is its own inverse after one
        // step; >> 13 needs two; odd multipliers have inverses mod 2^32
        let inv_mul = |k: u32| {
            let mut x = k;
            for _ in 0..5 {
                x = x.wrapping_mul(2u32.wrapping_sub(k.wrapping_mul(x)));
            }
            x
        };
        let unmix = |mut h: u32| {
            h ^= h >> 16;
            h = h.wrapping_mul(inv_mul(0xc2b2_ae35));
            h ^= (h >> 13) ^ (h >> 26);
            h = h.wrapping_mul(inv_mul(0x85eb_ca6b));
            h ^ (h >> 16)
        };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u32
        };
        let mut linear = 0;
        for _ in 0..1_000_000 {
            let (a, b, c) = (next(), next(), next());
            assert_eq!(unmix(mix(a)), a);
            if mix(a ^ b ^ c) == mix(a) ^ mix(b) ^ mix(c) {
                linear += 1;
            }
        }
        assert_eq!(linear, 0);
    }

    /// `sample_image` as a version 2 header with `chain`.
    fn chained(chain: Option<Chain>) -> (ChunkHeader, Vec<u8>) {
        let (mut h, mut img) = sample_image();
        h.lsn = Some(LsnRange { first: 0, count: 0 });
        h.chain = chain;
        h.encode_into(&mut img[..BLOCK_BYTES]);
        seal_crc(&mut img);
        (h, img)
    }

    #[test]
    fn the_chain_roundtrips_in_v2_headers_and_its_crc_covers_it() {
        let c = Chain {
            class: 3,
            prev_seq: 60,
        };
        let (h, img) = chained(Some(c));
        assert_eq!(verify(&img, &[9; 16]).unwrap(), h);
        assert_eq!(get_u32(&img, 64), 1 << 31 | 3 << 29 | 17);
        // a flipped bit in it is damage (v1 never looked at these bytes)
        let mut bad = img.clone();
        bad[64] ^= 4;
        assert_eq!(ChunkHeader::decode(&bad), Err(FormatError::Checksum));
        let (_, mut v1) = sample_image();
        v1[64] ^= 4;
        assert!(ChunkHeader::decode(&v1).is_ok(), "v1: 64..68 not covered");
        // unknown predecessor (first of its class since the mount, or too far)
        for (seq, prev_seq) in [(77, 0), (CHAIN_MAX_DELTA + 2, 1)] {
            let (mut h, mut img) = sample_image();
            h.seq = seq;
            h.lsn = Some(LsnRange::default());
            h.chain = Some(Chain { class: 1, prev_seq });
            h.encode_into(&mut img[..BLOCK_BYTES]);
            seal_crc(&mut img);
            let got = ChunkHeader::decode(&img).unwrap().chain.unwrap();
            assert_eq!((got.class, got.prev_seq), (1, 0), "{seq} {prev_seq}");
        }
        let (mut h, mut img) = sample_image();
        h.seq = CHAIN_MAX_DELTA + 1;
        h.lsn = Some(LsnRange::default());
        h.chain = Some(Chain {
            class: 2,
            prev_seq: 1,
        });
        h.encode_into(&mut img[..BLOCK_BYTES]);
        seal_crc(&mut img);
        assert_eq!(
            ChunkHeader::decode(&img).unwrap().chain,
            h.chain,
            "the farthest"
        );
        // a v2 header of a build before the chain: bytes 64..68 zero, same CRC
        let (h, img) = chained(None);
        assert_eq!(ChunkHeader::decode(&img).unwrap(), h);
        assert_eq!(get_u32(&img, 64), 0);
    }

    #[test]
    fn a_chain_field_that_cannot_be_is_refused() {
        for bad in [5u32, 1 << 31 | 78] {
            let (_, mut img) = chained(None);
            put_u32(&mut img, 64, bad);
            put_u32(&mut img, HEADER_CRC_FIELD, 0);
            let h = header_crc(&img[..BLOCK_BYTES]);
            put_u32(&mut img, HEADER_CRC_FIELD, h);
            assert!(
                matches!(ChunkHeader::decode(&img), Err(FormatError::Invalid { .. })),
                "{bad:#x}"
            );
        }
    }

    #[test]
    fn peek_seq_names_the_seq_of_a_damaged_header_of_this_segment_only() {
        let (_, mut img) = sample_image();
        img[70] ^= 1; // the CRC no longer holds: decode refuses, the peek still sees it
        assert!(ChunkHeader::decode(&img).is_err());
        assert_eq!(peek_seq(&img, &[9; 16], 3), Some(77));
        assert_eq!(peek_seq(&img, &[8; 16], 3), None);
        assert_eq!(peek_seq(&img, &[9; 16], 4), None);
        assert_eq!(peek_seq(&img[..40], &[9; 16], 3), None);
        // a bit or two of damage in the identity still names the chunk
        img[31] ^= 8; // the uuid's last byte
        assert_eq!(peek_seq(&img, &[9; 16], 3), Some(77));
        img[0] ^= 1; // and the magic
        assert_eq!(peek_seq(&img, &[9; 16], 3), Some(77));
        img[41] ^= 2; // three bits: not ours
        assert_eq!(peek_seq(&img, &[9; 16], 3), None);
    }

    #[test]
    fn chunk_rejects_flips_in_header_and_data_and_foreign_uuid() {
        let (_, img) = sample_image();
        for byte in [0usize, 33, 70, 4095, 4096, 3 * 4096 - 1] {
            let mut bad = img.clone();
            bad[byte] ^= 0x10;
            assert!(verify(&bad, &[9; 16]).is_err(), "byte {byte}");
        }
        assert!(verify(&img, &[8; 16]).is_err());
        assert!(verify(&img[..2 * BLOCK_BYTES], &[9; 16]).is_err());
    }

    #[test]
    fn v2_header_carries_its_lsn_range_and_v1_stays_v1() {
        let (mut h, mut img) = sample_image();
        assert_eq!(get_u16(&img, 8), 1);
        assert!(img[LSN_FIELD..BLOCK_BYTES].iter().all(|&b| b == 0));
        h.lsn = Some(LsnRange {
            first: 1 << 40,
            count: 3,
        });
        h.encode_into(&mut img[..BLOCK_BYTES]);
        seal_crc(&mut img);
        assert_eq!(get_u16(&img, 8), 2);
        assert_eq!(verify(&img, &[9; 16]).unwrap(), h);
        // the LSN bytes are covered by the header CRC
        img[LSN_FIELD] ^= 1;
        assert!(verify(&img, &[9; 16]).is_err());
    }

    #[test]
    fn packed_blocks_follow_the_raw_ones_at_most_one_per_fragment() {
        // 2 raw blocks (Data, lba 10) and `f` fragments (Packed, lba 40) in
        // `p` packed blocks: accepted iff 1 <= p <= f (p = 0 without
        // fragments, the version 1 rule)
        let header = |f: u32, p: u32| {
            let mut entries = vec![Entry {
                lba: 10,
                count: 2,
                kind: Kind::Data,
                src: NO_SRC,
            }];
            if f > 0 {
                entries.push(Entry {
                    lba: 40,
                    count: f,
                    kind: Kind::Packed,
                    src: NO_SRC,
                });
            }
            ChunkHeader {
                uuid: [9; 16],
                seq: 5,
                segment: 1,
                stream: Stream::User,
                timestamp_ns: 0,
                durable_seq: 0,
                data_blocks: 2 + p,
                entries,
                block_crcs: vec![7; 2 + p as usize],
                lsn: None,
                chain: None,
                mixed_check: false,
            }
        };
        let decode = |h: &ChunkHeader| {
            let mut b = vec![0u8; BLOCK_BYTES];
            // (encode's own check is a debug assertion: write the bytes the
            // way a wrong writer would, through the public fields)
            let mut ok = h.clone();
            ok.data_blocks = 2 + ok.entries.iter().map(|e| e.fragments()).sum::<u32>().min(1);
            ok.block_crcs.resize(ok.data_blocks as usize, 7);
            ok.encode_into(&mut b);
            put_u32(&mut b, 12, h.data_blocks);
            for (i, c) in h.block_crcs.iter().enumerate() {
                put_u32(&mut b, BLOCK_CRC_OFFSET + 4 * i, *c);
            }
            seal_crc(&mut b);
            ChunkHeader::decode(&b)
        };
        for (f, p, ok) in [
            (0, 0, true),
            (0, 1, false),
            (3, 0, false),
            (3, 1, true),
            (3, 3, true),
            (3, 4, false),
            (1, 1, true),
        ] {
            let h = header(f, p);
            let got = decode(&h);
            assert_eq!(
                got.is_ok(),
                ok,
                "{f} fragments in {p} packed blocks: {got:?}"
            );
            if let Ok(d) = got {
                assert_eq!(d, h);
                assert_eq!((d.raw_blocks(), d.packed_blocks()), (2, p));
            }
        }
        // kind 4 decodes as Packed (and 5 stays unknown)
        let mut b = vec![0u8; BLOCK_BYTES];
        header(2, 1).encode_into(&mut b);
        seal_crc(&mut b);
        assert_eq!(
            ChunkHeader::decode(&b).unwrap().entries[1].kind,
            Kind::Packed
        );
        b[HEADER_BYTES + ENTRY_BYTES + 7] = 5;
        seal_crc(&mut b);
        assert!(ChunkHeader::decode(&b).is_err());
    }
}
