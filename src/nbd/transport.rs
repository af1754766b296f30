//! Transport: the listening socket, a connection's socket (Unix or TCP), its
//! receive buffer (plaintext, or decrypted through the connection's TLS
//! session after STARTTLS: `tls.rs` holds the session, this module the IO),
//! the handshake's blocking reply side, and the non-blocking sends the reply
//! side is built on.
//!
//! Owns: the bytes received and not yet consumed (`RecvBuf`, the reader
//! thread's), and the ciphertext not yet decrypted.
//!
//! Invariants: `RecvBuf` never zero-fills its buffer for plaintext (an idle
//! connection costs only the pages it received); no function here waits
//! longer than its caller's deadline (`read_by`) or the socket's timeout;
//! `send_some` / `send_now` never block.

use super::tls;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A bound listening socket.
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    pub(super) fn fd(&self) -> RawFd {
        match self {
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        }
    }
    pub(super) fn accept(&self) -> io::Result<(Stream, String)> {
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
    pub(super) fn try_clone(&self) -> io::Result<Stream> {
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
pub(super) struct RecvBuf {
    stream: Stream,
    /// Received bytes (plaintext); `buf[pos..]` not consumed yet.
    buf: Vec<u8>,
    pos: usize,
    cap: usize,
    /// The TLS session after STARTTLS.
    pub(super) tls: Option<Arc<tls::Session>>,
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
    pub(super) partial_record: bool,
}

/// Plaintext one TLS refill decrypts at most (rustls takes at most one full
/// record's worth of ciphertext per step anyway).
const TLS_REFILL_BYTES: usize = 64 << 10;

impl RecvBuf {
    pub(super) fn new(stream: Stream, cap: usize) -> RecvBuf {
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
    pub(super) fn get_ref(&self) -> &Stream {
        &self.stream
    }
    pub(super) fn buffer(&self) -> &[u8] {
        &self.buf[self.pos..]
    }
    pub(super) fn consume(&mut self, n: usize) {
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
    pub(super) fn would_wait(&self, n: usize) -> bool {
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
    pub(super) fn fill_buf(&mut self) -> io::Result<&[u8]> {
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
pub(super) struct HsOut {
    pub(super) stream: Stream,
    pub(super) tls: Option<Arc<tls::Session>>,
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

pub(super) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One non-blocking `sendmsg` of `parts` starting `skip` bytes in. Returns the
/// bytes taken; `WouldBlock` when the socket buffer is full.
pub(super) fn send_some(fd: RawFd, parts: &[&[u8]], mut skip: usize) -> io::Result<usize> {
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
pub(super) fn send_now(fd: RawFd, parts: &[&[u8]], total: usize) -> io::Result<usize> {
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
pub(super) fn send_patiently(fd: RawFd, buf: &[u8], timeout: Duration) -> io::Result<()> {
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

/// time left, so a client trickling bytes cannot stretch it.
/// Reads with a deadline for the handshake: each read may wait only for the
/// time left, so a client trickling bytes cannot stretch it.
pub(super) fn read_by(rd: &mut RecvBuf, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
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
pub(super) fn skip_by(rd: &mut RecvBuf, mut n: u64, deadline: Instant) -> io::Result<()> {
    let mut scratch = [0u8; 4096];
    while n > 0 {
        let k = n.min(scratch.len() as u64) as usize;
        read_by(rd, &mut scratch[..k], deadline)?;
        n -= k as u64;
    }
    Ok(())
}
