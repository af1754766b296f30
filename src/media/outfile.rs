//! Output files: the pid file, `--record` traces, `--json` reports and `--plot`
//! charts. One set of rules for every command, so no output ever clobbers what
//! is not its own.
//!
//! Invariants:
//! - a symbolic link is never followed (O_NOFOLLOW), neither at the output's
//!   name nor for a temporary file (created O_EXCL|O_NOFOLLOW under an
//!   unpredictable name in the same directory, then renamed over the output);
//! - a file that is one of the volumes in use (same device and inode), that
//!   holds a sluice volume, or that carries a known file system or partition
//!   signature (`probe`) is refused, even with --force;
//! - any other existing file is replaced only if it is the output's own kind
//!   (`Output::ours`, e.g. a sluice trace for `--record`) or with --force;
//! - a pid file is created exclusively (link(2) of a complete temporary file,
//!   which fails if the name exists), replaces only a stale pid file whose pid
//!   is not running, and is removed at exit only if it still holds our pid.

use super::probe;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One output of a command, and what it may replace.
pub struct Output<'a> {
    /// The option that names it, for messages ("--json").
    pub flag: &'a str,
    /// `Some(force)` when the command has --force; None when it has none.
    pub force: Option<bool>,
    /// Is an existing file starting with these bytes this output's own kind?
    pub ours: fn(&[u8]) -> bool,
    /// Volumes the command serves or uses: never an output.
    pub volumes: &'a [PathBuf],
}

/// Marks an SVG chart sluice drew, so `--plot` may replace its own chart.
const CHART_MARK: &str = "<!-- chart drawn by sluice -->";

/// Put the chart mark after the `<svg ...>` start tag.
pub fn mark_chart(svg: &str) -> String {
    match svg
        .find("<svg")
        .and_then(|i| svg[i..].find('>').map(|j| i + j + 1))
    {
        Some(at) => format!("{}{CHART_MARK}{}", &svg[..at], &svg[at..]),
        None => svg.to_string(),
    }
}

/// For `Output::ours` of `--plot`: a chart sluice drew (`mark_chart`).
pub fn is_sluice_chart(head: &[u8]) -> bool {
    let h = &head[..head.len().min(4096)];
    h.windows(CHART_MARK.len())
        .any(|w| w == CHART_MARK.as_bytes())
}

fn refuse(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::AlreadyExists, msg)
}

/// Open for reading without following a symbolic link.
fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn head_of(f: &mut File, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    f.take(n as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Refuse `path` when it is a symlink, not a regular file, or one of `volumes`.
/// Returns its (dev, inode) and the file when it exists.
fn existing(path: &Path, flag: &str, volumes: &[PathBuf]) -> io::Result<Option<(File, u64, u64)>> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if m.file_type().is_symlink() {
        return Err(refuse(format!(
            "{flag} {}: is a symbolic link; output files never follow links (give the real path)",
            path.display()
        )));
    }
    if !m.is_file() {
        return Err(refuse(format!(
            "{flag} {}: exists and is not a regular file",
            path.display()
        )));
    }
    for v in volumes {
        if let Ok(vm) = std::fs::metadata(v) {
            if vm.dev() == m.dev() && vm.ino() == m.ino() {
                return Err(refuse(format!(
                    "{flag} {}: is the volume {} in use; choose another file",
                    path.display(),
                    v.display()
                )));
            }
        }
    }
    let f = open_nofollow(path)?;
    let fm = f.metadata()?;
    if fm.dev() != m.dev() || fm.ino() != m.ino() {
        return Err(refuse(format!(
            "{flag} {}: changed while it was checked",
            path.display()
        )));
    }
    Ok(Some((f, m.dev(), m.ino())))
}

/// An unpredictable temporary name next to `path`.
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ))
}

/// Create a new temporary file next to `path` (O_EXCL|O_NOFOLLOW).
fn create_temp(path: &Path) -> io::Result<(File, PathBuf)> {
    loop {
        let t = temp_name(path);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&t)
        {
            Ok(f) => return Ok((f, t)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

impl Output<'_> {
    /// Refuse `path` by the rules of this module (before a long run starts, so
    /// a bad output name fails at once). Returns the existing file's (dev, ino)
    /// when it may be replaced.
    pub fn check(&self, path: &Path) -> io::Result<Option<(u64, u64)>> {
        let flag = self.flag;
        let Some((mut f, dev, ino)) = existing(path, flag, self.volumes)? else {
            return Ok(None);
        };
        let head = head_of(&mut f, probe::PROBE_BYTES)?;
        if let Some(what) = probe::signature(&head) {
            return Err(refuse(format!(
                "{flag} {}: holds {what}; an output never replaces it, not even with --force",
                path.display()
            )));
        }
        if (self.ours)(&head) || self.force == Some(true) {
            return Ok(Some((dev, ino)));
        }
        Err(refuse(match self.force {
            Some(_) => format!(
                "{flag} {}: exists; use --force to replace it, or choose another name",
                path.display()
            ),
            None => format!(
                "{flag} {}: exists and is not a file this option wrote; remove it or choose another name",
                path.display()
            ),
        }))
    }

    /// Write `bytes` as `path`: checked, written to a temporary file, renamed
    /// over `path` (rename replaces a name, it follows no link).
    pub fn write(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.check(path)?;
        let (mut f, tmp) = create_temp(path)?;
        let r = f
            .write_all(bytes)
            .and_then(|_| self.check(path).map(|_| ()))
            .and_then(|_| std::fs::rename(&tmp, path));
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    /// Open `path` for writing as a stream (a trace): a new file is created
    /// O_EXCL|O_NOFOLLOW; an existing one that may be replaced is opened
    /// O_NOFOLLOW, checked to be the file that was judged, then truncated.
    pub fn create(&self, path: &Path) -> io::Result<File> {
        match self.check(path)? {
            None => OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o644)
                .open(path),
            Some((dev, ino)) => {
                let f = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)?;
                let m = f.metadata()?;
                if m.dev() != dev || m.ino() != ino || !m.is_file() {
                    return Err(refuse(format!(
                        "{} {}: changed while it was checked",
                        self.flag,
                        path.display()
                    )));
                }
                f.set_len(0)?;
                Ok(f)
            }
        }
    }
}

/// `serve --pid-file`: this process's pid, in a file it created itself.
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

/// Is process `pid` running (it exists, ours or not)?
fn running(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for the process.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl PidFile {
    /// Write our pid to `path` exclusively. An existing pid file whose pid is
    /// not running (stale) is replaced; a live one, a symlink, one of
    /// `volumes` or any other file is refused.
    pub fn create(path: &Path, volumes: &[PathBuf]) -> io::Result<PidFile> {
        let pid = std::process::id();
        let (mut f, tmp) = create_temp(path)?;
        let written = f.write_all(format!("{pid}\n").as_bytes());
        let r = written.and_then(|_| {
            // link(2) never replaces a name: an existing file is judged, and
            // only a stale pid file is removed, once, before the second try.
            match std::fs::hard_link(&tmp, path) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    Self::remove_stale(path, pid, volumes)?;
                    std::fs::hard_link(&tmp, path)
                }
                r => r,
            }
        });
        let _ = std::fs::remove_file(&tmp);
        r.map(|_| PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }

    /// Remove `path` if it is a pid file whose pid is not running; refuse
    /// anything else (a live pid, a symlink, a volume, another file).
    fn remove_stale(path: &Path, pid: u32, volumes: &[PathBuf]) -> io::Result<()> {
        let Some((mut f, _, _)) = existing(path, "--pid-file", volumes)? else {
            return Ok(()); // gone meanwhile: try again
        };
        let head = head_of(&mut f, 64)?;
        let old = std::str::from_utf8(&head)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        match old {
            Some(p) if p != pid && running(p) => Err(refuse(format!(
                "--pid-file {}: pid {p} in it is running; is another server using it?",
                path.display()
            ))),
            Some(_) => std::fs::remove_file(path),
            None => Err(refuse(format!(
                "--pid-file {}: exists and is not a pid file; remove it or choose another name",
                path.display()
            ))),
        }
    }

    /// Remove the pid file if it still holds our pid (never a file another
    /// process wrote there since).
    pub fn remove_if_ours(&self) {
        let Ok(mut f) = open_nofollow(&self.path) else {
            return;
        };
        let ours = head_of(&mut f, 64)
            .ok()
            .and_then(|h| String::from_utf8(h).ok())
            .is_some_and(|s| s.trim() == self.pid.to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out<'a>(force: Option<bool>, volumes: &'a [PathBuf]) -> Output<'a> {
        Output {
            flag: "--json",
            force,
            ours: |h| h.starts_with(b"{"),
            volumes,
        }
    }

    #[test]
    fn existing_files_need_force_or_to_be_ours() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        out(Some(false), &[]).write(&p, b"{1}").unwrap();
        out(Some(false), &[]).write(&p, b"{2}").unwrap(); // ours
        std::fs::write(&p, b"notes").unwrap();
        let e = out(Some(false), &[]).write(&p, b"{3}").unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"notes");
        assert!(out(None, &[]).create(&p).is_err());
        out(Some(true), &[]).write(&p, b"{4}").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{4}");
        // a signature or a volume in use: never, not even with --force
        let mut fs = vec![0u8; 8192];
        fs[1024 + 56] = 0x53;
        fs[1024 + 57] = 0xEF;
        std::fs::write(&p, &fs).unwrap();
        assert!(out(Some(true), &[]).write(&p, b"{5}").is_err());
        let v = d.path().join("v.json");
        std::fs::write(&v, b"{}").unwrap();
        let e = out(Some(true), std::slice::from_ref(&v))
            .write(&v, b"{6}")
            .unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
        assert_eq!(std::fs::read(&v).unwrap(), b"{}");
    }

    #[test]
    fn a_chart_sluice_drew_is_its_own() {
        let svg = mark_chart("<?xml version=\"1.0\"?>\n<svg width=\"9\">\n</svg>\n");
        assert!(
            svg.starts_with("<?xml version=\"1.0\"?>\n<svg width=\"9\">"),
            "{svg}"
        );
        assert!(is_sluice_chart(svg.as_bytes()));
        assert!(!is_sluice_chart(b"<svg width=\"9\">\n</svg>\n"));
    }

    #[test]
    fn symlinks_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("precious");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.path().join("r.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(out(Some(true), &[]).write(&link, b"{x}").is_err());
        assert!(out(Some(true), &[]).create(&link).is_err());
        assert!(PidFile::create(&link, &[]).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        // no temporary file is left behind
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn pid_file_is_exclusive_and_removed_only_when_ours() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.pid");
        let pf = PidFile::create(&p, &[]).unwrap();
        let me = std::process::id().to_string();
        assert_eq!(std::fs::read_to_string(&p).unwrap().trim(), me);
        // a live pid (pid 1 runs) refuses; a stale one is replaced
        std::fs::write(&p, b"1\n").unwrap();
        assert!(PidFile::create(&p, &[]).is_err());
        pf.remove_if_ours();
        assert!(p.exists(), "another process's pid file was removed");
        std::fs::write(&p, format!("{}\n", i32::MAX - 7)).unwrap();
        let pf = PidFile::create(&p, &[]).unwrap();
        pf.remove_if_ours();
        assert!(!p.exists());
        std::fs::write(&p, b"not a pid").unwrap();
        assert!(PidFile::create(&p, &[]).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"not a pid");
    }
}
