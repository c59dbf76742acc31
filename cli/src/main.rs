//! `granary`: the operator's command line. The local runtime (demo, chaos) is `granary-local`.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod archive_cmd;
mod cancel_cmd;
mod classify_cmd;
mod ingest_cmd;
mod ingest_tick;
mod inventory_cmd;
mod items_cmd;
mod operator;
mod ops_cmd;

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
    /// The ingest queue: submit batches from a manifest, follow them, hold, resume, report, delete.
    ///
    /// Examples:
    ///   granary ingest submit objects.checkm --collection maps
    ///   granary ingest status --watch
    ///   granary ingest resume --batch b20261124030405-abcdef01
    #[command(verbatim_doc_comment)]
    Ingest(ingest_cmd::Args),
    /// Archive jobs: package an S3 prefix or an ingest batch, check it, sign it, store it.
    ///
    /// Examples:
    ///   granary archive create --prefix s3://products/l2/ --dest s3://vault/archives/:DEEP_ARCHIVE
    ///   granary archive status
    ///   granary archive verify s3://vault/archives/a20261124070000-1a2b3c4d/
    #[command(verbatim_doc_comment)]
    Archive(archive_cmd::Args),
    /// Inventories in the layout the feeder reads best: convert lists of ids (text, CSV, JSON
    /// lines, Parquet), sorted newest first, duplicates and invalid ids left out.
    ///
    /// Example:
    ///   granary inventory convert granules.txt --out s3://my-bucket/inventories/2026-11.parquet
    #[command(verbatim_doc_comment)]
    Inventory(inventory_cmd::Args),
    /// Find item records and read their history (bucket from GRANARY_BUCKET or --bucket).
    ///
    /// Examples:
    ///   granary items find --state PROCESSING_FAILED
    ///   granary items get HLS.S30.T01GBH.2022226T214921.v2.0 --json
    ///   granary items history HLS.S30.T01GBH.2022226T214921.v2.0
    #[command(verbatim_doc_comment)]
    Items(items_cmd::Args),
    /// Before launch (and while running): the inventories' rows from their footers, what is left,
    /// and the forecast duration and cost from the configuration and the measured pace.
    ///
    /// Examples:
    ///   granary plan --job-minutes 20 --job-hour-price 0.012
    ///   granary plan --inventory inventories/2022.parquet --max-active-jobs 5000 --json
    #[command(verbatim_doc_comment)]
    Plan(ops_cmd::PlanArgs),
    /// What is left and when it will finish: inventories, active jobs, queues, hold, throughput, ETA.
    ///
    /// Example: granary status
    #[command(verbatim_doc_comment)]
    Status(ops_cmd::StatusArgs),
    /// The report queries' numbers (platform × outcome, acquisition year, failures by reason,
    /// successes per day), from a scan of the logs or from Athena; table, CSV or JSON, and a chart.
    ///
    /// Examples:
    ///   granary report --scan
    ///   granary report --scan --csv --chart successes.svg
    ///   granary report --athena --workgroup granary-operators --database granary
    #[command(verbatim_doc_comment)]
    Report(ops_cmd::ReportArgs),
    /// Join the inventories, the logs and the products: list the granules missing (nothing
    /// will move them), the successes without their products, the products no row explains,
    /// the doubled, and the dead letters by reason, as CSV and Parquet lists to rerun from.
    ///
    /// Examples:
    ///   granary audit --out audit-2026-12
    ///   granary resume --from-list audit-2026-12/missing.csv --dry-run
    ///   granary redrive --from-list audit-2026-12/dead_letters.csv --dry-run
    #[command(verbatim_doc_comment)]
    Audit(ops_cmd::AuditArgs),
    /// Failure-DLQ messages back to the retry queue: all, or by reason, attempt or granule.
    ///
    /// Examples:
    ///   granary redrive --reason 'exit code 137' --dry-run
    ///   granary redrive --granule '^HLS\.S30\.T18' --attempt 1 --rate 20
    ///   granary redrive --all --max 500
    #[command(verbatim_doc_comment)]
    Redrive(ops_cmd::RedriveArgs),
    /// Batch events parked in the events DLQ back to the events queue, unchanged, for the job
    /// monitor (events it failed on repeatedly, and events EventBridge could not deliver).
    ///
    /// Examples:
    ///   granary redrive-events --dry-run
    ///   granary redrive-events --max 1000 --rate 20
    #[command(verbatim_doc_comment)]
    RedriveEvents(ops_cmd::RedriveEventsArgs),
    /// Import messages parked in the import DLQ (an importer step failed on them repeatedly:
    /// most often an admission waiting for prerequisites) back to the import queue, unchanged;
    /// the importer decides each item's step again from its record.
    ///
    /// Examples:
    ///   granary redrive-imports --dry-run
    ///   granary redrive-imports --item '^S2B_' --rate 10
    #[command(verbatim_doc_comment)]
    RedriveImports(ops_cmd::RedriveImportsArgs),
    /// A spend budget and a deadline the feeder paces the campaign to: at the budget it holds
    /// itself (with an alarm); for the deadline it raises its count. The cost a granule is
    /// measured from the logs, as `granary report --cost` prices them.
    ///
    /// Examples:
    ///   granary pace --budget 1200 --deadline 2026-12-31T00:00:00Z --capacity spot
    ///   granary pace --budget 500 --dollars-per-granule 0.0012
    ///   granary pace --clear
    #[command(verbatim_doc_comment)]
    Pace(ops_cmd::PaceArgs),
    /// Hold the feeder: it submits nothing, and keeps its place, until `granary release`.
    ///
    /// Example: granary hold --reason "new container image rolling out"
    #[command(verbatim_doc_comment)]
    Hold(ops_cmd::HoldArgs),
    /// Release the feeder's hold: the next run resumes at the row it stopped at.
    ///
    /// Example: granary release
    #[command(verbatim_doc_comment)]
    Release,
    /// Failed or abandoned items back to their last successful state, their next attempt
    /// granted; a DOWNLOADED item (its admission waited until its message was parked) admitted
    /// again.
    ///
    /// Examples:
    ///   granary resume HLS.S30.T01GBH.2022226T214921.v2.0
    ///   granary resume --state PROCESSING_FAILED --dry-run
    ///   granary resume --state ABANDONED
    ///   granary resume --state DOWNLOADED
    ///   granary resume --cancelled --cancel c20261127T060001-3f2a9c1d
    #[command(verbatim_doc_comment)]
    Resume(ops_cmd::ResumeArgs),
    /// Terminate exactly this campaign's open attempts (the job ids granary recorded, never a
    /// name prefix), or those a filter takes; the feeder is held first. Their ends are logged
    /// and listed for `granary resume --cancelled`, neither retried nor dead-lettered.
    ///
    /// Examples:
    ///   granary cancel --reason "wrong container image" --dry-run
    ///   granary cancel --reason "S30 inputs bad" --platform S30 --rate 10
    ///   granary cancel --reason "redo" --inventory inventories/2022.parquet --attempt 1
    #[command(verbatim_doc_comment)]
    Cancel(cancel_cmd::CancelArgs),
    /// Ask the importer to check again what is stored for items: a DOWNLOADED item's raw file
    /// (size, digest, the kind its name says) or a PROCESSED item's products. What fails goes
    /// back to its download or processing path; the importer-step Lambda does the checking.
    ///
    /// Examples:
    ///   granary revalidate HLS.S30.T01GBH.2022226T214921.v2.0
    ///   granary revalidate --state PROCESSED --dry-run
    #[command(verbatim_doc_comment)]
    Revalidate(ops_cmd::RevalidateArgs),
    /// Every setting granary reads: its default, who changes it and why, what reads it, and
    /// its template parameter (docs/configuration.md is this, with --markdown).
    ///
    /// Examples:
    ///   granary settings
    ///   granary settings --markdown > docs/configuration.md
    #[command(verbatim_doc_comment)]
    Settings(SettingsArgs),
}

#[derive(clap::Args)]
struct SettingsArgs {
    /// The page docs/configuration.md holds, instead of one line a setting.
    #[arg(long)]
    markdown: bool,
}

/// `granary settings`: the catalogue, one line a setting, with its value in this shell.
fn settings(args: &SettingsArgs) -> ExitCode {
    use granary::config::catalogue::SETTINGS;
    if args.markdown {
        print!("{}", granary::config::catalogue::markdown());
        return ExitCode::SUCCESS;
    }
    for s in SETTINGS {
        let value = std::env::var(s.var).ok().filter(|v| !v.is_empty());
        let shown = match (&value, s.default) {
            (Some(v), _) => format!("{v} (set)"),
            (None, "") => "unset".to_owned(),
            (None, d) => format!("{d} (default)"),
        };
        println!("{:<44} {:<8?} {shown}", s.var, s.kind);
    }
    ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Classify(args) => classify_cmd::run(args),
        Command::Ingest(args) => ingest_cmd::run(args).await,
        Command::Archive(args) => archive_cmd::run(args).await,
        Command::Inventory(args) => inventory_cmd::run(args).await,
        Command::Items(args) => items_cmd::run(args).await,
        Command::Plan(args) => ops_cmd::plan(args).await,
        Command::Status(args) => ops_cmd::status(args).await,
        Command::Report(args) => ops_cmd::report(args).await,
        Command::Audit(args) => ops_cmd::audit(args).await,
        Command::Pace(args) => ops_cmd::pace(args).await,
        Command::Redrive(args) => ops_cmd::redrive(args).await,
        Command::RedriveEvents(args) => ops_cmd::redrive_events(args).await,
        Command::RedriveImports(args) => ops_cmd::redrive_imports(args).await,
        Command::Hold(args) => ops_cmd::hold(args).await,
        Command::Release => ops_cmd::release().await,
        Command::Resume(args) => ops_cmd::resume(args).await,
        Command::Cancel(args) => cancel_cmd::cancel(args).await,
        Command::Revalidate(args) => ops_cmd::revalidate(args).await,
        Command::Settings(args) => Ok(settings(&args)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
