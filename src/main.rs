//! The `sluice` command: thin CLI over the library. Each subcommand lives in
//! `src/cli/<name>.rs`; this file only parses arguments and maps errors to exit codes.

mod cli;

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = cli::Cli::parse();
    let code = match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
