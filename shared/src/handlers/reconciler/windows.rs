//! The reconciler's part for windows: the feeder's first attempts have one open marker per window
//! (`domain::window`), not one per granule, so nothing removes it granule by granule. The marker
//! stays until every granule of the window has ended and its end has been handled; a granule whose
//! end the monitor never saw is handed to it here, as its event would have been.
//!
//! "Handled" is read, not written: with item records on, the record has left PROCESSING at that
//! attempt (every writer that moves it there has logged and routed first); otherwise, or while
//! the record is behind, the attempt's success log exists, or its failure log exists and says it
//! was routed. Those are GETs (one a granule when the record answers), about a twelfth of a PUT's
//! price, so looking at a window again on each pass costs little; handing an already-handled end
//! to the monitor would cost a conditional PUT per granule. The store is read first, and Batch is
//! asked (DescribeJobs, 100 jobs a call) only of the granules the store does not show handled:
//! DescribeJobs is free but shares Batch's API throttle with SubmitJob, and most granules a pass
//! looks at were handled (a granule found unhandled is read once more in its own look). A look
//! writes nothing: a record holds the history entries it has not written out (`Items::standing`).
//!
//! A granule's item record may come after its end: the feeder makes a window's records after
//! its jobs are submitted, and a job can end first; an array window of first attempts leaves
//! them to its children's ends (`WindowClaim::records_at_end`), so its granules have none until
//! then, and only this reconciler (describing the child) moves one whose event was lost. The monitor makes a record still missing
//! when it handles an end (`item_sync::finished`), so the submitter's late creation finds it and
//! changes nothing. A logged end with no record, or with its record still PROCESSING the
//! attempt, therefore means the monitor died between the log and the record: the end is handed
//! on again, never counted as handled (no record would move a record made after it).

use super::ReconcileSummary;
use crate::budget::Budget;
use crate::domain::batch_event::JobStatus;
use crate::domain::claim::JobsClaim;
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::window_key;
use crate::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use crate::domain::window::{WindowClaim, WindowProgress};
use crate::handlers::monitor::{self, MonitorOutcome};
use crate::handlers::Ctx;
use crate::handlers::HandlerError;
use crate::ports::{JobDescription, PutCondition};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::HashMap;

mod granules;
pub(crate) use granules::end_logged;
use granules::{granule, handled, Logged};

/// How often one granule is looked at within a pass before the pass leaves the window open.
const GRANULE_TRIES: u32 = 5;

/// Granules of one window looked at concurrently (S3 GETs and the monitor's handler for ends
/// that were lost).
const GRANULE_LOOKS_AT_ONCE: usize = 16;

/// Where one granule of a window stands.
#[derive(Clone, Copy)]
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
    /// Not looked at: the pass's time was spent (the next pass does it).
    NotLooked,
    /// Not looked at: Batch refused the DescribeJobs of its page or one before (the next pass
    /// asks again; the refusal is counted once, as the pass's error).
    Unasked,
}

/// A granule to look at this pass.
struct ToLook {
    /// Its place in the window.
    place: usize,
    attempt: GranuleProcessingEvent,
    /// Its job: recorded by the claim, or found by its name.
    job_id: Option<String>,
    /// Batch's description of the job, if it was asked.
    description: Option<JobDescription>,
    /// The store showed its end handled already.
    handled: bool,
    /// An unreadable description of its job ends it here
    /// (`reconciler::unreadable_description_ends_here`).
    unreadable_ended: bool,
}

/// Looks at every granule of the window at `(inventory, start)`; removes the window's marker once
/// all of them have ended and been handled (or the window claim is gone). `own`: the window is
/// the campaign the stack feeds, whose feeder finishes it if it was left half-submitted; a
/// window of another campaign is finished here (`feeder::finish_claimed_window`), or nothing
/// would.
pub(super) async fn reconcile_window(
    ctx: &Ctx,
    (inventory, start): (&str, u64),
    own: bool,
    now: DateTime<Utc>,
    summary: &mut ReconcileSummary,
    budget: &Budget,
) -> Result<(), HandlerError> {
    let claim_key = window_key(&ctx.config.layout.claim_prefix, inventory, start);
    let Some(claim) = window_claim(ctx, &claim_key, own, summary, budget).await? else {
        ctx.windows().close(inventory, start).await?;
        summary.closed += 1;
        return Ok(());
    };
    // A claim whose look is still pending has no job (none is submitted before the look is
    // written back): nothing to look up, and progress kept by place would name other granules
    // once the look drops some. Past its lease its run is dead: the marker goes, as for any
    // claim left with no job, and the feeder's takeover (another campaign's: the finishing
    // above) writes it again before the look.
    if claim.screen_pending {
        let lease = chrono::Duration::from_std(ctx.config.leases.claim_lease)
            .unwrap_or(chrono::Duration::MAX);
        if now.signed_duration_since(claim.lease.claimed_at) > lease {
            ctx.windows().close(inventory, start).await?;
            summary.closed += 1;
        } else {
            summary.not_submitted += 1;
        }
        return Ok(());
    }
    // What earlier passes saw handled: those granules are not looked at again.
    let marker = ctx.windows().open_marker(inventory, start).await?;
    let mut progress = marker
        .as_ref()
        .map(|m| WindowProgress::from_marker(&m.body))
        .unwrap_or_default();
    let Some(job_ids) = window_jobs(ctx, &claim, &progress, budget).await? else {
        // The pass's time ran out among its lookups by name: the next pass takes it up.
        summary.out_of_time += 1;
        return Ok(());
    };
    // An array window whose array Batch says is still under way: one DescribeJobs for the whole
    // window, and the granules wait for a later pass (`look_at_each_granule`).
    if let Some(parent) = claim.array_job_id.as_deref().filter(|_| claim.array) {
        let waiting = job_ids.iter().filter(|job| job.is_some()).count() as u64;
        let waited = now.signed_duration_since(claim.recorded_at());
        if waiting > 0 && !budget.spent() && waited < ARRAY_WAIT_LIMIT {
            let status = ctx.jobs.describe(parent).await?.map(|d| d.summary.status);
            if !look_at_each_granule(status, waited) {
                summary.awaiting_array += waiting;
                return Ok(());
            }
        }
    }
    let listed_in = claim.records_at_end.then_some(claim_key.as_str());
    let (looked, refused) =
        look_at_window(ctx, &claim, &progress, job_ids, listed_in, budget).await?;
    if let Some(e) = refused {
        tracing::warn!(inventory, start, error = %e, "Batch refused a DescribeJobs; the window's granules not yet asked about wait for the next pass");
        summary.errors += 1;
    }
    let (open, newly_handled) = tally(looked, &mut progress, summary);
    if open == 0 {
        ctx.windows().close(inventory, start).await?;
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
                let kept = ctx
                    .windows()
                    .keep_progress(inventory, start, body, condition)
                    .await;
                if let Err(e) = kept {
                    tracing::warn!(inventory, start, error = %e, "window progress not kept; the next pass looks again");
                }
            }
            Err(e) => tracing::warn!(inventory, start, error = %e, "window progress not encoded"),
        }
    }
    Ok(())
}

/// The window's claim, `None` once it is gone. A window of another campaign left
/// half-submitted is finished here first, and its claim read again for the jobs the takeover
/// recorded.
async fn window_claim(
    ctx: &Ctx,
    claim_key: &str,
    own: bool,
    summary: &mut ReconcileSummary,
    budget: &Budget,
) -> Result<Option<WindowClaim>, HandlerError> {
    let Some(claim) = ctx.windows().claim_at(claim_key).await? else {
        return Ok(None);
    };
    if own || claim.is_submitted() || budget.spent() {
        return Ok(Some(claim));
    }
    // A held feeder submits nothing, and neither does its takeover: finishing another
    // campaign's window submits that window's missing jobs.
    if let Some(hold) = ctx.hold().read().await? {
        tracing::info!(claim_key, hold = %hold.describe(), "the feeder is held: this window of another campaign is finished once it is released");
        summary.held += 1;
        return Ok(Some(claim));
    }
    match crate::handlers::feeder::finish_claimed_window(ctx, &claim).await {
        Ok(true) => summary.taken_over += 1,
        // Its lease runs (its feeder may be at it): the next pass looks again.
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(claim_key, error = %e, "cannot finish this window of another campaign now");
            summary.errors += 1;
        }
    }
    Ok(Some(
        ctx.windows().claim_at(claim_key).await?.unwrap_or(claim),
    ))
}

/// Each granule's job: recorded, or (a SubmitJob answer lost) found by its deterministic name;
/// `None` for a granule an earlier pass saw handled, or with no job. An array window's granules
/// share one name: it is looked up once. `None` for the whole window when the pass's time ran
/// out before every lookup was made (a window of 3,750 single jobs is as many ListJobs calls).
async fn window_jobs(
    ctx: &Ctx,
    claim: &WindowClaim,
    progress: &WindowProgress,
    budget: &Budget,
) -> Result<Option<Vec<Option<String>>>, HandlerError> {
    let mut job_ids: Vec<Option<String>> = Vec::with_capacity(claim.granules.len());
    let mut found_by_name: HashMap<String, Option<String>> = HashMap::new();
    for i in 0..claim.granules.len() {
        job_ids.push(match claim.job_id(i) {
            _ if progress.is_handled(i) => None,
            Some(id) => Some(id),
            None => match claim.lookup_name(i) {
                None => None,
                Some(name) => {
                    let found = match found_by_name.get(&name) {
                        Some(found) => found.clone(),
                        None if budget.spent() => return Ok(None),
                        None => {
                            let found = ctx.jobs.find_by_name(&name).await?.map(|job| job.job_id);
                            found_by_name.insert(name, found.clone());
                            found
                        }
                    };
                    found.map(|job| claim.job_of_found(i, &job))
                }
            },
        });
    }
    Ok(Some(job_ids))
}

/// Each granule's place in the window, its attempt, and what its look found.
type Looked = Vec<(usize, GranuleProcessingEvent, Result<Granule, HandlerError>)>;

/// What this pass finds of each granule earlier passes did not see handled, and the refused
/// DescribeJobs that left the rest unasked, if one was.
///
/// The store first: a granule whose end was handled needs no DescribeJobs. Most granules a pass
/// looks at were handled (their events came), and describing a window's every child was 100
/// DescribeJobs calls for 10,000 children a pass, which share Batch's API throttle with
/// SubmitJob (a ten-million-granule campaign's last pass described every child).
///
/// The rest are described and looked at one DescribeJobs page at a time: a description is used
/// right after it is taken, and a pass holds at most a page of them. Describing a 10,000-child
/// window whole held every child's detail at once (on moto, 536 of a 2,500-granule campaign's
/// 548 MB peak; BENCHMARKS.md, "The array campaign on the emulator").
async fn look_at_window(
    ctx: &Ctx,
    claim: &WindowClaim,
    progress: &WindowProgress,
    job_ids: Vec<Option<String>>,
    listed_in: Option<&str>,
    budget: &Budget,
) -> Result<(Looked, Option<HandlerError>), HandlerError> {
    let already: Vec<bool> = futures::stream::iter(claim.attempts().zip(&job_ids).enumerate())
        .map(|(i, (attempt, job_id))| async move {
            if progress.is_handled(i) || job_id.is_none() || budget.spent() {
                return false;
            }
            // A failed read only means the granule is looked at the long way below.
            matches!(handled(ctx, &attempt).await, Ok(Some(Logged::AndRecorded)))
        })
        .buffered(GRANULE_LOOKS_AT_ONCE)
        .collect()
        .await;
    // Those shown handled, or with no job, need no description; the rest are described.
    let (to_describe, settled): (Vec<ToLook>, Vec<ToLook>) = claim
        .attempts()
        .zip(job_ids)
        .zip(already)
        .enumerate()
        .filter(|(i, _)| !progress.is_handled(*i))
        .map(|(place, ((attempt, job_id), handled))| ToLook {
            description: None,
            unreadable_ended: super::unreadable_description_ends_here(
                claim.records_job(place),
                claim.records_at_end,
                ctx.config.layout.track_items,
            ),
            place,
            attempt,
            job_id,
            handled,
        })
        .partition(|look| !look.handled && look.job_id.is_some());
    let mut looked = look_at_granules(ctx, settled, listed_in, budget).await;
    let mut pages = to_describe.into_iter().peekable();
    // Each array parent is described once a pass, not once a page (a window none of whose
    // children Batch describes would otherwise cost two calls a page).
    let mut parents = crate::ports::job_runner::Parents::default();
    let mut refused = None;
    while pages.peek().is_some() {
        let mut page: Vec<ToLook> = pages.by_ref().take(crate::ports::DESCRIBE_BATCH).collect();
        // The page, and those after it, are left open for the next pass: with the budget spent,
        // or once Batch refused a DescribeJobs (the pages before keep what their looks did).
        let unasked = if refused.is_some() {
            Some(Granule::Unasked)
        } else if budget.spent() {
            Some(Granule::NotLooked)
        } else {
            match describe_page(ctx, &mut page, &mut parents).await {
                Ok(()) => None,
                Err(e) => {
                    refused = Some(e);
                    Some(Granule::Unasked)
                }
            }
        };
        match unasked {
            Some(left) => looked.extend(
                page.into_iter()
                    .map(|look| (look.place, look.attempt, Ok(left))),
            ),
            None => looked.extend(look_at_granules(ctx, page, listed_in, budget).await),
        }
    }
    Ok((looked, refused))
}

/// DescribeJobs for one page of granules (at most one call's ids); a child Batch does not
/// describe yet is answered from its parent.
async fn describe_page(
    ctx: &Ctx,
    page: &mut [ToLook],
    parents: &mut crate::ports::job_runner::Parents,
) -> Result<(), HandlerError> {
    let ids: Vec<String> = page.iter().filter_map(|look| look.job_id.clone()).collect();
    let mut described: HashMap<String, JobDescription> = parents
        .describe(ctx.jobs.as_ref(), &ids)
        .await?
        .into_iter()
        .map(|d| (d.summary.job_id.clone(), d))
        .collect();
    for look in page {
        look.description = look.job_id.as_ref().and_then(|j| described.remove(j));
    }
    Ok(())
}

/// What each granule's look found. Granules are looked at a few at a time: a pass over a large
/// window under throttling would otherwise add up every granule's backoff one after another.
async fn look_at_granules(
    ctx: &Ctx,
    to_look: Vec<ToLook>,
    listed_in: Option<&str>,
    budget: &Budget,
) -> Looked {
    futures::stream::iter(to_look)
        .map(|look| async move {
            let step = match look.job_id {
                _ if look.handled => Ok(Granule::Handled),
                _ if budget.spent() => Ok(Granule::NotLooked),
                None => Ok(Granule::NotSubmitted),
                // The window closes only in a pass where every granule could be looked at: a
                // call throttled past the SDK's retries is tried again here, or one unlucky
                // granule would keep a large window open pass after pass.
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
                                &look.attempt,
                                &job_id,
                                look.description.as_ref(),
                                listed_in,
                                look.unreadable_ended,
                            )
                        },
                        |_| true,
                    )
                    .await
                }
            };
            (look.place, look.attempt, step)
        })
        .buffered(GRANULE_LOOKS_AT_ONCE)
        .collect()
        .await
}

/// Counts what the looks found into the pass's summary and the window's progress: how many
/// granules are still open, and how many this pass saw handled for the first time.
fn tally(
    looked: Looked,
    progress: &mut WindowProgress,
    summary: &mut ReconcileSummary,
) -> (u64, u64) {
    let (mut open, mut newly_handled) = (0u64, 0u64);
    for (i, attempt, step) in looked {
        match step {
            Ok(Granule::Handled | Granule::Recovered | Granule::UnknownToBatch) => {
                newly_handled += u64::from(progress.mark(i));
            }
            _ => open += 1,
        }
        match step {
            Ok(Granule::Handled) => summary.handled += 1,
            Ok(Granule::Recovered) => summary.recovered += 1,
            Ok(Granule::NotSubmitted) => summary.not_submitted += 1,
            Ok(Granule::StillRunning) => summary.still_running += 1,
            Ok(Granule::UnknownToBatch) => summary.unknown_to_batch += 1,
            Ok(Granule::NotLooked) => summary.out_of_time += 1,
            Ok(Granule::Unasked) => {}
            Err(e) => {
                tracing::warn!(granule_id = %attempt.granule_id, error = %e, "cannot reconcile this granule of the window now");
                summary.errors += 1;
            }
        }
    }
    (open, newly_handled)
}

/// How long an array window's granules may wait for their array to end before a pass looks at
/// each of them all the same: a day. Well inside the "at least 7 days" Batch keeps an ended job
/// (AWS Batch user guide, "Job states"), so a child whose event was lost is still described as
/// itself, not answered from its parent; and past the four hours (24 at most) the job queue lets
/// a job wait RUNNABLE on capacity (`template.yaml`, `jobStateTimeLimitActions`). An array held
/// longer by what that cannot cancel (an INVALID compute environment, capacity that never
/// comes) is looked at granule by granule on every pass, as every window was before.
pub(crate) const ARRAY_WAIT_LIMIT: chrono::Duration = chrono::Duration::hours(24);

/// Whether a pass looks at an array window's granules one by one (reading their records and
/// describing the children not shown handled), from its array job's status as Batch describes it
/// (`None`: not described) and how long ago the window was submitted. Batch ends an array's
/// parent only once every child has ended: the published details of ended parents count every
/// child SUCCEEDED or FAILED in `arrayProperties.statusSummary`, and a PENDING parent counts
/// children still RUNNABLE (AWS Batch user guide, "Array jobs"; `../shared/real-batch-events/`
/// 03, 12 and 29). While it is under way and younger than [`ARRAY_WAIT_LIMIT`], a pass leaves
/// the window to a later one after that one DescribeJobs, instead of reading every granule's
/// record and describing its children (a window waiting behind a long queue cost 10,000 GETs a
/// pass); a child's lost event waits for its array's end, or the limit. A parent Batch does not
/// describe says nothing: the granules are looked at (a forgotten job is dead-lettered there).
pub(super) fn look_at_each_granule(parent: Option<JobStatus>, waited: chrono::Duration) -> bool {
    parent.is_none_or(JobStatus::is_terminal) || waited >= ARRAY_WAIT_LIMIT
}
