//! `granary redrive`: failed granules' messages from the failure DLQ back to the retry queue.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Queues;
use granary::handlers::redrive::RedriveFilter;
use std::process::ExitCode;

use super::Pace;
use crate::operator::{bar, CONFIG_HINT};

#[derive(clap::Args)]
pub struct RedriveArgs {
    /// Redrive every granule message (otherwise at least one filter is required).
    #[arg(long)]
    all: bool,
    /// Only messages whose reason matches this regex.
    #[arg(long)]
    reason: Option<String>,
    /// Only messages of this failed attempt.
    #[arg(long)]
    attempt: Option<u32>,
    /// Only granules whose id matches this regex.
    #[arg(long)]
    granule: Option<String>,
    /// Only the granules of a list `granary audit` wrote (its dead_letters.csv, or .parquet).
    #[arg(long, value_name = "FILE")]
    from_list: Option<std::path::PathBuf>,
    #[command(flatten)]
    pace: Pace,
}

pub async fn redrive(args: RedriveArgs) -> Result<ExitCode> {
    let regex = |r: &Option<String>, what: &str| -> Result<Option<regex::Regex>> {
        r.as_deref()
            .map(|p| {
                regex::Regex::new(p).with_context(|| format!("--{what} {p:?} is not a valid regex"))
            })
            .transpose()
    };
    let filter = RedriveFilter {
        reason: regex(&args.reason, "reason")?,
        attempt: args.attempt,
        granule: regex(&args.granule, "granule")?,
        granules: None,
        campaign: None,
    };
    let filter = match &args.from_list {
        None => filter,
        Some(list) => with_list(filter, list)?,
    };
    if !args.all
        && filter.reason.is_none()
        && filter.attempt.is_none()
        && filter.granule.is_none()
        && filter.granules.is_none()
    {
        bail!("choose what to redrive: --all, or --reason / --attempt / --granule / --from-list (try --dry-run first)");
    }
    let opts = args.pace.options()?;
    let queues = Queues::from_env().context(CONFIG_HINT)?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let failure_dlq = granary::wiring::sqs_queue(&clients, &queues.failure_dlq_url);
    let retry_queue = granary::wiring::sqs_queue(&clients, &queues.retry_queue_url);
    let depth = failure_dlq.depth().await?;
    let b = bar(
        depth.visible,
        if opts.dry_run { "examined" } else { "redriven" },
    );
    let s = granary::handlers::redrive::redrive(
        failure_dlq.as_ref(),
        retry_queue.as_ref(),
        &filter,
        &opts,
        &|s| b.set_position(s.redriven),
    )
    .await
    .context("redrive stopped (nothing is lost: a message leaves the DLQ only once it is on the retry queue; run it again)")?;
    b.finish_and_clear();
    if args.pace.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        if opts.dry_run {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED)
                .set_header(["granule", "attempt", "reason"]);
            for m in &s.matched {
                t.add_row([
                    m.granule_id.clone(),
                    m.attempt.to_string(),
                    m.reason.clone(),
                ]);
            }
            println!("{t}");
            println!("dry run: {} would be redriven", s.matched.len());
        } else {
            println!("redriven {} to the retry queue", s.redriven);
        }
        println!(
            "examined {}; not matching {}; not granules (need a human) {}",
            s.examined, s.not_matching, s.not_granules
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The filter narrowed to a list's granules, of the campaign the list is (the audit's,
/// GRANARY_CAMPAIGN's): the DLQ is the stack's, shared by every campaign.
fn with_list(filter: RedriveFilter, list: &std::path::Path) -> Result<RedriveFilter> {
    let granules = granary_cli::ops::audit::lists::read_list(list)?
        .into_iter()
        .map(|l| l.granule_id)
        .collect();
    let campaign = match std::env::var("GRANARY_CAMPAIGN")
        .ok()
        .filter(|c| !c.is_empty())
    {
        None => None,
        Some(name) => Some(
            granary::domain::campaign::Campaign::parse(&name)
                .with_context(|| format!("GRANARY_CAMPAIGN={name}"))?,
        ),
    };
    Ok(RedriveFilter {
        granules: Some(granules),
        campaign: Some(campaign),
        ..filter
    })
}
