//! `granary cancel` and `granary resume --cancelled`: the operator's side of
//! `granary::handlers::cancel`.

use crate::operator::ctx;
use anyhow::{bail, Context, Result};
use granary::config::Section;
use granary::domain::cancel::CancelFilter;
use granary::handlers::cancel::{self, CancelRequest};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct CancelArgs {
    /// Why (kept with the cancel, in every terminated job's reason and in the feeder's hold).
    #[arg(long)]
    reason: String,
    /// Only attempts of this platform (from the granule id: L30, S30, ...).
    #[arg(long)]
    platform: Option<String>,
    /// Only first attempts submitted from this inventory's windows (its object key).
    #[arg(long)]
    inventory: Option<String>,
    /// Only this attempt number.
    #[arg(long)]
    attempt: Option<u32>,
    /// List what would be terminated; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Leave the feeder running (by default the cancel holds it first: otherwise it keeps
    /// submitting new windows).
    #[arg(long)]
    keep_feeding: bool,
    /// TerminateJob calls a second. Batch throttles each account's API calls: keep this
    /// inside what the submitters' SubmitJob shares leave of the account's budget.
    #[arg(long, default_value_t = 5.0)]
    rate: f64,
    /// Who cancels (default: $USER).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
    #[arg(long)]
    json: bool,
}

pub async fn cancel(args: CancelArgs) -> Result<ExitCode> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        bail!("--rate must be a positive number of TerminateJob calls a second");
    }
    let ctx = ctx(&[Section::Jobs]).await?;
    let request = CancelRequest {
        filter: CancelFilter {
            platform: args.platform,
            inventory: args.inventory,
            attempt: args.attempt,
        },
        reason: args.reason,
        by: args.by,
        dry_run: args.dry_run,
        hold_feeder: !args.keep_feeding,
        per_second: args.rate,
    };
    let bar = crate::operator::bar(0, "jobs terminated");
    let s = cancel::cancel(
        &ctx,
        &request,
        chrono::Utc::now(),
        rand_u32()?,
        |done, of| {
            bar.set_length(of);
            bar.set_position(done);
        },
    )
    .await
    .context(
        "the cancel stopped (what it terminated stays terminated; run it again for the rest)",
    )?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_cancel_summary(&s, &request, args.dry_run);
    }
    Ok(if s.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the cancel took, terminated, held and failed, for a person.
fn print_cancel_summary(s: &cancel::CancelSummary, request: &CancelRequest, dry_run: bool) {
    let verb = if dry_run {
        "would terminate"
    } else {
        "terminated"
    };
    for t in &s.targets {
        println!(
            "{verb} {} attempt {} (job {})",
            t.granule_id,
            t.attempt,
            t.job_id.as_deref().unwrap_or("not recorded yet")
        );
    }
    println!(
        "{}: {} of the campaign's open attempts taken by {}; {} left alone",
        s.id,
        s.targets.len(),
        request.filter.describe(),
        s.left
    );
    if !dry_run {
        println!(
            "{} TerminateJob calls made; the jobs' ends come back as events and are listed for `granary resume --cancelled --cancel {}`",
            s.terminated, s.id
        );
        if s.held {
            println!("the feeder is held (`granary release` when you want it to go on)");
        }
    }
    if s.without_job > 0 {
        println!(
            "{} taken attempts have no job recorded yet (their submission is in flight): run the cancel again in a minute",
            s.without_job
        );
    }
    for (job, e) in &s.failed {
        println!("failed to terminate {job}: {e}");
    }
}

/// `granary resume --cancelled [--cancel ID]`.
pub async fn resume_cancelled(only: Option<&str>, dry_run: bool, json: bool) -> Result<ExitCode> {
    let ctx = ctx(&[Section::Queues]).await?;
    let resumed = cancel::resume_cancelled(&ctx, only, dry_run)
        .await
        .context("resume stopped (an attempt leaves the cancelled list only once its message is sent; run it again)")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&resumed)?);
    } else {
        for c in &resumed {
            println!(
                "{} {} attempt {} (cancelled by {}): attempt {} next",
                if dry_run { "would resume" } else { "resumed" },
                c.granule_id,
                c.attempt,
                c.cancel,
                c.attempt + 1
            );
        }
        if resumed.is_empty() {
            println!(
                "no cancelled attempt is waiting{}",
                only.map(|id| format!(" for {id}")).unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Entropy for the cancel's id (two cancels in one second stay apart).
fn rand_u32() -> Result<u32> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(u32::from_le_bytes(bytes))
}
