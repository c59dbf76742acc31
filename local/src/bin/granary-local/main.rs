//! `granary-local`: granary on the local runtime — the demo campaign on the AWS emulator, and the
//! chaos campaign on the in-memory twins. Not an operator's tool: `granary` is.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod chaos;
mod demo;
mod dry_run;
mod ingest_demo;
mod simulate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "granary-local",
    version,
    about = "granary on the local runtime: a demo campaign on the AWS emulator, chaos in memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a whole campaign locally on the AWS emulator, with faults, and print what happened.
    ///
    /// Examples:
    ///   granary-local demo
    ///   granary-local demo --granules 2000 --seed 7 --keep
    ///   granary-local demo --endpoint http://127.0.0.1:5000 --json
    ///   granary-local demo --ingest
    #[command(verbatim_doc_comment)]
    Demo(demo::Args),
    /// Prove "nothing lost, nothing twice": a campaign on the in-memory twins with crashes at random
    /// external calls, throttling, and duplicated and reordered events; exits 1 if anything was
    /// lost, submitted twice or succeeded twice.
    ///
    /// Examples:
    ///   granary-local chaos --granules 10000 --seed 7
    ///   granary-local chaos --granules 100000 --json
    #[command(verbatim_doc_comment)]
    Chaos(chaos::Args),
    /// The chaos campaign on one virtual clock: the deployed leases, visibility timeouts,
    /// schedules and function timeouts, simulated hours in seconds; a seed replays a run exactly.
    /// Exits 1 if the promise did not hold (the report says how to replay it).
    ///
    /// Examples:
    ///   granary-local simulate --seed 7
    ///   granary-local simulate --seed 7 --listing-lag-secs 1800 --json
    ///   granary-local simulate --env GRANARY_ARRAY_WINDOWS=on
    #[command(verbatim_doc_comment)]
    Simulate(simulate::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The handlers' own logs, on stderr, when asked for (RUST_LOG=warn, RUST_LOG=granary=debug).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        // Its own paused runtime, on a thread of its own (a runtime cannot start in another).
        Command::Simulate(args) => std::thread::spawn(move || simulate::run(args))
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the simulation panicked"))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
