//! The recovery sweeper (scheduled): items stuck in DOWNLOADING or PROCESSING past their timeout
//! go to the failed state while attempts remain (and back on their path at once), or give up
//! (IGNORE, ABANDONED) when none remain. Before touching a PROCESSING item it asks Batch about the
//! job: alive, it waits; finished, the job goes through the monitor's own handler (its end was
//! never handled: same classification, log and route as its event). It looks only at the
//! in-flight index, never at every item, and takes items one by one: one item's trouble is logged,
//! counted and retried next sweep, never the end of the sweep. A backfill window's granules have
//! no marker of their own during their first attempt: the window's open marker stands for them,
//! and the sweeper reads the window's claim for their ids (the marker stays the reconciler's).
//! An array window recorded at its children's ends (`WindowClaim::records_at_end`) has no record
//! to sweep for a granule in flight: the reconciler describes its children instead.
//!
//! Order of effects, so a crash between two of them strands nothing. A timed-out PROCESSING
//! attempt is an end like any other and goes through the monitor's own handler: its failure log,
//! then the route, then the record (the next sweep finishes a handling that died, as a
//! redelivered event does). A DOWNLOADING item's message is sent before the state is written: if
//! the write is lost, the item is still overdue in the index and the next sweep does it again
//! (the import step re-checks the state, a DLQ notice may repeat).

use super::{Ctx, Step};
use crate::budget::Budget;
use crate::contracts::messages::{ItemNotice, Notice, Outcome};
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::item::ItemRecord;
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::ItemState::{self, *};
use crate::handlers::monitor::MonitorOutcome;
use crate::handlers::HandlerError;
use crate::repositories::RecordError;
use chrono::{DateTime, Utc};
use serde::Serialize;

const BY: &str = "item-sweeper";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    pub examined: u64,
    /// Of those, PROCESSING items named by an open window marker rather than a marker of their
    /// own (a window's first attempts).
    pub window_granules: u64,
    pub within_time: u64,
    /// PROCESSING items past their time whose Batch job is still queued or running.
    pub job_alive: u64,
    /// PROCESSING items whose job Batch reports finished (its event never reached the monitor):
    /// handed to the monitor's handler.
    pub finished_by_batch: u64,
    pub retried: u64,
    pub gave_up: u64,
    /// Index entries for items no longer in that state, removed.
    pub stale_markers: u64,
    /// Item records that are not valid JSON: recorded under the reject prefix, dead-lettered.
    pub corrupt_records: u64,
    /// Items that could not be handled this time (an S3, SQS or Batch error); next sweep retries.
    pub errors: u64,
    /// PROCESSING items past their time whose granule has a success logged (at another attempt,
    /// or at this one with its record left behind): not routed again. A success at this attempt
    /// whose handling died is finished by its redelivery or the reconciler while Batch still
    /// describes the job; past that, the item waits for an operator (`granary items resume`).
    pub already_succeeded: u64,
    /// Items this sweep had no time left for: the next sweep, which starts elsewhere, does them.
    pub out_of_time: u64,
}

impl SweepSummary {
    /// Another campaign's counts added to these.
    fn add(&mut self, other: SweepSummary) {
        let SweepSummary {
            examined,
            window_granules,
            within_time,
            job_alive,
            finished_by_batch,
            retried,
            gave_up,
            stale_markers,
            corrupt_records,
            already_succeeded,
            errors,
            out_of_time,
        } = other;
        self.examined += examined;
        self.window_granules += window_granules;
        self.within_time += within_time;
        self.job_alive += job_alive;
        self.finished_by_batch += finished_by_batch;
        self.retried += retried;
        self.gave_up += gave_up;
        self.stale_markers += stale_markers;
        self.corrupt_records += corrupt_records;
        self.already_succeeded += already_succeeded;
        self.errors += errors;
        self.out_of_time += out_of_time;
    }
}

/// The item sweeper's scheduled invocation: the reconciler, then the sweeper, each within its
/// share of the invocation's time, so that a long reconciler pass never leaves the sweeper no
/// time at all. The reconciler gets half; the sweeper what is left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScheduledPass {
    pub reconcile: crate::handlers::reconciler::ReconcileSummary,
    pub sweep: SweepSummary,
}

pub async fn scheduled_pass(
    ctx: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<ScheduledPass, HandlerError> {
    let reconcile = crate::handlers::reconciler::reconcile_within(ctx, now, &budget.part(1, 2))
        .await
        .map_err(|e| HandlerError::during("reconciler", e))?;
    let sweep = sweep_within(ctx, now, budget)
        .await
        .map_err(|e| HandlerError::during("sweeper", e))?;
    Ok(ScheduledPass { reconcile, sweep })
}

/// One sweep with no time limit (an operator's command, a test).
pub async fn sweep(ctx: &Ctx, now: DateTime<Utc>) -> Result<SweepSummary, HandlerError> {
    sweep_within(ctx, now, &Budget::unlimited()).await
}

/// One sweep of every campaign's items (its own first, then the unnamed one and every one
/// under `campaigns/`, as the reconciler visits them), within `budget`.
pub async fn sweep_within(
    ctx: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<SweepSummary, HandlerError> {
    let mut summary = SweepSummary::default();
    let mut visits = crate::handlers::CampaignVisits::of(ctx).await?;
    while let Some(v) = visits.next(ctx, budget) {
        match sweep_campaign(&v.ctx, now, &v.share).await {
            Ok(s) => summary.add(s),
            Err(e) => {
                tracing::warn!(campaign = ?v.campaign, error = %e, "cannot sweep this campaign now");
                summary.errors += 1;
            }
        }
    }
    tracing::info!(?summary, "sweep finished");
    Ok(summary)
}

/// One campaign's items within `budget`: it starts at a different item each time and stops
/// starting new ones once the time is spent (`out_of_time`).
async fn sweep_campaign(
    ctx: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<SweepSummary, HandlerError> {
    let mut summary = SweepSummary::default();
    let mut marked_items = ctx.items().inflight().await?;
    let total = marked_items.len();
    marked_items.rotate_left(crate::budget::first_of(total));
    for (looked, (marked, id)) in marked_items.into_iter().enumerate() {
        if budget.spent() {
            summary.out_of_time += (total - looked) as u64;
            break;
        }
        summary.examined += 1;
        if let Err(e) = sweep_one(ctx, marked, &id, Index::Marker, now, &mut summary).await {
            tracing::warn!(item_id = %id, error = %e, "cannot sweep this item now; the next sweep tries again");
            summary.errors += 1;
        }
    }
    // A window's granules have no marker of their own while their first attempt runs: the
    // window's open marker stands for them all.
    let granules = if budget.spent() {
        Vec::new()
    } else {
        window_granules(ctx, &mut summary).await?
    };
    let total = granules.len();
    for (looked, id) in granules.into_iter().enumerate() {
        if budget.spent() {
            summary.out_of_time += (total - looked) as u64;
            break;
        }
        summary.examined += 1;
        if let Err(e) = sweep_one(ctx, Processing, &id, Index::Window, now, &mut summary).await {
            tracing::warn!(item_id = %id, error = %e, "cannot sweep this item now; the next sweep tries again");
            summary.errors += 1;
        }
    }
    if summary != SweepSummary::default() {
        tracing::info!(campaign = ?ctx.campaign(), ?summary, "campaign swept");
    }
    Ok(summary)
}

/// Which index named the item to the sweeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    /// Its own in-flight marker, which the sweeper removes once the record no longer justifies it.
    Marker,
    /// An open window marker (the reconciler's to remove): only a record still in the state its
    /// window's creation left it in is the sweeper's business.
    Window,
}

/// The granules of every open window whose records were made with it (`Windows::open`). An
/// array window's records are made at its children's ends, past the window's state: nothing to
/// sweep, and reading each was a GET a granule for nothing.
async fn window_granules(
    ctx: &Ctx,
    summary: &mut SweepSummary,
) -> Result<Vec<GranuleId>, HandlerError> {
    if !ctx.config.layout.track_items {
        return Ok(Vec::new());
    }
    let open = ctx.windows().open().await.map_err(RecordError::from)?;
    for (inventory, start, e) in &open.unreadable {
        tracing::warn!(inventory, start, error = %e, "cannot read this window's claim; the next sweep tries again");
        summary.errors += 1;
    }
    Ok(open
        .windows
        .into_iter()
        .filter(|w| !w.records_at_end)
        .flat_map(|w| w.granules.into_iter())
        .collect())
}

async fn sweep_one(
    ctx: &Ctx,
    marked: ItemState,
    id: &GranuleId,
    index: Index,
    now: DateTime<Utc>,
    summary: &mut SweepSummary,
) -> Result<(), HandlerError> {
    let policy = ctx.config.item_retry_policy();
    let Some(record) = record_to_sweep(ctx, marked, id, index, summary).await? else {
        return Ok(());
    };
    let Some(path) = policy.timeout_recovery(record.state, &record.attempts, now) else {
        summary.within_time += 1;
        return Ok(());
    };
    if record.state == Processing {
        if let Some(job_id) = &record.job_id {
            match job_end(ctx, job_id).await? {
                JobSeen::Alive => {
                    tracing::info!(item_id = %id, job_id, "past its time but the job is alive");
                    summary.job_alive += 1;
                    return Ok(());
                }
                JobSeen::Finished => {
                    summary.finished_by_batch += 1;
                    return Ok(());
                }
                JobSeen::Unknown => {}
            }
        }
    }
    let timeout = if record.state == Downloading {
        policy.download_timeout
    } else {
        policy.processing_timeout
    };
    let gives_up = path.last().is_some_and(|s| s.is_terminal());
    if record.state == Processing {
        return end_timed_out_processing(ctx, id, &record, gives_up, timeout, summary).await;
    }
    time_out_outside_batch(ctx, id, &record, &path, timeout, summary).await
}

/// The item record the index names, when it is still the sweeper's business: `None` once it is
/// handled here (a corrupt record set aside, a stale marker removed) or is none of the sweeper's.
async fn record_to_sweep(
    ctx: &Ctx,
    marked: ItemState,
    id: &GranuleId,
    index: Index,
    summary: &mut SweepSummary,
) -> Result<Option<ItemRecord>, HandlerError> {
    let items = ctx.items();
    let current = match items.get(id).await {
        Ok(c) => c,
        Err(RecordError::Repository(crate::repositories::RepositoryError::Corrupt {
            key,
            source,
        })) => {
            ctx.reject_corrupt_record(&key, &source.to_string(), "item sweeper")
                .await
                .map_err(HandlerError::from)?;
            items.clear_inflight(marked, id).await?;
            summary.corrupt_records += 1;
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    if index == Index::Window {
        // Not created by the window (yet), or past the state it left it in: nothing to sweep.
        if !current
            .as_ref()
            .is_some_and(|c| c.value.state == marked && c.value.in_batch_state())
        {
            return Ok(None);
        }
        summary.window_granules += 1;
    }
    let Some(current) = current else {
        items.clear_inflight(marked, id).await?;
        summary.stale_markers += 1;
        return Ok(None);
    };
    let record = current.value;
    if record.state != marked {
        // The record moved on (it holds the entries of its move): read again right before
        // the marker goes, in case it came back meanwhile.
        let now_there = items.look(id).await?;
        // Moved back into the marked state meanwhile (a retry): the marker is its again.
        if now_there.is_some_and(|r| r.state == marked) {
            return Ok(None);
        }
        items.clear_inflight(marked, id).await?;
        summary.stale_markers += 1;
        return Ok(None);
    }
    Ok(Some(record))
}

/// A PROCESSING item past its time whose job Batch does not know: its attempt ended through the
/// monitor's own handler ([`timed_out_attempt`]), and counted by the route its log took.
async fn end_timed_out_processing(
    ctx: &Ctx,
    id: &GranuleId,
    record: &ItemRecord,
    gives_up: bool,
    timeout: chrono::Duration,
    summary: &mut SweepSummary,
) -> Result<(), HandlerError> {
    let attempt = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: record.attempts.processing,
    };
    let ended = timed_out_attempt(ctx, attempt, record.job_id.as_deref(), gives_up, timeout);
    match ended.await? {
        MonitorOutcome::AlreadySucceeded { by_attempt } => {
            tracing::warn!(item_id = %id, by_attempt, "timed out, but its granule has a success logged: not routed, the record follows the success");
            summary.already_succeeded += 1;
        }
        // The route the attempt's log took (an earlier handling's, if one logged it first).
        MonitorOutcome::Routed {
            route: crate::domain::classify::Route::RetryQueue,
        } => summary.retried += 1,
        MonitorOutcome::Routed { .. } => summary.gave_up += 1,
        // Routed by an earlier handling (a sweep that died after its send): counted as now.
        _ if gives_up => summary.gave_up += 1,
        _ => summary.retried += 1,
    }
    Ok(())
}

/// An item past its time outside Batch (DOWNLOADING): sent on its way again, or to the DLQ once
/// it gives up, then moved along `path`.
async fn time_out_outside_batch(
    ctx: &Ctx,
    id: &GranuleId,
    record: &ItemRecord,
    path: &[ItemState],
    timeout: chrono::Duration,
    summary: &mut SweepSummary,
) -> Result<(), HandlerError> {
    let items = ctx.items();
    let (state, seq) = (record.state, record.seq);
    let gives_up = path.last().is_some_and(|s| s.is_terminal());
    // The message first (see the module's note on order), then the state.
    if gives_up {
        let terminal = path.last().copied().unwrap_or(Ignore);
        dead_letter(ctx, id, terminal, timeout).await?;
    } else {
        ctx.enqueue(id, Some(Step::Download)).await?;
    }
    if crate::mutants::on("sweeper-timeout-path-in-steps") {
        let mut expected = (state, seq);
        for to in path {
            let (from, at) = expected;
            let moved = items
                .advance_steps(id, BY, |r| {
                    decisions::on_timeout(r, from, at, &[*to], timeout.num_seconds())
                })
                .await?;
            match moved.record() {
                Some(r) if r.state == *to => expected = (r.state, r.seq),
                _ => break,
            }
        }
    } else {
        items
            .advance_steps(id, BY, |r| {
                decisions::on_timeout(r, state, seq, path, timeout.num_seconds())
            })
            .await?;
    }
    if gives_up {
        summary.gave_up += 1;
    } else {
        summary.retried += 1;
    }
    Ok(())
}

/// Gave-up items are reported on the failure DLQ like any other failure an operator must see; the
/// item record (state, history with the reason) is the durable record.
async fn dead_letter(
    ctx: &Ctx,
    id: &GranuleId,
    state: ItemState,
    timeout: chrono::Duration,
) -> Result<(), HandlerError> {
    let reason = format!(
        "timed out after {}s; attempts exhausted ({state})",
        timeout.num_seconds()
    );
    let notice = ItemNotice {
        item_id: id.clone(),
        state,
        campaign: ctx.campaign().cloned(),
    };
    ctx.failure_dlq
        .send(notice.to_message(&Notice::new(Outcome::TimedOut, reason))?)
        .await?;
    Ok(())
}

mod batch_look;
use batch_look::{job_end, timed_out_attempt, JobSeen};

#[cfg(test)]
mod tests;
