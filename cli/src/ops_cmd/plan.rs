//! `granary plan`: how long the inventories left take at the feeder's settings, and what they cost.

use anyhow::{bail, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Section;
use granary::handlers::Ctx;
use granary_cli::ops::plan::{defaults, Plan};
use std::process::ExitCode;

use crate::operator::ctx;

#[derive(clap::Args)]
pub struct PlanArgs {
    /// An inventory's key in the bucket (repeat for several; default: every .parquet under
    /// GRANARY_INVENTORY_PREFIX, as the feeder reads them).
    #[arg(long = "inventory")]
    inventories: Vec<String>,
    /// Minutes between feeder runs (template FeederScheduleMinutes).
    #[arg(long, default_value_t = defaults::SCHEDULE_MINUTES)]
    schedule_minutes: f64,
    /// Granules a feeder run submits (template GranuleSubmitCount).
    #[arg(long, default_value_t = defaults::SUBMIT_COUNT)]
    submit_count: u64,
    /// Jobs running at once (default: GRANARY_MAX_ACTIVE_JOBS, the feeder's threshold of
    /// unfinished jobs, an upper bound: the compute environment's vCPUs may run fewer).
    #[arg(long)]
    max_active_jobs: Option<u64>,
    /// The feeder's time limit in seconds: a run starts no window past half of it (template
    /// FeederTimeoutSeconds).
    #[arg(long, env = "GRANARY_FUNCTION_TIMEOUT_SECS", default_value_t = defaults::FEEDER_TIMEOUT_SECS)]
    feeder_timeout_secs: f64,
    /// A job's expected run time in minutes, queueing excluded (measure your container's).
    #[arg(long, default_value_t = defaults::JOB_MINUTES)]
    job_minutes: f64,
    /// Retries expected, as a share of granules (Spot reclaims, pull errors): 0.05 is 5 a hundred.
    #[arg(long, default_value_t = defaults::RETRY_SHARE)]
    retry_share: f64,
    /// First attempts as array windows (default: GRANARY_ARRAY_WINDOWS).
    #[arg(long, conflicts_with = "single_jobs")]
    array_windows: bool,
    /// First attempts as one job each, whatever GRANARY_ARRAY_WINDOWS says.
    #[arg(long)]
    single_jobs: bool,
    /// SubmitJob calls a second the feeder may make (its share, template FeederSubmitJobRate;
    /// the account allows 50).
    #[arg(long, env = "GRANARY_SUBMIT_JOB_RATE", default_value_t = defaults::SUBMIT_RATE)]
    submit_rate: f64,
    /// What one job costs an hour (its share of an instance); without it no compute cost.
    #[arg(long)]
    job_hour_price: Option<f64>,
    /// granary's own cost a million granules (default: BENCHMARKS.md's measured $18.41 with item
    /// records on, $6.57 off, 2026-11-26, us-east-1 list prices).
    #[arg(long)]
    granary_dollars_per_million: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn plan(args: PlanArgs) -> Result<ExitCode> {
    check_numbers(&args)?;
    let ctx = ctx(&[Section::Feeder]).await?;
    let settings = plan_settings(&args, &ctx);
    if settings.schedule_minutes <= 0.0 || settings.job_minutes <= 0.0 {
        bail!("--schedule-minutes and --job-minutes must be more than 0");
    }
    let p = granary_cli::ops::plan::gather(&ctx, &args.inventories, settings, chrono::Utc::now())
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_plan(&p);
    // The pace (`granary pace`), against this forecast's rows left and pace.
    if let Some(pace) = ctx.pace().read().await? {
        let standing = granary::domain::pace::Standing {
            submitted: p.rows.saturating_sub(p.left),
            left: Some(p.left),
            period_secs: None,
            now: p.at,
        };
        let f = granary::domain::pace::forecast(&pace, standing, Some(p.forecast.per_hour));
        println!("{}", super::pace::describe(&pace, &f));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every number given is finite and in range, and the SubmitJob rate within Batch's quota.
fn check_numbers(args: &PlanArgs) -> Result<()> {
    let numbers = [
        ("--schedule-minutes", args.schedule_minutes, true),
        ("--job-minutes", args.job_minutes, true),
        ("--feeder-timeout-secs", args.feeder_timeout_secs, true),
        ("--retry-share", args.retry_share, false),
        ("--submit-rate", args.submit_rate, false),
        (
            "--job-hour-price",
            args.job_hour_price.unwrap_or(0.0),
            false,
        ),
        (
            "--granary-dollars-per-million",
            args.granary_dollars_per_million.unwrap_or(0.0),
            false,
        ),
    ];
    for (name, value, positive) in numbers {
        if !value.is_finite() || value < 0.0 || (positive && value == 0.0) {
            let must = if positive { "more than 0" } else { "0 or more" };
            bail!("{name} must be a number {must}, not {value}");
        }
    }
    let limit = granary::domain::plan::BATCH_SUBMIT_JOB_PER_SECOND;
    if args.submit_rate > limit {
        bail!("--submit-rate {} is past Batch's SubmitJob quota of {limit} calls a second an account (AWS Batch User Guide, \"Service quotas\")", args.submit_rate);
    }
    Ok(())
}

/// What the forecast assumes: the arguments, with the feeder's configuration where they are not
/// given.
fn plan_settings(args: &PlanArgs, ctx: &Ctx) -> granary::domain::plan::PlanSettings {
    granary_cli::ops::plan::settings(
        ctx,
        &granary_cli::ops::plan::Assumed {
            schedule_minutes: args.schedule_minutes,
            submit_count: args.submit_count,
            feeder_timeout_secs: args.feeder_timeout_secs,
            job_minutes: args.job_minutes,
            retry_share: args.retry_share,
            array_windows: !args.single_jobs
                && (args.array_windows || ctx.config.feeder.array_windows),
            submit_rate: args.submit_rate,
            max_active_jobs: args.max_active_jobs,
            job_hour_price: args.job_hour_price,
            granary_dollars_per_million: args.granary_dollars_per_million,
        },
    )
}

/// The plan as text: the inventories' table, the paces, the forecast and the cost.
fn print_plan(p: &Plan) {
    if let Some(campaign) = &p.campaign {
        println!("campaign {campaign} (GRANARY_CAMPAIGN)");
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["inventory", "rows", "settled", "left"]);
    for i in &p.inventories {
        t.add_row([
            i.key.clone(),
            i.rows.to_string(),
            i.settled.to_string(),
            i.left.to_string(),
        ]);
    }
    println!("{t}");
    for i in &p.inventories {
        if let Some(note) = &i.note {
            eprintln!("warning: {}: {note}", i.key);
        }
    }
    let f = &p.forecast;
    let s = &p.settings;
    println!("{} of {} rows left", p.left, p.rows);
    println!(
        "paces (granules an hour): feeder {:.0} ({} every {} min), capacity {:.0} ({} jobs of {} min, {:.0}% retries){}",
        f.feeder_per_hour,
        s.submit_count,
        s.schedule_minutes,
        f.capacity_per_hour,
        s.max_active_jobs,
        s.job_minutes,
        s.retry_share * 100.0,
        match f.submit_job_per_hour {
            Some(p) if s.submit_rate > 0.0 =>
                format!(", SubmitJob {p:.0} ({} calls a second)", s.submit_rate),
            Some(p) => format!(", SubmitJob {p:.0} (unpaced: Batch's 50 calls a second)"),
            None => ", SubmitJob: not a bound (array windows)".to_owned(),
        }
    );
    let when = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map_or("never at this pace".to_owned(), |a| {
            a.format("%Y-%m-%d %H:%M UTC").to_string()
        })
    };
    println!(
        "forecast: {:.1} hours at {:.0} granules an hour (bound by {:?}), done {}",
        f.hours,
        f.per_hour,
        f.bound_by,
        when(f.finish_at)
    );
    if let Some(m) = &f.measured {
        println!(
            "measured: {:.0} granules an hour over the last day, done {} ({:.1} hours)",
            m.per_hour,
            when(m.finish_at),
            m.hours
        );
    }
    match f.compute_dollars {
        Some(c) => println!(
            "cost: compute ${c:.2} ({:.0} attempts), granary ${:.2} (${}/million); ${:.2} in all",
            f.attempts,
            f.granary_dollars,
            s.granary_dollars_per_million,
            c + f.granary_dollars
        ),
        None => println!(
            "cost: granary ${:.2} (${}/million); compute not forecast (give --job-hour-price)",
            f.granary_dollars, s.granary_dollars_per_million
        ),
    }
}
