//! A second writer beside the caller, for `FileMedia::write_batch` of a
//! large write and a small one (a version 3 FLUSH: its data at its place
//! and its 512 B record in the ring): the caller `pwrite`s the large one
//! while a kept thread `pwrite`s a copy of the small one, so both requests
//! are in flight at once and each completes straight to the thread that
//! waits for it.
//!
//! Why not io_uring (docs/intent-log.md §4.7): an asynchronous O_DIRECT write
//! to a regular file on ext4 or XFS completes through the filesystem's DIO
//! workqueue (`iomap_dio_complete_work`, a kworker at normal priority); with
//! the CPUs busy the completion waits behind every runnable task, and a
//! FLUSH's write took milliseconds where a `pwrite`, completed from the
//! interrupt to the waiting thread, took a tenth of one. A synchronous
//! `pwrite` has no such hop, and the kept threads run at the priority of
//! the thread that started them (a server under `chrt` keeps it).
//!
//! Owns: up to `THREADS` kept threads (started on first use), each with
//! its slot (the job handed to it, its answer), and a duplicate of the file
//! descriptor they write through.
//! Invariant: `write_pair` returns only once both writes have ended, and
//! fails if either failed; a slot holds at most one job, taken by one
//! caller at a time (`busy`); dropping a `Beside` joins its threads, so the
//! duplicate descriptor (which shares the volume lock) is closed when the
//! FileMedia is.
//!
//! Who hands off (`caller_hands_off`, docs/intent-log.md §4.14): only a
//! caller at a real-time priority (SCHED_FIFO or SCHED_RR: a server or
//! bench under `chrt`). Its kept thread is real-time too and runs at once,
//! while an io_uring completion would wait for the filesystem's kworker at
//! normal priority (the inversion §4.7 measured). A caller at normal
//! priority gains nothing from the kept thread: the kworker competes on
//! equal terms, and the kept thread is one more normal-priority wake-up the
//! caller waits for; with the CPUs busy that wait cost 0.14-0.57x of
//! io_uring's IOPS at NBD QD1 (measured, §4.14). It sends the pair through
//! io_uring (`FileMedia::write_batch`).
//!
//! The hand-off is a slot and `thread::park`/`unpark`, not channels: an
//! `unpark` of a thread that is not asleep is an atomic store, so the
//! caller, whose own write usually ends after the small one, is woken by
//! no system call; one `futex` wakes the kept thread (docs/intent-log.md
//! §4.8: the channels cost ~6 futex calls per pair).

use super::AlignedBuf;
use parking_lot::Mutex;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};

/// Kept threads: two FLUSHes may write their records at once.
const THREADS: usize = 2;

/// Slot states.
const IDLE: u8 = 0;
const POSTED: u8 = 1;
const DONE: u8 = 2;

/// One kept thread's mailbox.
struct Slot {
    /// A caller owns the slot (from its job's posting to its answer's taking).
    busy: AtomicBool,
    state: AtomicU8,
    /// The job: a copy of the small write (the buffer is kept for the next)
    /// and its offset; then the answer.
    job: Mutex<Job>,
    /// The caller to wake with the answer.
    caller: Mutex<Option<Thread>>,
    /// The kept thread, once started.
    worker: Mutex<Option<Thread>>,
    stop: AtomicBool,
}

#[derive(Default)]
struct Job {
    buf: Option<AlignedBuf>,
    len: usize,
    offset: u64,
    answer: Option<io::Result<()>>,
}

pub struct Beside {
    file: Arc<File>,
    slots: Vec<Arc<Slot>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Beside {
    /// A writer beside the caller for `file` (duplicated: the threads hold
    /// their own descriptor of the same open file).
    pub fn new(file: &File) -> io::Result<Beside> {
        Ok(Beside {
            file: Arc::new(file.try_clone()?),
            slots: (0..THREADS)
                .map(|_| {
                    Arc::new(Slot {
                        busy: AtomicBool::new(false),
                        state: AtomicU8::new(IDLE),
                        job: Mutex::new(Job::default()),
                        caller: Mutex::new(None),
                        worker: Mutex::new(None),
                        stop: AtomicBool::new(false),
                    })
                })
                .collect(),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Write `big` on this thread and a copy of `small` on a kept thread, at
    /// once; Ok only if both landed whole.
    pub fn write_pair(&self, big: (&[u8], u64), small: (&[u8], u64)) -> io::Result<()> {
        let Some(slot) = self.post(small) else {
            // no kept thread free or startable: both here, one after the other
            let first = self.file.write_all_at(big.0, big.1);
            return first.and(self.file.write_all_at(small.0, small.1));
        };
        let first = self.file.write_all_at(big.0, big.1);
        let second = wait(slot);
        // MUTANT: beside-error-dropped s|first.and(second)|first|
        first.and(second)
    }

    /// Kept threads started so far.
    #[cfg(test)]
    pub fn started(&self) -> usize {
        self.threads.lock().len()
    }

    /// Hand `small` to a free kept thread (starting it on first use). None:
    /// every slot is taken, or no thread could be started.
    fn post(&self, small: (&[u8], u64)) -> Option<&Slot> {
        let slot = self.slots.iter().find(|s| {
            s.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        // (the guard must not live through the match: `start` locks it)
        let known = slot.worker.lock().clone();
        let worker = match known {
            Some(w) => w,
            None => match self.start(slot) {
                Some(w) => w,
                None => {
                    slot.busy.store(false, Ordering::Release);
                    return None;
                }
            },
        };
        {
            let mut j = slot.job.lock();
            if j.buf.as_ref().is_none_or(|b| b.len() < small.0.len()) {
                j.buf = Some(AlignedBuf::new(small.0.len().max(4096)));
            }
            let buf = j.buf.as_mut().expect("set above");
            buf[..small.0.len()].copy_from_slice(small.0);
            j.len = small.0.len();
            j.offset = small.1;
            j.answer = None;
        }
        *slot.caller.lock() = Some(std::thread::current());
        slot.state.store(POSTED, Ordering::Release);
        worker.unpark();
        Some(slot)
    }

    /// Start `slot`'s kept thread (inherits this thread's scheduling class
    /// and priority). None when the thread cannot be started.
    fn start(&self, slot: &Arc<Slot>) -> Option<Thread> {
        let mut threads = self.threads.lock();
        if let Some(w) = slot.worker.lock().clone() {
            return Some(w);
        }
        let (s, file) = (slot.clone(), self.file.clone());
        let name = format!("sluice-beside-{}", threads.len());
        match std::thread::Builder::new()
            .name(name)
            .spawn(move || work(&s, &file))
        {
            Ok(h) => {
                let t = h.thread().clone();
                *slot.worker.lock() = Some(t.clone());
                threads.push(h);
                Some(t)
            }
            Err(e) => {
                tracing::debug!("no thread to write beside the caller: {e}");
                None
            }
        }
    }
}

/// Does a pair written by the calling thread go to a kept thread? Only when
/// the thread runs at a real-time priority (module comment: a kept thread
/// is then real-time too and runs at once; at normal priority it is one
/// more wake-up to wait for, and io_uring's completion is not starved).
pub fn caller_hands_off() -> bool {
    // SAFETY: reads the calling thread's policy (pid 0); no memory passed
    let policy = unsafe { libc::sched_getscheduler(0) } & !libc::SCHED_RESET_ON_FORK;
    // MUTANT: beside-for-every-caller s|policy == libc::SCHED_FIFO |policy >= 0 |
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR
}

/// The caller: wait for the kept thread's answer and free the slot.
fn wait(slot: &Slot) -> io::Result<()> {
    while slot.state.load(Ordering::Acquire) != DONE {
        std::thread::park();
    }
    let answer = slot.job.lock().answer.take();
    slot.state.store(IDLE, Ordering::Relaxed);
    slot.busy.store(false, Ordering::Release);
    answer.unwrap_or_else(|| Err(io::Error::other("the writer beside gave no answer")))
}

/// A kept thread: write each job posted in its slot and answer, until the
/// `Beside` is dropped.
fn work(slot: &Slot, file: &File) {
    loop {
        while slot.state.load(Ordering::Acquire) != POSTED {
            if slot.stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::park();
        }
        let caller = slot.caller.lock().take();
        {
            let mut j = slot.job.lock();
            let r = match &j.buf {
                Some(b) => file.write_all_at(&b[..j.len], j.offset),
                None => Err(io::Error::other("no job")),
            };
            j.answer = Some(r);
        }
        slot.state.store(DONE, Ordering::Release);
        if let Some(c) = caller {
            c.unpark();
        }
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        for s in &self.slots {
            s.stop.store(true, Ordering::Release);
            if let Some(w) = s.worker.lock().as_ref() {
                w.unpark();
            }
        }
        for h in self.threads.lock().drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both writes land, at once or not; a failing small write fails the
    /// pair (an O_DIRECT write of a length no sector divides is refused; on
    /// a file without O_DIRECT a write past a read-only descriptor stands in).
    #[test]
    fn a_pair_lands_both_writes_and_fails_when_either_fails() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(1 << 20).unwrap();
        let b = Beside::new(&f).unwrap();
        for round in 0..20u8 {
            let big = vec![round; 8192];
            let small = vec![round ^ 0xff; 512];
            b.write_pair((&big, 4096), (&small, 65536 + 512 * round as u64))
                .unwrap();
            let mut back = vec![0; 8192];
            f.read_exact_at(&mut back, 4096).unwrap();
            assert_eq!(back, big);
            f.read_exact_at(&mut back[..512], 65536 + 512 * round as u64)
                .unwrap();
            assert_eq!(&back[..512], &small[..]);
        }
        // the small write fails (a read-only descriptor): the pair fails
        let ro = File::open(&p).unwrap();
        let b = Beside::new(&ro).unwrap();
        let e = b.write_pair((&[], 0), (&[1; 512], 0)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        drop(b);
    }
}
