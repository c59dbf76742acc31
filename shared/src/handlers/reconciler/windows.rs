//! The reconciler's part for windows: the feeder's first attempts have one open marker per window
//! (`domain::window`), not one per granule, so nothing removes it granule by granule. The marker
//! stays until every granule of the window has ended and its end has been handled; a granule whose
//! end the monitor never saw is handed to it here, as its event would have been.
//!
//! "Handled" is read, not written: the attempt's success log exists, or its failure log exists
//! and says it was routed (and, with item records on, the record has left PROCESSING at that
//! attempt). Those are GETs, about a twelfth of a PUT's price, and DescribeJobs costs nothing, so
//! looking at a window again on each pass costs little; handing an already-handled end to the
//! monitor would cost a conditional PUT per granule. The one PUT a look may cost: a record an
//! earlier pass moved (an end found by DescribeJobs) pays the history entries that pass may have
//! died owing (`Items::look`), as may any record: a monitor's event parked after it died is
//! never redelivered.

use super::{OneError, ReconcileSummary};
use crate::budget::Budget;
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::job_name::job_name;
use crate::domain::lifecycle::ItemState;
use crate::domain::log_key::{LogKey, LogOutcome, LogRecord};
use crate::domain::window::{window_key, WindowClaim, WindowProgress};
use crate::handlers::monitor::{self, MonitorOutcome};
use crate::handlers::Ctx;
use crate::ports::{JobDescription, PutCondition};
use crate::repositories::json::read_json_retrying;
use crate::repositories::read_json;
use futures::StreamExt;
use std::collections::HashMap;

/// How often one granule is looked at within a pass before the pass leaves the window open.
const GRANULE_TRIES: u32 = 5;

/// Granules of one window looked at concurrently (S3 GETs and the monitor's handler for ends
/// that were lost).
const GRANULE_LOOKS_AT_ONCE: usize = 16;

/// Where one granule of a window stands.
enum Granule {
    /// Its job has not been submitted yet: the feeder's next run (a takeover) does it.
    NotSubmitted,
    StillRunning,
    /// Batch no longer knows the job: routed now as a final failure with its reason.
    UnknownToBatch,
    /// Its end was handled (by the monitor, or now by a duplicate-safe handler).
    Handled,
    /// Its end was handed to the monitor's handler now.
    Recovered,
    /// Its end is handled, but its item record is still to be made by the feeder's next run
    /// (the window stays open so that the record, once made, is found and moved on).
    AwaitingRecord,
    /// Not looked at: the pass's time was spent (the next pass does it).
    NotLooked,
}

/// Looks at every granule of the window at `(inventory, start)`; removes the window's marker once
/// all of them have ended and been handled (or the window claim is gone).
pub(super) async fn reconcile_window(
    ctx: &Ctx,
    inventory: &str,
    start: u64,
    summary: &mut ReconcileSummary,
    budget: &Budget,
) -> Result<(), OneError> {
    let layout = &ctx.config.layout;
    let open_key = window_key(&layout.open_claim_prefix, inventory, start);
    let Some(claim) = read_json::<WindowClaim>(
        ctx.store.as_ref(),
        &window_key(&layout.claim_prefix, inventory, start),
    )
    .await?
    else {
        ctx.store.delete(&open_key).await?;
        summary.closed += 1;
        return Ok(());
    };
    let claim = claim.value;
    // What earlier passes saw handled: those granules are not looked at again.
    let marker = ctx.store.get(&open_key).await?;
    let mut progress = marker
        .as_ref()
        .map(|m| WindowProgress::from_marker(&m.body))
        .unwrap_or_default();
    let mut newly_handled = 0u64;
    // Each granule's job: recorded, or (a SubmitJob answer lost) found by its deterministic name.
    let mut job_ids: Vec<Option<String>> = Vec::with_capacity(claim.granules.len());
    for (i, attempt) in claim.attempts().enumerate() {
        job_ids.push(match claim.job_id(i) {
            _ if progress.is_handled(i) => None,
            Some(id) => Some(id.to_owned()),
            None => ctx
                .jobs
                .find_by_name(&job_name(&attempt.granule_id, attempt.attempt))
                .await?
                .map(|job| job.job_id),
        });
    }
    // DescribeJobs, up to 100 jobs a call.
    let known: Vec<String> = job_ids.iter().flatten().cloned().collect();
    let mut described: HashMap<String, JobDescription> = ctx
        .jobs
        .describe_many(&known)
        .await?
        .into_iter()
        .map(|d| (d.summary.job_id.clone(), d))
        .collect();
    let mut open = 0u64;
    let window_passed = std::cell::Cell::new(None);
    let to_look: Vec<(
        usize,
        GranuleProcessingEvent,
        Option<String>,
        Option<JobDescription>,
    )> = claim
        .attempts()
        .zip(job_ids)
        .enumerate()
        .filter(|(i, _)| !progress.is_handled(*i))
        .map(|(i, (attempt, job_id))| {
            let description = job_id.as_ref().and_then(|j| described.remove(j));
            (i, attempt, job_id, description)
        })
        .collect();
    // Granules are looked at a few at a time: a pass over a large window under throttling would
    // otherwise add up every granule's backoff one after another.
    let (claim_ref, passed_ref) = (&claim, &window_passed);
    let looked: Vec<(usize, GranuleProcessingEvent, Result<Granule, OneError>)> =
        futures::stream::iter(to_look)
            .map(|(i, attempt, job_id, description)| async move {
                let step = match job_id {
                    _ if budget.spent() => Ok(Granule::NotLooked),
                    None => Ok(Granule::NotSubmitted),
                    // The window closes only in a pass where every granule could be looked at:
                    // a call throttled past the SDK's retries is tried again here, or one
                    // unlucky granule would keep a large window open pass after pass.
                    Some(job_id) => {
                        crate::retry::again(
                            crate::retry::Backoff {
                                tries: GRANULE_TRIES,
                                ..crate::retry::Backoff::IN_RUN
                            },
                            "looking at a granule of a window",
                            || {
                                granule(
                                    ctx,
                                    claim_ref,
                                    &attempt,
                                    &job_id,
                                    description.clone(),
                                    passed_ref,
                                )
                            },
                            |_| true,
                        )
                        .await
                    }
                };
                (i, attempt, step)
            })
            .buffered(GRANULE_LOOKS_AT_ONCE)
            .collect()
            .await;
    for (i, attempt, step) in looked {
        if matches!(
            step,
            Ok(Granule::Handled | Granule::Recovered | Granule::UnknownToBatch)
        ) {
            newly_handled += u64::from(progress.mark(i));
        }
        if !matches!(
            step,
            Ok(Granule::Handled | Granule::Recovered | Granule::UnknownToBatch)
        ) {
            open += 1;
        }
        match step {
            Ok(Granule::Handled) => summary.handled += 1,
            Ok(Granule::Recovered) => summary.recovered += 1,
            Ok(Granule::NotSubmitted) => summary.not_submitted += 1,
            Ok(Granule::StillRunning) => summary.still_running += 1,
            Ok(Granule::UnknownToBatch) => summary.unknown_to_batch += 1,
            Ok(Granule::AwaitingRecord) => summary.awaiting_records += 1,
            Ok(Granule::NotLooked) => summary.out_of_time += 1,
            Err(e) => {
                tracing::warn!(granule_id = %attempt.granule_id, error = %e, "cannot reconcile this granule of the window now");
                summary.errors += 1;
            }
        }
    }
    if open == 0 {
        ctx.store.delete(&open_key).await?;
        summary.closed += 1;
    } else if newly_handled > 0 {
        // Kept for the next pass; a lost race (the feeder reset the marker in a takeover) or a
        // failed write only means the next pass looks at those granules again.
        let condition = match &marker {
            Some(m) => PutCondition::IfMatch(m.etag.clone()),
            None => PutCondition::IfAbsent,
        };
        let body = crate::contracts::encode("window progress", &progress);
        match body {
            Ok(body) => {
                if let Err(e) = ctx.store.put(&open_key, body, condition).await {
                    tracing::warn!(inventory, start, error = %e, "window progress not kept; the next pass looks again");
                }
            }
            Err(e) => tracing::warn!(inventory, start, error = %e, "window progress not encoded"),
        }
    }
    Ok(())
}

async fn granule(
    ctx: &Ctx,
    claim: &WindowClaim,
    attempt: &GranuleProcessingEvent,
    job_id: &str,
    description: Option<JobDescription>,
    window_passed: &std::cell::Cell<Option<bool>>,
) -> Result<Granule, OneError> {
    let Some(description) = description else {
        // With item records, the item sweeper times such an attempt out (the window's open
        // marker names it to the sweeper) and the record leaves PROCESSING at it: handled.
        if ctx.config.layout.track_items && record_moved_past(ctx, attempt).await? == Some(true) {
            return Ok(Granule::Handled);
        }
        if handled(ctx, claim, attempt, window_passed).await? {
            return Ok(Granule::Handled);
        }
        tracing::warn!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, "Batch no longer knows this job; its end was never logged: dead-lettered");
        super::route_forgotten(ctx, attempt, job_id).await?;
        return Ok(Granule::UnknownToBatch);
    };
    if !description.summary.status.is_terminal() {
        return Ok(Granule::StillRunning);
    }
    if handled(ctx, claim, attempt, window_passed).await? {
        return Ok(Granule::Handled);
    }
    let step = match monitor::described_job(ctx, description.clone(), "reconciler (DescribeJobs)")
        .await?
    {
        None => Granule::StillRunning,
        Some(
            MonitorOutcome::Duplicate
            | MonitorOutcome::AlreadySucceeded
            | MonitorOutcome::Rejected { .. },
        ) => Granule::Handled,
        Some(outcome) => {
            tracing::info!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, ?outcome, "finished job reconciled from DescribeJobs");
            Granule::Recovered
        }
    };
    // The end is handled, but a record still to be made needs the window open to be found.
    if ctx.config.layout.track_items
        && !crate::mutants::on("reconciler-counts-no-record-as-handled")
        && matches!(step, Granule::Handled | Granule::Recovered)
    {
        match record_seen(ctx, claim, attempt, window_passed).await? {
            Seen::ToCome => return Ok(Granule::AwaitingRecord),
            // Made while the end was being handled (the feeder's run landed between): the end
            // is handed to the monitor's handler once more, which moves it. (A record the
            // handler leaves, as for a late failure after a success, stays as it is.)
            Seen::Record { moved: false } => {
                monitor::described_job(ctx, description, "reconciler (DescribeJobs)").await?;
            }
            Seen::Record { moved: true } | Seen::Never => {}
        }
    }
    Ok(step)
}

/// What a window's granule's item record says about an attempt.
enum Seen {
    /// There is a record; `moved`: it is no longer PROCESSING that attempt.
    Record { moved: bool },
    /// No record yet, and the tracker has not passed the window: the feeder's next run makes it.
    ToCome,
    /// No record, and none will come: the tracker passed the window (it predates item records).
    Never,
}

/// The record, read around the tracker so that no record is missed: the feeder makes a window's
/// records before it moves the tracker past the window, so when the tracker says "passed", a
/// record made between our first read and the tracker's is there at a second read. (Reading the
/// record once, then the tracker, could see no record and a passed tracker for a record made in
/// between, and leave it PROCESSING for ever.)
async fn record_seen(
    ctx: &Ctx,
    claim: &WindowClaim,
    attempt: &GranuleProcessingEvent,
    window_passed: &std::cell::Cell<Option<bool>>,
) -> Result<Seen, OneError> {
    if let Some(moved) = record_moved_past(ctx, attempt).await? {
        return Ok(Seen::Record { moved });
    }
    if !window_passed_by_tracker(ctx, claim, window_passed).await? {
        return Ok(Seen::ToCome);
    }
    Ok(match record_moved_past(ctx, attempt).await? {
        Some(moved) => Seen::Record { moved },
        None => Seen::Never,
    })
}

/// Whether the monitor finished with this attempt's end: logged (a failure also routed) and,
/// with item records, the record moved past the attempt.
async fn handled(
    ctx: &Ctx,
    claim: &WindowClaim,
    attempt: &GranuleProcessingEvent,
    window_passed: &std::cell::Cell<Option<bool>>,
) -> Result<bool, OneError> {
    let layout = &ctx.config.layout;
    let facts = layout.id_parser.facts(&attempt.granule_id);
    let success = LogKey::new(
        LogOutcome::Success,
        &facts,
        &attempt.granule_id,
        attempt.attempt,
    );
    // Each read tried again on its own while refused: under throttling, redoing the granule's
    // whole look for one refused read multiplied its calls (1,000 granules at 30%: 9 a granule
    // for the reconciler instead of 3).
    let success_key = success.to_key(&layout.log_prefix);
    let logged = if crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        "reading a success log",
        || ctx.store.get(&success_key),
        crate::ports::StoreError::is_transient,
    )
    .await?
    .is_some()
    {
        true
    } else {
        let failure = success
            .with_outcome(LogOutcome::Failure)
            .to_key(&layout.log_prefix);
        read_json_retrying::<LogRecord>(ctx.store.as_ref(), &failure, "reading a failure log")
            .await?
            .is_some_and(|log| log.value.routed_at.is_some())
    };
    if !logged || !layout.track_items {
        return Ok(logged);
    }
    if crate::mutants::on("reconciler-counts-no-record-as-handled") {
        return Ok(record_moved_past(ctx, attempt).await?.unwrap_or(true));
    }
    // No record: if the tracker has not passed the window, the records are still to come (an
    // earlier run failed after the job ids), and the record it makes at PROCESSING needs this
    // marker to be found. If it has, the window predates item records: the log says it all.
    Ok(
        match record_seen(ctx, claim, attempt, window_passed).await? {
            Seen::Record { moved } => moved,
            Seen::ToCome => false,
            Seen::Never => true,
        },
    )
}

/// [`tracker_passed`], read once per window and pass.
async fn window_passed_by_tracker(
    ctx: &Ctx,
    claim: &WindowClaim,
    window_passed: &std::cell::Cell<Option<bool>>,
) -> Result<bool, OneError> {
    let passed = match window_passed.get() {
        Some(passed) => passed,
        None => tracker_passed(ctx, claim).await?,
    };
    window_passed.set(Some(passed));
    Ok(passed)
}

/// Whether the tracker has moved past every row of the window.
async fn tracker_passed(ctx: &Ctx, claim: &WindowClaim) -> Result<bool, OneError> {
    let tracker =
        crate::repositories::load_tracker(ctx.store.as_ref(), &ctx.config.layout.tracker_key)
            .await?;
    Ok(tracker.value.rows_submitted_of(&claim.inventory) >= claim.start + claim.rows)
}

/// Whether the item record is no longer PROCESSING at this attempt; `None` without a record.
/// A record an earlier pass moved (an end it found by DescribeJobs) is read with `look`: that
/// pass may have died between the record and its history entries, and no SQS redelivery repeats
/// a pass, so this one pays them.
async fn record_moved_past(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
) -> Result<Option<bool>, OneError> {
    // Every record is read with `look`, not only those a pass moved: a monitor whose event was
    // parked in the events DLQ after it died between the record and its entry is never
    // redelivered (chaos found such a gap when only `RECOVERED_BY` records were paid).
    let record = ctx.items().look(&attempt.granule_id, "reconciler").await?;
    Ok(record
        .map(|r| !(r.state == ItemState::Processing && r.attempts.processing == attempt.attempt)))
}
