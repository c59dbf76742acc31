//! `granary-local chaos`: a campaign on the in-memory twins with everything going wrong at once — the
//! fault plan's Spot kills, pull errors, timeouts and application failures, duplicated and
//! reordered events, RUNNABLE events for the attempts Batch retries, throttled calls, and handler
//! invocations that die at a random external call — then the audit of the promise: nothing lost,
//! nothing submitted twice, nothing succeeded twice, every terminal failure dead-lettered with a
//! reason and a log in S3.

use super::campaign::{peek_all, Campaign, CampaignSpec};
use super::fault_plan::FaultPlan;
use super::runner::ChaosOptions;
use anyhow::{Context, Result};
use granary::domain::classify::Route;
use granary::domain::granule::GranuleProcessingEvent;
use granary::domain::layout::logs::{LogKey, LogOutcome};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
        self.unaccounted == 0
            && self.duplicate_submissions == 0
            && self.duplicate_successes == 0
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

/// Checks the invariants on a settled campaign.
pub async fn audit(campaign: &Campaign, wall: Duration) -> Result<ChaosReport> {
    let summary = campaign.summarize(wall).await?;
    let ctx = &campaign.runtime.ctx;
    let mut examples: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut note = |what: &str, example: String| {
        let list = examples.entry(what.to_owned()).or_default();
        if list.len() < 5 {
            list.push(example);
        }
    };

    let twice = campaign
        .in_memory_batch
        .as_ref()
        .map(|b| b.names_submitted_twice())
        .unwrap_or_default();
    for name in &twice {
        note("duplicate_submissions", name.clone());
    }

    // This campaign's jobs (the runtime's context names it); another's are its own audit.
    let planned: Vec<&crate::simulator::PlannedJob> = campaign
        .runtime
        .simulator
        .planned
        .iter()
        .filter(|j| j.of_campaign(ctx.campaign()))
        .collect();
    let mut successes: BTreeMap<&str, u32> = BTreeMap::new();
    for job in &planned {
        if job.route == Route::Done {
            *successes.entry(job.granule_id.as_str()).or_default() += 1;
        }
    }
    let succeeded_twice: Vec<&str> = successes
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(g, _)| *g)
        .collect();
    for g in &succeeded_twice {
        note("duplicate_successes", (*g).to_owned());
    }

    // Every dead-lettered granule has its failure logged in S3, and every DLQ message a reason.
    let prefix = &ctx.config.layout.log_prefix;
    let mut failing: BTreeSet<String> = BTreeSet::new();
    let mut logs_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for meta in ctx.store.list(prefix).await? {
        if let Ok(k) = LogKey::parse(prefix, &meta.key) {
            logs_of
                .entry(k.granule_id.to_string())
                .or_default()
                .push(meta.key.trim_start_matches(prefix.as_str()).to_owned());
            if k.outcome == LogOutcome::Failure {
                failing.insert(k.granule_id.to_string());
            }
        }
    }
    let dlq: Vec<_> = if summary.dlq.is_empty() {
        peek_all(ctx.failure_dlq.as_ref()).await?
    } else {
        summary.dlq.clone()
    }
    .into_iter()
    .filter(|m| crate::campaign::dlq_message_of(ctx.campaign(), &m.body))
    .collect();
    let mut without_record = 0u64;
    let mut dead: BTreeSet<String> = BTreeSet::new();
    // Each (granule, attempt) dead-lettered: the reason of its first dead letter, and its copies.
    let mut reasons: BTreeMap<(String, u32), String> = BTreeMap::new();
    let (mut copies, mut disagreeing) = (0u64, 0u64);
    for m in &dlq {
        let reason = m.attributes.get("reason").map(String::as_str).unwrap_or("");
        let granule = serde_json::from_str::<GranuleProcessingEvent>(&m.body).ok();
        let succeeded_at = granule.as_ref().and_then(|e| {
            planned
                .iter()
                .filter(|j| j.route == Route::Done && j.granule_id == e.granule_id.as_str())
                .map(|j| j.attempt)
                .max()
        });
        if crate::campaign::is_stale_parked_retry(m, succeeded_at) {
            note("stale_parked_retries", m.body.clone());
            continue;
        }
        // A retry message SQS moved here after maxReceiveCount keeps the monitor's attributes
        // (RETRYABLE, the failure's reason): not one of granary's dead letters, so not compared
        // with the requeuer's "attempts exhausted" for the same attempt.
        let parked_by_sqs = crate::campaign::parked_by_sqs(m);
        if let Some(e) = &granule {
            dead.insert(e.granule_id.to_string());
        }
        if let Some(e) = granule.as_ref().filter(|_| !parked_by_sqs) {
            match reasons.entry((e.granule_id.to_string(), e.attempt)) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(reason.to_owned());
                }
                std::collections::btree_map::Entry::Occupied(first) if first.get() == reason => {
                    copies += 1;
                }
                std::collections::btree_map::Entry::Occupied(first) => {
                    disagreeing += 1;
                    note(
                        "dead_letters_disagreeing",
                        format!(
                            "{} attempt {}: {:?}, then {reason:?}",
                            e.granule_id,
                            e.attempt,
                            first.get()
                        ),
                    );
                }
            }
        }
        let logged = granule
            .as_ref()
            .is_none_or(|e| failing.contains(e.granule_id.as_str()));
        if reason.is_empty() || !logged {
            without_record += 1;
            // The whole story of the granule, so a failure in CI can be read without a rerun.
            let story = granule.as_ref().map_or_else(String::new, |e| {
                let jobs: Vec<String> = planned
                    .iter()
                    .filter(|j| j.granule_id == e.granule_id.as_str())
                    .map(|j| {
                        format!(
                            "{} attempt {} {:?} ({})",
                            j.job_id, j.attempt, j.route, j.reason
                        )
                    })
                    .collect();
                let logs = logs_of.get(e.granule_id.as_str());
                format!(" planned: {jobs:?} logs: {logs:?}")
            });
            note(
                "failures_without_record",
                format!(
                    "{} reason={reason:?} attributes={:?}{story}",
                    m.body, m.attributes
                ),
            );
        }
    }
    for g in campaign
        .granules
        .iter()
        .filter(|g| !dead.contains(g) && !successes.contains_key(g.as_str()))
    {
        note("unaccounted", g);
    }

    // Nothing is left for the reconciler: every end was handled, every window closed.
    let open = ctx.store.list(&ctx.config.layout.open_claim_prefix).await?;
    for m in open.iter().take(5) {
        note("open_claims_left", m.key.clone());
    }
    // Nothing is left parked, and the windows of retries are counted.
    let layout = &ctx.config.layout;
    let parked = ctx
        .store
        .list(&granary::domain::layout::claims::parked_prefix(
            &layout.claim_prefix,
        ))
        .await?;
    for m in parked.iter().take(5) {
        note("parked_retries_left", m.key.clone());
    }
    let retry_windows = ctx
        .store
        .list(
            &granary::domain::layout::claims::window_key(
                &layout.claim_prefix,
                granary::domain::window::RETRY_WINDOWS,
                0,
            )
            .replace("start=000000000000.json", ""),
        )
        .await?
        .len() as u64;
    // Each granule's record agrees with its outcome, and its history with its record.
    let records = if ctx.config.layout.track_items {
        audit_records(ctx, &campaign.granules, &successes, &dead, &mut note).await?
    } else {
        RecordAudit::default()
    };

    let p = &campaign.runtime.progress;
    let faults = &campaign.runtime.faults;
    let sim = &campaign.runtime.simulator.stats;
    Ok(ChaosReport {
        granules: summary.granules,
        succeeded: summary.succeeded,
        dead_lettered: summary.dead_lettered,
        unaccounted: summary.unaccounted,
        duplicate_submissions: twice.len() as u64,
        duplicate_successes: succeeded_twice.len() as u64,
        failures_without_record: without_record,
        dead_letter_copies: copies,
        dead_letters_disagreeing: disagreeing,
        stale_parked_retries: summary.stale_parked_retries,
        open_claims_left: open.len() as u64,
        parked_retries_left: parked.len() as u64,
        retry_windows,
        records_disagreeing: records.disagreeing,
        history_entries_wrong: records.history_wrong,
        history_entries_missing: records.history_missing,
        crashes_injected: faults.crashes.load(Ordering::Relaxed),
        throttles_injected: faults.throttles.load(Ordering::Relaxed),
        events_lost: sim.lost,
        ends_reconciled: p.reconciled,
        external_calls: faults.calls.load(Ordering::Relaxed),
        calls_per_granule: faults.calls.load(Ordering::Relaxed) as f64
            / summary.granules.max(1) as f64,
        calls_by_function: campaign
            .runtime
            .calls_by_function()
            .into_iter()
            .map(|(f, n)| (format!("{f:?}"), n))
            .collect(),
        calls_by_op: campaign
            .runtime
            .calls_by_function_and_op()
            .into_iter()
            .map(|((f, op), n)| (format!("{f:?} {op:?}"), n))
            .collect(),
        handler_invocations: p.feeder_runs
            + p.monitor_invocations
            + p.requeuer_invocations
            + p.reconciler_runs,
        feeder_errors: p.feeder_errors,
        batch_jobs: sim.jobs,
        batch_internal_retries: sim.batch_internal_retries,
        events_emitted: sim.events,
        duplicate_events: sim.duplicates,
        delayed_events: sim.delayed,
        wall_secs: wall.as_secs_f64(),
        examples,
    })
}

#[derive(Debug, Default)]
struct RecordAudit {
    disagreeing: u64,
    history_wrong: u64,
    history_missing: u64,
}

/// Reads every item record and every history entry once (batch objects' lines and entries of
/// their own), then checks each granule: a record exists; PROCESSED if it succeeded, in a failed
/// state (PROCESSING_FAILED or ABANDONED) if it was dead-lettered; its history has each sequence
/// number at most once and none past the record's; which of 0..=seq have no entry.
async fn audit_records(
    ctx: &granary::handlers::Ctx,
    granules: &crate::granule_list::GranuleList,
    successes: &BTreeMap<&str, u32>,
    dead: &BTreeSet<String>,
    note: &mut impl FnMut(&str, String),
) -> Result<RecordAudit> {
    use granary::domain::item::{HistoryEntry, ItemQuery};
    use granary::domain::layout::items::is_batch_history_key;
    use granary::domain::lifecycle::ItemState;
    let records: BTreeMap<String, granary::domain::item::ItemRecord> = ctx
        .items()
        .find(&ItemQuery::default())
        .await?
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let mut seqs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for meta in ctx
        .store
        .list(&ctx.config.layout.item_prefixes.history)
        .await?
    {
        let Some(object) = ctx.store.get(&meta.key).await? else {
            continue;
        };
        let batch = is_batch_history_key(&meta.key);
        let lines: Vec<&[u8]> = if batch {
            object.body.split(|b| *b == b'\n').collect()
        } else {
            vec![&object.body[..]]
        };
        for line in lines.into_iter().filter(|l| !l.is_empty()) {
            let entry: HistoryEntry = serde_json::from_slice(line)
                .with_context(|| format!("history entry in {}", meta.key))?;
            // As `Items::history` reads them: a batch object's lines count for the records
            // that name it (lines written for a record the batch then failed to make, which the
            // one-by-one path made instead, are not that record's history).
            let named = records
                .get(entry.item_id.as_str())
                .and_then(|r| r.history_batch.as_ref())
                .is_some_and(|b| b.keys.contains(&meta.key));
            if batch && !named {
                continue;
            }
            seqs.entry(entry.item_id.to_string())
                .or_default()
                .push(entry.seq);
        }
    }
    let mut out = RecordAudit::default();
    for g in granules.iter() {
        let g = g.as_str();
        let Some(record) = records.get(g) else {
            out.disagreeing += 1;
            note("records_disagreeing", format!("{g}: no item record"));
            continue;
        };
        let agrees = if successes.contains_key(g) {
            record.state == ItemState::Processed
        } else if dead.contains(g) {
            matches!(
                record.state,
                ItemState::ProcessingFailed | ItemState::Abandoned
            )
        } else {
            true
        };
        if !agrees {
            out.disagreeing += 1;
            note(
                "records_disagreeing",
                format!(
                    "{g}: {} ({}) at seq {}, last written by {} at {}; succeeded: {}, dead-lettered: {}",
                    record.state,
                    record.reason,
                    record.seq,
                    record.updated_by,
                    record.last_updated.to_rfc3339(),
                    successes.contains_key(g),
                    dead.contains(g),
                ),
            );
        }
        let mut have = seqs.remove(g).unwrap_or_default();
        // The entries the record holds (its latest write's) and no object has yet, as
        // `Items::history` reads them.
        if !record.in_batch_state() {
            for held in HistoryEntry::held_by(record) {
                if !have.contains(&held.seq) {
                    have.push(held.seq);
                }
            }
        }
        have.sort_unstable();
        let total = have.len();
        have.dedup();
        let twice = (total - have.len()) as u64;
        let past = have.iter().filter(|s| **s > record.seq).count() as u64;
        if twice + past > 0 {
            out.history_wrong += twice + past;
            note(
                "history_entries_wrong",
                format!("{g}: {have:?} at seq {}", record.seq),
            );
        }
        let missing = (0..=record.seq)
            .filter(|s| have.binary_search(s).is_err())
            .count() as u64;
        if missing > 0 {
            out.history_missing += missing;
            note(
                "history_entries_missing",
                format!("{g}: has {have:?}, record at seq {}", record.seq),
            );
        }
    }
    Ok(out)
}
