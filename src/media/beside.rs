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
//! Owns: up to `THREADS` kept threads (started on first use) and a duplicate
//! of the file descriptor they write through.
//! Invariant: `write_pair` returns only once both writes have ended, and
//! fails if either failed; dropping a `Beside` joins its threads, so the
//! duplicate descriptor (which shares the volume lock) is closed when the
//! FileMedia is.

use super::AlignedBuf;
use parking_lot::Mutex;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Kept threads: two FLUSHes may write their records at once.
const THREADS: usize = 2;

type Job = (AlignedBuf, u64, mpsc::SyncSender<io::Result<()>>);

pub struct Beside {
    file: Arc<File>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tx: Option<mpsc::Sender<Job>>,
    rx: Option<Arc<std::sync::Mutex<mpsc::Receiver<Job>>>>,
    threads: Vec<JoinHandle<()>>,
    /// Jobs handed out and not yet answered (a thread more when all busy).
    busy: usize,
}

impl Beside {
    /// A writer beside the caller for `file` (duplicated: the threads hold
    /// their own descriptor of the same open file).
    pub fn new(file: &File) -> io::Result<Beside> {
        Ok(Beside {
            file: Arc::new(file.try_clone()?),
            state: Mutex::new(State::default()),
        })
    }

    /// Write `big` on this thread and a copy of `small` on a kept thread, at
    /// once; Ok only if both landed whole.
    pub fn write_pair(&self, big: (&[u8], u64), small: (&[u8], u64)) -> io::Result<()> {
        let mut copy = AlignedBuf::new(small.0.len());
        copy.copy_from_slice(small.0);
        let (reply, answer) = mpsc::sync_channel(1);
        let sent = self.send((copy, small.1, reply));
        let first = self.file.write_all_at(big.0, big.1);
        let second = match sent {
            Ok(()) => answer
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("the writer beside ended"))),
            // no thread to take it: written here, after the first
            Err((buf, off)) => self.file.write_all_at(&buf, off),
        };
        self.state.lock().busy -= 1;
        // MUTANT: beside-error-dropped s|first.and(second)|first|
        first.and(second)
    }

    /// Hand a job to a kept thread, starting one when every thread is busy
    /// (at most `THREADS`). Err gives the job back when no thread can run.
    fn send(&self, job: Job) -> Result<(), (AlignedBuf, u64)> {
        let mut s = self.state.lock();
        s.busy += 1;
        if s.tx.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            s.tx = Some(tx);
            s.rx = Some(Arc::new(std::sync::Mutex::new(rx)));
        }
        if s.busy > s.threads.len() && s.threads.len() < THREADS {
            let (rx, file) = (s.rx.clone().expect("set above"), self.file.clone());
            let name = format!("sluice-beside-{}", s.threads.len());
            match std::thread::Builder::new()
                .name(name)
                .spawn(move || work(&rx, &file))
            {
                Ok(h) => s.threads.push(h),
                Err(e) if s.threads.is_empty() => {
                    tracing::debug!("no thread to write beside the caller: {e}");
                    return Err((job.0, job.1));
                }
                Err(_) => {}
            }
        }
        s.tx.as_ref()
            .expect("set above")
            .send(job)
            .map_err(|mpsc::SendError(j)| (j.0, j.1))
    }
}

/// A kept thread: write each job's buffer and answer, until the sender drops.
fn work(rx: &std::sync::Mutex<mpsc::Receiver<Job>>, file: &File) {
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok((buf, off, reply)) = job else { return };
        let _ = reply.send(file.write_all_at(&buf, off));
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        s.tx = None;
        s.rx = None;
        for h in s.threads.drain(..) {
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
