//! The queue feeder: meters work from the inventories into Batch. This module is the run: the
//! event, the summary, the loop over inventories and windows under the tracker; [`window`] is
//! one window (read its rows, claim and submit them, make their item records).

mod retries;
mod window;
use window::{feed_window, open_inventory, PAGE_MAP_LOOKAHEAD_ROWS};
pub use window::{finish_claimed_window, window_ceiling, ARRAY_WINDOW_ROWS, BATCH_SUBMITS_PER_SEC};

use super::Ctx;
use crate::adapters::parquet::InventoryError;
use crate::budget::Budget;
use crate::domain::tracker::Tracker;
use crate::handlers::HandlerError;
use crate::ports::StoreError;
use crate::repositories::{load_tracker, save_tracker, RepositoryError, Versioned};
use crate::retry::{again, Backoff};
use serde::{Deserialize, Serialize};

/// The scheduled event: how many granules to submit this tick.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeederEvent {
    pub granule_submit_count: u64,
}

/// Why a window stopped the run short.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// Someone else is on it (a run in flight holds the window, another run moved the tracker):
    /// the next run goes on; nothing is wrong.
    Wait(String),
    /// Calls kept failing: the next run tries again, and this one reports a stall.
    Fail(String),
}

impl Stop {
    fn why(&self) -> &str {
        match self {
            Stop::Wait(why) | Stop::Fail(why) => why,
        }
    }
}

/// What one feeder run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeederSummary {
    pub submitted: u64,
    /// Rows whose job an earlier run had already submitted (a rerun after a crash).
    pub already_submitted: u64,
    /// Half-done claims whose job was found in Batch and recorded.
    pub recovered: u64,
    /// Rows with an unusable granule id, sent to the failure DLQ.
    pub rejected: u64,
    /// Rows repeating a granule listed earlier in the same window (it is submitted once).
    pub repeated: u64,
    /// Granules granary already had a record for (listed by an earlier window or inventory, or
    /// imported): not submitted again. With item records off, such a granule is submitted once
    /// per listing.
    pub known_before: u64,
    pub active_jobs: u64,
    /// Parked retries this run's window of retries submitted (or found submitted by a run
    /// before it): not rows of an inventory (`GRANARY_ARRAY_RETRIES`).
    #[serde(default)]
    pub retries_submitted: u64,
    /// Parked retries' markers found stale (a window had taken the granule) and removed.
    #[serde(default)]
    pub stale_parked: u64,
    /// Why the run submitted nothing at all (threshold, done, ...).
    pub early_exit: Option<String>,
    /// Why the run stopped before its count (a claim in flight, a submit error, a tracker conflict).
    pub stopped: Option<String>,
    pub rows_submitted_total: u64,
    pub rows_known_total: u64,
    /// Rows the tracker moved past in this run (a window settled in part is not moved past,
    /// and its next run settles it): the feeder's progress.
    pub rows_moved_past: u64,
    pub inventories_complete: bool,
}

impl FeederSummary {
    /// Rows this run settled one way or another (submitted, found submitted, set aside, or
    /// known before): the tracker moved past them.
    pub fn rows_settled(&self) -> u64 {
        self.submitted
            + self.already_submitted
            + self.recovered
            + self.rejected
            + self.repeated
            + self.known_before
    }
}

pub async fn run(ctx: &Ctx, event: FeederEvent) -> Result<FeederSummary, HandlerError> {
    let ran = run_once(ctx, event).await;
    match &ran {
        Ok(summary) => record_metrics(ctx, summary),
        // A stalled run saved what it did: its progress counts too (none, when it stalled at once).
        Err(HandlerError::Stalled { summary, .. }) => record_metrics(ctx, summary),
        Err(_) => {}
    }
    ran
}

/// A run's progress, when it read the tracker: the rows it settled (the tracker moved past them:
/// submitted, found submitted, known before, set aside) and the rows left (what it submitted
/// is counted per window, as it happens). A run that exits early (a hold, a full queue) reports
/// neither, so the feeder-stalled alarm (rows left, none settled) stays quiet while granary waits
/// on purpose.
fn record_metrics(ctx: &Ctx, summary: &FeederSummary) {
    use crate::domain::metrics::Metric;
    if summary.early_exit.is_none() && summary.rows_known_total > 0 {
        ctx.metrics.observe(
            Metric::FeederRowsSettled,
            &[],
            summary.rows_moved_past as f64,
        );
        let left = summary
            .rows_known_total
            .saturating_sub(summary.rows_submitted_total);
        ctx.metrics
            .observe(Metric::FeederRowsLeft, &[], left as f64);
    }
}

async fn run_once(ctx: &Ctx, event: FeederEvent) -> Result<FeederSummary, HandlerError> {
    if event.granule_submit_count == 0 {
        return Err(HandlerError::BadEvent(
            "granule_submit_count must be at least 1".to_owned(),
        ));
    }
    let mut summary = FeederSummary::default();
    if let Some(hold) = current_hold(ctx).await? {
        summary.early_exit = Some(hold.describe());
        tracing::info!(
            reason = hold.reason,
            held_by = hold.held_by,
            "feeder held: exiting early"
        );
        return Ok(summary);
    }
    // Before ListJobs: a run that waits on downstream needs no count of its jobs.
    if let Some(why) = downstream_waits(ctx).await? {
        tracing::info!(reason = why, "feeder waits on downstream: exiting early");
        summary.early_exit = Some(why);
        return Ok(summary);
    }
    let active = again(
        Backoff::IN_RUN,
        "counting active jobs",
        || ctx.jobs.count_active(ctx.config.feeder.max_active_jobs),
        |_| true,
    )
    .await?;
    summary.active_jobs = active.total;
    if active.total >= ctx.config.feeder.max_active_jobs {
        summary.early_exit = Some(format!(
            "{} active jobs, at or over the threshold of {}",
            active.total, ctx.config.feeder.max_active_jobs
        ));
        tracing::info!(
            active = active.total,
            threshold = ctx.config.feeder.max_active_jobs,
            "feeder exiting early"
        );
        return Ok(summary);
    }
    let tracker = again(
        Backoff::IN_RUN,
        "reading the tracker",
        || load_tracker(ctx.store.as_ref(), &ctx.config.layout.tracker_key),
        RepositoryError::is_transient,
    )
    .await?;
    feed(ctx, event.granule_submit_count, tracker, summary).await
}

/// Why the feeder waits on the queue downstream of granary this run (`domain::downstream`), if
/// one is configured and holds more than its limit. A depth that cannot be read fails the run:
/// feeding blind is what the operator configured the gate to prevent.
pub async fn downstream_waits(ctx: &Ctx) -> Result<Option<String>, HandlerError> {
    let (Some(gate), Some(queue)) = (&ctx.config.feeder.downstream, &ctx.downstream) else {
        return Ok(None);
    };
    let depth = again(
        Backoff::IN_RUN,
        "reading the downstream queue's depth",
        || queue.depth(),
        |_| true,
    )
    .await?;
    Ok(crate::domain::downstream::feeder_waits(gate, depth.visible))
}

/// Feeds up to `count` rows starting where `tracker` says, then advances it with If-Match.
/// Public so tests can hand it a stale tracker.
pub async fn feed(
    ctx: &Ctx,
    count: u64,
    mut tracker: Versioned<Tracker>,
    mut summary: FeederSummary,
) -> Result<FeederSummary, HandlerError> {
    let listed = again(
        Backoff::IN_RUN,
        "listing the inventories",
        || ctx.store.list(&ctx.config.layout.inventory_prefix),
        StoreError::is_transient,
    )
    .await?;
    let rows_before = tracker.value.rows_submitted();
    let added = tracker.value.add_inventories(
        listed
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k.ends_with(".parquet")),
    );
    let mut changed = added > 0 || tracker.etag.is_none();
    let mut remaining = count;
    let mut stalled = None;
    let timeout = ctx.config.leases.function_timeout;
    let ceiling = if ctx.config.feeder.array_windows {
        ARRAY_WINDOW_ROWS
    } else {
        window_ceiling(timeout)
    };
    // No new window once this is spent: the one in hand, at most `ceiling` rows, still fits.
    let budget = Budget::of_invocation(timeout).part(1, 2);
    // The parked retries first, they are older than any row still to come: this campaign's,
    // and any other campaign's the requeuer parked before the stack switched (taken whether or
    // not GRANARY_ARRAY_RETRIES is still on: nothing else submits a parked retry).
    let (moved, stop) = retries::feed_retries(ctx, &mut tracker, &mut summary, ceiling).await?;
    changed |= moved;
    let mut windows = u32::from(summary.retries_submitted > 0);
    match stop {
        // A window of retries in another run's hands holds nothing else up.
        Some(Stop::Wait(why)) => summary.stopped = Some(why),
        Some(Stop::Fail(why)) => {
            summary.stopped = Some(why.clone());
            stalled = Some(why);
            remaining = 0;
        }
        None => {}
    }
    retries::feed_other_campaigns(ctx, &mut summary, ceiling).await?;
    while remaining > 0 {
        let Some(current) = tracker.value.current().cloned() else {
            break;
        };
        if windows > 0 && budget.spent() {
            summary.stopped = Some(format!(
                "half of the run's time is spent; {remaining} rows are left for the next run"
            ));
            break;
        }
        // A hold placed while this run works (`granary cancel` places one, then lists what is
        // open) stops it before its next window, not at the next run.
        if windows > 0 {
            // Boxed: the loop's future stays the size it was.
            if let Some(hold) = Box::pin(current_hold(ctx)).await? {
                summary.stopped = Some(format!("{}; {remaining} rows are left", hold.describe()));
                break;
            }
        }
        windows += 1;
        let start = current.rows_submitted;
        let rows = remaining.min(ceiling);
        let (inventory, opened, ids) = again(
            Backoff::IN_RUN,
            "reading the inventory",
            || async {
                let (inventory, opened) = open_inventory(ctx, &current, rows).await?;
                let ids = inventory.read_ids(start, rows).await?;
                Ok::<_, InventoryError>((inventory, opened, ids))
            },
            InventoryError::is_transient,
        )
        .await?;
        if current.total_rows.is_none() {
            tracker
                .value
                .set_total_rows(&current.key, inventory.num_rows())?;
            changed = true;
        }
        if ids.is_empty() {
            break;
        }
        if opened {
            // Keep where the next windows' pages are, so they read with one GET each.
            let next = start + ids.len() as u64;
            let map = inventory.page_map(next, count.saturating_add(PAGE_MAP_LOOKAHEAD_ROWS))?;
            tracker.value.set_page_map(&current.key, map)?;
            changed = true;
        }
        let (done, stop) = feed_window(ctx, &current.key, start, &ids, &mut summary).await?;
        if done > 0 {
            tracker.value.advance_to(&current.key, start + done)?;
            changed = true;
        }
        if let Some(stop) = stop {
            summary.stopped = Some(stop.why().to_owned());
            if let Stop::Fail(why) = stop {
                stalled = Some(why);
            }
            break;
        }
        remaining = remaining.saturating_sub(done);
    }
    if summary.rows_settled() == 0 && summary.stopped.is_none() && summary.retries_submitted == 0 {
        summary.early_exit = Some(if tracker.value.inventories.is_empty() {
            format!(
                "no inventories (*.parquet) under {}",
                ctx.config.layout.inventory_prefix
            )
        } else if tracker.value.is_complete() {
            "every inventory is fully submitted".to_owned()
        } else {
            "nothing to submit".to_owned()
        });
    }
    if changed {
        if summary.rows_settled() > 0 {
            tracker.value.sample(chrono::Utc::now());
        }
        // A refused save did nothing and is tried again with the same ETag: losing it would
        // make the next run redo every window of this one (through their claims, but still).
        let saved = again(
            Backoff::IN_RUN,
            "saving the tracker",
            || {
                let mut attempt = tracker.clone();
                async move {
                    save_tracker(
                        ctx.store.as_ref(),
                        &ctx.config.layout.tracker_key,
                        &mut attempt,
                    )
                    .await
                    .map(|()| attempt)
                }
            },
            RepositoryError::is_transient,
        )
        .await;
        match saved.map(|saved| tracker = saved) {
            Ok(()) => {}
            Err(e) if e.is_conflict() => {
                tracing::warn!("tracker changed under us: another feeder ran; stopping");
                summary.stopped =
                    Some("tracker changed by another feeder run; not advancing".to_owned());
            }
            Err(e) => return Err(e.into()),
        }
    }
    summary.rows_submitted_total = tracker.value.rows_submitted();
    summary.rows_moved_past = summary.rows_submitted_total.saturating_sub(rows_before);
    summary.rows_known_total = tracker.value.rows_known();
    summary.inventories_complete = tracker.value.is_complete();
    if let Some(why) = stalled {
        tracing::error!(?summary, why, "feeder run stalled");
        return Err(HandlerError::Stalled {
            why,
            summary: Box::new(summary),
        });
    }
    tracing::info!(?summary, "feeder run finished");
    Ok(summary)
}

/// The feeder's hold, if one is placed (read again while refused).
async fn current_hold(ctx: &Ctx) -> Result<Option<crate::domain::hold::Hold>, RepositoryError> {
    again(
        Backoff::IN_RUN,
        "reading the hold",
        || crate::repositories::read_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key),
        RepositoryError::is_transient,
    )
    .await
}

#[cfg(test)]
mod tests;
