//! The operators' commands: status, report, redrive, hold, release, resume. They read the same
//! GRANARY_* variables as the Lambdas (docs/configuration.md); AWS_ENDPOINT_URL points them at an
//! emulator.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::{Queues, Section};
use granary::domain::campaign::Campaign;
use granary::domain::granule::GranuleId;
use granary::domain::hold::Hold;
use granary::domain::lifecycle::ItemState;
use granary::handlers::redrive::{RedriveFilter, RedriveOptions};
use granary::handlers::Ctx;
use granary_cli::ops::{chart, report, status};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::operator::{bar, ctx, CONFIG_HINT};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "watch")]
    json: bool,
    /// Redraw the status every --interval seconds, with the reasons of the newest failures,
    /// until Ctrl-C.
    #[arg(long)]
    watch: bool,
    /// Seconds between redraws of --watch.
    #[arg(long, default_value_t = 10, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
    /// Stop --watch after this many redraws (for scripts; default: until Ctrl-C).
    #[arg(long, requires = "watch")]
    count: Option<u64>,
}

#[derive(clap::Args)]
pub struct PlanArgs {
    /// An inventory's key in the bucket (repeat for several; default: every .parquet under
    /// GRANARY_INVENTORY_PREFIX, as the feeder reads them).
    #[arg(long = "inventory")]
    inventories: Vec<String>,
    /// Minutes between feeder runs (template FeederScheduleMinutes).
    #[arg(long, default_value_t = 60.0)]
    schedule_minutes: f64,
    /// Granules a feeder run submits (template GranuleSubmitCount).
    #[arg(long, default_value_t = 1000)]
    submit_count: u64,
    /// Jobs running at once (default: GRANARY_MAX_ACTIVE_JOBS, the feeder's threshold of
    /// unfinished jobs, an upper bound: the compute environment's vCPUs may run fewer).
    #[arg(long)]
    max_active_jobs: Option<u64>,
    /// The feeder's time limit in seconds: a run starts no window past half of it (template
    /// FeederTimeoutSeconds).
    #[arg(long, env = "GRANARY_FUNCTION_TIMEOUT_SECS", default_value_t = 300.0)]
    feeder_timeout_secs: f64,
    /// A job's expected run time in minutes, queueing excluded (measure your container's).
    #[arg(long, default_value_t = 30.0)]
    job_minutes: f64,
    /// Retries expected, as a share of granules (Spot reclaims, pull errors): 0.05 is 5 a hundred.
    #[arg(long, default_value_t = 0.05)]
    retry_share: f64,
    /// First attempts as array windows (default: GRANARY_ARRAY_WINDOWS).
    #[arg(long, conflicts_with = "single_jobs")]
    array_windows: bool,
    /// First attempts as one job each, whatever GRANARY_ARRAY_WINDOWS says.
    #[arg(long)]
    single_jobs: bool,
    /// SubmitJob calls a second the feeder may make (its share, template FeederSubmitJobRate;
    /// the account allows 50).
    #[arg(long, env = "GRANARY_SUBMIT_JOB_RATE", default_value_t = 20.0)]
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

/// granary's own cost a million granules, measured (BENCHMARKS.md, "The cost floor", 2026-11-26).
const GRANARY_DOLLARS_PER_MILLION_RECORDS_ON: f64 = 18.41;
const GRANARY_DOLLARS_PER_MILLION_RECORDS_OFF: f64 = 6.57;

pub async fn plan(args: PlanArgs) -> Result<ExitCode> {
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
    let ctx = ctx(&[Section::Feeder]).await?;
    let feeder = &ctx.config.feeder;
    let array_windows = !args.single_jobs && (args.array_windows || feeder.array_windows);
    let run = std::time::Duration::from_secs_f64(args.feeder_timeout_secs);
    let settings = granary::domain::plan::PlanSettings {
        schedule_minutes: args.schedule_minutes,
        submit_count: args.submit_count,
        run_secs: args.feeder_timeout_secs,
        window_rows: if array_windows {
            granary::handlers::feeder::ARRAY_WINDOW_ROWS
        } else {
            granary::handlers::feeder::window_ceiling(Some(run))
        },
        max_active_jobs: args.max_active_jobs.unwrap_or(feeder.max_active_jobs),
        job_minutes: args.job_minutes,
        retry_share: args.retry_share,
        array_windows,
        submit_rate: args.submit_rate,
        job_hour_dollars: args.job_hour_price,
        granary_dollars_per_million: args.granary_dollars_per_million.unwrap_or(
            if ctx.config.layout.track_items {
                GRANARY_DOLLARS_PER_MILLION_RECORDS_ON
            } else {
                GRANARY_DOLLARS_PER_MILLION_RECORDS_OFF
            },
        ),
    };
    if settings.schedule_minutes <= 0.0 || settings.job_minutes <= 0.0 {
        bail!("--schedule-minutes and --job-minutes must be more than 0");
    }
    let p = granary_cli::ops::plan::gather(&ctx, &args.inventories, settings, chrono::Utc::now())
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(ExitCode::SUCCESS);
    }
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
    Ok(ExitCode::SUCCESS)
}

pub async fn status(args: StatusArgs) -> Result<ExitCode> {
    // The feeder's section too: its downstream queue is part of why it waits.
    let ctx = ctx(&[Section::Jobs, Section::Queues, Section::Feeder]).await?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let batch = granary::adapters::aws::batch::endpoint_has_batch(&clients.batch).await?;
    if args.watch {
        return watch_status(&ctx, batch, &args).await;
    }
    let s = status::gather(&ctx, chrono::Utc::now(), batch).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_status(&s);
    Ok(ExitCode::SUCCESS)
}

/// `granary status --watch`: the status and the newest failures' reasons, redrawn in place
/// every `--interval` seconds until Ctrl-C (or `--count` redraws).
async fn watch_status(ctx: &Ctx, batch: bool, args: &StatusArgs) -> Result<ExitCode> {
    let mut seen = std::collections::HashMap::new();
    let mut drawn = 0u64;
    // One Ctrl-C for the whole watch: pressed while a redraw reads, it still stops the watch.
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let read = async {
            let s = status::gather(ctx, chrono::Utc::now(), batch).await?;
            let reasons = status::recent_failure_reasons(ctx, &mut seen).await?;
            anyhow::Ok((s, reasons))
        };
        let read = tokio::select! {
            read = read => read,
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
        };
        // Clear the screen and go home (ANSI), then draw.
        print!("\x1b[2J\x1b[H");
        // A failed read (a throttled call, the network) is shown and the next redraw tries again.
        let (s, reasons) = match read {
            Ok(read) => read,
            Err(e) => {
                println!("granary status — could not read the status now: {e:#}");
                drawn += 1;
                if args.count.is_some_and(|n| drawn >= n) {
                    return Ok(ExitCode::FAILURE);
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(args.interval)) => {}
                    _ = &mut stop => return Ok(ExitCode::SUCCESS),
                }
                continue;
            }
        };
        println!(
            "granary status — {} (every {} s; Ctrl-C stops)",
            s.at.format("%Y-%m-%d %H:%M:%S UTC"),
            args.interval
        );
        print_status(&s);
        if reasons.is_empty() {
            println!("failing now: none");
        } else {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED).set_header([
                format!(
                    "failing now: reason (newest {} failure logs)",
                    status::RECENT_FAILURES
                ),
                "granules".to_owned(),
            ]);
            for r in reasons.iter().take(10) {
                t.add_row([r.reason.clone(), r.granules.to_string()]);
            }
            println!("{t}");
        }
        drawn += 1;
        if args.count.is_some_and(|n| drawn >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(args.interval)) => {}
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// "; the least recently written marker 0h 04m ago", or nothing when no marker has a time.
fn least_recently_written(ends: &status::OpenEnds) -> String {
    ends.least_recently_written.map_or(String::new(), |at| {
        let secs = (chrono::Utc::now() - at).num_seconds().max(0);
        format!(
            "; the least recently written marker {}h {:02}m ago",
            secs / 3600,
            secs / 60 % 60
        )
    })
}

fn print_status(s: &status::Status) {
    if let Some(campaign) = &s.campaign {
        println!("campaign {campaign} (GRANARY_CAMPAIGN)");
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["inventory", "submitted", "total", "done"]);
    for i in &s.inventories {
        t.add_row([
            i.key.clone(),
            i.submitted.to_string(),
            i.total.map_or("not opened yet".into(), |n| n.to_string()),
            i.total.map_or("-".into(), |n| {
                format!("{:.1}%", 100.0 * i.submitted as f64 / n.max(1) as f64)
            }),
        ]);
    }
    println!("{t}");
    println!(
        "submitted {} of {} known rows ({} inventories not opened yet)",
        s.rows_submitted, s.rows_known, s.inventories_unopened
    );
    match &s.active_jobs {
        None => {
            println!("active Batch jobs: unknown (AWS Batch is not available at this endpoint)")
        }
        Some(active) => {
            let waited = active.oldest_runnable_created_ms.map(|ms| {
                let secs = (chrono::Utc::now().timestamp_millis() - ms).max(0) / 1000;
                format!("{}h {:02}m", secs / 3600, secs / 60 % 60)
            });
            let jobs: Vec<String> = active
                .by_status
                .iter()
                .map(|(k, v)| match (k.as_str(), &waited) {
                    ("RUNNABLE", Some(w)) => {
                        format!("{k} {v}, the oldest submitted {w} ago")
                    }
                    _ => format!("{k} {v}"),
                })
                .collect();
            println!(
                "active Batch jobs: {} ({})",
                active.total,
                if jobs.is_empty() {
                    "none".into()
                } else {
                    jobs.join(", ")
                }
            );
        }
    }
    println!(
        "retry queue: {} waiting, {} in flight; failure DLQ: {} waiting, {} in flight",
        s.retry_queue.visible,
        s.retry_queue.in_flight,
        s.failure_dlq.visible,
        s.failure_dlq.in_flight
    );
    if s.cancelled > 0 {
        println!(
            "cancelled: {} attempts wait for `granary resume --cancelled`",
            s.cancelled
        );
    }
    let open = &s.open_ends;
    if open.windows + open.attempts == 0 {
        println!("open ends: none in this campaign (no window or requeued attempt is marked open)");
    } else {
        println!(
            "open ends: {} windows (each until the reconciler finds every granule's end handled) and {} requeued attempts awaiting their end{}",
            open.windows,
            open.attempts,
            least_recently_written(open)
        );
    }
    for other in &s.other_campaigns {
        let ends = &other.open_ends;
        println!(
            "open ends in campaign {}: {} windows and {} requeued attempts (the reconciler still visits it){}",
            other.campaign.as_deref().unwrap_or("(unnamed)"),
            ends.windows,
            ends.attempts,
            least_recently_written(ends)
        );
    }
    if let Some(why) = &s.other_campaigns_error {
        println!("open ends in other campaigns: unknown ({why})");
    }
    if s.parked_retries > 0 {
        println!(
            "parked: {} retries wait for the feeder's next window of retries",
            s.parked_retries
        );
    }
    match (
        &s.hold,
        s.downstream.as_ref().and_then(|d| d.feeder_waits.as_ref()),
    ) {
        (Some(h), _) => {
            println!("feeder: HELD — {}", h.describe());
            for seen in &h.evidence {
                println!("  behind it: {seen}");
            }
        }
        (None, Some(why)) => println!("feeder: WAITS — {why}"),
        (None, None) => println!("feeder: running (no hold)"),
    }
    if let Some(d) = &s.downstream {
        println!(
            "downstream queue: {} waiting, {} in flight (the feeder waits past {})",
            d.waiting, d.in_flight, d.max_messages
        );
    }
    for r in &s.rates {
        println!(
            "throughput over the last {:>2} h: {:.0} granules/h ({} submitted)",
            r.window_hours, r.per_hour, r.rows
        );
    }
    match &s.eta {
        Some(e) if e.remaining_rows == 0 => println!("every known row is submitted"),
        Some(e) => println!(
            "ETA: {} rows left at {:.0}/h → {:.1} h, around {}",
            e.remaining_rows,
            e.per_hour,
            e.hours,
            e.at.format("%Y-%m-%d %H:%M UTC")
        ),
        None => println!("ETA: unknown — nothing was submitted in the last 24 h (held, waiting on downstream, or at the active-job threshold?)"),
    }
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Compute from the log objects in S3 (LIST + one GET per log; works on an emulator).
    #[arg(long, conflicts_with = "athena")]
    scan: bool,
    /// Run the athena/ queries on Athena (workgroup, database and output from the options below).
    #[arg(long)]
    athena: bool,
    #[arg(long, env = "GRANARY_ATHENA_WORKGROUP", default_value = "primary")]
    workgroup: String,
    #[arg(long, env = "GRANARY_ATHENA_DATABASE", default_value = "granary")]
    database: String,
    /// Query results location (s3://…/); default: the workgroup's.
    #[arg(long, env = "GRANARY_ATHENA_OUTPUT")]
    output: Option<String>,
    /// Where granary's athena/ SQL lives.
    #[arg(long, default_value = "athena")]
    sql_dir: PathBuf,
    /// Print JSON instead of tables (every command's --json).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of tables (one header row per section).
    #[arg(long)]
    csv: bool,
    /// Also draw successes per acquisition month by platform into this SVG file.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Compare with another campaign over the same inventories (its name, or `-` for the
    /// unnamed campaign): each section side by side with the change, and how each granule's
    /// latest outcome moved. This campaign is GRANARY_CAMPAIGN's. Needs --scan.
    #[arg(
        long,
        value_name = "CAMPAIGN",
        requires = "scan",
        conflicts_with = "chart"
    )]
    compare: Option<String>,
    /// Also what the campaign cost: compute from each job's reserved vCPU and memory and its
    /// attempts' run time (the logs hold them), plus granary's own S3, SQS and Lambda requests
    /// (measured per granule). Needs --scan.
    #[arg(long, requires = "scan")]
    cost: bool,
    /// Also write one self-contained page with the charts (ended over time, outcomes per
    /// platform, failure reasons, attempts, cost) to this file. Needs --scan.
    #[arg(long, value_name = "FILE", requires = "scan")]
    html: Option<PathBuf>,
    #[command(flatten)]
    prices: Prices,
}

/// Compute prices for `report --cost` (defaults: AWS Fargate, Linux/x86, us-east-1, November
/// 2026; see `granary::domain::cost`).
#[derive(clap::Args)]
pub struct Prices {
    /// The capacity the job queue runs on: `spot` (the template's compute environment is EC2
    /// Spot) takes --spot-discount off the on-demand prices; the default prices on demand, the
    /// list price, so an assumed discount never flatters the figure.
    #[arg(long, value_enum, default_value_t = Capacity::OnDemand)]
    capacity: Capacity,
    /// On-demand price of a vCPU-hour reserved.
    #[arg(long, default_value_t = granary::domain::cost::FARGATE_ON_DEMAND.vcpu_hour)]
    vcpu_hour_price: f64,
    /// On-demand price of a GiB-hour of memory reserved.
    #[arg(long, default_value_t = granary::domain::cost::FARGATE_ON_DEMAND.gib_hour)]
    gib_hour_price: f64,
    /// Spot's share off on demand (AWS advertises up to 70%; the market moves it).
    #[arg(long, default_value_t = granary::domain::cost::SPOT_DISCOUNT)]
    spot_discount: f64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Capacity {
    Spot,
    OnDemand,
}

impl Prices {
    fn compute(&self) -> Result<granary::domain::cost::ComputePrices> {
        let fine = |v: f64| v.is_finite() && v >= 0.0;
        if !fine(self.vcpu_hour_price) || !fine(self.gib_hour_price) {
            bail!("prices must be numbers of dollars, 0 or more");
        }
        if !(0.0..1.0).contains(&self.spot_discount) {
            bail!("--spot-discount is a share of the on-demand price, from 0 up to (not) 1");
        }
        let on_demand = granary::domain::cost::ComputePrices {
            vcpu_hour: self.vcpu_hour_price,
            gib_hour: self.gib_hour_price,
        };
        Ok(match self.capacity {
            Capacity::OnDemand => on_demand,
            Capacity::Spot => on_demand.spot(self.spot_discount),
        })
    }
}

/// `-`: the unnamed campaign; else a campaign's name.
fn campaign_arg(name: &str) -> Result<Option<Campaign>> {
    if name == "-" {
        return Ok(None);
    }
    Ok(Some(Campaign::parse(name)?))
}

/// How a campaign is called in a table's header.
fn campaign_label(c: Option<&Campaign>) -> String {
    c.map_or_else(|| "(unnamed)".to_owned(), |c| c.to_string())
}

/// `granary report --scan --compare OTHER`: this campaign's logs and the other's, read from S3.
async fn compare_campaigns(args: &ReportArgs, other: &str) -> Result<ExitCode> {
    let here = ctx(&[]).await?;
    let other = campaign_arg(other)?;
    let there = here.in_campaign(other.as_ref());
    let names = [
        campaign_label(here.campaign()),
        campaign_label(there.campaign()),
    ];
    if names[0] == names[1] {
        bail!("--compare names this campaign ({}): name another", names[0]);
    }
    let mut facts = Vec::new();
    for (c, name) in [(&here, &names[0]), (&there, &names[1])] {
        let b = bar(0, &format!("logs of {name} read"));
        let read = report::scan_facts(
            c.store.as_ref(),
            &c.config.layout.log_prefix,
            &|done, total| {
                b.set_length(total);
                b.set_position(done);
            },
        )
        .await?;
        b.finish_and_clear();
        facts.push(read);
    }
    let reports = [
        granary::domain::report::compute(&facts[0]),
        granary::domain::report::compute(&facts[1]),
    ];
    let labels = [names[0].as_str(), names[1].as_str()];
    let changes = granary::domain::report::outcome_changes(&facts[0], &facts[1]);
    if args.json {
        let out = serde_json::json!({
            "campaigns": labels,
            "reports": reports,
            "outcome_changes": changes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut sections = vec![report::changes_section(&changes, labels)];
    sections.extend(report::compare_sections(&reports[0], &reports[1], labels));
    print_sections(&sections, args.csv)?;
    Ok(ExitCode::SUCCESS)
}

/// Sections as tables, or as CSV (one header row per section).
fn print_sections(sections: &[report::Section], csv: bool) -> Result<()> {
    if csv {
        print!("{}", report::sections_csv(sections)?);
        return Ok(());
    }
    for s in sections {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(s.header.clone());
        for row in &s.rows {
            t.add_row(row.clone());
        }
        println!("{}\n{t}\n", s.title);
    }
    Ok(())
}

pub async fn report(args: ReportArgs) -> Result<ExitCode> {
    if !args.scan && !args.athena {
        bail!("say where the numbers come from: --scan (read the logs in S3) or --athena");
    }
    if let Some(other) = &args.compare {
        if !args.scan {
            bail!("--compare reads both campaigns' logs from S3: use it with --scan");
        }
        return compare_campaigns(&args, other).await;
    }
    let prices = args.prices.compute()?;
    let mut cost = None;
    let mut page = None;
    let reports = if args.scan {
        let ctx = ctx(&[]).await?;
        let b = bar(0, "logs read");
        let facts = report::scan_facts(
            ctx.store.as_ref(),
            &ctx.config.layout.log_prefix,
            &|done, total| {
                b.set_length(total);
                b.set_position(done);
            },
        )
        .await?;
        b.finish_and_clear();
        if args.cost {
            let own = if ctx.config.layout.track_items {
                granary::domain::cost::OWN_COST_RECORDS_ON
            } else {
                granary::domain::cost::OWN_COST_RECORDS_OFF
            };
            cost = Some(granary::domain::report::cost_of_logs(&facts, prices, own));
        }
        let reports = granary::domain::report::compute(&facts);
        if args.html.is_some() {
            let title = format!(
                "granary campaign {} — s3://{}",
                campaign_label(ctx.campaign()),
                ctx.config.layout.bucket
            );
            page = Some(granary_cli::ops::html::page(
                &granary_cli::ops::html::PageInput {
                    title,
                    generated_at: chrono::Utc::now(),
                    facts: &facts,
                    reports: &reports,
                    cost: cost.as_ref(),
                },
            )?);
        }
        reports
    } else {
        let config = granary::adapters::aws::load_sdk_config().await;
        let client = aws_sdk_athena::Client::new(&config);
        let target = report::AthenaTarget {
            workgroup: args.workgroup.clone(),
            database: args.database.clone(),
            output: args.output.clone(),
        };
        report::athena(&client, &target, &args.sql_dir).await?
    };
    if args.json {
        let mut out = serde_json::to_value(&reports)?;
        if let (Some(cost), Some(map)) = (&cost, out.as_object_mut()) {
            map.insert("cost".into(), serde_json::to_value(cost)?);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_sections(&report::sections(&reports), args.csv)?;
        if let Some(c) = &cost {
            print_cost(c);
        }
    }
    if let Some(path) = &args.chart {
        chart::successes_per_month(&reports, path)?;
        eprintln!("chart written to {}", path.display());
    }
    if let (Some(path), Some(page)) = (&args.html, page) {
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("report page written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_cost(c: &granary::domain::cost::CampaignCost) {
    println!(
        "cost of {} granules ({} jobs; {} without usage in their detail, not priced):",
        c.granules, c.jobs, c.jobs_without_usage
    );
    println!(
        "  prices: ${} a vCPU-hour and ${} a GiB-hour reserved, for each attempt's run time (an \
         instance's idle time, image pulls and minimum charges are not in it); the defaults are \
         AWS Fargate's us-east-1 list prices (--capacity spot assumes --spot-discount): give \
         the prices on your bill",
        c.prices.vcpu_hour, c.prices.gib_hour
    );
    println!(
        "  compute ${:.2}: {:.1} vCPU-hours at ${}, {:.1} GiB-hours at ${} (of it ${:.2} on attempts that were retried)",
        c.compute_dollars,
        c.vcpu_hours,
        c.prices.vcpu_hour,
        c.gib_hours,
        c.prices.gib_hour,
        c.retried_compute_dollars
    );
    println!(
        "  granary: S3 ${:.4}, SQS ${:.4}, Lambda ${:.4} (its requests as measured per granule, BENCHMARKS.md)",
        c.s3_dollars, c.sqs_dollars, c.lambda_dollars
    );
    println!(
        "  in all ${:.2}: ${:.6} a granule, ${:.0} a million",
        c.total_dollars,
        c.dollars_per_granule,
        c.dollars_per_granule * 1e6
    );
}

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
    #[command(flatten)]
    pace: Pace,
}

/// How a redrive moves messages: both redrive commands take these.
#[derive(clap::Args)]
pub struct Pace {
    /// List what would be moved; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Stop after this many.
    #[arg(long)]
    max: Option<u64>,
    /// At most this many messages per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    #[arg(long)]
    json: bool,
}

impl Pace {
    fn options(&self) -> Result<RedriveOptions> {
        if self.rate <= 0.0 {
            bail!("--rate must be above 0");
        }
        Ok(RedriveOptions {
            dry_run: self.dry_run,
            max: self.max,
            per_second: self.rate,
            ..RedriveOptions::default()
        })
    }
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
    };
    if !args.all && filter.reason.is_none() && filter.attempt.is_none() && filter.granule.is_none()
    {
        bail!("choose what to redrive: --all, or --reason / --attempt / --granule (try --dry-run first)");
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

#[derive(clap::Args)]
pub struct RedriveEventsArgs {
    /// The events DLQ (the stack's BatchEventsDlqUrl output).
    #[arg(long, env = "GRANARY_EVENTS_DLQ_URL")]
    from: String,
    /// The events queue the job monitor reads (the stack's BatchEventsQueueUrl output).
    #[arg(long, env = "GRANARY_EVENTS_QUEUE_URL")]
    to: String,
    #[command(flatten)]
    pace: Pace,
}

pub async fn redrive_events(args: RedriveEventsArgs) -> Result<ExitCode> {
    let opts = args.pace.options()?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let from = granary::wiring::sqs_queue(&clients, &args.from);
    let to = granary::wiring::sqs_queue(&clients, &args.to);
    let depth = from.depth().await?;
    let b = bar(
        depth.visible,
        if opts.dry_run { "examined" } else { "moved" },
    );
    let s = granary::handlers::redrive::redrive_events(from.as_ref(), to.as_ref(), &opts, &|s| b.set_position(s.redriven))
        .await
        .map_err(|e| {
            // The events queue denies every sender but the Batch rule and the stack's
            // EventsRedriveRoleArns (infra/template.yaml, BatchEventsQueuePolicy).
            let denied = format!("{e:?}").contains("AccessDenied");
            anyhow::Error::new(e).context(if denied {
                "redrive-events was denied: the events queue accepts only the Batch rule and the roles in the stack's EventsRedriveRoleArns parameter; add yours and run it again (nothing is lost)"
            } else {
                "redrive-events stopped (nothing is lost: an event leaves the DLQ only once it is on the events queue; run it again)"
            })
        })?;
    b.finish_and_clear();
    print_moved(&s, args.pace.json, opts.dry_run, "job", "the events queue")
}

/// What a DLQ-to-queue move did (or, in a dry run, would do): JSON, or a table of the parked
/// messages (`what` names their first column) and a line saying where they went.
fn print_moved(
    s: &granary::handlers::redrive::RedriveSummary,
    json: bool,
    dry_run: bool,
    what: &str,
    queue: &str,
) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header([what, "why it was parked"]);
    for m in &s.matched {
        t.add_row([m.granule_id.clone(), m.reason.clone()]);
    }
    println!("{t}");
    if dry_run {
        println!("dry run: {} would be moved to {queue}", s.matched.len());
    } else {
        println!("moved {} to {queue}", s.redriven);
    }
    Ok(ExitCode::SUCCESS)
}

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

#[derive(clap::Args)]
pub struct HoldArgs {
    /// Why (shown by status and in the feeder's log).
    #[arg(long)]
    reason: String,
    /// Who holds it (default: $USER).
    #[arg(long, env = "USER", default_value = "operator")]
    by: String,
}

pub async fn hold(args: HoldArgs) -> Result<ExitCode> {
    let ctx = ctx(&[]).await?;
    let hold = Hold {
        reason: args.reason,
        held_by: args.by,
        at: chrono::Utc::now(),
        evidence: Vec::new(),
        cancel: None,
    };
    match granary::repositories::place_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key, &hold)
        .await?
    {
        None => {
            println!("feeder held: it submits nothing until `granary release`; its place is kept")
        }
        Some(existing) => println!("already {}", existing.describe()),
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn release() -> Result<ExitCode> {
    let ctx = ctx(&[]).await?;
    match granary::repositories::read_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key).await? {
        None => println!("the feeder is not held"),
        Some(h) => {
            ctx.store.delete(&ctx.config.layout.hold_key).await?;
            println!(
                "released (was {}); the next feeder run resumes where it stopped",
                h.describe()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

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
    let imp = ctx.clone();
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
    let s = granary::handlers::resume::resume(&imp, &ids, args.dry_run).await?;
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

fn print_missing(missing: &[String]) {
    for id in missing {
        println!("no item {id}");
    }
}

/// Success, unless an item named was not found (exit code 1).
fn exit_unless_missing(missing: &[String]) -> ExitCode {
    if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The items a command names: `ids`, and every item in `state` when given (which must be one of
/// `allowed`, else the error says which are and `why`).
async fn named_items(
    ctx: &Ctx,
    ids: &[String],
    state: Option<&str>,
    allowed: &[ItemState],
    why: &str,
) -> Result<Vec<GranuleId>> {
    let mut out: Vec<GranuleId> = ids
        .iter()
        .map(|i| GranuleId::parse(i).map_err(anyhow::Error::from))
        .collect::<Result<_>>()?;
    if let Some(state) = state {
        let state: ItemState = state.parse()?;
        if !allowed.contains(&state) {
            let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
            bail!("--state must be {}: {why}", names.join(", "));
        }
        let query = granary::domain::item::ItemQuery {
            state: Some(state),
            ..Default::default()
        };
        out.extend(ctx.items().find(&query).await?.into_iter().map(|r| r.id));
    }
    Ok(out)
}

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
