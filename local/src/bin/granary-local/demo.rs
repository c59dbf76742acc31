use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::adapters::aws::{load_sdk_config_for, AwsClients};
use granary_local::campaign::{Campaign, CampaignSpec, Summary};
use granary_local::emulator::Emulator;
use granary_local::fault_plan::FaultPlan;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// How many granules the sample inventory holds.
    #[arg(long, default_value_t = 10_000)]
    granules: usize,
    /// Seed for the sample inventory and the fault plan.
    #[arg(long)]
    seed: Option<u64>,
    /// A fault plan as JSON (fields: see README); default ~8% Spot, ~2% application failures.
    #[arg(long)]
    fault_plan: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Use this already running emulator and leave it running (its state can be inspected).
    /// Without it (and without AWS_ENDPOINT_URL), granary starts moto itself.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    endpoint: Option<String>,
    /// The feeder schedule's period, in milliseconds.
    #[arg(long, default_value_t = 200)]
    tick_ms: u64,
    /// Granules the feeder submits per schedule tick.
    #[arg(long, default_value_t = 200)]
    submit_count: u64,
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let mut plan = match &args.fault_plan {
        Some(p) => FaultPlan::from_file(p)?,
        None => FaultPlan::default(),
    };
    if let Some(seed) = args.seed {
        plan.seed = seed;
    }
    let (_emulator, endpoint) = match &args.endpoint {
        Some(url) => (None, url.clone()),
        None => {
            let e = Emulator::start()?;
            let url = e.endpoint.clone();
            (Some(e), url)
        }
    };
    let config = load_sdk_config_for(&endpoint).await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let name = format!("granary-demo-{}", chrono::Utc::now().format("%H%M%S"));
    let mut spec = CampaignSpec {
        granules: args.granules,
        plan,
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = args.submit_count;
    spec.runner.feeder_interval = std::time::Duration::from_millis(args.tick_ms);
    if !args.json {
        eprintln!(
            "emulator {endpoint}; stack {name}; {} granules; fault plan seed {}",
            spec.granules, spec.plan.seed
        );
    }
    let mut campaign = Campaign::setup(&clients, &iam, &name, &spec)
        .await
        .context("setting up the campaign")?;
    if campaign.in_memory_batch.is_some() && !args.json {
        eprintln!(
            "the endpoint has no AWS Batch: jobs go to granary's in-memory Batch; S3, SQS and the EventBridge rule are the endpoint's"
        );
    }
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(spec.granules as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} settled  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    campaign
        .runtime
        .run_to_quiescence(|p| {
            bar.set_position(p.succeeded);
            bar.set_message(format!(
                "submitted {}  retrying {}  dead-lettered {}",
                p.submitted, p.retrying, p.dead_lettered
            ));
        })
        .await?;
    bar.finish();
    let p = &campaign.runtime.progress;
    tracing::debug!(feeder = ?p.feeder_time, simulator = ?p.simulator_time, monitor = ?p.monitor_time, requeuer = ?p.requeuer_time, "phase times");
    if std::env::var_os("GRANARY_DEMO_TIMINGS").is_some() {
        eprintln!(
            "phase times: feeder {:?}, simulator {:?}, monitor {:?}, requeuer {:?}",
            p.feeder_time, p.simulator_time, p.monitor_time, p.requeuer_time
        );
    }
    let summary = campaign.summarize(started.elapsed()).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
        if let (None, Some(stack)) = (&_emulator, &campaign.stack) {
            eprintln!(
                "\nThe emulator at {endpoint} keeps the stack's state: bucket {}, DLQ {}",
                stack.bucket, stack.failure_dlq_url
            );
        }
    }
    Ok(if summary.unaccounted == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_summary(s: &Summary) {
    println!(
        "\nCampaign: {} granules in {:.1} s ({:.1} granules/s)",
        s.granules, s.wall_secs, s.granules_per_sec
    );
    println!(
        "  succeeded {}, dead-lettered {}, unaccounted {}{}",
        s.succeeded,
        s.dead_lettered,
        s.unaccounted,
        if s.unaccounted == 0 {
            " — nothing lost"
        } else {
            " — WORK WAS LOST"
        }
    );
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["platform", "succeeded", "dead-lettered"]);
    for (p, c) in &s.per_platform {
        t.add_row([
            p.clone(),
            c.succeeded.to_string(),
            c.dead_lettered.to_string(),
        ]);
    }
    println!("\nOutcomes per platform\n{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["succeeded at attempt", "granules"]);
    for (a, n) in &s.attempts_histogram {
        t.add_row([a.to_string(), n.to_string()]);
    }
    println!("\nAttempts\n{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["DLQ reason", "messages"]);
    for (r, n) in &s.dlq_by_reason {
        t.add_row([r.clone(), n.to_string()]);
    }
    println!("\nDead-letter queue\n{t}");
    println!(
        "\nBatch: {} jobs, {} Batch-internal retries; {} events ({} duplicated, {} delayed); events DLQ {}",
        s.batch_jobs, s.batch_internal_retries, s.events_emitted, s.duplicate_events, s.delayed_events, s.events_dlq
    );
    println!(
        "Requests per granule: S3 {:.2}, SQS {:.2} ({} S3, {} SQS in all)",
        s.s3_per_granule, s.sqs_per_granule, s.s3_requests, s.sqs_requests
    );
}
