//! A FUA WRITE or a FLUSH is answered only once what it covers is durable
//! (docs/nbd.md, "Threads, ordering and durability"), on every path the
//! server has for it: a FUA WRITE alone (the reader runs it), one pipelined
//! behind a batch of WRITEs (the pool runs it), a FLUSH alone and one
//! pipelined behind WRITEs.
//!
//! The server runs in process over a volume on a `GatedMedia`: its durable
//! image is what the media held when the last completed flush *started*
//! (what a power cut keeps), and every flush waits at a gate the test opens
//! one at a time, only while no reply is waiting to be read. So a reply sent
//! before the flush it needs is read while that flush is still held, and
//! the durable image then lacks the data: deterministic, no timing. At each
//! FUA or FLUSH reply the test mounts a copy of the durable image and reads
//! back every write that reply covers. In process, so no root, FUSE or
//! nbdkit (tests/volatile_cache.rs checks the same rule through a real power
//! cut of the whole stack). Mutations killed: `nbd-drops-fua`,
//! `write-batch-takes-fua`, `nbd-flush-skipped` (scripts/mutants.sh).

mod common;
mod nbd_common;

use common::{det_open, small_create};
use parking_lot::{Condvar, Mutex};
use sluice::media::{Media, MemMedia};
use sluice::nbd::proto::*;
use sluice::nbd::{Export, Listener, Server, ServerConfig};
use sluice::Volume;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Flushes wait here while the gate is shut, until the test lets one through.
#[derive(Default)]
struct Gate {
    shut: bool,
    /// Flushes waiting at the gate.
    held: u32,
    /// Flushes the test let through and that have not taken their turn yet.
    passes: u32,
    /// What a power cut would keep: the image as of the start of the last
    /// completed flush.
    durable: Vec<u8>,
}

struct GatedMedia {
    inner: MemMedia,
    gate: Mutex<Gate>,
    cv: Condvar,
}

impl GatedMedia {
    fn shut(&self, shut: bool) {
        self.gate.lock().shut = shut;
        self.cv.notify_all();
    }
    fn held(&self) -> u32 {
        self.gate.lock().held
    }
    fn let_one_through(&self) {
        self.gate.lock().passes += 1;
        self.cv.notify_all();
    }
    fn durable(&self) -> Vec<u8> {
        self.gate.lock().durable.clone()
    }
}

impl Media for GatedMedia {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        // durable: every write that returned before this call
        let image = self.inner.image();
        let mut g = self.gate.lock();
        g.held += 1;
        self.cv.notify_all();
        while g.shut && g.passes == 0 {
            self.cv.wait(&mut g);
        }
        g.passes = g.passes.saturating_sub(1);
        g.held -= 1;
        g.durable = image;
        self.cv.notify_all();
        Ok(())
    }
    fn describe(&self) -> String {
        "gated memory".into()
    }
}

/// A minimal NBD client: fixed newstyle handshake, then raw requests.
struct Client(UnixStream);

impl Client {
    fn connect(sock: &Path) -> Client {
        Client(nbd_common::raw_go(sock, Duration::from_secs(60)))
    }

    /// A reply is waiting to be read (within `ms`).
    fn readable(&self, ms: i32) -> bool {
        use std::os::unix::io::AsRawFd;
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }
}

/// One request of a test round: `cmd` (WRITE or FLUSH), `flags`, where and what.
struct Req {
    cmd: u16,
    flags: u16,
    offset: u64,
    data: Vec<u8>,
}

fn write(flags: u16, offset: u64, seed: u8) -> Req {
    let data = (0..8192)
        .map(|i: usize| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect();
    Req {
        cmd: CMD_WRITE,
        flags,
        offset,
        data,
    }
}

fn flush() -> Req {
    Req {
        cmd: CMD_FLUSH,
        flags: 0,
        offset: 0,
        data: Vec::new(),
    }
}

/// The request answers only once durable: a FUA WRITE, or a FLUSH.
fn durable_reply(r: &Req) -> bool {
    r.cmd == CMD_FLUSH || r.flags & CMD_FLAG_FUA != 0
}

/// Send `reqs` in one socket write (the server finds them pipelined), then
/// read every reply, letting one held flush through at a time while no
/// reply is waiting. At each FUA WRITE's or FLUSH's reply, the durable image
/// must hold what it covers: a FUA WRITE its own data; a FLUSH every WRITE
/// sent before it (`covered`, from earlier rounds, plus this round's).
fn round(c: &mut Client, media: &GatedMedia, covered: &mut Vec<(u64, Vec<u8>)>, reqs: &[Req]) {
    let mut out = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let q = Request {
            flags: r.flags,
            cmd: r.cmd,
            cookie: i as u64,
            offset: r.offset,
            length: r.data.len() as u32,
        };
        out.extend_from_slice(&q.encode());
        out.extend_from_slice(&r.data);
    }
    c.0.write_all(&out).unwrap();
    let mut left = reqs.len();
    while left > 0 {
        if !c.readable(10) {
            if media.held() > 0 {
                // nothing answered yet: the held flush may finish
                media.let_one_through();
            }
            continue;
        }
        let mut h = [0u8; 16];
        c.0.read_exact(&mut h).unwrap();
        let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap()) as usize;
        let r = &reqs[cookie];
        assert_eq!(err, 0, "request {cookie} (command {}) failed", r.cmd);
        left -= 1;
        if !durable_reply(r) {
            continue;
        }
        let must: Vec<(u64, Vec<u8>)> = if r.cmd == CMD_FLUSH {
            let mut m = covered.clone();
            m.extend(
                reqs[..cookie]
                    .iter()
                    .filter(|w| w.cmd == CMD_WRITE)
                    .map(|w| (w.offset, w.data.clone())),
            );
            m
        } else {
            vec![(r.offset, r.data.clone())]
        };
        // a power cut now: mount what the media made durable
        let image = media.durable();
        let cut = Volume::open(Arc::new(MemMedia::from_image(image)), &det_open(1 << 40))
            .expect("the durable image mounts");
        for (off, want) in &must {
            let mut got = vec![0u8; want.len()];
            cut.read(*off, &mut got).unwrap();
            assert!(
                got == *want,
                "request {cookie} (command {}, flags {:#x}) was answered before the write at {off} was durable",
                r.cmd,
                r.flags
            );
        }
    }
    covered.extend(
        reqs.iter()
            .filter(|w| w.cmd == CMD_WRITE)
            .map(|w| (w.offset, w.data.clone())),
    );
}

#[test]
fn fua_writes_and_flushes_are_answered_only_once_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (create, bytes) = small_create(1024, 0.25);
    let media = Arc::new(GatedMedia {
        inner: MemMedia::new(bytes),
        gate: Mutex::new(Gate::default()),
        cv: Condvar::new(),
    });
    let vol = Arc::new(
        Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap(),
    );
    let export = Export {
        name: String::new(),
        description: "gated".into(),
        vol: vol.clone(),
        read_only: false,
        recorder: None,
    };
    let server = Server::new(vec![export], ServerConfig::default()).unwrap();
    let sock = dir.path().join("s.sock");
    let listener = Listener::Unix(UnixListener::bind(&sock).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (s, st) = (server.clone(), stop.clone());
    let serving = std::thread::spawn(move || s.run(listener, &st));

    let mut c = Client::connect(&sock);
    media.shut(true);
    let mut covered = Vec::new();
    let bs = 8192u64;
    // a FUA WRITE alone: the reader runs it
    round(&mut c, &media, &mut covered, &[write(CMD_FLAG_FUA, 0, 1)]);
    // WRITEs answered, then a FLUSH alone: it covers them
    round(
        &mut c,
        &media,
        &mut covered,
        &(0..4)
            .map(|i| write(0, (8 + i) * bs, 10 + i as u8))
            .collect::<Vec<_>>(),
    );
    round(&mut c, &media, &mut covered, &[flush()]);
    // a FUA WRITE pipelined behind WRITEs (appended as one batch): never in
    // that batch, answered after its flush
    let mut reqs: Vec<Req> = (0..4)
        .map(|i| write(0, (16 + i) * bs, 20 + i as u8))
        .collect();
    reqs.push(write(CMD_FLAG_FUA, 24 * bs, 30));
    round(&mut c, &media, &mut covered, &reqs);
    // a FLUSH pipelined behind WRITEs: the spec asks it to cover only the
    // WRITEs answered before it was sent, but sluice's reader appends the
    // ones received before it in order, so it covers those too (checked)
    let mut reqs: Vec<Req> = (0..4)
        .map(|i| write(0, (32 + i) * bs, 40 + i as u8))
        .collect();
    reqs.push(flush());
    round(&mut c, &media, &mut covered, &reqs);

    media.shut(false);
    drop(c);
    stop.store(true, Ordering::Release);
    serving.join().unwrap().unwrap();
}
