//! `granary-bench campaign`: a whole campaign's calls, time and cost per granule.

use super::*;
use granary::adapters::tap::counting::RequestCounts;
use granary::adapters::tap::Tap;
use granary_local::runner::LambdaFunction;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod figures;
use figures::{campaign_figures, campaign_row, measure_requests, report_time, Measured};

/// Public prices (us-east-1, Nov 2026 list prices, no free tier) the estimate uses: granary's
/// own table (`domain::cost::prices`), which `granary report --cost` reads too.
pub(crate) use granary::domain::cost::prices;

/// One campaign's figures, as `granary-bench campaign --json` prints them (per granule unless
/// the name says otherwise).
#[derive(Debug, Serialize)]
pub(crate) struct CampaignFigures {
    pub(crate) granules: usize,
    pub(crate) ports: &'static str,
    pub(crate) item_records: bool,
    /// Each window of first attempts submitted as one array job (`GRANARY_ARRAY_WINDOWS`).
    pub(crate) array_windows: bool,
    /// Retries parked and submitted by the window (`GRANARY_ARRAY_RETRIES`).
    pub(crate) array_retries: bool,
    /// Whether the runner's invocations ran side by side on every core.
    pub(crate) parallel: bool,
    /// SubmitJob calls the Batch twin accepted in a second (`None`: no limit).
    pub(crate) submit_limit_per_sec: Option<usize>,
    /// SubmitJob calls made (refused ones too), in all and per granule.
    pub(crate) submit_job_calls: u64,
    pub(crate) submit_job_calls_per_granule: f64,
    /// Array jobs the simulator played (each window of first attempts, in array mode).
    pub(crate) array_jobs: u64,
    pub(crate) feeder_interval_ms: u64,
    pub(crate) granule_submit_count: u64,
    /// GRANARY_RECONCILE_AFTER_SECS the campaign ran with.
    pub(crate) reconcile_after_secs: u64,
    /// The simulator's faults: `default` or `none`.
    pub(crate) faults: &'static str,
    /// Granules the reconciler handed to the monitor's handler (ends it found unhandled).
    pub(crate) reconciled: u64,
    pub(crate) wall_secs: f64,
    pub(crate) granules_per_sec: f64,
    pub(crate) cpu_secs: f64,
    /// The campaign's accounting, from its logs and the failure DLQ: "did anything get lost".
    pub(crate) succeeded: u64,
    pub(crate) dead_lettered: u64,
    /// Neither succeeded nor dead-lettered: lost work. The bench fails when it is not 0.
    pub(crate) unaccounted: u64,
    /// Both succeeded and dead-lettered: an end handled twice. The bench fails when it is not 0.
    pub(crate) ended_twice: u64,
    pub(crate) s3_get_per_granule: f64,
    pub(crate) s3_put_per_granule: f64,
    /// The PUTs a granule costs, by the key's first folder (logs, items, history, claims, …).
    pub(crate) s3_put_per_granule_by_folder: std::collections::BTreeMap<String, f64>,
    /// The GETs a granule costs, by the key's first folder.
    pub(crate) s3_get_per_granule_by_folder: std::collections::BTreeMap<String, f64>,
    /// The GETs and PUTs a granule costs, by the function that made them (`feeder`, `monitor`,
    /// `requeuer`, `sweeper`: the reconciler runs in the sweeper; `other`: the rest, the array
    /// children reading their window claim as containers do): which handler's reads and writes
    /// a campaign's cost is made of.
    pub(crate) s3_get_per_granule_by_function: std::collections::BTreeMap<String, f64>,
    pub(crate) s3_put_per_granule_by_function: std::collections::BTreeMap<String, f64>,
    pub(crate) s3_list_per_granule: f64,
    /// The LIST requests (pages of 1,000 keys) a granule costs, by the listed prefix's first
    /// folder.
    pub(crate) s3_list_per_granule_by_folder: std::collections::BTreeMap<String, f64>,
    pub(crate) s3_copy_per_granule: f64,
    pub(crate) s3_delete_per_granule: f64,
    pub(crate) s3_requests_per_granule: f64,
    pub(crate) sqs_requests_per_granule: f64,
    pub(crate) batch_calls_per_granule: f64,
    pub(crate) lambda_invocations_per_granule: f64,
    pub(crate) lambda_gb_s_per_granule: f64,
    /// granary's own cost per million granules at the list prices above (Lambda, S3, SQS).
    pub(crate) dollars_per_million: f64,
    /// The bench process's peak resident set (VmHWM) so far: campaigns run one after another in
    /// one process, so a later campaign's figure is at least an earlier one's.
    pub(crate) peak_rss_mib: f64,
    /// Disk the in-memory twins' scratch files took (object bodies and job details, each
    /// compressed on its own); 0 against the emulator.
    pub(crate) scratch_mib: f64,
}

/// How a benchmark campaign runs (the `campaign` subcommand's options).
pub(crate) struct CampaignOptions {
    pub(crate) in_memory: bool,
    pub(crate) json: bool,
    pub(crate) feeder_interval_ms: u64,
    pub(crate) granule_submit_count: u64,
    pub(crate) array_windows: bool,
    pub(crate) array_retries: bool,
    /// `Some`: set GRANARY_ITEM_RECORDS; `None`: the environment's.
    pub(crate) item_records: Option<bool>,
    /// The Batch twin's SubmitJob quota, calls a second (in-memory only; 0: none).
    pub(crate) submit_limit: usize,
    /// What submitters pace themselves to (`GRANARY_SUBMIT_JOB_RATE`; 0: unpaced).
    pub(crate) submit_rate: f64,
    /// The runner's invocations side by side on every worker thread (`RunnerOptions::parallel`).
    pub(crate) parallel: bool,
    /// GRANARY_RECONCILE_AFTER_SECS.
    pub(crate) reconcile_after_secs: u64,
    /// The simulator plays no faults (`FaultPlan::none`).
    pub(crate) faultless: bool,
}

impl CampaignOptions {
    /// The Batch twin's SubmitJob quota the campaign runs with (in-memory only).
    fn submit_limit_per_sec(&self) -> Option<usize> {
        (self.in_memory && self.submit_limit > 0).then_some(self.submit_limit)
    }
}

pub(crate) async fn campaign(sizes: Vec<usize>, o: CampaignOptions) -> Result<()> {
    let config = load_sdk_config().await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let mut table = campaign_table();
    for n in sizes {
        run_one_campaign(n, &o, &clients, &iam, &mut table).await?;
    }
    if o.json {
        return Ok(());
    }
    println!(
        "Campaign in the local runtime (requests counted at granary's ports, per granule)\n{table}"
    );
    println!("Prices: Lambda $0.20/M requests + $0.0000133334/GB-s (arm64, 256 MB); S3 $0.005/1k PUT/COPY/LIST, $0.0004/1k GET, DELETE free; SQS $0.40/M; Batch API and Batch events on the default bus cost nothing.");
    Ok(())
}

/// The summary table, one row a campaign.
fn campaign_table() -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "granules",
        "ports",
        "item records",
        "windows",
        "SubmitJob / granule",
        "wall s",
        "granules/s",
        "S3 GET",
        "S3 PUT+LIST",
        "S3 DELETE",
        "SQS",
        "Batch",
        "Lambda invocations",
        "Lambda GB-s",
        "$ per million granules",
    ]);
    table
}

/// One campaign of `n` granules: set up, run, counted, printed, and checked that nothing got lost.
async fn run_one_campaign(
    n: usize,
    o: &CampaignOptions,
    clients: &AwsClients,
    iam: &aws_sdk_iam::Client,
    table: &mut Table,
) -> Result<()> {
    let spec = campaign_spec(n, o);
    let mut c = start_campaign(n, o, clients, iam, &spec).await?;
    let by_function = tap_functions(&mut c);
    let before = CountsBefore::take(&c);
    let started = Instant::now();
    run_reporting_progress(&mut c, n, started).await?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = process_cpu_secs() - before.cpu_secs;
    let (requests, breakdown) = measure_requests(n, &c, &before, &by_function);
    // After the counts are taken: the accounting's own LISTs are not the campaign's.
    let summary = c.summarize(Duration::from_secs_f64(wall)).await?;
    let measured = Measured {
        wall_secs: wall,
        cpu_secs: cpu,
        requests,
    };
    let figures = campaign_figures(n, o, &c, &measured, breakdown, &summary)?;
    if o.json {
        println!("{}", serde_json::to_string(&figures)?);
    }
    table.add_row(campaign_row(n, o, &c, &measured));
    report_time(n, &c, &measured);
    anyhow::ensure!(
        summary.unaccounted == 0,
        "campaign of {n}: {} granules neither succeeded nor dead-lettered",
        summary.unaccounted
    );
    anyhow::ensure!(
        summary.ended_twice == 0,
        "campaign of {n}: {} granules both succeeded and dead-lettered",
        summary.ended_twice
    );
    Ok(())
}

/// The environment the campaign's functions run with, from the options.
fn campaign_env(o: &CampaignOptions) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some(on) = o.item_records {
        env.push((
            "GRANARY_ITEM_RECORDS".to_owned(),
            if on { "on" } else { "off" }.to_owned(),
        ));
    }
    if o.array_windows {
        env.push(("GRANARY_ARRAY_WINDOWS".to_owned(), "on".to_owned()));
    }
    if o.array_retries {
        env.push(("GRANARY_ARRAY_RETRIES".to_owned(), "on".to_owned()));
    }
    if o.submit_rate > 0.0 {
        env.push((
            "GRANARY_SUBMIT_JOB_RATE".to_owned(),
            o.submit_rate.to_string(),
        ));
    }
    env.push((
        "GRANARY_RECONCILE_AFTER_SECS".to_owned(),
        o.reconcile_after_secs.to_string(),
    ));
    env
}

/// The campaign of `n` granules the options describe.
fn campaign_spec(n: usize, o: &CampaignOptions) -> granary_local::campaign::CampaignSpec {
    let env = campaign_env(o);
    let mut spec = granary_local::campaign::CampaignSpec {
        granules: n,
        // An inventory of a million rows at most, as a bucket inventory splits its listing
        // (the sample's rows are made an inventory at a time: ten million at once are ~1.3 GB).
        inventories: n.div_ceil(1_000_000).max(2),
        env,
        submit_limit: o.submit_limit_per_sec(),
        plan: if o.faultless {
            granary_local::fault_plan::FaultPlan::none()
        } else {
            granary_local::fault_plan::FaultPlan::default()
        },
        ..granary_local::campaign::CampaignSpec::default()
    };
    spec.runner.feeder_interval = Duration::from_millis(o.feeder_interval_ms);
    spec.runner.granule_submit_count = o.granule_submit_count;
    spec.runner.parallel = o.parallel;
    // The emulator settles ~25 granules/s: allow a large campaign the time it needs.
    spec.runner.deadline = spec.runner.deadline.max(Duration::from_secs(n as u64 / 5));
    spec
}

/// The campaign set up on the in-memory twins or the emulator, keeping only what the bench reads.
async fn start_campaign(
    n: usize,
    o: &CampaignOptions,
    clients: &AwsClients,
    iam: &aws_sdk_iam::Client,
    spec: &granary_local::campaign::CampaignSpec,
) -> Result<granary_local::campaign::Campaign> {
    use granary_local::campaign::Campaign;
    let mut c = if o.in_memory {
        Campaign::in_memory(spec).await?
    } else {
        let name = format!("granary-bench-c{}-{n}", std::process::id());
        Campaign::setup(clients, iam, &name, spec).await?
    };
    // The bench counts by logs and the DLQ; the simulator's per-job plan (for tests) would
    // cost a few hundred bytes a job.
    c.runtime.simulator.keep_plan = false;
    c.keep_dlq_messages = false;
    Ok(c)
}

/// A request counter on each function, by its lowercase name.
fn tap_functions(c: &mut granary_local::campaign::Campaign) -> Vec<(String, Arc<RequestCounts>)> {
    [
        LambdaFunction::Feeder,
        LambdaFunction::Monitor,
        LambdaFunction::Requeuer,
        LambdaFunction::Sweeper,
    ]
    .into_iter()
    .map(|f| {
        let counts = Arc::new(RequestCounts::totals_only());
        c.runtime
            .function_taps
            .insert(f, counts.clone() as Arc<dyn Tap>);
        (format!("{f:?}").to_lowercase(), counts)
    })
    .collect()
}

/// The counts as the campaign starts, to take from those at its end.
struct CountsBefore {
    cpu_secs: f64,
    all: [u64; 8],
    puts_by_folder: BTreeMap<String, u64>,
    gets_by_folder: BTreeMap<String, u64>,
    lists_by_folder: BTreeMap<String, u64>,
}

impl CountsBefore {
    fn take(c: &granary_local::campaign::Campaign) -> Self {
        Self {
            cpu_secs: process_cpu_secs(),
            all: snapshot_all(&c.counts),
            puts_by_folder: c.counts.puts_by_folder(),
            gets_by_folder: c.counts.gets_by_folder(),
            lists_by_folder: c.counts.lists_by_folder(),
        }
    }
}

/// Runs the campaign until nothing moves, saying how far along it is.
async fn run_reporting_progress(
    c: &mut granary_local::campaign::Campaign,
    n: usize,
    started: Instant,
) -> Result<()> {
    let mut last_report = Instant::now();
    c.runtime
        .run_to_quiescence(|p| {
            // Long campaigns run for an hour: say how far along they are twice a minute.
            if last_report.elapsed() >= Duration::from_secs(30) {
                last_report = Instant::now();
                eprintln!(
                    "campaign of {n}: {:.0} s, {} jobs submitted, {} succeeded, {} retrying, {} dead-lettered",
                    started.elapsed().as_secs_f64(),
                    p.submitted,
                    p.succeeded,
                    p.retrying,
                    p.dead_lettered
                );
            }
        })
        .await
}
