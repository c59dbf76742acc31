//! `granary redrive-imports`: import messages from the import DLQ back to the import queue.

use anyhow::{Context, Result};
use std::process::ExitCode;

use super::{print_moved, Pace};
use crate::operator::bar;

#[derive(clap::Args)]
pub struct RedriveImportsArgs {
    /// The import DLQ (the stack's ImportDlqUrl output).
    #[arg(long, env = "GRANARY_IMPORT_DLQ_URL")]
    from: String,
    /// The import queue the importer reads (the stack's ImportQueueUrl output).
    #[arg(long, env = "GRANARY_IMPORT_QUEUE_URL")]
    to: String,
    /// Only items whose id matches this regular expression.
    #[arg(long)]
    item: Option<String>,
    #[command(flatten)]
    pace: Pace,
}

pub async fn redrive_imports(args: RedriveImportsArgs) -> Result<ExitCode> {
    let opts = args.pace.options()?;
    let items = args
        .item
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--item is not a valid regular expression")?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let from = granary::wiring::sqs_queue(&clients, &args.from);
    let to = granary::wiring::sqs_queue(&clients, &args.to);
    let depth = from.depth().await?;
    let b = bar(
        depth.visible,
        if opts.dry_run { "examined" } else { "moved" },
    );
    let s = granary::handlers::redrive::redrive_imports(
        from.as_ref(),
        to.as_ref(),
        items.as_ref(),
        &opts,
        &|s| b.set_position(s.redriven),
    )
    .await
    .context("redrive-imports stopped (nothing is lost: a message leaves the DLQ only once it is on the import queue; run it again)")?;
    b.finish_and_clear();
    print_moved(&s, args.pace.json, opts.dry_run, "item", "the import queue")
}
