//! Linux native AIO (`io_submit` / `io_getevents`) for reads submitted on one
//! thread and reaped on another: the backend `UringReads` prefers on O_DIRECT
//! files. An io_uring read's completion is posted through task work of the
//! thread that *submitted* it, so a completion thread waiting on an io_uring
//! waits for the submitter to be woken (out of its socket read) first: two
//! wake-ups in series per completion. An AIO completion is posted from the
//! interrupt and wakes the waiter directly (docs/nbd.md, "Where a request's
//! time goes").
//!
//! Owns: the AIO context and the control blocks queued and not yet
//! submitted (under `sq`); the completions the kernel refused at submission
//! (`refused`, handed out by the next `wait`).
//!
//! Invariants: every pushed read comes back from `wait` exactly once (from
//! the kernel, or from `refused` when `io_submit` refused it); the context is
//! destroyed only after the caller reaped every read (the caller's promise,
//! as for the io_uring ring); O_DIRECT only (a buffered AIO read blocks in
//! `io_submit`, so the caller uses io_uring there).

use std::io;
use std::os::unix::io::RawFd;

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_POLL: u16 = 5;

/// `struct iocb` of <linux/aio_abi.h> (64 bytes, little-endian layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: u32,
    opcode: u16,
    reqprio: i16,
    fd: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

pub(super) struct AioReads {
    ctx: u64,
    fd: RawFd,
    /// An eventfd kept readable: a poll on it completes at once (`poke`).
    wake_fd: RawFd,
    sq: parking_lot::Mutex<Vec<Iocb>>,
    cq: parking_lot::Mutex<Vec<IoEvent>>,
    refused: parking_lot::Mutex<Vec<(u64, i32)>>,
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl AioReads {
    /// A context for `entries` reads of `fd` at once (plus the wake-ups).
    /// Every context counts against the system's `fs.aio-max-nr` (65,536 by
    /// default; the kernel counts twice what is asked): when it is used up
    /// this fails (EAGAIN) and the caller uses an io_uring instead.
    pub(super) fn new(fd: RawFd, entries: u32) -> io::Result<AioReads> {
        let mut ctx: u64 = 0;
        // a few events over `entries` for the wake-ups (a refused read
        // holds none in the kernel, so its wake-up takes its place)
        let events = entries as libc::c_long + 8;
        // SAFETY: io_setup writes the context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, events, &mut ctx) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain eventfd creation.
        let wake_fd = unsafe { libc::eventfd(1, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake_fd < 0 {
            let e = io::Error::last_os_error();
            // SAFETY: the context just set up, nothing in flight.
            unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
            return Err(e);
        }
        Ok(AioReads {
            ctx,
            fd,
            wake_fd,
            sq: parking_lot::Mutex::new(Vec::with_capacity(entries as usize)),
            cq: parking_lot::Mutex::new(vec![IoEvent::default(); entries as usize]),
            refused: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Queue a read (submitted by `submit`).
    pub(super) fn push(&self, buf: *mut u8, len: u32, offset: u64, user: u64) {
        self.sq.lock().push(Iocb {
            data: user,
            opcode: IOCB_CMD_PREAD,
            fd: self.fd as u32,
            buf: buf as u64,
            nbytes: len as u64,
            offset: offset as i64,
            ..Iocb::default()
        });
    }

    /// Submit every queued control block. A block the kernel refuses
    /// (anything but EAGAIN / EINTR, which are retried) completes with its
    /// errno through `refused` and a wake-up.
    pub(super) fn submit(&self) -> io::Result<()> {
        let mut q = self.sq.lock();
        // the control blocks' addresses: on the stack for the usual few (the
        // NBD reader submits each READ as it arrives), else on the heap
        let mut small = [std::ptr::null_mut::<Iocb>(); 8];
        let mut big: Vec<*mut Iocb> = Vec::new();
        let ptrs: &mut [*mut Iocb] = if q.len() <= small.len() {
            for (p, c) in small.iter_mut().zip(q.iter_mut()) {
                *p = c;
            }
            &mut small[..q.len()]
        } else {
            big.extend(q.iter_mut().map(|c| c as *mut Iocb));
            &mut big
        };
        let mut at = 0;
        let mut refused = false;
        while at < ptrs.len() {
            // SAFETY: `ptrs[at..]` point at control blocks in `q`, alive for
            // the call (the kernel copies them); their buffers are the
            // caller's promise (`UringReads::push`).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    (ptrs.len() - at) as libc::c_long,
                    ptrs[at..].as_mut_ptr(),
                )
            };
            if r > 0 {
                at += r as usize;
                continue;
            }
            let e = if r == 0 { libc::EAGAIN } else { errno() };
            match e {
                libc::EAGAIN | libc::EINTR => std::thread::yield_now(),
                e => {
                    // this block is refused: it completes with the error
                    // SAFETY: ptrs[at] points into `q` (above).
                    let user = unsafe { (*ptrs[at]).data };
                    // MUTANT: aio-refused-read-succeeds s|(user, -e)|(user, 4096)|
                    self.refused.lock().push((user, -e));
                    refused = true;
                    at += 1;
                }
            }
        }
        q.clear();
        drop(q);
        if refused {
            self.poke()?;
        }
        Ok(())
    }

    /// Make a `wait` in progress (or the next one) return a completion with
    /// `user` `super::uring::WAKE`: a poll of the always-readable eventfd.
    pub(super) fn poke(&self) -> io::Result<()> {
        let mut cb = Iocb {
            data: super::uring::WAKE,
            opcode: IOCB_CMD_POLL,
            fd: self.wake_fd as u32,
            buf: libc::POLLIN as u64,
            ..Iocb::default()
        };
        let mut p: *mut Iocb = &mut cb;
        loop {
            // SAFETY: one control block on the stack for the call (the kernel
            // copies it); a poll carries no buffer.
            let r =
                unsafe { libc::syscall(libc::SYS_io_submit, self.ctx, 1 as libc::c_long, &mut p) };
            if r == 1 {
                return Ok(());
            }
            match if r == 0 { libc::EAGAIN } else { errno() } {
                libc::EAGAIN | libc::EINTR => std::thread::yield_now(),
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }

    /// Wait for at least one completion; append every one ready to `out`.
    pub(super) fn wait(&self, out: &mut Vec<(u64, i32)>) -> io::Result<()> {
        let mut ev = self.cq.lock();
        let before = out.len();
        out.append(&mut self.refused.lock());
        // refused blocks handed out: still reap what the kernel has, without waiting
        let min = if out.len() > before { 0 } else { 1 };
        loop {
            // SAFETY: `ev` holds room for `ev.len()` events.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    min as libc::c_long,
                    ev.len() as libc::c_long,
                    ev.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if r < 0 {
                match errno() {
                    libc::EINTR => continue,
                    e => return Err(io::Error::from_raw_os_error(e)),
                }
            }
            for e in &ev[..r as usize] {
                // res: bytes read or a negative errno (fits i32: len <= u32)
                let res = e.res.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                out.push((e.data, res));
            }
            if out.len() > before {
                return Ok(());
            }
        }
    }
}

impl Drop for AioReads {
    fn drop(&mut self) {
        // SAFETY: the caller reaped every read (module invariant); the
        // context and the eventfd are ours.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
            libc::close(self.wake_fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{AlignedBuf, UringReads, URING_WAKE};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    const BS: usize = 4096;

    /// A 64 KiB file whose block i is filled with byte i + 1, opened again
    /// with O_DIRECT (None: the file system refuses O_DIRECT).
    fn direct_file(dir: &std::path::Path) -> Option<std::fs::File> {
        let p = dir.join("f");
        let f = std::fs::File::create(&p).unwrap();
        for i in 0..16u8 {
            f.write_all_at(&[i + 1; BS], i as u64 * BS as u64).unwrap();
        }
        f.sync_all().unwrap();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .ok()
    }

    /// Waits until `n` completions that are not wake-ups came back.
    fn reap(r: &UringReads, n: usize) -> (Vec<(u64, i32)>, usize) {
        let (mut out, mut wakes) = (Vec::new(), 0);
        while out.len() < n {
            let mut got = Vec::new();
            r.wait(&mut got).unwrap();
            for c in got {
                if c.0 == URING_WAKE {
                    wakes += 1;
                } else {
                    out.push(c);
                }
            }
        }
        (out, wakes)
    }

    /// Both engines read every block into its own buffer, each completion
    /// carrying its read's tag and byte count, and `wake` comes back as one
    /// WAKE completion.
    #[test]
    fn both_engines_read_every_block_and_wake() {
        let dir = tempfile::tempdir().unwrap();
        let Some(file) = direct_file(dir.path()) else {
            eprintln!("*** SKIP: no O_DIRECT on the test directory's file system ***");
            return;
        };
        for (direct, engine) in [(true, "aio"), (false, "io_uring")] {
            let r = match UringReads::new(&file, 32, direct) {
                Ok(r) => r,
                Err(e) => {
                    assert!(std::env::var_os("CI").is_none(), "{engine}: {e}");
                    eprintln!("*** SKIP: {engine} not available: {e} ***");
                    continue;
                }
            };
            assert_eq!(r.engine(), engine);
            let mut buf = AlignedBuf::new(16 * BS);
            let base = buf.as_mut_ptr();
            for i in 0..16u64 {
                // SAFETY: block i of `buf`, which lives until every read is reaped.
                unsafe {
                    r.push(
                        base.add(i as usize * BS),
                        BS as u32,
                        (15 - i) * BS as u64,
                        100 + i,
                    )
                }
                .unwrap();
            }
            r.submit().unwrap();
            let (mut out, _) = reap(&r, 16);
            out.sort();
            let want: Vec<(u64, i32)> = (0..16).map(|i| (100 + i, BS as i32)).collect();
            assert_eq!(out, want, "{engine}: every read once, whole");
            for i in 0..16usize {
                assert!(
                    buf[i * BS..(i + 1) * BS].iter().all(|&b| b == 16 - i as u8),
                    "{engine}: block {i} holds file block {}",
                    15 - i
                );
            }
            r.wake().unwrap();
            let mut got = Vec::new();
            r.wait(&mut got).unwrap();
            assert!(
                got.iter().all(|c| c.0 == URING_WAKE) && !got.is_empty(),
                "{engine}: the wake-up, and nothing else: {got:?}"
            );
        }
    }

    /// A read the kernel refuses at submission (AIO: `io_submit` fails for
    /// it, here EBADF) still completes, with its errno as a negative result:
    /// never as bytes read, and never lost (its READ would hang).
    #[test]
    fn a_refused_aio_read_completes_with_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let Some(file) = direct_file(dir.path()) else {
            eprintln!("*** SKIP: no O_DIRECT on the test directory's file system ***");
            return;
        };
        use std::os::unix::io::AsRawFd;
        // a descriptor number that is not open
        let bad = file.as_raw_fd() + 1000;
        let r = match super::AioReads::new(bad, 8) {
            Ok(r) => r,
            Err(e) => {
                assert!(std::env::var_os("CI").is_none(), "aio: {e}");
                eprintln!("*** SKIP: aio not available: {e} ***");
                return;
            }
        };
        let mut buf = AlignedBuf::new(2 * BS);
        let base = buf.as_mut_ptr();
        r.push(base, BS as u32, 0, 7);
        // SAFETY: (not read: the descriptor is bad) block 1 of `buf`
        r.push(unsafe { base.add(BS) }, BS as u32, BS as u64, 8);
        r.submit().unwrap();
        let mut out = Vec::new();
        while out
            .iter()
            .filter(|c: &&(u64, i32)| c.0 != URING_WAKE)
            .count()
            < 2
        {
            r.wait(&mut out).unwrap();
        }
        out.retain(|c| c.0 != URING_WAKE);
        out.sort();
        assert_eq!(out, vec![(7, -libc::EBADF), (8, -libc::EBADF)]);
    }
}
