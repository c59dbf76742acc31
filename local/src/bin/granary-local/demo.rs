use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::adapters::aws::{load_sdk_config_for, AwsClients};
use granary_local::campaign::{Campaign, CampaignSpec, Summary};
use granary_local::emulator::Emulator;
use granary_local::fault_plan::FaultPlan;
use granary_local::stack::EmulatorStack;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// How many granules the sample inventory holds (300 by default: a first look, about a
    /// minute on moto; 5000 or more shows throughput and the ETA settling). With --inventory,
    /// its first N rows.
    #[arg(long)]
    granules: Option<usize>,
    /// A dry run of your own campaign: this inventory (Parquet, CSV, JSON lines or one id a
    /// line, as `granary inventory convert` reads them) instead of the sample, and what
    /// `granary plan` forecast beside what happened.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// The id column of a CSV, JSON-lines or Parquet --inventory.
    #[arg(long, default_value = "granule_id")]
    id_column: String,
    /// On granary's in-memory twins instead of the emulator: a large --inventory in seconds
    /// (100,000 rows), with no stack to explore afterwards.
    #[arg(long)]
    in_memory: bool,
    /// Seed for the sample inventory and the fault plan.
    #[arg(long)]
    seed: Option<u64>,
    /// A fault plan as JSON (fields: see docs/configuration.md, The local demo); default ~8% Spot, ~2% application failures.
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
    /// Keep the emulator this demo started running after the campaign, and print the commands
    /// (with the variables set) to explore it with `granary status`, `report` and `redrive`;
    /// Ctrl-C stops it.
    #[arg(long)]
    keep: bool,
    /// Instead of a campaign, one batch through the ingest queue (S3 and EventBridge from the
    /// emulator; the depositor's server and the processing jobs in memory).
    #[arg(long)]
    ingest: bool,
    /// One job a granule, as for a container that cannot follow the array child contract.
    /// Without it the demo runs as a stack deploys by default: each window one array job
    /// (docs/array-windows.md), retries gathered into windows too.
    #[arg(long)]
    single_jobs: bool,
    /// Objects in the --ingest batch.
    #[arg(long, default_value_t = 60)]
    objects: usize,
}

/// What the demo prints with --json: where the campaign ran, and what happened.
#[derive(serde::Serialize)]
struct DemoReport<'a> {
    endpoint: &'a str,
    /// The stack's resources (bucket, queues, job queue and definition), as the Lambdas see them.
    stack: Option<StackNames<'a>>,
    /// With --inventory: `granary plan`'s forecast before the first run.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecast: Option<&'a granary_cli::ops::plan::Plan>,
    #[serde(flatten)]
    summary: &'a Summary,
}

#[derive(serde::Serialize)]
struct StackNames<'a> {
    name: &'a str,
    bucket: &'a str,
    retry_queue_url: &'a str,
    failure_dlq_url: &'a str,
    events_queue_url: &'a str,
    events_dlq_url: &'a str,
    job_queue: &'a str,
    job_definition: &'a str,
}

impl<'a> StackNames<'a> {
    fn of(s: &'a EmulatorStack) -> Self {
        Self {
            name: &s.name,
            bucket: &s.bucket,
            retry_queue_url: &s.retry_queue_url,
            failure_dlq_url: &s.failure_dlq_url,
            events_queue_url: &s.events_queue_url,
            events_dlq_url: &s.events_dlq_url,
            job_queue: &s.job_queue,
            job_definition: &s.job_definition,
        }
    }
}

/// How to run the operator's `granary`: the binary built next to this one (`make demo` builds
/// both), else whatever `granary` is on PATH.
fn granary_command() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|me| me.parent().map(|dir| dir.join("granary")))
        .filter(|path| path.exists())
        .map_or_else(|| "granary".to_owned(), |path| path.display().to_string())
}

/// Writes the campaign's HTML report with the operator's own command (`granary report --scan
/// --cost --html`), as an operator would after a campaign: where it is.
fn html_report(endpoint: &str, s: &EmulatorStack) -> Result<PathBuf> {
    let dir = std::env::current_dir().context("the working directory")?;
    let target = dir.join("target");
    let page = if target.is_dir() { target } else { dir }.join("granary-demo-report.html");
    let granary = granary_command();
    let out = std::process::Command::new(&granary)
        .args(["report", "--scan", "--cost", "--html"])
        .arg(&page)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("GRANARY_BUCKET", &s.bucket)
        .stdout(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {granary} report (make demo builds it)"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{granary} report --html failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(page)
}

/// The shell lines that point `granary` at the demo's stack, and what to try with it.
fn explore_commands(endpoint: &str, s: &EmulatorStack) -> String {
    format!(
        "export AWS_ENDPOINT_URL={endpoint} AWS_REGION=us-east-1 \\
       AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \\
       GRANARY_BUCKET={} \\
       GRANARY_JOB_QUEUE={} GRANARY_JOB_DEFINITION={} \\
       GRANARY_RETRY_QUEUE_URL={} \\
       GRANARY_FAILURE_DLQ_URL={} \\
       GRANARY_EVENTS_QUEUE_URL={} GRANARY_EVENTS_DLQ_URL={}
{granary} status
{granary} report --scan --cost --html report.html
{granary} redrive --all --dry-run
{granary} items find --state ABANDONED",
        s.bucket,
        s.job_queue,
        s.job_definition,
        s.retry_queue_url,
        s.failure_dlq_url,
        s.events_queue_url,
        s.events_dlq_url,
        granary = granary_command(),
    )
}

/// The operator's --inventory, read (its first --granules ids).
fn load_inventory(args: &Args) -> Result<Option<super::dry_run::Loaded>> {
    args.inventory
        .as_ref()
        .map(|file| super::dry_run::load(file, args.granules.map(|n| n as u64), &args.id_column))
        .transpose()
}

/// The sample's size when neither --granules nor --inventory says.
const SAMPLE_GRANULES: usize = 300;

pub async fn run(args: Args) -> Result<ExitCode> {
    let plan = fault_plan(&args)?;
    let loaded = load_inventory(&args)?;
    if args.in_memory {
        let Some(loaded) = loaded else {
            anyhow::bail!("--in-memory runs an --inventory");
        };
        return super::dry_run::in_memory(&args_view(&args), campaign_spec(&args, plan), loaded)
            .await;
    }
    let (emulator, endpoint) = emulator_endpoint(&args)?;
    let config = load_sdk_config_for(&endpoint).await;
    let clients = AwsClients::new(&config);
    if args.ingest {
        return super::ingest_demo::run(&clients, args.objects, args.json).await;
    }
    let iam = aws_sdk_iam::Client::new(&config);
    let name = format!("granary-demo-{}", chrono::Utc::now().format("%H%M%S"));
    let mut spec = campaign_spec(&args, plan);
    if let Some(loaded) = &loaded {
        super::dry_run::give(&mut spec, loaded);
    }
    if !args.json {
        announce(&args, &endpoint, &name, &spec);
        if let (Some(file), Some(loaded)) = (&args.inventory, &loaded) {
            eprintln!("{}", super::dry_run::describe_read(file, &loaded.read));
        }
    }
    let mut campaign = Campaign::setup(&clients, &iam, &name, &spec)
        .await
        .context("setting up the campaign")?;
    let forecast = match loaded {
        Some(_) => Some(super::dry_run::forecast(&campaign, !args.single_jobs).await?),
        None => None,
    };
    if campaign.in_memory_batch.is_some() && !args.json {
        eprintln!(
            "the endpoint has no AWS Batch: jobs go to granary's in-memory Batch; S3, SQS and the EventBridge rule are the endpoint's"
        );
    }
    let started = Instant::now();
    run_with_progress(&mut campaign, spec.granules, args.json).await?;
    report_phase_times(&campaign);
    let summary = campaign.summarize(started.elapsed()).await?;
    if args.json {
        let report = DemoReport {
            endpoint: &endpoint,
            stack: campaign.stack.as_ref().map(StackNames::of),
            forecast: forecast.as_ref(),
            summary: &summary,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&summary);
        if let Some(forecast) = &forecast {
            super::dry_run::print_comparison(forecast, &summary, &campaign);
        }
    }
    let code = if summary.unaccounted == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    let Some(stack) = &campaign.stack else {
        return Ok(code);
    };
    if !args.json {
        let page = html_report(&endpoint, stack)?;
        eprintln!(
            "\nThe campaign's report, its charts on one page: file://{}",
            page.display()
        );
    }
    offer_exploration(&args, emulator.as_ref(), &endpoint, stack).await?;
    Ok(code)
}

/// What the in-memory dry run reads of the command line.
fn args_view(args: &Args) -> super::dry_run::RunArgs {
    super::dry_run::RunArgs {
        file: args.inventory.clone().unwrap_or_default(),
        json: args.json,
        array_windows: !args.single_jobs,
    }
}

/// The fault plan from --fault-plan (or the default), reseeded by --seed.
fn fault_plan(args: &Args) -> Result<FaultPlan> {
    let mut plan = match &args.fault_plan {
        Some(p) => FaultPlan::from_file(p)?,
        None => FaultPlan::default(),
    };
    if let Some(seed) = args.seed {
        plan.seed = seed;
    }
    Ok(plan)
}

/// The emulator to talk to: the one --endpoint names, else one this demo starts (and owns, so it
/// stops when the demo ends).
fn emulator_endpoint(args: &Args) -> Result<(Option<Emulator>, String)> {
    Ok(match &args.endpoint {
        Some(url) => (None, url.clone()),
        None => {
            let e = Emulator::start()?;
            let url = e.endpoint.clone();
            (Some(e), url)
        }
    })
}

/// The campaign the command line asks for.
fn campaign_spec(args: &Args, plan: FaultPlan) -> CampaignSpec {
    let mut spec = CampaignSpec {
        granules: args.granules.unwrap_or(SAMPLE_GRANULES),
        plan,
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = args.submit_count;
    let array_windows = if args.single_jobs { "off" } else { "on" };
    spec.env
        .push(("GRANARY_ARRAY_WINDOWS".to_owned(), array_windows.to_owned()));
    spec.runner.feeder_interval = std::time::Duration::from_millis(args.tick_ms);
    spec
}

/// One line on stderr: where the campaign runs and what it is.
fn announce(args: &Args, endpoint: &str, name: &str, spec: &CampaignSpec) {
    eprintln!(
        "emulator {endpoint}; stack {name}; {} granules; {}; fault plan seed {}",
        spec.granules,
        if args.single_jobs {
            "one job a granule"
        } else {
            "array windows"
        },
        spec.plan.seed
    );
}

/// Runs the campaign until nothing moves, its settled granules on a progress bar (hidden with
/// --json).
pub(super) async fn run_with_progress(
    campaign: &mut Campaign,
    granules: usize,
    json: bool,
) -> Result<()> {
    let bar = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(granules as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} settled  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
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
    Ok(())
}

/// Where the time went, per handler: in the debug log, and on stderr with GRANARY_DEMO_TIMINGS.
fn report_phase_times(campaign: &Campaign) {
    let p = &campaign.runtime.progress;
    tracing::debug!(feeder = ?p.feeder_time, simulator = ?p.simulator_time, monitor = ?p.monitor_time, requeuer = ?p.requeuer_time, "phase times");
    if std::env::var_os("GRANARY_DEMO_TIMINGS").is_some() {
        eprintln!(
            "phase times: feeder {:?}, simulator {:?}, monitor {:?}, requeuer {:?}",
            p.feeder_time, p.simulator_time, p.monitor_time, p.requeuer_time
        );
    }
}

/// How to explore the campaign's state with `granary`, and with --keep, keeping the emulator this
/// demo started running until Ctrl-C.
async fn offer_exploration(
    args: &Args,
    emulator: Option<&Emulator>,
    endpoint: &str,
    stack: &EmulatorStack,
) -> Result<()> {
    // The commands go to stderr so that --json output stays one JSON document.
    match (emulator, args.keep) {
        (Some(_), false) if !args.json => {
            eprintln!("\n(--keep, or `make demo KEEP=1`, keeps the emulator running to explore the campaign with granary status, report and redrive.)")
        }
        (Some(_), false) => {}
        (Some(_), true) => {
            eprintln!(
                "\nThe emulator keeps running with the campaign's state. In another shell:\n\n{}\n\nCtrl-C stops it.",
                explore_commands(endpoint, stack)
            );
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
            eprintln!("stopping the emulator");
        }
        (None, _) => eprintln!(
            "\nThe emulator at {endpoint} keeps the campaign's state. To explore it:\n\n{}",
            explore_commands(endpoint, stack)
        ),
    }
    Ok(())
}

pub(super) fn print_summary(s: &Summary) {
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
