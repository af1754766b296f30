//! TLS for NBD (`NBD_OPT_STARTTLS`) with rustls: loading certificates in the
//! qemu-nbd / nbdkit layout, the handshake, and `Session`, the per-connection
//! TLS state that the connection's own threads use after STARTTLS.
//!
//! There is no TLS thread: the connection's reader decrypts what it received
//! into its receive buffer (`Session::read`), and whoever sends a reply (the
//! reader, a worker, under the connection's writer lock) encrypts it into a
//! buffer (`Session::seal`) and sends that with the same non-blocking send and
//! backlog as plaintext. So the request path costs no thread hand-off more with
//! TLS than without, and the independence guarantees are the same: the session
//! lock is held only for memory work (decrypting or encrypting at most one
//! read's worth of records), never across socket IO, so no worker waits on a
//! client's socket through it.
//!
//! Invariants: no plaintext reaches the client socket after STARTTLS was
//! acknowledged; records leave in the order they were sealed (sealing and
//! sending happen under one writer lock); buffers are bounded (rustls' buffer
//! limit, and the caller's input and output buffers).

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConnection;
use std::io::{self, Read, Write};
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

/// Plaintext or ciphertext bytes rustls may buffer for one connection.
const TLS_BUFFER: usize = 256 << 10;

/// Run the TLS handshake on `sock` (blocking, until `deadline`).
pub fn accept(
    cfg: &Arc<rustls::ServerConfig>,
    sock: &mut super::transport::Stream,
    deadline: Instant,
) -> io::Result<Session> {
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
    Ok(Session {
        conn: Mutex::new(tls),
    })
}

/// One connection's TLS session after the handshake, shared by its reader
/// (decrypts) and its reply side (encrypts). Only memory work under the lock.
pub struct Session {
    conn: Mutex<ServerConnection>,
}

impl Session {
    /// Decrypt: feed ciphertext from `input` (advanced past what rustls took)
    /// until some plaintext is ready, and copy it into `out` (not empty).
    /// `Ok(0)`: the client ended the session (close_notify, or `eof`: the
    /// socket reached its end; a missing close_notify is an ordinary
    /// disconnect for NBD). `WouldBlock`: `input` is used up and more
    /// ciphertext is needed. `InvalidData`: a bad record; rustls queued an
    /// alert, which the next `seal` sends.
    pub fn read(&self, input: &mut &[u8], eof: bool, out: &mut [u8]) -> io::Result<usize> {
        let mut c = self.conn.lock();
        let mut eof_told = false;
        loop {
            match c.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if input.is_empty() {
                if eof && !eof_told {
                    // tells rustls the transport ended (read_tls of nothing)
                    c.read_tls(&mut io::empty())?;
                    eof_told = true;
                    continue;
                }
                if eof {
                    return Ok(0);
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if c.read_tls(input)? == 0 {
                return Ok(0); // close_notify received: rustls reads no more
            }
            if let Err(e) = c.process_new_packets() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    /// Encrypt `parts` (in order, as few records as their size allows) and
    /// append the records to `out`, after anything else the session had to
    /// send (alerts, key updates, close_notify).
    pub fn seal(&self, parts: &[&[u8]], out: &mut Vec<u8>) -> io::Result<()> {
        let mut c = self.conn.lock();
        let mut slices: Vec<io::IoSlice<'_>> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| io::IoSlice::new(p))
            .collect();
        let mut rest = &mut slices[..];
        loop {
            while c.wants_write() {
                c.write_tls(out)?;
            }
            if rest.is_empty() {
                return Ok(());
            }
            let n = c.writer().write_vectored(rest)?;
            if n == 0 && !c.wants_write() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            io::IoSlice::advance_slices(&mut rest, n);
        }
    }

    /// Records are waiting to be sent (e.g. an alert or a key update the
    /// reader's decrypting produced): the next `seal` returns them.
    pub fn wants_write(&self) -> bool {
        self.conn.lock().wants_write()
    }

    /// Queue close_notify (sent by the next `seal`).
    pub fn close(&self) {
        self.conn.lock().send_close_notify();
    }
}
