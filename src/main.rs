//! The `sluice` command: thin CLI over the library. Each subcommand lives in
//! `src/cli/<name>.rs`; this file only parses arguments and maps errors to exit codes.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    // RUST_LOG (or SLUICE_LOG) overrides the level the command asks for; no
    // colour codes unless stderr is a terminal.
    use std::io::IsTerminal;
    let filter = ["SLUICE_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| tracing_subscriber::EnvFilter::try_from_env(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(cli::log_level(&args)));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let code = match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
