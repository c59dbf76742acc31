//! `granary`: the operator's command line, and the local runtime that runs granary on an emulator.

mod classify_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "granary",
    version,
    about = "Run data-processing campaigns on AWS Batch without losing work"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explain what the job monitor does with one Batch Job State Change event.
    ///
    /// Example: granary classify event.json
    ///          aws events ... | granary classify - --json
    Classify(classify_cmd::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Classify(args) => classify_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
