//! TLS for NBD (`NBD_OPT_STARTTLS`) with rustls: loading certificates in the
//! qemu-nbd / nbdkit layout, and the per-connection pump that carries the
//! rest of the connection through TLS.
//!
//! After STARTTLS the connection's reader and writer talk plain NBD to one end
//! of a Unix socket pair; a pump thread owned by that connection moves bytes
//! between the other end and the client's socket through a rustls session. So
//! the request path is the same with and without TLS, and the pump blocks only
//! its own thread (a client that stops reading fills the pair, and the
//! connection's writer times out as without TLS).
//!
//! Invariant: no plaintext ever reaches the client socket after STARTTLS was
//! acknowledged; buffers are bounded (rustls' buffer limit, one 64 KiB chunk
//! each way).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConnection;
use std::io::{self, Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// When clients may or must use TLS (`--tls`), as nbdkit / qemu-nbd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Off,
    /// Offered; clients may stay in plaintext.
    On,
    /// Every option but STARTTLS is refused until TLS is up.
    Require,
}

/// Where the server's certificate, key and (optionally) the CA that signs
/// client certificates come from.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Require client certificates signed by this CA.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// The qemu-nbd / nbdkit directory layout: `server-cert.pem`,
    /// `server-key.pem`, and `ca-cert.pem` (used to verify clients only when
    /// `verify_peer`).
    pub fn from_dir(dir: &Path, verify_peer: bool) -> TlsFiles {
        TlsFiles {
            cert: dir.join("server-cert.pem"),
            key: dir.join("server-key.pem"),
            client_ca: verify_peer.then(|| dir.join("ca-cert.pem")),
        }
    }
}

/// The server side TLS configuration.
pub fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use anyhow::Context;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("reading {}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", files.cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{}: no certificate in it", files.cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("reading the private key {}", files.key.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading {}", ca.display()))?
            {
                roots
                    .add(c.with_context(|| format!("parsing {}", ca.display()))?)
                    .with_context(|| format!("adding {}", ca.display()))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .context("client certificate verifier")?;
            builder.with_client_cert_verifier(v)
        }
    };
    let cfg = builder
        .with_single_cert(certs, key)
        .context("server certificate and key do not match")?;
    Ok(Arc::new(cfg))
}

/// Plaintext bytes rustls may hold before the pump stops reading from the
/// server side (bounds memory per connection).
const TLS_BUFFER: usize = 256 << 10;
const CHUNK: usize = 64 << 10;

/// Run the TLS handshake on `sock` (blocking, until `deadline`).
pub fn accept(
    cfg: &Arc<rustls::ServerConfig>,
    sock: &mut super::server::Stream,
    deadline: Instant,
) -> io::Result<ServerConnection> {
    let mut tls = ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
    tls.set_buffer_limit(Some(TLS_BUFFER));
    while tls.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake deadline passed",
            ));
        }
        sock.set_read_timeout(Some(left))?;
        sock.set_write_timeout(Some(left))?;
        tls.complete_io(sock)?;
    }
    while tls.wants_write() {
        tls.write_tls(sock)?;
    }
    Ok(tls)
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Move bytes between the client (`sock`, TLS) and the server side (`inner`,
/// plaintext) until either side is done. Runs on the connection's own thread.
pub fn pump(mut tls: ServerConnection, mut sock: super::server::Stream, mut inner: UnixStream) {
    if let Err(e) = pump_inner(&mut tls, &mut sock, &mut inner) {
        tracing::debug!("nbd: TLS session ended: {e}");
    }
    let _ = inner.shutdown(std::net::Shutdown::Both);
    sock.shutdown(std::net::Shutdown::Both);
}

fn pump_inner(
    tls: &mut ServerConnection,
    sock: &mut super::server::Stream,
    inner: &mut UnixStream,
) -> io::Result<()> {
    sock.set_nonblocking(true)?;
    inner.set_nonblocking(true)?;
    let sfd: RawFd = sock.fd();
    let ifd: RawFd = inner.as_raw_fd();
    // plaintext from the client waiting for `inner`, and from `inner` for rustls
    let mut to_inner: Vec<u8> = Vec::new();
    let mut to_inner_off = 0;
    let mut from_inner: Vec<u8> = Vec::new();
    let mut from_inner_off = 0;
    let mut scratch = vec![0u8; CHUNK];
    let mut client_eof = false;
    let mut inner_eof = false;
    loop {
        // deliver what we can without waiting
        while tls.wants_write() {
            match tls.write_tls(sock) {
                Ok(_) => {}
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        if to_inner_off < to_inner.len() {
            match inner.write(&to_inner[to_inner_off..]) {
                Ok(n) => to_inner_off += n,
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if to_inner_off == to_inner.len() {
            to_inner.clear();
            to_inner_off = 0;
            // more plaintext from rustls
            match tls.reader().read(&mut scratch) {
                Ok(0) => client_eof = true,
                Ok(n) => {
                    to_inner.extend_from_slice(&scratch[..n]);
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if from_inner_off < from_inner.len() {
            match tls.writer().write(&from_inner[from_inner_off..]) {
                Ok(n) => from_inner_off += n,
                Err(e) => return Err(e),
            }
            if from_inner_off == from_inner.len() {
                from_inner.clear();
                from_inner_off = 0;
            }
        }
        if client_eof && to_inner.is_empty() {
            let _ = inner.shutdown(std::net::Shutdown::Write);
        }
        if inner_eof && from_inner.is_empty() && !tls.wants_write() {
            return Ok(());
        }
        if client_eof && inner_eof {
            return Ok(());
        }
        // wait for something to do
        let mut fds = [
            libc::pollfd {
                fd: sfd,
                events: 0,
                revents: 0,
            },
            libc::pollfd {
                fd: ifd,
                events: 0,
                revents: 0,
            },
        ];
        if !client_eof && to_inner.is_empty() {
            fds[0].events |= libc::POLLIN;
        }
        if tls.wants_write() {
            fds[0].events |= libc::POLLOUT;
        }
        if !inner_eof && from_inner.is_empty() {
            fds[1].events |= libc::POLLIN;
        }
        if !to_inner.is_empty() {
            fds[1].events |= libc::POLLOUT;
        }
        // a side at EOF with nothing to send would wake poll at once (POLLHUP)
        if client_eof && !tls.wants_write() {
            fds[0].fd = -1;
        }
        if inner_eof && to_inner.is_empty() {
            fds[1].fd = -1;
        }
        // SAFETY: two valid pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            && !client_eof
            && to_inner.is_empty()
        {
            match tls.read_tls(sock) {
                Ok(0) => client_eof = true,
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        let _ = tls.write_tls(sock);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if fds[1].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            && !inner_eof
            && from_inner.is_empty()
        {
            match inner.read(&mut scratch) {
                Ok(0) => {
                    inner_eof = true;
                    tls.send_close_notify();
                }
                Ok(n) => from_inner.extend_from_slice(&scratch[..n]),
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
