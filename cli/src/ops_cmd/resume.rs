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
    /// Resume the granules of a list `granary audit` wrote (its missing.csv, or .parquet): a
    /// failed item by its record, any other from its listed attempt.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ids", "state", "cancelled"])]
    from_list: Option<std::path::PathBuf>,
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
    if let Some(list) = &args.from_list {
        return from_list(&ctx, list, args.dry_run, args.json).await;
    }
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

async fn from_list(
    ctx: &granary::handlers::Ctx,
    list: &std::path::Path,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode> {
    use granary::handlers::resume::{resume_listed, ListedAttempt};
    let mut listed = Vec::new();
    for (i, row) in granary_cli::ops::audit::lists::read_list(list)?
        .into_iter()
        .enumerate()
    {
        let granule_id = granary::domain::granule::GranuleId::parse(&row.granule_id)
            .map_err(|e| anyhow::anyhow!("{}: row {}: {e}", list.display(), i + 1))?;
        listed.push(ListedAttempt {
            granule_id,
            attempt: row.attempt,
        });
    }
    let s = resume_listed(ctx, &listed, dry_run).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would resume" } else { "resumed" };
    for r in s.items.resumed.iter().chain(&s.sent) {
        println!(
            "{verb} {}: from {} — attempt {} next",
            r.item_id, r.from, r.next_attempt
        );
    }
    for id in &s.moved_on {
        println!("left alone {id}: it moved on since the list was written");
    }
    for id in &s.no_attempt {
        println!("left alone {id}: no failed record, and the list gives no attempt");
    }
    println!(
        "{verb} {} of {} listed",
        s.items.resumed.len() + s.sent.len(),
        listed.len()
    );
    Ok(ExitCode::SUCCESS)
}
