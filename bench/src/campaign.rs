//! `granary-bench campaign`: a whole campaign's calls, time and cost per granule.

use super::*;
use granary::adapters::tap::counting::RequestCounts;
use granary::adapters::tap::Tap;
use granary_local::runner::LambdaFunction;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

pub(crate) async fn campaign(sizes: Vec<usize>, o: CampaignOptions) -> Result<()> {
    let CampaignOptions {
        in_memory,
        json,
        feeder_interval_ms,
        granule_submit_count,
        ..
    } = o;
    use granary_local::campaign::{Campaign, CampaignSpec};
    let config = load_sdk_config().await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
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
    for n in sizes {
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
        let submit_limit = (in_memory && o.submit_limit > 0).then_some(o.submit_limit);
        let mut spec = CampaignSpec {
            granules: n,
            // An inventory of a million rows at most, as a bucket inventory splits its listing
            // (the sample's rows are made an inventory at a time: ten million at once are ~1.3 GB).
            inventories: n.div_ceil(1_000_000).max(2),
            env,
            submit_limit,
            plan: if o.faultless {
                granary_local::fault_plan::FaultPlan::none()
            } else {
                granary_local::fault_plan::FaultPlan::default()
            },
            ..CampaignSpec::default()
        };
        spec.runner.feeder_interval = Duration::from_millis(feeder_interval_ms);
        spec.runner.granule_submit_count = granule_submit_count;
        spec.runner.parallel = o.parallel;
        // The emulator settles ~25 granules/s: allow a large campaign the time it needs.
        spec.runner.deadline = spec.runner.deadline.max(Duration::from_secs(n as u64 / 5));
        let mut c = if in_memory {
            Campaign::in_memory(&spec).await?
        } else {
            let name = format!("granary-bench-c{}-{n}", std::process::id());
            Campaign::setup(&clients, &iam, &name, &spec).await?
        };
        // The bench counts by logs and the DLQ; the simulator's per-job plan (for tests) would
        // cost a few hundred bytes a job.
        c.runtime.simulator.keep_plan = false;
        c.keep_dlq_messages = false;
        let by_function: Vec<(String, Arc<RequestCounts>)> = [
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
        .collect();
        let cpu_before = process_cpu_secs();
        let before = snapshot_all(&c.counts);
        let puts_before = c.counts.puts_by_folder();
        let gets_before = c.counts.gets_by_folder();
        let lists_before = c.counts.lists_by_folder();
        let started = Instant::now();
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
            .await?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = process_cpu_secs() - cpu_before;
        let after = snapshot_all(&c.counts);
        let per_granule_by_folder =
            |after: std::collections::BTreeMap<String, u64>,
             before: &std::collections::BTreeMap<String, u64>| {
                after
                    .into_iter()
                    .map(|(folder, count)| {
                        let before = before.get(&folder).copied().unwrap_or(0);
                        (folder, (count - before) as f64 / n as f64)
                    })
                    .collect::<std::collections::BTreeMap<String, f64>>()
            };
        let puts_by_folder = per_granule_by_folder(c.counts.puts_by_folder(), &puts_before);
        let gets_by_folder = per_granule_by_folder(c.counts.gets_by_folder(), &gets_before);
        let lists_by_folder = per_granule_by_folder(c.counts.lists_by_folder(), &lists_before);
        let per_function = |count: fn(&RequestCounts) -> u64| {
            by_function
                .iter()
                .map(|(f, counts)| (f.clone(), count(counts) as f64 / n as f64))
                .collect::<std::collections::BTreeMap<String, f64>>()
        };
        let mut gets_by_function = per_function(|c| c.s3_get.load(Ordering::Relaxed));
        let mut puts_by_function = per_function(|c| c.s3_put.load(Ordering::Relaxed));
        let d = |i: usize| (after[i] - before[i]) as f64 / n as f64;
        let (get, put, list, copy, delete, sqs) = (d(0), d(1), d(2), d(3), d(4), d(5));
        // What no function made: the simulated array children reading their window claim, as
        // a processing container does.
        for (by_function, total) in [(&mut gets_by_function, get), (&mut puts_by_function, put)] {
            let other = total - by_function.values().sum::<f64>();
            by_function.insert("other".to_owned(), other.max(0.0));
        }
        let p = &c.runtime.progress;
        let invocations =
            (p.feeder_runs + p.monitor_invocations + p.requeuer_invocations) as f64 / n as f64;
        // Lambda time ≈ the time the runner spent inside each handler (against the emulator).
        let handler_secs =
            (p.feeder_time + p.monitor_time + p.requeuer_time).as_secs_f64() / n as f64;
        let gb_s = handler_secs * prices::LAMBDA_MEMORY_GB;
        let batch = d(6);
        let submits = after[7] - before[7];
        let per_granule = invocations * prices::LAMBDA_REQUEST
            + gb_s * prices::LAMBDA_GB_SECOND
            + (put + list + copy) * prices::S3_PUT
            + get * prices::S3_GET
            + sqs * prices::SQS_REQUEST;
        // After the counts are taken: the accounting's own LISTs are not the campaign's.
        let summary = c.summarize(Duration::from_secs_f64(wall)).await?;
        let figures = CampaignFigures {
            granules: n,
            ports: if in_memory { "in-memory" } else { "emulator" },
            item_records: c.runtime.ctx.config.layout.track_items,
            array_windows: c.runtime.ctx.config.feeder.array_windows,
            array_retries: c
                .runtime
                .ctx
                .config
                .jobs
                .as_ref()
                .is_some_and(|j| j.array_retries),
            parallel: o.parallel,
            submit_limit_per_sec: submit_limit,
            submit_job_calls: submits,
            submit_job_calls_per_granule: submits as f64 / n as f64,
            array_jobs: c.runtime.simulator.stats.arrays,
            feeder_interval_ms,
            granule_submit_count,
            reconcile_after_secs: o.reconcile_after_secs,
            faults: if o.faultless { "none" } else { "default" },
            reconciled: c.runtime.progress.reconciled,
            wall_secs: wall,
            granules_per_sec: n as f64 / wall,
            cpu_secs: cpu,
            succeeded: summary.succeeded,
            dead_lettered: summary.dead_lettered,
            unaccounted: summary.unaccounted,
            ended_twice: summary.ended_twice,
            s3_get_per_granule: get,
            s3_put_per_granule: put,
            s3_put_per_granule_by_folder: puts_by_folder,
            s3_get_per_granule_by_folder: gets_by_folder,
            s3_get_per_granule_by_function: gets_by_function,
            s3_put_per_granule_by_function: puts_by_function,
            s3_list_per_granule: list,
            s3_list_per_granule_by_folder: lists_by_folder,
            s3_copy_per_granule: copy,
            s3_delete_per_granule: delete,
            s3_requests_per_granule: get + put + list + copy + delete,
            sqs_requests_per_granule: sqs,
            batch_calls_per_granule: batch,
            lambda_invocations_per_granule: invocations,
            lambda_gb_s_per_granule: gb_s,
            dollars_per_million: per_granule * 1e6,
            peak_rss_mib: peak_rss_kib() as f64 / 1024.0,
            scratch_mib: c.scratch_bytes().context("the scratch files' sizes")? as f64
                / (1024.0 * 1024.0),
        };
        if json {
            println!("{}", serde_json::to_string(&figures)?);
        }
        table.add_row([
            n.to_string(),
            if in_memory { "in-memory" } else { "emulator" }.to_owned(),
            if c.runtime.ctx.config.layout.track_items {
                "on"
            } else {
                "off"
            }
            .to_owned(),
            match (o.array_windows, o.array_retries) {
                (true, true) => "arrays, retries too",
                (true, false) => "arrays",
                (false, true) => "single jobs, retries by window",
                (false, false) => "single jobs",
            }
            .to_owned(),
            format!("{:.4}", submits as f64 / n as f64),
            format!("{wall:.0}"),
            format!("{:.1}", n as f64 / wall),
            format!("{get:.2}"),
            format!("{:.2}", put + list + copy),
            format!("{delete:.2}"),
            format!("{sqs:.2}"),
            format!("{batch:.2}"),
            format!("{invocations:.3}"),
            format!("{gb_s:.4}"),
            format!("{:.2}", per_granule * 1e6),
        ]);
        eprintln!(
            "campaign of {n}: {wall:.1} s, {cpu:.1} s of granary-bench CPU ({:.2} ms per granule); feeder {:.1} s, Batch simulator {:.1} s, job-monitor {:.1} s, requeuer {:.1} s; {} jobs swept up at the end",
            cpu * 1000.0 / n as f64,
            p.feeder_time.as_secs_f64(),
            p.simulator_time.as_secs_f64(),
            p.monitor_time.as_secs_f64(),
            p.requeuer_time.as_secs_f64(),
            c.runtime.simulator.stats.swept
        );
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
    }
    if json {
        return Ok(());
    }
    println!(
        "Campaign in the local runtime (requests counted at granary's ports, per granule)\n{table}"
    );
    println!("Prices: Lambda $0.20/M requests + $0.0000133334/GB-s (arm64, 256 MB); S3 $0.005/1k PUT/COPY/LIST, $0.0004/1k GET, DELETE free; SQS $0.40/M; Batch API and Batch events on the default bus cost nothing.");
    Ok(())
}
