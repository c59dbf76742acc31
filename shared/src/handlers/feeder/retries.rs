//! The feeder's window of parked retries (`GRANARY_ARRAY_RETRIES`): the retries the requeuer
//! parked since the last such window, submitted together before the run's inventory windows —
//! one array job when array windows are on — each granule at its own attempt. Retries then
//! spend Batch's SubmitJob quota (50 calls a second for the account) by the window, not by the
//! granule (BENCHMARKS.md, "Array-job windows").
//!
//! Window `k` (the tracker's `retry_windows`) is the window claim at
//! `claims/windows/retries/start=k`, worked by the protocol every feeder window uses
//! (`repositories::windows`). In order, each step a crash point:
//! 1. the pending markers listed (up to a window's worth), each one's claim read: a claim whose
//!    job is recorded makes its marker stale (a duplicate retry message wrote it again after a
//!    window took the granule), and the marker is removed;
//! 2. the window claimed, submitted and its jobs recorded;
//! 3. the item records moved to PROCESSING at each granule's attempt;
//! 4. each granule's own claim records its job, so a duplicate retry message finds it taken;
//! 5. the pending markers removed, and the tracker moved to `k + 1` (saved with the run's).
//!
//! A run that dies anywhere leaves the tracker at `k`: the next run that lists a marker finds
//! window `k` claimed and works it as its claim says (its granules, not a new listing), then
//! finishes 3–5. A run that lists none stops there (one LIST, the cost of a quiet minute): a
//! window whose markers are all removed lacks only its tracker move.

use super::window::record_window;
use super::{FeederSummary, Stop};
use crate::domain::claim::{Claim, JobsClaim};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::{parked_key, parked_prefix, parse_claim_key};
use crate::domain::tracker::Tracker;
use crate::domain::window::{WindowClaim, WindowEntry, RETRY_WINDOWS};
use crate::handlers::{Ctx, HandlerError};
use crate::repositories::windows::WindowOutcome;
use crate::repositories::{JobSubmission, RepositoryError, Versioned};
use futures::{StreamExt, TryStreamExt};

/// Claims read (and markers removed) at once.
const AT_ONCE: usize = 32;

/// Feeds window `tracker.retry_windows` of parked retries. Returns whether the tracker moved,
/// and why the run must stop short (a window in flight, a call that kept failing).
/// A window holds at most `ceiling` retries: as many as one array takes, or as many single
/// jobs as the run has time to submit (`window_ceiling`).
pub(super) async fn feed_retries(
    ctx: &Ctx,
    tracker: &mut Versioned<Tracker>,
    summary: &mut FeederSummary,
    ceiling: u64,
) -> Result<(bool, Option<Stop>), HandlerError> {
    let pending = list_parked(ctx).await?;
    feed_listed(ctx, tracker, summary, ceiling, pending).await
}

/// [`feed_retries`] with the pending markers already listed. Nothing pending, nothing to do —
/// not even a window half worked: its markers go last (step 5), so a window whose markers are
/// all gone lacks only its tracker move, which the next window's run makes.
async fn feed_listed(
    ctx: &Ctx,
    tracker: &mut Versioned<Tracker>,
    summary: &mut FeederSummary,
    ceiling: u64,
    pending: Vec<GranuleProcessingEvent>,
) -> Result<(bool, Option<Stop>), HandlerError> {
    if pending.is_empty() {
        return Ok((false, None));
    }
    let number = tracker.value.retry_windows;
    let Some(window) = window_of_retries(ctx, summary, ceiling, pending, number).await? else {
        return Ok((false, None));
    };
    let (claim, submissions) = match ctx.windows().submit(window, None).await? {
        WindowOutcome::InFlight { .. } => {
            return Ok((
                false,
                Some(Stop::Wait(format!(
                    "window {number} of retries is claimed by a run still in flight"
                ))),
            ))
        }
        WindowOutcome::Worked { claim, jobs } => (claim, jobs),
    };
    if let Some(stop) = count_retries_submitted(ctx, number, &claim, &submissions, summary) {
        return Ok((false, Some(stop)));
    }
    if let Some(stop) = record_window(
        ctx,
        RETRY_WINDOWS,
        &claim,
        &submissions,
        &std::collections::HashMap::new(),
        false,
    )
    .await
    {
        return Ok((false, Some(stop)));
    }
    release_parked(ctx, &claim, &submissions).await?;
    tracker.value.retry_windows = number + 1;
    tracing::info!(
        window = number,
        granules = claim.granules.len(),
        array = claim.array,
        "window of retries submitted"
    );
    Ok((true, None))
}

/// Window `number` of retries as this run works it: as its claim says when it is claimed
/// already, otherwise the parked retries still pending (`None` when none is).
async fn window_of_retries(
    ctx: &Ctx,
    summary: &mut FeederSummary,
    ceiling: u64,
    pending: Vec<GranuleProcessingEvent>,
    number: u64,
) -> Result<Option<WindowClaim>, HandlerError> {
    if ctx.windows().claimed(RETRY_WINDOWS, number).await? {
        // Worked as its claim says: what this stands for is never read.
        return Ok(Some(WindowClaim::of_retries(
            ctx.campaign(),
            number,
            Vec::new(),
            "queue-feeder",
            crate::clock::now(),
        )));
    }
    let entries = parked(ctx, summary, ceiling, pending).await?;
    if entries.is_empty() {
        return Ok(None);
    }
    if crate::mutants::on("parked-markers-removed-first") {
        let prefix = &ctx.config.layout.claim_prefix;
        for entry in &entries {
            remove(ctx, parked_key(prefix, &entry.event())).await?;
        }
    }
    Ok(Some(
        WindowClaim::of_retries(
            ctx.campaign(),
            number,
            entries,
            "queue-feeder",
            crate::clock::now(),
        )
        .in_array(ctx.config.feeder.array_windows),
    ))
}

/// Counts the window's submitted retries into the summary and the metrics; `Some(stop)` at the
/// first retry not submitted (counted nowhere then).
fn count_retries_submitted(
    ctx: &Ctx,
    number: u64,
    claim: &WindowClaim,
    submissions: &[JobSubmission],
    summary: &mut FeederSummary,
) -> Option<Stop> {
    let mut submitted_here = 0;
    for (entry, submission) in claim.entries().zip(submissions) {
        match submission {
            JobSubmission::Submitted { .. } | JobSubmission::Recovered { .. } => {
                submitted_here += 1;
                summary.retries_submitted += 1;
            }
            JobSubmission::AlreadySubmitted { .. } => summary.retries_submitted += 1,
            JobSubmission::NotSubmitted { error, .. } => {
                tracing::error!(granule_id = %entry.granule_id, attempt = entry.attempt, error, "retry not submitted");
                return Some(Stop::Fail(format!(
                    "{} (attempt {}) of window {number} of retries not submitted: {error}",
                    entry.granule_id, entry.attempt
                )));
            }
        }
    }
    use crate::domain::metrics::Metric;
    ctx.metrics
        .count(Metric::GranulesSubmitted, &[], submitted_here);
    None
}

/// Steps 4 and 5 but the tracker's move: each granule's own claim records the job the window
/// gave it, then the pending markers go.
async fn release_parked(
    ctx: &Ctx,
    claim: &WindowClaim,
    submissions: &[JobSubmission],
) -> Result<(), HandlerError> {
    let taken: Vec<(WindowEntry, String)> = claim
        .entries()
        .zip(submissions)
        .filter_map(|(e, s)| Some((e, s.job_id()?.to_owned())))
        .collect();
    futures::stream::iter(
        taken
            .iter()
            .map(|(entry, job_id)| taken_by_window(ctx, entry, job_id)),
    )
    .buffer_unordered(AT_ONCE)
    .try_collect::<Vec<()>>()
    .await?;
    let prefix = &ctx.config.layout.claim_prefix;
    futures::stream::iter(
        taken
            .iter()
            .map(|(entry, _)| remove(ctx, parked_key(prefix, &entry.event()))),
    )
    .buffer_unordered(AT_ONCE)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// The parked retries of the other campaigns the stack has state for (parked before it switched
/// campaigns), each campaign's window of retries with that campaign's own tracker, saved here:
/// no feeder of that campaign runs any more to save it. A campaign with nothing parked costs
/// one LIST a run. What goes wrong there is logged and left to the next run: it does not stop
/// this campaign's feeding.
pub(super) async fn feed_other_campaigns(
    ctx: &Ctx,
    summary: &mut FeederSummary,
    ceiling: u64,
) -> Result<(), HandlerError> {
    for campaign in crate::handlers::campaigns_to_visit(ctx).await? {
        if campaign.as_ref() == ctx.campaign() {
            continue;
        }
        let there = ctx.in_campaign(campaign.as_ref());
        let name = campaign
            .as_ref()
            .map_or("the unnamed campaign".to_owned(), |c| c.to_string());
        let pending = match list_parked(&there).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(campaign = name, error = %e, "the parked retries of another campaign could not be listed; the next run looks again");
                continue;
            }
        };
        if pending.is_empty() {
            continue;
        }
        let fed = async {
            let mut tracker = there.tracker().load().await?;
            let (moved, stop) =
                feed_listed(&there, &mut tracker, summary, ceiling, pending).await?;
            if moved {
                there.tracker().save(&mut tracker).await?;
            }
            Ok::<_, HandlerError>(stop)
        };
        match fed.await {
            Ok(None) => {}
            Ok(Some(stop)) => {
                tracing::warn!(
                    campaign = name,
                    why = stop.why(),
                    "a window of retries of another campaign stopped short; the next run goes on"
                )
            }
            Err(e) => {
                tracing::warn!(campaign = name, error = %e, "a window of retries of another campaign failed; the next run goes on")
            }
        }
    }
    Ok(())
}

/// The retries the requeuer parked, as their pending markers name them (one LIST).
async fn list_parked(ctx: &Ctx) -> Result<Vec<GranuleProcessingEvent>, HandlerError> {
    let prefix = parked_prefix(&ctx.config.layout.claim_prefix);
    let listed = ctx.claims().parked_markers().await?;
    Ok(listed
        .iter()
        .filter_map(|m| parse_claim_key(&prefix, &m.key))
        .collect())
}

/// The parked retries a new window takes: up to a window's worth of the pending markers, each
/// still parked (its claim has no job); the stale ones are removed.
async fn parked(
    ctx: &Ctx,
    summary: &mut FeederSummary,
    ceiling: u64,
    mut pending: Vec<GranuleProcessingEvent>,
) -> Result<Vec<WindowEntry>, HandlerError> {
    pending.sort_by(|a, b| (&a.granule_id, a.attempt).cmp(&(&b.granule_id, b.attempt)));
    pending.truncate(usize::try_from(ceiling).unwrap_or(usize::MAX));
    let looked: Vec<(GranuleProcessingEvent, Option<WindowEntry>)> =
        futures::stream::iter(pending.into_iter().map(|event| async move {
            let claim = ctx
                .claims()
                .claim_retrying(&event, "reading a parked retry's claim")
                .await?;
            // The claim decides, not the marker: a marker written again after a window took
            // the granule must not submit it twice.
            let trusted = crate::mutants::on("parked-marker-trusted");
            let entry = claim
                .filter(|c| trusted || (c.parked && c.job_id.is_none()))
                .map(|c| WindowEntry {
                    granule_id: event.granule_id.clone(),
                    attempt: event.attempt,
                    spot_ends: c.placement.spot_ends,
                    record_at_end: false,
                });
            Ok::<_, RepositoryError>((event, entry))
        }))
        .buffered(AT_ONCE)
        .try_collect()
        .await?;
    let mut entries = Vec::with_capacity(looked.len());
    for (event, entry) in looked {
        match entry {
            Some(entry) => entries.push(entry),
            None => {
                tracing::info!(granule_id = %event.granule_id, attempt = event.attempt, "a parked retry's marker is stale (a window took it, or its claim is gone): removed");
                remove(ctx, parked_key(&ctx.config.layout.claim_prefix, &event)).await?;
                summary.stale_parked += 1;
            }
        }
    }
    Ok(entries)
}

/// The granule's own claim records the job the window gave it (If-Match; read again when it
/// changed meanwhile): a duplicate retry message then finds the attempt taken.
async fn taken_by_window(ctx: &Ctx, entry: &WindowEntry, job_id: &str) -> Result<(), HandlerError> {
    let found = [Some(job_id.to_owned())];
    // The submission protocol's own recording rule: a job already recorded is kept. A claim gone
    // (an operator's cleanup) leaves the window's own claim holding the job.
    let record = |claim: &Claim| {
        Ok(claim
            .job_id
            .is_none()
            .then(|| claim.recording(&found, crate::clock::now())))
    };
    ctx.claims()
        .change_claim(
            &entry.event(),
            ("parked retry's claim", "recording a parked retry's job"),
            record,
        )
        .await?;
    Ok(())
}

async fn remove(ctx: &Ctx, key: String) -> Result<(), HandlerError> {
    ctx.claims().remove_parked_marker(&key).await?;
    Ok(())
}
