//! `granary cancel` and `granary resume --cancelled`: terminate exactly the campaign's open
//! attempts — the job ids granary recorded in its claims, found through the open-claims index,
//! never a name prefix — and later send the attempts that cancel ended round again.
//!
//! The order, each step a crash point:
//! 1. the feeder's hold, naming the cancel and its filter (unless told otherwise): the feeder
//!    starts no new window (it reads the hold before each one) and the requeuer submits no next
//!    attempt the filter takes — it lists the granule as cancelled instead;
//! 2. the open attempts listed, then the cancel's record (`claims/cancels/<id>.json`): what it
//!    means to terminate and why;
//! 3. TerminateJob for each target, paced, with a reason naming the cancel (`domain::cancel`);
//!    then the listing again, for a job a run already under way submitted meanwhile (up to
//!    [`ROUNDS`] times).
//!
//! A cancel that dies part way is run again (a second id). Each terminated job ends as Batch
//! says and comes back as an event: the job monitor logs it and, knowing the reason, lists it
//! under `claims/cancelled/` instead of retrying or dead-lettering it.

use super::Ctx;
use crate::adapters::paced::Pacer;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::cancel::{self, CancelFilter, CancelRecord, Cancelled, OpenAttempt};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::hold::{CancelHold, Hold};
use crate::domain::layout::claims::{parse_claim_key, parse_window_key, window_key};
use crate::handlers::HandlerError;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

/// What an operator asks of a cancel.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    pub filter: CancelFilter,
    /// The operator's words, after the cancel's id in the reason Batch keeps.
    pub reason: String,
    pub by: String,
    /// List what would be terminated; change nothing.
    pub dry_run: bool,
    /// Place the feeder's hold first (the default): without it new windows keep coming.
    pub hold_feeder: bool,
    /// TerminateJob calls a second (Batch throttles each account's API calls: keep this inside
    /// what the submitters' SubmitJob shares leave).
    pub per_second: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CancelSummary {
    pub id: String,
    /// Open attempts the filter took (terminated, or to be in a dry run).
    pub targets: Vec<OpenAttempt>,
    pub terminated: u64,
    /// Taken, but with no job recorded yet (its submitter's answer is pending): the feeder's
    /// takeover or the reconciler records it; run the cancel again.
    pub without_job: u64,
    /// Open attempts the filter left alone.
    pub left: u64,
    /// TerminateJob calls that failed past the SDK's retries (job id, error).
    pub failed: Vec<(String, String)>,
    /// Whether this cancel placed the feeder's hold (false: held already, or not asked).
    pub held: bool,
}

/// Listings (and TerminateJob rounds) a cancel makes at most: the first, and again while new
/// open attempts appear (a feeder window or a requeued attempt under way when the hold came).
pub const ROUNDS: usize = 3;

/// Granules of a window looked at concurrently.
const LOOKS_AT_ONCE: usize = 32;

/// Every attempt of the campaign whose end the monitor has not logged, with the job granary
/// recorded for it: the open-claims index, then each claim, then (a window's granules) each
/// one's log. One that ends between this look and its TerminateJob is left as it ended.
pub async fn open_attempts(ctx: &Ctx) -> Result<Vec<OpenAttempt>, HandlerError> {
    let layout = &ctx.config.layout;
    let mut open = Vec::new();
    let markers = ctx.claims().open_markers().await?;
    let windows = ctx.windows();
    for marker in markers {
        if let Some((inventory, start)) = parse_window_key(&layout.open_claim_prefix, &marker.key) {
            let claim_at = window_key(&layout.claim_prefix, &inventory, start);
            let Some(claim) = windows.claim_at(&claim_at).await? else {
                continue;
            };
            let progress = windows
                .open_marker(&inventory, start)
                .await?
                .map(|m| crate::domain::window::WindowProgress::from_marker(&m.body))
                .unwrap_or_default();
            // The granules whose end is not logged yet: looked at a few at a time (one or two
            // GETs each), since a window may hold 10,000.
            let looks = claim
                .attempts()
                .enumerate()
                .filter(|(i, _)| !progress.is_handled(*i))
                .map(|(i, attempt)| async move {
                    let ended = super::reconciler::end_logged(ctx, &attempt).await?;
                    Ok::<_, HandlerError>((i, attempt, ended))
                });
            let mut looked: Vec<_> = futures::stream::iter(looks)
                .buffer_unordered(LOOKS_AT_ONCE)
                .try_collect()
                .await?;
            looked.sort_by_key(|(i, _, _)| *i);
            for (i, attempt, ended) in looked {
                if !ended {
                    open.push(OpenAttempt {
                        granule_id: attempt.granule_id,
                        attempt: attempt.attempt,
                        job_id: claim.job_id(i),
                        // A window of retries is no inventory's.
                        inventory: (!claim.is_retries()).then(|| inventory.clone()),
                    });
                }
            }
        } else if let Some(attempt) = parse_claim_key(&layout.open_claim_prefix, &marker.key) {
            let claim = ctx.claims().claim(&attempt).await?.map(|c| c.value);
            open.push(OpenAttempt {
                granule_id: attempt.granule_id,
                attempt: attempt.attempt,
                job_id: claim.and_then(|c| c.job_id),
                inventory: None,
            });
        }
    }
    Ok(open)
}

/// Every attempt something holds open, ended or not: the open-claims index (each claimed
/// attempt, each window's), and the parked retries. Cheaper than [`open_attempts`] (no log is
/// read): `granary audit` sets them beside the logs itself.
pub async fn held_attempts(ctx: &Ctx) -> Result<Vec<GranuleProcessingEvent>, HandlerError> {
    let layout = &ctx.config.layout;
    let mut held = Vec::new();
    for marker in ctx.claims().open_markers().await? {
        if let Some((inventory, start)) = parse_window_key(&layout.open_claim_prefix, &marker.key) {
            let claim_at = window_key(&layout.claim_prefix, &inventory, start);
            if let Some(claim) = ctx.windows().claim_at(&claim_at).await? {
                held.extend(claim.attempts());
            }
        } else if let Some(attempt) = parse_claim_key(&layout.open_claim_prefix, &marker.key) {
            held.push(attempt);
        }
    }
    let parked = crate::domain::layout::claims::parked_prefix(&layout.claim_prefix);
    for marker in ctx.claims().parked_markers().await? {
        held.extend(parse_claim_key(&parked, &marker.key));
    }
    Ok(held)
}

/// Runs one cancel (see the module's order). `now` and `entropy` make its id.
pub async fn cancel(
    ctx: &Ctx,
    request: &CancelRequest,
    now: DateTime<Utc>,
    entropy: u32,
    mut progress: impl FnMut(u64, u64),
) -> Result<CancelSummary, HandlerError> {
    let id = cancel::new_cancel_id(now, entropy);
    let mut summary = CancelSummary {
        id: id.clone(),
        ..CancelSummary::default()
    };
    if request.dry_run {
        let (targets, left) = Box::pin(take(ctx, &request.filter)).await?;
        summary.without_job = targets.iter().filter(|t| t.job_id.is_none()).count() as u64;
        summary.targets = targets;
        summary.left = left;
        return Ok(summary);
    }
    if request.hold_feeder {
        summary.held = hold(ctx, request, &id, now).await?;
    }
    let reason = cancel::reason(&id, &request.reason);
    let pacer = Pacer::per_second(request.per_second);
    let mut terminated: std::collections::HashSet<String> = Default::default();
    for round in 0..ROUNDS {
        let (targets, left) = Box::pin(take(ctx, &request.filter)).await?;
        summary.left = left;
        summary.without_job = targets.iter().filter(|t| t.job_id.is_none()).count() as u64;
        let new: Vec<OpenAttempt> = targets
            .into_iter()
            .filter(|t| t.job_id.as_ref().is_none_or(|j| !terminated.contains(j)))
            .collect();
        let jobs: Vec<String> = new.iter().filter_map(|t| t.job_id.clone()).collect();
        summary.targets.extend(new);
        if round > 0 && jobs.is_empty() {
            break;
        }
        // What this cancel means to terminate, before it does: rewritten with each round's.
        let record = CancelRecord {
            id: id.clone(),
            reason: request.reason.clone(),
            by: request.by.clone(),
            at: now,
            filter: request.filter.clone(),
            targets: summary.targets.clone(),
        };
        ctx.cancelled().record_cancel(&record).await?;
        for job in &jobs {
            if let Some(p) = &pacer {
                p.wait().await;
            }
            match ctx.jobs.terminate(job, &reason).await {
                Ok(()) => summary.terminated += 1,
                Err(e) => summary.failed.push((job.clone(), e.to_string())),
            }
            terminated.insert(job.clone());
            progress(summary.terminated, summary.targets.len() as u64);
        }
    }
    Ok(summary)
}

/// The open attempts `filter` takes, and how many it leaves.
async fn take(ctx: &Ctx, filter: &CancelFilter) -> Result<(Vec<OpenAttempt>, u64), HandlerError> {
    let parser = &ctx.config.layout.id_parser;
    let open = open_attempts(ctx).await?;
    let total = open.len() as u64;
    let targets: Vec<OpenAttempt> = open
        .into_iter()
        .filter(|o| filter.takes(o, parser.facts(&o.granule_id).platform.as_deref()))
        .collect();
    let left = total - targets.len() as u64;
    Ok((targets, left))
}

/// The feeder's hold, naming this cancel: placed, or put in place of a hold already there (whose
/// words it keeps as evidence), so the requeuer knows what to hold back. Whether it was placed
/// where there was none.
async fn hold(
    ctx: &Ctx,
    request: &CancelRequest,
    id: &str,
    now: DateTime<Utc>,
) -> Result<bool, HandlerError> {
    let existing = ctx.hold().read().await?;
    let hold = Hold {
        reason: format!("granary cancel {id}: {}", request.reason),
        held_by: request.by.clone(),
        at: now,
        evidence: existing.iter().map(|h| h.describe()).collect(),
        cancel: Some(CancelHold {
            id: id.to_owned(),
            filter: request.filter.clone(),
        }),
    };
    ctx.hold().replace(&hold).await?;
    Ok(existing.is_none())
}

/// Attempts `granary cancel` ended or held back, as listed (by granule).
pub async fn cancelled(ctx: &Ctx) -> Result<Vec<Cancelled>, HandlerError> {
    Ok(ctx.cancelled().listed().await?)
}

/// `granary resume --cancelled [--cancel ID]`: each listed attempt (of that cancel, or every
/// one) goes round again as a redriven retry message — its next attempt granted past the budget,
/// since the operator, not the granule, ended it — and leaves the list. The message first: a
/// crash before the delete leaves it listed, and a rerun's second message is absorbed by the
/// requeuer's claim on the next attempt.
pub async fn resume_cancelled(
    ctx: &Ctx,
    only: Option<&str>,
    dry_run: bool,
) -> Result<Vec<Cancelled>, HandlerError> {
    let mut resumed = Vec::new();
    for entry in cancelled(ctx).await? {
        if only.is_some_and(|id| id != entry.cancel) {
            continue;
        }
        let attempt = GranuleProcessingEvent {
            granule_id: entry.granule_id.clone(),
            attempt: entry.attempt,
        };
        if moved_on(ctx, &attempt).await? {
            // Sent round already (an item resume, an earlier run whose delete was lost) or
            // succeeded: only the listing is left.
            if !dry_run {
                ctx.cancelled().unlist(&attempt).await?;
            }
            continue;
        }
        if !dry_run {
            let placed = ctx.placed_before(&attempt).await?;
            let message = RetryMessage::redriven(attempt.clone())
                .with_spot_ends(placed.spot_ends)
                .with_memory(placed.memory_mib, false)
                .of_campaign(ctx.campaign().cloned())
                .to_message(&Notice::new(
                    Outcome::Resumed,
                    format!("resumed after {}", entry.cancel),
                ))?;
            ctx.retry_queue.send(message).await?;
            ctx.cancelled().unlist(&attempt).await?;
        }
        resumed.push(entry);
    }
    Ok(resumed)
}

/// Whether the granule has moved past the listed attempt: it succeeded, or (item records) its
/// record is at a later attempt. A record still PROCESSING the attempt has not: the monitor
/// that listed it died before recording the end, and its redelivery records it.
pub(crate) async fn moved_on(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
) -> Result<bool, HandlerError> {
    if ctx.config.layout.track_items {
        if let Some(r) = ctx.items().look(&attempt.granule_id).await? {
            use crate::domain::lifecycle::ItemState;
            return Ok(r.attempts.processing > attempt.attempt || r.state == ItemState::Processed);
        }
    }
    let facts = ctx.config.layout.id_parser.facts(&attempt.granule_id);
    let key = crate::domain::layout::logs::LogKey::new(
        crate::domain::layout::logs::LogOutcome::Success,
        &facts,
        &attempt.granule_id,
        attempt.attempt,
    );
    Ok(ctx.logs().succeeded_attempt(&key).await?.is_some())
}
