//! The signature probe, shared by every command that is about to write over a
//! file or device (`create`, bench targets, output files): recognise partition
//! tables, filesystem and volume signatures in the first 128 KiB, and tell an
//! empty file from one holding data anywhere (SEEK_DATA).
//!
//! Invariant: `refuse_write` returns a reason (never silently Ok) for a block device
//! whose first 128 KiB carry a known signature, and for a regular file that holds any
//! allocated data (a sluice volume included: the reason says so); only the caller's
//! `--force` overrides it.

use anyhow::{Context, Result};
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// How much of the start of a target is examined.
pub const PROBE_BYTES: usize = 128 << 10;

fn at(b: &[u8], off: usize, magic: &[u8]) -> bool {
    b.get(off..off + magic.len()) == Some(magic)
}

/// What the start of a device holds, if it is something a write would destroy.
pub fn signature(b: &[u8]) -> Option<String> {
    let sig = |s: &str| Some(s.to_string());
    if at(b, 0, b"SLUICESB") || at(b, 4096, b"SLUICESB") {
        return sig("a sluice volume");
    }
    if at(b, 0, b"SLUICELG") || at(b, 4096, b"SLUICELG") {
        return sig("a sluice log device");
    }
    if at(b, 512, b"EFI PART") || at(b, 4096, b"EFI PART") {
        return sig("a GPT partition table");
    }
    if at(b, 1024 + 56, &[0x53, 0xEF]) {
        return sig("an ext2/3/4 filesystem");
    }
    if at(b, 0, b"XFSB") {
        return sig("an XFS filesystem");
    }
    if at(b, 65536 + 64, b"_BHRfS_M") {
        return sig("a btrfs filesystem");
    }
    if at(b, 0, b"LUKS\xba\xbe") {
        return sig("a LUKS container");
    }
    if at(b, 512, b"LABELONE") || at(b, 0, b"LABELONE") {
        return sig("an LVM physical volume");
    }
    if at(b, 4096 - 10, b"SWAPSPACE2") || at(b, 4096 - 10, b"SWAP-SPACE") {
        return sig("swap space");
    }
    if at(b, 3, b"NTFS    ") {
        return sig("an NTFS filesystem");
    }
    if at(b, 0x36, b"FAT") || at(b, 0x52, b"FAT32") {
        return sig("a FAT filesystem");
    }
    if at(b, 32769, b"CD001") {
        return sig("an ISO 9660 filesystem");
    }
    if at(b, 0x438, &[0x53, 0xEF]) {
        return sig("an ext2/3/4 filesystem");
    }
    // MBR: boot signature plus at least one partition entry with a type byte.
    if at(b, 510, &[0x55, 0xAA]) && (0..4).any(|i| b.get(446 + 16 * i + 4).is_some_and(|&t| t != 0))
    {
        return sig("an MBR partition table");
    }
    None
}

fn head(path: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; PROBE_BYTES];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// Does `path` hold a sluice volume (superblock magic in either copy)?
pub fn is_sluice(path: &Path) -> Result<bool> {
    let h = head(path)?;
    Ok(at(&h, 0, b"SLUICESB") || at(&h, 4096, b"SLUICESB"))
}

/// Does the regular file hold any allocated data? (Holes and unwritten extents do not count.)
fn file_has_data(path: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let r = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
    if r >= 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        return Ok(false);
    }
    // SEEK_DATA unsupported: judge by content of the head.
    Ok(head(path)?.iter().any(|&b| b != 0))
}

/// Why a write benchmark must not run on `path` without --force, or None.
pub fn refuse_write(path: &Path, device: bool) -> Result<Option<String>> {
    let meta = std::fs::metadata(path)?;
    if device || meta.file_type().is_block_device() {
        let h = head(path)?;
        return Ok(signature(&h).map(|s| format!("holds {s}")));
    }
    if !meta.is_file() {
        return Ok(Some("is neither a regular file nor a block device".into()));
    }
    if !file_has_data(path)? {
        return Ok(None);
    }
    let h = head(path)?;
    Ok(Some(match signature(&h) {
        Some(s) => format!("holds {s}"),
        None => format!(
            "is not empty ({} bytes with data) and is not a sluice volume",
            meta.len()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_recognised() {
        let mut b = vec![0u8; PROBE_BYTES];
        assert_eq!(signature(&b), None);
        b[1024 + 56] = 0x53;
        b[1024 + 57] = 0xEF;
        assert!(signature(&b).unwrap().contains("ext"));
        let mut b = vec![0u8; PROBE_BYTES];
        b[512..520].copy_from_slice(b"EFI PART");
        assert!(signature(&b).unwrap().contains("GPT"));
        let mut b = vec![0u8; PROBE_BYTES];
        b[510] = 0x55;
        b[511] = 0xAA;
        assert_eq!(signature(&b), None, "boot signature without partitions");
        b[446 + 4] = 0x83;
        assert!(signature(&b).unwrap().contains("MBR"));
        let mut b = vec![0u8; 8192];
        b[4096..4104].copy_from_slice(b"SLUICESB");
        assert!(signature(&b).unwrap().contains("sluice"));
        assert_eq!(signature(&[]), None);
    }

    #[test]
    fn files_with_data_are_refused_empty_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(refuse_write(&empty, false).unwrap(), None);
        let sparse = dir.path().join("sparse");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        assert_eq!(refuse_write(&sparse, false).unwrap(), None);
        let data = dir.path().join("data");
        std::fs::write(&data, vec![7u8; 8192]).unwrap();
        let why = refuse_write(&data, false).unwrap().unwrap();
        assert!(why.contains("not empty"), "{why}");
        let mut fs = vec![0u8; 8192];
        fs[1024 + 56] = 0x53;
        fs[1024 + 57] = 0xEF;
        std::fs::write(&data, &fs).unwrap();
        assert!(refuse_write(&data, false).unwrap().unwrap().contains("ext"));
        assert!(!is_sluice(&data).unwrap());
    }
}
