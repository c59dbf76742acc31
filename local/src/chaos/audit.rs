//! The audit of a settled chaos campaign: every invariant of the promise checked, with the first
//! few offenders of each.

use super::records::{audit_records, RecordAudit};
use super::ChaosReport;
use crate::campaign::{peek_all, Campaign, Summary};
use crate::simulator::PlannedJob;
use anyhow::Result;
use granary::contracts::messages::ItemNotice;
use granary::domain::classify::Route;
use granary::domain::granule::GranuleProcessingEvent;
use granary::domain::layout::logs::{LogKey, LogOutcome};
use granary::handlers::Ctx;
use granary::ports::ReceivedMessage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The first few offenders of each invariant, by invariant.
#[derive(Default)]
struct Examples(BTreeMap<String, Vec<String>>);

impl Examples {
    fn note(&mut self, what: &str, example: String) {
        let list = self.0.entry(what.to_owned()).or_default();
        if list.len() < 5 {
            list.push(example);
        }
    }
}

/// The logs in S3: the granules with a failure logged, and each granule's log keys.
struct Logs {
    failing: BTreeSet<String>,
    of_granule: BTreeMap<String, Vec<String>>,
}

/// What the failure DLQ's messages showed.
#[derive(Default)]
struct DeadLetterAudit {
    without_record: u64,
    /// The granules dead-lettered (stale parked retries aside).
    dead: BTreeSet<String>,
    copies: u64,
    disagreeing: u64,
}

/// What a settled campaign should have left nowhere, and the windows of retries it claimed.
struct Leftovers {
    open_claims: u64,
    parked_retries: u64,
    retry_windows: u64,
}

/// What the audit counted beyond the campaign's summary.
struct Findings {
    duplicate_submissions: u64,
    duplicate_successes: u64,
    dead_letters: DeadLetterAudit,
    leftovers: Leftovers,
    records: RecordAudit,
}

/// Checks the invariants on a settled campaign.
pub async fn audit(campaign: &Campaign, wall: Duration) -> Result<ChaosReport> {
    let summary = campaign.summarize(wall).await?;
    let ctx = &campaign.runtime.ctx;
    let mut examples = Examples::default();

    let twice = campaign
        .in_memory_batch
        .as_ref()
        .map(|b| b.names_submitted_twice())
        .unwrap_or_default();
    for name in &twice {
        examples.note("duplicate_submissions", name.clone());
    }

    // This campaign's jobs (the runtime's context names it); another's are its own audit.
    let planned: Vec<&PlannedJob> = campaign
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
        examples.note("duplicate_successes", (*g).to_owned());
    }

    // Every dead-lettered granule has its failure logged in S3, and every DLQ message a reason.
    let logs = read_logs(ctx).await?;
    let dlq: Vec<_> = if summary.dlq.is_empty() {
        peek_all(ctx.failure_dlq.as_ref()).await?
    } else {
        summary.dlq.clone()
    }
    .into_iter()
    .filter(|m| crate::campaign::dlq_message_of(ctx.campaign(), &m.body))
    .collect();
    let dead_letters = audit_dead_letters(&dlq, &planned, &logs, &mut examples);
    for g in campaign
        .granules
        .iter()
        .filter(|g| !dead_letters.dead.contains(g) && !successes.contains_key(g.as_str()))
    {
        examples.note("unaccounted", where_it_stands(ctx, g).await);
    }

    let leftovers = leftovers(ctx, &mut examples).await?;
    // Each granule's record agrees with its outcome, and its history with its record.
    let records = if ctx.config.layout.track_items {
        let mut note = |what: &str, example: String| examples.note(what, example);
        audit_records(
            ctx,
            &campaign.granules,
            &successes,
            &dead_letters.dead,
            &mut note,
        )
        .await?
    } else {
        RecordAudit::default()
    };
    let findings = Findings {
        duplicate_submissions: twice.len() as u64,
        duplicate_successes: succeeded_twice.len() as u64,
        dead_letters,
        leftovers,
        records,
    };
    Ok(report(campaign, wall, &summary, findings, examples))
}

/// Every log in S3, by granule, and the granules with a failure logged.
async fn read_logs(ctx: &Ctx) -> Result<Logs> {
    let prefix = &ctx.config.layout.log_prefix;
    let mut logs = Logs {
        failing: BTreeSet::new(),
        of_granule: BTreeMap::new(),
    };
    for meta in ctx.store.list(prefix).await? {
        if let Ok(k) = LogKey::parse(prefix, &meta.key) {
            logs.of_granule
                .entry(k.granule_id.to_string())
                .or_default()
                .push(meta.key.trim_start_matches(prefix.as_str()).to_owned());
            if k.outcome == LogOutcome::Failure {
                logs.failing.insert(k.granule_id.to_string());
            }
        }
    }
    Ok(logs)
}

/// Checks the campaign's dead letters: each has a reason and its granule a failure log, and
/// the copies of one (granule, attempt) agree on the reason.
fn audit_dead_letters(
    dlq: &[ReceivedMessage],
    planned: &[&PlannedJob],
    logs: &Logs,
    examples: &mut Examples,
) -> DeadLetterAudit {
    let mut out = DeadLetterAudit::default();
    // Each (granule, attempt) dead-lettered: the reason of its first dead letter, and its copies.
    let mut reasons: BTreeMap<(String, u32), String> = BTreeMap::new();
    for m in dlq {
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
            examples.note("stale_parked_retries", m.body.clone());
            continue;
        }
        // A retry message SQS moved here after maxReceiveCount keeps the monitor's attributes
        // (RETRYABLE, the failure's reason): not one of granary's dead letters, so not compared
        // with the requeuer's "attempts exhausted" for the same attempt.
        let parked_by_sqs = crate::campaign::parked_by_sqs(m);
        if let Some(e) = &granule {
            out.dead.insert(e.granule_id.to_string());
        }
        // An imported file whose downloads were spent (IGNORE) is told with an item notice.
        if let Ok(n) = serde_json::from_str::<ItemNotice>(&m.body) {
            out.dead.insert(n.item_id.to_string());
        }
        if let Some(e) = granule.as_ref().filter(|_| !parked_by_sqs) {
            match reasons.entry((e.granule_id.to_string(), e.attempt)) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(reason.to_owned());
                }
                std::collections::btree_map::Entry::Occupied(first) if first.get() == reason => {
                    out.copies += 1;
                }
                std::collections::btree_map::Entry::Occupied(first) => {
                    out.disagreeing += 1;
                    examples.note(
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
            .is_none_or(|e| logs.failing.contains(e.granule_id.as_str()));
        if reason.is_empty() || !logged {
            out.without_record += 1;
            let story = granule
                .as_ref()
                .map_or_else(String::new, |e| granule_story(e, planned, logs));
            examples.note(
                "failures_without_record",
                format!(
                    "{} reason={reason:?} attributes={:?}{story}",
                    m.body, m.attributes
                ),
            );
        }
    }
    out
}

/// The whole story of a granule, so a failure in CI can be read without a rerun.
fn granule_story(e: &GranuleProcessingEvent, planned: &[&PlannedJob], logs: &Logs) -> String {
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
    let logs = logs.of_granule.get(e.granule_id.as_str());
    format!(" planned: {jobs:?} logs: {logs:?}")
}

/// Nothing is left for the reconciler (every end was handled, every window closed), nothing is
/// left parked, and the windows of retries are counted.
async fn leftovers(ctx: &Ctx, examples: &mut Examples) -> Result<Leftovers> {
    let open = ctx.store.list(&ctx.config.layout.open_claim_prefix).await?;
    for m in open.iter().take(5) {
        examples.note("open_claims_left", m.key.clone());
    }
    let layout = &ctx.config.layout;
    let parked = ctx
        .store
        .list(&granary::domain::layout::claims::parked_prefix(
            &layout.claim_prefix,
        ))
        .await?;
    for m in parked.iter().take(5) {
        examples.note("parked_retries_left", m.key.clone());
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
    Ok(Leftovers {
        open_claims: open.len() as u64,
        parked_retries: parked.len() as u64,
        retry_windows,
    })
}

/// The report of an audited campaign: the summary's figures, the audit's findings and the
/// runtime's counts of faults, calls and invocations.
fn report(
    campaign: &Campaign,
    wall: Duration,
    summary: &Summary,
    findings: Findings,
    examples: Examples,
) -> ChaosReport {
    let p = &campaign.runtime.progress;
    let faults = &campaign.runtime.faults;
    let sim = &campaign.runtime.simulator.stats;
    let Findings {
        duplicate_submissions,
        duplicate_successes,
        dead_letters,
        leftovers,
        records,
    } = findings;
    ChaosReport {
        granules: summary.granules,
        succeeded: summary.succeeded,
        dead_lettered: summary.dead_lettered,
        unaccounted: summary.unaccounted,
        duplicate_submissions,
        duplicate_successes,
        failures_without_record: dead_letters.without_record,
        dead_letter_copies: dead_letters.copies,
        dead_letters_disagreeing: dead_letters.disagreeing,
        stale_parked_retries: summary.stale_parked_retries,
        open_claims_left: leftovers.open_claims,
        parked_retries_left: leftovers.parked_retries,
        retry_windows: leftovers.retry_windows,
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
        examples: examples.0,
    }
}

/// A granule as the audit names it: its id and, with item records, where its record stands.
async fn where_it_stands(ctx: &Ctx, granule: String) -> String {
    let Ok(id) = granary::domain::granule::GranuleId::parse(&granule) else {
        return granule;
    };
    match ctx.items().look(&id).await {
        Ok(Some(r)) => format!(
            "{granule} ({}, {} download and {} processing attempts)",
            r.state, r.attempts.download, r.attempts.processing
        ),
        Ok(None) => format!("{granule} (no item record)"),
        Err(e) => format!("{granule} (its record unreadable: {e})"),
    }
}
