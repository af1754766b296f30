//! FileMedia: a regular file (created sparse when missing) or a block device,
//! with O_DIRECT where the filesystem supports it, and the volume lock.
//!
//! Invariant (the volume lock): every FileMedia opened with `open` or `create`
//! holds a `flock` on its descriptor for as long as it lives: exclusive when
//! read-write, shared when read-only, taken without waiting. So no two openers
//! that write (serve, create, bench `sluice:` targets, replay, library callers)
//! ever have one file or device at once, whatever command they come from; a
//! refused open is an `io::ErrorKind::WouldBlock` error naming the holder.
//! Only `open_unlocked_read_only`, which is named for it, looks at a volume
//! without the lock (`info`, `check --force`).
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

/// The largest write of a two-write batch that goes to the writer beside
/// the caller (a copy is made of it): a version 3 record is 512 B to 4 KiB.
const BESIDE_MAX: usize = 4096;

pub struct FileMedia {
    file: File,
    path: PathBuf,
    len: u64,
    /// `Media::direct_unit`: 512, or 4096 when a 512-byte O_DIRECT read is refused.
    direct_unit: u64,
    direct: bool,
    block_device: bool,
    /// (dev, inode) of a file this FileMedia created itself (`create_new`).
    created: Option<(u64, u64)>,
    /// The block device's queue advertises discard (`discard_max_bytes` > 0).
    device_discard: bool,
    /// A regular file with O_DIRECT: a batch of a large write and a small
    /// one goes out as two `pwrite`s at once (`beside.rs`), not io_uring.
    beside: Option<super::beside::Beside>,
}

/// How a FileMedia is opened.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lock {
    Exclusive,
    Shared,
    None,
}

/// `_IO(0x12, 119)` from linux/fs.h: discard a byte range of a block device.
const BLKDISCARD: u64 = 0x1277;

impl FileMedia {
    /// Open an existing file or block device read-write (exclusive lock) or
    /// read-only (shared lock). Fails with `ErrorKind::WouldBlock`, naming the
    /// holder, when another opener holds a conflicting lock.
    pub fn open(path: &Path, read_only: bool) -> io::Result<FileMedia> {
        let lock = if read_only {
            Lock::Shared
        } else {
            Lock::Exclusive
        };
        let mut o = OpenOptions::new();
        o.read(true).write(!read_only);
        Self::finish(o.open(path)?, path, lock, None)
    }

    /// Open read-only WITHOUT the volume lock, to look at a volume a live
    /// process may be writing (`info`, `check --force`). Never writes.
    pub fn open_unlocked_read_only(path: &Path) -> io::Result<FileMedia> {
        let f = OpenOptions::new().read(true).open(path)?;
        Self::finish(f, path, Lock::None, None)
    }

    /// Create a new regular file of `size` bytes (sparse) with O_CREAT|O_EXCL and
    /// lock it before anything else can: fails with `AlreadyExists` if `path`
    /// exists (also a dangling symlink), `WouldBlock` if another opener locked
    /// the new file first. `remove_created` deletes it again.
    pub fn create_new(path: &Path, size: u64) -> io::Result<FileMedia> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let m = f.metadata()?;
        let id = (m.dev(), m.ino());
        let mut fm = Self::finish(f, path, Lock::Exclusive, Some(id))?;
        fm.grow(size)?;
        Ok(fm)
    }

    /// Open `path` read-write (locked), creating a sparse regular file of `size`
    /// bytes if it does not exist. An existing regular file smaller than `size`
    /// is extended (after the lock is taken).
    pub fn create(path: &Path, size: u64) -> io::Result<FileMedia> {
        match Self::create_new(path, size) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut m = Self::open(path, false)?;
                m.grow(size)?;
                Ok(m)
            }
            r => r,
        }
    }

    /// Extend a regular file to at least `size` bytes (sparse); devices and
    /// larger files are left as they are.
    pub fn grow(&mut self, size: u64) -> io::Result<()> {
        if !self.block_device && self.len < size {
            self.file.set_len(size)?;
            self.len = size;
        }
        Ok(())
    }

    /// Delete the file this FileMedia created (`create_new`), if the path still
    /// names that same file; the lock is held until then. Anything else (an
    /// opened file, a path now naming another file) is left alone.
    pub fn remove_created(self) -> io::Result<()> {
        let Some((dev, ino)) = self.created else {
            return Ok(());
        };
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.dev() == dev && m.ino() == ino => std::fs::remove_file(&self.path),
            _ => Ok(()),
        }
    }

    fn finish(
        mut file: File,
        path: &Path,
        lock: Lock,
        created: Option<(u64, u64)>,
    ) -> io::Result<FileMedia> {
        if lock != Lock::None {
            lock_file(&file, path, lock == Lock::Exclusive)?;
        }
        // O_DIRECT is set on the locked descriptor (F_SETFL), so the lock is
        // never on a descriptor that is then thrown away.
        // SAFETY: fcntl on a descriptor we own.
        let direct = unsafe {
            let fd = file.as_raw_fd();
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_DIRECT) == 0
        };
        if !direct {
            tracing::warn!(
                "{}: O_DIRECT not supported here, using the page cache",
                path.display()
            );
        }
        let meta = file.metadata()?;
        let block_device = meta.file_type().is_block_device();
        let device_discard = block_device && device_advertises_discard(meta.rdev());
        let len = file.seek(SeekFrom::End(0))?;
        let direct_unit = if direct {
            probe_direct_unit(&file, len)
        } else {
            512
        };
        let beside = (direct && !block_device)
            .then(|| super::beside::Beside::new(&file))
            .transpose()?;
        Ok(FileMedia {
            file,
            path: path.to_path_buf(),
            len,
            direct_unit,
            direct,
            block_device,
            created,
            device_discard,
            beside,
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

/// Take the volume lock on `file` (exclusive or shared, never waiting), held
/// until the descriptor is closed; for openers that keep their own `File`
/// (bench `file:`/`dev:` targets). Refused: `WouldBlock`, naming the holder.
pub fn lock_file(file: &File, path: &Path, exclusive: bool) -> io::Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on a descriptor the caller owns; released when it is closed.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(in_use_error(path, file));
        }
        return Err(e);
    }
    Ok(())
}

/// Who holds the volume lock on `path`: "pid N (cmdline)" (or "another
/// process" when /proc does not say), or None when nobody does. Probes with a
/// non-blocking exclusive lock on a descriptor of its own, released at once;
/// for commands that report on a volume without opening it (`info`, `check`).
pub fn lock_holder_of(path: &Path) -> Option<String> {
    let f = File::open(path).ok()?;
    match lock_file(&f, path, true) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(holder_text(&f)),
        _ => None,
    }
}

/// "pid N (cmdline)" of the process holding a lock on `file`'s inode.
fn holder_text(file: &File) -> String {
    file.metadata()
        .ok()
        .and_then(|m| lock_holder(m.dev(), m.ino()))
        .map(|(pid, cmd)| {
            if cmd.is_empty() {
                format!("pid {pid}")
            } else {
                format!("pid {pid} ({cmd})")
            }
        })
        .unwrap_or_else(|| "another process".to_string())
}

/// "PATH is in use by pid N (cmdline)", kind WouldBlock.
fn in_use_error(path: &Path, file: &File) -> io::Error {
    let who = holder_text(file);
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "{} is in use by {who}; stop it first (--force does not override a live lock)",
            path.display()
        ),
    )
}

/// The pid and command line of a process holding a flock on (dev, ino), from
/// /proc/locks (which names the device as hex major:minor) and /proc/PID/cmdline.
pub fn lock_holder(dev: u64, ino: u64) -> Option<(u32, String)> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    let mut by_inode = None;
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters: "->")
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let Some(pid) = f[4].parse::<u32>().ok() else {
            continue;
        };
        let mut id = f[5].rsplitn(2, ':');
        let (Some(i), Some(d)) = (id.next(), id.next()) else {
            continue;
        };
        if i.parse::<u64>().ok() != Some(ino) {
            continue;
        }
        if d == want_dev {
            by_inode = Some(pid);
            break;
        }
        // overlay and other stacked file systems report the lower device
        by_inode.get_or_insert(pid);
    }
    let pid = by_inode?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            let s: Vec<String> = b
                .split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            s.join(" ")
        })
        .unwrap_or_default();
    Some((pid, cmd))
}

/// The smallest O_DIRECT IO `file` takes: a 512-byte read at byte 512 (a
/// read: nothing is written) is refused with EINVAL on a 4Kn device.
fn probe_direct_unit(file: &File, len: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    if len < 1024 {
        return 512;
    }
    let mut buf = super::AlignedBuf::new(4096);
    match file.read_exact_at(&mut buf[..512], 512) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => 4096,
        _ => 512,
    }
}

impl Media for FileMedia {
    fn len(&self) -> u64 {
        self.len
    }
    fn direct_unit(&self) -> u64 {
        self.direct_unit
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
    fn uring_reads(&self, entries: u32) -> Option<io::Result<super::UringReads>> {
        Some(super::UringReads::new(&self.file, entries, self.direct))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        self.file.write_all_at(buf, offset)
    }
    fn write_batch(&self, writes: &[(&[u8], u64)]) -> io::Result<()> {
        for (buf, off) in writes {
            check_range(self.len, *off, buf.len())?;
        }
        // A large write and a small one (a version 3 FLUSH's data and
        // record) on a regular file, from a real-time caller: two `pwrite`s
        // at once, one on a kept thread. Through io_uring their completion
        // would wait for the filesystem's DIO kworker at normal priority
        // (`beside.rs`, docs/intent-log.md §4.7); a normal-priority caller
        // goes through io_uring, where that kworker is its equal (§4.14).
        if let (Some(b), [x, y]) = (&self.beside, writes) {
            let (big, small) = if x.0.len() >= y.0.len() {
                (*x, *y)
            } else {
                (*y, *x)
            };
            if small.0.len() <= BESIDE_MAX && super::beside::caller_hands_off() {
                return b.write_pair(big, small);
            }
        }
        // O_DIRECT only: a buffered write through io_uring may be handed to
        // a kernel worker thread, a wake-up more than the `pwrite`s it saves
        if self.direct && writes.len() > 1 && super::uring::write_batch(&self.file, writes)? {
            return Ok(());
        }
        for (buf, off) in writes {
            self.file.write_all_at(buf, *off)?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn flush_overlaps(&self) -> bool {
        true
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_readers_share() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let a = FileMedia::create(&p, 1 << 20).unwrap();
        let e = FileMedia::open(&p, false)
            .err()
            .expect("second writer opened");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        assert!(e.to_string().contains("in use by pid"), "{e}");
        assert!(
            e.to_string().contains(&std::process::id().to_string()),
            "{e}"
        );
        let e = FileMedia::open(&p, true)
            .err()
            .expect("reader beside a writer");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            FileMedia::create(&p, 1 << 20).err().unwrap().kind(),
            io::ErrorKind::WouldBlock
        );
        FileMedia::open_unlocked_read_only(&p).unwrap();
        drop(a);
        let r1 = FileMedia::open(&p, true).unwrap();
        let _r2 = FileMedia::open(&p, true).unwrap();
        assert!(FileMedia::open(&p, false).is_err());
        drop((r1, _r2));
        FileMedia::open(&p, false).unwrap();
    }

    /// `write_batch` of a large and a small write (two `pwrite`s at once,
    /// `beside.rs`) and of three (io_uring), on an O_DIRECT file: every write
    /// of the batch lands whole at its offset, a 512-byte one between blocks
    /// too, and nothing else changes; a write past the end is refused before
    /// any IO.
    #[test]
    fn a_write_batch_lands_every_write_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let m = FileMedia::create(&p, 1 << 20).unwrap();
        if !m.is_direct() || crate::media::io_uring_given_up() {
            // the batch goes one write at a time: still checked below
            assert!(
                std::env::var_os("CI").is_none(),
                "no O_DIRECT or io_uring here: the io_uring write path is untested"
            );
        }
        let mut a = crate::media::AlignedBuf::new(3 * 4096);
        let mut b = crate::media::AlignedBuf::new(512);
        for (i, x) in a.iter_mut().enumerate() {
            *x = (i / 4096) as u8 + 1;
        }
        b.fill(0xab);
        m.write_batch(&[(&a, 8192), (&b, 65536 + 1024)]).unwrap();
        // three writes: io_uring (the third lands past what is read back)
        let c = crate::media::AlignedBuf::new(4096);
        m.write_batch(&[(&b, 81920), (&c, 90112), (&b, 95232)])
            .unwrap();
        let mut three = crate::media::AlignedBuf::new(16384);
        m.read_at(&mut three, 81920).unwrap();
        assert!(three[..512].iter().all(|&x| x == 0xab));
        assert!(three[8192..12288].iter().all(|&x| x == 0));
        assert!(three[13312..13824].iter().all(|&x| x == 0xab));
        let mut back = crate::media::AlignedBuf::new(80 * 1024);
        m.read_at(&mut back, 0).unwrap();
        assert!(back[..8192].iter().all(|&x| x == 0));
        assert_eq!(&back[8192..8192 + 3 * 4096], &a[..]);
        assert!(back[8192 + 3 * 4096..65536 + 1024].iter().all(|&x| x == 0));
        assert!(back[65536 + 1024..65536 + 1536].iter().all(|&x| x == 0xab));
        assert!(back[65536 + 1536..].iter().all(|&x| x == 0));
        let e = m.write_batch(&[(&b, 0), (&b, 1 << 20)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        m.read_at(&mut back[..4096], 0).unwrap();
        assert!(back[..512].iter().all(|&x| x == 0), "a refused batch wrote");
    }

    /// A large-and-small pair goes to the kept thread (`beside.rs`) only
    /// from a caller at a real-time priority: from a normal-priority thread
    /// it goes through io_uring and starts no kept thread; from a SCHED_FIFO
    /// thread (root only, else said and skipped) it starts one. Both land.
    #[test]
    fn a_pair_goes_to_the_kept_thread_only_from_a_real_time_caller() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let m = FileMedia::create(&p, 1 << 20).unwrap();
        if m.beside.is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "no O_DIRECT here: the kept thread is untested"
            );
            return;
        }
        let started = || m.beside.as_ref().map_or(0, |b| b.started());
        let mut a = crate::media::AlignedBuf::new(8192);
        let mut b = crate::media::AlignedBuf::new(512);
        a.fill(0x5a);
        b.fill(0xa5);
        let set = |policy: libc::c_int, prio: libc::c_int| {
            let sp = libc::sched_param {
                sched_priority: prio,
            };
            // SAFETY: sets the calling thread's policy from a valid sched_param
            unsafe { libc::sched_setscheduler(0, policy, &sp) == 0 }
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(
                    set(libc::SCHED_OTHER, 0),
                    "a thread may always lower itself"
                );
                assert!(!super::super::beside::caller_hands_off());
                m.write_batch(&[(&a, 8192), (&b, 65536 + 512)]).unwrap();
            });
        });
        assert_eq!(started(), 0, "a normal-priority caller handed its pair off");
        let rt = std::thread::scope(|s| {
            s.spawn(|| {
                if !set(libc::SCHED_FIFO, 1) {
                    return false;
                }
                assert!(super::super::beside::caller_hands_off());
                m.write_batch(&[(&b, 4096), (&a, 16384)]).unwrap();
                true
            })
            .join()
            .unwrap()
        });
        if rt {
            assert_eq!(started(), 1, "a real-time caller's pair was not handed off");
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "no SCHED_FIFO here: the real-time half is untested"
            );
            eprintln!("SKIP: no SCHED_FIFO here (not root): the real-time half");
        }
        let mut back = crate::media::AlignedBuf::new(80 * 1024);
        m.read_at(&mut back, 0).unwrap();
        assert!(back[8192..16384].iter().all(|&x| x == 0x5a));
        assert!(back[65536 + 512..65536 + 1024].iter().all(|&x| x == 0xa5));
        if rt {
            assert!(back[4096..4608].iter().all(|&x| x == 0xa5));
            assert!(back[16384..24576].iter().all(|&x| x == 0x5a));
        }
    }

    /// `read_batch` through io_uring: more reads than one ring submission
    /// holds (they go in rounds), each filled from its own offset.
    #[test]
    fn a_read_batch_larger_than_the_ring_reads_every_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let m = FileMedia::create(&p, 1 << 20).unwrap();
        if crate::media::io_uring_given_up() {
            assert!(
                std::env::var_os("CI").is_none(),
                "no io_uring here: the io_uring read path is untested"
            );
        }
        let mut img = crate::media::AlignedBuf::new(1 << 20);
        for (i, x) in img.iter_mut().enumerate() {
            *x = (i / 4096 * 7 + i % 13) as u8;
        }
        m.write_at(&img, 0).unwrap();
        // 150 reads of 4 KiB from scattered blocks, backwards
        let places: Vec<u64> = (0..150u64).map(|i| (i * 37 % 256) * 4096).rev().collect();
        let mut bufs: Vec<_> = places
            .iter()
            .map(|_| crate::media::AlignedBuf::new(4096))
            .collect();
        let mut reads: Vec<(&mut [u8], u64)> = bufs
            .iter_mut()
            .zip(&places)
            .map(|(b, &o)| (&mut b[..], o))
            .collect();
        m.read_batch(&mut reads).unwrap();
        for (b, &o) in bufs.iter().zip(&places) {
            assert_eq!(&b[..], &img[o as usize..o as usize + 4096], "read at {o}");
        }
    }

    #[test]
    fn remove_created_deletes_only_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let m = FileMedia::create_new(&p, 1 << 20).unwrap();
        assert_eq!(
            FileMedia::create_new(&p, 1 << 20).err().unwrap().kind(),
            io::ErrorKind::AlreadyExists
        );
        // the path now names another file: left alone
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"theirs").unwrap();
        m.remove_created().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
        // an opened (not created) file is never removed
        FileMedia::open(&p, false)
            .unwrap()
            .remove_created()
            .unwrap();
        assert!(p.exists());
        let p2 = dir.path().join("w.img");
        FileMedia::create_new(&p2, 1 << 20)
            .unwrap()
            .remove_created()
            .unwrap();
        assert!(!p2.exists());
    }
}
