use anyhow::Result;
use granary_local::fault_plan::BatchTiming;
use granary_local::runner::FunctionTimeouts;
use granary_local::simulate::{self, archive, ingest, SimReport, SimSpec};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Seed for the inventory, the fault plan, the crashes, the throttling and every time: a
    /// run replays exactly.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many granules the sample inventory holds.
    #[arg(long, default_value_t = 2_000)]
    granules: usize,
    /// Simulated seconds after SubmitJob before the Batch twin's ListJobs shows a job (Batch
    /// promises no read-after-write for ListJobs). Past the 16-minute claim lease, a takeover
    /// may submit a job twice: counted, never a loss.
    #[arg(long, default_value_t = 30)]
    listing_lag_secs: u64,
    /// More of granary's configuration, as VAR=VALUE (repeatable): `--env GRANARY_ARRAY_WINDOWS=on`.
    #[arg(long = "env", value_parser = var_value)]
    env: Vec<(String, String)>,
    /// The job monitor's timeout in milliseconds (the template's 60 s unless given): shorter,
    /// invocations slowed by throttling outlive it and are dropped mid-await, as Lambda ends them.
    #[arg(long)]
    monitor_timeout_ms: Option<u64>,
    /// Share of handler invocations that die at a random external call.
    #[arg(long, default_value_t = 0.01)]
    crash_rate: f64,
    /// Every Batch job ends at once and its event arrives at once (by default jobs take a Spot
    /// queue's times: minutes queued, up to 45 minutes an attempt, hours waiting for capacity
    /// now and then, EventBridge's delays and a day's retries, DescribeJobs's lag).
    #[arg(long)]
    instant_jobs: bool,
    /// No operator: by default one cancels every open attempt half an hour in (the feeder
    /// held), then resumes them and releases the feeder an hour later.
    #[arg(long)]
    no_operator: bool,
    /// Files the importer finds at its source (discovered hourly, as the template schedules
    /// it); every other one is listed in an inventory too, so the feeder and the importer meet
    /// on it. 0: no importer.
    #[arg(long, default_value_t = simulate::DEFAULT_IMPORTED_FILES)]
    imported_files: usize,
    /// The ingest queue instead of the backfill: batches of objects from depositors' servers
    /// (fast, slow, or never answering), processing jobs on Batch, minting, an operator's hold.
    #[arg(long)]
    ingest: bool,
    /// Archive jobs instead of the backfill: an operator asks for one every twenty minutes,
    /// the dispatcher and the task queue run them with the template's timings.
    #[arg(long)]
    archive: bool,
    /// With --archive: how many jobs the operator asks for.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// With --ingest: how many batches arrive (40 minutes apart).
    #[arg(long, default_value_t = 6)]
    batches: usize,
    /// With --ingest: objects in each batch.
    #[arg(long, default_value_t = 40)]
    objects: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn var_value(s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((var, value)) if var.starts_with("GRANARY_") => Ok((var.to_owned(), value.to_owned())),
        _ => Err(anyhow::anyhow!("{s:?} is not GRANARY_VAR=VALUE")),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(
        (0.0..1.0).contains(&args.crash_rate),
        "--crash-rate must be in [0, 1), not {}",
        args.crash_rate
    );
    if args.ingest {
        return run_ingest(&args);
    }
    if args.archive {
        return run_archive(&args);
    }
    let spec = SimSpec {
        seed: args.seed,
        granules: args.granules,
        listing_lag: Duration::from_secs(args.listing_lag_secs),
        env: args.env,
        crash_rate: args.crash_rate,
        timeouts: FunctionTimeouts {
            monitor: args
                .monitor_timeout_ms
                .map_or(FunctionTimeouts::default().monitor, Duration::from_millis),
            ..FunctionTimeouts::default()
        },
        timing: if args.instant_jobs {
            BatchTiming::instant()
        } else {
            BatchTiming::spot_queue()
        },
        operator: !args.no_operator,
        imported_files: args.imported_files,
    };
    finish(
        simulate::run(&spec),
        &simulate::replay_command(&spec),
        args.json,
        SimReport::holds,
        print_report,
    )
}

/// The run's report as JSON or lines, and its exit code: 0 when the promise held, 1 when it
/// did not, 2 when the run could not finish (with the command that replays it).
fn finish<R: serde::Serialize>(
    ran: Result<R>,
    replay: &str,
    json: bool,
    holds: impl Fn(&R) -> bool,
    print: impl Fn(&R),
) -> Result<ExitCode> {
    let report = match ran {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e:#}\nreplay: {replay}");
            return Ok(ExitCode::from(2));
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if holds(&report) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_archive(args: &Args) -> Result<ExitCode> {
    let spec = archive::ArchiveSimSpec {
        seed: args.seed,
        jobs: args.jobs,
        crash_rate: args.crash_rate,
    };
    let print = |r: &archive::ArchiveSimReport| {
        print_head(r.seed, r.simulated_secs, r.wall_secs);
        println!(
            "jobs                    {} of {} completed ({} products)",
            r.completed, spec.jobs, r.objects
        );
        println!(
            "injected                {} crashes at a call over {} ticks and {} tasks",
            r.crashes_injected, r.ticks, r.task_invocations
        );
        print_tail(
            &r.wrong,
            r.holds(),
            "every job completed, each copy verified",
            &r.replay,
        );
    };
    finish(
        archive::run(&spec),
        &archive::replay_command(&spec),
        args.json,
        archive::ArchiveSimReport::holds,
        print,
    )
}

fn run_ingest(args: &Args) -> Result<ExitCode> {
    let spec = ingest::IngestSimSpec {
        seed: args.seed,
        batches: args.batches,
        objects: args.objects,
        crash_rate: args.crash_rate,
    };
    let print = |r: &ingest::IngestSimReport| {
        let a = &r.audit;
        print_head(r.seed, r.simulated_secs, r.wall_secs);
        println!(
            "jobs                    {} in {} batches ({} completed, {} failed)",
            a.jobs, a.batches, a.completed, a.failed
        );
        println!(
            "injected                {} crashes at a call, {} ticks ended at their timeout, {} events lost",
            r.crashes_injected, r.ticks_timed_out, r.events_lost
        );
        let wrong: Vec<String> = a
            .unfinished
            .iter()
            .chain(&a.wrong_outcomes)
            .cloned()
            .collect();
        print_tail(
            &wrong,
            r.holds(),
            "every job ended as its fate allows",
            &r.replay,
        );
    };
    finish(
        ingest::run(&spec),
        &ingest::replay_command(&spec),
        args.json,
        ingest::IngestSimReport::holds,
        print,
    )
}

fn print_head(seed: u64, simulated_secs: f64, wall_secs: f64) {
    println!("seed                    {seed}");
    println!(
        "simulated               {:.1} h in {wall_secs:.1} s",
        simulated_secs / 3600.0
    );
}

/// The first things wrong, and the verdict.
fn print_tail(wrong: &[String], holds: bool, held: &str, replay: &str) {
    for line in wrong.iter().take(10) {
        println!("  {line}");
    }
    if holds {
        println!("{held}");
    } else {
        println!("THE PROMISE DID NOT HOLD; replay: {replay}");
    }
}

fn print_report(r: &SimReport) {
    let a = &r.audit;
    println!("seed                    {}", r.seed);
    println!(
        "simulated               {:.1} h in {:.1} s ({:.2} simulated hours a second)",
        r.simulated_secs / 3600.0,
        r.wall_secs,
        r.simulated_hours_per_second
    );
    println!(
        "granules                {} ({} succeeded, {} dead-lettered, {} unaccounted)",
        a.granules, a.succeeded, a.dead_lettered, a.unaccounted
    );
    println!(
        "twice                   {} submissions, {} successes",
        a.duplicate_submissions, a.duplicate_successes
    );
    println!(
        "records                 {} disagreeing, {} history entries wrong, {} missing",
        a.records_disagreeing, a.history_entries_wrong, a.history_entries_missing
    );
    println!(
        "left open               {} claims, {} parked retries",
        a.open_claims_left, a.parked_retries_left
    );
    println!(
        "injected                {} crashes at a call, {} invocations ended at their timeout, {} throttles",
        a.crashes_injected, r.timed_out_invocations, a.throttles_injected
    );
    println!(
        "batch                   {} events lost, {} ends found by the reconciler, {} jobs cancelled waiting for capacity",
        a.events_lost, a.ends_reconciled, r.capacity_cancels
    );
    println!(
        "operator                {} attempts cancelled, {} resumed over {} resumes",
        r.operator.cancelled, r.operator.resumed, r.operator.resumes
    );
    if let Some(v2) = &r.operator.second_campaign {
        println!(
            "campaign v2             {} granules ({} succeeded, {} dead-lettered, {} unaccounted, {} submitted twice)",
            v2.granules, v2.succeeded, v2.dead_lettered, v2.unaccounted, v2.duplicate_submissions
        );
    }
    if !r.holds() {
        println!("THE PROMISE DID NOT HOLD; replay: {}", r.replay);
    } else {
        println!("nothing lost, nothing twice");
    }
}
