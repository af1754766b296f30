//! Who reaps a connection's read ring (issue 22). While the connection's
//! reader thread would sleep on its socket it polls the socket and the ring's
//! completion eventfd together (AIO's `IOCB_FLAG_RESFD`) and reaps, verifies
//! and answers the completions itself, as fio's one thread does for a raw
//! file: no second thread is woken per burst of completions. Before the
//! reader waits on anything else (budget, ring room, the reuse lock, a
//! write's payload or engine call, a flush, the end of the connection) it
//! hands the duty to the ring's completion thread, which parks while the
//! reader holds it. With TLS, on io_uring, or with `SLUICE_READ_REAPER=thread`
//! in the server's environment (for A/B runs), the completion thread always
//! reaps, as before.
//!
//! Owns: `Duty`, the flag saying who reaps and the completion thread's
//! parking spot; the reader's combined wait (`Conn::wait_socket`).
//!
//! Invariant: whenever the reader waits on anything but its combined poll,
//! either the completion thread holds the duty or the ring has no read
//! pending, so a completion is never left for a thread that is waiting for
//! something its reply would release (budget, a reuse barrier, room in the
//! ring). Both threads may reap at once while the duty changes hands
//! (`ReadRing::reap` and `reap_ready` share the ring's state lock); each
//! completion is taken once.

use super::reply::Conn;
use parking_lot::{Condvar, Mutex};
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The reaping duty of one connection's read ring.
pub(super) struct Duty {
    /// The reader may take the duty (AIO ring, no TLS, not switched off).
    enabled: AtomicBool,
    /// The reader holds the duty (written by the reader only).
    reader: AtomicBool,
    /// The completion thread may reap (false while the reader holds the duty).
    completer: Mutex<bool>,
    cv: Condvar,
}

impl Default for Duty {
    fn default() -> Duty {
        Duty {
            enabled: AtomicBool::new(false),
            reader: AtomicBool::new(false),
            completer: Mutex::new(true),
            cv: Condvar::new(),
        }
    }
}

impl Duty {
    /// Let the reader take the duty (set once the ring is up).
    pub(super) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Reader: take the duty. A completion thread inside `reap` finishes its
    /// batch, then parks.
    fn take(&self) {
        if !self.reader.load(Ordering::Relaxed) {
            self.reader.store(true, Ordering::Relaxed);
            *self.completer.lock() = false;
        }
    }

    /// Reader: give the duty to the completion thread (about to wait on
    /// something other than its poll).
    pub(super) fn hand_off(&self) {
        if self.reader.load(Ordering::Relaxed) {
            self.reader.store(false, Ordering::Relaxed);
            // MUTANT: reader-keeps-reap-duty s|*self.completer.lock() = true;|*self.completer.lock() = false;|
            *self.completer.lock() = true;
            self.cv.notify_one();
        }
    }

    /// Completion thread: wait until it holds the duty.
    pub(super) fn wait_turn(&self) {
        let mut c = self.completer.lock();
        while !*c {
            self.cv.wait(&mut c);
        }
    }
}

impl Conn {
    /// Reader, before it waits on anything but its socket: hand reaping to
    /// the completion thread if a read is pending on the ring.
    pub(super) fn hand_off_reads(&self) {
        if let Some(Some(r)) = self.ring.get() {
            if r.pending() > 0 {
                self.duty.hand_off();
            }
        }
    }

    /// Reader: wait until the socket `fd` is readable (true) or `tick` passed
    /// (false), reaping and answering the read ring's completions meanwhile.
    /// True at once when this reader does not reap (no ring, io_uring, TLS,
    /// switched off): its read of the socket waits as before.
    pub(super) fn wait_socket(&self, fd: RawFd, tick: Duration) -> io::Result<bool> {
        let Some(Some(ring)) = self.ring.get() else {
            return Ok(true);
        };
        let Some(efd) = ring.ready_fd() else {
            return Ok(true);
        };
        if !self.duty.enabled.load(Ordering::Relaxed) {
            return Ok(true);
        }
        self.duty.take();
        let start = Instant::now();
        let mut done = Vec::new();
        loop {
            let left = tick.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(false);
            }
            let mut p = [
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: efd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
            // SAFETY: two valid pollfds for the duration of the call.
            let n = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if p[1].revents != 0 {
                ring.reap_ready(&mut done);
                if !done.is_empty() {
                    self.send_reads(&done);
                    ring.recycle(&mut done);
                }
            }
            if p[0].revents != 0 {
                return Ok(true);
            }
        }
    }
}
