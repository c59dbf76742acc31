//! `granary revalidate`: the importer checks stored items again.

use anyhow::{bail, Result};
use granary::config::Section;
use granary::domain::lifecycle::ItemState;
use std::process::ExitCode;

use super::{exit_unless_missing, named_items, print_missing};
use crate::operator::ctx;

#[derive(clap::Args)]
pub struct RevalidateArgs {
    /// Items to re-validate (ids).
    ids: Vec<String>,
    /// Re-validate every item in this state (DOWNLOADED or PROCESSED).
    #[arg(long)]
    state: Option<String>,
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    json: bool,
}

pub async fn revalidate(args: RevalidateArgs) -> Result<ExitCode> {
    let ctx = ctx(&[Section::Importer]).await?;
    let ids = named_items(
        &ctx,
        &args.ids,
        args.state.as_deref(),
        &[ItemState::Downloaded, ItemState::Processed],
        "only those have something stored to check",
    )
    .await?;
    if ids.is_empty() {
        bail!("name items to re-validate, or --state PROCESSED");
    }
    let s = granary::handlers::importer::validate::request_revalidation(&ctx, &ids, args.dry_run)
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        let verb = if args.dry_run { "would ask" } else { "asked" };
        for (id, state) in &s.requested {
            println!("{verb} the importer to re-validate {id} ({state})");
        }
        for (id, state) in &s.nothing_to_check {
            println!("left alone {id}: it is {state}, nothing stored to check");
        }
        print_missing(&s.missing);
    }
    Ok(exit_unless_missing(&s.missing))
}
