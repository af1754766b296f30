//! A small NBD client for benchmarks: fixed-newstyle handshake with NBD_OPT_GO
//! (falling back to NBD_OPT_EXPORT_NAME), simple replies, READ / WRITE / FLUSH, and
//! pipelining: any number of threads may issue requests on one connection at once;
//! a reader thread hands each reply to the thread waiting on its handle.
//!
//! Invariant: requests are written whole under the send lock (never interleaved),
//! every handle is unique among requests in flight, and a reply is delivered only to
//! the request with its handle; once the connection fails, every waiter and every
//! later request gets an error (none waits forever).

use anyhow::{anyhow, bail, Context, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"
const IHAVEOPT: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_EXPORT_NAME: u32 = 1;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
const INFO_EXPORT: u16 = 0;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;

const TFLAG_READ_ONLY: u16 = 2;
const TFLAG_SEND_FLUSH: u16 = 4;

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix {
        socket: String,
        name: String,
    },
    Tcp {
        host: String,
        port: u16,
        name: String,
    },
}

/// Parse `nbd+unix:///NAME?socket=PATH` or `nbd://HOST[:PORT]/NAME`.
pub fn parse_uri(uri: &str) -> Result<Endpoint> {
    if let Some(rest) = uri.strip_prefix("nbd+unix://") {
        let (path, query) = rest.split_once('?').ok_or_else(|| {
            anyhow!("{uri}: nbd+unix URIs need ?socket=PATH (nbd+unix:///NAME?socket=PATH)")
        })?;
        let name = path.strip_prefix('/').unwrap_or(path).to_string();
        let socket = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("socket="))
            .filter(|s| !s.is_empty())
            .ok_or_else(|| anyhow!("{uri}: missing socket=PATH"))?;
        return Ok(Endpoint::Unix {
            socket: socket.to_string(),
            name,
        });
    }
    if let Some(rest) = uri.strip_prefix("nbd://") {
        let (hostport, name) = rest.split_once('/').unwrap_or((rest, ""));
        if hostport.is_empty() {
            bail!("{uri}: missing host");
        }
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
                h.trim_start_matches('[').trim_end_matches(']').to_string(),
                p.parse::<u16>()
                    .map_err(|_| anyhow!("{uri}: bad port {p:?}"))?,
            ),
            _ => (hostport.to_string(), 10809),
        };
        return Ok(Endpoint::Tcp {
            host,
            port,
            name: name.to_string(),
        });
    }
    bail!("{uri}: not an NBD URI (use nbd+unix:///NAME?socket=PATH or nbd://HOST:PORT/NAME)")
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn try_clone(&self) -> std::io::Result<Conn> {
        Ok(match self {
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self) {
        let _ = match self {
            Conn::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Conn::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}
impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Unix(s) => s.flush(),
            Conn::Tcp(s) => s.flush(),
        }
    }
}

type Reply = std::result::Result<Vec<u8>, String>;

struct Waiter {
    read_len: usize,
    tx: SyncSender<Reply>,
}

struct Inflight {
    waiters: HashMap<u64, Waiter>,
    failed: Option<String>,
}

pub struct NbdClient {
    send: Mutex<Conn>,
    inflight: Arc<Mutex<Inflight>>,
    next_handle: AtomicU64,
    size: u64,
    flags: u16,
    uri: String,
    reader: Mutex<Option<JoinHandle<()>>>,
}

fn rd_u16(c: &mut impl Read) -> std::io::Result<u16> {
    let mut b = [0; 2];
    c.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn rd_u32(c: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0; 4];
    c.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn rd_u64(c: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0; 8];
    c.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

fn send_option(c: &mut Conn, opt: u32, data: &[u8]) -> std::io::Result<()> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    c.write_all(&m)
}

/// Handshake; returns (size, transmission flags).
fn handshake(c: &mut Conn, name: &str) -> Result<(u64, u16)> {
    if rd_u64(c)? != NBDMAGIC {
        bail!("server did not greet with NBDMAGIC");
    }
    if rd_u64(c)? != IHAVEOPT {
        bail!("server speaks oldstyle NBD, which is not supported");
    }
    let sflags = rd_u16(c)?;
    if sflags & FLAG_FIXED_NEWSTYLE == 0 {
        bail!("server does not support fixed newstyle negotiation");
    }
    let no_zeroes = sflags & FLAG_NO_ZEROES != 0;
    let cflags = (FLAG_FIXED_NEWSTYLE | if no_zeroes { FLAG_NO_ZEROES } else { 0 }) as u32;
    c.write_all(&cflags.to_be_bytes())?;
    // NBD_OPT_GO: name length, name, zero information requests.
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    send_option(c, OPT_GO, &d)?;
    let mut export: Option<(u64, u16)> = None;
    loop {
        if rd_u64(c)? != REPLY_MAGIC {
            bail!("bad option reply magic");
        }
        let _opt = rd_u32(c)?;
        let typ = rd_u32(c)?;
        let len = rd_u32(c)? as usize;
        if len > 1 << 20 {
            bail!("option reply of {len} bytes is implausible");
        }
        let mut data = vec![0u8; len];
        c.read_exact(&mut data)?;
        match typ {
            REP_INFO if len >= 12 && u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT => {
                let size = u64::from_be_bytes(data[2..10].try_into().unwrap());
                let flags = u16::from_be_bytes([data[10], data[11]]);
                export = Some((size, flags));
            }
            REP_ACK => {
                return export.ok_or_else(|| {
                    anyhow!("server acknowledged NBD_OPT_GO without export information")
                });
            }
            REP_ERR_UNSUP => {
                // Old server: NBD_OPT_EXPORT_NAME, which answers with size and flags.
                send_option(c, OPT_EXPORT_NAME, name.as_bytes())?;
                let size = rd_u64(c)?;
                let flags = rd_u16(c)?;
                if !no_zeroes {
                    let mut z = [0u8; 124];
                    c.read_exact(&mut z)?;
                }
                return Ok((size, flags));
            }
            t if t & (1 << 31) != 0 => {
                let msg = String::from_utf8_lossy(&data).to_string();
                bail!(
                    "server refused export {name:?} (error reply {:#x}{}{})",
                    t,
                    if msg.is_empty() { "" } else { ": " },
                    msg
                );
            }
            _ => {} // other informational replies are ignored
        }
    }
}

impl NbdClient {
    pub fn connect(uri: &str) -> Result<NbdClient> {
        let ep = parse_uri(uri)?;
        let (mut conn, name) = match &ep {
            Endpoint::Unix { socket, name } => (
                Conn::Unix(
                    UnixStream::connect(socket)
                        .with_context(|| format!("connecting to {socket}"))?,
                ),
                name.clone(),
            ),
            Endpoint::Tcp { host, port, name } => {
                let s = TcpStream::connect((host.as_str(), *port))
                    .with_context(|| format!("connecting to {host}:{port}"))?;
                s.set_nodelay(true)?;
                (Conn::Tcp(s), name.clone())
            }
        };
        let (size, flags) = handshake(&mut conn, &name)?;
        let inflight = Arc::new(Mutex::new(Inflight {
            waiters: HashMap::new(),
            failed: None,
        }));
        let mut rconn = conn.try_clone()?;
        let inf = inflight.clone();
        let reader = std::thread::Builder::new()
            .name("nbd-client-reader".into())
            .spawn(move || {
                let why = reader_loop(&mut rconn, &inf);
                let mut g = inf.lock();
                g.failed = Some(why.clone());
                for (_, w) in g.waiters.drain() {
                    let _ = w.tx.send(Err(why.clone()));
                }
            })?;
        Ok(NbdClient {
            send: Mutex::new(conn),
            inflight,
            next_handle: AtomicU64::new(1),
            size,
            flags,
            uri: uri.to_string(),
            reader: Mutex::new(Some(reader)),
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn read_only(&self) -> bool {
        self.flags & TFLAG_READ_ONLY != 0
    }

    fn request(&self, cmd: u16, offset: u64, len: u32, data: Option<&[u8]>) -> Result<Vec<u8>> {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        {
            let mut g = self.inflight.lock();
            if let Some(f) = &g.failed {
                bail!("NBD connection failed: {f}");
            }
            let read_len = if cmd == CMD_READ { len as usize } else { 0 };
            g.waiters.insert(handle, Waiter { read_len, tx });
        }
        let mut hdr = [0u8; 28];
        hdr[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        hdr[4..6].copy_from_slice(&0u16.to_be_bytes());
        hdr[6..8].copy_from_slice(&cmd.to_be_bytes());
        hdr[8..16].copy_from_slice(&handle.to_be_bytes());
        hdr[16..24].copy_from_slice(&offset.to_be_bytes());
        hdr[24..28].copy_from_slice(&len.to_be_bytes());
        let sent = {
            let mut c = self.send.lock();
            c.write_all(&hdr).and_then(|_| match data {
                Some(d) => c.write_all(d),
                None => Ok(()),
            })
        };
        if let Err(e) = sent {
            self.inflight.lock().waiters.remove(&handle);
            bail!("sending NBD request: {e}");
        }
        match rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(anyhow!("{e}")),
            Err(_) => Err(anyhow!("NBD connection closed")),
        }
    }

    /// Send NBD_CMD_DISC and close the connection.
    pub fn disconnect(&self) {
        let mut hdr = [0u8; 28];
        hdr[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        hdr[6..8].copy_from_slice(&CMD_DISC.to_be_bytes());
        {
            let mut c = self.send.lock();
            let _ = c.write_all(&hdr);
            c.shutdown();
        }
        if let Some(h) = self.reader.lock().take() {
            let _ = h.join();
        }
    }
}

/// Read replies until the connection fails; returns why it ended.
fn reader_loop(c: &mut Conn, inf: &Mutex<Inflight>) -> String {
    loop {
        let r = (|| -> std::result::Result<(), String> {
            let magic = rd_u32(c).map_err(|e| format!("connection closed: {e}"))?;
            if magic != SIMPLE_REPLY_MAGIC {
                return Err(format!(
                    "unexpected reply magic {magic:#x} (structured replies are not negotiated)"
                ));
            }
            let err = rd_u32(c).map_err(|e| e.to_string())?;
            let handle = rd_u64(c).map_err(|e| e.to_string())?;
            let w = inf
                .lock()
                .waiters
                .remove(&handle)
                .ok_or_else(|| format!("reply for unknown handle {handle}"))?;
            if err != 0 {
                let _ = w.tx.send(Err(format!(
                    "server error {} ({})",
                    err,
                    std::io::Error::from_raw_os_error(err as i32)
                )));
                return Ok(());
            }
            let mut data = vec![0u8; w.read_len];
            c.read_exact(&mut data).map_err(|e| e.to_string())?;
            let _ = w.tx.send(Ok(data));
            Ok(())
        })();
        if let Err(e) = r {
            return e;
        }
    }
}

impl super::target::Target for NbdClient {
    fn describe(&self) -> String {
        format!("NBD {}", self.uri)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn min_io(&self) -> u64 {
        512
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let v = self.request(CMD_READ, offset, buf.len() as u32, None)?;
        buf.copy_from_slice(&v);
        Ok(())
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        if self.read_only() {
            bail!("the NBD export is read-only");
        }
        self.request(CMD_WRITE, offset, buf.len() as u32, Some(buf))?;
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        if self.flags & TFLAG_SEND_FLUSH == 0 {
            return Ok(());
        }
        self.request(CMD_FLUSH, 0, 0, None)?;
        Ok(())
    }
    fn close(&self) -> Result<()> {
        self.disconnect();
        Ok(())
    }
}

impl Drop for NbdClient {
    fn drop(&mut self) {
        if self.reader.lock().is_some() {
            self.disconnect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse() {
        assert_eq!(
            parse_uri("nbd+unix:///disk?socket=/tmp/s.sock").unwrap(),
            Endpoint::Unix {
                socket: "/tmp/s.sock".into(),
                name: "disk".into()
            }
        );
        assert_eq!(
            parse_uri("nbd+unix:///?socket=/s").unwrap(),
            Endpoint::Unix {
                socket: "/s".into(),
                name: "".into()
            }
        );
        assert_eq!(
            parse_uri("nbd://127.0.0.1:10810/vol").unwrap(),
            Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 10810,
                name: "vol".into()
            }
        );
        assert_eq!(
            parse_uri("nbd://host").unwrap(),
            Endpoint::Tcp {
                host: "host".into(),
                port: 10809,
                name: "".into()
            }
        );
        assert!(parse_uri("nbd+unix:///disk").is_err());
        assert!(parse_uri("nbd://h:notaport/x").is_err());
        assert!(parse_uri("http://x").is_err());
    }

    /// A minimal in-test server: newstyle, NBD_OPT_GO, RAM-backed, replies out of order
    /// (a reply is held back and sent after the next one) to prove handle matching.
    fn serve_once(listener: std::os::unix::net::UnixListener, size: u64) {
        let (mut s, _) = listener.accept().unwrap();
        let mut disk = vec![0u8; size as usize];
        s.write_all(&NBDMAGIC.to_be_bytes()).unwrap();
        s.write_all(&IHAVEOPT.to_be_bytes()).unwrap();
        s.write_all(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes())
            .unwrap();
        let _cflags = rd_u32(&mut s).unwrap();
        assert_eq!(rd_u64(&mut s).unwrap(), IHAVEOPT);
        assert_eq!(rd_u32(&mut s).unwrap(), OPT_GO);
        let len = rd_u32(&mut s).unwrap();
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d).unwrap();
        let mut info = Vec::new();
        info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        info.extend_from_slice(&size.to_be_bytes());
        info.extend_from_slice(&(1u16 | TFLAG_SEND_FLUSH).to_be_bytes());
        for (typ, data) in [(REP_INFO, info), (REP_ACK, vec![])] {
            s.write_all(&REPLY_MAGIC.to_be_bytes()).unwrap();
            s.write_all(&OPT_GO.to_be_bytes()).unwrap();
            s.write_all(&typ.to_be_bytes()).unwrap();
            s.write_all(&(data.len() as u32).to_be_bytes()).unwrap();
            s.write_all(&data).unwrap();
        }
        let mut held: Option<Vec<u8>> = None;
        loop {
            // Wait briefly for the next request; if none comes, release the held reply.
            s.set_read_timeout(Some(std::time::Duration::from_millis(5)))
                .unwrap();
            let magic = match rd_u32(&mut s) {
                Ok(m) => m,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Some(h) = held.take() {
                        s.write_all(&h).unwrap();
                    }
                    continue;
                }
                Err(_) => return,
            };
            s.set_read_timeout(None).unwrap();
            assert_eq!(magic, REQUEST_MAGIC);
            let _flags = rd_u16(&mut s).unwrap();
            let cmd = rd_u16(&mut s).unwrap();
            let handle = rd_u64(&mut s).unwrap();
            let off = rd_u64(&mut s).unwrap() as usize;
            let len = rd_u32(&mut s).unwrap() as usize;
            let mut reply = Vec::new();
            reply.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
            reply.extend_from_slice(&0u32.to_be_bytes());
            reply.extend_from_slice(&handle.to_be_bytes());
            match cmd {
                CMD_READ => reply.extend_from_slice(&disk[off..off + len]),
                CMD_WRITE => s.read_exact(&mut disk[off..off + len]).unwrap(),
                CMD_FLUSH => {}
                CMD_DISC => return,
                _ => panic!("unexpected command {cmd}"),
            }
            match held.take() {
                None if cmd != CMD_FLUSH => held = Some(reply),
                None => s.write_all(&reply).unwrap(),
                Some(h) => {
                    s.write_all(&reply).unwrap();
                    s.write_all(&h).unwrap();
                }
            }
        }
    }

    #[test]
    fn pipelined_requests_get_their_own_replies() {
        use super::super::target::Target;
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let srv = std::thread::spawn(move || serve_once(l, 1 << 20));
        let c = Arc::new(
            NbdClient::connect(&format!("nbd+unix:///x?socket={}", sock.display())).unwrap(),
        );
        assert_eq!(c.size(), 1 << 20);
        // 8 threads, each writes its own pattern then reads it back; replies are
        // reordered by the server, so a mix-up would show as wrong data.
        let ts: Vec<_> = (0..8u8)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..20u64 {
                        let off = (t as u64 * 20 + i) * 4096;
                        let data = vec![t.wrapping_mul(31).wrapping_add(i as u8) | 1; 4096];
                        c.write(off, &data).unwrap();
                        let mut back = vec![0u8; 4096];
                        c.read(off, &mut back).unwrap();
                        assert_eq!(back, data);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        c.flush().unwrap();
        c.close().unwrap();
        srv.join().unwrap();
        // a closed connection errors instead of hanging
        assert!(c.read(0, &mut [0u8; 512]).is_err());
    }
}
