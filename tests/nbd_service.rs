//! Service conventions of `sluice serve`: bind before mount (a bad socket path
//! or a busy port leaves the volume untouched and clean), SIGHUP drains and
//! closes like SIGTERM, several exports from one server (selected by name,
//! listed by NBD_OPT_LIST, or from a `--config` file), `--fork` with `--pid-file`, readiness notification
//! (NOTIFY_SOCKET) and systemd socket activation (LISTEN_FDS).

mod nbd_common;

use nbd_common::BIN;
use std::io::{BufRead, BufReader};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn create(img: &Path, size: &str) {
    nbd_common::run(
        Command::new(BIN)
            .arg("create")
            .arg(img)
            .args(["--size", size]),
    );
}

fn is_clean(img: &Path) -> bool {
    let info = nbd_common::stdout(Command::new(BIN).arg("info").arg(img));
    info.contains("closed cleanly") && !info.contains("not closed cleanly")
}

fn term(pid: i32, sig: i32) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid, sig) };
}

/// Write `data` to the export at `uri` with nbdcopy, read it back, compare.
fn roundtrip(uri: &str, dir: &Path, seed: u64) {
    let mut data = vec![0u8; 1 << 20];
    nbd_common::fill_random(&mut data, seed);
    let src = dir.join(format!("in{seed}.bin"));
    let out = dir.join(format!("out{seed}.bin"));
    std::fs::write(&src, &data).unwrap();
    nbd_common::run(Command::new("nbdcopy").arg(&src).arg(uri));
    // read the export back
    nbd_common::run(Command::new("nbdcopy").arg(uri).arg(&out));
    let back = std::fs::read(&out).unwrap();
    assert_eq!(&back[..data.len()], &data[..], "data through {uri}");
}

#[test]
fn bind_before_mount_leaves_the_volume_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let out = Command::new(BIN)
        .arg("serve")
        .arg(&img)
        .args(["--socket", "/nonexistent-dir/x/s.sock"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("binding"));
    assert!(is_clean(&img), "a bad socket path touched the volume");
    // a busy port
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = Command::new(BIN)
        .arg("serve")
        .arg(&img)
        .args(["--port", &port])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(is_clean(&img), "a busy port touched the volume");
}

#[test]
fn sighup_and_sigint_drain_and_close_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for (i, sig) in [libc::SIGHUP, libc::SIGINT, libc::SIGUSR1]
        .into_iter()
        .enumerate()
    {
        let img = dir.path().join(format!("v{i}.img"));
        let s = nbd_common::Server::start(dir.path(), &img, "64M", &[]);
        let mut s = s;
        term(s.pid(), sig);
        let st = nbd_common::wait_timeout(
            &mut s.child,
            Duration::from_secs(if sig == libc::SIGUSR1 { 1 } else { 30 }),
        );
        if sig == libc::SIGUSR1 {
            assert!(st.is_none(), "SIGUSR1 ended the server");
            let (code, _) = s.stop();
            assert_eq!(code, Some(0));
        } else {
            assert_eq!(st.and_then(|s| s.code()), Some(0), "signal {sig}");
            drop(s);
        }
        assert!(is_clean(&img), "signal {sig}: not closed cleanly");
    }
}

#[test]
fn several_exports_selected_by_name_and_listed() {
    require_tools!("several_exports", "nbdinfo", "nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    create(&a, "64M");
    create(&b, "128M");
    let sock = dir.path().join("s.sock");
    let mut child = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&sock)
        .arg(format!("--export=alpha={}", a.display()))
        .arg(format!("--export=beta={}", b.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        format!("nbd+unix:///alpha?socket={}", sock.display())
    );
    let list = nbd_common::stdout(
        Command::new("nbdinfo")
            .arg("--list")
            .arg(format!("nbd+unix://?socket={}", sock.display())),
    );
    assert!(list.contains("alpha") && list.contains("beta"), "{list}");
    let size = |name: &str| {
        nbd_common::stdout(
            Command::new("nbdinfo")
                .arg("--size")
                .arg(format!("nbd+unix:///{name}?socket={}", sock.display())),
        )
        .trim()
        .parse::<u64>()
        .unwrap()
    };
    let (sa, sb) = (size("alpha"), size("beta"));
    assert!(sa < sb, "exports not told apart: {sa} {sb}");
    assert_eq!(size(""), sa, "the empty name selects the first export");
    let bad = Command::new("nbdinfo")
        .arg(format!("nbd+unix:///gamma?socket={}", sock.display()))
        .output()
        .unwrap();
    assert!(!bad.status.success(), "an unknown export was served");
    roundtrip(
        &format!("nbd+unix:///alpha?socket={}", sock.display()),
        dir.path(),
        1,
    );
    roundtrip(
        &format!("nbd+unix:///beta?socket={}", sock.display()),
        dir.path(),
        2,
    );
    term(child.id() as i32, libc::SIGTERM);
    let st = nbd_common::wait_timeout(&mut child, Duration::from_secs(30)).unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(is_clean(&a) && is_clean(&b));
}

#[test]
fn exports_from_a_config_file() {
    require_tools!("exports_from_a_config_file", "nbdinfo", "nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.img"),
        dir.path().join("b.img"),
        dir.path().join("c.img"),
    );
    create(&a, "64M");
    create(&b, "128M");
    create(&c, "32M");
    let conf = dir.path().join("exports.toml");
    // b by a path relative to the file's directory, c read-only
    std::fs::write(
        &conf,
        format!(
            "# test exports\n[[export]]\nname = \"alpha\"\npath = \"{}\"\n\n\
             [[export]]\nname = \"beta\"\npath = \"b.img\"\ndescription = \"the second one\"\n\n\
             [[export]]\nname = \"gamma\"\npath = \"{}\"\nread_only = true\n",
            a.display(),
            c.display()
        ),
    )
    .unwrap();
    let sock = dir.path().join("s.sock");
    let mut child = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&sock)
        .arg("--config")
        .arg(&conf)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        format!("nbd+unix:///alpha?socket={}", sock.display())
    );
    let uri = |name: &str| format!("nbd+unix:///{name}?socket={}", sock.display());
    let list = nbd_common::stdout(
        Command::new("nbdinfo")
            .arg("--list")
            .arg(format!("nbd+unix://?socket={}", sock.display())),
    );
    for want in ["alpha", "beta", "gamma", "the second one"] {
        assert!(list.contains(want), "{want} missing from:\n{list}");
    }
    let info =
        |name: &str| nbd_common::stdout(Command::new("nbdinfo").arg("--json").arg(uri(name)));
    let (ia, ib, ic) = (info("alpha"), info("beta"), info("gamma"));
    assert!(ia.contains("\"export-size\": 67108864"), "{ia}");
    assert!(ib.contains("\"export-size\": 134217728"), "{ib}");
    assert!(ia.contains("\"is_read_only\": false"), "{ia}");
    assert!(ic.contains("\"is_read_only\": true"), "{ic}");
    roundtrip(&uri("alpha"), dir.path(), 3);
    roundtrip(&uri("beta"), dir.path(), 4);
    let src = dir.path().join("in3.bin");
    let w = Command::new("nbdcopy")
        .arg(&src)
        .arg(uri("gamma"))
        .output()
        .unwrap();
    assert!(
        !w.status.success(),
        "a write to the read-only export succeeded"
    );
    term(child.id() as i32, libc::SIGTERM);
    let st = nbd_common::wait_timeout(&mut child, Duration::from_secs(30)).unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(is_clean(&a) && is_clean(&b) && is_clean(&c));

    // A name both on the command line and in the file is refused.
    let out = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&sock)
        .arg(format!("--export=beta={}", a.display()))
        .arg("--config")
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("\"beta\"") && err.contains("also given on the command line"),
        "{err}"
    );
    assert!(is_clean(&a), "a refused start touched a volume");

    // A bad file names itself and the line, and nothing is served.
    std::fs::write(
        &conf,
        "[[export]]\nname = \"x\"\npath = \"a.img\"\nreadonly = true\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(&sock)
        .arg("--config")
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: line 4:", conf.display())) && err.contains("readonly"),
        "{err}"
    );
}

#[test]
fn fork_pid_file_and_sd_notify() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let sock = dir.path().join("s.sock");
    let pidf = dir.path().join("s.pid");
    let notify = dir.path().join("notify.sock");
    let ns = UnixDatagram::bind(&notify).unwrap();
    ns.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // --fork: the foreground process returns (stdout closed) once serving
    let out = Command::new(BIN)
        .arg("serve")
        .arg(&img)
        .arg("--socket")
        .arg(&sock)
        .arg("--pid-file")
        .arg(&pidf)
        .arg("--fork")
        .env("NOTIFY_SOCKET", &notify)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("nbd+unix:///?socket={}", sock.display())
    );
    let mut b = [0u8; 256];
    let n = ns.recv(&mut b).unwrap();
    let msg = String::from_utf8_lossy(&b[..n]).into_owned();
    let pid: i32 = std::fs::read_to_string(&pidf)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        msg.contains("READY=1") && msg.contains(&format!("MAINPID={pid}")),
        "{msg}"
    );
    assert!(std::os::unix::net::UnixStream::connect(&sock).is_ok());
    term(pid, libc::SIGTERM);
    let n = ns.recv(&mut b).unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).contains("STOPPING=1"));
    for _ in 0..300 {
        if !pidf.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!pidf.exists(), "pid file left behind");
    std::thread::sleep(Duration::from_millis(200));
    assert!(is_clean(&img));
}

#[test]
fn systemd_socket_activation() {
    require_tools!("systemd_socket_activation", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let sock = dir.path().join("act.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&l);
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" serve \"$1\""])
        .arg(BIN)
        .arg(&img)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: dup2 in the child between fork and exec (async-signal-safe).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // fd 3 without close-on-exec, as systemd passes it
            let r = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(l);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("systemd"), "{line}");
    let size = nbd_common::stdout(
        Command::new("nbdinfo")
            .arg("--size")
            .arg(format!("nbd+unix:///?socket={}", sock.display())),
    );
    assert!(size.trim().parse::<u64>().unwrap() > 0);
    term(child.id() as i32, libc::SIGTERM);
    let st = nbd_common::wait_timeout(&mut child, Duration::from_secs(30)).unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(is_clean(&img));
}

/// Issue 17, finding 8: the metrics listener and the pid file are set up before
/// any volume is opened: a busy metrics port or a pid file in a missing
/// directory fails the start, leaves the volume closed cleanly (not "not closed
/// cleanly") and no socket behind.
#[test]
fn a_busy_metrics_port_or_a_bad_pid_file_leaves_the_volume_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let sock = dir.path().join("s.sock");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let missing = dir.path().join("nodir").join("s.pid");
    for extra in [
        vec!["--metrics".to_string(), busy_addr],
        vec!["--pid-file".to_string(), missing.display().to_string()],
    ] {
        let out = Command::new(BIN)
            .arg("serve")
            .arg(&img)
            .arg("--socket")
            .arg(&sock)
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}: {err}");
        assert!(!err.contains("serving"), "{extra:?}: {err}");
        assert!(
            is_clean(&img),
            "{extra:?} left the volume not closed cleanly"
        );
        assert!(!sock.exists(), "{extra:?} left the socket behind");
    }
}

/// Issue 17, finding 7: with stderr a pipe nobody reads any more, SIGTERM still
/// drains, closes the volume cleanly, removes the socket and the pid file and
/// exits 0 (eprintln! panicked on EPIPE: exit 101, the volume left unclean).
#[test]
fn shutdown_with_stderr_a_closed_pipe_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let sock = dir.path().join("s.sock");
    let pidf = dir.path().join("s.pid");
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg(&img)
        .arg("--socket")
        .arg(&sock)
        .arg("--pid-file")
        .arg(&pidf)
        .arg("-vv")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it serves (the URI on stdout), then close both read ends.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("nbd+unix://"), "{line}");
    drop(child.stderr.take());
    // A client connects and goes (debug log lines at -vv on the way).
    drop(std::os::unix::net::UnixStream::connect(&sock).unwrap());
    std::thread::sleep(Duration::from_millis(200));
    term(child.id() as i32, libc::SIGTERM);
    let st = nbd_common::wait_timeout(&mut child, Duration::from_secs(30))
        .expect("the server did not exit after SIGTERM");
    assert_eq!(st.code(), Some(0), "exit status {st:?}");
    assert!(is_clean(&img), "the volume was not closed cleanly");
    assert!(!sock.exists(), "the socket was left behind");
    assert!(!pidf.exists(), "the pid file was left behind");
}

/// `--fork --log-file`: once ready, messages go to the log file (appended), not
/// to the launching terminal; the log file is never a symlink or a volume.
#[test]
fn fork_logs_to_the_log_file_once_ready() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    create(&img, "64M");
    let sock = dir.path().join("s.sock");
    let pidf = dir.path().join("s.pid");
    let log = dir.path().join("serve.log");
    std::fs::write(&log, "earlier line\n").unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .arg(&img)
        .arg("--socket")
        .arg(&sock)
        .arg("--pid-file")
        .arg(&pidf)
        .arg("--fork")
        .arg("--log-file")
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid: i32 = std::fs::read_to_string(&pidf)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    term(pid, libc::SIGTERM);
    for _ in 0..300 {
        if !pidf.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(200));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("earlier line\n"), "{text}");
    assert!(text.contains("closed cleanly"), "{text}");
    assert!(is_clean(&img));
    // Never through a symlink, never a volume.
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&img, &link).unwrap();
    for bad in [&link, &img] {
        let out = Command::new(BIN)
            .arg("serve")
            .arg(&img)
            .arg("--socket")
            .arg(&sock)
            .arg("--log-file")
            .arg(bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("--log-file"), "{err}");
        assert!(!sock.exists());
    }
    assert!(is_clean(&img));
}
