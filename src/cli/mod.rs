//! Command-line frontend: argument definitions and dispatch. No engine policy here.

/// Print one line of a command's messages (stderr, or the log once `serve --fork`
/// is ready) and ignore write errors: a closed stderr must never stop a command
/// half way (see `say.rs`).
macro_rules! say {
    ($($t:tt)*) => {
        $crate::cli::say::line(format_args!($($t)*))
    };
}

mod bench;
mod create;
mod exports;
mod info;
mod objects;
mod replace;
mod replay;
pub mod say;
mod serve;
mod sim;
mod stripe;
mod top;
mod tune;

use clap::{Parser, Subcommand};

/// `sluice serve --help` after the options: examples, then an exports file.
fn serve_after_help() -> String {
    format!(
        "Prints the NBD URI to connect to on stdout.\n\nExamples:\n  sluice serve vol.img --socket /tmp/vol.sock\n  sluice serve vol.img --port 10809 --export-name vol\n  sluice serve --create vol.img --size 10G --socket /tmp/vol.sock\n  sluice serve vol.img --socket /tmp/vol.sock --read-only --pid-file /run/sluice.pid\n  sluice serve --config /etc/sluice/exports.toml --port 10809\n\nThen, for example:\n  nbdinfo 'nbd+unix:///?socket=/tmp/vol.sock'\n  qemu-img convert -n -O raw disk.img 'nbd+unix:///?socket=/tmp/vol.sock'\n  nbdfuse /mnt/vol 'nbd+unix:///?socket=/tmp/vol.sock'\n\nAn exports file for --config (TOML):\n{}",
        exports::EXAMPLE
    )
}

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A log-structured block volume: random writes in, large aligned checksummed appends out",
    after_help = "Examples:\n  sluice create vol.img --size 10G\n  sluice info vol.img\n  sluice check vol.img --json"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create a volume in a file (created sparse if missing) or on a block device.
    #[command(
        after_help = "Examples:\n  sluice create vol.img --size 10G\n  sluice create /dev/sdb --overprovision 20 --segment-size 8M"
    )]
    Create(create::Args),
    /// Show geometry, options, stats and format version of a volume.
    #[command(after_help = "Examples:\n  sluice info vol.img\n  sluice info vol.img --json")]
    Info(info::InfoArgs),
    /// Verify superblocks, checkpoints, every chunk's checksum and the map (exit 0 clean, 1 damaged, 2 usage).
    #[command(after_help = "Examples:\n  sluice check vol.img\n  sluice check vol.img --json")]
    Check(info::CheckArgs),
    /// Rewrite lost or damaged superblock copies (head and tail) and checkpoint from a volume that still mounts; check before and after (exit 0 clean after, 1 damaged, 2 usage).
    #[command(
        after_help = "Examples:\n  sluice check vol.img   # exit 1: superblock copies at the head are unreadable\n  sluice repair vol.img"
    )]
    Repair(info::RepairArgs),
    /// Change the intent log devices of a volume that is not mounted (replace, add, remove).
    #[command(
        after_help = "Examples:\n  sluice log-device replace vol.img /dev/nvme0n1p3\n  sluice log-device replace vol.img new.log --mirror 1 --log-device a.log\n  sluice log-device add vol.img /dev/nvme0n1p3\n  sluice log-device add vol.img b.log --log-device a.log\n  sluice log-device remove vol.img b.log --log-device a.log\n  sluice log-device remove vol.img a.log"
    )]
    LogDevice(create::LogDeviceArgs),
    /// Change a setting of a volume that is not served: whether a compressed volume compresses new writes.
    #[command(
        after_help = "Examples:\n  sluice tune vol.img --compress off\n  sluice tune vol.img --compress lz4\n\nThe volume keeps its format (5-byte map values, fragments written before stay readable); every later mount honours the setting. A volume created without --compress lz4 cannot be switched on."
    )]
    Tune(tune::Args),
    /// Replace a stripe set member (lost or failing) with a new file or device and rebuild it, copying only live segments; resumes a rebuild cut short.
    #[command(
        after_help = "Examples:\n  sluice replace --device a.img --device b.img --device d.img --device e.img --device f.img --old 2 --new c2.img\n  sluice replace --device /dev/sdb --device /dev/sdc --device /dev/sdd --device /dev/sde --old /dev/sdd --new /dev/sdg --rate 200M"
    )]
    Replace(replace::Args),
    /// Benchmarks from the seeds (grid, slog, steady, mix) and more, on sluice and its peers side by side.
    #[command(
        after_help = "Examples:\n  sluice bench grid --target sluice:vol.img --target file:raw.img --size 8G --sizes 4K,128K\n  sluice bench slog --target nbd:nbd+unix:///vol?socket=/tmp/s.sock\n  sluice bench steady --target sluice:vol.img --duration 10m --interval 30s --plot steady.svg\n  sluice bench mix --target sluice:vol.img --target file:raw.img --json mix.json\n  sluice bench ceiling --target file:raw.img --target sluice:vol.img"
    )]
    Bench(Box<bench::Args>),
    /// Replay a block trace on the engine (JESD219 style) and report write amplification.
    #[command(
        after_help = "Examples:\n  sluice replay --trace tpcc-small.trace --format mqsim --fill\n  sluice replay --trace cloudPhysicsIO.csv.gz --format cloudphysics --map dense --fill --overprovision 7 --json\n  sluice replay --trace t.trace --media flash-sim --bare --fill"
    )]
    Replay(replay::Args),
    /// Synthetic workloads on the engine: WA per over-provisioning beside the analytic greedy curve.
    #[command(
        after_help = "Examples:\n  sluice sim --workload uniform --sweep 5,10,20,50\n  sluice sim --workload zipf:0.99 --gc generational --plot wa.svg\n  sluice sim --workload 'mix:hotcold:80/20@0.9,seq@0.1' --trim 0.05 --json"
    )]
    Sim(sim::Args),
    /// Export a volume over NBD (Unix socket or TCP) until SIGINT/SIGTERM.
    #[command(after_help = serve_after_help())]
    Serve(Box<serve::Args>),
    /// Live view of a serving volume (IOPS, MB/s, WA, GC, free space, access pattern)
    /// from its metrics endpoint (`sluice serve --metrics ADDR`).
    #[command(
        after_help = "Examples:\n  sluice serve vol.img --socket /tmp/s.sock --metrics :9100 &\n  sluice top :9100\n  sluice top 127.0.0.1:9100 --json --count 10"
    )]
    Top(top::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(
        after_help = "Examples:\n  sluice completions bash > /etc/bash_completion.d/sluice\n  sluice completions zsh > ~/.zfunc/_sluice"
    )]
    Completions {
        /// Shell to generate completions for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, of sluice or of one subcommand.
    #[command(
        after_help = "Examples:\n  sluice man > sluice.1 && man ./sluice.1\n  sluice man serve > sluice-serve.1"
    )]
    Man {
        /// Subcommand whose page to print (default: the main page).
        subcommand: Option<String>,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<i32> {
    keep_heap();
    match cli.cmd {
        Cmd::Create(a) => create::run(a),
        Cmd::Info(a) => info::run_info(a),
        Cmd::Check(a) => info::run_check(a),
        Cmd::Repair(a) => info::run_repair(a),
        Cmd::LogDevice(a) => create::run_log_device(a),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Replace(a) => replace::run(a),
        Cmd::Bench(a) => bench::run(*a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Serve(a) => serve::run(*a),
        Cmd::Top(a) => top::run(a),
        Cmd::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "sluice", &mut std::io::stdout());
            Ok(0)
        }
        Cmd::Man { subcommand } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            let page = match subcommand {
                None => cmd,
                Some(name) => {
                    let Some(sub) = cmd.find_subcommand(&name) else {
                        anyhow::bail!("no subcommand {name:?}");
                    };
                    let full: &'static str = Box::leak(format!("sluice-{name}").into_boxed_str());
                    sub.clone().name(full)
                }
            };
            clap_mangen::Man::new(page).render(&mut std::io::stdout())?;
            Ok(0)
        }
    }
}

/// Colour codes in log lines: only on a terminal, and never for a server whose
/// logs go to syslog or a file once it is ready.
pub fn log_ansi(cli: &Cli) -> bool {
    use std::io::IsTerminal;
    let detached = matches!(&cli.cmd, Cmd::Serve(a) if a.fork || a.log_file.is_some());
    std::io::stderr().is_terminal() && !detached
}

/// Default log filter for a command: warn, or what `serve -v/-q` asks for.
pub fn log_level(cli: &Cli) -> &'static str {
    match &cli.cmd {
        Cmd::Serve(a) if a.quiet => "error",
        Cmd::Serve(a) => match a.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        },
        _ => "warn",
    }
}

/// clap value parser for sizes with K/M/G/T suffixes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    sluice::size::parse_size(s)
}

/// The engine allocates and frees 1-4 MiB buffers (GC victims, large reads, chunk
/// images beyond its pool); glibc serves those with mmap/munmap, so every buffer
/// page faults afresh (a third of replay CPU time, a fifth of the server's, when
/// profiled). Keep them on the heap instead.
fn keep_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes glibc's allocator; called before any threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}
