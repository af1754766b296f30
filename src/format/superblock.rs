//! Superblock: one 4 KiB block, stored in two copies (media offsets 0 and 4096) that
//! are written alternately. The copy with the highest generation whose CRC verifies
//! wins. It records the geometry, the options, which checkpoint slot is current, and
//! the reuse watermark (see ARCHITECTURE.md, "segment reuse"). Volumes created since
//! issue 17 also keep both copies in a tail area at the end of the media
//! (`tail_offset`, 0 = none), written together with the head copy of the same index.

use super::*;

pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"SLUICESB";
/// Flag bit: the volume was closed cleanly (its checkpoint covers every chunk).
pub const FLAG_CLEAN: u32 = 1;
/// `checkpoint_slot` value meaning "no checkpoint yet".
pub const NO_CHECKPOINT: u32 = u32::MAX;
/// How much larger than its checkpoint a slot may be (validation bound).
pub const SLOT_SLACK_BYTES: u64 = 1 << 20;
/// Size of the tail area at the end of the media: tail copy `i` sits at
/// `tail_offset + i * 4096`, the rest is unused. 64 KiB so the tail copies stay
/// clear of what tools write at a device's very end (a GPT backup header and
/// table: the last 16.5 KiB; an md 1.0 superblock: 8 to 12 KiB from the end).
pub const TAIL_AREA_BYTES: u64 = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: [u8; 16],
    pub generation: u64,
    pub logical_blocks: u64,
    pub segment_blocks: u32,
    pub segment_count: u32,
    /// Byte offset of segment 0 on the media.
    pub data_offset: u64,
    /// Byte offsets of the two checkpoint slots.
    pub checkpoint_offset: [u64; 2],
    pub checkpoint_slot_bytes: u64,
    /// Over-provisioning in basis points (1000 = 10%).
    pub overprovision_bp: u32,
    pub flags: u32,
    /// Slot (0 or 1) of the newest checkpoint, or NO_CHECKPOINT.
    pub checkpoint_slot: u32,
    /// Sequence number the newest checkpoint covers up to (exclusive): chunks with
    /// seq >= this are replayed on mount.
    pub checkpoint_next_seq: u64,
    /// Reuse watermark: every chunk with seq < this was durable before any segment
    /// was reused after it, so a missing chunk below it is dead and may be skipped.
    pub durable_seq: u64,
    pub created_unix_s: u64,
    /// GC policy id (see gc::Policy); an option, not geometry.
    pub gc_policy: u32,
    /// Byte offset of the tail area (`TAIL_AREA_BYTES`, holding tail copies 0 and
    /// 1), or 0: the volume has no tail copies (created before issue 17, or last
    /// written by a build that predates them, which writes 0 here).
    pub tail_offset: u64,
    /// Format version 2 fields (`docs/format-v2.md` §2), None for a version 1
    /// superblock. A volume is v2 only when a v2 feature was asked for at create.
    pub v2: Option<SbV2>,
}

/// Feature bits of `features_compat` (docs/format-v2.md §2): a build that
/// does not know one mounts and writes the volume as if it were clear.
pub mod compat {
    /// A compressed volume's new user writes are stored raw (`sluice tune
    /// VOL --compress off`). Only meaningful with `incompat::COMPRESSION`,
    /// which stays set: fragments written before may still be live. A build
    /// that ignores the bit compresses new writes, which is harmless.
    pub const COMPRESS_OFF: u64 = 1 << 0;
}

/// Feature bits of `features_incompat` (docs/format-v2.md §2).
pub mod incompat {
    /// An intent log ring in the volume (§4); requires `LSN`.
    pub const INTENT_LOG: u64 = 1 << 0;
    /// The intent log ring is on separate device(s) (§4.3): `log_offset` is
    /// 0 and each device carries its own superblock (`format::logdev`).
    pub const LOG_DEVICE: u64 = 1 << 1;
    /// Compressed data (§5): 5-byte map values in checkpoints; packed
    /// entries (not written by this build yet: docs/compression.md).
    pub const COMPRESSION: u64 = 1 << 2;
    /// Stripe set members (§6; not in this build).
    pub const STRIPE_SET: u64 = 1 << 3;
    /// Object store (§7; not in this build).
    pub const OBJECT_STORE: u64 = 1 << 4;
    /// Chunk headers carry the LSN range of their user entries (§3).
    pub const LSN: u64 = 1 << 5;
    /// Chunk headers name the previous chunk of their class (§3, `prev_seq`:
    /// `chunk::Chain`, covered by the header CRC, so a build without it
    /// would take every chained header for a damaged one); requires `LSN`.
    pub const CHAIN: u64 = 1 << 6;
    /// The in-volume ring's records are version 3 (docs/intent-log.md §2,
    /// format-v2.md §4.4): sector-sized, no data blocks, naming where the data
    /// blocks were written inside the open chunk's reservation (ZFS's
    /// `WR_INDIRECT`); the log start may sit on any 512-byte boundary. An
    /// older build would read such a record as damaged and lose the writes it
    /// covers: incompat. Requires `INTENT_LOG`, and excludes `LOG_DEVICE`
    /// (a log device keeps copying data) and `COMPRESSION` (a compressed
    /// chunk's place is not known until it is packed).
    pub const LOG_INDIRECT: u64 = 1 << 7;
    /// Chunk headers store a non-linear function of their CRC32C
    /// (`chunk::mix`, flagged by `chunk::MIXED_CHECK_FLAG` in each header):
    /// set at create on every stripe set, where a block rebuilt from parity
    /// that disagrees with its data is the XOR of other blocks, which a
    /// linear check accepts (docs/stripes.md §0, finding 1). An older build
    /// would take every such header for a damaged one: incompat.
    pub const MIXED_HEADER_CHECK: u64 = 1 << 8;
    /// The bits this build mounts.
    pub const KNOWN: u64 =
        INTENT_LOG | LSN | LOG_DEVICE | COMPRESSION | CHAIN | LOG_INDIRECT | MIXED_HEADER_CHECK;
    /// Name of one bit, for refusals.
    pub fn name(bit: u32) -> String {
        match bit {
            0 => "INTENT_LOG".into(),
            1 => "LOG_DEVICE".into(),
            2 => "COMPRESSION".into(),
            3 => "STRIPE_SET".into(),
            4 => "OBJECT_STORE".into(),
            5 => "LSN".into(),
            6 => "CHAIN".into(),
            7 => "LOG_INDIRECT".into(),
            8 => "MIXED_HEADER_CHECK".into(),
            b => format!("bit {b}"),
        }
    }
}

/// Where intent log replay starts: the ring offset of the first record mount
/// must look at, its record seq, and the header CRC it must chain to (for the
/// first record after a new start, a fresh seed no earlier record's CRC
/// matches but by chance). Persisted before any ring space behind it is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogStart {
    /// Byte offset inside the ring (a multiple of 4096, < log_bytes).
    pub offset: u64,
    pub seq: u64,
    pub chain: u32,
}

/// The version 2 part of the superblock (bytes 144..284).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SbV2 {
    pub features_compat: u64,
    pub features_ro_compat: u64,
    pub features_incompat: u64,
    /// Identity of the intent log (0 = none).
    pub log_uuid: [u8; 16],
    /// Media byte offset of the in-volume ring (0 = none).
    pub log_offset: u64,
    pub log_bytes: u64,
    pub log_start: LogStart,
    /// With `LOG_DEVICE`: bit i set = log device mirror i missed records
    /// (it failed while serving, or a mount ran without it); replay never
    /// reads it while the other mirror is there, and alone it is refused.
    /// Cleared by a mount that writes to both again.
    pub log_stale: u32,
}

impl SbV2 {
    pub fn has(&self, bit: u64) -> bool {
        self.features_incompat & bit != 0
    }
}

/// Smallest intent log ring (a record of one header and 8 data blocks must
/// fit several times).
pub const MIN_LOG_BYTES: u64 = 64 << 10;
/// Largest ring on a log device (a bound for validation, not a target).
pub const MAX_DEVICE_LOG_BYTES: u64 = 1 << 40;

impl Superblock {
    /// The format version this superblock is written with.
    pub fn version(&self) -> u16 {
        if self.v2.is_some() {
            FORMAT_VERSION_2
        } else {
            FORMAT_VERSION
        }
    }

    /// The in-volume intent log ring `(media offset, bytes)`, if the volume has one.
    pub fn log_ring(&self) -> Option<(u64, u64)> {
        self.v2
            .filter(|v| v.has(incompat::INTENT_LOG) && !v.has(incompat::LOG_DEVICE))
            .map(|v| (v.log_offset, v.log_bytes))
    }

    /// The intent log on separate device(s): `(log_uuid, ring bytes)`.
    pub fn log_device(&self) -> Option<([u8; 16], u64)> {
        self.v2
            .filter(|v| v.has(incompat::LOG_DEVICE))
            .map(|v| (v.log_uuid, v.log_bytes))
    }

    /// The in-volume ring takes version 3 records (`LOG_INDIRECT`): data
    /// written in place, records naming it.
    pub fn log_indirect(&self) -> bool {
        self.v2.is_some_and(|v| v.has(incompat::LOG_INDIRECT))
    }

    /// The volume has an intent log, in the volume or on a device.
    pub fn has_intent_log(&self) -> bool {
        self.v2.is_some_and(|v| v.has(incompat::INTENT_LOG))
    }

    /// The volume was created with compression (`COMPRESSION`).
    pub fn compressed(&self) -> bool {
        self.v2.is_some_and(|v| v.has(incompat::COMPRESSION))
    }

    /// New user writes are compressed: a compressed volume whose setting
    /// (`compat::COMPRESS_OFF`) was not switched off.
    pub fn compresses_new_writes(&self) -> bool {
        self.v2.is_some_and(|v| {
            v.has(incompat::COMPRESSION) && v.features_compat & compat::COMPRESS_OFF == 0
        })
    }

    /// Bytes of one map value in a checkpoint body (and in RAM): 5 on a
    /// compressed volume, else 4.
    pub fn map_value_bytes(&self) -> u64 {
        if self.compressed() {
            crate::format::checkpoint::MAP_VALUE_BYTES_COMPRESSED
        } else {
            crate::format::checkpoint::MAP_VALUE_BYTES
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_BYTES];
        b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u16(&mut b, 8, self.version());
        put_u32(&mut b, 12, BLOCK_BYTES as u32);
        b[16..32].copy_from_slice(&self.uuid);
        put_u64(&mut b, 32, self.generation);
        put_u64(&mut b, 40, self.logical_blocks);
        put_u32(&mut b, 48, self.segment_blocks);
        put_u32(&mut b, 52, self.segment_count);
        put_u64(&mut b, 56, self.data_offset);
        put_u64(&mut b, 64, self.checkpoint_offset[0]);
        put_u64(&mut b, 72, self.checkpoint_offset[1]);
        put_u64(&mut b, 80, self.checkpoint_slot_bytes);
        put_u32(&mut b, 88, self.overprovision_bp);
        put_u32(&mut b, 92, self.flags);
        put_u32(&mut b, 96, self.checkpoint_slot);
        put_u64(&mut b, 104, self.checkpoint_next_seq);
        put_u64(&mut b, 112, self.durable_seq);
        put_u64(&mut b, 120, self.created_unix_s);
        put_u32(&mut b, 128, self.gc_policy);
        put_u64(&mut b, 136, self.tail_offset);
        if let Some(v) = &self.v2 {
            put_u64(&mut b, 144, v.features_compat);
            put_u64(&mut b, 152, v.features_ro_compat);
            put_u64(&mut b, 160, v.features_incompat);
            b[168..184].copy_from_slice(&v.log_uuid);
            put_u64(&mut b, 184, v.log_offset);
            put_u64(&mut b, 192, v.log_bytes);
            put_u64(&mut b, 264, v.log_start.offset);
            put_u64(&mut b, 272, v.log_start.seq);
            put_u32(&mut b, 280, v.log_start.chain);
            put_u32(&mut b, 284, v.log_stale);
        }
        let crc = crc32c::crc32c(&b[..BLOCK_BYTES - 4]);
        put_u32(&mut b, BLOCK_BYTES - 4, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        if b.len() < BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: b.len(),
            });
        }
        if b[0..8] != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if crc32c::crc32c(&b[..BLOCK_BYTES - 4]) != get_u32(b, BLOCK_BYTES - 4) {
            return Err(FormatError::Checksum);
        }
        let version = get_u16(b, 8);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_2 {
            return Err(FormatError::Version(version));
        }
        if get_u32(b, 12) != BLOCK_BYTES as u32 {
            return Err(invalid(
                "block_size",
                format!("{} (expected {BLOCK_BYTES})", get_u32(b, 12)),
            ));
        }
        let sb = Superblock {
            uuid: b[16..32].try_into().unwrap(),
            generation: get_u64(b, 32),
            logical_blocks: get_u64(b, 40),
            segment_blocks: get_u32(b, 48),
            segment_count: get_u32(b, 52),
            data_offset: get_u64(b, 56),
            checkpoint_offset: [get_u64(b, 64), get_u64(b, 72)],
            checkpoint_slot_bytes: get_u64(b, 80),
            overprovision_bp: get_u32(b, 88),
            flags: get_u32(b, 92),
            checkpoint_slot: get_u32(b, 96),
            checkpoint_next_seq: get_u64(b, 104),
            durable_seq: get_u64(b, 112),
            created_unix_s: get_u64(b, 120),
            gc_policy: get_u32(b, 128),
            tail_offset: get_u64(b, 136),
            // a v1 superblock's reserved bytes are ignored (covered by the CRC)
            v2: (version == FORMAT_VERSION_2).then(|| SbV2 {
                features_compat: get_u64(b, 144),
                features_ro_compat: get_u64(b, 152),
                features_incompat: get_u64(b, 160),
                log_uuid: b[168..184].try_into().unwrap(),
                log_offset: get_u64(b, 184),
                log_bytes: get_u64(b, 192),
                log_start: LogStart {
                    offset: get_u64(b, 264),
                    seq: get_u64(b, 272),
                    chain: get_u32(b, 280),
                },
                log_stale: get_u32(b, 284),
            }),
        };
        if let Some(v) = &sb.v2 {
            let unknown = v.features_incompat & !incompat::KNOWN;
            if unknown != 0 {
                return Err(FormatError::Feature(incompat::name(
                    unknown.trailing_zeros(),
                )));
            }
        }
        sb.validate()?;
        Ok(sb)
    }

    /// Geometry checks that make every later computation safe from overflow.
    fn validate(&self) -> Result<(), FormatError> {
        if self.segment_blocks < crate::format::chunk::MIN_SEGMENT_BLOCKS
            || self.segment_blocks > 1 << 20
        {
            return Err(invalid("segment_blocks", self.segment_blocks.to_string()));
        }
        if self.segment_count < 4 {
            return Err(invalid("segment_count", self.segment_count.to_string()));
        }
        let data_blocks = self.segment_count as u64 * self.segment_blocks as u64;
        if data_blocks > crate::format::MAX_PHYS_BLOCKS {
            return Err(invalid("segment_count", "data area too large".to_string()));
        }
        if self.logical_blocks == 0
            || self.logical_blocks > data_blocks
            || self.logical_blocks > crate::format::MAX_LOGICAL_BLOCKS
        {
            return Err(invalid("logical_blocks", self.logical_blocks.to_string()));
        }
        if self.checkpoint_slot != NO_CHECKPOINT && self.checkpoint_slot > 1 {
            return Err(invalid("checkpoint_slot", self.checkpoint_slot.to_string()));
        }
        let need = crate::format::checkpoint::slot_bytes_with(
            self.logical_blocks,
            self.segment_count,
            self.map_value_bytes(),
        );
        if self.checkpoint_slot_bytes < need {
            return Err(invalid(
                "checkpoint_slot_bytes",
                "smaller than the checkpoint".to_string(),
            ));
        }
        // Mount allocates one slot: bound it by what the checkpoint needs (slack of
        // SLOT_SLACK_BYTES for writers that pad slots), and keep it block aligned.
        if self.checkpoint_slot_bytes > need + SLOT_SLACK_BYTES
            || !self
                .checkpoint_slot_bytes
                .is_multiple_of(BLOCK_BYTES as u64)
        {
            return Err(invalid(
                "checkpoint_slot_bytes",
                format!("{} for a checkpoint of {need}", self.checkpoint_slot_bytes),
            ));
        }
        for &o in &self.checkpoint_offset {
            if !o.is_multiple_of(BLOCK_BYTES as u64)
                || o < 2 * BLOCK_BYTES as u64
                || o.checked_add(self.checkpoint_slot_bytes)
                    .is_none_or(|e| e > self.data_offset)
            {
                return Err(invalid("checkpoint_offset", o.to_string()));
            }
        }
        // Writing one slot must never touch the other (the current checkpoint).
        let [c0, c1] = self.checkpoint_offset;
        if c0.abs_diff(c1) < self.checkpoint_slot_bytes {
            return Err(invalid("checkpoint_offset", "the two slots overlap"));
        }
        // media_bytes() and every segment offset must not overflow (found by fuzzing:
        // a data_offset near u64::MAX wrapped media_bytes() to a small value).
        if !self.data_offset.is_multiple_of(BLOCK_BYTES as u64)
            || self
                .data_offset
                .checked_add(data_blocks * BLOCK_BYTES as u64)
                .is_none()
        {
            return Err(invalid("data_offset", self.data_offset.to_string()));
        }
        // The tail area lies after the segment area and its end does not overflow.
        let data_end = self.data_offset + data_blocks * BLOCK_BYTES as u64;
        if self.tail_offset != 0
            && (!self.tail_offset.is_multiple_of(BLOCK_BYTES as u64)
                || self.tail_offset < data_end
                || self.tail_offset.checked_add(TAIL_AREA_BYTES).is_none())
        {
            return Err(invalid("tail_offset", self.tail_offset.to_string()));
        }
        if let Some(v) = &self.v2 {
            self.validate_v2(v)?;
        }
        Ok(())
    }

    /// The per-feature checks of a v2 superblock: the ring lies between the
    /// checkpoint slots and the segment area, the start inside it.
    fn validate_v2(&self, v: &SbV2) -> Result<(), FormatError> {
        // LSN may stand alone: a volume whose log device was removed
        // (`sluice log-device remove`) keeps the LSNs its chunks carry, and
        // FLUSH seals; an intent log always needs them
        if v.has(incompat::INTENT_LOG) && !v.has(incompat::LSN) {
            return Err(invalid("features_incompat", "INTENT_LOG needs LSN"));
        }
        if v.has(incompat::CHAIN) && !v.has(incompat::LSN) {
            // the chain lives in version 2 chunk headers, which LSN makes
            return Err(invalid("features_incompat", "CHAIN needs LSN"));
        }
        if v.has(incompat::LOG_INDIRECT)
            && (!v.has(incompat::INTENT_LOG)
                || v.has(incompat::LOG_DEVICE)
                || v.has(incompat::COMPRESSION))
        {
            return Err(invalid(
                "features_incompat",
                "LOG_INDIRECT needs INTENT_LOG in the volume, without LOG_DEVICE or COMPRESSION",
            ));
        }
        if !v.has(incompat::INTENT_LOG) {
            return if v.log_offset == 0
                && v.log_bytes == 0
                && v.log_stale == 0
                && !v.has(incompat::LOG_DEVICE)
            {
                Ok(())
            } else {
                Err(invalid("log_offset", "a log ring without INTENT_LOG"))
            };
        }
        let bs = BLOCK_BYTES as u64;
        if v.log_stale != 0 && (!v.has(incompat::LOG_DEVICE) || v.log_stale > 2) {
            // at most one of a pair is stale: the last device in use is never marked
            return Err(invalid("log_stale", v.log_stale.to_string()));
        }
        if v.has(incompat::LOG_DEVICE) {
            // the ring is on the device(s); its size here must match theirs
            if v.log_offset != 0
                || v.log_bytes < MIN_LOG_BYTES
                || !v.log_bytes.is_multiple_of(bs)
                || v.log_bytes > MAX_DEVICE_LOG_BYTES
                || v.log_uuid == [0; 16]
            {
                return Err(invalid(
                    "log_offset",
                    format!(
                        "a log device ring of {} bytes at {} (offset must be 0, size 64 KiB..1 TiB, uuid set)",
                        v.log_bytes, v.log_offset
                    ),
                ));
            }
            if v.log_start.offset >= v.log_bytes || !v.log_start.offset.is_multiple_of(bs) {
                return Err(invalid("log_start", v.log_start.offset.to_string()));
            }
            return Ok(());
        }
        let slots_end =
            self.checkpoint_offset[0].max(self.checkpoint_offset[1]) + self.checkpoint_slot_bytes;
        if v.log_bytes < MIN_LOG_BYTES
            || !v.log_bytes.is_multiple_of(bs)
            || !v.log_offset.is_multiple_of(bs)
            || v.log_offset < slots_end
            || v.log_offset
                .checked_add(v.log_bytes)
                .is_none_or(|e| e > self.data_offset)
        {
            return Err(invalid(
                "log_offset",
                format!(
                    "ring of {} bytes at {} is not between the checkpoint slots (end {slots_end}) and the data area ({})",
                    v.log_bytes, v.log_offset, self.data_offset
                ),
            ));
        }
        // version 3 records are packed at 512-byte granularity
        let unit = if v.has(incompat::LOG_INDIRECT) {
            crate::format::intent::SECTOR_BYTES as u64
        } else {
            bs
        };
        if v.log_start.offset >= v.log_bytes || !v.log_start.offset.is_multiple_of(unit) {
            return Err(invalid("log_start", v.log_start.offset.to_string()));
        }
        Ok(())
    }

    /// Media byte offset of tail copy `index` (0 or 1), if the volume has tail copies.
    pub fn tail_copy_offset(&self, index: u64) -> Option<u64> {
        (self.tail_offset != 0).then(|| self.tail_offset + index * BLOCK_BYTES as u64)
    }

    pub fn is_clean(&self) -> bool {
        self.flags & FLAG_CLEAN != 0
    }

    /// Bytes of media this geometry needs (up to the end of the tail area, if any).
    pub fn media_bytes(&self) -> u64 {
        match self.tail_offset {
            0 => {
                self.data_offset
                    + self.segment_count as u64 * self.segment_blocks as u64 * BLOCK_BYTES as u64
            }
            t => t + TAIL_AREA_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Superblock {
        Superblock {
            uuid: [7; 16],
            generation: 3,
            logical_blocks: 1000,
            segment_blocks: 64,
            segment_count: 20,
            data_offset: 1 << 20,
            checkpoint_offset: [8192, 8192 + 65536],
            checkpoint_slot_bytes: 65536,
            overprovision_bp: 1000,
            flags: FLAG_CLEAN,
            checkpoint_slot: 1,
            checkpoint_next_seq: 42,
            durable_seq: 40,
            created_unix_s: 1,
            gc_policy: 0,
            tail_offset: (1 << 20) + 20 * 64 * 4096,
            v2: None,
        }
    }

    fn sample_v2() -> Superblock {
        let mut sb = sample();
        sb.data_offset = 2 << 20;
        sb.tail_offset = (2 << 20) + 20 * 64 * 4096;
        sb.v2 = Some(SbV2 {
            features_incompat: incompat::INTENT_LOG | incompat::LSN,
            log_uuid: [3; 16],
            log_offset: 1 << 20,
            log_bytes: 256 << 10,
            log_start: LogStart {
                offset: 8192,
                seq: 9,
                chain: 0xdead_beef,
            },
            ..SbV2::default()
        });
        sb
    }

    #[test]
    fn v2_roundtrips_and_v1_stays_v1() {
        let sb = sample_v2();
        let b = sb.encode();
        assert_eq!(get_u16(&b, 8), 2);
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        // a v1 superblock is written with version 1 and nothing past 144
        let v1 = sample().encode();
        assert_eq!(get_u16(&v1, 8), 1);
        assert!(v1[144..4092].iter().all(|&x| x == 0));
        // v1 bytes in 144.. are ignored by the v1 decode (reserved)
        let mut odd = sample().encode();
        odd[200] = 1;
        let crc = crc32c::crc32c(&odd[..4092]);
        put_u32(&mut odd, 4092, crc);
        assert_eq!(Superblock::decode(&odd).unwrap().v2, None);
    }

    #[test]
    fn compressed_volume_needs_a_slot_for_five_byte_map_values() {
        // 4000 logical blocks, 100 segments: 4-byte values need a 24 KiB
        // slot (header + 16000 + 1600 body bytes), 5-byte ones 28 KiB
        // (header + 20000 + 1600)
        let big = || {
            let mut sb = sample();
            (sb.logical_blocks, sb.segment_count) = (4000, 100);
            sb.tail_offset = sb.data_offset + 100 * 64 * 4096;
            sb
        };
        let mut sb = big();
        sb.v2 = Some(SbV2 {
            features_incompat: incompat::COMPRESSION,
            ..SbV2::default()
        });
        assert!(sb.compressed());
        assert_eq!(sb.map_value_bytes(), 5);
        assert!(!sample().compressed());
        assert_eq!(sample().map_value_bytes(), 4);
        sb.checkpoint_slot_bytes = 28672;
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        sb.checkpoint_slot_bytes = 24576;
        let e = Superblock::decode(&sb.encode()).unwrap_err();
        assert!(e.to_string().contains("checkpoint_slot_bytes"), "{e}");
        // the same slot is enough without compression
        let mut v1 = big();
        v1.checkpoint_slot_bytes = 24576;
        Superblock::decode(&v1.encode()).unwrap();
    }

    #[test]
    fn unknown_incompat_bit_is_refused_by_name() {
        for (bit, name) in [(3u64, "STRIPE_SET"), (40, "bit 40")] {
            let mut sb = sample_v2();
            sb.v2.as_mut().unwrap().features_incompat |= 1 << bit;
            let e = Superblock::decode(&sb.encode()).unwrap_err();
            assert_eq!(e, FormatError::Feature(name.into()));
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn log_device_volume_roundtrips_and_is_validated() {
        let mut sb = sample_v2();
        {
            let v = sb.v2.as_mut().unwrap();
            v.features_incompat |= incompat::LOG_DEVICE;
            v.log_offset = 0;
            v.log_bytes = 16 << 20;
        }
        let d = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(d, sb);
        assert_eq!(d.log_ring(), None);
        assert_eq!(d.log_device(), Some(([3; 16], 16 << 20)));
        assert!(d.has_intent_log());
        let mut st = sb.clone();
        st.v2.as_mut().unwrap().log_stale = 2;
        assert_eq!(Superblock::decode(&st.encode()).unwrap(), st);
        let bad: [fn(&mut SbV2); 7] = [
            |v| v.log_stale = 3,                            // both mirrors stale
            |v| v.log_stale = 4,                            // no mirror 2
            |v| v.log_offset = 1 << 20,                     // a ring in the volume too
            |v| v.log_bytes = 4096,                         // too small
            |v| v.log_uuid = [0; 16],                       // no identity
            |v| v.log_start.offset = 16 << 20,              // start outside the ring
            |v| v.features_incompat = incompat::LOG_DEVICE, // without INTENT_LOG
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut b = sb.clone();
            f(b.v2.as_mut().unwrap());
            assert!(Superblock::decode(&b.encode()).is_err(), "case {i}");
        }
    }

    #[test]
    fn v2_log_ring_is_validated() {
        let bad: [fn(&mut SbV2); 6] = [
            |v| v.log_offset = 4096,                        // over the superblocks/slots
            |v| v.log_bytes = 4 << 20,                      // into the data area
            |v| v.log_bytes = 4096,                         // too small
            |v| v.log_start.offset = 256 << 10,             // start outside the ring
            |v| v.features_incompat = incompat::INTENT_LOG, // without LSN
            |v| v.features_incompat = incompat::LSN,        // a ring without INTENT_LOG
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut sb = sample_v2();
            f(sb.v2.as_mut().unwrap());
            assert!(Superblock::decode(&sb.encode()).is_err(), "case {i}");
        }
    }

    /// LSN alone (a volume whose log device was removed) is valid with no
    /// log fields; INTENT_LOG alone is not.
    #[test]
    fn lsn_alone_is_a_volume_without_a_log() {
        let mut sb = sample_v2();
        let v = sb.v2.as_mut().unwrap();
        *v = SbV2 {
            features_incompat: incompat::LSN,
            ..SbV2::default()
        };
        let back = Superblock::decode(&sb.encode()).unwrap();
        assert!(!back.has_intent_log() && back.log_ring().is_none());
        assert!(back.log_device().is_none());
        sb.v2.as_mut().unwrap().log_stale = 1;
        assert!(Superblock::decode(&sb.encode()).is_err());
        // the chain lives in v2 chunk headers: with LSN, never without
        sb.v2.as_mut().unwrap().log_stale = 0;
        sb.v2.as_mut().unwrap().features_incompat = incompat::LSN | incompat::CHAIN;
        assert!(Superblock::decode(&sb.encode()).is_ok());
        sb.v2.as_mut().unwrap().features_incompat = incompat::CHAIN;
        let e = Superblock::decode(&sb.encode()).unwrap_err().to_string();
        assert!(e.contains("CHAIN needs LSN"), "{e}");
    }

    #[test]
    fn superblock_roundtrips_and_rejects_any_flipped_bit() {
        let sb = sample();
        let bytes = sb.encode();
        assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
        for bit in [0usize, 77, 8 * 100 + 3, 8 * 4095 + 7] {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn tail_offset_is_optional_and_validated() {
        // 0 (a volume without tail copies) decodes, and the field sits in bytes a
        // v1 decoder that predates it ignores (covered by the CRC).
        let mut sb = sample();
        sb.tail_offset = 0;
        let b = sb.encode();
        assert!(b[132..4092].iter().all(|&x| x == 0));
        assert_eq!(
            Superblock::decode(&b).unwrap().media_bytes(),
            (1 << 20) + 20 * 64 * 4096
        );
        let with = sample();
        assert_eq!(with.media_bytes(), with.tail_offset + TAIL_AREA_BYTES);
        for bad in [4097, 1 << 20, u64::MAX - 4095] {
            sb.tail_offset = bad;
            assert!(
                Superblock::decode(&sb.encode()).is_err(),
                "tail_offset {bad}"
            );
        }
    }
}
