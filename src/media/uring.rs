//! Batched positional reads through io_uring: one submission for many reads, so
//! the device sees them together (one doorbell, parallel service) and the caller
//! sleeps once for the batch instead of once per read. Batched writes the same
//! way (`write_batch`: a version 3 FLUSH's data and record, one submission and
//! one wake-up instead of two). And `UringReads`: a ring
//! whose reads are submitted by one thread and reaped by another as they
//! complete (the NBD server's reads; on O_DIRECT files it is Linux native AIO,
//! `aio.rs`, whose completions wake the reaping thread directly).
//!
//! Each thread keeps its own small ring (created on first use). Where io_uring is
//! unavailable (old kernel, seccomp, `io_uring_disabled`), `read_batch` says so
//! once and the caller falls back to one read at a time for the life of the
//! process. Running out of file descriptors or memory (EMFILE, ENFILE, ENOMEM)
//! is transient: that batch falls back, a warning is logged (the first time and
//! then every 1024th time), and the next batch tries to set the ring up again.

use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Reads in flight per submission (larger batches go in rounds).
const RING_ENTRIES: u32 = 64;

static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
/// Ring set-ups that failed for a transient reason (see the module comment).
static TRANSIENT_FAILURES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// io_uring was found unavailable and is off for the life of the process.
pub fn given_up() -> bool {
    UNAVAILABLE.load(Ordering::Relaxed)
}

/// Read every `(buffer, offset)` of `reads` from `file`. Ok(false): io_uring is
/// not available here and nothing was read. A short read (end of file) or a
/// failed read is an error, as in `read_exact_at`.
pub fn read_batch(file: &File, reads: &mut [(&mut [u8], u64)]) -> io::Result<bool> {
    with_ring("reads", |ring| {
        let fd = types::Fd(file.as_raw_fd());
        for group in reads.chunks_mut(RING_ENTRIES as usize) {
            let (lens, n) = (lens_of(group.iter().map(|(b, _)| b.len())), group.len());
            let entries = group.iter_mut().map(|(buf, off)| {
                opcode::Read::new(fd, buf.as_mut_ptr(), buf.len() as u32)
                    .offset(*off)
                    .build()
            });
            // SAFETY: the buffers are borrowed mutably by `group` for the
            // whole call, and `run_group` reaps every completion before it
            // returns.
            let short = unsafe { run_group(ring, entries, &lens[..n]) }?;
            // A short read is legal for io_uring (as for pread); finish it the
            // plain way.
            for (i, _) in short {
                let (buf, off) = &mut group[i];
                std::os::unix::fs::FileExt::read_exact_at(file, buf, *off)?;
            }
        }
        Ok(())
    })
}

/// Write every `(buffer, offset)` of `writes` to `file`, all in one
/// submission: they may reach the media in any order, and none is ordered
/// before another (the caller flushes after). Ok(false): io_uring is not
/// available here and nothing was written. A failed write is an error (the
/// first one), reported only once every write of the batch has completed, so
/// no buffer is still in use when this returns; a short write is finished
/// with `write_all_at`.
pub fn write_batch(file: &File, writes: &[(&[u8], u64)]) -> io::Result<bool> {
    with_ring("writes", |ring| {
        let fd = types::Fd(file.as_raw_fd());
        for group in writes.chunks(RING_ENTRIES as usize) {
            let (lens, n) = (lens_of(group.iter().map(|(b, _)| b.len())), group.len());
            let entries = group.iter().map(|(buf, off)| {
                opcode::Write::new(fd, buf.as_ptr(), buf.len() as u32)
                    .offset(*off)
                    .build()
            });
            // SAFETY: the buffers are borrowed by `group` for the whole call,
            // and `run_group` reaps every completion before it returns.
            let short = unsafe { run_group(ring, entries, &lens[..n]) }?;
            for (i, n) in short {
                let (buf, off) = group[i];
                std::os::unix::fs::FileExt::write_all_at(file, &buf[n..], off + n as u64)?;
            }
        }
        Ok(())
    })
}

/// Run `f` on this thread's ring, set up on first use. Ok(false): io_uring is
/// not available (for the life of the process, or for this call when the
/// set-up failed for a transient reason) and `f` did not run; `what` names
/// the IO in the one-time message.
fn with_ring(what: &str, f: impl FnOnce(&mut IoUring) -> io::Result<()>) -> io::Result<bool> {
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return Ok(false);
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match IoUring::new(RING_ENTRIES) {
                Ok(r) => *slot = Some(r),
                Err(e) if setup_transient(&e) => {
                    let n = TRANSIENT_FAILURES.fetch_add(1, Ordering::Relaxed);
                    if n.is_multiple_of(1024) {
                        tracing::warn!(
                            "io_uring set-up failed ({e}; {} time(s) so far); these {what} go one at a time, the next batch tries again",
                            n + 1
                        );
                    }
                    return Ok(false);
                }
                Err(e) => {
                    if !UNAVAILABLE.swap(true, Ordering::Relaxed) {
                        tracing::info!("io_uring unavailable ({e}); {what} go one at a time");
                    }
                    return Ok(false);
                }
            }
        }
        f(slot.as_mut().expect("ring just created"))?;
        Ok(true)
    })
}

/// The lengths of a group's buffers, on the stack (a group is at most
/// `RING_ENTRIES` long; the rest stays 0).
fn lens_of(lens: impl Iterator<Item = usize>) -> [usize; RING_ENTRIES as usize] {
    let mut out = [0; RING_ENTRIES as usize];
    for (o, l) in out.iter_mut().zip(lens) {
        *o = l;
    }
    out
}

/// Submit `entries` (at most `RING_ENTRIES`, the i-th transferring `lens[i]`
/// bytes) in one submission and reap every completion. Returns the short
/// transfers as (index, bytes done); the first failed one is the error,
/// returned only after all have completed.
///
/// # Safety
/// Every buffer an entry points at must stay allocated and unmoved, and not
/// be otherwise accessed, until this returns (it reaps every completion
/// before returning, on the error path too: `drain`).
unsafe fn run_group(
    ring: &mut IoUring,
    entries: impl Iterator<Item = io_uring::squeue::Entry>,
    lens: &[usize],
) -> io::Result<Vec<(usize, usize)>> {
    assert!(lens.len() <= RING_ENTRIES as usize, "a group fits the ring");
    {
        let mut sq = ring.submission();
        for (i, e) in entries.enumerate() {
            // SAFETY: the caller keeps the buffer alive until its completion
            // is reaped below; a group is at most RING_ENTRIES long and the
            // queue is empty on entry.
            unsafe { sq.push(&e.user_data(i as u64)) }
                .map_err(|_| io::Error::other("io_uring queue full"))?;
        }
    }
    let n = lens.len();
    let mut done = 0;
    let mut failed: Option<io::Error> = None;
    let mut short = Vec::new();
    while done < n {
        if let Err(e) = ring.submit_and_wait(n - done) {
            if transient(&e) {
                std::thread::yield_now();
                continue;
            }
            // IO may still be in flight on buffers the caller only lends us:
            // wait it out before giving them back.
            drain(ring, n - done);
            return Err(e);
        }
        for cqe in ring.completion() {
            done += 1;
            let i = cqe.user_data() as usize;
            let r = cqe.result();
            if r < 0 {
                failed.get_or_insert(io::Error::from_raw_os_error(-r));
            } else if (r as usize) < lens[i] {
                short.push((i, r as usize));
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(short),
    }
}

/// A ring set-up error that says nothing about io_uring itself: out of file
/// descriptors (per process or system-wide) or memory for the ring.
fn setup_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOMEM)
    )
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// Reap `n` outstanding completions, ignoring their results (error path only).
/// If the ring stays broken the buffers can never be proven free again, so the
/// process stops rather than hand memory the kernel may still write back to Rust.
fn drain(ring: &mut IoUring, mut n: usize) {
    let mut failures = 0;
    while n > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => n -= ring.completion().count().min(n),
            Err(e) if transient(&e) => std::thread::yield_now(),
            Err(e) => {
                failures += 1;
                if failures > 1000 {
                    tracing::error!("io_uring: cannot reap {n} reads ({e}); aborting");
                    std::process::abort();
                }
            }
        }
    }
}

/// A ring for reads that are submitted by one thread and completed on another
/// (the NBD server's reads: its reader submits each READ as it arrives, a
/// completion thread reaps them in the order the device finishes them).
/// On an O_DIRECT file it is Linux native AIO (`aio.rs`: a completion wakes
/// the reaping thread straight from the interrupt); elsewhere, or where AIO
/// cannot be set up (or `SLUICE_READ_RING=uring`), an io_uring (whose
/// completions are posted by task work on the submitting thread, which is
/// woken for it first).
///
/// Owns: the ring. The submission side (`push`, `submit`, `wake`) and the
/// completion side (`wait`) each take their own mutex, so each side is used
/// by one thread at a time; the two sides run concurrently, as io_uring
/// allows (one producer, one consumer).
///
/// Invariant: the caller keeps at most `capacity()` reads in flight (pushed
/// and not yet returned by `wait`), so neither queue can overflow; a buffer
/// given to `push` stays allocated and unmoved until `wait` returned its
/// completion.
pub struct UringReads {
    backend: Backend,
    entries: u32,
}

enum Backend {
    Uring {
        ring: IoUring,
        fd: std::os::unix::io::RawFd,
        sq: parking_lot::Mutex<()>,
        cq: parking_lot::Mutex<()>,
    },
    Aio(super::aio::AioReads),
}

/// io_uring_enter(2): wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

/// `user_data` of the no-op that wakes the completion side.
pub const WAKE: u64 = u64::MAX;

impl UringReads {
    /// A ring of `entries` submissions for reads of `file` (which must outlive
    /// the ring); `direct`: the file is open with O_DIRECT (AIO is used then).
    /// Err: neither AIO nor io_uring can be set up (the caller reads the
    /// synchronous way).
    pub fn new(file: &File, entries: u32, direct: bool) -> io::Result<UringReads> {
        let want_aio = direct && std::env::var("SLUICE_READ_RING").map_or(true, |v| v != "uring");
        if want_aio {
            match super::aio::AioReads::new(file.as_raw_fd(), entries) {
                Ok(a) => {
                    return Ok(UringReads {
                        backend: Backend::Aio(a),
                        entries,
                    })
                }
                Err(e) => {
                    tracing::debug!("AIO context not available ({e}): reads through io_uring")
                }
            }
        }
        if UNAVAILABLE.load(Ordering::Relaxed) {
            return Err(io::Error::other("io_uring is unavailable"));
        }
        Ok(UringReads {
            backend: Backend::Uring {
                ring: IoUring::new(entries)?,
                fd: file.as_raw_fd(),
                sq: parking_lot::Mutex::new(()),
                cq: parking_lot::Mutex::new(()),
            },
            entries,
        })
    }

    /// "aio" or "io_uring": what carries the reads.
    pub fn engine(&self) -> &'static str {
        match self.backend {
            Backend::Aio(_) => "aio",
            Backend::Uring { .. } => "io_uring",
        }
    }

    /// Reads that may be in flight at once (one submission slot stays free
    /// for `wake`).
    pub fn capacity(&self) -> usize {
        self.entries as usize - 1
    }

    /// Queue a read of `len` bytes at `offset` into `buf` (not submitted until
    /// `submit`); `user` comes back with its completion.
    ///
    /// # Safety
    /// `buf..buf + len` must stay valid and unmoved until `wait` returns this
    /// read's completion, and the caller must keep within `capacity()`.
    pub unsafe fn push(&self, buf: *mut u8, len: u32, offset: u64, user: u64) -> io::Result<()> {
        debug_assert_ne!(user, WAKE);
        let (ring, fd, sq) = match &self.backend {
            Backend::Aio(a) => {
                a.push(buf, len, offset, user);
                return Ok(());
            }
            Backend::Uring { ring, fd, sq, .. } => (ring, *fd, sq),
        };
        let e = opcode::Read::new(types::Fd(fd), buf, len)
            .offset(offset)
            .build()
            .user_data(user);
        let _g = sq.lock();
        // SAFETY: one submitter at a time (the `sq` lock); the entry's buffer
        // is the caller's promise above.
        unsafe { ring.submission_shared().push(&e) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    /// Hand every queued read to the kernel.
    pub fn submit(&self) -> io::Result<()> {
        let (ring, sq) = match &self.backend {
            Backend::Aio(a) => return a.submit(),
            Backend::Uring { ring, sq, .. } => (ring, sq),
        };
        let _g = sq.lock();
        loop {
            match ring.submitter().submit() {
                Ok(_) => return Ok(()),
                Err(e) if transient(&e) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    /// Make a `wait` in progress (or the next one) return a `WAKE` completion.
    pub fn wake(&self) -> io::Result<()> {
        let (ring, sq) = match &self.backend {
            Backend::Aio(a) => return a.poke(),
            Backend::Uring { ring, sq, .. } => (ring, sq),
        };
        {
            let _g = sq.lock();
            let e = opcode::Nop::new().build().user_data(WAKE);
            // SAFETY: a no-op carries no buffer; one submitter at a time.
            unsafe { ring.submission_shared().push(&e) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.submit()
    }

    /// Wait for at least one completion and append every completion ready as
    /// `(user, result)` (bytes read, or a negative errno) to `out`.
    pub fn wait(&self, out: &mut Vec<(u64, i32)>) -> io::Result<()> {
        let (ring, cq) = match &self.backend {
            Backend::Aio(a) => return a.wait(out),
            Backend::Uring { ring, cq, .. } => (ring, cq),
        };
        let _g = cq.lock();
        let before = out.len();
        loop {
            // SAFETY: one consumer at a time (the `cq` lock).
            for cqe in unsafe { ring.completion_shared() } {
                out.push((cqe.user_data(), cqe.result()));
            }
            if out.len() > before {
                return Ok(());
            }
            // SAFETY: no submission (0), wait for one completion, no argument.
            let r = unsafe {
                ring.submitter()
                    .enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None)
            };
            match r {
                Ok(_) => {}
                Err(e) if transient(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
