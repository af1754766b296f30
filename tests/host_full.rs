//! A full host file system under a sparse volume (issue 17, finding 9), on a
//! real file system: a small tmpfs mounted for the test (root only; CI runs as
//! root, and under CI=1 a test that cannot mount fails instead of passing).
//!
//! What must hold: the write that finds the file system full stops the volume
//! with ENOSPC (from the error's errno, not its text); flushed data still reads
//! back; every later write answers ENOSPC; `stats` and the metrics say failed;
//! a restart while the file system is still full mounts and checkpoints (the
//! metadata area was allocated at create: no hole to fill); after space is
//! freed, every flushed write is there and the volume takes writes again.
//! Also: space freed by GC goes back to the host (punched holes).

use sluice::media::{FileMedia, Media};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const BS: usize = 4096;

/// A tmpfs of `size` bytes mounted on a fresh temp dir, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// None when this process cannot mount (not root, no CAP_SYS_ADMIN): the
    /// caller fails under CI and returns otherwise.
    fn mount(size: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}")])
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn need_tmpfs(size: u64) -> Option<Tmpfs> {
    match Tmpfs::mount(size) {
        Some(t) => Some(t),
        None if std::env::var_os("CI").is_some() => {
            panic!("CI: this test needs to mount a tmpfs (run as root)")
        }
        None => {
            eprintln!("host_full: cannot mount a tmpfs here (not root?); not run");
            None
        }
    }
}

/// Block `i`'s content: distinct per block and never all-zero/all-0xFF.
fn block(i: u64, round: u8) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (k, x) in b.iter_mut().enumerate() {
        *x = (i as usize * 31 + k * 7 + round as usize) as u8 | 1;
    }
    b[..8].copy_from_slice(&i.to_le_bytes());
    b
}

fn det() -> OpenOptions {
    OpenOptions {
        background: false,
        checkpoint_interval_bytes: Some(1 << 40),
        ..Default::default()
    }
}

fn open(path: &Path) -> sluice::Result<Volume> {
    let media: Arc<dyn Media> = Arc::new(FileMedia::open(path, false)?);
    Volume::open(media, &det())
}

fn st_blocks_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_full_host_file_system_stops_writes_keeps_reads_and_restarts() {
    let Some(fs) = need_tmpfs(24 * MIB) else {
        return;
    };
    let path = fs.path("v.img");
    let filler = fs.path("filler");
    // room to free later
    std::fs::write(&filler, vec![1u8; 4 * MIB as usize]).unwrap();
    let create = CreateOptions {
        logical_bytes: Some(48 * MIB),
        overprovision: 0.2,
        segment_bytes: MIB,
        ..Default::default()
    };
    let geo_bytes = {
        let g = sluice::geometry::Geometry::for_logical(48 * MIB / 4096, 256, 0.2);
        g.media_bytes()
    };
    let media: Arc<dyn Media> = Arc::new(FileMedia::create(&path, geo_bytes).unwrap());
    let vol = Arc::new(Volume::create(media, &create, &det()).unwrap());
    assert!(
        geo_bytes > 24 * MIB,
        "the volume is larger than its file system"
    );

    // Write distinct blocks, flushing every 32, until the file system is full.
    let mut flushed = 0u64; // blocks 0..flushed are durable
    let mut err = None;
    for i in 0..(48 * MIB / BS as u64) {
        if let Err(e) = vol.write(i * BS as u64, &block(i, 0), false) {
            err = Some(e);
            break;
        }
        if (i + 1) % 32 == 0 {
            match vol.flush() {
                Ok(()) => flushed = i + 1,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
    }
    let err = err.expect("a 48 MiB volume on a 24 MiB tmpfs must run out of host space");
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(
        flushed > 256,
        "some data was flushed before the fs filled: {flushed}"
    );
    // stopped, visibly
    let st = vol.stats();
    assert!(st.failed, "stats show the stop");
    assert!(sluice::metrics::render(
        &[sluice::metrics::Export {
            name: String::new(),
            path: path.clone(),
            vol: vol.clone(),
        }],
        &[0.0],
        sluice::metrics::enable()
    )
    .contains("\nsluice_volume_failed{export=\"\"} 1\n"));
    // every change answers ENOSPC, not EIO and not success
    for r in [
        vol.write(0, &block(0, 9), false),
        vol.flush(),
        vol.trim(0, BS as u64, false),
        vol.write_zeroes(0, BS as u64, false, false),
    ] {
        assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    }
    // flushed data reads back (the ENOSPC of today's code was on reads too)
    let mut buf = vec![0u8; BS];
    for i in (0..flushed).step_by(7) {
        vol.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i, 0), "block {i}");
    }
    drop(vol);

    // Restart with the file system still full: mounts, checkpoints, reads.
    let vol = open(&path).expect("a restart on a full host fs must mount");
    vol.checkpoint()
        .expect("a checkpoint needs no new host space");
    for i in (0..flushed).step_by(5) {
        vol.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i, 0), "block {i} after a restart on a full fs");
    }
    drop(vol);

    // Free space: the volume takes writes again and keeps everything flushed.
    std::fs::remove_file(&filler).unwrap();
    let vol = open(&path).unwrap();
    vol.write(0, &block(0, 1), true).unwrap();
    vol.close().unwrap();
    drop(vol);
    let vol = open(&path).unwrap();
    assert!(vol.mount_report().clean);
    vol.read(0, &mut buf).unwrap();
    assert_eq!(buf, block(0, 1));
    for i in 1..flushed {
        vol.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i, 0), "block {i} after space was freed");
    }
}

/// A volume of `logical` bytes in 256 KiB segments (25% over-provisioning)
/// on a new file at `path`, and its geometry.
fn small_volume(
    path: &Path,
    logical: u64,
    opts: &OpenOptions,
) -> (Volume, sluice::geometry::Geometry) {
    let create = CreateOptions {
        logical_bytes: Some(logical),
        overprovision: 0.25,
        segment_bytes: 256 * 1024,
        ..Default::default()
    };
    let g = sluice::geometry::Geometry::for_logical(logical / 4096, 64, 0.25);
    let media: Arc<dyn Media> = Arc::new(FileMedia::create(path, g.media_bytes()).unwrap());
    (Volume::create(media, &create, opts).unwrap(), g)
}

/// Segments GC frees are punched out of the file (never their first block),
/// and the volume's data stays intact; with discard off nothing is punched.
#[test]
fn gc_gives_freed_segments_back_to_the_host() {
    let Some(fs) = need_tmpfs(64 * MIB) else {
        return;
    };
    for discard in [true, false] {
        let path = fs.path(&format!("v-{discard}.img"));
        let logical = 8 * MIB;
        let opts = OpenOptions { discard, ..det() };
        let (vol, g) = small_volume(&path, logical, &opts);
        let n = logical / BS as u64;
        // fill, then trim most of it and overwrite the rest: GC empties segments
        for round in 0..3u8 {
            for i in 0..n {
                vol.write(i * BS as u64, &block(i, round), false).unwrap();
            }
            vol.flush().unwrap();
        }
        vol.trim(0, logical - 64 * BS as u64, false).unwrap();
        vol.flush().unwrap();
        vol.gc_until_free(g.segment_count).unwrap();
        vol.housekeeper_step().unwrap();
        let st = vol.stats();
        let used = st_blocks_bytes(&path);
        if discard {
            assert!(st.discarded_bytes > 0, "GC freed segments: {st:?}");
            // what is left on the host is well below the segment area
            assert!(
                used < g.media_bytes() / 2,
                "host space {used} of {} after trimming nearly everything",
                g.media_bytes()
            );
        } else {
            assert_eq!(st.discarded_bytes, 0);
            assert!(used > g.media_bytes() / 2, "nothing punched: {used}");
        }
        let mut buf = vec![0u8; BS];
        for i in (n - 64)..n {
            vol.read(i * BS as u64, &mut buf).unwrap();
            assert_eq!(buf, block(i, 2), "block {i}");
        }
        vol.close().unwrap();
        drop(vol);
        let vol = open(&path).unwrap();
        for i in (n - 64)..n {
            vol.read(i * BS as u64, &mut buf).unwrap();
            assert_eq!(buf, block(i, 2), "block {i} after reopen");
        }
        vol.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "trimmed reads as zeros");
    }
}

/// With the shipped threads, a trim followed by silence gives the space back
/// by itself (the housekeeper's idle pass), with no further writes, barrier or
/// close; with discard off nothing is punched.
#[test]
fn an_idle_volume_gives_trimmed_space_back() {
    let Some(fs) = need_tmpfs(64 * MIB) else {
        return;
    };
    for discard in [true, false] {
        let path = fs.path(&format!("idle-{discard}.img"));
        let logical = 8 * MIB;
        let opts = OpenOptions {
            discard,
            background: true,
            ..Default::default()
        };
        let (vol, _) = small_volume(&path, logical, &opts);
        let n = logical / BS as u64;
        for i in 0..n {
            vol.write(i * BS as u64, &block(i, 0), false).unwrap();
        }
        vol.flush().unwrap();
        let full = st_blocks_bytes(&path);
        vol.trim(0, logical, false).unwrap();
        vol.flush().unwrap();
        // a liveness deadline, not a speed test: the idle pass starts after
        // one second without writes
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut used = st_blocks_bytes(&path);
        while discard && used > full / 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            used = st_blocks_bytes(&path);
        }
        if discard {
            assert!(
                used <= full / 2,
                "host space {used} of {full} 20 s after trimming everything"
            );
        } else {
            std::thread::sleep(std::time::Duration::from_millis(2500));
            assert_eq!(vol.stats().discarded_bytes, 0);
        }
        let mut buf = vec![0u8; BS];
        vol.read(0, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "trimmed reads as zeros");
        vol.close().unwrap();
    }
}

/// The same through `sluice serve` (black box, as the finding was found): on a
/// full host fs the server answers writes with ENOSPC, keeps answering reads
/// of flushed data, `/metrics` shows `sluice_volume_failed 1`, the log says why
/// exactly once, and a restart on the still-full fs serves the data.
#[test]
fn a_served_volume_on_a_full_host_fs_keeps_reading_and_says_why_once() {
    use sluice::bench::nbd_client::NbdClient;
    use sluice::bench::target::Target;
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    const BIN: &str = env!("CARGO_BIN_EXE_sluice");
    let Some(fs) = need_tmpfs(24 * MIB) else {
        return;
    };
    let dir = fs.dir.path().to_path_buf();
    let serve = |log: Arc<Mutex<Vec<String>>>| {
        let mut child = Command::new(BIN)
            .args([
                "serve", "--create", "v.img", "--size", "48M", "--socket", "s.sock",
            ])
            .args(["--metrics", "127.0.0.1:0"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(rest) = l.strip_prefix("sluice: metrics at http://") {
                    let _ = tx.send(rest.trim_end_matches("/metrics").to_string());
                }
                log.lock().unwrap().push(l);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server never printed its metrics address");
        let sock = dir.join("s.sock");
        let t0 = Instant::now();
        while !sock.exists() {
            assert!(t0.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(20));
        }
        let uri = format!("nbd+unix:///?socket={}", sock.display());
        (child, uri, addr)
    };
    let stop = |mut child: std::process::Child| {
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let _ = child.wait();
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (child, uri, addr) = serve(log.clone());
    let c = NbdClient::connect(&uri).unwrap();
    let mut flushed = 0u64;
    let mut err = None;
    'fill: for i in 0..(48 * MIB / BS as u64) {
        if let Err(e) = c.write(i * BS as u64, &block(i, 0)) {
            err = Some(e.to_string());
            break;
        }
        if (i + 1) % 32 == 0 {
            match c.flush() {
                Ok(()) => flushed = i + 1,
                Err(e) => {
                    err = Some(e.to_string());
                    break 'fill;
                }
            }
        }
    }
    let err = err.expect("48 MiB on a 24 MiB tmpfs must fill it");
    assert!(
        err.contains("server error 28"),
        "ENOSPC over the wire: {err}"
    );
    assert!(flushed > 256, "{flushed}");
    let e = c
        .write(0, &block(0, 9))
        .and_then(|_| c.flush())
        .unwrap_err();
    assert!(e.to_string().contains("server error 28"), "{e}");
    let mut buf = vec![0u8; BS];
    for i in (0..flushed).step_by(11) {
        c.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i, 0), "block {i} over NBD after the stop");
    }
    let m = sluice::metrics::http::fetch(&addr).unwrap();
    assert!(m.contains("\nsluice_volume_failed{export=\"\"} 1\n"), "{m}");
    drop(c);
    stop(child);
    let lines = log.lock().unwrap().clone();
    // the engine's error line, once (not once per refused request); the CLI
    // may still report at exit that the close could not be clean
    let why: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("ERROR") && l.contains("volume stopped"))
        .collect();
    assert_eq!(why.len(), 1, "one line says why: {lines:#?}");
    assert!(why[0].contains("No space left"), "{}", why[0]);

    // restart on the still-full fs: it mounts and serves the flushed data
    let (child, uri, _) = serve(Arc::new(Mutex::new(Vec::new())));
    let c = NbdClient::connect(&uri).unwrap();
    for i in (0..flushed).step_by(13) {
        c.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i, 0), "block {i} after a restart on a full fs");
    }
    drop(c);
    stop(child);
}

/// On a block device that advertises discard (a loop device over a file),
/// `FileMedia::discard` issues BLKDISCARD: the loop driver punches the range
/// out of its backing file, and the block before the range is untouched.
#[test]
fn blkdiscard_reaches_a_loop_device() {
    use sluice::media::AlignedBuf;
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_string(),
        _ if std::env::var_os("CI").is_some() => panic!("CI: this test needs losetup (root)"),
        _ => {
            eprintln!("host_full: no loop device here; not run");
            return;
        }
    };
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _detach = Detach(dev.clone());
    let media = FileMedia::open(Path::new(&dev), false).unwrap();
    assert!(media.is_block_device());
    let mut buf = AlignedBuf::new(2 * MIB as usize);
    for (i, b) in buf.chunks_mut(BS).enumerate() {
        b.fill(i as u8 | 1);
    }
    media.write_at(&buf, MIB).unwrap();
    media.flush().unwrap();
    let before = std::fs::metadata(&backing).unwrap().blocks() * 512;
    assert!(before >= 2 * MIB, "{before}");
    // a segment of 2 MiB at 1 MiB: everything but its first block
    assert!(
        media.discard(MIB + BS as u64, 2 * MIB - BS as u64).unwrap(),
        "a loop device advertises discard"
    );
    media.flush().unwrap();
    let after = std::fs::metadata(&backing).unwrap().blocks() * 512;
    assert!(
        after <= before - MIB,
        "BLKDISCARD punched the backing file: {before} -> {after}"
    );
    let mut first = AlignedBuf::new(BS);
    media.read_at(&mut first, MIB).unwrap();
    assert!(first.iter().all(|&b| b == 1), "the first block stays");
}
