//! Command-line frontend: argument definitions and dispatch. No engine policy here.

mod create;
mod info;
mod serve;

use clap::{Parser, Subcommand};

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
    /// Export a volume over NBD (Unix socket or TCP) until SIGINT/SIGTERM.
    #[command(
        after_help = "Prints the NBD URI to connect to on stdout.\n\nExamples:\n  sluice serve vol.img --socket /tmp/vol.sock\n  sluice serve vol.img --port 10809 --export-name vol\n  sluice serve --create vol.img --size 10G --socket /tmp/vol.sock\n  sluice serve vol.img --socket /tmp/vol.sock --read-only --pid-file /run/sluice.pid\n\nThen, for example:\n  nbdinfo 'nbd+unix:///?socket=/tmp/vol.sock'\n  qemu-img convert -n -O raw disk.img 'nbd+unix:///?socket=/tmp/vol.sock'\n  nbdfuse /mnt/vol 'nbd+unix:///?socket=/tmp/vol.sock'"
    )]
    Serve(serve::Args),
}

pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Create(a) => create::run(a),
        Cmd::Info(a) => info::run_info(a),
        Cmd::Check(a) => info::run_check(a),
        Cmd::Serve(a) => serve::run(a),
    }
}

/// clap value parser for sizes with K/M/G/T suffixes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    sluice::size::parse_size(s)
}
