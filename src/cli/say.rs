//! Where the command line's messages and log lines go: stderr, or, once
//! `serve --fork` is ready, syslog (the journal) or `serve --log-file`. The
//! `say!` macro and the tracing subscriber's writer both write here.
//!
//! Invariant: writing a message never fails and never panics: a closed stderr
//! (EPIPE; SIGPIPE is ignored, Rust's default, so that is an error, not a signal
//! death), a terminal that went away or a full disk lose the message, never the
//! process, so nothing on the shutdown path depends on stderr (issue 17).

use parking_lot::Mutex;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

enum Sink {
    Stderr,
    Syslog,
    File(std::fs::File),
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Stderr);

/// Write one message (one or more lines) at syslog priority `prio`; errors are
/// ignored.
pub fn write(prio: libc::c_int, bytes: &[u8]) {
    let sink = SINK.lock();
    match &*sink {
        Sink::Stderr => {
            let _ = std::io::stderr().write_all(bytes);
        }
        Sink::File(f) => {
            let _ = (&*f).write_all(bytes);
        }
        Sink::Syslog => {
            let text = String::from_utf8_lossy(bytes);
            for l in text.lines().filter(|l| !l.trim().is_empty()) {
                let l = l.strip_prefix("sluice: ").unwrap_or(l);
                if let Ok(c) = CString::new(l) {
                    // SAFETY: a constant "%s" format with one NUL-terminated string.
                    unsafe { libc::syslog(prio, c"%s".as_ptr(), c.as_ptr()) };
                }
            }
        }
    }
}

/// `say!`'s body: one line at notice priority.
pub fn line(args: std::fmt::Arguments) {
    write(libc::LOG_NOTICE, format!("{args}\n").as_bytes());
}

/// From now on, messages go to syslog (ident "sluice", with the pid, facility
/// daemon), as nbdkit does once it has forked.
pub fn to_syslog() {
    // SAFETY: openlog keeps the pointer: a static C string.
    unsafe {
        libc::openlog(
            c"sluice".as_ptr(),
            libc::LOG_PID | libc::LOG_NDELAY,
            libc::LOG_DAEMON,
        )
    };
    *SINK.lock() = Sink::Syslog;
}

/// From now on, messages go to `f` (from `open_log_file`).
pub fn to_file(f: std::fs::File) {
    *SINK.lock() = Sink::File(f);
}

/// Open `--log-file PATH` for appending: created (0640) if missing, never through
/// a symlink, only a regular file, never a sluice volume or one of `volumes`.
pub fn open_log_file(path: &Path, volumes: &[PathBuf]) -> anyhow::Result<std::fs::File> {
    let p = path.display();
    if volumes.iter().any(|v| v == path) {
        anyhow::bail!("--log-file {p} names an exported volume");
    }
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                anyhow::anyhow!("--log-file {p} is a symlink: give the file itself")
            }
            _ => anyhow::anyhow!("opening --log-file {p}: {e}"),
        })?;
    let m = f.metadata()?;
    if !m.is_file() {
        anyhow::bail!("--log-file {p} is not a regular file");
    }
    let is_volume = volumes
        .iter()
        .any(|v| std::fs::metadata(v).is_ok_and(|vm| vm.dev() == m.dev() && vm.ino() == m.ino()));
    // (O_NOFOLLOW above: `path` is this very file, not a link to another)
    if is_volume || super::info::has_magic(path).unwrap_or(true) {
        anyhow::bail!("--log-file {p} is a sluice volume: give another file");
    }
    Ok(f)
}

/// The tracing subscriber's writer: each event to the current sink at its level.
pub struct Logs;

pub struct LogWriter(libc::c_int);

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        write(self.0, b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        LogWriter(libc::LOG_INFO)
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LogWriter {
        use tracing::Level;
        LogWriter(match *meta.level() {
            Level::ERROR => libc::LOG_ERR,
            Level::WARN => libc::LOG_WARNING,
            Level::INFO => libc::LOG_INFO,
            _ => libc::LOG_DEBUG,
        })
    }
}
