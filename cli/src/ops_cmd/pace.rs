//! `granary pace`: a spend budget and a deadline the feeder paces the campaign to
//! (`domain::pace`). The cost a granule is measured from the campaign's logs with `granary
//! report --cost`'s model (or given), and kept with the pace; run it again to measure again.

use anyhow::{bail, Context, Result};
use granary::domain::pace::{forecast, Pace};
use std::process::ExitCode;

use super::report::Prices;
use crate::operator::{bar, ctx};

#[derive(clap::Args)]
pub struct PaceArgs {
    /// The most the campaign may spend, dollars: at it the feeder holds itself.
    #[arg(long)]
    budget: Option<f64>,
    /// When the campaign must be fed by (RFC 3339): the feeder raises its count to make it.
    #[arg(long)]
    deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// The cost a granule, dollars, instead of measuring it from the logs.
    #[arg(long)]
    dollars_per_granule: Option<f64>,
    /// Take the pace away: the feeder goes back to its own count.
    #[arg(long, conflicts_with_all = ["budget", "deadline", "dollars_per_granule"])]
    clear: bool,
    #[command(flatten)]
    prices: Prices,
    /// Who sets it (default: $USER).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
    #[arg(long)]
    json: bool,
}

pub async fn pace(args: PaceArgs) -> Result<ExitCode> {
    let ctx = ctx(&[]).await?;
    if args.clear {
        ctx.pace().clear().await?;
        println!("pace cleared: the feeder submits its own count again");
        return Ok(ExitCode::SUCCESS);
    }
    if args.budget.is_none() && args.deadline.is_none() {
        bail!("give --budget DOLLARS, --deadline TIME, or both (or --clear)");
    }
    if args.budget.is_some_and(|b| !b.is_finite() || b <= 0.0) {
        bail!("--budget is dollars, more than 0");
    }
    let (dollars_per_granule, measured_over) = match args.dollars_per_granule {
        Some(d) if d.is_finite() && d > 0.0 => (d, 0),
        Some(_) => bail!("--dollars-per-granule is dollars, more than 0"),
        None => measure(&ctx, &args.prices).await?,
    };
    let pace = Pace {
        budget_dollars: args.budget,
        deadline: args.deadline,
        dollars_per_granule,
        measured_over,
        set_at: chrono::Utc::now(),
        set_by: args.by.clone(),
    };
    ctx.pace().write(&pace).await?;
    let tracker = ctx.tracker().load().await?.value;
    let standing = granary::handlers::feeder::pace_standing(&tracker, chrono::Utc::now());
    let rate = granary::domain::progress::rate(
        &tracker.samples,
        chrono::Utc::now(),
        chrono::Duration::hours(24),
    );
    let f = forecast(&pace, standing, rate.map(|r| r.per_hour));
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"pace": pace, "forecast": f}))?
        );
    } else {
        println!("{}", describe(&pace, &f));
    }
    Ok(ExitCode::SUCCESS)
}

/// The cost a granule of the campaign so far, from its logs (`granary report --cost`).
async fn measure(ctx: &granary::handlers::Ctx, prices: &Prices) -> Result<(f64, u64)> {
    let b = bar(0, "logs read");
    let facts = granary_cli::ops::report::scan_facts(
        ctx.store.as_ref(),
        &ctx.config.layout.log_prefix,
        &|done, total| {
            b.set_length(total);
            b.set_position(done);
        },
    )
    .await
    .context("reading the logs to measure the cost a granule")?;
    b.finish_and_clear();
    let own = if ctx.config.layout.track_items {
        granary::domain::cost::OWN_COST_RECORDS_ON
    } else {
        granary::domain::cost::OWN_COST_RECORDS_OFF
    };
    let cost = granary::domain::report::cost_of_logs(&facts, prices.compute()?, own);
    if cost.granules == 0 || cost.dollars_per_granule <= 0.0 {
        bail!("no granule has ended yet, so there is no cost to measure: give --dollars-per-granule (`granary plan` estimates one)");
    }
    Ok((cost.dollars_per_granule, cost.granules))
}

/// The pace and its forecast in a few lines (`granary status` prints the same).
pub fn describe(p: &Pace, f: &granary::domain::pace::PaceForecast) -> String {
    let mut lines = vec![format!(
        "pace: ${:.4} a granule ({})",
        p.dollars_per_granule,
        if p.measured_over > 0 {
            format!("measured over {} granules", p.measured_over)
        } else {
            "given".to_owned()
        }
    )];
    if let Some(budget) = p.budget_dollars {
        let at_end = f
            .spend_at_end_dollars
            .map_or("not known yet".to_owned(), |d| format!("${d:.2}"));
        lines.push(format!(
            "  budget ${budget:.2}: about ${:.2} spent, {} more granules paid for; all known rows would spend {at_end}",
            f.spent_dollars,
            f.affordable_rows.unwrap_or(0)
        ));
    }
    if let Some(deadline) = p.deadline {
        let finish = match (f.finish_at, f.meets_deadline) {
            (Some(at), Some(true)) => format!("fed by {at} at the last day's rate: meets it"),
            (Some(at), _) => format!("fed by {at} at the last day's rate: MISSES it (the feeder raises its count to make it)"),
            _ => "no rate measured yet".to_owned(),
        };
        lines.push(format!("  deadline {deadline}: {finish}"));
    }
    lines.join("\n")
}
