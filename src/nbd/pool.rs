//! The shared worker pool: a fixed set of threads (`--workers`) running boxed
//! jobs from one FIFO queue: requests that wait for the media (FLUSH, FUA
//! writes, BLOCK_STATUS, and READs where no read ring serves them).
//!
//! Owns: the job queue and the worker threads.
//!
//! Invariant: a job never blocks on a client's socket (replies go out through
//! `Conn::send`, non-blocking), so a stalled client cannot hold a worker;
//! `stop` runs every queued job before the workers exit.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads running boxed jobs from one queue.
pub(super) struct Pool {
    /// Queued jobs, and whether the pool is stopping.
    q: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    pub(super) fn new(n: usize) -> io::Result<Arc<Pool>> {
        let p = Arc::new(Pool {
            q: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        });
        for i in 0..n.max(1) {
            let p2 = p.clone();
            let h = std::thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn(move || p2.work())?;
            p.threads.lock().push(h);
        }
        Ok(p)
    }

    pub(super) fn submit(&self, job: Job) {
        self.q.lock().0.push_back(job);
        self.cv.notify_one();
    }

    /// Other jobs are waiting for a worker.
    pub(super) fn busy(&self) -> bool {
        !self.q.lock().0.is_empty()
    }

    fn work(&self) {
        loop {
            let job = {
                let mut q = self.q.lock();
                loop {
                    if let Some(j) = q.0.pop_front() {
                        break j;
                    }
                    if q.1 {
                        return;
                    }
                    self.cv.wait(&mut q);
                }
            };
            job();
        }
    }

    /// Run what is queued, then stop every worker.
    pub(super) fn stop(&self) {
        self.q.lock().1 = true;
        self.cv.notify_all();
        for h in self.threads.lock().drain(..) {
            let _ = h.join();
        }
    }
}
