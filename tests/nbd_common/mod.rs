//! Shared helpers of the NBD integration tests: start and stop `sluice serve`,
//! find external tools (a loud SKIP when one is missing; a failure when env CI is
//! set, so CI never passes a test that did not run), run commands.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// A test that cannot run here: a loud SKIP line, or a panic when env CI is set.
pub fn cannot_run(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test} cannot run: {why} (CI is set: a test that cannot run fails)");
    }
    eprintln!("\n*** SKIP: {test}: {why} ***\n");
}

/// True if `tool` is on PATH; otherwise a visible SKIP line (a panic under CI).
pub fn have(tool: &str, test: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        cannot_run(
            test,
            &format!("`{tool}` is not installed (CI installs it; see docs/nbd.md)"),
        );
    }
    found
}

/// Return early from a test (after a loud SKIP) unless every tool is installed.
#[macro_export]
macro_rules! require_tools {
    ($test:expr, $($tool:expr),+) => {
        if !( true $(&& nbd_common::have($tool, $test))+ ) {
            return;
        }
    };
}

pub struct Server {
    pub child: Child,
    pub sock: PathBuf,
    pub uri: String,
    stderr: Option<std::process::ChildStderr>,
}

impl Server {
    /// `sluice serve --create IMG --size SIZE --socket DIR/nbd.sock EXTRA...`; returns
    /// once the URI is printed (the server is listening).
    pub fn start(dir: &Path, img: &Path, size: &str, extra: &[&str]) -> Server {
        let sock = dir.join("nbd.sock");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg(img)
            .arg("--socket")
            .arg(&sock)
            .args(extra);
        if !extra.contains(&"--read-only") {
            cmd.args(["--create", "--size", size]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut stderr = child.stderr.take();
        if line.is_empty() {
            let mut err = String::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("sluice serve did not start: {err}");
        }
        let uri = line.trim().to_string();
        assert_eq!(uri, format!("nbd+unix:///?socket={}", sock.display()));
        Server {
            child,
            sock,
            uri,
            stderr,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM and wait; returns (exit code, stderr).
    pub fn stop(mut self) -> (Option<i32>, String) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let status = wait_timeout(&mut self.child, Duration::from_secs(60))
            .expect("server did not exit within 60 s of SIGTERM");
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status.code(), err)
    }

    /// SIGKILL (a crash) and wait.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn wait_timeout(c: &mut Child, t: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < t {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Run a command, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

pub fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

/// Deterministic pseudo-random bytes (xorshift), fast enough for hundreds of MiB.
pub fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// Full path of `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}

/// A Command running nbdsh under a python3 that has libnbd's bindings (a pyenv or
/// venv python3 first on PATH usually does not), or None after a loud SKIP (a
/// panic under CI).
pub fn nbdsh(test: &str) -> Option<Command> {
    if which("nbdsh").is_none() {
        cannot_run(test, "`nbdsh` is not installed (apt: libnbd-bin)");
        return None;
    }
    for py in ["python3", "/usr/bin/python3"] {
        let ok = Command::new(py)
            .args(["-c", "import nbd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let mut c = Command::new(py);
            c.args(["-m", "nbd"]); // what the nbdsh wrapper script runs
            return Some(c);
        }
    }
    cannot_run(
        test,
        "no python3 can import libnbd's `nbd` module (apt: python3-libnbd)",
    );
    None
}

/// Connect to a served socket and do a fixed-newstyle handshake with OPT_GO
/// for the default (empty-named) export: the stream is then in the
/// transmission phase, for tests that speak raw NBD requests.
pub fn raw_go(sock: &Path, timeout: Duration) -> std::os::unix::net::UnixStream {
    use sluice::nbd::proto::*;
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut d = 0u32.to_be_bytes().to_vec(); // empty export name
    d.extend_from_slice(&0u16.to_be_bytes());
    let mut o = IHAVEOPT.to_be_bytes().to_vec();
    o.extend_from_slice(&OPT_GO.to_be_bytes());
    o.extend_from_slice(&(d.len() as u32).to_be_bytes());
    o.extend_from_slice(&d);
    s.write_all(&o).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let t = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).unwrap();
        assert!(t & (1 << 31) == 0, "option error {t:#x}");
        if t == REP_ACK {
            return s;
        }
    }
}
