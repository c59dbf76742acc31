//! Array-job windows on the in-memory campaign, with Batch's SubmitJob quota enforced (50 calls a
//! second): the same granules and the same fault plan in single-job mode and in array mode. Each
//! granule ends once — succeeded or dead-lettered, its record and history agreeing — in both;
//! array mode submits a window as one call.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::ports::{
    ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary,
};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::chaos;
use granary_local::fault_plan::FaultPlan;
use granary_local::simulate::on_the_virtual_clock;
use std::time::{Duration, Instant};

struct Run {
    report: chaos::ChaosReport,
    accepted: u64,
    arrays: u64,
    refused: u64,
}

async fn run(array: bool, plan: FaultPlan) -> Run {
    run_with(array, plan, &[], false).await
}

/// `run`, with more settings and the runner's invocations side by side or not.
async fn run_with(array: bool, plan: FaultPlan, more: &[(&str, &str)], parallel: bool) -> Run {
    let mut env = vec![("GRANARY_SUBMIT_JOB_RATE".to_owned(), "40".to_owned())];
    if array {
        env.push(("GRANARY_ARRAY_WINDOWS".to_owned(), "true".to_owned()));
    }
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut spec = CampaignSpec {
        granules: 600,
        inventories: 2,
        submit_limit: Some(50),
        plan,
        env,
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 150;
    spec.runner.feeder_interval = Duration::from_millis(20);
    spec.runner.deadline = Duration::from_secs(300);
    spec.runner.parallel = parallel;
    let mut campaign = Campaign::in_memory(&spec).await.unwrap();
    let started = Instant::now();
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let report = chaos::audit(&campaign, started.elapsed()).await.unwrap();
    let batch = campaign.in_memory_batch.as_ref().unwrap();
    Run {
        report,
        accepted: batch.accepted_submits(),
        arrays: batch.array_jobs(),
        refused: batch.refused_submits(),
    }
}

fn assert_whole(name: &str, r: &chaos::ChaosReport) {
    assert_eq!(r.granules, 600, "{name}");
    assert_eq!(r.unaccounted, 0, "{name}: {r:?}");
    assert_eq!(r.succeeded + r.dead_lettered, r.granules, "{name}: {r:?}");
    assert_eq!(r.duplicate_submissions, 0, "{name}: {r:?}");
    assert_eq!(r.duplicate_successes, 0, "{name}: {r:?}");
    assert_eq!(r.failures_without_record, 0, "{name}: {r:?}");
    assert_eq!(r.open_claims_left, 0, "{name}: {r:?}");
    assert_eq!(r.records_disagreeing, 0, "{name}: {r:?}");
    assert_eq!(r.history_entries_missing, 0, "{name}: {r:?}");
    assert_eq!(r.history_entries_wrong, 0, "{name}: {r:?}");
}

/// Both runs end every granule once, each granule with the same fate in both, and the plan
/// fails some.
fn assert_same_ends((a_name, a): (&str, &Run), (b_name, b): (&str, &Run)) {
    assert_whole(a_name, &a.report);
    assert_whole(b_name, &b.report);
    assert_eq!(
        (a.report.succeeded, a.report.dead_lettered),
        (b.report.succeeded, b.report.dead_lettered),
        "{a_name} and {b_name}"
    );
    assert!(b.report.dead_lettered > 0, "the plan fails some granules");
}

/// On the virtual clock (`simulate::on_the_virtual_clock`): the
/// schedules, pacing and Batch's times are simulated seconds (on the wall the test took 17 s).
#[test]
fn array_windows_end_every_granule_as_single_jobs_do_with_a_call_per_window() {
    let ran = on_the_virtual_clock(1, async {
        let plan = FaultPlan::default();
        let single = run(false, plan.clone()).await;
        let array = run(true, plan).await;
        // The same plan gives each granule the same fate in either mode.
        assert_same_ends(("single", &single), ("array", &array));
        // First attempts: 4 windows of 150 rows, each one array. Later attempts are single jobs.
        assert_eq!(array.arrays, 4, "one array per window");
        let retries = single.accepted - 600;
        assert_eq!(array.accepted, 4 + retries, "{} calls", array.accepted);
        assert_eq!(
            (single.refused, array.refused),
            (0, 0),
            "paced under the quota"
        );
        Ok(())
    });
    ran.unwrap();
}

/// A plan that loses 5% of child events, duplicates 20% and delays 30%.
fn noisy_child_events() -> FaultPlan {
    FaultPlan {
        lost_rate: 0.05,
        duplicate_rate: 0.2,
        delay_rate: 0.3,
        ..FaultPlan::default()
    }
}

/// Lost, duplicated and delayed child events: the reconciler describes the children it never
/// heard from, and the monitor takes each child's end once however often it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_duplicated_and_reordered_child_events_are_reconciled() {
    let plan = noisy_child_events();
    let array = run(true, plan).await;
    assert_whole("array", &array.report);
    assert!(array.report.events_lost > 0, "{:?}", array.report);
    assert_eq!(
        array.report.ends_reconciled, array.report.events_lost,
        "every lost end was found by DescribeJobs: {:?}",
        array.report
    );
}

/// The runner's invocations side by side on both worker threads (how the bench uses every core):
/// feeder runs overlap the monitor's and the requeuer's, retries are parked and taken by windows
/// of retries, child events are lost, duplicated and reordered. Each granule still ends once, with
/// the fate it has when the invocations run one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_side_by_side_end_every_granule_once_with_the_same_fates() {
    let plan = noisy_child_events();
    let retries = [("GRANARY_ARRAY_RETRIES", "true")];
    let serial = run_with(true, plan.clone(), &retries, false).await;
    let parallel = run_with(true, plan, &retries, true).await;
    assert_same_ends(("serial", &serial), ("parallel", &parallel));
    assert!(parallel.report.holds(), "{:?}", parallel.report);
    assert_eq!(parallel.refused, 0, "paced under the quota");
}

/// Batch whose ListJobs takes `delay` (as moto's does thousands of jobs deep): a feeder run then
/// outlasts the runner's round.
struct SlowListing {
    inner: std::sync::Arc<dyn JobRunner>,
    delay: Duration,
}

#[async_trait::async_trait]
impl JobRunner for SlowListing {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        self.inner.submit(request).await
    }
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        tokio::time::sleep(self.delay).await;
        self.inner.count_active(stop_at).await
    }
    async fn find_by_name(&self, name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        self.inner.find_by_name(name).await
    }
    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError> {
        self.inner.terminate(job_id, reason).await
    }
    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        self.inner.describe(job_id).await
    }
    async fn describe_many(&self, ids: &[String]) -> Result<Vec<JobDescription>, JobRunnerError> {
        self.inner.describe_many(ids).await
    }
}

/// With the invocations side by side, a campaign whose feeder runs each take longer than the
/// runner's round settles once its work is done. Each round after a run ended started the next,
/// and a round with a run under way was not quiet: a 2,500-granule campaign on moto finished
/// every granule and was then reported stalled after five minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_feeder_runs_outlast_a_round_settles() {
    let mut spec = CampaignSpec {
        granules: 100,
        env: vec![("GRANARY_ARRAY_WINDOWS".to_owned(), "true".to_owned())],
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 50;
    spec.runner.feeder_interval = Duration::from_millis(20);
    spec.runner.parallel = true;
    spec.runner.stall_limit = Duration::from_secs(20);
    spec.runner.deadline = Duration::from_secs(120);
    let mut campaign = Campaign::in_memory(&spec).await.unwrap();
    campaign.runtime.ctx.jobs = std::sync::Arc::new(SlowListing {
        inner: campaign.runtime.ctx.jobs.clone(),
        delay: Duration::from_millis(300),
    });
    let started = Instant::now();
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let report = chaos::audit(&campaign, started.elapsed()).await.unwrap();
    assert_eq!(report.unaccounted, 0, "{report:?}");
    assert_eq!(report.succeeded + report.dead_lettered, 100, "{report:?}");
}
