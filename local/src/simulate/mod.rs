//! `granary-local simulate`: the chaos campaign on one virtual clock. The whole stack runs on a
//! paused tokio runtime (`granary::clock`), so the deployed timings hold — the 16-minute claim
//! lease, the queues' 6-minute visibility timeouts, the feeder's and the sweeper's schedules,
//! each function's timeout — and a campaign of simulated hours runs in CPU seconds. An
//! invocation that outlives its function's timeout is dropped mid-await, as Lambda ends it
//! (`runner::FunctionTimeouts`). One seed replays one run: the inventory, the fault plan, the
//! crashes, the throttling and every time.

pub mod archive;
pub mod crasher;
pub mod ingest;
mod ingest_audit;
mod ingest_platform;
mod ingest_world;
pub mod operator;

use super::chaos::{self, ChaosReport, ChaosSpec};
use super::fault_plan::BatchTiming;
use super::runner::ChaosOptions;
use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::time::Duration;

/// What a simulation runs.
#[derive(Debug, Clone)]
pub struct SimSpec {
    pub seed: u64,
    pub granules: usize,
    /// How long after SubmitJob the Batch twin's ListJobs shows a job.
    pub listing_lag: Duration,
    /// More of granary's configuration (array windows, leases, ...).
    pub env: Vec<(String, String)>,
    /// The functions' timeouts (the template's unless a run asks for shorter ones, to see
    /// invocations dropped mid-await).
    pub timeouts: super::runner::FunctionTimeouts,
    /// Share of handler invocations that die at a random external call.
    pub crash_rate: f64,
    /// How long Batch's jobs take and their events travel: a Spot queue's times by default,
    /// every job ending at once with `BatchTiming::instant`.
    pub timing: BatchTiming,
    /// An operator cancels every open attempt half an hour in and resumes them an hour later,
    /// then switches the stack to a second campaign and back (`operator::run_with_a_cancel`).
    pub operator: bool,
    /// Files the importer finds at its source, discovered on the template's hourly schedule;
    /// every other one is listed in an inventory too (`CampaignSpec::imported_files`). 0: no
    /// importer.
    pub imported_files: usize,
}

impl Default for SimSpec {
    fn default() -> Self {
        Self {
            seed: 1,
            granules: 2_000,
            listing_lag: Duration::from_secs(30),
            env: Vec::new(),
            timeouts: super::runner::FunctionTimeouts::default(),
            crash_rate: ChaosOptions::default().crash_rate,
            timing: BatchTiming::spot_queue(),
            operator: true,
            imported_files: DEFAULT_IMPORTED_FILES,
        }
    }
}

/// A simulation's report: the chaos audit, the simulated time it covered and the CPU it took.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub seed: u64,
    /// Simulated seconds from the first feeder run to the campaign's settling.
    pub simulated_secs: f64,
    /// Wall seconds the simulation took (one thread: its CPU time).
    pub wall_secs: f64,
    /// Simulated hours per wall second.
    pub simulated_hours_per_second: f64,
    /// Invocations dropped at their function's timeout.
    pub timed_out_invocations: u64,
    /// The command that replays this run.
    pub replay: String,
    /// ListJobs's lag was past the claim lease: a takeover may submit a job twice (allowed).
    pub lag_past_the_lease: bool,
    /// Jobs the job queue's watchdog cancelled after waiting past its limit for Spot capacity.
    pub capacity_cancels: u64,
    /// The operator's cancel and resumes (`operator::run_with_a_cancel`).
    pub operator: operator::OperatorReport,
    pub audit: ChaosReport,
}

impl SimReport {
    /// Whether the promise held, in the first campaign and the operator's second: nothing
    /// lost, nothing twice; past the lease, nothing lost.
    pub fn holds(&self) -> bool {
        let held = |a: &ChaosReport| {
            if self.lag_past_the_lease {
                a.nothing_lost()
            } else {
                a.holds()
            }
        };
        held(&self.audit) && self.operator.second_campaign.as_ref().is_none_or(held)
    }
}

/// The deployed schedules and queues, as the template sets them by default
/// (`local/tests/function_timeouts.rs` compares them): the feeder every
/// `FeederScheduleMinutes`, `GranuleSubmitCount` granules a run; the item sweeper (whose
/// schedule runs the reconciler) every 15 minutes; the retry and events queues' visibility
/// timeout.
pub const FEEDER_EVERY: Duration = Duration::from_secs(3_600);
pub const GRANULE_SUBMIT_COUNT: u64 = 1_000;
pub const SWEEPER_EVERY: Duration = Duration::from_secs(900);
pub const VISIBILITY_TIMEOUT_SECS: u32 = 360;
/// The importer-discover function's schedule (`rate(60 minutes)`).
pub const DISCOVER_EVERY: Duration = Duration::from_secs(3_600);
/// The files a simulation's importer finds unless told otherwise.
pub const DEFAULT_IMPORTED_FILES: usize = 100;

/// Every simulation starts at this instant: a seed's times (and the logs' hive partitions) are
/// the same on every replay.
pub(crate) fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_798_761_600, 0).unwrap_or(DateTime::<Utc>::MIN_UTC)
    // 2027-01-01
}

/// The chaos campaign with the deployed timings: the template's visibility timeouts and
/// schedules, granary's default leases (none shortened, as the real-time chaos run must).
fn chaos_spec(spec: &SimSpec) -> ChaosSpec {
    ChaosSpec {
        granules: spec.granules,
        seed: spec.seed,
        chaos: ChaosOptions {
            seed: spec.seed,
            crash_rate: spec.crash_rate,
            ..ChaosOptions::default()
        },
        granule_submit_count: GRANULE_SUBMIT_COUNT,
        feeder_interval: FEEDER_EVERY,
        listing_lag: spec.listing_lag,
        env: spec.env.clone(),
        ..ChaosSpec::default()
    }
}

/// Runs `simulation` on a paused current-thread runtime of its own, granary's clock virtual
/// from [`epoch`] and the backoff's jitter the seed's (one simulation a process: the virtual
/// clock is process-wide). Its result, and the wall seconds it took.
pub fn on_the_virtual_clock<T>(
    seed: u64,
    simulation: impl std::future::Future<Output = Result<T>>,
) -> Result<(T, f64)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("building the simulation's runtime")?;
    let started = std::time::Instant::now();
    let out = runtime.block_on(async {
        anyhow::ensure!(
            granary::clock::run_virtually_from(epoch()),
            "a simulation ran in this process already (its clock is process-wide)"
        );
        // Backoff's jitter too is the seed's (`retry::jitter` starts from the wall clock).
        granary::retry::reseed_jitter(seed);
        simulation.await
    })?;
    Ok((out, started.elapsed().as_secs_f64()))
}

/// Runs `spec` on the virtual clock.
pub fn run(spec: &SimSpec) -> Result<SimReport> {
    let started = std::time::Instant::now();
    let ((audit, simulated, timed_out), wall) = on_the_virtual_clock(spec.seed, async {
        let mut campaign_spec = chaos::campaign_spec(&chaos_spec(spec));
        // Deployed timings, in simulated time.
        campaign_spec
            .env
            .retain(|(k, _)| !k.ends_with("_LEASE_SECS") && !k.ends_with("_AFTER_SECS"));
        campaign_spec.runner.visibility_timeout_secs = VISIBILITY_TIMEOUT_SECS;
        campaign_spec.runner.reconcile_interval = SWEEPER_EVERY;
        campaign_spec.runner.deadline = Duration::from_secs(7 * 86_400);
        // A delivery EventBridge retries for up to a day may be the only thing moving.
        campaign_spec.runner.stall_limit = Duration::from_secs(2 * 86_400);
        campaign_spec.plan.timing = spec.timing.clone();
        campaign_spec.runner.timeouts = spec.timeouts;
        campaign_spec.imported_files = spec.imported_files;
        campaign_spec.runner.discover_interval =
            (spec.imported_files > 0).then_some(DISCOVER_EVERY);
        let mut campaign = super::campaign::Campaign::in_memory(&campaign_spec).await?;
        let from = granary::clock::now();
        let operator = if spec.operator {
            operator::run_with_a_cancel(&mut campaign).await
        } else {
            campaign
                .runtime
                .run_to_quiescence(|_| {})
                .await
                .map(|()| operator::OperatorReport::default())
        }
        .with_context(|| format!("seed {}: the campaign did not settle", spec.seed))?;
        let simulated = (granary::clock::now() - from).to_std().unwrap_or_default();
        let timed_out = campaign.runtime.progress.timed_out_invocations;
        let capacity_cancels = campaign.runtime.simulator.stats.capacity_cancels;
        let audit = chaos::audit(&campaign, started.elapsed()).await?;
        Ok::<_, anyhow::Error>((audit, simulated, (timed_out, capacity_cancels, operator)))
    })?;
    let (timed_out, capacity_cancels, operator) = timed_out;
    Ok(SimReport {
        seed: spec.seed,
        simulated_secs: simulated.as_secs_f64(),
        wall_secs: wall,
        simulated_hours_per_second: simulated.as_secs_f64() / 3600.0 / wall.max(1e-9),
        timed_out_invocations: timed_out,
        replay: replay_command(spec),
        lag_past_the_lease: spec.listing_lag >= claim_lease(spec),
        capacity_cancels,
        operator,
        audit,
    })
}

/// The claim lease the simulated stack runs with: granary's default, or the run's own.
fn claim_lease(spec: &SimSpec) -> Duration {
    let secs = spec
        .env
        .iter()
        .find(|(k, _)| k == "GRANARY_CLAIM_LEASE_SECS")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(granary::config::DEFAULT_CLAIM_LEASE_SECS);
    Duration::from_secs(secs)
}

/// The command line that replays `spec`.
pub fn replay_command(spec: &SimSpec) -> String {
    let mut line = format!(
        "granary-local simulate --seed {} --granules {} --listing-lag-secs {}",
        spec.seed,
        spec.granules,
        spec.listing_lag.as_secs()
    );
    for (var, value) in &spec.env {
        line.push_str(&format!(" --env {var}={value}"));
    }
    if spec.crash_rate != ChaosOptions::default().crash_rate {
        line.push_str(&format!(" --crash-rate {}", spec.crash_rate));
    }
    if !spec.timing.takes_time() {
        line.push_str(" --instant-jobs");
    }
    if !spec.operator {
        line.push_str(" --no-operator");
    }
    if spec.imported_files != DEFAULT_IMPORTED_FILES {
        line.push_str(&format!(" --imported-files {}", spec.imported_files));
    }
    let monitor = spec.timeouts.monitor;
    if monitor != super::runner::FunctionTimeouts::default().monitor {
        line.push_str(&format!(" --monitor-timeout-ms {}", monitor.as_millis()));
    }
    line
}
