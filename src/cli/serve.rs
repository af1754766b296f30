//! `sluice serve`: export one or more volumes over NBD on a Unix socket, a TCP
//! port or a socket systemd passed in, until SIGINT/SIGTERM/SIGHUP, then drain,
//! flush and close them cleanly.
//!
//! Invariants: everything that can fail is set up before any volume is touched
//! (NBD socket, metrics listener, log file, fork, pid file, signal handlers: a
//! bad path or a busy port leaves the volumes as they were and nothing behind);
//! a failure after the mount closes the volumes cleanly; a volume is closed
//! (checkpointed) only after every connection has answered all requests it
//! accepted; no message depends on stderr (`say!`); one server per volume (the volume lock
//! of FileMedia).

use super::create;
use super::exports;
use super::say;
use anyhow::{bail, Context};
use sluice::media::outfile::{Output, PidFile};
use sluice::media::{FileMedia, Media};
use sluice::nbd::{Export, Listener, Server, ServerConfig, TlsFiles, TlsMode};
use sluice::size::human;
use sluice::{OpenOptions, Volume};
use std::io::Write;
use std::os::unix::io::{FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Volume file or block device (see `sluice create`, or use --create): the
    /// default export, named by --export-name. Optional with --export.
    pub path: Option<PathBuf>,
    /// Listen on this Unix socket (as qemu-nbd --socket / nbdkit --unix).
    #[arg(
        short = 'k',
        long,
        alias = "unix",
        value_name = "PATH",
        conflicts_with = "port"
    )]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP port (as qemu-nbd --port); 10809 is the NBD default.
    /// Without --socket or --port, a socket passed by systemd (LISTEN_FDS) is used.
    #[arg(short = 'p', long, value_name = "N")]
    pub port: Option<u16>,
    /// Address to bind the TCP port to. Anything other than loopback exposes the
    /// volume, unauthenticated, to the network.
    #[arg(short = 'b', long, default_value = "127.0.0.1", requires = "port")]
    pub bind: String,
    /// Export name of PATH (the empty name always selects the first export too).
    #[arg(short = 'x', long, default_value = "")]
    pub export_name: String,
    /// Another export, NAME=PATH (repeatable): one volume each, chosen by the
    /// export name the client asks for, all listed by NBD_OPT_LIST.
    #[arg(long = "export", value_name = "NAME=PATH")]
    pub exports: Vec<String>,
    /// Exports from a TOML file: one [[export]] table each with name, path and
    /// optionally read_only and description (example below). Adds to PATH and
    /// --export.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Export read-only (every export): writes, trims and zeroes fail with EPERM.
    #[arg(short = 'r', long)]
    pub read_only: bool,
    /// With --read-only: serve a volume that refuses a normal mount (damage
    /// below the durable point); blocks it cannot vouch for answer EIO (they are
    /// the ranges `sluice check` lists). See docs/salvage.md.
    #[arg(long, requires = "read_only")]
    pub salvage: bool,
    /// The volume's intent log device (see `sluice create --log-device`);
    /// twice for a mirrored pair. A device of another volume is refused; of
    /// a pair, one missing or unusable is warned about and the volume runs
    /// degraded (`sluice info`, stats `log_devices_degraded`).
    #[arg(long = "log-device", value_name = "PATH")]
    pub log_devices: Vec<PathBuf>,
    /// Serve the stripe set these members make (any order; see `create
    /// --device`) instead of PATH. Up to --parity members may be missing: the
    /// set then serves degraded and says so.
    #[arg(long = "device", value_name = "PATH", conflicts_with = "path")]
    pub devices: Vec<PathBuf>,
    /// With --device: replace member OLD (its slot index as `info` shows
    /// it, or its path) by NEW (a file, created with the size a member
    /// needs if missing, or a block device), as `sluice replace` does, and
    /// rebuild NEW in the background while serving (docs/stripes.md §6).
    /// Progress in metrics and `sluice top`; stopping the server stops the
    /// rebuild, and serving again with the same --replace resumes it.
    #[arg(long, value_name = "OLD=NEW", requires = "devices")]
    pub replace: Option<String>,
    /// With --replace: rebuild at most this many bytes per second (default:
    /// as fast as it goes).
    #[arg(long, value_parser = super::parse_size, value_name = "BYTES", requires = "replace")]
    pub rebuild_rate: Option<u64>,
    /// With --replace: overwrite a NEW that holds data or another volume.
    #[arg(long, requires = "replace")]
    pub force: bool,
    /// Mount a volume whose log device is gone (none given, or none that can
    /// be opened and is this volume's): writes acknowledged only through the
    /// log are lost, and the mount says which order numbers (as `zpool
    /// import -m`). FLUSH then seals into the main log. A device of another
    /// volume is still refused.
    #[arg(long)]
    pub log_device_missing_ok: bool,
    #[command(flatten)]
    pub objects: super::objects::StoreArgs,
    /// Write the server's pid here once it is listening; removed at exit if it
    /// still holds it. Never replaces a file other than a stale pid file.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Go to the background once the server is ready (as qemu-nbd --fork); the
    /// foreground process exits 0 then, or 1 if the server failed to start.
    /// From then on messages go to syslog (the journal), or to --log-file.
    #[arg(long)]
    pub fork: bool,
    /// Once the server is ready, append its messages and log lines to FILE
    /// instead of stderr (with --fork: instead of syslog). Never a symlink or a
    /// volume; created (mode 0640) if missing.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Create the volume first if PATH does not exist (needs --size).
    #[arg(long)]
    pub create: bool,
    /// Size of the volume --create makes, e.g. 10G.
    #[arg(long, value_parser = super::parse_size, requires = "create")]
    pub size: Option<u64>,
    /// Most client connections served at once (as qemu-nbd --shared; 0: no
    /// limit); further clients get an error reply naming the limit.
    #[arg(short = 'e', long, default_value_t = 128)]
    pub shared: usize,
    /// Worker threads running reads, flushes and FUA writes.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Close connections that sent no request for this many seconds while
    /// nothing was in flight (default: never, as qemu-nbd).
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<f64>,
    /// Seconds a client has to finish the whole handshake.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub handshake_timeout: f64,
    /// Seconds a started request has to arrive completely, and a client has to
    /// make progress reading its replies, before its connection is dropped.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Payload bytes one connection may have in flight (reads, writes, queued
    /// replies), e.g. 8M; one larger request is still served alone.
    #[arg(long, value_parser = super::parse_size, default_value = "8M")]
    pub max_inflight: u64,
    /// TLS (STARTTLS): off, on (offered, plaintext still allowed) or require
    /// (as nbdkit --tls). Default: require when certificates are given, else off.
    #[arg(long, value_name = "off|on|require")]
    pub tls: Option<String>,
    /// Directory with server-cert.pem, server-key.pem and (for
    /// --tls-verify-peer) ca-cert.pem, as qemu-nbd's tls-creds-x509 and
    /// nbdkit --tls-certificates.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub tls_certificates: Option<PathBuf>,
    /// Server certificate chain (PEM), with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Server private key (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by ca-cert.pem of --tls-certificates
    /// (as nbdkit --tls-verify-peer).
    #[arg(long, requires = "tls_certificates")]
    pub tls_verify_peer: bool,
    /// Require client certificates signed by this CA (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// More log output: -v connections' warnings and info, -vv debug (connection
    /// open/close, rejected requests), -vvv trace. RUST_LOG overrides.
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log errors only.
    #[arg(short = 'q', long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Send every request to the worker pool, also writes without FUA (for
    /// benchmarking the dispatch choice; see docs/nbd.md).
    #[arg(long, hide = true)]
    pub no_inline_writes: bool,
    /// Serve READs through the worker pool in batches instead of the
    /// connection's read ring (for benchmarking; see docs/nbd.md).
    #[arg(long, hide = true)]
    pub no_read_ring: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100 or :9100;
    /// loopback unless an address says otherwise). `sluice top ADDR` reads them.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// With --metrics, leave out the access-pattern counters (sequential share,
    /// seek and size histograms, host and media): to measure their cost apart
    /// (scripts/bench-metrics.sh).
    #[arg(long, requires = "metrics")]
    pub no_access_pattern: bool,
    /// Capture every request (time, op, offset, length) to FILE in sluice's trace
    /// format, replayable with `sluice replay --format sluice` (default export only).
    /// An existing FILE is replaced only if it is a sluice trace.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Scrub in the background at this rate (bytes per second, e.g. 16M): read
    /// every closed segment in turn and verify every block's checksum, so bit rot
    /// is found before a client reads it. Off by default.
    #[arg(long, value_parser = super::parse_size, value_name = "BYTES")]
    pub scrub_rate: Option<u64>,
    /// Diagnostic: do not verify the checksum of blocks read from the media.
    #[arg(long, hide = true)]
    pub no_verify_reads: bool,
    /// Give segments freed by GC back to the host (punch holes in a volume
    /// file) or the device (discard, where it advertises support): on or off.
    /// Trimmed blocks' space returns when GC frees their segment.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub discard: String,
}

fn seconds(name: &str, v: f64) -> anyhow::Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v <= 1e9) {
        bail!("--{name} must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

/// Where the server listens, for the URI it prints.
enum Addr {
    Unix(PathBuf),
    Tcp(String, u16),
    Inherited,
}

fn uri(addr: &Addr, name: &str, tls: bool) -> String {
    match addr {
        Addr::Unix(s) if tls => format!("nbds+unix:///{name}?socket={}", s.display()),
        Addr::Unix(s) => format!("nbd+unix:///{name}?socket={}", s.display()),
        Addr::Tcp(bind, p) => {
            let host = if bind.contains(':') {
                format!("[{bind}]")
            } else {
                bind.clone()
            };
            let scheme = if tls { "nbds" } else { "nbd" };
            format!("{scheme}://{host}:{p}/{name}")
        }
        Addr::Inherited => format!("(socket passed by systemd) export '{name}'"),
    }
}

/// The export's volume files: never an output file (`media::outfile`).
fn volume_paths(specs: &[exports::ExportSpec]) -> Vec<PathBuf> {
    specs.iter().map(|s| s.path.clone()).collect()
}

/// `--pid-file`: created exclusively, never over a volume or a live pid file.
fn pid_file(a: &Args, specs: &[exports::ExportSpec]) -> anyhow::Result<Option<PidFile>> {
    let Some(p) = &a.pid_file else {
        return Ok(None);
    };
    let f = PidFile::create(p, &volume_paths(specs))
        .with_context(|| format!("--pid-file {}", p.display()))?;
    Ok(Some(f))
}

/// `--record`: replaces only an earlier sluice trace, never a volume or a link.
fn record_file(p: &Path, specs: &[exports::ExportSpec]) -> std::io::Result<std::fs::File> {
    let vols = volume_paths(specs);
    Output {
        flag: "--record",
        force: None,
        ours: sluice::trace::is_trace,
        volumes: &vols,
    }
    .create(p)
}

fn bind_unix(path: &Path) -> anyhow::Result<Listener> {
    if path.exists() {
        use std::os::unix::fs::FileTypeExt;
        let is_socket = std::fs::symlink_metadata(path)?.file_type().is_socket();
        if !is_socket {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("{} is in use by a running server", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    Ok(Listener::Unix(l))
}

/// The listening socket systemd passed (socket activation: LISTEN_PID is us,
/// LISTEN_FDS >= 1, the socket is fd 3). None when not socket-activated.
fn inherited_listener() -> anyhow::Result<Option<Listener>> {
    let pid_ok = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let n = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    if !pid_ok || n == 0 {
        return Ok(None);
    }
    if n > 1 {
        bail!("systemd passed {n} sockets; sluice serve listens on one");
    }
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    const FD: RawFd = 3;
    // SAFETY: getsockname/fcntl on fd 3, which systemd passed us; a zeroed
    // sockaddr_storage is a valid buffer for the address.
    let family = unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(FD, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
            bail!(
                "LISTEN_FDS: fd 3 is not a socket: {}",
                std::io::Error::last_os_error()
            );
        }
        libc::fcntl(FD, libc::F_SETFD, libc::FD_CLOEXEC);
        ss.ss_family as libc::c_int
    };
    // SAFETY: fd 3 is a listening socket handed to us, owned from now on.
    Ok(Some(match family {
        libc::AF_UNIX => {
            Listener::Unix(unsafe { std::os::unix::net::UnixListener::from_raw_fd(FD) })
        }
        libc::AF_INET | libc::AF_INET6 => {
            Listener::Tcp(unsafe { std::net::TcpListener::from_raw_fd(FD) })
        }
        f => bail!("LISTEN_FDS: fd 3 has unsupported address family {f}"),
    }))
}

/// Tell systemd (Type=notify) about our state, if it asked (NOTIFY_SOCKET).
fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let r = (|| -> std::io::Result<()> {
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let sock = UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        let addr = if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        } else {
            SocketAddr::from_pathname(Path::new(&path))?
        };
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = r {
        tracing::warn!("sd_notify to NOTIFY_SOCKET failed: {e}");
    }
}

/// `--fork`: the parent waits for the child to report readiness over a pipe and
/// exits with 0 (ready) or 1; the child continues in a new session and calls
/// `done` with the outcome. Must run before any thread is started.
struct Daemon {
    ready_fd: RawFd,
}

impl Daemon {
    fn fork() -> anyhow::Result<Daemon> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe/fork/read/close on descriptors we own; called while the
        // process has one thread (before volumes are mounted).
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                bail!("pipe: {}", std::io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => bail!("fork: {}", std::io::Error::last_os_error()),
                0 => {
                    libc::close(fds[0]);
                    libc::setsid();
                    Ok(Daemon { ready_fd: fds[1] })
                }
                _ => {
                    libc::close(fds[1]);
                    let mut b = [0u8; 1];
                    let n = libc::read(fds[0], b.as_mut_ptr() as *mut libc::c_void, 1);
                    libc::_exit(if n == 1 && b[0] == b'1' { 0 } else { 1 });
                }
            }
        }
    }

    /// Point stderr at /dev/null once messages go to syslog or the log file, so
    /// the launching terminal or a `2>&1` pipe is not held (as nbdkit does).
    fn detach_stderr() {
        // SAFETY: dup2 of a descriptor we opened over fd 2, then close it.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 2);
                libc::close(null);
            }
        }
    }

    /// Report readiness; the foreground process exits. Stdout (where the URI
    /// went) is closed, so `$(sluice serve --fork ...)` returns.
    fn ready(&self) {
        // SAFETY: writing one byte to and closing our end of the pipe; dup2 of
        // /dev/null over stdout.
        unsafe {
            let _ = libc::write(self.ready_fd, b"1".as_ptr() as *const libc::c_void, 1);
            libc::close(self.ready_fd);
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 0);
                libc::dup2(null, 1);
                libc::close(null);
            }
        }
    }
}

/// Open (and lock) each `--log-device`. One that cannot be opened is warned
/// about and left out (the mount decides whether the others suffice: one of
/// a mirrored pair does); one in use by another process is refused.
pub fn open_log_devices(
    paths: &[PathBuf],
    read_only: bool,
    missing_ok: bool,
) -> anyhow::Result<Vec<sluice::LogDevice>> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for p in paths {
        match FileMedia::open(p, read_only) {
            Ok(m) => out.push(sluice::LogDevice(Arc::new(m) as Arc<dyn Media>)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(e).with_context(|| format!("opening log device {}", p.display()))
            }
            Err(e) => missing.push(format!("{}: {e}", p.display())),
        }
    }
    if out.is_empty() && !missing.is_empty() && !missing_ok {
        bail!(
            "no log device could be opened ({}); the volume's acknowledged writes may be there (--log-device-missing-ok mounts without it, losing them)",
            missing.join("; ")
        );
    }
    for m in &missing {
        say!("sluice: warning: log device {m}; mounting without it");
    }
    Ok(out)
}

/// Mount (creating if asked) one volume; its media holds the volume lock.
fn open_volume(
    path: &Path,
    a: &Args,
    create_it: bool,
    read_only: bool,
) -> anyhow::Result<Arc<Volume>> {
    if a.devices.first().is_some_and(|d| d == path) {
        if create_it {
            bail!("--create with --device: create the set with `sluice create --device ...` first");
        }
        let opts = OpenOptions {
            read_only,
            verify_reads: !a.no_verify_reads,
            scrub_rate: a.scrub_rate,
            ..OpenOptions::default()
        };
        if let Some(r) = &a.replace {
            // attached before the mount, as `sluice replace` does; the
            // rebuild starts once the exports are up (`run`)
            let Some((old, new)) = r.split_once('=') else {
                bail!("--replace wants OLD=NEW (OLD a slot index or a member's path), got {r:?}");
            };
            if read_only {
                bail!("--replace with --read-only: a rebuild writes");
            }
            let (devs, slot, new) =
                super::replace::prepare(&a.devices, old, Path::new(new), a.force)?;
            let name = new.0.clone();
            let vol = Volume::replace_member(devs, slot, new, &opts)
                .context("attaching the new member")?;
            say!(
                "sluice: member {slot} replaced by {name}; it is rebuilt in the background once serving"
            );
            return Ok(Arc::new(vol));
        }
        return Ok(Arc::new(super::stripe::mount(&a.devices, &opts, false)?));
    }
    if let Some(hint) = super::stripe::member_hint(path) {
        bail!("{hint}");
    }
    if create_it && !path.exists() {
        a.objects.prepare_create()?;
        let Some(size) = a.size else {
            bail!("--create needs --size for a volume that does not exist yet");
        };
        let vol = create::create_volume(&create::Args::defaults(path, size, a.objects.clone()))?;
        vol.close()?;
        say!("sluice: created {} ({})", path.display(), human(size));
    } else if !path.exists() && a.objects.store.is_some() && a.path.as_deref() == Some(path) {
        // a volume in an object store, no cache here: rebuild it from the store
        a.objects.restore()?;
    } else if !path.exists() {
        bail!(
            "{} does not exist: create it with `sluice create` or pass --create --size SIZE",
            path.display()
        );
    }
    // FileMedia::open takes the volume lock (exclusive, or shared when
    // read-only) and names the holder if another process has it.
    let file =
        FileMedia::open(path, read_only).with_context(|| format!("opening {}", path.display()))?;
    // `--metrics` counts media bytes by class through a thin wrapper (run()
    // enabled the metrics before any volume was opened).
    let media: Arc<dyn Media> = if a.metrics.is_some() && !a.no_access_pattern {
        Arc::new(sluice::metrics::MeteredMedia { inner: file })
    } else {
        Arc::new(file)
    };
    if a.scrub_rate == Some(0) {
        bail!("--scrub-rate must be above 0 (leave it out to turn scrub off)");
    }
    let log_devices = open_log_devices(&a.log_devices, read_only, a.log_device_missing_ok)?;
    // --store belongs to the default export only
    let objects = a.objects.store.is_some() && a.path.as_deref() == Some(path);
    if read_only && objects {
        bail!("--read-only with --store is not supported yet (`sluice check --store` reads the objects)");
    }
    let opts = OpenOptions {
        log_devices,
        log_device_missing_ok: a.log_device_missing_ok,
        read_only,
        verify_reads: !a.no_verify_reads,
        scrub_rate: a.scrub_rate,
        discard: a.discard == "on",
        salvage: a.salvage && read_only,
        ..OpenOptions::default()
    };
    let opened = if objects {
        // attached to its objects, and in the store-durable mode this
        // epoch's first checkpoint object stored (StoreArgs::mount)
        a.objects.mount(media, opts)
    } else {
        Volume::open(media, &opts).map_err(anyhow::Error::from)
    };
    let vol = match opened {
        Ok(v) => Arc::new(v),
        // A file that never was a volume is not "damaged" (both superblock
        // copies are checked by the mount; this only chooses the words).
        Err(_) if !super::info::has_magic(path).unwrap_or(true) => bail!(
            "{} is not a sluice volume (no superblock magic at byte 0 or 4096): \
             make a volume with `sluice create FILE --size SIZE`",
            path.display()
        ),
        Err(e) => return Err(e.context(format!("mounting {}", path.display()))),
    };
    if let (Some(want), true) = (a.size, create_it) {
        if want != vol.size_bytes() {
            say!(
                "sluice: warning: {} already exists with size {} (--size {} ignored)",
                path.display(),
                human(vol.size_bytes()),
                human(want)
            );
        }
    }
    let r = vol.mount_report();
    for n in r.notes.iter().filter(|n| n.contains("intent log")) {
        say!("sluice: {}: {n}", path.display());
    }
    if a.salvage {
        let n: u64 = vol.unvouched().iter().map(|(s, e)| e - s).sum();
        say!(
            "sluice: salvage mount of {}: {n} logical block(s) in {} range(s) answer EIO (`sluice check` lists them)",
            path.display(),
            vol.unvouched().len()
        );
    }
    if !r.clean {
        say!(
            "sluice: recovered {} after an unclean shutdown: replayed {} chunks in {} ms",
            path.display(),
            r.chunks_replayed,
            r.mount_ms
        );
    }
    Ok(vol)
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    // --store: the default export is the local metadata file DIR/volume
    let mut default_path = a.path.take();
    a.objects.resolve(&mut default_path)?;
    a.path = default_path;
    // (the allocator is tuned for all commands in cli::run)
    if a.create && a.read_only {
        bail!("--create and --read-only do not go together: create the volume first");
    }
    let mut specs: Vec<exports::ExportSpec> = Vec::new();
    let plain = |name: &str, path: &Path| exports::ExportSpec {
        name: name.to_string(),
        path: path.to_path_buf(),
        read_only: a.read_only,
        description: None,
        origin: None,
    };
    if let Some(p) = &a.path {
        specs.push(plain(&a.export_name, p));
    } else if let Some(d) = a.devices.first() {
        // the set's export, named by its first member
        specs.push(plain(&a.export_name, d));
    }
    for e in &a.exports {
        let Some((name, path)) = e.split_once('=') else {
            bail!("--export wants NAME=PATH, got {e:?}");
        };
        specs.push(plain(name, Path::new(path)));
    }
    // --create makes the first export of the command line, never one of the file's.
    let create_first = a.create && !specs.is_empty();
    if let Some(file) = &a.config {
        for mut e in exports::load(file)? {
            e.read_only |= a.read_only;
            if specs.iter().any(|s| s.name == e.name) {
                bail!(
                    "{}: export name {:?} is also given on the command line",
                    e.origin.as_deref().unwrap_or_default(),
                    e.name
                );
            }
            specs.push(e);
        }
    }
    if specs.is_empty() {
        bail!("give a volume PATH, --export NAME=PATH or --config FILE");
    }
    for (i, s) in specs.iter().enumerate() {
        if s.name.len() > 4096 || s.name.contains('\0') {
            bail!("export names must be at most 4096 bytes without NUL");
        }
        if specs[..i].iter().any(|o| o.name == s.name) {
            bail!("export name {:?} given twice", s.name);
        }
    }
    if a.workers == 0 || a.workers > 1024 {
        bail!("--workers must be between 1 and 1024");
    }
    if a.max_inflight < 4096 || a.max_inflight > (1 << 30) {
        bail!("--max-inflight must be between 4K and 1G");
    }
    let tls_files = match (&a.tls_certificates, &a.tls_cert, &a.tls_key) {
        (Some(dir), _, _) => Some(TlsFiles::from_dir(dir, a.tls_verify_peer)),
        (None, Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: a.tls_client_ca.clone(),
        }),
        _ => None,
    };
    let tls = match (a.tls.as_deref(), &tls_files) {
        (None, None) | (Some("off"), _) => TlsMode::Off,
        (None, Some(_)) | (Some("require"), _) => TlsMode::Require,
        (Some("on"), _) => TlsMode::On,
        (Some(x), _) => bail!("--tls must be off, on or require, not {x:?}"),
    };
    let tls_config = match (&tls_files, tls) {
        (_, TlsMode::Off) => None,
        (None, _) => bail!("--tls on/require needs --tls-certificates DIR or --tls-cert/--tls-key"),
        (Some(f), _) => Some(sluice::nbd::tls::server_config(f)?),
    };
    let cfg = ServerConfig {
        tls,
        tls_config,
        // -e 0: no limit, as qemu-nbd --shared=0
        max_connections: if a.shared == 0 { usize::MAX } else { a.shared },
        workers: a.workers,
        inline_writes: !a.no_inline_writes,
        read_ring: !a.no_read_ring,
        idle_timeout: a
            .idle_timeout
            .map(|s| seconds("idle-timeout", s))
            .transpose()?,
        handshake_timeout: seconds("handshake-timeout", a.handshake_timeout)?,
        request_timeout: seconds("request-timeout", a.request_timeout)?,
        max_inflight_bytes: a.max_inflight,
    };

    // Set up everything that can fail before any volume is touched, in this
    // order: the NBD socket, the metrics listener, the log file, the fork, the
    // pid file, the signal handlers. A typo, a busy port or a bad path then
    // leaves every volume as it was (closed cleanly) and nothing behind.
    let (listener, addr) = match (&a.socket, a.port) {
        (Some(s), _) => (bind_unix(s)?, Addr::Unix(s.clone())),
        (None, Some(p)) => {
            let l = std::net::TcpListener::bind((a.bind.as_str(), p))
                .with_context(|| format!("binding {}:{p}", a.bind))?;
            let port = l.local_addr()?.port();
            (Listener::Tcp(l), Addr::Tcp(a.bind.clone(), port))
        }
        (None, None) => match inherited_listener()? {
            Some(l) => (l, Addr::Inherited),
            None => {
                bail!("give --socket PATH or --port N (or start under systemd socket activation)")
            }
        },
    };
    let mut leftovers = Leftovers {
        socket: a.socket.clone(),
        pid_file: None,
    };
    let r = set_up(&a, &specs);
    let (metrics_listener, log_file, daemon) = leftovers.on_error(r)?;
    leftovers.pid_file = leftovers.on_error(pid_file(&a, &specs))?;
    let stop = Arc::new(AtomicBool::new(false));
    leftovers.on_error(signals(&stop))?;

    let metrics = a.metrics.as_ref().map(|_| sluice::metrics::enable());
    if a.no_access_pattern {
        sluice::metrics::set_access_pattern(false);
    }
    let mut exports: Vec<Export> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let r = open_volume(&spec.path, &a, create_first && i == 0, spec.read_only);
        let r = match &spec.origin {
            Some(o) => r.with_context(|| format!("export {:?} ({o})", spec.name)),
            None => r,
        };
        match r {
            Ok(vol) => {
                exports.push(Export {
                    name: spec.name.clone(),
                    description: spec
                        .description
                        .clone()
                        .unwrap_or_else(|| format!("sluice volume {}", spec.path.display())),
                    vol,
                    read_only: spec.read_only,
                    recorder: None,
                });
            }
            Err(e) => return Err(leftovers.close(&exports, e)),
        }
    }
    let recorder = match &a.record {
        Some(p) => {
            let r = record_file(p, &specs)
                .and_then(sluice::trace::Recorder::to_file)
                .and_then(|r| {
                    r.comment(&sluice::trace::VolumeInfo::of(&exports[0].vol).line())?;
                    Ok(r)
                })
                .with_context(|| format!("creating trace file {}", p.display()));
            match r {
                Ok(r) => Some(Arc::new(r)),
                // close what was mounted: a bad --record path is no crash
                Err(e) => return Err(leftovers.close(&exports, e)),
            }
        }
        None => None,
    };
    exports[0].recorder = recorder.clone();

    if let (Some(l), Some(m)) = (metrics_listener, metrics) {
        let vols = exports
            .iter()
            .zip(&specs)
            .map(|(e, s)| sluice::metrics::Export {
                name: e.name.clone(),
                path: std::fs::canonicalize(&s.path).unwrap_or_else(|_| s.path.clone()),
                vol: e.vol.clone(),
            })
            .collect();
        let ep = Arc::new(sluice::metrics::Endpoint::new(vols, m));
        match sluice::metrics::http::serve(l, ep, stop.clone()) {
            Ok(bound) => say!("sluice: metrics at http://{bound}/metrics"),
            Err(e) => {
                let e = anyhow::Error::from(e).context("starting the metrics endpoint");
                return Err(leftovers.close(&exports, e));
            }
        }
    }
    let server = match Server::new(exports.clone(), cfg) {
        Ok(s) => s,
        Err(e) => return Err(leftovers.close(&exports, e.into())),
    };
    if a.replace.is_some() {
        // the exports are up: the rebuild runs on the volume's own thread
        // (`close` below stops it between two batches, resumable)
        if let Err(e) = exports[0].vol.start_rebuild(a.rebuild_rate) {
            let e = anyhow::Error::from(e).context("starting the rebuild");
            return Err(leftovers.close(&exports, e));
        }
    }
    {
        // The URI on stdout; a closed stdout loses it but does not stop the server.
        let mut out = std::io::stdout().lock();
        let uri = uri(&addr, &specs[0].name, tls == TlsMode::Require);
        if let Err(e) = writeln!(out, "{uri}").and_then(|_| out.flush()) {
            tracing::warn!("writing the URI to stdout: {e}");
        }
    }
    for (e, spec) in exports.iter().zip(&specs) {
        say!(
            "sluice: serving {} ({}{}) at {}",
            spec.path.display(),
            human(e.vol.size_bytes()),
            if e.read_only { ", read-only" } else { "" },
            uri(&addr, &e.name, tls == TlsMode::Require)
        );
    }
    if let Some(d) = &daemon {
        d.ready();
        // Ready: from now on nothing goes to the launching terminal.
        match log_file {
            Some(f) => say::to_file(f),
            None => say::to_syslog(),
        }
        Daemon::detach_stderr();
        say!(
            "sluice: pid {} serving {} export(s) at {}",
            std::process::id(),
            exports.len(),
            uri(&addr, &specs[0].name, tls == TlsMode::Require)
        );
    } else if let Some(f) = log_file {
        say::to_file(f);
    }
    sd_notify(&format!("READY=1\nMAINPID={}", std::process::id()));

    let served = server.run(listener, &stop);
    sd_notify("STOPPING=1");
    drop(server);
    // (a trace that cannot be finished is reported after the volumes are closed)
    let recorded = match (&recorder, &a.record) {
        (Some(r), Some(p)) => r
            .finish()
            .with_context(|| format!("writing {}", p.display())),
        _ => Ok(()),
    };
    let mut closed = Ok(());
    let mut host_written = 0;
    for (e, spec) in exports.iter().zip(&specs) {
        let path = &spec.path;
        let r = e.vol.flush().and_then(|_| {
            let st = e.vol.stats();
            host_written += st.host_write_bytes;
            say!(
                "sluice: {}: served {:.1} MiB written, {:.1} MiB read, {} flushes ({} media flushes), {}",
                path.display(),
                st.host_write_bytes as f64 / 1048576.0,
                st.host_read_bytes as f64 / 1048576.0,
                st.host_flushes,
                st.media_flushes,
                st.wa_text()
            );
            if st.gc_runs > 0 {
                let moved = st.gc_blocks_moved * 4096;
                say!(
                    "sluice: {}: GC {} victims, {:.1} MiB read, {:.1} MiB moved ({:.2} bytes read per byte moved)",
                    path.display(),
                    st.gc_runs,
                    st.gc_bytes_read as f64 / 1048576.0,
                    moved as f64 / 1048576.0,
                    st.gc_bytes_read as f64 / moved.max(1) as f64
                );
            }
            e.vol.close()
        });
        match r {
            Ok(()) => say!("sluice: stopped; {} closed cleanly", path.display()),
            Err(err) => {
                if closed.is_ok() {
                    closed = Err(err).with_context(|| format!("closing {}", path.display()));
                }
            }
        }
    }
    if a.replace.is_some() {
        match exports[0].vol.stripe_set().and_then(|s| s.status().rebuild) {
            Some(p) => say!(
                "sluice: rebuild of member {} stopped at segment {} of {}; serve (or replace) again with the same new member to resume",
                p.slot,
                p.next_segment,
                p.segment_count
            ),
            None => say!("sluice: the replaced member is rebuilt"),
        }
    }
    if closed.is_ok() {
        closed = super::objects::finish_attached(host_written);
    }
    leftovers.remove();
    served.context("serving")?;
    closed?;
    recorded?;
    Ok(0)
}

/// The set-up steps between binding the NBD socket and writing the pid file:
/// bind the metrics listener, open the log file, fork. Touches no volume.
fn set_up(
    a: &Args,
    specs: &[exports::ExportSpec],
) -> anyhow::Result<(
    Option<std::net::TcpListener>,
    Option<std::fs::File>,
    Option<Daemon>,
)> {
    let metrics = match &a.metrics {
        Some(addr) => {
            Some(sluice::metrics::http::bind(addr).with_context(|| format!("--metrics {addr}"))?)
        }
        None => None,
    };
    let log_file = match &a.log_file {
        Some(p) => {
            let vols: Vec<PathBuf> = specs.iter().map(|s| s.path.clone()).collect();
            Some(say::open_log_file(p, &vols)?)
        }
        None => None,
    };
    let daemon = if a.fork { Some(Daemon::fork()?) } else { None };
    Ok((metrics, log_file, daemon))
}

/// SIGINT/SIGTERM/SIGHUP stop the server (drain, flush, close); a second one
/// exits at once. SIGUSR1/SIGUSR2 are ignored. (SIGPIPE is ignored by Rust's
/// runtime: a write to a closed pipe or socket is an error, not a death.)
fn signals(stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        // A second signal while draining exits at once (like a crash: flushed data is safe).
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())?;
        signal_hook::flag::register(sig, stop.clone())?;
    }
    // SIGUSR1/SIGUSR2 would kill the server (no drain): ignore them instead.
    let ignored = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGUSR1, signal_hook::consts::SIGUSR2] {
        signal_hook::flag::register(sig, ignored.clone())?;
    }
    Ok(())
}

/// What the server leaves on the file system until it exits: the Unix socket it
/// bound and the pid file it wrote. Removed on every way out of `run`.
struct Leftovers {
    socket: Option<PathBuf>,
    pid_file: Option<PidFile>,
}

impl Leftovers {
    fn remove(&self) {
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
        if let Some(p) = &self.pid_file {
            p.remove_if_ours();
        }
    }
    /// A set-up step failed before any volume was opened: remove what is there.
    fn on_error<T>(&self, r: anyhow::Result<T>) -> anyhow::Result<T> {
        if r.is_err() {
            self.remove();
        }
        r
    }
    /// A step failed after volumes were mounted: close them cleanly (a failed
    /// start is no crash), remove what is there, and return `e`.
    fn close(&self, exports: &[Export], e: anyhow::Error) -> anyhow::Error {
        for x in exports {
            let _ = x.vol.close();
        }
        self.remove();
        e
    }
}
