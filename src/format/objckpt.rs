//! Checkpoint objects of a volume in an object store (`ckpt/N-E`, issue 21;
//! docs/objects.md §5.2): pure encode/decode, no IO. One object carries what
//! a host with an empty cache directory needs to rebuild the volume's local
//! metadata: the superblock (4 KiB, as on the media), the checkpoint image
//! it names (header block + body, as in the checkpoint slot), the slot ->
//! segment object table as of that checkpoint, the first segment sequence
//! number NOT covered by that table (`seg_start`: segment objects from it
//! on were uploaded after the table was taken, the roll-forward's start),
//! and the written blocks of the slots that held data but no object yet
//! (the open segments: `partials`).
//!
//! Layout (little endian), docs/format.md §9:
//! - 0: magic `SLUICECO`; 8: version u32 (1); 12: segment_count u32;
//!   16: segment_blocks u32; 20: reserved u32 (0); 24: uuid [16];
//!   40: seg_start u64; 48: superblock length u32 (4096); 52: partial
//!   count u32; 56: image length u64;
//! - 64: `segment_count` records of 24 bytes: seq u64, epoch u64, the
//!   object's CRC32C u32, reserved u32 (all zeros: the slot is in no object);
//! - then the superblock bytes, then the image bytes, then each partial:
//!   slot u32, block count u32, that many 4 KiB blocks (the slot's first);
//! - version 2 only (a volume in the store-durable mode,
//!   `objseg::durable`): `log_start` u64, the first FLUSH log record NOT in
//!   this capture (log objects of this checkpoint's epoch replay from it);
//! - last 4 bytes: CRC32C of everything before them.
//!
//! Invariant: `decode` returns a value only for bytes `encode` could have
//! made (magic, version, lengths, the CRC, records with seq and epoch >= 1
//! or all zeros); anything else is a `FormatError`, never a panic.

use super::{get_u32, get_u64, invalid, put_u32, put_u64, FormatError, BLOCK_BYTES};

pub const OBJ_CKPT_MAGIC: [u8; 8] = *b"SLUICECO";
pub const OBJ_CKPT_VERSION: u32 = 1;
/// With `log_start` (the store-durable mode).
pub const OBJ_CKPT_VERSION_LOG: u32 = 2;
const HEADER: usize = 64;
const REC: usize = 24;

/// Where one slot's life is stored (seq, epoch, CRC32C of the object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotObject {
    pub seq: u64,
    pub epoch: u64,
    pub crc: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjCheckpoint {
    pub uuid: [u8; 16],
    pub segment_blocks: u32,
    /// Segment objects with seq >= this were uploaded after `slots` was taken.
    pub seg_start: u64,
    /// One entry per segment slot.
    pub slots: Vec<Option<SlotObject>>,
    /// The superblock as on the media (one block).
    pub superblock: Vec<u8>,
    /// The checkpoint image the superblock names (header block + body).
    pub image: Vec<u8>,
    /// (slot, its first blocks): slots with data and no object.
    pub partials: Vec<(u32, Vec<u8>)>,
    /// Store-durable mode: every FLUSH log record numbered below this (of
    /// the checkpoint's epoch) is reflected in this capture.
    pub log_start: Option<u64>,
}

impl ObjCheckpoint {
    pub fn encode(&self) -> Vec<u8> {
        assert_eq!(
            self.superblock.len(),
            BLOCK_BYTES,
            "a superblock is one block"
        );
        let n = self.slots.len();
        let plen: usize = self.partials.iter().map(|(_, p)| 8 + p.len()).sum();
        let tail = if self.log_start.is_some() { 8 } else { 0 };
        let len = HEADER + n * REC + self.superblock.len() + self.image.len() + plen + tail + 4;
        let mut b = vec![0u8; len];
        b[0..8].copy_from_slice(&OBJ_CKPT_MAGIC);
        put_u32(
            &mut b,
            8,
            if self.log_start.is_some() {
                OBJ_CKPT_VERSION_LOG
            } else {
                OBJ_CKPT_VERSION
            },
        );
        put_u32(&mut b, 12, n as u32);
        put_u32(&mut b, 16, self.segment_blocks);
        b[24..40].copy_from_slice(&self.uuid);
        put_u64(&mut b, 40, self.seg_start);
        put_u32(&mut b, 48, self.superblock.len() as u32);
        put_u32(&mut b, 52, self.partials.len() as u32);
        put_u64(&mut b, 56, self.image.len() as u64);
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(s) = s {
                assert!(
                    s.seq > 0 && s.epoch > 0,
                    "object refs have seq and epoch >= 1"
                );
                let o = HEADER + i * REC;
                put_u64(&mut b, o, s.seq);
                put_u64(&mut b, o + 8, s.epoch);
                put_u32(&mut b, o + 16, s.crc);
            }
        }
        let mut o = HEADER + n * REC;
        b[o..o + self.superblock.len()].copy_from_slice(&self.superblock);
        o += self.superblock.len();
        b[o..o + self.image.len()].copy_from_slice(&self.image);
        o += self.image.len();
        for (slot, p) in &self.partials {
            assert!(
                p.len() % BLOCK_BYTES == 0 && (*slot as usize) < n,
                "a partial is whole blocks of a slot"
            );
            put_u32(&mut b, o, *slot);
            put_u32(&mut b, o + 4, (p.len() / BLOCK_BYTES) as u32);
            b[o + 8..o + 8 + p.len()].copy_from_slice(p);
            o += 8 + p.len();
        }
        if let Some(l) = self.log_start {
            put_u64(&mut b, o, l);
        }
        let crc = crc32c::crc32c(&b[..len - 4]);
        put_u32(&mut b, len - 4, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<ObjCheckpoint, FormatError> {
        if b.len() < HEADER + 4 {
            return Err(FormatError::Short {
                need: HEADER + 4,
                have: b.len(),
            });
        }
        if b[0..8] != OBJ_CKPT_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let v = get_u32(b, 8);
        if v != OBJ_CKPT_VERSION && v != OBJ_CKPT_VERSION_LOG {
            return Err(FormatError::Version(v.min(u16::MAX as u32) as u16));
        }
        let tail = if v == OBJ_CKPT_VERSION_LOG { 8 } else { 0 };
        let n = get_u32(b, 12) as usize;
        let sb_len = get_u32(b, 48) as usize;
        let img_len = get_u64(b, 56);
        if sb_len != BLOCK_BYTES {
            return Err(invalid("objckpt.superblock_len", sb_len.to_string()));
        }
        let need = (HEADER as u64)
            .checked_add(n as u64 * REC as u64)
            .and_then(|x| x.checked_add(sb_len as u64))
            .and_then(|x| x.checked_add(img_len))
            .and_then(|x| x.checked_add(4 + tail as u64));
        if need.is_none_or(|x| x > b.len() as u64) {
            return Err(invalid(
                "objckpt.length",
                format!("{} bytes, the header says {need:?}", b.len()),
            ));
        }
        let len = b.len();
        if crc32c::crc32c(&b[..len - 4]) != get_u32(b, len - 4) {
            return Err(FormatError::Checksum);
        }
        if get_u32(b, 20) != 0 {
            return Err(invalid("objckpt.reserved", "not zero"));
        }
        let mut slots = Vec::with_capacity(n);
        for i in 0..n {
            let o = HEADER + i * REC;
            let r = &b[o..o + REC];
            if r.iter().all(|&x| x == 0) {
                slots.push(None);
                continue;
            }
            let s = SlotObject {
                seq: get_u64(r, 0),
                epoch: get_u64(r, 8),
                crc: get_u32(r, 16),
            };
            // MUTANT: objckpt-reserved-unchecked s|get_u32(r, 20) != 0 {|get_u32(r, 20) == u32::MAX {|
            if s.seq == 0 || s.epoch == 0 || get_u32(r, 20) != 0 {
                return Err(invalid("objckpt.slot", format!("slot {i}")));
            }
            slots.push(Some(s));
        }
        let o = HEADER + n * REC;
        let mut at = o + sb_len + img_len as usize;
        let mut partials = Vec::new();
        for _ in 0..get_u32(b, 52) {
            if at + 8 > len - 4 - tail {
                return Err(invalid("objckpt.partials", "past the end"));
            }
            let slot = get_u32(b, at);
            let blocks = get_u32(b, at + 4) as usize;
            let end = blocks
                .checked_mul(BLOCK_BYTES)
                .and_then(|x| x.checked_add(at + 8))
                .filter(|&e| e <= len - 4 - tail)
                .ok_or_else(|| invalid("objckpt.partials", "past the end"))?;
            if slot as usize >= n || partials.iter().any(|(s, _)| *s == slot) {
                return Err(invalid("objckpt.partials", format!("slot {slot}")));
            }
            partials.push((slot, b[at + 8..end].to_vec()));
            at = end;
        }
        if at != len - 4 - tail {
            return Err(invalid("objckpt.length", "bytes after the last partial"));
        }
        let log_start = (tail > 0).then(|| get_u64(b, at));
        Ok(ObjCheckpoint {
            uuid: b[24..40].try_into().unwrap(),
            segment_blocks: get_u32(b, 16),
            seg_start: get_u64(b, 40),
            slots,
            superblock: b[o..o + sb_len].to_vec(),
            image: b[o + sb_len..o + sb_len + img_len as usize].to_vec(),
            partials,
            log_start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ObjCheckpoint {
        ObjCheckpoint {
            uuid: [7; 16],
            segment_blocks: 16,
            seg_start: 42,
            slots: vec![
                None,
                Some(SlotObject {
                    seq: 3,
                    epoch: 1,
                    crc: 0xdead_beef,
                }),
                None,
            ],
            superblock: vec![5; BLOCK_BYTES],
            image: vec![9; 3 * BLOCK_BYTES],
            partials: vec![(2, vec![3; 2 * BLOCK_BYTES]), (0, vec![4; BLOCK_BYTES])],
            log_start: None,
        }
    }

    fn with_log() -> ObjCheckpoint {
        ObjCheckpoint {
            log_start: Some(0x0123_4567_89ab_cdef),
            ..sample()
        }
    }

    #[test]
    fn round_trip() {
        for c in [sample(), with_log()] {
            assert_eq!(ObjCheckpoint::decode(&c.encode()).unwrap(), c);
        }
        assert_eq!(get_u32(&sample().encode(), 8), OBJ_CKPT_VERSION);
        assert_eq!(get_u32(&with_log().encode(), 8), OBJ_CKPT_VERSION_LOG);
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        for c in [sample(), with_log()] {
            flips_and_cuts(c.encode());
        }
    }

    fn flips_and_cuts(b: Vec<u8>) {
        // a flip anywhere (sampled: every 97th bit and the whole header)
        for bit in (0..b.len() * 8).filter(|i| i % 97 == 0 || *i < HEADER * 8) {
            let mut x = b.clone();
            x[bit / 8] ^= 1 << (bit % 8);
            assert!(
                ObjCheckpoint::decode(&x).is_err(),
                "bit {bit} flipped accepted"
            );
        }
        for cut in [0, 1, HEADER, b.len() / 2, b.len() - 1] {
            assert!(
                ObjCheckpoint::decode(&b[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut long = b.clone();
        long.push(0);
        assert!(ObjCheckpoint::decode(&long).is_err());
    }

    #[test]
    fn huge_lengths_are_errors_not_panics() {
        let mut b = sample().encode();
        put_u64(&mut b, 56, u64::MAX);
        assert!(ObjCheckpoint::decode(&b).is_err());
        put_u32(&mut b, 12, u32::MAX);
        assert!(ObjCheckpoint::decode(&b).is_err());
    }
}
