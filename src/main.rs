//! The `sluice` command: thin CLI over the library. Each subcommand lives in
//! `src/cli/<name>.rs`; this file only parses arguments and maps errors to exit codes.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    // RUST_LOG (or SLUICE_LOG) overrides the level the command asks for; no
    // colour codes unless stderr is a terminal. Log lines go where `say!` goes
    // (stderr, or syslog / --log-file once `serve --fork` is ready), and a write
    // error never panics (a closed stderr must not stop a server's shutdown).
    let filter = ["SLUICE_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| tracing_subscriber::EnvFilter::try_from_env(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(cli::log_level(&args)));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(cli::log_ansi(&args))
        .with_writer(cli::say::Logs)
        .init();
    let code = match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            cli::say::write(libc::LOG_ERR, format!("sluice: error: {e:#}\n").as_bytes());
            1
        }
    };
    std::process::exit(code);
}
