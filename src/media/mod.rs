//! Media layer: the only code that does IO. A `Media` is a flat byte space with
//! positional reads and writes and a durability barrier (`flush`).
//!
//! Invariant: after `flush` returns Ok, every write that returned Ok before the
//! flush was called survives power loss. Nothing else is promised: unflushed
//! writes may be lost, reordered or torn (FaultMedia simulates exactly that).

mod aio;
mod aligned;
mod beside;
mod fault;
mod file;
mod flash_sim;
mod memory;
pub mod objects;
pub mod outfile;
pub mod probe;
mod replay;
mod sim;
mod uring;

pub use aligned::AlignedBuf;
pub use fault::{CrashPolicy, FaultMedia};
pub use file::{lock_file, lock_holder, lock_holder_of, FileMedia};
pub use flash_sim::{FlashCounters, FlashSim, Ftl, OP_CONSUMER, OP_ENTERPRISE};
pub use memory::MemMedia;
pub use replay::{ReplayMedia, Store, PATTERN};
pub use sim::{crash_apply, crash_apply_opts, Loss, SimEvent, SimMedia, SimPart};
pub use uring::{UringReads, WAKE as URING_WAKE};

use std::io;

/// Batched reads gave io_uring up for the rest of the process (it is
/// unavailable here); a transient set-up failure (EMFILE...) does not.
pub fn io_uring_given_up() -> bool {
    uring::given_up()
}

/// `Media::write_batch` the plain way: one `write_at` after another (the
/// trait's default, for a media that cannot overlap writes).
pub fn write_one_by_one<M: Media + ?Sized>(m: &M, writes: &[(&[u8], u64)]) -> io::Result<()> {
    for (buf, off) in writes {
        m.write_at(buf, *off)?;
    }
    Ok(())
}

pub trait Media: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// Read exactly `buf.len()` bytes at `offset`. With O_DIRECT media, buffer,
    /// offset and length must be 4 KiB aligned (the engine only issues such IO).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Several reads at once, each `(buffer, offset)` as in `read_at`. Media that
    /// can overlap them (FileMedia: io_uring) issue them together; the default
    /// reads them one after another.
    fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        for (buf, off) in reads.iter_mut() {
            self.read_at(buf, *off)?;
        }
        Ok(())
    }
    /// Read `buf.len()` bytes at `offset` (as `read_at`) that `check` must
    /// accept: true when it did. `check` answers None (the bytes fail) or
    /// the range of `buf` it vouched for. A media holding several copies of
    /// these bytes (a stripe set's mirrored metadata, `SetMedia`) reads one
    /// copy after another until `check` accepts one, leaves that one in
    /// `buf`, and rewrites, on the copies it read that failed, the vouched
    /// range from it (only when it may write; never bytes no check
    /// vouched for, which may be another record's); false: no copy passed
    /// (`buf` holds what `read_at` gives). Default: one `read_at`, then
    /// `check`. Recovery reads checkpoints and intent-log records this
    /// way, `check` being their own validation.
    fn read_checked(
        &self,
        buf: &mut [u8],
        offset: u64,
        check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> io::Result<bool> {
        self.read_at(buf, offset)?;
        Ok(check(buf).is_some())
    }
    /// Scrub of mirrored metadata: read every copy of `buf.len()` bytes at
    /// `offset` and `check` each, as `read_checked` does (the first copy
    /// that passes is left in `buf`; failing copies are rewritten from it
    /// when the media may write) but without stopping at the first good
    /// copy, so a bad copy behind a good one is found too. None: this media
    /// keeps one copy of these bytes (nothing to compare; the default).
    fn check_copies(
        &self,
        _buf: &mut [u8],
        _offset: u64,
        _check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
    ) -> Option<io::Result<CopiesChecked>> {
        None
    }
    /// A ring for reads submitted on one thread and completed on another, of
    /// `entries` slots. None: this media has none (the caller reads with
    /// `read_batch`); Some(Err): it could not be set up now.
    fn uring_reads(&self, _entries: u32) -> Option<io::Result<UringReads>> {
        None
    }
    /// Write all of `buf` at `offset` (same alignment rules as `read_at`).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Several writes at once, each `(buffer, offset)` as in `write_at`, in
    /// no order among themselves (only a later `flush` orders them). Media
    /// that can overlap them (FileMedia: one io_uring submission) issue them
    /// together; the default writes them one after another. On an error any
    /// of them may or may not have reached the media.
    fn write_batch(&self, writes: &[(&[u8], u64)]) -> io::Result<()> {
        write_one_by_one(self, writes)
    }
    /// Smallest write (and its alignment) the media takes: 512 bytes unless
    /// it is an O_DIRECT file on a device whose logical sectors are larger
    /// (a 4Kn device: 4096). Version 3 intent log records are this size or
    /// a multiple (docs/intent-log.md §2).
    fn direct_unit(&self) -> u64 {
        512
    }
    /// Make every completed write durable: Ok means every write that
    /// returned before this call is durable, whatever other flushes run
    /// beside it.
    fn flush(&self) -> io::Result<()>;
    /// How many `flush` calls the engine's group commit may have running at
    /// once (default 1: one media flush at a time). A media whose flush is
    /// a long round trip that overlaps well (the store-durable FLUSH log,
    /// `objseg::durable`) says more; each flush still answers only for the
    /// writes before it (see `flush`).
    fn flush_parallelism(&self) -> usize {
        1
    }
    /// May this media's `flush` run on another thread beside other media's
    /// flushes (a stripe set flushes its members at once when every one
    /// says so)? FileMedia: yes (an `fdatasync`, a device round trip).
    /// Default no: the simulator's media number every operation in one
    /// order (a cut, a failure and a replay are chosen by that number), so
    /// their flushes are issued one after another, in member order.
    fn flush_overlaps(&self) -> bool {
        false
    }
    /// Human-readable description (path, O_DIRECT or not).
    fn describe(&self) -> String;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The media's size as the host sees it now (FileMedia: fstat of a regular
    /// file), to notice a file truncated under a live volume. Default: `len`.
    fn size_now(&self) -> io::Result<u64> {
        Ok(self.len())
    }
    /// Reserve host space for each `(offset, len)` byte range so later writes
    /// there never need new space (FileMedia: `posix_fallocate` on a regular
    /// file; nothing on a block device). Default: nothing to do.
    fn allocate(&self, _ranges: &[(u64, u64)]) -> io::Result<()> {
        Ok(())
    }
    /// Tell the host or device that `[offset, offset + len)` holds nothing of
    /// value (FileMedia: punch a hole in a regular file, BLKDISCARD on a block
    /// device). Advisory: afterwards the range may read as zeros, as its old
    /// bytes, or (some devices) as either, block by block; callers never rely on
    /// what it reads as. Ok(false): this media cannot discard (nothing done).
    fn discard(&self, _offset: u64, _len: u64) -> io::Result<bool> {
        Ok(false)
    }
}

/// What `Media::check_copies` found: copies read (a member that did not
/// answer is not counted), copies that failed the check, failing copies
/// rewritten from the good one, and whether one passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopiesChecked {
    pub read: u32,
    pub bad: u32,
    pub rewritten: u32,
    pub good: bool,
}

/// A `Media` behind a pointer is the media it points to: `Arc<M>` (shared
/// media) and `&M` (borrowed) forward every call.
macro_rules! forward_media {
    ($($ptr:ty),+) => {$(
        impl<M: Media + ?Sized> Media for $ptr {
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
                (**self).read_at(buf, offset)
            }
            fn read_batch(&self, reads: &mut [(&mut [u8], u64)]) -> io::Result<()> {
                (**self).read_batch(reads)
            }
            fn read_checked(
                &self,
                buf: &mut [u8],
                offset: u64,
                check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
            ) -> io::Result<bool> {
                (**self).read_checked(buf, offset, check)
            }
            fn check_copies(
                &self,
                buf: &mut [u8],
                offset: u64,
                check: &dyn Fn(&[u8]) -> Option<std::ops::Range<usize>>,
            ) -> Option<io::Result<CopiesChecked>> {
                (**self).check_copies(buf, offset, check)
            }
            fn uring_reads(&self, entries: u32) -> Option<io::Result<UringReads>> {
                (**self).uring_reads(entries)
            }
            fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
                (**self).write_at(buf, offset)
            }
            fn write_batch(&self, writes: &[(&[u8], u64)]) -> io::Result<()> {
                (**self).write_batch(writes)
            }
            fn direct_unit(&self) -> u64 {
                (**self).direct_unit()
            }
            fn flush(&self) -> io::Result<()> {
                (**self).flush()
            }
            fn flush_parallelism(&self) -> usize {
                (**self).flush_parallelism()
            }
            fn flush_overlaps(&self) -> bool {
                (**self).flush_overlaps()
            }
            fn describe(&self) -> String {
                (**self).describe()
            }
            fn size_now(&self) -> io::Result<u64> {
                (**self).size_now()
            }
            fn allocate(&self, ranges: &[(u64, u64)]) -> io::Result<()> {
                (**self).allocate(ranges)
            }
            fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
                (**self).discard(offset, len)
            }
        }
    )+};
}
forward_media!(std::sync::Arc<M>, &M);

pub(crate) fn check_range(len: u64, offset: u64, n: usize) -> io::Result<()> {
    match offset.checked_add(n as u64) {
        Some(end) if end <= len => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("IO at {offset}+{n} beyond media of {len} bytes"),
        )),
    }
}
