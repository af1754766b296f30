//! `sluice serve`: mount a volume and export it over NBD on a Unix socket or TCP
//! port until SIGINT/SIGTERM, then drain, flush and close it cleanly.
//!
//! Invariant: the volume is closed (checkpointed) only after every connection
//! has answered all requests it accepted; one server per volume (flock).

use super::create;
use anyhow::{bail, Context};
use sluice::media::{FileMedia, Media};
use sluice::nbd::{Listener, Server, ServerConfig};
use sluice::size::human;
use sluice::{OpenOptions, Volume};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("listen").required(true).args(["socket", "port"])))]
pub struct Args {
    /// Volume file or block device (see `sluice create`, or use --create).
    pub path: PathBuf,
    /// Listen on this Unix socket (as qemu-nbd --socket / nbdkit --unix).
    #[arg(short = 'k', long, alias = "unix", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP port (as qemu-nbd --port); 10809 is the NBD default.
    #[arg(short = 'p', long, value_name = "N")]
    pub port: Option<u16>,
    /// Address to bind the TCP port to. Anything other than loopback exposes the
    /// volume, unauthenticated, to the network.
    #[arg(short = 'b', long, default_value = "127.0.0.1", requires = "port")]
    pub bind: String,
    /// Export name clients ask for (the empty name always works too).
    #[arg(short = 'x', long, default_value = "")]
    pub export_name: String,
    /// Export read-only: writes, trims and zeroes fail with EPERM.
    #[arg(short = 'r', long)]
    pub read_only: bool,
    /// Write the server's pid here once it is listening; removed at exit.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Create the volume first if PATH does not exist (needs --size).
    #[arg(long)]
    pub create: bool,
    /// Size of the volume --create makes, e.g. 10G.
    #[arg(long, value_parser = super::parse_size, requires = "create")]
    pub size: Option<u64>,
    /// Most client connections served at once (as qemu-nbd --shared).
    #[arg(short = 'e', long, default_value_t = 128)]
    pub shared: usize,
    /// Worker threads running reads, flushes and FUA writes.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Send every request to the worker pool, also writes without FUA (for
    /// benchmarking the dispatch choice; see docs/nbd.md).
    #[arg(long, hide = true)]
    pub no_inline_writes: bool,
    /// Capture every request (time, op, offset, length) to FILE in sluice's trace
    /// format, replayable with `sluice replay --format sluice`.
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
}

fn uri(a: &Args, port: Option<u16>) -> String {
    match (&a.socket, port) {
        (Some(s), _) => format!("nbd+unix:///{}?socket={}", a.export_name, s.display()),
        (None, Some(p)) => {
            let host = if a.bind.contains(':') {
                format!("[{}]", a.bind)
            } else {
                a.bind.clone()
            };
            format!("nbd://{host}:{p}/{}", a.export_name)
        }
        (None, None) => unreachable!("clap requires --socket or --port"),
    }
}

/// Take an exclusive (shared when read-only) lock on the volume so two servers
/// never mount it read-write at once. Held until the returned file is dropped.
fn lock_volume(path: &Path, read_only: bool) -> anyhow::Result<std::fs::File> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let op = if read_only {
        libc::LOCK_SH
    } else {
        libc::LOCK_EX
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
        bail!(
            "{} is in use by another sluice process: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(f)
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

pub fn run(a: Args) -> anyhow::Result<i32> {
    // (the allocator is tuned for all commands in cli::run)
    if a.create && a.read_only {
        bail!("--create and --read-only do not go together: create the volume first");
    }
    if a.export_name.len() > 4096 || a.export_name.contains('\0') {
        bail!("--export-name must be at most 4096 bytes without NUL");
    }
    if a.shared == 0 || a.workers == 0 || a.workers > 1024 {
        bail!("--shared must be at least 1 and --workers between 1 and 1024");
    }
    if a.create && !a.path.exists() {
        if a.size.is_none() {
            bail!("--create needs --size for a volume that does not exist yet");
        }
        let vol = create::create_volume(&create::Args {
            path: a.path.clone(),
            size: a.size,
            overprovision: 10.0,
            segment_size: 4 << 20,
            gc: sluice::gc::DEFAULT_POLICY,
            force: false,
        })?;
        vol.close()?;
        eprintln!(
            "sluice: created {} ({})",
            a.path.display(),
            human(a.size.unwrap_or(0))
        );
    } else if !a.path.exists() {
        bail!(
            "{} does not exist: create it with `sluice create` or pass --create --size SIZE",
            a.path.display()
        );
    }
    let _lock = lock_volume(&a.path, a.read_only)?;
    let media: Arc<dyn Media> = Arc::new(
        FileMedia::open(&a.path, a.read_only)
            .with_context(|| format!("opening {}", a.path.display()))?,
    );
    if a.scrub_rate == Some(0) {
        bail!("--scrub-rate must be above 0 (leave it out to turn scrub off)");
    }
    let opts = OpenOptions {
        read_only: a.read_only,
        verify_reads: !a.no_verify_reads,
        scrub_rate: a.scrub_rate,
        ..OpenOptions::default()
    };
    let vol = Arc::new(
        Volume::open(media, &opts).with_context(|| format!("mounting {}", a.path.display()))?,
    );
    if let (Some(want), true) = (a.size, a.create) {
        if want != vol.size_bytes() {
            eprintln!(
                "sluice: warning: {} already exists with size {} (--size {} ignored)",
                a.path.display(),
                human(vol.size_bytes()),
                human(want)
            );
        }
    }
    let r = vol.mount_report();
    if !r.clean {
        eprintln!(
            "sluice: recovered {} after an unclean shutdown: replayed {} chunks in {} ms",
            a.path.display(),
            r.chunks_replayed,
            r.mount_ms
        );
    }

    let (listener, port) = match (&a.socket, a.port) {
        (Some(s), _) => (bind_unix(s)?, None),
        (None, Some(p)) => {
            let l = std::net::TcpListener::bind((a.bind.as_str(), p))
                .with_context(|| format!("binding {}:{p}", a.bind))?;
            let port = l.local_addr()?.port();
            (Listener::Tcp(l), Some(port))
        }
        (None, None) => bail!("give exactly one of --socket PATH or --port N"),
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while draining exits at once (like a crash: flushed data is safe).
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())?;
        signal_hook::flag::register(sig, stop.clone())?;
    }

    if let Some(p) = &a.pid_file {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, p).with_context(|| format!("writing {}", p.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", uri(&a, port))?;
        out.flush()?;
    }
    eprintln!(
        "sluice: serving {} ({}{}) at {}; Ctrl-C to stop",
        a.path.display(),
        human(vol.size_bytes()),
        if a.read_only { ", read-only" } else { "" },
        uri(&a, port)
    );

    let recorder = match &a.record {
        Some(p) => Some(Arc::new(
            sluice::trace::Recorder::create(p)
                .with_context(|| format!("creating trace file {}", p.display()))?,
        )),
        None => None,
    };
    let server = Server::new(
        vol.clone(),
        ServerConfig {
            export_name: a.export_name.clone(),
            read_only: a.read_only,
            max_connections: a.shared,
            workers: a.workers,
            inline_writes: !a.no_inline_writes,
            recorder: recorder.clone(),
            ..ServerConfig::default()
        },
    )?;
    let served = server.run(listener, &stop);
    drop(server);
    if let (Some(r), Some(p)) = (&recorder, &a.record) {
        r.finish()
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let closed = vol.flush().and_then(|_| {
        let st = vol.stats();
        eprintln!(
            "sluice: served {:.1} MiB written, {:.1} MiB read, {} flushes ({} media flushes), WA {:.2}",
            st.host_write_bytes as f64 / 1048576.0,
            st.host_read_bytes as f64 / 1048576.0,
            st.host_flushes,
            st.media_flushes,
            st.write_amplification
        );
        vol.close()
    });
    if let Some(s) = &a.socket {
        let _ = std::fs::remove_file(s);
    }
    if let Some(p) = &a.pid_file {
        let _ = std::fs::remove_file(p);
    }
    served.context("serving")?;
    closed.with_context(|| format!("closing {}", a.path.display()))?;
    eprintln!("sluice: stopped; {} closed cleanly", a.path.display());
    Ok(0)
}
