//! Protocol robustness: a raw client sends malformed and oversized handshakes,
//! options and requests and checks the spec's replies, while a second, well
//! behaved client keeps writing and reading on another connection. Also the
//! read-only export (EPERM) and SIGTERM draining.

mod nbd_common;

use nbd_common::Server;
use sluice::nbd::proto::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Client {
    s: UnixStream,
}

impl Client {
    /// Connect and read the greeting.
    fn connect(sock: &Path) -> Client {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut c = Client { s };
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).unwrap();
        assert_eq!(g, greeting());
        c
    }
    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }
    fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b);
    }
    /// One option reply: (option, type, payload).
    fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), REPLY_MAGIC);
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut p = vec![0u8; len];
        self.s.read_exact(&mut p).unwrap();
        (
            u32::from_be_bytes(h[8..12].try_into().unwrap()),
            u32::from_be_bytes(h[12..16].try_into().unwrap()),
            p,
        )
    }
    /// Replies until ACK or an error; returns the types seen.
    fn replies_until_done(&mut self) -> Vec<u32> {
        let mut v = Vec::new();
        loop {
            let (_, t, _) = self.option_reply();
            v.push(t);
            if t == REP_ACK || t & (1 << 31) != 0 {
                return v;
            }
        }
    }
    fn go(&mut self, name: &str) -> Vec<u32> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        self.option(OPT_GO, &d);
        self.replies_until_done()
    }
    /// Full handshake with simple replies.
    fn ready(sock: &Path) -> Client {
        let mut c = Client::connect(sock);
        c.send(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
        assert_eq!(*c.go("").last().unwrap(), REP_ACK);
        c
    }
    fn request(&mut self, cmd: u16, flags: u16, cookie: u64, offset: u64, length: u32) {
        let r = Request {
            flags,
            cmd,
            cookie,
            offset,
            length,
        };
        self.send(&r.encode());
    }
    /// A simple reply: (errno, cookie), reading `data` bytes after it on success.
    fn simple_reply(&mut self, data: usize) -> (u32, u64, Vec<u8>) {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            SIMPLE_REPLY_MAGIC
        );
        let errno = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let mut d = vec![0u8; if errno == 0 { data } else { 0 }];
        self.s.read_exact(&mut d).unwrap();
        (errno, cookie, d)
    }
    fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) -> u32 {
        self.request(CMD_WRITE, 0, cookie, offset, data.len() as u32);
        self.send(data);
        let (e, c, _) = self.simple_reply(0);
        assert_eq!(c, cookie);
        e
    }
    fn read(&mut self, cookie: u64, offset: u64, len: u32) -> (u32, Vec<u8>) {
        self.request(CMD_READ, 0, cookie, offset, len);
        let (e, c, d) = self.simple_reply(len as usize);
        assert_eq!(c, cookie);
        (e, d)
    }
    /// True if the server closed the connection (EOF) within the timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    nbd_common::fill_random(&mut v, seed);
    v
}

#[test]
fn malformed_and_oversized_input_gets_errors_while_another_client_works() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "64M", &[]);
    let sock = s.sock.clone();

    // The well-behaved client: writes and reads back its own region continuously.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let good = {
        let (sock, stop, done) = (sock.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut c = Client::ready(&sock);
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let off = (32 << 20) + (rounds % 64) * 65536;
                let data = pattern(rounds + 1, 65536);
                assert_eq!(c.write(rounds, off, &data), 0);
                let (e, back) = c.read(rounds, off, 65536);
                assert_eq!(e, 0);
                assert!(back == data, "good client read back wrong data");
                rounds += 1;
                done.store(rounds, Ordering::Relaxed);
            }
            rounds
        })
    };

    // A client that stalls mid-header and stays connected must not block anyone.
    let mut staller = Client::connect(&sock);
    staller.send(&1u32.to_be_bytes());
    let at_stall = done.load(Ordering::Relaxed);
    staller.send(&IHAVEOPT.to_be_bytes()[..5]);

    // Unknown client flags: disconnect.
    let mut c = Client::connect(&sock);
    c.send(&0xffff_ffffu32.to_be_bytes());
    assert!(c.closed_by_server());

    // Bad option magic: disconnect.
    let mut c = Client::connect(&sock);
    c.send(&1u32.to_be_bytes());
    c.send(&[0xde; 16]);
    assert!(c.closed_by_server());

    // Option errors, then a successful GO on the same connection.
    let mut c = Client::connect(&sock);
    c.send(&1u32.to_be_bytes());
    c.option(999, b"");
    assert_eq!(c.option_reply().1, REP_ERR_UNSUP);
    c.option(OPT_LIST, b"x");
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.option(OPT_GO, &[0, 0, 0, 50, b'a']); // name length beyond the payload
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.option(OPT_GO, &[0xff, 0xff, 0xff, 0xff]); // 4 GiB name
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.option(OPT_INFO, &vec![0u8; 100 << 10]); // larger than we read: discarded
    assert_eq!(c.option_reply().1, REP_ERR_TOO_BIG);
    let q = {
        let mut d = 0u32.to_be_bytes().to_vec();
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(&15u32.to_be_bytes());
        d.extend_from_slice(BASE_ALLOCATION.as_bytes());
        d
    };
    c.option(OPT_SET_META_CONTEXT, &q); // before STRUCTURED_REPLY
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    assert_eq!(c.go("no-such-export"), vec![REP_ERR_UNKNOWN]);
    c.option(OPT_LIST, b"");
    assert_eq!(c.replies_until_done(), vec![REP_SERVER, REP_ACK]);
    let go = c.go("");
    assert_eq!(go.last(), Some(&REP_ACK));
    assert!(go.iter().all(|&t| t == REP_INFO || t == REP_ACK), "{go:?}");

    // Transmission-phase errors; the connection stays usable after each.
    c.request(42, 0, 1, 0, 0);
    assert_eq!(c.simple_reply(0).0, EINVAL, "unknown command");
    c.request(CMD_READ, 0, 2, (64 << 20) - 512, 1024);
    assert_eq!(c.simple_reply(0).0, EINVAL, "read beyond the end");
    c.request(CMD_READ, 0, 3, u64::MAX - 10, 4096);
    assert_eq!(c.simple_reply(0).0, EINVAL, "offset overflow");
    c.request(CMD_READ, 0, 4, 0, u32::MAX);
    assert_eq!(c.simple_reply(0).0, EINVAL, "oversized read");
    c.request(CMD_READ, CMD_FLAG_NO_HOLE, 5, 0, 4096);
    assert_eq!(c.simple_reply(0).0, EINVAL, "flag not valid for READ");
    c.request(CMD_BLOCK_STATUS, 0, 6, 0, 4096);
    assert_eq!(c.simple_reply(0).0, EINVAL, "no meta context negotiated");
    let big = vec![0x5au8; (MAX_PAYLOAD + 4096) as usize];
    c.request(CMD_WRITE, 0, 7, 0, big.len() as u32);
    c.send(&big);
    assert_eq!(c.simple_reply(0).0, EINVAL, "oversized write");
    c.request(CMD_WRITE, 0, 8, 64 << 20, 4096);
    c.send(&[1u8; 4096]);
    assert_eq!(c.simple_reply(0).0, EINVAL, "write beyond the end");
    c.request(CMD_FLUSH, 0, 9, 7, 0);
    assert_eq!(c.simple_reply(0).0, EINVAL, "flush with an offset");
    // ... and the oversized write's payload was consumed, not executed.
    let (e, d) = c.read(10, 0, 4096);
    assert_eq!(e, 0);
    assert!(d.iter().all(|&b| b == 0), "rejected write must not land");
    assert_eq!(c.write(11, 4096, &pattern(11, 8192)), 0);
    // Pipelined: several requests before reading any reply; all answered.
    for i in 0..32u64 {
        c.request(CMD_READ, 0, 100 + i, 4096, 8192);
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..32 {
        let (e, cookie, d) = c.simple_reply(8192);
        assert_eq!(e, 0);
        assert_eq!(d, pattern(11, 8192));
        seen.insert(cookie);
    }
    assert_eq!(seen.len(), 32);
    // Bad request magic: the framing is lost, the server hangs up.
    c.send(&[0xab; 28]);
    assert!(c.closed_by_server());

    // Disconnecting in the middle of a write payload loses only that write.
    let mut c = Client::ready(&sock);
    assert_eq!(c.write(1, 8 << 20, &pattern(77, 4096)), 0);
    c.request(CMD_WRITE, 0, 2, 8 << 20, 65536);
    c.send(&[9u8; 1000]);
    drop(c);
    let mut c = Client::ready(&sock);
    let (e, d) = c.read(1, 8 << 20, 4096);
    assert_eq!(e, 0);
    assert_eq!(d, pattern(77, 4096));
    // Garbage after the greeting of many short-lived connections.
    for i in 0..50u8 {
        let mut g = Client::connect(&sock);
        let _ = g.s.write_all(&[i; 64]);
    }

    // The oracle: the good client completes rounds while the staller is still
    // connected mid-header (counted by the client, not guaranteed by its loop).
    let t0 = std::time::Instant::now();
    while done.load(Ordering::Relaxed) < at_stall + 20 && t0.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let during = done.load(Ordering::Relaxed) - at_stall;
    stop.store(true, Ordering::Relaxed);
    let rounds = good.join().expect("the good client failed");
    assert!(
        during >= 20,
        "the good client finished only {during} rounds in 60 s while a client stalled"
    );
    assert!(rounds >= at_stall + during);
    drop(staller);
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn read_only_export_answers_eperm_and_reads_data() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "64M", &[]);
    let mut c = Client::ready(&s.sock);
    assert_eq!(c.write(1, 0, &pattern(5, 4096)), 0);
    drop(c);
    assert_eq!(s.stop().0, Some(0));

    let s = Server::start(dir.path(), &img, "64M", &["--read-only"]);
    let mut c = Client::ready(&s.sock);
    assert_eq!(c.write(1, 0, &[1u8; 512]), EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 4096);
    assert_eq!(c.simple_reply(0).0, EPERM);
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4096);
    assert_eq!(c.simple_reply(0).0, EPERM);
    c.request(CMD_FLUSH, 0, 4, 0, 0);
    assert_eq!(c.simple_reply(0).0, 0);
    let (e, d) = c.read(5, 0, 4096);
    assert_eq!(e, 0);
    assert_eq!(d, pattern(5, 4096));
    drop(c);
    assert_eq!(s.stop().0, Some(0));
}

#[test]
fn sigterm_drains_and_closes_cleanly_then_data_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "64M", &[]);
    let mut c = Client::ready(&s.sock);
    // Pipeline writes, then stop the server before reading the replies: every
    // write the server accepted is answered before it exits.
    for i in 0..64u64 {
        c.request(CMD_WRITE, 0, i, i * 4096, 4096);
        c.send(&pattern(i + 1000, 4096));
    }
    let (e, _, _) = c.simple_reply(0);
    assert_eq!(e, 0);
    let mut term = s;
    let pid = term.pid();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    for _ in 1..64 {
        assert_eq!(c.simple_reply(0).0, 0);
    }
    let status = nbd_common::wait_timeout(&mut term.child, Duration::from_secs(60)).unwrap();
    assert_eq!(status.code(), Some(0));
    drop(term);
    let info = nbd_common::stdout(
        std::process::Command::new(nbd_common::BIN)
            .arg("info")
            .arg(&img),
    );
    assert!(
        info.contains("closed cleanly") && !info.contains("not closed cleanly"),
        "{info}"
    );
    let s = Server::start(dir.path(), &img, "64M", &[]);
    let mut c = Client::ready(&s.sock);
    for i in 0..64u64 {
        let (e, d) = c.read(i, i * 4096, 4096);
        assert_eq!(e, 0);
        assert_eq!(d, pattern(i + 1000, 4096), "block {i}");
    }
    drop(c);
    s.stop();
}

#[test]
fn cli_requires_exactly_one_listener_and_serves_tcp_with_export_name() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let sock = dir.path().join("s.sock");
    let run = |args: &[&str]| {
        std::process::Command::new(nbd_common::BIN)
            .arg("serve")
            .arg(&img)
            .args(args)
            .output()
            .unwrap()
    };
    let both = run(&["--socket", sock.to_str().unwrap(), "--port", "0"]);
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
    let neither = run(&["--create", "--size", "64M"]);
    assert!(!neither.status.success());
    assert!(String::from_utf8_lossy(&neither.stderr).contains("--socket"));
    let missing = run(&["--socket", sock.to_str().unwrap()]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    assert!(!img.exists(), "a failed serve must not create the volume");

    // TCP on a free port, loopback by default, with an export name.
    let mut child = std::process::Command::new(nbd_common::BIN)
        .arg("serve")
        .arg(&img)
        .args(["--create", "--size", "64M", "--port", "0", "-x", "disk"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let uri = line.trim().to_string();
    let rest = uri
        .strip_prefix("nbd://127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected URI {uri}"));
    let (port, name) = rest.split_once('/').unwrap();
    assert_eq!(name, "disk");
    let s = std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut s = s;
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(g, greeting());
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    // EXPORT_NAME "disk": size (8) + flags (2), no zeroes.
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    opt.extend_from_slice(&4u32.to_be_bytes());
    opt.extend_from_slice(b"disk");
    s.write_all(&opt).unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).unwrap();
    assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), 64 << 20);
    let tflags = u16::from_be_bytes(r[8..10].try_into().unwrap());
    assert_ne!(tflags & TFLAG_CAN_MULTI_CONN, 0);
    assert_eq!(tflags & TFLAG_READ_ONLY, 0);
    drop(s);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = nbd_common::wait_timeout(&mut child, Duration::from_secs(60)).unwrap();
    assert_eq!(st.code(), Some(0));
}
