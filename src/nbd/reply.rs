//! The reply side of one connection (`Conn`): its budget of requests and bytes
//! in flight, the replies the reader batches, the non-blocking send every
//! reply goes through, the backlog the socket did not take and the writer
//! thread that delivers it.
//!
//! Owns: `Conn::writer` (pending replies, backlog, TLS records being sent;
//! under the writer lock, lock order writer -> TLS session) and `Conn::budget`.
//!
//! Invariants: no shared thread (worker, read completion) ever blocks on a
//! client's socket: what `send` cannot hand to the socket at once goes to the
//! backlog, which only the connection's own writer thread waits on (and
//! drops the connection after `reply_timeout` without progress); every
//! accepted request holds budget until its reply is on the wire (or dropped
//! with the client); replies of one connection never interleave (one writer
//! lock).

use super::proto::{self, Negotiated, Request};
use super::requests::ReadCtx;
use super::server::MAX_INFLIGHT_REQUESTS;
use super::tls;
use super::transport::{send_now, send_patiently, Stream};
use crate::volume::ReadRing;
use crate::Volume;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::net::Shutdown;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Queued (batched) replies are sent once they reach this size.
const REPLY_BATCH_BYTES: usize = 64 << 10;

#[derive(Default, Clone, Copy, Debug)]
pub(super) struct Release {
    pub(super) requests: usize,
    pub(super) bytes: u64,
}

impl Release {
    pub(super) fn one(bytes: u64) -> Release {
        Release { requests: 1, bytes }
    }
    pub(super) fn add(&mut self, o: Release) {
        self.requests += o.requests;
        self.bytes += o.bytes;
    }
}

/// Reply side of one connection.
pub(super) struct Writer {
    /// The socket (a dup of the reader's); sends are non-blocking.
    pub(super) stream: Stream,
    /// Replies batched by the reader thread, not yet sent.
    pub(super) pending: Vec<u8>,
    pub(super) pending_rel: Release,
    /// TLS: the records of the send in progress (reused between sends).
    pub(super) sealed: Vec<u8>,
    /// Bytes the socket did not take: only the writer thread sends these.
    pub(super) backlog: Vec<u8>,
    pub(super) backlog_rel: Release,
    /// The writer thread is sending a batch taken from the backlog.
    pub(super) draining: bool,
    /// The client went away or stopped reading: replies are dropped.
    pub(super) broken: bool,
    /// The reader is done and every reply was handed over: the writer may exit.
    pub(super) closing: bool,
}

/// READs of one connection received and waiting for a worker, and the
/// workers serving them (at most `READ_WORKERS`).
#[derive(Default)]
pub(super) struct ReadQueue {
    pub(super) q: VecDeque<Request>,
    pub(super) workers: usize,
}

/// Requests and payload bytes in flight on one connection.
#[derive(Default)]
pub(super) struct Budget {
    requests: usize,
    bytes: u64,
}

pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) vol: Arc<Volume>,
    pub(super) recorder: Option<Arc<crate::trace::Recorder>>,
    pub(super) neg: Negotiated,
    pub(super) max_bytes: u64,
    pub(super) reply_timeout: Duration,
    /// The TLS session after STARTTLS: replies are sealed under the writer
    /// lock (lock order: writer -> session).
    pub(super) tls: Option<Arc<tls::Session>>,
    pub(super) writer: Mutex<Writer>,
    pub(super) writer_cv: Condvar,
    pub(super) budget: Mutex<Budget>,
    pub(super) budget_cv: Condvar,
    pub(super) reads: Mutex<ReadQueue>,
    /// The read ring (set up at the first READ; None inside: none here).
    pub(super) ring: OnceLock<Option<Arc<ReadRing<ReadCtx>>>>,
    /// The ring's completion thread.
    pub(super) completer: Mutex<Option<JoinHandle<()>>>,
}

impl Conn {
    pub(super) fn acquire(&self, bytes: u64) {
        let mut b = self.budget.lock();
        while b.requests > 0
            && (b.requests >= MAX_INFLIGHT_REQUESTS || b.bytes + bytes > self.max_bytes)
        {
            self.budget_cv.wait(&mut b);
        }
        b.requests += 1;
        b.bytes += bytes;
    }

    /// As `acquire`, but gives up instead of waiting (used while the caller
    /// itself holds budget it has not handed on yet, so waiting could deadlock).
    pub(super) fn try_acquire(&self, bytes: u64) -> bool {
        let mut b = self.budget.lock();
        if b.requests > 0
            && (b.requests >= MAX_INFLIGHT_REQUESTS || b.bytes + bytes > self.max_bytes)
        {
            return false;
        }
        b.requests += 1;
        b.bytes += bytes;
        true
    }

    /// `acquire` for the reader thread: replies it batched hold budget too, so
    /// it sends them before it waits for budget to come back.
    pub(super) fn acquire_reader(&self, bytes: u64) {
        if !self.try_acquire(bytes) {
            self.submit_reads();
            self.flush_pending();
            self.acquire(bytes);
        }
    }

    pub(super) fn release(&self, r: Release) {
        if r.requests == 0 && r.bytes == 0 {
            return;
        }
        let mut b = self.budget.lock();
        b.requests -= r.requests;
        b.bytes -= r.bytes;
        self.budget_cv.notify_all();
    }

    pub(super) fn in_flight(&self) -> usize {
        self.budget.lock().requests
    }

    pub(super) fn drain(&self) {
        let mut b = self.budget.lock();
        while b.requests > 0 {
            self.budget_cv.wait(&mut b);
        }
    }

    /// Send `parts` (after any batched replies) without blocking: what the
    /// socket does not take goes to the backlog for the writer thread. `rel` is
    /// released once these bytes are on the wire (or dropped with the client).
    /// With TLS the bytes are sealed here, under the writer lock, so records
    /// leave in the order they were sealed.
    pub(super) fn send(&self, parts: &[&[u8]], rel: Release) {
        let mut w = self.writer.lock();
        let mut rel = rel;
        rel.add(std::mem::take(&mut w.pending_rel));
        if w.broken {
            w.pending.clear();
            drop(w);
            self.release(rel);
            return;
        }
        let mut pending = std::mem::take(&mut w.pending);
        let mut sealed = std::mem::take(&mut w.sealed);
        let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
        if !pending.is_empty() {
            all.push(&pending);
        }
        all.extend_from_slice(parts);
        let mut failed = None;
        if let Some(tls) = &self.tls {
            sealed.clear();
            match tls.seal(&all, &mut sealed) {
                Ok(()) => {
                    all.clear();
                    if !sealed.is_empty() {
                        all.push(&sealed);
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        let rel = match failed {
            None => self.deliver(&mut w, &all, rel),
            Some(e) => self.fail(&mut w, e, rel),
        };
        drop(all);
        if !w.broken {
            pending.clear();
            w.pending = pending;
            if sealed.capacity() <= REPLY_BATCH_BYTES * 4 {
                sealed.clear();
                w.sealed = sealed;
            }
        }
        drop(w);
        if let Some(rel) = rel {
            self.release(rel);
        }
    }

    /// Send `all` now or queue it behind the backlog; returns the budget to
    /// give back now (None: it went to the backlog with the bytes).
    fn deliver(&self, w: &mut Writer, all: &[&[u8]], rel: Release) -> Option<Release> {
        let total: usize = all.iter().map(|p| p.len()).sum();
        if w.draining || !w.backlog.is_empty() {
            for p in all {
                w.backlog.extend_from_slice(p);
            }
            w.backlog_rel.add(rel);
            self.writer_cv.notify_one();
            return None;
        }
        match send_now(w.stream.fd(), all, total) {
            Ok(n) if n == total => Some(rel),
            Ok(mut n) => {
                // The socket is full: the rest waits for the writer thread.
                let mut backlog = Vec::with_capacity(total - n);
                for p in all {
                    if n >= p.len() {
                        n -= p.len();
                    } else {
                        backlog.extend_from_slice(&p[n..]);
                        n = 0;
                    }
                }
                w.backlog = backlog;
                w.backlog_rel = rel;
                self.writer_cv.notify_one();
                None
            }
            Err(e) => self.fail(w, e, rel),
        }
    }

    /// The client cannot be sent to: mark the connection broken.
    fn fail(&self, w: &mut Writer, e: io::Error, rel: Release) -> Option<Release> {
        tracing::debug!("nbd: connection {}: reply not delivered: {e}", self.id);
        w.broken = true;
        w.stream.shutdown(Shutdown::Both);
        w.pending = Vec::new();
        w.sealed = Vec::new();
        Some(rel)
    }

    /// Batch a reply (reader thread); sent when the reader is about to block.
    pub(super) fn queue(&self, bytes: &[u8], rel: Release) {
        let mut w = self.writer.lock();
        if w.broken {
            drop(w);
            self.release(rel);
            return;
        }
        w.pending.extend_from_slice(bytes);
        w.pending_rel.add(rel);
        let full = w.pending.len() >= REPLY_BATCH_BYTES;
        drop(w);
        if full {
            self.send(&[], Release::default());
        }
    }

    pub(super) fn reply(&self, bytes: &[u8], rel: Release, queue: bool) {
        if queue {
            self.queue(bytes, rel)
        } else {
            self.send(&[bytes], rel)
        }
    }

    pub(super) fn flush_pending(&self) {
        let has = {
            let w = self.writer.lock();
            !w.pending.is_empty()
                || w.pending_rel.requests > 0
                || self.tls.as_ref().is_some_and(|t| t.wants_write())
        };
        if has {
            self.send(&[], Release::default());
        }
    }

    /// The writer thread: deliver the backlog, waiting for the client to read,
    /// and give up on the connection when it does not for `reply_timeout`.
    pub(super) fn writer_loop(&self) {
        let mut w = self.writer.lock();
        loop {
            if w.backlog.is_empty() {
                if w.closing {
                    return;
                }
                self.writer_cv.wait(&mut w);
                continue;
            }
            let buf = std::mem::take(&mut w.backlog);
            let rel = std::mem::take(&mut w.backlog_rel);
            let fd = w.stream.fd();
            w.draining = true;
            let r = parking_lot::MutexGuard::unlocked(&mut w, || {
                send_patiently(fd, &buf, self.reply_timeout)
            });
            drop(buf);
            w.draining = false;
            let mut rel = rel;
            if let Err(e) = r {
                tracing::debug!("nbd: connection {}: dropping it: {e}", self.id);
                w.broken = true;
                w.stream.shutdown(Shutdown::Both);
                w.backlog = Vec::new();
                w.pending = Vec::new();
                rel.add(std::mem::take(&mut w.backlog_rel));
                rel.add(std::mem::take(&mut w.pending_rel));
            }
            parking_lot::MutexGuard::unlocked(&mut w, || self.release(rel));
        }
    }

    /// Send an error reply in the form the command requires.
    pub(super) fn error_reply(
        &self,
        r: &Request,
        errno: u32,
        msg: &str,
        rel: Release,
        queue: bool,
    ) {
        if self.neg.structured && matches!(r.cmd, proto::CMD_READ | proto::CMD_BLOCK_STATUS) {
            self.reply(&proto::structured_error(r.cookie, errno, msg), rel, queue)
        } else {
            self.reply(&proto::simple_reply(errno, r.cookie), rel, queue)
        }
    }
}
