//! A connection's request loop (its reader thread, after the handshake):
//! request headers and write payloads are read in order, checked on the header
//! alone (`proto::check_request`), then run on the reader (writes, trims and
//! zeroes without FUA only append to memory, pipelined WRITEs already
//! received whole with one `Volume::write_many`; a READ, FLUSH or FUA write
//! that is all the client has in flight) or handed on: READs to the connection's
//! read ring (submitted here as they arrive; its completion thread verifies
//! and answers them in completion order), everything else that waits for the
//! media (and READs too large for the ring, or all READs without one) to the
//! shared pool.
//!
//! Owns: the request currently being received and its timeouts.
//!
//! Invariants: a request holds budget from its header to its reply
//! (`reply.rs`); a started request must be complete within `request_timeout`;
//! an idle connection (nothing in flight) is closed after `idle_timeout` if set;
//! a bad request magic ends the connection after what was accepted is
//! answered; a reply is sent only after its engine call returned; the reader
//! submits the reads it queued on the ring before anything that may wait (a
//! queued read holds a share of the volume's reuse lock and budget, and would
//! never complete).

use super::pool::Pool;
use super::proto::{self, ProtoError, Request};
use super::reply::{Conn, Release};
use super::server::Server;
use super::transport::{is_timeout, RecvBuf};
use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use crate::volume::{ReadBuf, ReadRing, STREAM_MIN_BLOCKS};
use crate::Error;
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Most extents in one BLOCK_STATUS reply.
const MAX_EXTENTS: usize = 1024;
/// Pipelined READs already in the receive buffer that one worker serves together
/// (one media submission, one reply write). Small, because a batch's replies
/// leave when its slowest read completes: 4 workers x 8 keep a QD32 client's
/// reads in flight at the device (docs/nbd.md, the read-queue A/B).
const MAX_READ_BATCH: usize = 8;
/// Workers that serve one connection's READs at once. Each takes the READs
/// queued (up to `MAX_READ_BATCH`) per media submission, so a busy
/// connection's reads reach the device in batches and a worker is woken per
/// batch, not per request; several let batches' media reads overlap.
const READ_WORKERS: usize = 4;
/// Stack of a connection's read completion thread.
const COMPLETION_STACK: usize = 256 << 10;
/// Pipelined WRITEs (no FUA) already whole in the receive buffer that the
/// reader appends with one `Volume::write_many` call (issue 22: fewer engine
/// lock holds and pacing looks per write).
const MAX_WRITE_BATCH: usize = 32;

/// A READ on its way through the read ring (or a batch): the request and
/// when it started (metrics).
#[derive(Clone, Copy)]
pub(super) struct ReadCtx {
    req: Request,
    t0: Option<crate::metrics::Started>,
}

/// A READ reply's header: a successful one's (16 or 28 bytes) without a
/// heap allocation of its own; an error reply's message is owned.
enum Head {
    Fixed([u8; 28], usize),
    Owned(Vec<u8>),
}

impl Head {
    fn fixed(b: &[u8]) -> Head {
        let mut h = [0u8; 28];
        h[..b.len()].copy_from_slice(b);
        Head::Fixed(h, b.len())
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Head::Fixed(h, n) => &h[..*n],
            Head::Owned(v) => v,
        }
    }
}

impl Conn {
    /// Serve checked READs together: one batched engine read, then every reply in
    /// one write, which gives their budget back once delivered.
    pub(super) fn execute_reads(&self, batch: &[Request]) {
        for r in batch {
            self.record(r);
        }
        let ranges: Vec<(u64, u32)> = batch.iter().map(|r| (r.offset, r.length)).collect();
        let t0 = crate::metrics::start();
        let results = self.vol.read_batch(&ranges);
        let done: Vec<(ReadCtx, crate::Result<ReadBuf>)> = batch
            .iter()
            .map(|&req| ReadCtx { req, t0 })
            .zip(results)
            .collect();
        self.send_reads(&done);
    }

    /// Reply to finished READs in one send, which gives their budget back once
    /// the replies are on the wire.
    fn send_reads(&self, done: &[(ReadCtx, crate::Result<ReadBuf>)]) {
        for (c, res) in done {
            if c.t0.is_some() {
                let (k, r) = (crate::metrics::Req::Read, &c.req);
                crate::metrics::done(k, r.offset, r.length as u64, res.is_ok(), c.t0);
            }
        }
        // reply headers first (owned: on the stack but for error messages),
        // then the parts list borrowing them
        let mut heads: Vec<Head> = Vec::with_capacity(done.len());
        for (c, res) in done {
            let r = &c.req;
            heads.push(match res {
                Ok(_) if !self.neg.structured => Head::fixed(&proto::simple_reply(0, r.cookie)),
                Ok(_) if r.length == 0 => Head::fixed(&proto::structured_header(
                    proto::REPLY_FLAG_DONE,
                    proto::REPLY_TYPE_NONE,
                    r.cookie,
                    0,
                )),
                Ok(_) => Head::fixed(&proto::offset_data_header(r.cookie, r.offset, r.length)),
                Err(e) => {
                    tracing::debug!("nbd: read failed: {e}");
                    let errno = wire_errno(e);
                    if self.neg.structured {
                        Head::Owned(proto::structured_error(r.cookie, errno, &e.to_string()))
                    } else {
                        Head::fixed(&proto::simple_reply(errno, r.cookie))
                    }
                }
            });
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * done.len());
        for (h, (_, res)) in heads.iter().zip(done) {
            parts.push(h.bytes());
            if let Ok(data) = res {
                if !data.is_empty() {
                    parts.push(data);
                }
            }
        }
        let rel = Release {
            requests: done.len(),
            bytes: done.iter().map(|(c, _)| c.req.length as u64).sum(),
        };
        self.send(&parts, rel);
    }

    /// The connection's read ring, set up at its first READ together with the
    /// completion thread that answers its reads. None: READs go to the pool in
    /// batches (`--no-read-ring`, media without a ring, or no thread).
    fn read_ring(self: &Arc<Self>, enabled: bool) -> Option<&Arc<ReadRing<ReadCtx>>> {
        self.ring
            .get_or_init(|| {
                if !enabled {
                    return None;
                }
                let ring = Arc::new(self.vol.read_ring::<ReadCtx>()?);
                let (c, r) = (self.clone(), ring.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("nbd-read-{}", self.id))
                    .stack_size(COMPLETION_STACK)
                    .spawn(move || {
                        // A broken invariant here would leave the connection's
                        // reads unanswered forever (and the kernel may still
                        // own their buffers): stop the process instead.
                        let run = std::panic::AssertUnwindSafe(|| c.complete_reads(&r));
                        if std::panic::catch_unwind(run).is_err() {
                            tracing::error!("nbd: read completion thread panicked; aborting");
                            std::process::abort();
                        }
                    });
                match spawned {
                    Ok(h) => {
                        *self.completer.lock() = Some(h);
                        Some(ring)
                    }
                    Err(e) => {
                        tracing::debug!("nbd: connection {}: no read thread ({e})", self.id);
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The completion thread: answer ring READs as the device finishes them,
    /// the ones reaped together in one send.
    fn complete_reads(&self, ring: &ReadRing<ReadCtx>) {
        let mut done = Vec::new();
        loop {
            let more = ring.reap(&mut done);
            if !done.is_empty() {
                self.send_reads(&done);
                // the replies are on the wire or copied to the backlog:
                // their buffers serve the next reads
                ring.recycle(&mut done);
            }
            if !more {
                return;
            }
        }
    }

    /// Hand the READs started on the ring to the device. The reader calls it
    /// before anything that may wait (the socket, budget, another request):
    /// a read queued and not submitted would never complete.
    pub(super) fn submit_reads(&self) {
        if let Some(Some(r)) = self.ring.get() {
            r.submit();
        }
    }

    /// End the completion thread (the connection ends, nothing in flight).
    pub(super) fn stop_reads(&self) {
        if let Some(Some(r)) = self.ring.get() {
            r.stop();
        }
        if let Some(h) = self.completer.lock().take() {
            let _ = h.join();
        }
    }

    /// Queue checked READs (reader thread) for this connection's read
    /// workers, and start one more unless `READ_WORKERS` already serve it
    /// (they take these after their current batch).
    fn queue_reads(self: &Arc<Self>, pool: &Arc<Pool>, batch: Vec<Request>) {
        let mut rq = self.reads.lock();
        rq.q.extend(batch);
        if rq.workers >= READ_WORKERS {
            return;
        }
        rq.workers += 1;
        drop(rq);
        let (c, p) = (self.clone(), pool.clone());
        pool.submit(Box::new(move || c.serve_reads(p)));
    }

    /// A read worker: serve the queued READs in batches until none is left,
    /// giving the worker to other jobs between batches when they wait.
    fn serve_reads(self: Arc<Self>, pool: Arc<Pool>) {
        loop {
            let batch: Vec<Request> = {
                let mut rq = self.reads.lock();
                if rq.q.is_empty() {
                    rq.workers -= 1;
                    return;
                }
                let n = rq.q.len().min(MAX_READ_BATCH);
                rq.q.drain(..n).collect()
            };
            self.execute_reads(&batch);
            if pool.busy() {
                // fairness: continue behind the jobs waiting
                let p = pool.clone();
                pool.submit(Box::new(move || self.serve_reads(p)));
                return;
            }
        }
    }

    /// Capture the request for `serve --record`.
    fn record(&self, r: &Request) {
        let (off, len) = (r.offset, r.length as u64);
        if let Some(rec) = &self.recorder {
            use crate::trace::Op;
            let op = match r.cmd {
                proto::CMD_READ => Some(Op::Read),
                proto::CMD_WRITE => Some(Op::Write),
                proto::CMD_TRIM => Some(Op::Trim),
                proto::CMD_WRITE_ZEROES => Some(Op::Zero),
                proto::CMD_FLUSH => Some(Op::Flush),
                _ => None,
            };
            if let Some(op) = op {
                if let Err(e) = rec.record(op, off, if op == Op::Flush { 0 } else { len }) {
                    tracing::warn!("--record: {e}");
                }
            }
        }
    }

    /// Run checked WRITEs without FUA (the reader thread) with one
    /// `Volume::write_many` call, then reply to each in order: those appended
    /// succeed; the first that was not, and every one after it (which may
    /// have been appended in part, as a failed write may), fail with its
    /// error. Each request's budget goes back with its reply.
    pub(super) fn execute_writes(&self, batch: Vec<(Request, Payload)>) {
        for (r, _) in &batch {
            self.record(r);
        }
        let t0 = crate::metrics::start();
        let writes: Vec<(u64, &[u8])> = batch.iter().map(|(r, p)| (r.offset, &p[..])).collect();
        let (done, res) = self.vol.write_many(&writes);
        drop(writes);
        for (i, (r, payload)) in batch.into_iter().enumerate() {
            let ok = i < done;
            let len = r.length as u64;
            drop(payload);
            if t0.is_some() {
                crate::metrics::done(crate::metrics::Req::Write, r.offset, len, ok, t0);
            }
            let rel = Release::one(len);
            if ok {
                self.reply(&proto::simple_reply(0, r.cookie), rel, true);
            } else {
                let (errno, msg) = match &res {
                    Err(e) if i == done => (wire_errno(e), e.to_string()),
                    Err(e) => (
                        wire_errno(e),
                        format!("an earlier write of its batch failed: {e}"),
                    ),
                    // (write_many appends every write when it returns Ok)
                    Ok(()) => (proto::EIO, "not appended".to_string()),
                };
                tracing::debug!("nbd: command {} failed: {msg}", r.cmd);
                self.error_reply(&r, errno, &msg, rel, true);
            }
        }
    }

    /// Run a checked FLUSH (`Volume::flush_then`) and reply from whichever
    /// thread answers it: this one when it does its own media flush (alone,
    /// QD1), else the thread that ends the media flush covering it, so the
    /// caller (the reader) goes back to its socket instead of sleeping, and
    /// no thread is woken only to send the reply. The reply is sent only
    /// once the volume says every write acknowledged before it is durable.
    pub(super) fn execute_flush(self: &Arc<Self>, r: Request, rel: Release) {
        self.record(&r);
        let t0 = crate::metrics::start();
        let c = self.clone();
        let answer: Box<dyn FnOnce(crate::Result<()>) + Send> = Box::new(move |res| {
            if t0.is_some() {
                let ok = res.is_ok();
                crate::metrics::done(crate::metrics::Req::Flush, r.offset, 0, ok, t0);
            }
            match res {
                Ok(()) => c.reply(&proto::simple_reply(0, r.cookie), rel, false),
                Err(e) => {
                    tracing::debug!("nbd: command {} failed: {e}", r.cmd);
                    c.error_reply(&r, wire_errno(&e), &e.to_string(), rel, false);
                }
            }
        });
        // MUTANT: nbd-flush-skipped s|self.vol.flush_then(answer)|answer(Ok(()))|
        self.vol.flush_then(answer);
    }

    /// Run one checked request and reply. `queue` batches the reply (reader
    /// thread); `rel` is the request's budget, given back with the reply.
    pub(super) fn execute(&self, r: Request, payload: Payload, queue: bool, rel: Release) {
        let fua = r.flags & proto::CMD_FLAG_FUA != 0;
        let (off, len) = (r.offset, r.length as u64);
        if r.cmd == proto::CMD_READ {
            self.execute_reads(std::slice::from_ref(&r));
            return;
        }
        self.record(&r);
        let t0 = crate::metrics::start();
        let res = match r.cmd {
            proto::CMD_WRITE => self.vol.write(off, &payload, fua),
            // (FLUSHes are `execute_flush`'s)
            proto::CMD_FLUSH => self.vol.flush(),
            proto::CMD_TRIM => self.vol.trim(off, len, fua),
            proto::CMD_WRITE_ZEROES => {
                let may_trim = r.flags & proto::CMD_FLAG_NO_HOLE == 0;
                self.vol.write_zeroes(off, len, fua, may_trim)
            }
            // No cache of our own to warm: the request is valid and done.
            proto::CMD_CACHE => Ok(()),
            proto::CMD_BLOCK_STATUS => match self.vol.block_status(off, len) {
                Ok(ext) if !ext.is_empty() => {
                    let max = if r.flags & proto::CMD_FLAG_REQ_ONE != 0 {
                        1
                    } else {
                        MAX_EXTENTS
                    };
                    let list: Vec<(u32, u32)> = ext
                        .iter()
                        .take(max)
                        .map(|e| {
                            let flags = if e.hole { proto::STATE_HOLE } else { 0 }
                                | if e.zero { proto::STATE_ZERO } else { 0 };
                            (e.length.min(u32::MAX as u64) as u32, flags)
                        })
                        .filter(|e| e.0 > 0)
                        .collect();
                    if list.is_empty() {
                        Err(Error::InvalidArgument("empty block status".into()))
                    } else {
                        self.reply(&proto::block_status_reply(r.cookie, &list), rel, queue);
                        return;
                    }
                }
                Ok(_) => Err(Error::InvalidArgument("empty block status".into())),
                Err(e) => Err(e),
            },
            _ => Err(Error::InvalidArgument("unknown command".into())),
        };
        drop(payload);
        if t0.is_some() {
            use crate::metrics::Req;
            let kind = match r.cmd {
                proto::CMD_WRITE => Some(Req::Write),
                proto::CMD_FLUSH => Some(Req::Flush),
                proto::CMD_TRIM => Some(Req::Trim),
                proto::CMD_WRITE_ZEROES => Some(Req::Zero),
                _ => None,
            };
            if let Some(k) = kind {
                crate::metrics::done(k, off, len, res.is_ok(), t0);
            }
        }
        match res {
            Ok(()) => self.reply(&proto::simple_reply(0, r.cookie), rel, queue),
            Err(e) => {
                tracing::debug!("nbd: command {} failed: {e}", r.cmd);
                self.error_reply(&r, wire_errno(&e), &e.to_string(), rel, queue);
            }
        }
    }
}

/// Map an engine error to an errno the NBD spec defines.
fn wire_errno(e: &Error) -> u32 {
    if matches!(e, Error::Closed) {
        return proto::ESHUTDOWN;
    }
    match e.errno() as u32 {
        x @ (proto::EPERM
        | proto::EIO
        | proto::ENOMEM
        | proto::EINVAL
        | proto::ENOSPC
        | proto::EOVERFLOW
        | proto::ENOTSUP
        | proto::ESHUTDOWN) => x,
        _ => proto::EIO,
    }
}

/// Outcome of waiting for the next request header.
enum Next {
    Header([u8; proto::REQUEST_BYTES]),
    /// EOF, idle timeout, or shutdown: end the connection quietly.
    Done(&'static str),
}

impl Server {
    /// Wait for the next request header. While nothing is in flight and no
    /// byte of a request arrived, the connection is idle (closed after
    /// `idle_timeout`, if set); once a header started, it must complete
    /// within `request_timeout`.
    fn next_header(&self, conn: &Conn, rd: &mut RecvBuf) -> io::Result<Next> {
        let mut h = [0u8; proto::REQUEST_BYTES];
        if rd.buffer().len() >= proto::REQUEST_BYTES {
            h.copy_from_slice(&rd.buffer()[..proto::REQUEST_BYTES]);
            rd.consume(proto::REQUEST_BYTES);
            return Ok(Next::Header(h));
        }
        let mut got = 0;
        let idle_since = Instant::now();
        let mut started: Option<Instant> = None;
        while got < h.len() {
            match rd.read(&mut h[got..]) {
                Ok(0) if got == 0 => return Ok(Next::Done("client disconnected")),
                Ok(0) => return Ok(Next::Done("client disconnected mid-request")),
                Ok(n) => {
                    got += n;
                    started.get_or_insert_with(Instant::now);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
            if got == h.len() {
                break;
            }
            if rd.partial_record {
                started.get_or_insert_with(Instant::now);
            }
            if let Some(t) = started {
                if t.elapsed() >= self.cfg.request_timeout {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "request header not completed in time",
                    ));
                }
            } else if self.stopping.load(Ordering::Acquire) {
                return Ok(Next::Done("server stopping"));
            } else if let Some(idle) = self.cfg.idle_timeout {
                if idle_since.elapsed() >= idle && conn.in_flight() == 0 {
                    return Ok(Next::Done("idle timeout"));
                }
            }
        }
        Ok(Next::Header(h))
    }

    /// Receive a WRITE's payload within `request_timeout`. None: the client
    /// went away (a half-sent write is never acknowledged).
    fn read_payload(&self, rd: &mut RecvBuf, len: usize) -> io::Result<Option<Payload>> {
        let start = Instant::now();
        let mut payload = Payload::new(len);
        let mut got = 0;
        while got < len {
            match rd.read(&mut payload[got..]) {
                Ok(0) => return Ok(None),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
            if got < len && start.elapsed() >= self.cfg.request_timeout {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "write payload not completed in time",
                ));
            }
        }
        Ok(Some(payload))
    }

    /// Discard a rejected WRITE's payload without holding it (bounded memory).
    fn skip_payload(&self, rd: &mut RecvBuf, mut n: u64) -> io::Result<bool> {
        let start = Instant::now();
        while n > 0 {
            let buf = match rd.fill_buf() {
                Ok([]) => return Ok(false),
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || is_timeout(&e) => {
                    if start.elapsed() >= self.cfg.request_timeout {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "write payload not completed in time",
                        ));
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let k = buf.len().min(n.min(usize::MAX as u64) as usize);
            rd.consume(k);
            n -= k as u64;
        }
        Ok(true)
    }

    /// Read requests until DISC, EOF, a broken frame, a timeout or shutdown.
    pub(super) fn transmission(
        &self,
        conn: &Arc<Conn>,
        rd: &mut RecvBuf,
    ) -> io::Result<&'static str> {
        loop {
            if rd.would_wait(proto::REQUEST_BYTES) {
                // About to block on the socket: submit started reads and
                // deliver batched replies first.
                conn.submit_reads();
                conn.flush_pending();
            }
            let h = match self.next_header(conn, rd)? {
                Next::Header(h) => h,
                Next::Done(why) => return Ok(why),
            };
            let r = match Request::decode(&h) {
                Ok(r) => r,
                Err(e @ ProtoError::BadRequestMagic(_)) => {
                    // Framing is lost: nothing after this can be trusted.
                    tracing::debug!("nbd: connection {}: {e}; disconnecting", conn.id);
                    return Ok("bad request magic");
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            };
            if r.cmd != proto::CMD_READ {
                conn.submit_reads();
            }
            if r.cmd == proto::CMD_DISC {
                // The spec: no reply; finish what is in flight, then close
                // (whatever the offset, length or flags say).
                return Ok("client sent NBD_CMD_DISC");
            }
            if let Err(errno) = proto::check_request(&r, &conn.neg) {
                tracing::debug!(
                    "nbd: connection {}: rejected command {} flags {:#x} offset {} length {}: errno {errno}",
                    conn.id,
                    r.cmd,
                    r.flags,
                    r.offset,
                    r.length
                );
                let skip = r.payload_len() as u64;
                if skip > 0 && !self.skip_payload(rd, skip)? {
                    return Ok("client disconnected mid-request");
                }
                conn.acquire_reader(0);
                conn.error_reply(&r, errno, "request rejected", Release::one(0), true);
                continue;
            }
            let bytes = match r.cmd {
                proto::CMD_READ | proto::CMD_WRITE => r.length as u64,
                _ => 0,
            };
            conn.acquire_reader(bytes);
            if r.cmd == proto::CMD_READ {
                let ring = conn
                    .read_ring(self.cfg.read_ring)
                    .filter(|g| g.fits(r.offset, r.length));
                if let Some(ring) = ring {
                    // All the client asked for: serve it here (the ring's
                    // completion thread would cost a wakeup and a switch).
                    if self.cfg.inline_writes && rd.would_wait(1) && conn.in_flight() == 1 {
                        conn.flush_pending();
                        conn.execute_reads(std::slice::from_ref(&r));
                        continue;
                    }
                    // To the device now; its reply leaves when it completes.
                    conn.record(&r);
                    let ctx = ReadCtx {
                        req: r,
                        t0: crate::metrics::start(),
                    };
                    if let Some(done) = ring.start(ctx, r.offset, r.length) {
                        conn.send_reads(std::slice::from_ref(&done));
                    }
                    // To the device at once, not with the requests received
                    // behind it: each of those costs its map lookup and its
                    // share of the submission first (docs/nbd.md, "Where a
                    // request's time goes": 1 READ per submission measured
                    // faster than 16, at the same CPU per READ).
                    ring.submit();
                    continue;
                }
                // Take the READs pipelined behind this one too (already received,
                // valid, within budget): one worker serves them together.
                let mut batch = vec![r];
                while batch.len() < MAX_READ_BATCH && rd.buffer().len() >= proto::REQUEST_BYTES {
                    let mut h = [0u8; proto::REQUEST_BYTES];
                    h.copy_from_slice(&rd.buffer()[..proto::REQUEST_BYTES]);
                    let Ok(n) = Request::decode(&h) else { break };
                    if n.cmd != proto::CMD_READ
                        || proto::check_request(&n, &conn.neg).is_err()
                        || !conn.try_acquire(n.length as u64)
                    {
                        break;
                    }
                    rd.consume(proto::REQUEST_BYTES);
                    batch.push(n);
                }
                // All the client asked for, and nothing else queued: serve it
                // here (a hand-off to a worker costs a wakeup and a switch).
                let alone = self.cfg.inline_writes
                    && rd.would_wait(1)
                    && conn.in_flight() == batch.len()
                    && conn.reads.lock().workers == 0;
                if alone {
                    conn.flush_pending();
                    conn.execute_reads(&batch);
                } else {
                    conn.queue_reads(&self.pool, batch);
                }
                continue;
            }
            // this request may wait (payload, media, pool): reads go first
            conn.submit_reads();
            let mut payload = Payload::Small(Vec::new());
            if r.cmd == proto::CMD_WRITE {
                if rd.would_wait(r.length as usize) {
                    conn.flush_pending();
                }
                match self.read_payload(rd, r.length as usize) {
                    Ok(Some(p)) => payload = p,
                    Ok(None) => {
                        conn.release(Release::one(bytes));
                        return Ok("client disconnected mid-write");
                    }
                    Err(e) => {
                        conn.release(Release::one(bytes));
                        return Err(e);
                    }
                }
            }
            let rel = Release::one(bytes);
            let fua = r.flags & proto::CMD_FLAG_FUA != 0;
            let mutating = matches!(
                r.cmd,
                proto::CMD_WRITE | proto::CMD_TRIM | proto::CMD_WRITE_ZEROES | proto::CMD_CACHE
            );
            // A request that waits for the media (FLUSH, FUA) runs here too when it
            // is all the client has asked for: nothing else to overlap it with, and
            // a hand-off to the pool costs a wakeup and a context switch.
            let alone = rd.would_wait(1) && conn.in_flight() == 1;
            let inline = self.cfg.inline_writes
                && ((mutating && !fua) || (alone && (mutating || r.cmd == proto::CMD_FLUSH)));
            if inline && r.cmd == proto::CMD_WRITE && !fua {
                // Take the WRITEs pipelined behind this one too (already
                // received whole, valid, no FUA, within budget): one engine call.
                let mut batch = vec![(r, payload)];
                while batch.len() < MAX_WRITE_BATCH && rd.buffer().len() >= proto::REQUEST_BYTES {
                    let mut h = [0u8; proto::REQUEST_BYTES];
                    h.copy_from_slice(&rd.buffer()[..proto::REQUEST_BYTES]);
                    let Ok(n) = Request::decode(&h) else { break };
                    // a FUA write waits for the media: it runs on its own
                    // MUTANT: write-batch-takes-fua s|n.flags & proto::CMD_FLAG_FUA != 0|false|
                    let fua_next = n.flags & proto::CMD_FLAG_FUA != 0;
                    if n.cmd != proto::CMD_WRITE
                        || fua_next
                        || proto::check_request(&n, &conn.neg).is_err()
                        || rd.buffer().len() < proto::REQUEST_BYTES + n.length as usize
                        || !conn.try_acquire(n.length as u64)
                    {
                        break;
                    }
                    rd.consume(proto::REQUEST_BYTES);
                    // whole in the buffer: this does not wait or fail
                    match self.read_payload(rd, n.length as usize) {
                        Ok(Some(p)) => batch.push((n, p)),
                        Ok(None) | Err(_) => {
                            conn.release(Release::one(n.length as u64));
                            conn.execute_writes(batch);
                            return Ok("client disconnected mid-write");
                        }
                    }
                }
                if batch.len() > 1 {
                    conn.execute_writes(batch);
                } else {
                    let (r, payload) = batch.pop().expect("one write");
                    conn.execute(r, payload, true, rel);
                }
                continue;
            }
            if inline {
                if fua || r.cmd == proto::CMD_FLUSH {
                    // about to wait for the media: deliver earlier replies first
                    conn.flush_pending();
                }
                if r.cmd == proto::CMD_FLUSH {
                    conn.execute_flush(r, rel);
                } else {
                    conn.execute(r, payload, true, rel);
                }
            } else if r.cmd == proto::CMD_FLUSH {
                let c = conn.clone();
                self.pool.submit(Box::new(move || c.execute_flush(r, rel)));
            } else {
                let c = conn.clone();
                self.pool
                    .submit(Box::new(move || c.execute(r, payload, false, rel)));
            }
        }
    }
}

/// A WRITE's payload as received. One the volume streams to its places
/// (`STREAM_MIN_BLOCKS` blocks or more) is read into a 4 KiB-aligned buffer,
/// so the volume writes it from there with O_DIRECT instead of copying it
/// into an aligned pool buffer first (`Shared::place_claims`); a smaller one
/// is copied into the open chunk anyway and stays a `Vec`.
pub(super) enum Payload {
    Small(Vec<u8>),
    Aligned(AlignedBuf),
}

impl Payload {
    /// A zeroed payload of `len` bytes, aligned when the volume streams it.
    pub(super) fn new(len: usize) -> Payload {
        // MUTANT: nbd-payload-unaligned s|len >= STREAM_MIN_BLOCKS as usize * BLOCK_BYTES|false|
        if len >= STREAM_MIN_BLOCKS as usize * BLOCK_BYTES {
            Payload::Aligned(AlignedBuf::new(len))
        } else {
            Payload::Small(vec![0u8; len])
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Small(v) => v,
            Payload::Aligned(a) => a,
        }
    }
}

impl std::ops::DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Payload::Small(v) => v,
            Payload::Aligned(a) => a,
        }
    }
}
