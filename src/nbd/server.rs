//! NBD server: listening sockets, the per-connection handshake, request dispatch,
//! reply serialization and graceful shutdown. Holds no storage policy: every
//! request becomes one `Volume` call.
//!
//! Threads and ownership:
//! - one accept thread (`Server::run`), which also drives shutdown;
//! - one reader thread per connection: handshake, then reads requests in order.
//!   Writes, trims and zeroes without FUA only append to the engine's open chunk,
//!   so the reader runs them itself and queues their replies (batched until it
//!   would block on the socket); reads, flushes, FUA writes and block status
//!   (which wait for the media) go to a shared worker pool;
//! - the pool's workers, which run a request and send its reply at once.
//!
//! Invariants: replies of one connection never interleave (one writer lock per
//! connection); a reply is sent only after the engine call returned, so FLUSH
//! covers every write whose reply the client has seen, on any connection; memory
//! per connection is bounded by `MAX_INFLIGHT_REQUESTS` / `MAX_INFLIGHT_BYTES`
//! plus the socket buffers, and no request can make us allocate more than
//! `proto::MAX_PAYLOAD`; a connection ends only after all its accepted requests
//! were answered (or the client went away).

use super::proto::{self, Negotiated, ProtoError, Request};
use crate::{Error, Volume};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Requests of one connection accepted but not yet answered.
pub const MAX_INFLIGHT_REQUESTS: usize = 128;
/// Payload bytes (read buffers and write data) of one connection in flight. A
/// single request may exceed it when it is alone.
pub const MAX_INFLIGHT_BYTES: u64 = 64 << 20;
/// A client must finish the handshake within this long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A reply that cannot be sent for this long (the client stopped reading) ends
/// the connection, so such a client cannot hold pool workers indefinitely.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Most options one handshake may send before we hang up.
const MAX_OPTIONS: u32 = 4096;
/// Queued (batched) replies are sent once they reach this size.
const REPLY_BATCH_BYTES: usize = 64 << 10;
/// Most extents in one BLOCK_STATUS reply.
const MAX_EXTENTS: usize = 1024;
/// Pipelined READs already in the receive buffer that one worker serves together
/// (one media submission, one reply write).
const MAX_READ_BATCH: usize = 64;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub export_name: String,
    pub description: String,
    pub read_only: bool,
    pub max_connections: usize,
    pub workers: usize,
    /// Run non-FUA writes / trims / zeroes on the connection's reader thread.
    pub inline_writes: bool,
    /// Capture every request in sluice's trace format (`serve --record`).
    pub recorder: Option<Arc<crate::trace::Recorder>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: String::new(),
            description: "sluice volume".into(),
            read_only: false,
            max_connections: 128,
            workers: 16,
            inline_writes: true,
            recorder: None,
        }
    }
}

/// A bound listening socket.
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
        }
    }
}

/// One client connection's socket.
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
    fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(nb),
            Stream::Tcp(s) => s.set_nonblocking(nb),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(b),
            Stream::Tcp(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Write every byte of `parts` (writev, resuming after short writes).
fn write_all_parts(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    while idx < parts.len() {
        if off == parts[idx].len() {
            idx += 1;
            off = 0;
            continue;
        }
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() - idx);
        slices.push(IoSlice::new(&parts[idx][off..]));
        for p in &parts[idx + 1..] {
            slices.push(IoSlice::new(p));
        }
        let mut n = match w.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while n > 0 && idx < parts.len() {
            let left = parts[idx].len() - off;
            if n >= left {
                n -= left;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
    Ok(())
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads running boxed jobs from one queue.
struct Pool {
    /// Queued jobs, and whether the pool is stopping.
    q: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    fn new(n: usize) -> io::Result<Arc<Pool>> {
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

    fn submit(&self, job: Job) {
        self.q.lock().0.push_back(job);
        self.cv.notify_one();
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
    fn stop(&self) {
        self.q.lock().1 = true;
        self.cv.notify_all();
        for h in self.threads.lock().drain(..) {
            let _ = h.join();
        }
    }
}

/// Reply side of one connection.
struct Writer {
    stream: Stream,
    /// Replies queued by the reader thread, sent in one batch.
    pending: Vec<u8>,
    /// The client stopped reading (or the socket broke): replies are dropped.
    broken: bool,
}

impl Writer {
    fn send(&mut self, parts: &[&[u8]]) {
        if self.broken {
            self.pending.clear();
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
        if !pending.is_empty() {
            all.push(&pending);
        }
        all.extend_from_slice(parts);
        if let Err(e) = write_all_parts(&mut self.stream, &all) {
            tracing::debug!("nbd: reply not delivered, client gone: {e}");
            self.broken = true;
            self.stream.shutdown(Shutdown::Both);
        }
        self.pending = pending;
        self.pending.clear();
    }

    fn queue(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= REPLY_BATCH_BYTES {
            self.send(&[]);
        }
    }

    fn flush_pending(&mut self) {
        if !self.pending.is_empty() {
            self.send(&[]);
        }
    }
}

/// Requests and payload bytes in flight on one connection.
#[derive(Default)]
struct Budget {
    requests: usize,
    bytes: u64,
}

struct Conn {
    vol: Arc<Volume>,
    recorder: Option<Arc<crate::trace::Recorder>>,
    neg: Negotiated,
    writer: Mutex<Writer>,
    budget: Mutex<Budget>,
    budget_cv: Condvar,
}

impl Conn {
    fn acquire(&self, bytes: u64) {
        let mut b = self.budget.lock();
        while b.requests > 0
            && (b.requests >= MAX_INFLIGHT_REQUESTS || b.bytes + bytes > MAX_INFLIGHT_BYTES)
        {
            self.budget_cv.wait(&mut b);
        }
        b.requests += 1;
        b.bytes += bytes;
    }

    /// As `acquire`, but gives up instead of waiting (used while the caller
    /// itself holds budget it has not handed on yet, so waiting could deadlock).
    fn try_acquire(&self, bytes: u64) -> bool {
        let mut b = self.budget.lock();
        if b.requests >= MAX_INFLIGHT_REQUESTS || b.bytes + bytes > MAX_INFLIGHT_BYTES {
            return false;
        }
        b.requests += 1;
        b.bytes += bytes;
        true
    }

    fn release(&self, bytes: u64) {
        let mut b = self.budget.lock();
        b.requests -= 1;
        b.bytes -= bytes;
        self.budget_cv.notify_all();
    }

    fn drain(&self) {
        let mut b = self.budget.lock();
        while b.requests > 0 {
            self.budget_cv.wait(&mut b);
        }
    }

    /// Send an error reply in the form the command requires.
    fn error_reply(&self, r: &Request, errno: u32, msg: &str, queue: bool) {
        let mut w = self.writer.lock();
        if self.neg.structured && matches!(r.cmd, proto::CMD_READ | proto::CMD_BLOCK_STATUS) {
            let b = proto::structured_error(r.cookie, errno, msg);
            if queue {
                w.queue(&b)
            } else {
                w.send(&[&b])
            }
        } else {
            let b = proto::simple_reply(errno, r.cookie);
            if queue {
                w.queue(&b)
            } else {
                w.send(&[&b])
            }
        }
    }

    /// Serve checked READs together: one batched engine read, then every reply in
    /// one write. (The caller releases their budget.)
    fn execute_reads(&self, batch: &[Request]) {
        for r in batch {
            self.record(r);
        }
        let ranges: Vec<(u64, u32)> = batch.iter().map(|r| (r.offset, r.length)).collect();
        let t0 = crate::metrics::start();
        let results = self.vol.read_batch(&ranges);
        if t0.is_some() {
            for (r, res) in batch.iter().zip(&results) {
                let (k, ok) = (crate::metrics::Req::Read, res.is_ok());
                crate::metrics::done(k, r.offset, r.length as u64, ok, t0);
            }
        }
        // reply headers first (owned), then the parts list borrowing them
        let mut heads: Vec<Vec<u8>> = Vec::with_capacity(batch.len());
        for (r, res) in batch.iter().zip(&results) {
            heads.push(match res {
                Ok(_) if !self.neg.structured => proto::simple_reply(0, r.cookie).to_vec(),
                Ok(_) if r.length == 0 => proto::structured_header(
                    proto::REPLY_FLAG_DONE,
                    proto::REPLY_TYPE_NONE,
                    r.cookie,
                    0,
                )
                .to_vec(),
                Ok(_) => proto::offset_data_header(r.cookie, r.offset, r.length).to_vec(),
                Err(e) => {
                    tracing::debug!("nbd: read failed: {e}");
                    let errno = wire_errno(e);
                    if self.neg.structured {
                        proto::structured_error(r.cookie, errno, &e.to_string())
                    } else {
                        proto::simple_reply(errno, r.cookie).to_vec()
                    }
                }
            });
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * batch.len());
        for (h, res) in heads.iter().zip(&results) {
            parts.push(h);
            if let Ok(data) = res {
                if !data.is_empty() {
                    parts.push(data);
                }
            }
        }
        self.writer.lock().send(&parts);
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

    /// Run one checked request and reply. `queue` batches the reply (reader thread).
    fn execute(&self, r: Request, payload: Vec<u8>, queue: bool) {
        let fua = r.flags & proto::CMD_FLAG_FUA != 0;
        let (off, len) = (r.offset, r.length as u64);
        self.record(&r);
        let t0 = crate::metrics::start();
        let res = match r.cmd {
            proto::CMD_READ => {
                self.execute_reads(std::slice::from_ref(&r));
                return;
            }
            proto::CMD_WRITE => self.vol.write(off, &payload, fua),
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
                        let b = proto::block_status_reply(r.cookie, &list);
                        let mut w = self.writer.lock();
                        if queue {
                            w.queue(&b)
                        } else {
                            w.send(&[&b])
                        }
                        return;
                    }
                }
                Ok(_) => Err(Error::InvalidArgument("empty block status".into())),
                Err(e) => Err(e),
            },
            _ => Err(Error::InvalidArgument("unknown command".into())),
        };
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
            Ok(()) => {
                let b = proto::simple_reply(0, r.cookie);
                let mut w = self.writer.lock();
                if queue {
                    w.queue(&b)
                } else {
                    w.send(&[&b])
                }
            }
            Err(e) => {
                tracing::debug!("nbd: command {} failed: {e}", r.cmd);
                self.error_reply(&r, wire_errno(&e), &e.to_string(), queue);
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

/// The server: one export backed by one volume.
pub struct Server {
    vol: Arc<Volume>,
    cfg: ServerConfig,
    pool: Arc<Pool>,
    stopping: AtomicBool,
    /// Sockets of live connections, to wake their readers at shutdown.
    conns: Mutex<HashMap<u64, Stream>>,
    next_id: AtomicU64,
    active: AtomicUsize,
}

impl Server {
    pub fn new(vol: Arc<Volume>, cfg: ServerConfig) -> io::Result<Arc<Server>> {
        let pool = Pool::new(cfg.workers)?;
        Ok(Arc::new(Server {
            vol,
            cfg,
            pool,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            active: AtomicUsize::new(0),
        }))
    }

    fn tflags(&self, structured: bool) -> u16 {
        let mut f = proto::TFLAG_HAS_FLAGS
            | proto::TFLAG_SEND_FLUSH
            | proto::TFLAG_SEND_FUA
            | proto::TFLAG_CAN_MULTI_CONN
            | proto::TFLAG_SEND_CACHE;
        if self.cfg.read_only {
            f |= proto::TFLAG_READ_ONLY;
        } else {
            f |= proto::TFLAG_SEND_TRIM
                | proto::TFLAG_SEND_WRITE_ZEROES
                | proto::TFLAG_SEND_FAST_ZERO;
        }
        if structured {
            f |= proto::TFLAG_SEND_DF;
        }
        f
    }

    fn name_matches(&self, name: &str) -> bool {
        name.is_empty() || name == self.cfg.export_name
    }

    /// Accept connections until `stop` is set; then stop accepting, wake every
    /// connection's reader, wait until each has answered what it accepted, and
    /// stop the workers. The caller flushes and closes the volume afterwards.
    pub fn run(self: &Arc<Self>, listener: Listener, stop: &AtomicBool) -> io::Result<()> {
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        while !stop.load(Ordering::Acquire) {
            let mut pfd = libc::pollfd {
                fd: listener.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 100) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            threads.retain(|h| !h.is_finished());
            if n == 0 {
                continue;
            }
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("nbd: accept: {e}");
                    // e.g. EMFILE: back off rather than spin.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if self.active.load(Ordering::Acquire) >= self.cfg.max_connections {
                tracing::warn!(
                    "nbd: refusing a connection: {} already open",
                    self.cfg.max_connections
                );
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            match stream.try_clone() {
                Ok(c) => {
                    self.conns.lock().insert(id, c);
                }
                Err(e) => {
                    tracing::warn!("nbd: {e}");
                    continue;
                }
            }
            self.active.fetch_add(1, Ordering::AcqRel);
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("nbd-conn-{id}"))
                .spawn(move || {
                    crate::metrics::connection_opened();
                    if let Err(e) = me.connection(stream) {
                        tracing::debug!("nbd: connection {id}: {e}");
                    }
                    crate::metrics::connection_closed();
                    me.conns.lock().remove(&id);
                    me.active.fetch_sub(1, Ordering::AcqRel);
                });
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    tracing::warn!("nbd: cannot start a connection thread: {e}");
                    self.conns.lock().remove(&id);
                    self.active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        drop(listener);
        self.stopping.store(true, Ordering::Release);
        for s in self.conns.lock().values() {
            s.shutdown(Shutdown::Read);
        }
        for h in threads {
            let _ = h.join();
        }
        self.pool.stop();
        Ok(())
    }

    fn connection(self: &Arc<Self>, stream: Stream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let mut wr = stream.try_clone()?;
        let mut rd = BufReader::with_capacity(256 << 10, stream);
        let Some(neg) = self.handshake(&mut rd, &mut wr)? else {
            return Ok(());
        };
        rd.get_ref().set_read_timeout(None)?;
        wr.set_write_timeout(Some(REPLY_TIMEOUT))?;
        let conn = Arc::new(Conn {
            vol: self.vol.clone(),
            recorder: self.cfg.recorder.clone(),
            neg,
            writer: Mutex::new(Writer {
                stream: wr,
                pending: Vec::with_capacity(REPLY_BATCH_BYTES),
                broken: false,
            }),
            budget: Mutex::new(Budget::default()),
            budget_cv: Condvar::new(),
        });
        let r = self.transmission(&conn, &mut rd);
        conn.drain();
        conn.writer.lock().flush_pending();
        r
    }

    /// Option haggling. Returns what was negotiated, or None when the client
    /// aborted or must be disconnected.
    fn handshake(
        &self,
        rd: &mut BufReader<Stream>,
        wr: &mut Stream,
    ) -> io::Result<Option<Negotiated>> {
        wr.write_all(&proto::greeting())?;
        let mut cf = [0u8; 4];
        rd.read_exact(&mut cf)?;
        let no_zeroes = match proto::parse_client_flags(cf) {
            Ok(z) => z,
            Err(e) => {
                tracing::debug!("nbd: handshake: {e}");
                return Ok(None);
            }
        };
        let mut neg = Negotiated {
            size: self.vol.size_bytes(),
            read_only: self.cfg.read_only,
            structured: false,
            base_allocation: false,
        };
        for _ in 0..MAX_OPTIONS {
            let mut h = [0u8; proto::OPTION_HEADER_BYTES];
            rd.read_exact(&mut h)?;
            let (opt, len) = match proto::parse_option_header(&h) {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("nbd: handshake: {e}");
                    return Ok(None);
                }
            };
            let reply = |wr: &mut Stream, kind: u32, payload: &[u8]| {
                wr.write_all(&proto::option_reply(opt, kind, payload))
            };
            if len > proto::MAX_OPTION_BYTES {
                if opt == proto::OPT_EXPORT_NAME {
                    return Ok(None); // no way to answer with an error
                }
                io::copy(&mut (&mut *rd).take(len as u64), &mut io::sink())?;
                reply(wr, proto::REP_ERR_TOO_BIG, b"option too large")?;
                continue;
            }
            let mut data = vec![0u8; len as usize];
            rd.read_exact(&mut data)?;
            if self.stopping.load(Ordering::Acquire) {
                if opt != proto::OPT_EXPORT_NAME {
                    reply(wr, proto::REP_ERR_SHUTDOWN, b"server is shutting down")?;
                }
                return Ok(None);
            }
            match opt {
                proto::OPT_EXPORT_NAME => {
                    let ok = std::str::from_utf8(&data).is_ok_and(|n| self.name_matches(n));
                    if !ok {
                        return Ok(None);
                    }
                    wr.write_all(&proto::export_name_reply(
                        neg.size,
                        self.tflags(neg.structured),
                        no_zeroes,
                    ))?;
                    return Ok(Some(neg));
                }
                proto::OPT_ABORT => {
                    let _ = reply(wr, proto::REP_ACK, &[]);
                    return Ok(None);
                }
                proto::OPT_LIST => {
                    if len != 0 {
                        reply(wr, proto::REP_ERR_INVALID, b"LIST takes no data")?;
                    } else {
                        reply(
                            wr,
                            proto::REP_SERVER,
                            &proto::rep_server(&self.cfg.export_name),
                        )?;
                        reply(wr, proto::REP_ACK, &[])?;
                    }
                }
                proto::OPT_STARTTLS => {
                    reply(wr, proto::REP_ERR_POLICY, b"TLS is not supported")?;
                }
                proto::OPT_INFO | proto::OPT_GO => {
                    let req = match proto::parse_info_request(&data) {
                        Ok(r) => r,
                        Err(e) => {
                            reply(wr, proto::REP_ERR_INVALID, e.to_string().as_bytes())?;
                            continue;
                        }
                    };
                    if !self.name_matches(&req.name) {
                        reply(wr, proto::REP_ERR_UNKNOWN, b"no such export")?;
                        continue;
                    }
                    let tf = self.tflags(neg.structured);
                    reply(wr, proto::REP_INFO, &proto::info_export(neg.size, tf))?;
                    for item in req.items {
                        match item {
                            proto::INFO_NAME => reply(
                                wr,
                                proto::REP_INFO,
                                &proto::info_string(proto::INFO_NAME, &self.cfg.export_name),
                            )?,
                            proto::INFO_DESCRIPTION => reply(
                                wr,
                                proto::REP_INFO,
                                &proto::info_string(proto::INFO_DESCRIPTION, &self.cfg.description),
                            )?,
                            _ => {}
                        }
                    }
                    // Sent whether asked for or not: clients that did not ask may ignore it.
                    reply(wr, proto::REP_INFO, &proto::info_block_size())?;
                    reply(wr, proto::REP_ACK, &[])?;
                    if opt == proto::OPT_GO {
                        return Ok(Some(neg));
                    }
                }
                proto::OPT_STRUCTURED_REPLY => {
                    if len != 0 {
                        reply(
                            wr,
                            proto::REP_ERR_INVALID,
                            b"STRUCTURED_REPLY takes no data",
                        )?;
                    } else {
                        neg.structured = true;
                        reply(wr, proto::REP_ACK, &[])?;
                    }
                }
                proto::OPT_LIST_META_CONTEXT | proto::OPT_SET_META_CONTEXT => {
                    let list = opt == proto::OPT_LIST_META_CONTEXT;
                    if !neg.structured {
                        reply(
                            wr,
                            proto::REP_ERR_INVALID,
                            b"negotiate structured replies first",
                        )?;
                        continue;
                    }
                    let req = match proto::parse_meta_request(&data) {
                        Ok(r) => r,
                        Err(e) => {
                            reply(wr, proto::REP_ERR_INVALID, e.to_string().as_bytes())?;
                            continue;
                        }
                    };
                    if !self.name_matches(&req.name) {
                        reply(wr, proto::REP_ERR_UNKNOWN, b"no such export")?;
                        continue;
                    }
                    let selected = if list && req.queries.is_empty() {
                        true
                    } else {
                        req.queries
                            .iter()
                            .any(|q| proto::query_selects_base_allocation(q, list))
                    };
                    if !list {
                        neg.base_allocation = selected;
                    }
                    if selected {
                        let id = if list { 0 } else { proto::BASE_ALLOCATION_ID };
                        reply(
                            wr,
                            proto::REP_META_CONTEXT,
                            &proto::rep_meta_context(id, proto::BASE_ALLOCATION),
                        )?;
                    }
                    reply(wr, proto::REP_ACK, &[])?;
                }
                _ => {
                    reply(wr, proto::REP_ERR_UNSUP, b"option not supported")?;
                }
            }
        }
        Ok(None)
    }

    /// Read requests until DISC, EOF, a broken frame or shutdown.
    fn transmission(&self, conn: &Arc<Conn>, rd: &mut BufReader<Stream>) -> io::Result<()> {
        loop {
            if rd.buffer().len() < proto::REQUEST_BYTES {
                // About to block on the socket: deliver batched replies first.
                conn.writer.lock().flush_pending();
            }
            let mut h = [0u8; proto::REQUEST_BYTES];
            match rd.read_exact(&mut h) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            let r = match Request::decode(&h) {
                Ok(r) => r,
                Err(e @ ProtoError::BadRequestMagic(_)) => {
                    // Framing is lost: nothing after this can be trusted.
                    tracing::debug!("nbd: {e}; disconnecting");
                    return Ok(());
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            };
            if let Err(errno) = proto::check_request(&r, &conn.neg) {
                let skip = r.payload_len() as u64;
                if skip > 0 {
                    // Discard the payload without holding it (bounded memory).
                    let n = io::copy(&mut (&mut *rd).take(skip), &mut io::sink())?;
                    if n < skip {
                        return Ok(());
                    }
                }
                conn.error_reply(&r, errno, "request rejected", true);
                continue;
            }
            if r.cmd == proto::CMD_DISC {
                return Ok(());
            }
            let bytes = match r.cmd {
                proto::CMD_READ | proto::CMD_WRITE => r.length as u64,
                _ => 0,
            };
            conn.acquire(bytes);
            if r.cmd == proto::CMD_READ {
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
                    std::io::BufRead::consume(rd, proto::REQUEST_BYTES);
                    batch.push(n);
                }
                let c = conn.clone();
                self.pool.submit(Box::new(move || {
                    c.execute_reads(&batch);
                    for r in &batch {
                        c.release(r.length as u64);
                    }
                }));
                continue;
            }
            let mut payload = Vec::new();
            if r.cmd == proto::CMD_WRITE {
                if rd.buffer().len() < r.length as usize {
                    conn.writer.lock().flush_pending();
                }
                // Read into reserved, unzeroed capacity (no memset per write).
                payload = Vec::with_capacity(r.length as usize);
                let got = (&mut *rd).take(r.length as u64).read_to_end(&mut payload);
                match got {
                    Ok(n) if n == r.length as usize => {}
                    // EOF: a half-sent write was never acknowledged.
                    Ok(_) => {
                        conn.release(bytes);
                        return Ok(());
                    }
                    Err(e) => {
                        conn.release(bytes);
                        return Err(e);
                    }
                }
            }
            let fua = r.flags & proto::CMD_FLAG_FUA != 0;
            let mutating = matches!(
                r.cmd,
                proto::CMD_WRITE | proto::CMD_TRIM | proto::CMD_WRITE_ZEROES | proto::CMD_CACHE
            );
            // A request that waits for the media (FLUSH, FUA) runs here too when it
            // is all the client has asked for: nothing else to overlap it with, and
            // a hand-off to the pool costs a wakeup and a context switch.
            let alone = rd.buffer().is_empty() && conn.budget.lock().requests == 1;
            let inline = self.cfg.inline_writes
                && ((mutating && !fua) || (alone && (mutating || r.cmd == proto::CMD_FLUSH)));
            if inline {
                if fua || r.cmd == proto::CMD_FLUSH {
                    // about to wait for the media: deliver earlier replies first
                    conn.writer.lock().flush_pending();
                }
                conn.execute(r, payload, true);
                conn.release(bytes);
            } else {
                let c = conn.clone();
                self.pool.submit(Box::new(move || {
                    c.execute(r, payload, false);
                    c.release(bytes);
                }));
            }
        }
    }
}
