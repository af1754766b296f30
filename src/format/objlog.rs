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
//! Layout (little endian):
//! - 0: magic `SLUICEFL`; 8: version u32 (1); 12: record count u32;
//!   16: uuid [16]; 32: epoch u64; 40: object number L u64; 48: number of
//!   its first record u64 (records are numbered per epoch from 0);
//!   56: CRC32C of the whole previous log object of the epoch (0 for L = 0)
//!   u32; 60: reserved u32 (0);
//! - 64: each record: offset u64, length u32, CRC32C of its bytes u32, the
//!   bytes;
//! - last 4 bytes: CRC32C of everything before them.
//!
//! Invariant: `decode` returns a value only for bytes `encode` could have
//! made; anything else (a flipped bit, a cut, a length past the end) is a
//! `FormatError`, never a panic.

use super::{get_u32, get_u64, invalid, put_u32, put_u64, FormatError};

pub const OBJ_LOG_MAGIC: [u8; 8] = *b"SLUICEFL";
pub const OBJ_LOG_VERSION: u32 = 1;
pub const HEADER: usize = 64;
/// Bytes before a record's data.
pub const RECORD_HEAD: usize = 16;

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

impl LogObject {
    pub fn encoded_len(records: &[(u64, Vec<u8>)]) -> usize {
        HEADER
            + records
                .iter()
                .map(|(_, d)| RECORD_HEAD + d.len())
                .sum::<usize>()
            + 4
    }

    pub fn encode(&self) -> Vec<u8> {
        let len = Self::encoded_len(&self.records);
        let mut b = vec![0u8; len];
        b[0..8].copy_from_slice(&OBJ_LOG_MAGIC);
        put_u32(&mut b, 8, OBJ_LOG_VERSION);
        put_u32(&mut b, 12, self.records.len() as u32);
        b[16..32].copy_from_slice(&self.uuid);
        put_u64(&mut b, 32, self.epoch);
        put_u64(&mut b, 40, self.index);
        put_u64(&mut b, 48, self.first_record);
        put_u32(&mut b, 56, self.prev_crc);
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
        if v != OBJ_LOG_VERSION {
            return Err(FormatError::Version(v.min(u16::MAX as u32) as u16));
        }
        let len = b.len();
        if crc32c::crc32c(&b[..len - 4]) != get_u32(b, len - 4) {
            return Err(FormatError::Checksum);
        }
        if get_u32(b, 60) != 0 {
            return Err(invalid("objlog.reserved", "not zero"));
        }
        let n = get_u32(b, 12);
        let mut records = Vec::new();
        let mut o = HEADER;
        for i in 0..n {
            if o + RECORD_HEAD > len - 4 {
                return Err(invalid(
                    "objlog.records",
                    format!("record {i} past the end"),
                ));
            }
            let at = get_u64(b, o);
            let l = get_u32(b, o + 8) as usize;
            let end = (o + RECORD_HEAD)
                .checked_add(l)
                .filter(|&e| e <= len - 4)
                .ok_or_else(|| invalid("objlog.records", format!("record {i} past the end")))?;
            let d = &b[o + RECORD_HEAD..end];
            if crc32c::crc32c(d) != get_u32(b, o + 12) {
                return Err(invalid(
                    "objlog.records",
                    format!("record {i} fails its CRC"),
                ));
            }
            if at.checked_add(l as u64).is_none() {
                return Err(invalid("objlog.records", format!("record {i} offset")));
            }
            records.push((at, d.to_vec()));
            o = end;
        }
        if o != len - 4 {
            return Err(invalid("objlog.length", "bytes after the last record"));
        }
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
            ],
        }
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
        let mut b = sample().encode();
        // a record length past the end, the CRC made to match
        put_u32(&mut b, HEADER + 8, u32::MAX);
        let l = b.len();
        let crc = crc32c::crc32c(&b[..l - 4]);
        put_u32(&mut b, l - 4, crc);
        assert!(LogObject::decode(&b).is_err());
        let mut b = sample().encode();
        put_u32(&mut b, 12, u32::MAX);
        let crc = crc32c::crc32c(&b[..l - 4]);
        put_u32(&mut b, l - 4, crc);
        assert!(LogObject::decode(&b).is_err());
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
