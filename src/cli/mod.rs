//! Command-line frontend: argument definitions and dispatch. No engine policy here.

mod bench;
mod create;
mod info;

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
    /// Benchmarks from the seeds (grid, slog, steady, mix) and more, on sluice and its peers side by side.
    #[command(
        after_help = "Examples:\n  sluice bench grid --target sluice:vol.img --target file:raw.img --size 8G --sizes 4K,128K\n  sluice bench slog --target nbd:nbd+unix:///vol?socket=/tmp/s.sock\n  sluice bench steady --target sluice:vol.img --duration 10m --interval 30s --plot steady.svg\n  sluice bench mix --target sluice:vol.img --target file:raw.img --json mix.json\n  sluice bench ceiling --target file:raw.img --target sluice:vol.img"
    )]
    Bench(Box<bench::Args>),
}

pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.cmd {
        Cmd::Create(a) => create::run(a),
        Cmd::Info(a) => info::run_info(a),
        Cmd::Check(a) => info::run_check(a),
        Cmd::Bench(a) => bench::run(*a),
    }
}

/// clap value parser for sizes with K/M/G/T suffixes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    sluice::size::parse_size(s)
}
