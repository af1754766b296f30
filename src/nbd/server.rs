//! NBD server: the accept loop, connections' lives (handshake, then the request
//! loop, then drain) and graceful shutdown. Holds no storage policy: every request
//! becomes one `Volume` call on the export the client selected.
//!
//! Threads and ownership:
//! - one accept thread (`Server::run`), which also drives shutdown; at the
//!   connection limit it hands new clients to a short-lived refuser thread that
//!   answers their options with `NBD_REP_ERR_POLICY` and closes;
//! - per connection, a reader thread (handshake, then requests in order), a
//!   writer thread that delivers replies the socket could not take at once,
//!   and, from its first READ, a read completion thread (`requests.rs`);
//! - a shared worker pool runs flushes, FUA writes and block status.
//!   Writes, trims and zeroes without FUA only append to the engine's open chunk,
//!   so the reader runs them itself and batches their replies. READs go to the
//!   media as they arrive through the connection's read ring and are answered
//!   by its completion thread as they complete; READs above the ring's size
//!   (or all, with `--no-read-ring`) go to a per-connection queue served by at
//!   most `READ_WORKERS` pool workers at a time, each taking everything queued
//!   as one batch; a READ that is all the client asked for runs on the reader;
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

use super::handshake::{handshake, refuse};
use super::pool::Pool;
use super::reply::{Budget, Conn, ReadQueue, Release, Writer};
use super::tls::TlsMode;
use super::transport::{is_timeout, HsOut, Listener, RecvBuf, Stream};
use crate::Volume;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
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
    /// Submit each READ to the media as it arrives, through a per-connection
    /// read ring, and answer it when it completes (false: READs go to the
    /// pool in batches; the ring is also skipped where the media has none).
    pub read_ring: bool,
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
            read_ring: true,
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

/// Give freed heap memory back to the system (glibc keeps it: see the mallopt
/// thresholds in cli/mod.rs), e.g. after clients with large buffers left.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The server: one or more exports, each backed by one volume.
pub struct Server {
    pub(super) exports: Vec<Export>,
    pub(super) cfg: ServerConfig,
    pub(super) pool: Arc<Pool>,
    pub(super) stopping: AtomicBool,
    /// Sockets of live connections, to wake their readers at shutdown.
    pub(super) conns: Mutex<HashMap<u64, Stream>>,
    pub(super) next_id: AtomicU64,
    pub(super) active: AtomicUsize,
    pub(super) refusing: Arc<AtomicUsize>,
    pub(super) warn_refused: RateLimited,
    pub(super) warn_timeouts: RateLimited,
    pub(super) last_trim: Mutex<Instant>,
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
    /// The export a name selects: the empty name is the default (first) export.
    pub(super) fn export(&self, name: &str) -> Option<&Export> {
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
        let Some((neg, export)) = handshake(self, &mut rd, &mut wr, deadline)? else {
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
            ring: OnceLock::new(),
            completer: Mutex::new(None),
        });
        let c = conn.clone();
        let writer = std::thread::Builder::new()
            .name(format!("nbd-send-{id}"))
            .stack_size(WRITER_STACK)
            .spawn(move || c.writer_loop())?;
        let r = self.transmission(&conn, &mut rd);
        conn.submit_reads();
        conn.flush_pending();
        conn.drain();
        conn.stop_reads();
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
}
