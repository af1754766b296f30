//! Log device superblock (format v2, docs/format-v2.md §4.3): the identity
//! block a separate intent log device carries in two copies, at bytes 0 and
//! 4096; the ring follows at `LOGDEV_RING_OFFSET`. It names the volume the
//! device belongs to, the log's own uuid (the volume superblock's `log_uuid`),
//! the ring geometry, and the device's place in a mirrored pair. It is written
//! once, at create (and by the tools that add or replace a log device): the
//! moving part of the log, its start, lives in the volume's superblock.
//!
//! Invariant: `decode` returns a value only for a block whose magic, CRC,
//! version and geometry verify (the ring inside the device, the mirror index
//! below the mirror count); any other input is a `FormatError`, never a panic.

use super::*;

pub const LOGDEV_MAGIC: [u8; 8] = *b"SLUICELG";
/// Byte offset of the ring on a log device: after the two superblock copies.
pub const LOGDEV_RING_OFFSET: u64 = 2 * BLOCK_BYTES as u64;
/// Most log devices a volume mirrors its records to.
pub const MAX_LOG_MIRRORS: u16 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogDevSuperblock {
    /// The volume this device's records belong to.
    pub volume_uuid: [u8; 16],
    /// The log's identity (equal on both devices of a pair; the volume
    /// superblock's `log_uuid`).
    pub log_uuid: [u8; 16],
    /// Byte offset of the ring on this device (`LOGDEV_RING_OFFSET` today).
    pub ring_offset: u64,
    pub ring_bytes: u64,
    /// This device's place in the pair (0 or 1) and how many devices the
    /// volume was given (1 or 2).
    pub mirror_index: u16,
    pub mirror_count: u16,
    pub created_unix_s: u64,
}

impl LogDevSuperblock {
    /// Bytes of device this superblock's geometry needs.
    pub fn device_bytes(&self) -> u64 {
        self.ring_offset + self.ring_bytes
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_BYTES];
        b[0..8].copy_from_slice(&LOGDEV_MAGIC);
        put_u16(&mut b, 8, FORMAT_VERSION_2);
        put_u16(&mut b, 10, self.mirror_index);
        put_u16(&mut b, 12, self.mirror_count);
        b[16..32].copy_from_slice(&self.volume_uuid);
        b[32..48].copy_from_slice(&self.log_uuid);
        put_u64(&mut b, 48, self.ring_offset);
        put_u64(&mut b, 56, self.ring_bytes);
        put_u64(&mut b, 64, self.created_unix_s);
        let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
        put_u32(&mut b, BLOCK_BYTES - 4, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<LogDevSuperblock, FormatError> {
        if b.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: b.len(),
            });
        }
        if b[0..8] != LOGDEV_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc32c::crc32c(&b[..BLOCK_BYTES - 4]) != get_u32(b, BLOCK_BYTES - 4) {
            return Err(FormatError::Checksum);
        }
        let version = get_u16(b, 8);
        if version != FORMAT_VERSION_2 {
            return Err(FormatError::Version(version));
        }
        let s = LogDevSuperblock {
            mirror_index: get_u16(b, 10),
            mirror_count: get_u16(b, 12),
            volume_uuid: b[16..32].try_into().unwrap(),
            log_uuid: b[32..48].try_into().unwrap(),
            ring_offset: get_u64(b, 48),
            ring_bytes: get_u64(b, 56),
            created_unix_s: get_u64(b, 64),
        };
        if s.mirror_count == 0 || s.mirror_count > MAX_LOG_MIRRORS {
            return Err(invalid("mirror_count", s.mirror_count.to_string()));
        }
        if s.mirror_index >= s.mirror_count {
            return Err(invalid(
                "mirror_index",
                format!("{} of {}", s.mirror_index, s.mirror_count),
            ));
        }
        let bs = BLOCK_BYTES as u64;
        if s.ring_offset < LOGDEV_RING_OFFSET
            || !s.ring_offset.is_multiple_of(bs)
            || s.ring_bytes < super::superblock::MIN_LOG_BYTES
            || !s.ring_bytes.is_multiple_of(bs)
            || s.ring_offset.checked_add(s.ring_bytes).is_none()
        {
            return Err(invalid(
                "ring",
                format!("{} bytes at {}", s.ring_bytes, s.ring_offset),
            ));
        }
        if s.volume_uuid == [0; 16] || s.log_uuid == [0; 16] {
            return Err(invalid("uuid", "zero"));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LogDevSuperblock {
        LogDevSuperblock {
            volume_uuid: [1; 16],
            log_uuid: [2; 16],
            ring_offset: LOGDEV_RING_OFFSET,
            ring_bytes: 16 << 20,
            mirror_index: 1,
            mirror_count: 2,
            created_unix_s: 5,
        }
    }

    #[test]
    fn roundtrips_and_refuses_any_flipped_bit() {
        let s = sample();
        let b = s.encode();
        assert_eq!(LogDevSuperblock::decode(&b).unwrap(), s);
        assert_eq!(s.device_bytes(), 8192 + (16 << 20));
        for bit in [0usize, 70, 8 * 16 + 1, 8 * 40, 8 * 57 + 3, 8 * 4095 + 7] {
            let mut bad = b.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(LogDevSuperblock::decode(&bad).is_err(), "bit {bit}");
        }
        assert!(LogDevSuperblock::decode(&b[..100]).is_err());
        // a volume superblock is not a log device superblock
        let mut vol = b.clone();
        vol[0..8].copy_from_slice(b"SLUICESB");
        assert_eq!(LogDevSuperblock::decode(&vol), Err(FormatError::BadMagic));
    }

    #[test]
    fn geometry_and_mirror_fields_are_validated() {
        let bad: [fn(&mut LogDevSuperblock); 7] = [
            |s| s.mirror_count = 0,
            |s| s.mirror_count = 3,
            |s| s.mirror_index = 2,
            |s| s.ring_offset = 4096, // over the second copy
            |s| s.ring_bytes = 4096,  // below the smallest ring
            |s| s.ring_offset = u64::MAX - 4095,
            |s| s.log_uuid = [0; 16],
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut s = sample();
            f(&mut s);
            assert!(LogDevSuperblock::decode(&s.encode()).is_err(), "case {i}");
        }
    }
}
