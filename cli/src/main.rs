//! `granary`: the operator's command line, and the local runtime that runs granary on an emulator.

mod classify_cmd;
mod demo_cmd;
mod items_cmd;

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
    /// Examples:
    ///   granary classify event.json
    ///   granary classify - --json < event.json
    #[command(verbatim_doc_comment)]
    Classify(classify_cmd::Args),
    /// Run a whole campaign locally on the AWS emulator, with faults, and print what happened.
    ///
    /// Examples:
    ///   granary demo --granules 2000 --seed 7
    ///   granary demo --endpoint http://127.0.0.1:5000 --json
    #[command(verbatim_doc_comment)]
    Demo(demo_cmd::Args),
    /// Find item records and read their history (bucket from GRANARY_BUCKET or --bucket).
    ///
    /// Examples:
    ///   granary items find --state PROCESSING_FAILED
    ///   granary items get HLS.S30.T01GBH.2022226T214921.v2.0 --json
    ///   granary items history HLS.S30.T01GBH.2022226T214921.v2.0
    #[command(verbatim_doc_comment)]
    Items(items_cmd::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Classify(args) => classify_cmd::run(args),
        Command::Demo(args) => demo_cmd::run(args).await,
        Command::Items(args) => items_cmd::run(args).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
