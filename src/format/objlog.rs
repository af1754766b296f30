//! FLUSH log objects of a volume in the store-durable mode (`log/L-E`, issue
//! 21; docs/objects.md §5.4): pure encode/decode, no IO. One object carries
//! the writes to the volume's local metadata file (byte offset, bytes) made
//! since the previous log object, in the order they were made; replayed in
//! object order over a checkpoint object's capture they rebuild that file as
//! of the last FLUSH the store acknowledged (`objseg::durable`).
//!
//! Why not the intent-record codec (`format::intent`): an intent record
//! carries block writes by LBA for the engine's replay, while this log
//! mirrors the media writes under the engine (chunks, tombstones,
//! superblocks, checkpoint images) by file offset, so the engine's own
//! recovery runs unchanged on the rebuilt file. The chaining is the same
//! idea: each object names its number and carries the CRC32C of the one
//! before it, and replay stops at the first that does not follow.
//!
//! Layout (little endian), version 2 (written since issue 21 wave 16): one
//! header for the whole FLUSH group, then its bytes without their zeros.
//! A record is mostly a chunk (its 4 KiB header block, then data blocks),
//! and a chunk header block is mostly zero padding (its fields at the
//! start, its block CRCs at 3064, its trailer in the last 12 bytes): v1
//! logged it whole, ~1.6 log bytes per 4 KiB written. v2 keeps only the
//! 64-byte lines that are not all zero:
//! - 0: magic `SLUICEFL`; 8: version u32 (2); 12: record count n u32;
//!   16: uuid [16]; 32: epoch u64; 40: object number L u64; 48: number of
//!   its first record u64 (records are numbered per epoch from 0);
//!   56: CRC32C of the whole previous log object of the epoch (0 for L = 0)
//!   u32; 60: reserved u32 (0);
//! - 64: the record table, n entries of 16 bytes: offset u64, length u32,
//!   CRC32C of the record's whole bytes (zeros included) u32;
//! - then the line maps: for each record, for each 4 KiB block of it
//!   (the last may be short), a u64 whose bit i says line i (bytes
//!   64i..64i+64 of the block, cut at the record's end) is stored; a line
//!   not stored is all zeros, a stored one is never all zeros;
//! - then the stored lines, in record, block and line order;
//! - last 4 bytes: CRC32C of everything before them.
//!
//! Version 1 (still decoded; no encoder writes it outside tests): the same
//! 64-byte header with version 1, then each record as offset u64, length
//! u32, CRC32C u32 and its whole bytes, then the object's CRC32C.
//!
//! Replay verifies each record's CRC over the bytes it rebuilt, and the
//! object's CRC over what was stored: a flipped bit anywhere, a cut, a
//! length or map past the end is a `FormatError`.
//!
//! Invariant: `decode` returns a value only for bytes `encode` (or the
//! version 1 encoder) could have made; anything else is a `FormatError`,
//! never a panic. A decoded object's bytes are at most 512x its stored
//! size (one map word per 4 KiB), so a short object cannot ask for a huge
//! allocation.

use super::{get_u32, get_u64, invalid, put_u32, put_u64, FormatError};

pub const OBJ_LOG_MAGIC: [u8; 8] = *b"SLUICEFL";
/// The version `encode` writes.
pub const OBJ_LOG_VERSION: u32 = 2;
/// The first version (every record whole); `decode` still reads it.
pub const OBJ_LOG_VERSION_1: u32 = 1;
pub const HEADER: usize = 64;
/// Bytes of a record's entry in the record table (v2), or before its data (v1).
pub const RECORD_HEAD: usize = 16;
/// A line map covers this many bytes of a record.
pub const MAP_BLOCK: usize = 4096;
/// The unit a line map keeps or drops.
pub const LINE: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogObject {
    pub uuid: [u8; 16],
    pub epoch: u64,
    /// The object's number (its name's L).
    pub index: u64,
    /// The number of its first record.
    pub first_record: u64,
    /// CRC32C of the previous log object's bytes (0 for index 0).
    pub prev_crc: u32,
    /// (byte offset in the local metadata file, bytes written there).
    pub records: Vec<(u64, Vec<u8>)>,
}

/// The line map of one 4 KiB block (or the short last one) of a record.
fn line_map(block: &[u8]) -> u64 {
    let mut m = 0u64;
    for (i, line) in block.chunks(LINE).enumerate() {
        if line.iter().any(|&b| b != 0) {
            m |= 1 << i;
        }
    }
    m
}

/// What one record costs in a v2 object: (map words, stored line bytes).
fn record_cost(d: &[u8]) -> (usize, usize) {
    let mut words = 0;
    let mut stored = 0;
    for block in d.chunks(MAP_BLOCK) {
        words += 1;
        let m = line_map(block);
        for (i, line) in block.chunks(LINE).enumerate() {
            if m & (1 << i) != 0 {
                stored += line.len();
            }
        }
    }
    (words, stored)
}

impl LogObject {
    /// Bytes `encode` makes of these records.
    pub fn encoded_len(records: &[(u64, Vec<u8>)]) -> usize {
        HEADER
            + records
                .iter()
                .map(|(_, d)| Self::record_len(d))
                .sum::<usize>()
            + 4
    }

    /// What one record adds to an encoded object (its table entry, its
    /// line maps and its stored lines).
    pub fn record_len(d: &[u8]) -> usize {
        let (words, stored) = record_cost(d);
        RECORD_HEAD + 8 * words + stored
    }

    fn put_header(&self, b: &mut [u8], version: u32) {
        b[0..8].copy_from_slice(&OBJ_LOG_MAGIC);
        put_u32(b, 8, version);
        put_u32(b, 12, self.records.len() as u32);
        b[16..32].copy_from_slice(&self.uuid);
        put_u64(b, 32, self.epoch);
        put_u64(b, 40, self.index);
        put_u64(b, 48, self.first_record);
        put_u32(b, 56, self.prev_crc);
    }

    /// The object's bytes (version 2).
    pub fn encode(&self) -> Vec<u8> {
        let words: usize = self
            .records
            .iter()
            .map(|(_, d)| d.len().div_ceil(MAP_BLOCK))
            .sum();
        let maps_at = HEADER + RECORD_HEAD * self.records.len();
        let mut b = vec![0u8; maps_at + 8 * words];
        self.put_header(&mut b, OBJ_LOG_VERSION);
        let mut w = maps_at;
        for (k, (at, d)) in self.records.iter().enumerate() {
            let o = HEADER + RECORD_HEAD * k;
            put_u64(&mut b, o, *at);
            put_u32(&mut b, o + 8, d.len() as u32);
            put_u32(&mut b, o + 12, crc32c::crc32c(d));
            for block in d.chunks(MAP_BLOCK) {
                put_u64(&mut b, w, line_map(block));
                w += 8;
            }
        }
        for (_, d) in &self.records {
            for block in d.chunks(MAP_BLOCK) {
                let m = line_map(block);
                for (i, line) in block.chunks(LINE).enumerate() {
                    if m & (1 << i) != 0 {
                        b.extend_from_slice(line);
                    }
                }
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The object's bytes in version 1 (every record whole): what objects
    /// stored before version 2 hold; tests make them to check they replay.
    pub fn encode_v1(&self) -> Vec<u8> {
        let len = HEADER
            + self
                .records
                .iter()
                .map(|(_, d)| RECORD_HEAD + d.len())
                .sum::<usize>()
            + 4;
        let mut b = vec![0u8; len];
        self.put_header(&mut b, OBJ_LOG_VERSION_1);
        let mut o = HEADER;
        for (at, d) in &self.records {
            put_u64(&mut b, o, *at);
            put_u32(&mut b, o + 8, d.len() as u32);
            put_u32(&mut b, o + 12, crc32c::crc32c(d));
            b[o + RECORD_HEAD..o + RECORD_HEAD + d.len()].copy_from_slice(d);
            o += RECORD_HEAD + d.len();
        }
        let crc = crc32c::crc32c(&b[..len - 4]);
        put_u32(&mut b, len - 4, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<LogObject, FormatError> {
        if b.len() < HEADER + 4 {
            return Err(FormatError::Short {
                need: HEADER + 4,
                have: b.len(),
            });
        }
        if b[0..8] != OBJ_LOG_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let v = get_u32(b, 8);
        if v != OBJ_LOG_VERSION && v != OBJ_LOG_VERSION_1 {
            return Err(FormatError::Version(v.min(u16::MAX as u32) as u16));
        }
        let len = b.len();
        if crc32c::crc32c(&b[..len - 4]) != get_u32(b, len - 4) {
            return Err(FormatError::Checksum);
        }
        if get_u32(b, 60) != 0 {
            return Err(invalid("objlog.reserved", "not zero"));
        }
        let body = &b[..len - 4];
        let records = if v == OBJ_LOG_VERSION_1 {
            decode_v1(body, get_u32(b, 12))?
        } else {
            decode_v2(body, get_u32(b, 12))?
        };
        Ok(LogObject {
            uuid: b[16..32].try_into().unwrap(),
            epoch: get_u64(b, 32),
            index: get_u64(b, 40),
            first_record: get_u64(b, 48),
            prev_crc: get_u32(b, 56),
            records,
        })
    }
}

fn bad_crc(i: u32) -> FormatError {
    invalid("objlog.records", format!("record {i} fails its CRC"))
}

/// Version 1 records: `body` is the object less its CRC.
fn decode_v1(body: &[u8], n: u32) -> Result<Vec<(u64, Vec<u8>)>, FormatError> {
    let len = body.len();
    let mut records = Vec::new();
    let mut o = HEADER;
    for i in 0..n {
        if o + RECORD_HEAD > len {
            return Err(invalid(
                "objlog.records",
                format!("record {i} past the end"),
            ));
        }
        let at = get_u64(body, o);
        let l = get_u32(body, o + 8) as usize;
        let end = (o + RECORD_HEAD)
            .checked_add(l)
            .filter(|&e| e <= len)
            .ok_or_else(|| invalid("objlog.records", format!("record {i} past the end")))?;
        let d = &body[o + RECORD_HEAD..end];
        if crc32c::crc32c(d) != get_u32(body, o + 12) {
            return Err(bad_crc(i));
        }
        if at.checked_add(l as u64).is_none() {
            return Err(invalid("objlog.records", format!("record {i} offset")));
        }
        records.push((at, d.to_vec()));
        o = end;
    }
    if o != len {
        return Err(invalid("objlog.length", "bytes after the last record"));
    }
    Ok(records)
}

/// Version 2 records: `body` is the object less its CRC.
fn decode_v2(body: &[u8], n: u32) -> Result<Vec<(u64, Vec<u8>)>, FormatError> {
    let len = body.len();
    let past = |what: &str| invalid("objlog.records", format!("{what} past the end"));
    let maps_at = (n as usize)
        .checked_mul(RECORD_HEAD)
        .and_then(|t| t.checked_add(HEADER))
        .filter(|&e| e <= len)
        .ok_or_else(|| past("the record table"))?;
    // every record's length and map words, checked against the object
    // before anything is allocated
    let mut words = 0usize;
    for i in 0..n as usize {
        let o = HEADER + RECORD_HEAD * i;
        let l = get_u32(body, o + 8) as usize;
        if get_u64(body, o).checked_add(l as u64).is_none() {
            return Err(invalid("objlog.records", format!("record {i} offset")));
        }
        words += l.div_ceil(MAP_BLOCK);
        if maps_at + 8 * words > len {
            return Err(past("the line maps"));
        }
    }
    let mut w = maps_at;
    let mut data = maps_at + 8 * words;
    let mut records = Vec::with_capacity(n as usize);
    for i in 0..n {
        let o = HEADER + RECORD_HEAD * i as usize;
        let at = get_u64(body, o);
        let l = get_u32(body, o + 8) as usize;
        let mut d = vec![0u8; l];
        for block in d.chunks_mut(MAP_BLOCK) {
            let m = get_u64(body, w);
            w += 8;
            let lines = block.len().div_ceil(LINE);
            if lines < 64 && m >> lines != 0 {
                return Err(invalid(
                    "objlog.maps",
                    format!("record {i}: a line past its end"),
                ));
            }
            for (k, line) in block.chunks_mut(LINE).enumerate() {
                if m & (1 << k) == 0 {
                    continue;
                }
                let src = body
                    .get(data..data + line.len())
                    .ok_or_else(|| past("the stored lines"))?;
                if src.iter().all(|&x| x == 0) {
                    return Err(invalid(
                        "objlog.maps",
                        format!("record {i}: a stored line of zeros"),
                    ));
                }
                line.copy_from_slice(src);
                data += line.len();
            }
        }
        // MUTANT: objlog-record-crc-unchecked s|if crc32c::crc32c(&d) != get_u32(body, o + 12) {|if false {|
        if crc32c::crc32c(&d) != get_u32(body, o + 12) {
            return Err(bad_crc(i));
        }
        records.push((at, d));
    }
    if data != len {
        return Err(invalid("objlog.length", "bytes after the last line"));
    }
    Ok(records)
}

/// The first line of a fence object: an object a taker puts under a
/// superseded epoch's next free log name (`log/L-E`, docs/objects.md §5.6),
/// so that the old writer's conditional create of that name fails and it
/// never acknowledges a FLUSH whose log object the taker would not replay.
/// Text, not a log object: `LogObject::decode` refuses it (another magic).
pub const FENCE_MAGIC: &str = "sluice-log-fence 1\n";

/// A fence of epoch `epoch`'s log put by epoch `by`; `nonce` makes its bytes
/// this taker's (a create sent twice is recognised as its own).
pub fn encode_fence(epoch: u64, by: u64, nonce: u64) -> Vec<u8> {
    format!("{FENCE_MAGIC}epoch {epoch}\nby {by}\nnonce {nonce:016x}\n").into_bytes()
}

/// The epoch that put this fence, if `bytes` is a fence object.
pub fn fence_by(bytes: &[u8]) -> Option<u64> {
    let t = std::str::from_utf8(bytes).ok()?.strip_prefix(FENCE_MAGIC)?;
    t.lines().nth(1)?.strip_prefix("by ")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LogObject {
        LogObject {
            uuid: [3; 16],
            epoch: 7,
            index: 41,
            first_record: 1000,
            prev_crc: 0xfeed_f00d,
            records: vec![
                (4096, vec![1; 4096]),
                (0, vec![2; 4096]),
                (1 << 40, vec![3; 8192]),
                (12288, Vec::new()),
                (8192, sparse(5000)),
                (65536, vec![9; 100]),
            ],
        }
    }

    /// Mostly zeros, as a chunk header block is: a few bytes at the start,
    /// one in the middle, the last one.
    fn sparse(len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        d[..72].fill(0x5a);
        if len > 3064 {
            d[3064] = 1;
        }
        d[len - 1] = 7;
        d
    }

    /// Set the object's CRC to match its bytes (a damage the object CRC
    /// cannot see: what only the record CRCs and the map checks catch).
    fn reseal(b: &mut [u8]) {
        let l = b.len();
        let crc = crc32c::crc32c(&b[..l - 4]);
        put_u32(b, l - 4, crc);
    }

    #[test]
    fn a_chunk_header_block_costs_its_lines_not_4_kib() {
        let group: Vec<(u64, Vec<u8>)> = (0..16u64)
            .map(|i| {
                let mut d = sparse(4096);
                d.extend_from_slice(&[i as u8 + 1; 4096]);
                (i * 8192, d)
            })
            .collect();
        let o = LogObject {
            records: group,
            ..sample()
        };
        let v2 = o.encode();
        let v1 = o.encode_v1();
        assert_eq!(v2.len(), LogObject::encoded_len(&o.records));
        // 16 x (4 KiB data + 4 header lines + 2 map words + table entry)
        assert_eq!(v2.len(), HEADER + 16 * (4096 + 4 * 64 + 16 + 16) + 4);
        assert_eq!(v1.len(), HEADER + 16 * (8192 + 16) + 4);
        assert_eq!(LogObject::decode(&v2).unwrap(), o);
    }

    #[test]
    fn version_1_objects_still_decode() {
        let o = sample();
        let b = o.encode_v1();
        assert_eq!(get_u32(&b, 8), OBJ_LOG_VERSION_1);
        assert_eq!(LogObject::decode(&b).unwrap(), o);
        assert_eq!(get_u32(&o.encode(), 8), OBJ_LOG_VERSION);
        let mut x = b.clone();
        x[HEADER + RECORD_HEAD] ^= 1;
        assert!(LogObject::decode(&x).is_err());
        reseal(&mut x);
        assert!(LogObject::decode(&x).is_err(), "v1 record CRC unchecked");
    }

    #[test]
    fn a_stored_line_whose_record_crc_fails_is_refused_even_with_the_object_crc_right() {
        let o = sample();
        let b = o.encode();
        let data = b.len() - 4 - 100; // inside the last record's stored lines
        for at in [data, data + 99] {
            let mut x = b.clone();
            x[at] ^= 0x10;
            reseal(&mut x);
            match LogObject::decode(&x) {
                Err(FormatError::Invalid { why, .. }) => assert!(why.contains("CRC"), "{why}"),
                other => panic!("a damaged line decoded: {other:?}"),
            }
        }
    }

    #[test]
    fn maps_encode_could_not_make_are_refused() {
        let o = LogObject {
            records: vec![(0, sparse(100))],
            ..sample()
        };
        let b = o.encode();
        let map = HEADER + RECORD_HEAD;
        assert_eq!(get_u64(&b, map), 0b11);
        // a line past the record's end (100 bytes: two lines)
        let mut x = b.clone();
        put_u64(&mut x, map, 0b111);
        reseal(&mut x);
        assert!(LogObject::decode(&x).is_err());
        // a map that drops a stored line (its bytes left over)
        let mut x = b.clone();
        put_u64(&mut x, map, 0b01);
        reseal(&mut x);
        assert!(LogObject::decode(&x).is_err());
        // a record table longer than the object
        let mut x = b.clone();
        put_u32(&mut x, 12, 1000);
        reseal(&mut x);
        assert!(LogObject::decode(&x).is_err());
    }

    #[test]
    fn round_trip() {
        let o = sample();
        let b = o.encode();
        assert_eq!(b.len(), LogObject::encoded_len(&o.records));
        assert_eq!(LogObject::decode(&b).unwrap(), o);
        let empty = LogObject {
            records: Vec::new(),
            ..sample()
        };
        assert_eq!(LogObject::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let b = sample().encode();
        for bit in (0..b.len() * 8).filter(|i| i % 89 == 0 || *i < (HEADER + 40) * 8) {
            let mut x = b.clone();
            x[bit / 8] ^= 1 << (bit % 8);
            assert!(LogObject::decode(&x).is_err(), "bit {bit} flipped accepted");
        }
        for cut in [0, 1, HEADER, HEADER + 4, b.len() / 2, b.len() - 1] {
            assert!(
                LogObject::decode(&b[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert!(LogObject::decode(&long).is_err());
    }

    #[test]
    fn huge_lengths_are_errors_not_panics() {
        for v1 in [false, true] {
            let enc = |o: &LogObject| if v1 { o.encode_v1() } else { o.encode() };
            let mut b = enc(&sample());
            // a record length past the end, the CRC made to match
            put_u32(&mut b, HEADER + 8, u32::MAX);
            reseal(&mut b);
            assert!(LogObject::decode(&b).is_err());
            let mut b = enc(&sample());
            put_u32(&mut b, 12, u32::MAX);
            reseal(&mut b);
            assert!(LogObject::decode(&b).is_err());
        }
    }

    #[test]
    fn fences_are_recognised_and_never_decode_as_log_objects() {
        let f = encode_fence(3, 4, 0xabc);
        assert_eq!(fence_by(&f), Some(4));
        assert!(LogObject::decode(&f).is_err());
        assert_eq!(fence_by(b"sluice-log-fence 1\nepoch 3\n"), None);
        assert_eq!(fence_by(b"SLUICEFL"), None);
    }
}
