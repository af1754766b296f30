//! FileMedia: a regular file (created sparse when missing) or a block device,
//! opened with O_DIRECT where the filesystem supports it.

use super::{check_range, Media};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub struct FileMedia {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    block_device: bool,
}

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
        let block_device = file.metadata()?.file_type().is_block_device();
        let len = file.seek(SeekFrom::End(0))?;
        Ok(FileMedia {
            file,
            path: path.to_path_buf(),
            len,
            direct,
            block_device,
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
