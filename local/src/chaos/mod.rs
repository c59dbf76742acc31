//! `granary-local chaos`: a campaign on the in-memory twins with everything going wrong at once — the
//! fault plan's Spot kills, pull errors, timeouts and application failures, duplicated and
//! reordered events, RUNNABLE events for the attempts Batch retries, throttled calls, and handler
//! invocations that die at a random external call — then the audit of the promise: nothing lost,
//! nothing submitted twice, nothing succeeded twice, every terminal failure dead-lettered with a
//! reason and a log in S3.

use super::campaign::{Campaign, CampaignSpec};
use super::fault_plan::FaultPlan;
use super::runner::ChaosOptions;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod audit;
mod records;

pub use audit::audit;

#[derive(Debug, Clone)]
pub struct ChaosSpec {
    pub granules: usize,
    pub seed: u64,
    pub chaos: ChaosOptions,
    pub granule_submit_count: u64,
    pub feeder_interval: Duration,
    /// Share of final Batch events never delivered (the reconciler must find those ends).
    pub lost_rate: f64,
    /// How long after SubmitJob the Batch twin's ListJobs shows a job.
    pub listing_lag: Duration,
    /// More of granary's configuration for the campaign (array windows, array retries, …).
    pub env: Vec<(String, String)>,
}

impl Default for ChaosSpec {
    fn default() -> Self {
        Self {
            granules: 10_000,
            seed: 42,
            chaos: ChaosOptions::default(),
            granule_submit_count: 500,
            feeder_interval: Duration::from_millis(50),
            lost_rate: 0.01,
            // Well below the campaign's 1 s claim lease, as ListJobs's lag is below the 16 min one.
            listing_lag: Duration::from_millis(250),
            env: Vec::new(),
        }
    }
}

/// What a chaos run did and whether the promise held.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub granules: u64,
    pub succeeded: u64,
    pub dead_lettered: u64,
    /// Granules neither succeeded nor dead-lettered. Must be 0.
    pub unaccounted: u64,
    /// (granule, attempt) pairs for which Batch ran more than one job. Must be 0.
    pub duplicate_submissions: u64,
    /// Granules with more than one successful job. Must be 0.
    pub duplicate_successes: u64,
    /// Dead-lettered granules with no failure log in S3, or DLQ messages without a reason. Must be 0.
    pub failures_without_record: u64,
    /// Dead letters sent again for a (granule, attempt) already on the DLQ: a crash (or a write
    /// refused past its retries) between a dead letter's send and the write that marks it sent
    /// makes the redelivery send a copy (the
    /// DLQ is at least once, as SQS standard queues are). Reported, allowed: a redriven copy finds
    /// its attempt claimed and submits nothing.
    pub dead_letter_copies: u64,
    /// (granule, attempt) pairs dead-lettered for two different reasons: two outcomes of one
    /// attempt, not a copy. Must be 0.
    pub dead_letters_disagreeing: u64,
    /// Retry messages SQS parked on the failure DLQ after maxReceiveCount failed receives, for
    /// granules another copy then carried to success: reported, allowed (not a final failure).
    pub stale_parked_retries: u64,
    /// Markers left in the open-claims index once the campaign settled (an end nobody handled,
    /// or a window nobody closed). Must be 0.
    pub open_claims_left: u64,
    /// Retries still parked for a window of retries once the campaign settled. Must be 0.
    pub parked_retries_left: u64,
    /// Windows of parked retries the feeder claimed (`GRANARY_ARRAY_RETRIES`).
    pub retry_windows: u64,
    /// Granules whose item record is missing or disagrees with their outcome (a success not
    /// PROCESSED, a dead-lettered granule not in a failed state). Must be 0 with item records on.
    pub records_disagreeing: u64,
    /// History entries written twice, or past the record's own sequence. Must be 0.
    pub history_entries_wrong: u64,
    /// Transitions of a record (by sequence number) with no history entry. Must be 0: a record
    /// names the entries its write owes, and the next writer pays them (README, "Item history
    /// after a crash").
    pub history_entries_missing: u64,
    pub crashes_injected: u64,
    pub throttles_injected: u64,
    /// Final events the fault plan never delivered, and the job ends the reconciler found.
    pub events_lost: u64,
    pub ends_reconciled: u64,
    pub external_calls: u64,
    /// External calls per granule of the campaign: granary's cost, and what throttling adds to it.
    pub calls_per_granule: f64,
    /// Where the calls went, by function and by operation.
    pub calls_by_function: BTreeMap<String, u64>,
    pub calls_by_op: BTreeMap<String, u64>,
    pub handler_invocations: u64,
    pub feeder_errors: u64,
    pub batch_jobs: u64,
    pub batch_internal_retries: u64,
    pub events_emitted: u64,
    pub duplicate_events: u64,
    pub delayed_events: u64,
    pub wall_secs: f64,
    /// The first few offenders of each invariant, to start an investigation from.
    pub examples: BTreeMap<String, Vec<String>>,
}

impl ChaosReport {
    /// Whether every invariant held.
    pub fn holds(&self) -> bool {
        self.duplicate_submissions == 0 && self.duplicate_successes == 0 && self.nothing_lost()
    }

    /// Every invariant but "nothing submitted twice": what must still hold when Batch's ListJobs
    /// lags past the claim lease, where a takeover's lookup by name may miss a job and submit
    /// it again (counted, never a loss). A job submitted twice runs twice, and both runs may
    /// succeed (`duplicate_successes`): the granule's one success log and record still stand.
    pub fn nothing_lost(&self) -> bool {
        self.unaccounted == 0
            && self.failures_without_record == 0
            && self.dead_letters_disagreeing == 0
            && self.open_claims_left == 0
            && self.parked_retries_left == 0
            && self.records_disagreeing == 0
            && self.history_entries_wrong == 0
            && self.history_entries_missing == 0
    }
}

/// The campaign a chaos run drives: short leases and visibility timeouts (the runtime's clock is
/// real), every event noise the fault plan knows turned on.
pub fn campaign_spec(spec: &ChaosSpec) -> CampaignSpec {
    let mut c = CampaignSpec {
        granules: spec.granules,
        plan: FaultPlan {
            seed: spec.seed,
            intermediate_events: true,
            duplicate_rate: 0.05,
            delay_rate: 0.05,
            timeout_rate: 0.01,
            lost_rate: spec.lost_rate,
            ..FaultPlan::default()
        },
        env: vec![
            ("GRANARY_CLAIM_LEASE_SECS".into(), "1".into()),
            ("GRANARY_ROUTE_LEASE_SECS".into(), "1".into()),
            ("GRANARY_RECONCILE_AFTER_SECS".into(), "1".into()),
        ],
        ..CampaignSpec::default()
    };
    c.env.extend(spec.env.iter().cloned());
    c.listing_lag = spec.listing_lag;
    c.runner.visibility_timeout_secs = 1;
    c.runner.granule_submit_count = spec.granule_submit_count;
    c.runner.feeder_interval = spec.feeder_interval;
    c.runner.deadline = Duration::from_secs(7_200);
    // A campaign that stops moving says what is still open, rather than wait for the deadline.
    c.runner.stall_limit = Duration::from_secs(120);
    c.runner.chaos = Some(ChaosOptions {
        seed: spec.seed,
        ..spec.chaos.clone()
    });
    c
}

pub async fn run(
    spec: &ChaosSpec,
    on_progress: impl FnMut(&super::runner::Progress),
) -> Result<ChaosReport> {
    let mut campaign = Campaign::in_memory(&campaign_spec(spec)).await?;
    let started = Instant::now();
    campaign
        .runtime
        .run_to_quiescence(on_progress)
        .await
        .context("the chaos campaign did not settle")?;
    audit(&campaign, started.elapsed()).await
}
