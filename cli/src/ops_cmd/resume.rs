//! `granary resume`: failed, abandoned or cancelled items round again.

use anyhow::{bail, Result};
use granary::config::Section;
use granary::domain::lifecycle::ItemState;
use std::process::ExitCode;

use super::{exit_unless_missing, named_items, print_missing};
use crate::operator::ctx;

#[derive(clap::Args)]
pub struct ResumeArgs {
    /// Items to resume (ids).
    ids: Vec<String>,
    /// Resume the attempts `granary cancel` ended (every cancel's, or --cancel ID's): each
    /// goes round again as its next attempt, granted past the attempt budget.
    #[arg(long, conflicts_with_all = ["ids", "state"])]
    cancelled: bool,
    /// With --cancelled: only this cancel's attempts (the id `granary cancel` printed).
    #[arg(long, requires = "cancelled")]
    cancel: Option<String>,
    /// Resume every item in this state (PROCESSING_FAILED, ABANDONED: dead-lettered or its
    /// attempts spent, DOWNLOADING_FAILED, or DOWNLOADED: its admission looked at again).
    #[arg(long)]
    state: Option<String>,
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    json: bool,
}

pub async fn resume(args: ResumeArgs) -> Result<ExitCode> {
    if args.cancelled {
        return crate::cancel_cmd::resume_cancelled(
            args.cancel.as_deref(),
            args.dry_run,
            args.json,
        )
        .await;
    }
    let ctx = ctx(&[Section::Queues, Section::Retry, Section::Importer]).await?;
    let ids = named_items(
        &ctx,
        &args.ids,
        args.state.as_deref(),
        &[
            ItemState::ProcessingFailed,
            ItemState::Abandoned,
            ItemState::DownloadingFailed,
            ItemState::Downloaded,
        ],
        "only those have a way on",
    )
    .await?;
    if ids.is_empty() {
        bail!("name items to resume, or --state PROCESSING_FAILED");
    }
    let s = granary::handlers::resume::resume(&ctx, &ids, args.dry_run).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        for r in &s.resumed {
            println!(
                "{} {}: from {} — attempt {} next",
                if args.dry_run {
                    "would resume"
                } else {
                    "resumed"
                },
                r.item_id,
                r.from,
                r.next_attempt
            );
        }
        for (id, state) in &s.not_failed {
            println!("left alone {id}: it is {state}, not failed");
        }
        print_missing(&s.missing);
    }
    Ok(exit_unless_missing(&s.missing))
}
