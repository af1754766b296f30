//! FileMedia: a regular file (created sparse when missing) or a block device,
//! opened with O_DIRECT where the filesystem supports it.
//!
//! Host space: `allocate` reserves ranges of a regular file (posix_fallocate) so
//! writes there never need new space; `discard` gives a range back (a punched
//! hole in a file, BLKDISCARD on a block device whose queue advertises discard).

use super::{check_range, Media};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub struct FileMedia {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    block_device: bool,
    /// The block device's queue advertises discard (`discard_max_bytes` > 0).
    device_discard: bool,
}

/// `_IO(0x12, 119)` from linux/fs.h: discard a byte range of a block device.
const BLKDISCARD: u64 = 0x1277;

impl FileMedia {
    /// Open an existing file or block device read-write (or read-only).
    pub fn open(path: &Path, read_only: bool) -> io::Result<FileMedia> {
        Self::open_inner(path, read_only, None)
    }

    /// Open `path`, creating a sparse regular file of `size` bytes if it does not
    /// exist. An existing regular file smaller than `size` is extended.
    pub fn create(path: &Path, size: u64) -> io::Result<FileMedia> {
        Self::open_inner(path, false, Some(size))
    }

    fn open_inner(path: &Path, read_only: bool, create_size: Option<u64>) -> io::Result<FileMedia> {
        if let Some(size) = create_size {
            if !path.exists() {
                let f = OpenOptions::new().write(true).create_new(true).open(path)?;
                f.set_len(size)?;
            } else if std::fs::metadata(path)?.file_type().is_file()
                && std::fs::metadata(path)?.len() < size
            {
                OpenOptions::new().write(true).open(path)?.set_len(size)?;
            }
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (mut file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(
                    "{}: O_DIRECT not supported here, using the page cache",
                    path.display()
                );
                (open(false)?, false)
            }
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let block_device = meta.file_type().is_block_device();
        let device_discard = block_device && device_advertises_discard(meta.rdev());
        let len = file.seek(SeekFrom::End(0))?;
        Ok(FileMedia {
            file,
            path: path.to_path_buf(),
            len,
            direct,
            block_device,
            device_discard,
        })
    }

    /// Bytes of host storage the file holds (st_blocks * 512; for a block
    /// device, its size).
    pub fn host_bytes_used(&self) -> io::Result<u64> {
        let m = self.file.metadata()?;
        Ok(if self.block_device {
            self.len
        } else {
            m.blocks() * 512
        })
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }
}

impl Media for FileMedia {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        self.file.read_exact_at(buf, offset)
    }
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, off) in reads.iter() {
            check_range(self.len, *off, buf.len())?;
        }
        if reads.len() > 1 && super::uring::read_batch(&self.file, reads)? {
            return Ok(());
        }
        for (buf, off) in reads.iter_mut() {
            self.file.read_exact_at(buf, *off)?;
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn size_now(&self) -> io::Result<u64> {
        if self.block_device {
            // a block device does not shrink under an open descriptor
            return Ok(self.len);
        }
        Ok(self.file.metadata()?.len())
    }
    fn allocate(&self, ranges: &[(u64, u64)]) -> io::Result<()> {
        if self.block_device {
            return Ok(());
        }
        for &(off, len) in ranges {
            check_range(self.len, off, len as usize)?;
            if len == 0 {
                continue;
            }
            // SAFETY: plain syscall on a descriptor this struct owns.
            let r = unsafe {
                libc::posix_fallocate(
                    self.file.as_raw_fd(),
                    off as libc::off_t,
                    len as libc::off_t,
                )
            };
            match r {
                0 => {}
                // a file system without fallocate: nothing to reserve with
                // (EINVAL: glibc's byte-by-byte emulation on an O_DIRECT file)
                libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL => return Ok(()),
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range(self.len, offset, len as usize)?;
        if len == 0 {
            return Ok(true);
        }
        let fd = self.file.as_raw_fd();
        let r = if self.block_device {
            if !self.device_discard {
                return Ok(false);
            }
            let range = [offset, len];
            // SAFETY: BLKDISCARD reads two u64 (offset, length) from the pointer.
            unsafe { libc::ioctl(fd, BLKDISCARD as _, range.as_ptr()) }
        } else {
            // SAFETY: plain syscall on a descriptor this struct owns.
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            }
        };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(false),
            _ => Err(e),
        }
    }
    fn describe(&self) -> String {
        format!(
            "{} ({}, {})",
            self.path.display(),
            if self.block_device {
                "block device"
            } else {
                "file"
            },
            if self.direct { "O_DIRECT" } else { "buffered" }
        )
    }
}

/// Whether the block device `rdev` (or, for a partition, its disk) has a
/// queue that accepts discards (`/sys/dev/block/M:m/queue/discard_max_bytes`).
fn device_advertises_discard(rdev: u64) -> bool {
    let dev = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
    ["queue/discard_max_bytes", "../queue/discard_max_bytes"]
        .iter()
        .filter_map(|q| std::fs::read_to_string(format!("{dev}/{q}")).ok())
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .any(|n| n > 0)
}
