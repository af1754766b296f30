//! Per-connection independence: clients that stall in every way a client can
//! (stop reading replies, half a request header, half a write payload, a
//! handshake never finished or trickled) cost only their own connections; a
//! well-behaved client's 4 KiB READs keep completing promptly meanwhile, and the
//! stallers are dropped after the request timeout. Also: the connection limit
//! answers with a clear refusal, the idle timeout, NBD_CMD_DISC with a nonzero
//! offset (no reply, close), and the memory 1,000 idle connections cost.
//! The stalls are repeated inside TLS (STARTTLS, a rustls client): TLS is done
//! by the connection's own threads, and must keep the same guarantees.
//! Busy clients too: 16 heavy readers, each keeping 32 large READs in flight,
//! must not starve a light client of the shared worker pool.

mod nbd_common;

use nbd_common::Server;
use sluice::nbd::proto::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn connect(sock: &Path) -> UnixStream {
    let s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn option(s: &mut impl Write, opt: u32, data: &[u8]) {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

/// One option reply: (type, payload).
fn option_reply(s: &mut impl Read) -> (u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), REPLY_MAGIC);
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).unwrap();
    (u32::from_be_bytes(h[12..16].try_into().unwrap()), p)
}

/// Greeting, flags, GO "": Ok(stream) ready for requests, or Err(error reply).
fn try_ready(sock: &Path) -> Result<UnixStream, (u32, String)> {
    let mut s = connect(sock);
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(g, greeting());
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut d = 0u32.to_be_bytes().to_vec();
    d.extend_from_slice(&0u16.to_be_bytes());
    option(&mut s, OPT_GO, &d);
    loop {
        let (t, p) = option_reply(&mut s);
        if t == REP_ACK {
            return Ok(s);
        }
        if t & (1 << 31) != 0 {
            return Err((t, String::from_utf8_lossy(&p).into_owned()));
        }
    }
}

fn ready(sock: &Path) -> UnixStream {
    try_ready(sock).expect("handshake")
}

fn request(s: &mut impl Write, cmd: u16, cookie: u64, offset: u64, length: u32) {
    let r = Request {
        flags: 0,
        cmd,
        cookie,
        offset,
        length,
    };
    s.write_all(&r.encode()).unwrap();
}

/// (errno, cookie, data) of a simple reply.
fn simple_reply(s: &mut impl Read, data: usize) -> (u32, u64, Vec<u8>) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(
        u32::from_be_bytes(h[0..4].try_into().unwrap()),
        SIMPLE_REPLY_MAGIC
    );
    let errno = u32::from_be_bytes(h[4..8].try_into().unwrap());
    let mut d = vec![0u8; if errno == 0 { data } else { 0 }];
    s.read_exact(&mut d).unwrap();
    (errno, u64::from_be_bytes(h[8..16].try_into().unwrap()), d)
}

/// 300 scattered 4 KiB READs on `good`, each checked against `data` (the
/// export's first bytes), sent `burst` at a time (one write; the next burst
/// once all its replies are in); returns the slowest one's time from its
/// burst's send to its reply. A burst of 1 is served on the connection's own
/// reader thread; a burst over `MAX_READ_BATCH` (8) goes to the shared pool.
fn slowest_of_300_reads(good: &mut (impl Read + Write), data: &[u8], burst: u64) -> Duration {
    let mut worst = Duration::ZERO;
    let off = |i: u64| (i * 7919 * 4096) % data.len() as u64;
    for first in (0..300u64).step_by(burst as usize) {
        let ids = first..(first + burst).min(300);
        let mut reqs = Vec::new();
        for i in ids.clone() {
            request(&mut reqs, CMD_READ, i, off(i), 4096);
        }
        let t = Instant::now();
        good.write_all(&reqs).unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in ids.clone() {
            let (e, c, d) = simple_reply(good, 4096);
            worst = worst.max(t.elapsed());
            assert_eq!(e, 0);
            assert!(ids.contains(&c) && seen.insert(c), "unexpected cookie {c}");
            assert_eq!(d, &data[off(c) as usize..off(c) as usize + 4096]);
        }
    }
    worst
}

/// True once the server closed `s` (EOF or reset), reading and discarding
/// whatever it still delivers; false if it is still open at `deadline`.
fn closed_by(s: &mut UnixStream, deadline: Instant) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = vec![0u8; 1 << 20];
    while Instant::now() < deadline {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    nbd_common::fill_random(&mut v, seed);
    v
}

#[test]
fn stalled_clients_cost_only_their_own_connections() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let srv = Server::start(
        dir.path(),
        &img,
        "256M",
        &["--request-timeout", "4", "--handshake-timeout", "4"],
    );
    let sock = srv.sock.clone();
    const MIB: usize = 1 << 20;
    let data = pattern(7, 16 * MIB);
    {
        let mut c = ready(&sock);
        for i in 0..16 {
            request(&mut c, CMD_WRITE, i, (i as usize * MIB) as u64, MIB as u32);
            c.write_all(&data[i as usize * MIB..(i as usize + 1) * MIB])
                .unwrap();
            assert_eq!(simple_reply(&mut c, 0).0, 0);
        }
    }

    let mut stallers: Vec<(&str, UnixStream)> = Vec::new();
    for i in 0..16u64 {
        // 1. asks for 16 MiB of READs, never reads a reply
        let mut s = ready(&sock);
        for k in 0..16u64 {
            request(&mut s, CMD_READ, k, ((i + k) % 16) * MIB as u64, MIB as u32);
        }
        stallers.push(("stopped reading replies", s));
        // 2. half a request header
        let mut s = ready(&sock);
        let r = Request {
            flags: 0,
            cmd: CMD_READ,
            cookie: 1,
            offset: 0,
            length: 4096,
        }
        .encode();
        s.write_all(&r[..10]).unwrap();
        stallers.push(("half a request header", s));
        // 3. half a write payload
        let mut s = ready(&sock);
        request(&mut s, CMD_WRITE, 1, 32 * MIB as u64, 65536);
        s.write_all(&[0xa5; 1000]).unwrap();
        stallers.push(("half a write payload", s));
        // 4. a handshake that never finishes (greeting read, flags half sent)
        let mut s = connect(&sock);
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        s.write_all(&[0]).unwrap();
        stallers.push(("unfinished handshake", s));
    }

    // Another client's 4 KiB READs complete promptly meanwhile.
    let mut good = ready(&sock);
    let worst = slowest_of_300_reads(&mut good, &data, 1);
    eprintln!("slowest 4 KiB READ with 64 stalled connections: {worst:?}");
    assert!(
        worst < Duration::from_secs(2),
        "a READ took {worst:?} while other clients stalled"
    );

    // Every staller is dropped after the timeout (4 s here; reading the
    // non-reader's replies earlier would let its connection go on).
    std::thread::sleep(Duration::from_secs(6));
    let deadline = Instant::now() + Duration::from_secs(15);
    for (how, s) in stallers.iter_mut() {
        assert!(
            closed_by(s, deadline),
            "a client that {how} was not dropped"
        );
    }
    // ...and the good client still works.
    request(&mut good, CMD_READ, 999, 0, 4096);
    assert_eq!(simple_reply(&mut good, 4096).2, &data[..4096]);
    drop(good);
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// A well-behaved heavy reader: keeps 32 READs of 256 KiB - 1 MiB (within the
/// first `data.len()` bytes) in flight on its own connection, reading every
/// reply as it comes and asking for the next READ at once, until `stop`;
/// returns the bytes it read. Each reply's first and last 4 KiB are checked.
fn heavy_reader(sock: &Path, seed: u64, data: &[u8], stop: &AtomicBool) -> u64 {
    const DEPTH: u64 = 32;
    let mut s = ready(sock);
    let mut x = seed | 1;
    let mut next = |cookie: u64, s: &mut UnixStream| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (1 + x % 4) << 18; // 256 KiB, 512 KiB, 768 KiB or 1 MiB
        let off = ((x >> 8) % ((data.len() as u64 - len) / 4096 + 1)) * 4096;
        request(s, CMD_READ, cookie, off, len as u32);
        (off as usize, len as usize)
    };
    let mut in_flight = std::collections::HashMap::new();
    for c in 0..DEPTH {
        in_flight.insert(c, next(c, &mut s));
    }
    let (mut cookie, mut bytes) = (DEPTH, 0u64);
    let mut buf = vec![0u8; 1 << 20];
    while !in_flight.is_empty() {
        // An error once `stop` is set: the test failed elsewhere and took the
        // server down.
        let mut h = [0u8; 16];
        if let Err(e) = s.read_exact(&mut h) {
            assert!(stop.load(Ordering::Relaxed), "heavy reader {seed}: {e}");
            return bytes;
        }
        assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0);
        let c = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let (off, len) = in_flight.remove(&c).expect("a reply to a READ in flight");
        if let Err(e) = s.read_exact(&mut buf[..len]) {
            assert!(stop.load(Ordering::Relaxed), "heavy reader {seed}: {e}");
            return bytes;
        }
        assert_eq!(buf[..4096], data[off..off + 4096]);
        assert_eq!(buf[len - 4096..len], data[off + len - 4096..off + len]);
        bytes += len as u64;
        if !stop.load(Ordering::Relaxed) {
            in_flight.insert(cookie, next(cookie, &mut s));
            cookie += 1;
        }
    }
    bytes
}

/// Sets the flag when dropped, also when the test panics.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn heavy_readers_do_not_starve_a_light_one() {
    const MIB: usize = 1 << 20;
    const HEAVY: u64 = 16; // as many as the default pool has workers
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let srv = Server::start(dir.path(), &img, "256M", &[]);
    let sock = srv.sock.clone();
    // 16 MiB written 4 KiB at a time in a shuffled order, as random writes
    // leave a log-structured volume: a 1 MiB READ is then 256 scattered media
    // reads, so the pool's workers (not the clients or the sockets) are what
    // the heavy readers wait for. (Written sequentially, the reads are cheap,
    // each connection's 8 MiB budget runs out first, its read workers find
    // their queue empty and leave the pool, and read workers without the
    // `pool.busy()` yield did not slow the light client: no test of it.)
    let data = Arc::new(pattern(5, 16 * MIB));
    {
        let mut c = ready(&sock);
        let n = data.len() / 4096;
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = 99u64;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        for chunk in order.chunks(64) {
            let mut b = Vec::new();
            for &k in chunk {
                request(&mut b, CMD_WRITE, k as u64, (k * 4096) as u64, 4096);
                b.extend_from_slice(&data[k * 4096..(k + 1) * 4096]);
            }
            c.write_all(&b).unwrap();
            for _ in chunk {
                assert_eq!(simple_reply(&mut c, 0).0, 0);
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let heavy: Vec<_> = (0..HEAVY)
        .map(|i| {
            let (sock, data, stop) = (sock.clone(), data.clone(), stop.clone());
            std::thread::spawn(move || heavy_reader(&sock, i + 1, &data, &stop))
        })
        .collect();
    let stop_guard = SetOnDrop(stop.clone());
    std::thread::sleep(Duration::from_millis(300)); // let them fill the pool

    // The light client: 300 READs one at a time (each served on its own
    // connection's reader thread, so these show only CPU contention), then
    // 300 in bursts of 32 (more than MAX_READ_BATCH: they go to the shared
    // pool's queue, behind the heavy readers' batches: the fairness probe).
    let (tx, rx) = std::sync::mpsc::channel();
    let light = {
        let (sock, data) = (sock.clone(), data.clone());
        std::thread::spawn(move || {
            let mut light = ready(&sock);
            let qd1 = slowest_of_300_reads(&mut light, &data, 1);
            let burst = slowest_of_300_reads(&mut light, &data, 32);
            tx.send((qd1, burst)).unwrap();
        })
    };
    let (qd1, burst) = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the light client's 600 READs were not done after 30 s: starved")
        }
        Err(_) => {
            let e = light.join().unwrap_err();
            let msg = (e.downcast_ref::<String>().map(String::as_str))
                .or(e.downcast_ref::<&str>().copied())
                .unwrap_or("?");
            panic!("the light client failed (a READ unanswered for 20 s: starved?): {msg}");
        }
    };
    eprintln!(
        "slowest light 4 KiB READ beside {HEAVY} heavy readers: {qd1:?} one at a time, \
         {burst:?} in bursts of 32"
    );
    drop(stop_guard);
    let moved: Vec<u64> = heavy.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!(
        "heavy readers read {} MiB in all, the least {} MiB",
        moved.iter().sum::<u64>() >> 20,
        moved.iter().min().unwrap() >> 20
    );
    // The bound is the staller tests': 2 s. Served fairly, a burst waits
    // behind at most one batch (8 READs) of each other read worker queued in
    // the pool: the slowest burst READ measured 0.2-0.4 s on a busy 2-core
    // machine (one at a time: 0.01-0.3 s), so 2 s leaves 5x or more for a
    // loaded CI machine. Unfair service starves instead: with read workers
    // that keep serving their own connection while other jobs wait (no
    // `pool.busy()` yield), a burst got no reply for 20 s.
    for (how, worst) in [("one at a time", qd1), ("in bursts of 32", burst)] {
        assert!(
            worst < Duration::from_secs(2),
            "a light client's READ {how} took {worst:?} beside {HEAVY} heavy readers"
        );
    }
    // The heavy readers were served all along too (not a vacuous pass).
    for (i, m) in moved.iter().enumerate() {
        assert!(
            *m >= 32 * MIB as u64,
            "heavy reader {i} read only {m} bytes"
        );
    }
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn connection_limit_refuses_clearly_and_idle_and_trickle_clients_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let srv = Server::start(
        dir.path(),
        &img,
        "64M",
        &[
            "--shared",
            "2",
            "--idle-timeout",
            "1.5",
            "--handshake-timeout",
            "2",
        ],
    );
    let sock = srv.sock.clone();
    let mut a = ready(&sock);
    let b = ready(&sock);
    match try_ready(&sock) {
        Ok(_) => panic!("a third client was served with --shared 2"),
        Err((t, msg)) => {
            assert_eq!(t, REP_ERR_POLICY);
            assert!(msg.contains("too many connections"), "{msg}");
        }
    }
    drop(b);
    // the server notices b left; a new client is served again
    let t = Instant::now();
    let mut c = loop {
        match try_ready(&sock) {
            Ok(c) => break c,
            Err(_) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("still refused after a client left: {e:?}"),
        }
    };
    // busy client a stays; idle client c is closed after 1.5 s
    for i in 0..8u64 {
        std::thread::sleep(Duration::from_millis(300));
        request(&mut a, CMD_READ, i, 0, 4096);
        assert_eq!(simple_reply(&mut a, 4096).0, 0);
    }
    assert!(closed_by(&mut c, Instant::now() + Duration::from_secs(5)));
    drop(a);
    // A handshake trickled one byte per 0.5 s is cut at the 2 s total deadline.
    let mut t = connect(&sock);
    let mut g = [0u8; 18];
    t.read_exact(&mut g).unwrap();
    let start = Instant::now();
    let mut closed = false;
    let flags = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes();
    let mut bytes = flags.to_vec();
    bytes.extend_from_slice(&IHAVEOPT.to_be_bytes());
    bytes.extend_from_slice(&[0u8; 64]);
    for b in bytes {
        if t.write_all(&[b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        if start.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    assert!(
        closed || closed_by(&mut t, Instant::now() + Duration::from_secs(1)),
        "a trickled handshake outlived its total deadline"
    );
    assert!(start.elapsed() < Duration::from_secs(6));
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn disc_with_nonzero_offset_gets_no_reply_and_closes_after_in_flight_work() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let srv = Server::start(dir.path(), &img, "64M", &[]);
    let mut s = ready(&srv.sock);
    let data = pattern(3, 65536);
    request(&mut s, CMD_WRITE, 1, 0, data.len() as u32);
    s.write_all(&data).unwrap();
    let disc = Request {
        flags: 0,
        cmd: CMD_DISC,
        cookie: 2,
        offset: 4096,
        length: 512,
    };
    s.write_all(&disc.encode()).unwrap();
    let (e, c, _) = simple_reply(&mut s, 0);
    assert_eq!((e, c), (0, 1), "the write before DISC is answered");
    let mut rest = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = s
        .read_to_end(&mut rest)
        .expect("server closes the connection");
    assert_eq!(n, 0, "DISC got a reply: {rest:?}");
    let mut s = ready(&srv.sock);
    request(&mut s, CMD_READ, 3, 0, data.len() as u32);
    assert_eq!(simple_reply(&mut s, data.len()).2, data);
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

fn rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_thousand_idle_connections_cost_under_100_mib() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let srv = Server::start(dir.path(), &img, "64M", &["--shared", "1100"]);
    let before = rss_kib(srv.pid());
    let mut conns = Vec::new();
    for i in 0..1000u64 {
        let mut s = ready(&srv.sock);
        if i % 100 == 0 {
            // a few do some work first
            request(&mut s, CMD_READ, i, 0, 65536);
            assert_eq!(simple_reply(&mut s, 65536).0, 0);
        }
        conns.push(s);
    }
    // one more request on the last, so every connection is past its handshake
    let last = conns.last_mut().unwrap();
    request(last, CMD_READ, 1, 0, 4096);
    assert_eq!(simple_reply(last, 4096).0, 0);
    let during = rss_kib(srv.pid());
    eprintln!(
        "RSS: {} MiB before, {} MiB with 1000 idle connections (+{} KiB each)",
        before / 1024,
        during / 1024,
        (during - before) / 1000
    );
    assert!(
        during.saturating_sub(before) < 100 * 1024,
        "1000 idle connections cost {} MiB",
        (during - before) / 1024
    );
    drop(conns);
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, UnixStream>;

/// A test CA and a server certificate for "localhost" in `dir` (qemu-nbd's
/// layout: ca-cert.pem, server-cert.pem, server-key.pem), made by openssl.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        nbd_common::run(
            std::process::Command::new("openssl")
                .current_dir(dir)
                .args(args),
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&["-keyout", "ca-key.pem", "-out", "ca-cert.pem", "-days", "2"]);
    a.extend_from_slice(&["-subj", "/CN=test CA"]);
    run(&a);
    let mut a = vec!["req"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&[
        "-keyout",
        "server-key.pem",
        "-out",
        "s.csr",
        "-subj",
        "/CN=localhost",
    ]);
    run(&a);
    std::fs::write(
        dir.join("s.ext"),
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "s.csr",
        "-CA",
        "ca-cert.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-out",
        "server-cert.pem",
        "-days",
        "2",
        "-extfile",
        "s.ext",
    ]);
}

fn client_config(dir: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("ca-cert.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    std::sync::Arc::new(cfg)
}

/// Greeting, flags, STARTTLS, the TLS handshake, then GO "" inside TLS.
fn tls_ready(sock: &Path, cfg: &std::sync::Arc<rustls::ClientConfig>) -> Tls {
    let mut s = connect(sock);
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    option(&mut s, OPT_STARTTLS, &[]);
    assert_eq!(option_reply(&mut s).0, REP_ACK);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
    let mut t = rustls::StreamOwned::new(conn, s);
    let mut d = 0u32.to_be_bytes().to_vec();
    d.extend_from_slice(&0u16.to_be_bytes());
    option(&mut t, OPT_GO, &d);
    loop {
        let (k, p) = option_reply(&mut t);
        if k == REP_ACK {
            return t;
        }
        assert_eq!(
            k & (1 << 31),
            0,
            "GO refused: {}",
            String::from_utf8_lossy(&p)
        );
    }
}

/// As `closed_by`, through TLS: the server's close (with or without
/// close_notify) or a reset counts.
fn tls_closed_by(t: &mut Tls, deadline: Instant) -> bool {
    t.sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = vec![0u8; 1 << 20];
    while Instant::now() < deadline {
        match t.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn stalled_tls_clients_cost_only_their_own_connections() {
    require_tools!("nbd_independence", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    make_certs(&pki);
    let cfg = client_config(&pki);
    let img = dir.path().join("vol.img");
    let srv = Server::start(
        dir.path(),
        &img,
        "256M",
        &[
            "--tls",
            "on",
            "--tls-certificates",
            pki.to_str().unwrap(),
            "--request-timeout",
            "4",
        ],
    );
    let sock = srv.sock.clone();
    const MIB: usize = 1 << 20;
    let data = pattern(11, 16 * MIB);
    {
        let mut c = tls_ready(&sock, &cfg);
        for i in 0..16u64 {
            request(&mut c, CMD_WRITE, i, i * MIB as u64, MIB as u32);
            c.write_all(&data[i as usize * MIB..(i as usize + 1) * MIB])
                .unwrap();
            assert_eq!(simple_reply(&mut c, 0), (0, i, vec![]));
        }
    }

    let mut stallers: Vec<(&str, Tls)> = Vec::new();
    for i in 0..8u64 {
        // 1. asks for 16 MiB of READs, never reads a reply
        let mut t = tls_ready(&sock, &cfg);
        for k in 0..16u64 {
            request(&mut t, CMD_READ, k, ((i + k) % 16) * MIB as u64, MIB as u32);
        }
        stallers.push(("stopped reading replies", t));
        // 2. half a request header (a whole TLS record holding 10 bytes)
        let mut t = tls_ready(&sock, &cfg);
        let r = Request {
            flags: 0,
            cmd: CMD_READ,
            cookie: 1,
            offset: 0,
            length: 4096,
        }
        .encode();
        t.write_all(&r[..10]).unwrap();
        stallers.push(("half a request header", t));
        // 3. half a write payload
        let mut t = tls_ready(&sock, &cfg);
        request(&mut t, CMD_WRITE, 1, 32 * MIB as u64, 65536);
        t.write_all(&[0x5a; 1000]).unwrap();
        stallers.push(("half a write payload", t));
        // 4. half a TLS record: its header promises 4 KiB, 100 bytes come
        let mut t = tls_ready(&sock, &cfg);
        let mut rec = vec![23u8, 3, 3, 0x10, 0];
        rec.extend_from_slice(&[0u8; 100]);
        t.sock.write_all(&rec).unwrap();
        stallers.push(("sent half a TLS record", t));
    }

    // Another TLS client's 4 KiB READs complete promptly meanwhile.
    let mut good = tls_ready(&sock, &cfg);
    let worst = slowest_of_300_reads(&mut good, &data, 1);
    eprintln!("slowest 4 KiB READ over TLS with 32 stalled TLS connections: {worst:?}");
    assert!(
        worst < Duration::from_secs(2),
        "a READ took {worst:?} while other clients stalled"
    );

    // Every staller is dropped after the request timeout (4 s).
    std::thread::sleep(Duration::from_secs(6));
    let deadline = Instant::now() + Duration::from_secs(15);
    for (how, t) in stallers.iter_mut() {
        assert!(
            tls_closed_by(t, deadline),
            "a TLS client that {how} was not dropped"
        );
    }
    request(&mut good, CMD_READ, 999, 0, 4096);
    assert_eq!(simple_reply(&mut good, 4096).2, &data[..4096]);
    drop(good);
    let (code, err) = srv.stop();
    assert_eq!(code, Some(0), "{err}");
}
