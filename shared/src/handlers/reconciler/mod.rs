//! The reconciler (run by the item sweeper's schedule): finds submitted attempts whose end never
//! reached the monitor and hands them to the monitor's own handler.
//!
//! EventBridge retries a failed delivery to its target for up to 24 hours and 185 times, then drops
//! the event (EventBridge user guide, "Event retry policy and using dead-letter queues"); a rule
//! edited or disabled by mistake drops them at once. Without this, such a granule is never logged,
//! retried or dead-lettered. The reconciler reads only the open-claims index (one marker per
//! attempt submitted and not yet logged and routed), never the claims of a whole campaign, and asks
//! DescribeJobs only about markers older than `GRANARY_RECONCILE_AFTER_SECS`. A finished job goes
//! through `monitor::job_finished`: the same classification, log, route and item update as its
//! event would have had, and the same duplicate protection if the event turns up after all.

use super::monitor::{self, MonitorOutcome};
use super::Ctx;
use crate::budget::Budget;
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::parse_claim_key;
use crate::domain::layout::claims::parse_window_key;
use crate::handlers::HandlerError;
use chrono::{DateTime, Utc};
use serde::Serialize;

mod windows;
pub(crate) use windows::end_logged;
#[cfg(test)]
pub(crate) use windows::ARRAY_WAIT_LIMIT;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileSummary {
    /// Attempts with a marker of their own (the requeuer's).
    pub open_claims: u64,
    /// Window markers (the feeder's first attempts); the counts below are per granule for them.
    pub windows: u64,
    /// Younger than the reconcile age: their events are presumably on the way.
    pub young: u64,
    /// Batch says the job is still queued or running.
    pub still_running: u64,
    /// Granules of array windows whose array Batch says is still under way (their ends handled
    /// or not): left, after one DescribeJobs of the parent, to a pass after the array ends
    /// (`windows::look_at_each_granule`).
    pub awaiting_array: u64,
    /// Finished jobs whose end the monitor had not handled, handed to it now.
    pub recovered: u64,
    /// Granules of windows whose end the monitor had handled.
    pub handled: u64,
    /// Markers whose end was already handled (the monitor died before removing them), or with no
    /// claim behind them: removed.
    pub closed: u64,
    /// Claims with no job yet: the claim's owner (or the next delivery of its message) submits it.
    pub not_submitted: u64,
    /// Windows of a campaign the stack no longer feeds, left half-submitted by its feeder:
    /// taken over and finished here (their jobs submitted, their item records made).
    pub taken_over: u64,
    /// Windows of another campaign left half-submitted, not taken over because the feeder is
    /// held (`granary hold`): taken over once it is released.
    pub held: u64,
    /// Jobs Batch no longer knows (it keeps finished jobs for at least 7 days, not for ever)
    /// whose end was never handled: logged and dead-lettered with that reason
    /// (`domain::job_end::forgotten_by_batch`).
    pub unknown_to_batch: u64,
    /// Markers that could not be looked at this time (an S3 or Batch error); tried next run.
    pub errors: u64,
    /// Markers (and granules of a window) this pass had no time left for: the next pass, which
    /// starts elsewhere in the index, looks at them.
    pub out_of_time: u64,
}

impl ReconcileSummary {
    /// Another campaign's counts added to these.
    fn add(&mut self, other: ReconcileSummary) {
        let ReconcileSummary {
            open_claims,
            windows,
            young,
            still_running,
            awaiting_array,
            recovered,
            handled,
            closed,
            not_submitted,
            taken_over,
            held,
            unknown_to_batch,
            errors,
            out_of_time,
        } = other;
        self.open_claims += open_claims;
        self.windows += windows;
        self.young += young;
        self.still_running += still_running;
        self.awaiting_array += awaiting_array;
        self.recovered += recovered;
        self.handled += handled;
        self.closed += closed;
        self.not_submitted += not_submitted;
        self.taken_over += taken_over;
        self.held += held;
        self.unknown_to_batch += unknown_to_batch;
        self.errors += errors;
        self.out_of_time += out_of_time;
    }
}

/// One pass over the open-claims index with no time limit (an operator's command, a test).
pub async fn reconcile(ctx: &Ctx, now: DateTime<Utc>) -> Result<ReconcileSummary, HandlerError> {
    reconcile_within(ctx, now, &Budget::unlimited()).await
}

/// One pass over the open-claims index of every campaign (`domain::campaign::to_visit`: its
/// own first, then the unnamed one and every one found under `campaigns/`), within `budget`.
/// A campaign switched away from while its jobs ran keeps its open claims, and they are
/// reconciled in its own state, as the monitor handles its jobs' events.
pub async fn reconcile_within(
    ctx: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<ReconcileSummary, HandlerError> {
    let mut summary = ReconcileSummary::default();
    let mut visits = super::CampaignVisits::of(ctx).await?;
    while let Some(v) = visits.next(ctx, budget) {
        match reconcile_campaign(&v.ctx, v.own, now, &v.share).await {
            Ok(s) => summary.add(s),
            // One campaign's trouble (its listing refused) is counted; the others go on.
            Err(e) => {
                tracing::warn!(campaign = ?v.campaign, error = %e, "cannot reconcile this campaign now");
                summary.errors += 1;
            }
        }
    }
    tracing::info!(?summary, "reconcile finished");
    // Ends whose events never came: found finished in Batch, or forgotten by it.
    let found = summary.recovered + summary.unknown_to_batch;
    ctx.metrics
        .count(crate::domain::metrics::Metric::ReconcilerFinds, &[], found);
    Ok(summary)
}

/// One campaign's open-claims index, within `budget`: it starts at a different marker each
/// pass and stops starting new ones once the time is spent (`out_of_time`). One marker's trouble
/// is logged and counted; the rest go on.
/// `own`: the campaign the stack runs (its feeder finishes its half-submitted windows); for
/// another, the reconciler does (`windows::reconcile_window`).
async fn reconcile_campaign(
    ctx: &Ctx,
    own: bool,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<ReconcileSummary, HandlerError> {
    let prefix = &ctx.config.layout.open_claim_prefix;
    let min_age = chrono::Duration::from_std(ctx.config.leases.reconcile_after)
        .unwrap_or(chrono::Duration::MAX);
    let mut summary = ReconcileSummary::default();
    let mut markers = ctx
        .claims()
        .open_markers()
        .await
        .map_err(|e| HandlerError::during("listing the open-claims index", e))?;
    let total = markers.len() as u64;
    markers.rotate_left(crate::budget::first_of(total as usize));
    for (looked, meta) in markers.into_iter().enumerate() {
        if budget.spent() {
            summary.out_of_time += total - looked as u64;
            tracing::warn!(
                left = total - looked as u64,
                "the reconciler's time is spent; the next pass looks at the rest"
            );
            break;
        }
        // Without a modification time the marker counts as old: it is looked at.
        let age = meta
            .last_modified
            .map_or(chrono::Duration::MAX, |t| now.signed_duration_since(t));
        if let Some((inventory, start)) = parse_window_key(prefix, &meta.key) {
            summary.windows += 1;
            if age < min_age {
                summary.young += 1;
                continue;
            }
            if let Err(e) =
                windows::reconcile_window(ctx, (&inventory, start), own, now, &mut summary, budget)
                    .await
            {
                tracing::warn!(inventory, start, error = %e, "cannot reconcile this window now");
                summary.errors += 1;
            }
            continue;
        }
        let Some(attempt) = parse_claim_key(prefix, &meta.key) else {
            tracing::warn!(key = meta.key, "foreign object in the open-claims index");
            continue;
        };
        summary.open_claims += 1;
        if age < min_age {
            summary.young += 1;
            continue;
        }
        match reconcile_one(ctx, &attempt, now).await {
            Ok(Step::StillRunning) => summary.still_running += 1,
            Ok(Step::Recovered) => summary.recovered += 1,
            Ok(Step::Closed) => summary.closed += 1,
            Ok(Step::NotSubmitted) => summary.not_submitted += 1,
            Ok(Step::UnknownToBatch) => summary.unknown_to_batch += 1,
            Err(e) => {
                tracing::warn!(granule_id = %attempt.granule_id, attempt = attempt.attempt, error = %e, "cannot reconcile this attempt now");
                summary.errors += 1;
            }
        }
    }
    if summary != ReconcileSummary::default() {
        tracing::info!(campaign = ?ctx.campaign(), ?summary, "campaign reconciled");
    }
    Ok(summary)
}

pub(super) enum Step {
    StillRunning,
    Recovered,
    Closed,
    NotSubmitted,
    UnknownToBatch,
}

async fn reconcile_one(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
    now: DateTime<Utc>,
) -> Result<Step, HandlerError> {
    let claims = ctx.claims();
    let Some(found) = claims.claim(attempt).await? else {
        claims.close_open_claim(attempt).await?;
        return Ok(Step::Closed);
    };
    let claim = found.value;
    // A claim completed with its job id, or one whose SubmitJob answer was lost: the job's
    // deterministic name finds it.
    let job_id = match claim.job_id {
        Some(id) => id,
        None => match ctx.jobs.find_by_name(&claim.job_name).await? {
            Some(job) => job.job_id,
            None => {
                let lease = chrono::Duration::from_std(ctx.config.leases.claim_lease)
                    .unwrap_or(chrono::Duration::MAX);
                if now.signed_duration_since(claim.lease.claimed_at) <= lease {
                    return Ok(Step::NotSubmitted);
                }
                // Past its lease and no job by its name: its owner died before SubmitJob and no
                // delivery took it over (its retry message parked on the failure DLQ, say). No
                // end can be lost for a job that does not exist, so the marker goes; a takeover
                // marks it open again before it submits. One that took the claim over between
                // our read and the delete changed the claim first: the marker is put back.
                claims.close_open_claim(attempt).await?;
                let after = claims.claim(attempt).await?;
                if after.and_then(|c| c.etag) != found.etag {
                    claims.reopen_claim(attempt).await?;
                    return Ok(Step::NotSubmitted);
                }
                tracing::warn!(granule_id = %attempt.granule_id, attempt = attempt.attempt, "claim past its lease with no job: its open marker is removed (the attempt was never submitted)");
                return Ok(Step::Closed);
            }
        },
    };
    let Some(description) = ctx.jobs.describe(&job_id).await? else {
        tracing::warn!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, "Batch no longer knows this job; its end was never logged: dead-lettered");
        route_forgotten(ctx, attempt, &job_id, None).await?;
        return Ok(Step::UnknownToBatch);
    };
    // The job's name is this attempt's (campaign, granule, attempt), found by it or recorded.
    let known = unreadable_description_ends_here(true, false, ctx.config.layout.track_items)
        .then_some(monitor::KnownAttempt {
            attempt,
            listed_in: None,
        });
    match monitor::described_job(ctx, description, "reconciler (DescribeJobs)", known).await? {
        None => Ok(Step::StillRunning),
        Some(outcome) => {
            tracing::info!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, ?outcome, "finished job reconciled from DescribeJobs");
            Ok(match outcome {
                MonitorOutcome::Duplicate | MonitorOutcome::AlreadySucceeded { .. } => Step::Closed,
                MonitorOutcome::Rejected { .. } => {
                    claims.close_open_claim(attempt).await?;
                    Step::Closed
                }
                _ => Step::Recovered,
            })
        }
    }
}

/// Whether the reconciler ends an attempt whose finished job Batch describes in a way no code can
/// read (dead-lettered with why, `job_end::undescribable`) rather than only keeping the
/// description under rejects/. Only an attempt whose job is surely its own: one its claim
/// recorded (`job_recorded`; a window's job found by its name may be an earlier claim's array at
/// the same key, whose token only a readable description shows). And only where nothing else
/// would end it: a window whose records are made at its children's ends (`records_at_end`), or
/// item records off; with a record PROCESSING the attempt, the item sweeper times it out and
/// retries it while its attempts last, as it always has.
pub(super) fn unreadable_description_ends_here(
    job_recorded: bool,
    records_at_end: bool,
    track_items: bool,
) -> bool {
    job_recorded && (records_at_end || !track_items)
}

/// Logs and routes an attempt whose job Batch forgot before its end was seen, through the
/// monitor's own handler (a duplicate-safe log, the DLQ, the item record, the marker).
/// `listed_in`: the window claim whose records are made at their ends, if the attempt is one.
pub(super) async fn route_forgotten(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
    job_id: &str,
    listed_in: Option<&str>,
) -> Result<MonitorOutcome, HandlerError> {
    let campaign = ctx.campaign();
    let name = crate::domain::job_name::job_name(campaign, &attempt.granule_id, attempt.attempt);
    let finished = crate::domain::job_end::FinishedJob {
        listed_in: listed_in.map(str::to_owned),
        ..crate::domain::job_end::forgotten_by_batch(attempt.clone(), campaign.cloned(), job_id)
    };
    let detail = crate::domain::job_end::forgotten_detail(job_id, &name);
    monitor::job_finished(ctx, finished, detail, monitor::RECOVERED_BY).await
}

#[cfg(test)]
mod tests;
