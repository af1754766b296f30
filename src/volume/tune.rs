//! Settings of a volume that is not mounted (`sluice tune`): today whether
//! a compressed volume compresses its new writes (issue 19, item 5).
//!
//! Owns the one write a setting takes: the current superblock again, with
//! the setting changed, as the next two generations (both indexes, each
//! flushed; a torn write leaves the other index whole, with the old
//! setting or the new, never a third thing). Nothing else on the media moves.
//!
//! Invariant: the `COMPRESSION` feature bit never changes. Once a volume
//! may hold a fragment its map values are 5 bytes in every checkpoint and
//! its chunks may hold Packed entries; a build that reads it without the
//! bit would decode both wrongly. Switching compression off only sets
//! `compat::COMPRESS_OFF` (new user writes stored raw); a volume created
//! without compression has checkpoint slots sized for 4-byte map values, so
//! it cannot be switched on (create it with `--compress lz4`).

use crate::compress::Compression;
use crate::error::{Error, Result};
use crate::format::superblock::{compat, Superblock};
use crate::media::Media;
use crate::recovery;

/// Set whether the compressed volume on `media` (not mounted: the caller
/// holds its lock) compresses new writes. Returns the superblock now on the
/// media (unchanged, and nothing written, when the setting was already so).
pub fn set_compression(media: &dyn Media, want: Compression) -> Result<Superblock> {
    let sb = recovery::read_superblocks(media)?.sb;
    if !sb.compressed() {
        return match want {
            Compression::Off => Ok(sb),
            Compression::Lz4 => Err(Error::InvalidArgument(format!(
                "{} was created without compression: its checkpoint slots hold 4-byte map values, \
                 and a fragment needs 5 (create a volume with --compress lz4 and copy the data)",
                media.describe()
            ))),
        };
    }
    let off = want == Compression::Off;
    if sb.compresses_new_writes() != off {
        return Ok(sb);
    }
    let mut next = sb.clone();
    let v = next.v2.as_mut().expect("a compressed volume is v2");
    if off {
        v.features_compat |= compat::COMPRESS_OFF;
    } else {
        v.features_compat &= !compat::COMPRESS_OFF;
    }
    super::logdev::write_both_indexes(media, &next)
}
