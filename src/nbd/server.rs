//! NBD server: listening sockets, the per-connection handshake, request dispatch,
//! reply delivery and graceful shutdown. Holds no storage policy: every request
//! becomes one `Volume` call on the export the client selected.
//!
//! Threads and ownership:
//! - one accept thread (`Server::run`), which also drives shutdown; at the
//!   connection limit it hands new clients to a short-lived refuser thread that
//!   answers their options with `NBD_REP_ERR_POLICY` and closes;
//! - per connection, a reader thread (handshake, then requests in order) and a
//!   writer thread that delivers replies the socket could not take at once;
//! - a shared worker pool runs reads, flushes, FUA writes and block status.
//!   Writes, trims and zeroes without FUA only append to the engine's open chunk,
//!   so the reader runs them itself and batches their replies. READs go to a
//!   per-connection queue served by at most `READ_WORKERS` pool workers at a
//!   time, each taking everything queued as one batch (one media submission,
//!   one reply write); a READ that is all the client asked for runs on the
//!   reader;
//! - after STARTTLS the same threads do TLS (`tls::Session`): the reader
//!   decrypts, replies are sealed under the writer lock; no TLS thread.
//!
//! Invariants:
//! - no shared thread ever blocks on a client's socket: workers send replies with
//!   non-blocking `sendmsg`; what the socket does not take goes to the
//!   connection's backlog, which only its own writer thread waits on (and drops
//!   the connection after `request_timeout` without progress);
//! - every accepted request holds budget (`MAX_INFLIGHT_REQUESTS`,
//!   `max_inflight_bytes`) until its reply is on the wire, so a client that stops
//!   reading costs at most its own budget of queued replies, and its reader stops
//!   reading new requests;
//! - replies of one connection never interleave (one writer lock per connection);
//!   a reply is sent only after the engine call returned, so FLUSH covers every
//!   write whose reply the client has seen, on any connection;
//! - the handshake has a total deadline; a started request must be complete
//!   within `request_timeout`; an idle connection (nothing in flight) is closed
//!   after `idle_timeout` if one is set;
//! - a connection ends only after all its accepted requests were answered (or
//!   the client went away / timed out).

use super::proto::{self, Negotiated, ProtoError, Request};
use super::tls::{self, TlsMode};
use crate::{Error, Volume};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Requests of one connection accepted but not yet answered.
pub const MAX_INFLIGHT_REQUESTS: usize = 128;
/// Default payload bytes (read buffers, write data, queued read replies) of one
/// connection in flight. A single request may exceed it when it is alone.
pub const MAX_INFLIGHT_BYTES: u64 = 8 << 20;
/// A client must finish the whole handshake within this long (default).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A request whose first byte arrived must be complete within this long, and a
/// reply the socket cannot take must make progress within it (default).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most options one handshake may send before we hang up.
const MAX_OPTIONS: u32 = 4096;
/// Queued (batched) replies are sent once they reach this size.
const REPLY_BATCH_BYTES: usize = 64 << 10;
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
/// Receive buffer of one connection (allocated uninitialised: idle connections
/// touch only the pages their requests use).
const READ_BUFFER_BYTES: usize = 256 << 10;
/// Refuser threads at once (clients over the connection limit); more are closed.
const MAX_REFUSERS: usize = 16;
/// Stack of a connection's writer thread (it only polls and sends).
const WRITER_STACK: usize = 128 << 10;

#[derive(Clone)]
pub struct ServerConfig {
    pub max_connections: usize,
    pub workers: usize,
    /// Run non-FUA writes / trims / zeroes on the connection's reader thread.
    pub inline_writes: bool,
    /// Close a connection with nothing in flight after this long without a request.
    pub idle_timeout: Option<Duration>,
    /// Total time a client has to finish the handshake.
    pub handshake_timeout: Duration,
    /// Time to receive a started request, and to make progress sending a reply.
    pub request_timeout: Duration,
    /// Payload bytes one connection may have in flight (see `MAX_INFLIGHT_BYTES`).
    pub max_inflight_bytes: u64,
    /// Whether STARTTLS is offered / required.
    pub tls: TlsMode,
    /// Certificates and key for STARTTLS (needed unless `tls` is Off).
    pub tls_config: Option<Arc<rustls::ServerConfig>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 128,
            workers: 16,
            inline_writes: true,
            idle_timeout: None,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_inflight_bytes: MAX_INFLIGHT_BYTES,
            tls: TlsMode::Off,
            tls_config: None,
        }
    }
}

/// One export: a name clients select and the volume behind it.
#[derive(Clone)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub vol: Arc<Volume>,
    pub read_only: bool,
    /// Capture every request in sluice's trace format (`serve --record`).
    pub recorder: Option<Arc<crate::trace::Recorder>>,
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
    fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Unix(l) => l.accept().map(|(s, _)| (Stream::Unix(s), "unix".into())),
            Listener::Tcp(l) => l.accept().map(|(s, a)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), a.to_string())
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
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    pub(crate) fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
    pub(crate) fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
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
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connection's receive buffer, like `BufReader` but reading straight into
/// uninitialised capacity (allocated at first use), so an idle connection
/// costs only the pages of what it received (std's BufReader zero-fills its
/// whole buffer at the first read through a `Read` impl like `Stream`'s).
/// After STARTTLS it holds the ciphertext read from the socket too, and
/// decrypts it into the buffer through the connection's TLS session.
struct RecvBuf {
    stream: Stream,
    /// Received bytes (plaintext); `buf[pos..]` not consumed yet.
    buf: Vec<u8>,
    pos: usize,
    cap: usize,
    /// The TLS session after STARTTLS.
    tls: Option<Arc<tls::Session>>,
    /// Ciphertext read from the socket, `cipher[cpos..]` not given to rustls yet.
    cipher: Vec<u8>,
    cpos: usize,
    /// The socket reached its end (TLS: rustls still has to be told).
    eof: bool,
    /// Bytes at the start of `buf`'s allocation known to be initialised
    /// (rustls copies plaintext into initialised memory only).
    zeroed: usize,
    /// The session failed (a bad record): every later read fails with this.
    tls_failed: Option<String>,
    /// TLS: ciphertext arrived that gave no plaintext yet (part of a record):
    /// a request has started, as far as the request timeout is concerned.
    partial_record: bool,
}

/// Plaintext one TLS refill decrypts at most (rustls takes at most one full
/// record's worth of ciphertext per step anyway).
const TLS_REFILL_BYTES: usize = 64 << 10;

impl RecvBuf {
    fn new(stream: Stream, cap: usize) -> RecvBuf {
        RecvBuf {
            stream,
            buf: Vec::new(),
            pos: 0,
            cap,
            tls: None,
            cipher: Vec::new(),
            cpos: 0,
            eof: false,
            zeroed: 0,
            tls_failed: None,
            partial_record: false,
        }
    }
    fn get_ref(&self) -> &Stream {
        &self.stream
    }
    fn buffer(&self) -> &[u8] {
        &self.buf[self.pos..]
    }
    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
        if self.pos == self.buf.len() {
            self.pos = 0;
            self.buf.clear();
        }
    }
    /// One read(2) from the socket into `v`'s spare capacity (at most `cap`).
    fn read_socket(fd: RawFd, v: &mut Vec<u8>, cap: usize) -> io::Result<usize> {
        if v.capacity() - v.len() < cap {
            v.reserve_exact(cap);
        }
        let spare = v.spare_capacity_mut();
        // SAFETY: read(2) into the vector's spare capacity, then extend its
        // length by exactly the bytes the kernel wrote.
        let n = unsafe {
            libc::read(
                fd,
                spare.as_mut_ptr() as *mut libc::c_void,
                spare.len().min(cap),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above; n <= spare.len().
        unsafe { v.set_len(v.len() + n as usize) };
        Ok(n as usize)
    }
    /// TLS: plaintext into `out`, decrypting what was received, and reading
    /// the socket once (waiting up to its read timeout) when that gives none.
    /// Decrypts until `out` is full or the ciphertext received is used up, one
    /// step (about a record) per session lock. `WouldBlock` when the records
    /// received so far hold no plaintext yet (the caller checks its deadlines
    /// and calls again).
    fn tls_read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return self.stream.read(out);
        };
        if let Some(e) = &self.tls_failed {
            return Err(io::Error::new(io::ErrorKind::InvalidData, e.clone()));
        }
        let mut got = 0;
        let mut read_socket = false;
        loop {
            let mut input = &self.cipher[self.cpos..];
            let before = input.len();
            let r = tls.read(&mut input, self.eof, &mut out[got..]);
            self.cpos += before - input.len();
            if self.cpos == self.cipher.len() {
                self.cipher.clear();
                self.cpos = 0;
            }
            match r {
                Ok(0) => return Ok(got), // end of the session (or `out` is full)
                Ok(n) => {
                    got += n;
                    self.partial_record = false;
                    if got == out.len() || self.cipher.is_empty() {
                        return Ok(got);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if got > 0 || read_socket {
                        return if got > 0 { Ok(got) } else { Err(e) };
                    }
                    read_socket = true;
                    match Self::read_socket(self.stream.fd(), &mut self.cipher, self.cap)? {
                        0 => self.eof = true,
                        _ => self.partial_record = true,
                    }
                }
                Err(e) => {
                    self.tls_failed = Some(e.to_string());
                    // the plaintext before the bad record first, then the error
                    return if got > 0 { Ok(got) } else { Err(e) };
                }
            }
        }
    }
    /// A read now would wait for the client: fewer than `n` bytes of
    /// plaintext received and no ciphertext left to decrypt.
    fn would_wait(&self, n: usize) -> bool {
        self.buffer().len() < n && self.cpos == self.cipher.len()
    }
    /// One read from the socket (through TLS after STARTTLS) into the (empty)
    /// buffer.
    fn refill(&mut self) -> io::Result<usize> {
        debug_assert!(self.buffer().is_empty());
        self.buf.clear();
        self.pos = 0;
        if self.tls.is_none() {
            return Self::read_socket(self.stream.fd(), &mut self.buf, self.cap);
        }
        let win = self.cap.clamp(1, TLS_REFILL_BYTES);
        if self.buf.capacity() < win {
            self.buf.reserve_exact(win);
        }
        if self.zeroed < win {
            // once per connection: rustls writes into initialised bytes only
            for b in &mut self.buf.spare_capacity_mut()[..win] {
                b.write(0);
            }
            self.zeroed = win;
        }
        // SAFETY: the first `zeroed` bytes of the allocation were initialised
        // above, and are only ever overwritten with bytes since.
        unsafe { self.buf.set_len(win) };
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.tls_read(&mut buf);
        buf.truncate(*r.as_ref().unwrap_or(&0));
        self.buf = buf;
        r
    }
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.buffer().is_empty() {
            self.refill()?;
        }
        Ok(self.buffer())
    }
}

impl Read for RecvBuf {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buffer().is_empty() {
            if out.len() >= self.cap {
                return self.tls_read(out);
            }
            self.refill()?;
        }
        let n = self.buffer().len().min(out.len());
        out[..n].copy_from_slice(&self.buffer()[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// The handshake's reply side: the socket, through TLS after STARTTLS
/// (blocking writes, bounded by the socket's write timeout).
struct HsOut {
    stream: Stream,
    tls: Option<Arc<tls::Session>>,
}

impl Write for HsOut {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match &self.tls {
            None => self.stream.write(b),
            Some(t) => {
                let mut sealed = Vec::with_capacity(b.len() + 64);
                t.seal(&[b], &mut sealed)?;
                self.stream.write_all(&sealed)?;
                Ok(b.len())
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One non-blocking `sendmsg` of `parts` starting `skip` bytes in. Returns the
/// bytes taken; `WouldBlock` when the socket buffer is full.
fn send_some(fd: RawFd, parts: &[&[u8]], mut skip: usize) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(parts.len().min(1024));
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        let s = &p[skip..];
        skip = 0;
        if iov.len() == 1024 {
            break;
        }
        iov.push(libc::iovec {
            iov_base: s.as_ptr() as *mut libc::c_void,
            iov_len: s.len(),
        });
    }
    if iov.is_empty() {
        return Ok(0);
    }
    // SAFETY: msghdr points at iovecs that borrow `parts` for the call's duration.
    let n = unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = iov.len() as _;
        libc::sendmsg(fd, &m, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Send as much of `parts` as the socket takes without blocking; returns the
/// byte count sent (less than the total when the socket buffer filled).
fn send_now(fd: RawFd, parts: &[&[u8]], total: usize) -> io::Result<usize> {
    let mut done = 0;
    while done < total {
        match send_some(fd, parts, done) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Send all of `buf`, waiting for the socket; fails when no byte could be sent
/// for `timeout` (the client stopped reading).
fn send_patiently(fd: RawFd, buf: &[u8], timeout: Duration) -> io::Result<()> {
    let mut done = 0;
    let mut progress = Instant::now();
    while done < buf.len() {
        match send_some(fd, &[buf], done) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                done += n;
                progress = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = timeout.saturating_sub(progress.elapsed());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client did not read replies",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, 1000) as libc::c_int;
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut pfd, 1, ms) };
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A warning a client can trigger: logged at most once per interval, with a
/// count of the ones suppressed, so no client can flood the log.
pub struct RateLimited {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
    interval: Duration,
}

impl RateLimited {
    pub fn new(interval: Duration) -> RateLimited {
        RateLimited {
            last: Mutex::new(None),
            suppressed: AtomicU64::new(0),
            interval,
        }
    }
    /// Log `msg` at WARN unless one was logged within the interval.
    pub fn warn(&self, msg: std::fmt::Arguments<'_>) {
        let mut last = self.last.lock();
        if last.is_some_and(|t| t.elapsed() < self.interval) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        drop(last);
        let n = self.suppressed.swap(0, Ordering::Relaxed);
        if n > 0 {
            tracing::warn!("{msg} ({n} more like this suppressed)");
        } else {
            tracing::warn!("{msg}");
        }
    }
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

    /// Other jobs are waiting for a worker.
    fn busy(&self) -> bool {
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
    fn stop(&self) {
        self.q.lock().1 = true;
        self.cv.notify_all();
        for h in self.threads.lock().drain(..) {
            let _ = h.join();
        }
    }
}

/// Budget a reply gives back once it is on the wire.
#[derive(Default, Clone, Copy, Debug)]
struct Release {
    requests: usize,
    bytes: u64,
}

impl Release {
    fn one(bytes: u64) -> Release {
        Release { requests: 1, bytes }
    }
    fn add(&mut self, o: Release) {
        self.requests += o.requests;
        self.bytes += o.bytes;
    }
}

/// Reply side of one connection.
struct Writer {
    /// The socket (a dup of the reader's); sends are non-blocking.
    stream: Stream,
    /// Replies batched by the reader thread, not yet sent.
    pending: Vec<u8>,
    pending_rel: Release,
    /// TLS: the records of the send in progress (reused between sends).
    sealed: Vec<u8>,
    /// Bytes the socket did not take: only the writer thread sends these.
    backlog: Vec<u8>,
    backlog_rel: Release,
    /// The writer thread is sending a batch taken from the backlog.
    draining: bool,
    /// The client went away or stopped reading: replies are dropped.
    broken: bool,
    /// The reader is done and every reply was handed over: the writer may exit.
    closing: bool,
}

/// READs of one connection received and waiting for a worker, and the
/// workers serving them (at most `READ_WORKERS`).
#[derive(Default)]
struct ReadQueue {
    q: VecDeque<Request>,
    workers: usize,
}

/// Requests and payload bytes in flight on one connection.
#[derive(Default)]
struct Budget {
    requests: usize,
    bytes: u64,
}

struct Conn {
    id: u64,
    vol: Arc<Volume>,
    recorder: Option<Arc<crate::trace::Recorder>>,
    neg: Negotiated,
    max_bytes: u64,
    reply_timeout: Duration,
    /// The TLS session after STARTTLS: replies are sealed under the writer
    /// lock (lock order: writer -> session).
    tls: Option<Arc<tls::Session>>,
    writer: Mutex<Writer>,
    writer_cv: Condvar,
    budget: Mutex<Budget>,
    budget_cv: Condvar,
    reads: Mutex<ReadQueue>,
}

impl Conn {
    fn acquire(&self, bytes: u64) {
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
    fn try_acquire(&self, bytes: u64) -> bool {
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
    fn acquire_reader(&self, bytes: u64) {
        if !self.try_acquire(bytes) {
            self.flush_pending();
            self.acquire(bytes);
        }
    }

    fn release(&self, r: Release) {
        if r.requests == 0 && r.bytes == 0 {
            return;
        }
        let mut b = self.budget.lock();
        b.requests -= r.requests;
        b.bytes -= r.bytes;
        self.budget_cv.notify_all();
    }

    fn in_flight(&self) -> usize {
        self.budget.lock().requests
    }

    fn drain(&self) {
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
    fn send(&self, parts: &[&[u8]], rel: Release) {
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
    fn queue(&self, bytes: &[u8], rel: Release) {
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

    fn reply(&self, bytes: &[u8], rel: Release, queue: bool) {
        if queue {
            self.queue(bytes, rel)
        } else {
            self.send(&[bytes], rel)
        }
    }

    fn flush_pending(&self) {
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
    fn writer_loop(&self) {
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
    fn error_reply(&self, r: &Request, errno: u32, msg: &str, rel: Release, queue: bool) {
        if self.neg.structured && matches!(r.cmd, proto::CMD_READ | proto::CMD_BLOCK_STATUS) {
            self.reply(&proto::structured_error(r.cookie, errno, msg), rel, queue)
        } else {
            self.reply(&proto::simple_reply(errno, r.cookie), rel, queue)
        }
    }

    /// Serve checked READs together: one batched engine read, then every reply in
    /// one write, which gives their budget back once delivered.
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
        let rel = Release {
            requests: batch.len(),
            bytes: batch.iter().map(|r| r.length as u64).sum(),
        };
        self.send(&parts, rel);
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

    /// Run one checked request and reply. `queue` batches the reply (reader
    /// thread); `rel` is the request's budget, given back with the reply.
    fn execute(&self, r: Request, payload: Vec<u8>, queue: bool, rel: Release) {
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

/// Reads with a deadline for the handshake: each read may wait only for the
/// time left, so a client trickling bytes cannot stretch it.
fn read_by(rd: &mut RecvBuf, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        if rd.buffer().is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "handshake deadline passed",
                ));
            }
            rd.get_ref().set_read_timeout(Some(left))?;
        }
        match rd.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Discard `n` bytes within the handshake deadline.
fn skip_by(rd: &mut RecvBuf, mut n: u64, deadline: Instant) -> io::Result<()> {
    let mut scratch = [0u8; 4096];
    while n > 0 {
        let k = n.min(scratch.len() as u64) as usize;
        read_by(rd, &mut scratch[..k], deadline)?;
        n -= k as u64;
    }
    Ok(())
}

/// Tell a client over the connection limit why it cannot be served: answer
/// its options with `NBD_REP_ERR_POLICY` (libnbd and qemu print the message),
/// then close. Bounded: a few seconds and a few options.
fn refuse(stream: Stream, limit: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let Ok(mut wr) = stream.try_clone() else {
        return;
    };
    let mut rd = RecvBuf::new(stream, 4096);
    let msg = format!("too many connections: this server serves at most {limit}; try again later");
    let r = (|| -> io::Result<()> {
        wr.write_all(&proto::greeting())?;
        let mut cf = [0u8; 4];
        read_by(&mut rd, &mut cf, deadline)?;
        if proto::parse_client_flags(cf).is_err() {
            return Ok(());
        }
        for _ in 0..16 {
            let mut h = [0u8; proto::OPTION_HEADER_BYTES];
            read_by(&mut rd, &mut h, deadline)?;
            let Ok((opt, len)) = proto::parse_option_header(&h) else {
                return Ok(());
            };
            if opt == proto::OPT_EXPORT_NAME || len > proto::MAX_OPTION_BYTES {
                return Ok(());
            }
            skip_by(&mut rd, len as u64, deadline)?;
            if opt == proto::OPT_ABORT {
                wr.write_all(&proto::option_reply(opt, proto::REP_ACK, &[]))?;
                return Ok(());
            }
            wr.write_all(&proto::option_reply(
                opt,
                proto::REP_ERR_POLICY,
                msg.as_bytes(),
            ))?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        tracing::debug!("nbd: refused client: {e}");
    }
    rd.get_ref().shutdown(Shutdown::Both);
}

/// Give freed heap memory back to the system (glibc keeps it: see the mallopt
/// thresholds in cli/mod.rs), e.g. after clients with large buffers left.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Outcome of waiting for the next request header.
enum Next {
    Header([u8; proto::REQUEST_BYTES]),
    /// EOF, idle timeout, or shutdown: end the connection quietly.
    Done(&'static str),
}

/// The server: one or more exports, each backed by one volume.
pub struct Server {
    exports: Vec<Export>,
    cfg: ServerConfig,
    pool: Arc<Pool>,
    stopping: AtomicBool,
    /// Sockets of live connections, to wake their readers at shutdown.
    conns: Mutex<HashMap<u64, Stream>>,
    next_id: AtomicU64,
    active: AtomicUsize,
    refusing: Arc<AtomicUsize>,
    warn_refused: RateLimited,
    warn_timeouts: RateLimited,
    last_trim: Mutex<Instant>,
}

impl Server {
    /// A server for `exports` (at least one; the first is the default export,
    /// which the empty name selects).
    pub fn new(exports: Vec<Export>, cfg: ServerConfig) -> io::Result<Arc<Server>> {
        if exports.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no exports"));
        }
        let pool = Pool::new(cfg.workers)?;
        Ok(Arc::new(Server {
            exports,
            cfg,
            pool,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            active: AtomicUsize::new(0),
            refusing: Arc::new(AtomicUsize::new(0)),
            warn_refused: RateLimited::new(Duration::from_secs(10)),
            warn_timeouts: RateLimited::new(Duration::from_secs(10)),
            last_trim: Mutex::new(Instant::now()),
        }))
    }

    fn tflags(read_only: bool, structured: bool) -> u16 {
        let mut f = proto::TFLAG_HAS_FLAGS
            | proto::TFLAG_SEND_FLUSH
            | proto::TFLAG_SEND_FUA
            | proto::TFLAG_CAN_MULTI_CONN
            | proto::TFLAG_SEND_CACHE;
        if read_only {
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

    /// The export a name selects: the empty name is the default (first) export.
    fn export(&self, name: &str) -> Option<&Export> {
        if name.is_empty() {
            return self.exports.first();
        }
        self.exports.iter().find(|e| e.name == name)
    }

    /// Accept connections until `stop` is set; then stop accepting, wake every
    /// connection's reader, wait until each has answered what it accepted, and
    /// stop the workers. The caller flushes and closes the volumes afterwards.
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
            let (stream, peer) = match listener.accept() {
                Ok(s) => s,
                Err(e) => {
                    self.warn_refused
                        .warn(format_args!("nbd: accept failed: {e}"));
                    // e.g. EMFILE: back off rather than spin.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if self.active.load(Ordering::Acquire) >= self.cfg.max_connections {
                tracing::debug!("nbd: refusing {peer}: connection limit reached");
                self.warn_refused.warn(format_args!(
                    "nbd: refusing connections: the limit of {} is reached (--shared)",
                    self.cfg.max_connections
                ));
                if self.refusing.fetch_add(1, Ordering::AcqRel) < MAX_REFUSERS {
                    let refusing = self.refusing.clone();
                    let limit = self.cfg.max_connections;
                    let spawned = std::thread::Builder::new()
                        .name("nbd-refuse".into())
                        .stack_size(WRITER_STACK)
                        .spawn(move || {
                            refuse(stream, limit);
                            refusing.fetch_sub(1, Ordering::AcqRel);
                        });
                    if spawned.is_err() {
                        self.refusing.fetch_sub(1, Ordering::AcqRel);
                    }
                } else {
                    self.refusing.fetch_sub(1, Ordering::AcqRel);
                }
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            match stream.try_clone() {
                Ok(c) => {
                    self.conns.lock().insert(id, c);
                }
                Err(e) => {
                    self.warn_refused.warn(format_args!("nbd: {e}"));
                    continue;
                }
            }
            self.active.fetch_add(1, Ordering::AcqRel);
            tracing::debug!("nbd: connection {id} from {peer} opened");
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("nbd-conn-{id}"))
                .spawn(move || {
                    crate::metrics::connection_opened();
                    match me.connection(id, stream) {
                        Ok(why) => tracing::debug!("nbd: connection {id} closed: {why}"),
                        Err(e) => {
                            if is_timeout(&e) {
                                me.warn_timeouts
                                    .warn(format_args!("nbd: connection {id} timed out: {e}"));
                            }
                            tracing::debug!("nbd: connection {id} closed: {e}")
                        }
                    }
                    crate::metrics::connection_closed();
                    me.conns.lock().remove(&id);
                    let left = me.active.fetch_sub(1, Ordering::AcqRel) - 1;
                    me.maybe_trim(left);
                });
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    self.warn_refused
                        .warn(format_args!("nbd: cannot start a connection thread: {e}"));
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

    /// Return memory to the system when the last client left, or at most every
    /// few seconds while clients come and go.
    fn maybe_trim(&self, left: usize) {
        let mut last = self.last_trim.lock();
        if left == 0 || last.elapsed() >= Duration::from_secs(5) {
            *last = Instant::now();
            drop(last);
            trim_heap();
        }
    }

    fn connection(self: &Arc<Self>, id: u64, stream: Stream) -> io::Result<&'static str> {
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(self.cfg.handshake_timeout))?;
        let mut wr = HsOut {
            stream: stream.try_clone()?,
            tls: None,
        };
        let mut rd = RecvBuf::new(stream, READ_BUFFER_BYTES);
        let deadline = Instant::now() + self.cfg.handshake_timeout;
        let Some((neg, export)) = self.handshake(&mut rd, &mut wr, deadline)? else {
            return Ok("handshake ended");
        };
        let tick = self
            .cfg
            .request_timeout
            .min(self.cfg.idle_timeout.unwrap_or(Duration::MAX))
            .max(Duration::from_millis(100));
        rd.get_ref().set_read_timeout(Some(tick))?;
        let conn = Arc::new(Conn {
            id,
            vol: export.vol.clone(),
            recorder: export.recorder.clone(),
            neg,
            max_bytes: self.cfg.max_inflight_bytes,
            reply_timeout: self.cfg.request_timeout,
            tls: wr.tls,
            writer: Mutex::new(Writer {
                stream: wr.stream,
                pending: Vec::new(),
                pending_rel: Release::default(),
                sealed: Vec::new(),
                backlog: Vec::new(),
                backlog_rel: Release::default(),
                draining: false,
                broken: false,
                closing: false,
            }),
            writer_cv: Condvar::new(),
            budget: Mutex::new(Budget::default()),
            budget_cv: Condvar::new(),
            reads: Mutex::new(ReadQueue::default()),
        });
        let c = conn.clone();
        let writer = std::thread::Builder::new()
            .name(format!("nbd-send-{id}"))
            .stack_size(WRITER_STACK)
            .spawn(move || c.writer_loop())?;
        let r = self.transmission(&conn, &mut rd);
        conn.flush_pending();
        conn.drain();
        if let Some(t) = &conn.tls {
            t.close();
            conn.flush_pending();
        }
        {
            let mut w = conn.writer.lock();
            w.closing = true;
            conn.writer_cv.notify_one();
        }
        let _ = writer.join();
        r
    }

    /// Option haggling, within `deadline` in total. Returns what was negotiated
    /// and the export chosen, or None when the client aborted or must be
    /// disconnected.
    fn handshake(
        &self,
        rd: &mut RecvBuf,
        wr: &mut HsOut,
        deadline: Instant,
    ) -> io::Result<Option<(Negotiated, Export)>> {
        wr.write_all(&proto::greeting())?;
        let mut cf = [0u8; 4];
        read_by(rd, &mut cf, deadline)?;
        let no_zeroes = match proto::parse_client_flags(cf) {
            Ok(z) => z,
            Err(e) => {
                tracing::debug!("nbd: handshake: {e}");
                return Ok(None);
            }
        };
        let mut structured = false;
        let mut base_allocation = false;
        let mut tls_up = false;
        let neg_for = |e: &Export, structured: bool, base_allocation: bool| Negotiated {
            size: e.vol.size_bytes(),
            read_only: e.read_only,
            structured,
            base_allocation,
        };
        for _ in 0..MAX_OPTIONS {
            let mut h = [0u8; proto::OPTION_HEADER_BYTES];
            read_by(rd, &mut h, deadline)?;
            let (opt, len) = match proto::parse_option_header(&h) {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("nbd: handshake: {e}");
                    return Ok(None);
                }
            };
            let reply = |wr: &mut HsOut, kind: u32, payload: &[u8]| {
                wr.write_all(&proto::option_reply(opt, kind, payload))
            };
            if len > proto::MAX_OPTION_BYTES {
                if opt == proto::OPT_EXPORT_NAME {
                    return Ok(None); // no way to answer with an error
                }
                skip_by(rd, len as u64, deadline)?;
                reply(wr, proto::REP_ERR_TOO_BIG, b"option too large")?;
                continue;
            }
            let mut data = vec![0u8; len as usize];
            read_by(rd, &mut data, deadline)?;
            if self.stopping.load(Ordering::Acquire) {
                if opt != proto::OPT_EXPORT_NAME {
                    reply(wr, proto::REP_ERR_SHUTDOWN, b"server is shutting down")?;
                }
                return Ok(None);
            }
            if self.cfg.tls == TlsMode::Require
                && !tls_up
                && !matches!(opt, proto::OPT_STARTTLS | proto::OPT_ABORT)
            {
                if opt == proto::OPT_EXPORT_NAME {
                    tracing::debug!("nbd: handshake: EXPORT_NAME without TLS, which is required");
                    return Ok(None);
                }
                reply(
                    wr,
                    proto::REP_ERR_TLS_REQD,
                    b"TLS is required: use STARTTLS",
                )?;
                continue;
            }
            match opt {
                proto::OPT_EXPORT_NAME => {
                    let exp = std::str::from_utf8(&data).ok().and_then(|n| self.export(n));
                    let Some(exp) = exp else {
                        tracing::debug!("nbd: handshake: unknown export requested");
                        return Ok(None);
                    };
                    wr.write_all(&proto::export_name_reply(
                        exp.vol.size_bytes(),
                        Self::tflags(exp.read_only, structured),
                        no_zeroes,
                    ))?;
                    return Ok(Some((neg_for(exp, structured, false), exp.clone())));
                }
                proto::OPT_ABORT => {
                    let _ = reply(wr, proto::REP_ACK, &[]);
                    return Ok(None);
                }
                proto::OPT_LIST => {
                    if len != 0 {
                        reply(wr, proto::REP_ERR_INVALID, b"LIST takes no data")?;
                    } else {
                        for e in &self.exports {
                            reply(
                                wr,
                                proto::REP_SERVER,
                                &proto::rep_server(&e.name, &e.description),
                            )?;
                        }
                        reply(wr, proto::REP_ACK, &[])?;
                    }
                }
                proto::OPT_STARTTLS => {
                    let Some(cfg) = self
                        .cfg
                        .tls_config
                        .as_ref()
                        .filter(|_| self.cfg.tls != TlsMode::Off)
                    else {
                        reply(
                            wr,
                            proto::REP_ERR_POLICY,
                            b"TLS is not enabled on this server",
                        )?;
                        continue;
                    };
                    if tls_up || len != 0 {
                        reply(
                            wr,
                            proto::REP_ERR_INVALID,
                            b"TLS already negotiated, or STARTTLS with data",
                        )?;
                        continue;
                    }
                    reply(wr, proto::REP_ACK, &[])?;
                    if !rd.buffer().is_empty() {
                        tracing::debug!("nbd: handshake: plaintext after STARTTLS");
                        return Ok(None);
                    }
                    let session = Arc::new(tls::accept(cfg, &mut wr.stream, deadline)?);
                    wr.stream
                        .set_write_timeout(Some(self.cfg.handshake_timeout))?;
                    // From here on the reader decrypts and replies are sealed.
                    rd.tls = Some(session.clone());
                    wr.tls = Some(session);
                    // The spec: what was negotiated before TLS is forgotten.
                    structured = false;
                    base_allocation = false;
                    tls_up = true;
                }
                proto::OPT_INFO | proto::OPT_GO => {
                    let req = match proto::parse_info_request(&data) {
                        Ok(r) => r,
                        Err(e) => {
                            reply(wr, proto::REP_ERR_INVALID, e.to_string().as_bytes())?;
                            continue;
                        }
                    };
                    let Some(exp) = self.export(&req.name) else {
                        reply(wr, proto::REP_ERR_UNKNOWN, b"no such export")?;
                        continue;
                    };
                    let tf = Self::tflags(exp.read_only, structured);
                    reply(
                        wr,
                        proto::REP_INFO,
                        &proto::info_export(exp.vol.size_bytes(), tf),
                    )?;
                    for item in req.items {
                        match item {
                            proto::INFO_NAME => reply(
                                wr,
                                proto::REP_INFO,
                                &proto::info_string(proto::INFO_NAME, &exp.name),
                            )?,
                            proto::INFO_DESCRIPTION => reply(
                                wr,
                                proto::REP_INFO,
                                &proto::info_string(proto::INFO_DESCRIPTION, &exp.description),
                            )?,
                            _ => {}
                        }
                    }
                    // Sent whether asked for or not: clients that did not ask may ignore it.
                    reply(wr, proto::REP_INFO, &proto::info_block_size())?;
                    reply(wr, proto::REP_ACK, &[])?;
                    if opt == proto::OPT_GO {
                        return Ok(Some((
                            neg_for(exp, structured, base_allocation),
                            exp.clone(),
                        )));
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
                        structured = true;
                        reply(wr, proto::REP_ACK, &[])?;
                    }
                }
                proto::OPT_LIST_META_CONTEXT | proto::OPT_SET_META_CONTEXT => {
                    let list = opt == proto::OPT_LIST_META_CONTEXT;
                    if !structured {
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
                    if self.export(&req.name).is_none() {
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
                        base_allocation = selected;
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
    fn read_payload(&self, rd: &mut RecvBuf, len: usize) -> io::Result<Option<Vec<u8>>> {
        let start = Instant::now();
        let mut payload = vec![0u8; len];
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
    fn transmission(&self, conn: &Arc<Conn>, rd: &mut RecvBuf) -> io::Result<&'static str> {
        loop {
            if rd.would_wait(proto::REQUEST_BYTES) {
                // About to block on the socket: deliver batched replies first.
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
            let mut payload = Vec::new();
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
            if inline {
                if fua || r.cmd == proto::CMD_FLUSH {
                    // about to wait for the media: deliver earlier replies first
                    conn.flush_pending();
                }
                conn.execute(r, payload, true, rel);
            } else {
                let c = conn.clone();
                self.pool
                    .submit(Box::new(move || c.execute(r, payload, false, rel)));
            }
        }
    }
}
