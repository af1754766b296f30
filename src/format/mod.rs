//! Format layer: pure encode/decode of every on-disk structure (superblock, chunk,
//! checkpoint). No IO happens here; callers hand in and get back byte slices.
//!
//! Invariant: every decoder validates magic, version, lengths and CRC32C before it
//! returns a value, and returns a `FormatError` (never panics) on any input.
//! The byte layout of each structure is documented in `docs/format.md`.

pub mod checkpoint;
pub mod chunk;
pub mod codec;
pub mod intent;
pub mod logdev;
pub mod lz4;
pub mod objckpt;
pub mod objlog;
pub mod objname;
pub mod packed;
pub mod stripe;
pub mod superblock;

/// The logical and physical block size of every sluice volume.
pub const BLOCK_BYTES: usize = 4096;
/// On-disk format version written by this build. Readers accept exactly this
/// major version; see docs/format.md for the upgrade rule.
pub const FORMAT_VERSION: u16 = 1;
/// Format version 2 (docs/format-v2.md): written only for volumes that use a
/// v2 feature (today: the intent log). Decoders accept 1 and 2.
pub const FORMAT_VERSION_2: u16 = 2;

/// Why a decoder refused some bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported format version {0}")]
    Version(u16),
    #[error("needs feature {0}, which this build does not know")]
    Feature(String),
    #[error("checksum mismatch")]
    Checksum,
    #[error("buffer too short: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    #[error("invalid field {field}: {why}")]
    Invalid { field: &'static str, why: String },
}

pub(crate) fn invalid(field: &'static str, why: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        field,
        why: why.into(),
    }
}

pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
}
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// True when every byte of `block` equals `byte` (used for virtual zero/ones blocks).
pub fn is_filled_with(block: &[u8], byte: u8) -> bool {
    let word = u64::from_ne_bytes([byte; 8]);
    let (head, mid, tail) = unsafe { block.align_to::<u64>() };
    head.iter().all(|&b| b == byte)
        && mid.iter().all(|&w| w == word)
        && tail.iter().all(|&b| b == byte)
}

/// Physical data blocks addressable by a map value (2^31 blocks = 8 TiB of segments).
pub const MAX_PHYS_BLOCKS: u64 = 1 << 31;

/// Logical blocks a volume may have (16 TiB).
pub const MAX_LOGICAL_BLOCKS: u64 = (1 << 32) - 1;
