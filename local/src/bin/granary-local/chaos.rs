use anyhow::Result;
use granary_local::chaos::{self, ChaosSpec};
use granary_local::runner::ChaosOptions;
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// How many granules the sample inventory holds.
    #[arg(long, default_value_t = 10_000)]
    granules: usize,
    /// Seed for the inventory, the fault plan, the crashes and the throttling: a run replays.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Share of handler invocations that die at a random external call.
    #[arg(long, default_value_t = 0.01)]
    crash_rate: f64,
    /// Share of external calls refused as throttled (S3 SlowDown, SQS and Batch throttling).
    #[arg(long, default_value_t = 0.05)]
    throttle_rate: f64,
    /// Share of final Batch events never delivered (EventBridge gave up): only the reconciler,
    /// asking DescribeJobs, finds those ends.
    #[arg(long, default_value_t = 0.01)]
    lost_event_rate: f64,
    /// Granules the feeder takes per schedule tick.
    #[arg(long, default_value_t = 500)]
    submit_count: u64,
    /// Milliseconds after SubmitJob before the Batch twin's ListJobs shows a job (Batch promises
    /// no read-after-write for ListJobs); keep it below the campaign's 1 s claim lease.
    #[arg(long, default_value_t = 250)]
    listing_lag_ms: u64,
    /// Submit each feeder window as one array job (GRANARY_ARRAY_WINDOWS).
    #[arg(long)]
    array_windows: bool,
    /// Park retries and submit them as windows of retries (GRANARY_ARRAY_RETRIES).
    #[arg(long)]
    array_retries: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<ExitCode> {
    check_rates(&args)?;
    let spec = chaos_spec(&args);
    let bar = settled_bar(&args);
    let report = chaos::run(&spec, |p| {
        bar.set_position(p.succeeded + p.dead_lettered);
        bar.set_message(format!(
            "({} retrying, {} crashed invocations)",
            p.retrying, p.crashed_invocations
        ));
    })
    .await?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.holds() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Every rate is a share of something: in [0, 1).
fn check_rates(args: &Args) -> Result<()> {
    for (name, rate) in [
        ("--crash-rate", args.crash_rate),
        ("--throttle-rate", args.throttle_rate),
        ("--lost-event-rate", args.lost_event_rate),
    ] {
        anyhow::ensure!(
            (0.0..1.0).contains(&rate),
            "{name} must be in [0, 1), not {rate}"
        );
    }
    Ok(())
}

/// The campaign the command line asks for.
fn chaos_spec(args: &Args) -> ChaosSpec {
    ChaosSpec {
        granules: args.granules,
        seed: args.seed,
        chaos: ChaosOptions {
            crash_rate: args.crash_rate,
            throttle_rate: args.throttle_rate,
            ..ChaosOptions::default()
        },
        granule_submit_count: args.submit_count.max(1),
        lost_rate: args.lost_event_rate,
        listing_lag: std::time::Duration::from_millis(args.listing_lag_ms),
        env: [
            ("GRANARY_ARRAY_WINDOWS", args.array_windows),
            ("GRANARY_ARRAY_RETRIES", args.array_retries),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(var, _)| (var.to_owned(), "on".to_owned()))
        .collect(),
        ..ChaosSpec::default()
    }
}

/// The progress bar of settled granules, hidden when the report is JSON.
fn settled_bar(args: &Args) -> ProgressBar {
    let bar = ProgressBar::new(args.granules as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} settled {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// The report for a reader.
fn print_report(r: &chaos::ChaosReport) {
    println!("granules                {}", r.granules);
    println!("succeeded               {}", r.succeeded);
    println!("dead-lettered           {}", r.dead_lettered);
    println!("unaccounted             {}", r.unaccounted);
    println!("duplicate submissions   {}", r.duplicate_submissions);
    println!("duplicate successes     {}", r.duplicate_successes);
    println!("failures without record {}", r.failures_without_record);
    println!(
        "dead-letter copies      {} (after a crash or a refused write; {} disagreeing)",
        r.dead_letter_copies, r.dead_letters_disagreeing
    );
    println!("stale parked retries    {}", r.stale_parked_retries);
    println!("retries left parked     {}", r.parked_retries_left);
    println!("windows of retries      {}", r.retry_windows);
    println!(
        "injected                {} crashes, {} throttles in {} external calls over {} invocations",
        r.crashes_injected, r.throttles_injected, r.external_calls, r.handler_invocations
    );
    println!(
        "batch                   {} jobs, {} retried by Batch, {} events ({} duplicated, {} delayed)",
        r.batch_jobs, r.batch_internal_retries, r.events_emitted, r.duplicate_events, r.delayed_events
    );
    println!(
        "lost events             {} never delivered, {} ends found by the reconciler",
        r.events_lost, r.ends_reconciled
    );
    println!("wall                    {:.1} s", r.wall_secs);
    for (what, examples) in &r.examples {
        println!("{what}: {}", examples.join(", "));
    }
    println!(
        "{}",
        if r.holds() {
            "nothing lost, nothing twice"
        } else {
            "THE PROMISE DID NOT HOLD"
        }
    );
}
