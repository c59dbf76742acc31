//! The queue feeder: meters work from the inventories into Batch. This module is the run: the
//! event, the summary, the loop over inventories and windows under the tracker; [`window`] is
//! one window (read its rows, claim and submit them, make their item records).

mod pace;
mod retries;
mod window;
pub use pace::{standing_of as pace_standing, SPEND_CAP_HOLDER};
use window::{feed_window, open_inventory, PAGE_MAP_LOOKAHEAD_ROWS};
pub use window::{finish_claimed_window, window_ceiling, ARRAY_WINDOW_ROWS, BATCH_SUBMITS_PER_SEC};

use super::Ctx;
use crate::adapters::parquet::InventoryError;
use crate::budget::Budget;
use crate::domain::granule::IdCell;
use crate::domain::tracker::{InventoryProgress, Tracker};
use crate::handlers::HandlerError;
use crate::repositories::{RepositoryError, Versioned};
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
        || ctx.tracker().load(),
        RepositoryError::is_transient,
    )
    .await?;
    let count = match pace::pace_run(ctx, &tracker.value, event.granule_submit_count).await? {
        pace::Paced::Go(count) => count,
        pace::Paced::Held(why) => {
            summary.early_exit = Some(why);
            return Ok(summary);
        }
    };
    feed(ctx, count, tracker, summary).await
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

/// What a feeder run carries from one phase to the next.
struct FeedRun {
    tracker: Versioned<Tracker>,
    summary: FeederSummary,
    /// Whether the tracker changed since it was read: it is saved at the end if so.
    changed: bool,
    /// Rows still to feed this run.
    remaining: u64,
    /// Why the run stalled: reported as its error once the tracker is saved.
    stalled: Option<String>,
    /// The windows this run worked (its window of retries among them).
    windows: u32,
}

/// Feeds up to `count` rows starting where `tracker` says, then advances it with If-Match.
/// Public so tests can hand it a stale tracker.
pub async fn feed(
    ctx: &Ctx,
    count: u64,
    mut tracker: Versioned<Tracker>,
    summary: FeederSummary,
) -> Result<FeederSummary, HandlerError> {
    let listed: Vec<_> = ctx
        .inventories()
        .list()
        .await?
        .into_iter()
        .filter(|o| o.key.ends_with(".parquet"))
        .collect();
    // An inventory replaced under its key is another list of granules: the rows counted so
    // far are not its rows. The feeder stops (its Errors alarm) until the key holds the object
    // it began again (the ETag it pinned); a changed list belongs under a new key.
    let replaced = tracker
        .value
        .replaced(listed.iter().map(|o| (o.key.as_str(), o.etag.as_deref())));
    if let Some((key, pinned, now)) = replaced.first() {
        return Err(HandlerError::Refused(format!(
            "inventory {key} was replaced after the feeder began it (ETag {pinned}, now {now}): \
             its rows are not the ones counted so far, and the feeder stops here. Delete the \
             newer version so the one it began is current again (old versions are kept a \
             week; a copy of it has another ETag), or write the changed list under a new key \
             and take this one out of the tracker's inventories (tracker/tracker.json)"
        )));
    }
    let rows_before = tracker.value.rows_submitted();
    let added = tracker
        .value
        .add_listed(listed.into_iter().map(|o| (o.key, o.etag)));
    let mut run = FeedRun {
        changed: added > 0 || tracker.etag.is_none(),
        tracker,
        summary,
        remaining: count,
        stalled: None,
        windows: 0,
    };
    let timeout = ctx.config.leases.function_timeout;
    let ceiling = if ctx.config.feeder.array_windows {
        ARRAY_WINDOW_ROWS
    } else {
        window_ceiling(
            timeout,
            ctx.config.jobs.as_ref().and_then(|j| j.submit_spacing),
        )
    };
    // No new window once this is spent: the one in hand, at most `ceiling` rows, still fits.
    let budget = Budget::of_invocation(timeout).part(1, 2);
    // The parked retries first, they are older than any row still to come: this campaign's,
    // and any other campaign's the requeuer parked before the stack switched (taken whether or
    // not GRANARY_ARRAY_RETRIES is still on: nothing else submits a parked retry).
    feed_parked_retries(ctx, &mut run, ceiling).await?;
    feed_inventory_windows(ctx, &mut run, count, ceiling, &budget).await?;
    let summary = &mut run.summary;
    if summary.rows_settled() == 0 && summary.stopped.is_none() && summary.retries_submitted == 0 {
        summary.early_exit = Some(if run.tracker.value.inventories.is_empty() {
            format!(
                "no inventories (*.parquet) under {}",
                ctx.config.layout.inventory_prefix
            )
        } else if run.tracker.value.is_complete() {
            "every inventory is fully submitted".to_owned()
        } else {
            "nothing to submit".to_owned()
        });
    }
    if run.changed {
        save_fed_tracker(ctx, &mut run).await?;
    }
    finish_run(run, rows_before)
}

/// The run's windows of parked retries: this campaign's (a stop there is the run's), then the
/// other campaigns'.
async fn feed_parked_retries(
    ctx: &Ctx,
    run: &mut FeedRun,
    ceiling: u64,
) -> Result<(), HandlerError> {
    let (moved, stop) =
        retries::feed_retries(ctx, &mut run.tracker, &mut run.summary, ceiling).await?;
    run.changed |= moved;
    run.windows = u32::from(run.summary.retries_submitted > 0);
    match stop {
        // A window of retries in another run's hands holds nothing else up.
        Some(Stop::Wait(why)) => run.summary.stopped = Some(why),
        Some(Stop::Fail(why)) => {
            run.summary.stopped = Some(why.clone());
            run.stalled = Some(why);
            run.remaining = 0;
        }
        None => {}
    }
    retries::feed_other_campaigns(ctx, &mut run.summary, ceiling).await?;
    Ok(())
}

/// The inventories' windows one after the other, each at most `ceiling` rows, until the run's
/// rows are fed, the inventories end, half the run's time is spent, a hold is placed or a
/// window stops short.
async fn feed_inventory_windows(
    ctx: &Ctx,
    run: &mut FeedRun,
    count: u64,
    ceiling: u64,
    budget: &Budget,
) -> Result<(), HandlerError> {
    while run.remaining > 0 {
        let Some(current) = run.tracker.value.current().cloned() else {
            break;
        };
        let remaining = run.remaining;
        if run.windows > 0 && budget.spent() {
            run.summary.stopped = Some(format!(
                "half of the run's time is spent; {remaining} rows are left for the next run"
            ));
            break;
        }
        // A hold placed while this run works (`granary cancel` places one, then lists what is
        // open) stops it before its next window, not at the next run.
        if run.windows > 0 {
            // Boxed: the loop's future stays the size it was.
            if let Some(hold) = Box::pin(current_hold(ctx)).await? {
                run.summary.stopped =
                    Some(format!("{}; {remaining} rows are left", hold.describe()));
                break;
            }
        }
        run.windows += 1;
        let start = current.rows_submitted;
        let ids = read_window(ctx, run, &current, remaining.min(ceiling), count).await?;
        if ids.is_empty() {
            break;
        }
        let (done, stop) = feed_window(ctx, &current.key, start, &ids, &mut run.summary).await?;
        if done > 0 {
            run.tracker.value.advance_to(&current.key, start + done)?;
            run.changed = true;
        }
        if let Some(stop) = stop {
            run.summary.stopped = Some(stop.why().to_owned());
            if let Stop::Fail(why) = stop {
                run.stalled = Some(why);
            }
            break;
        }
        run.remaining = remaining.saturating_sub(done);
    }
    Ok(())
}

/// Up to `rows` rows of the current inventory from where the tracker is; the tracker learns the
/// inventory's size, and where the next windows' pages are when the file was opened.
async fn read_window(
    ctx: &Ctx,
    run: &mut FeedRun,
    current: &InventoryProgress,
    rows: u64,
    count: u64,
) -> Result<Vec<IdCell>, HandlerError> {
    let start = current.rows_submitted;
    let (inventory, opened, ids) = again(
        Backoff::IN_RUN,
        "reading the inventory",
        || async {
            let (inventory, opened) = open_inventory(ctx, current, rows).await?;
            let ids = inventory.read_ids(start, rows).await?;
            Ok::<_, InventoryError>((inventory, opened, ids))
        },
        InventoryError::is_transient,
    )
    .await?;
    if current.total_rows.is_none() {
        run.tracker
            .value
            .set_total_rows(&current.key, inventory.num_rows())?;
        run.changed = true;
    }
    if ids.is_empty() {
        return Ok(ids);
    }
    if opened {
        // Keep where the next windows' pages are, so they read with one GET each.
        let next = start + ids.len() as u64;
        let map = inventory.page_map(next, count.saturating_add(PAGE_MAP_LOOKAHEAD_ROWS))?;
        run.tracker.value.set_page_map(&current.key, map)?;
        run.changed = true;
    }
    Ok(ids)
}

/// Saves the tracker the run changed (If-Match); another feeder run's save in between stops
/// the run, which does not advance.
async fn save_fed_tracker(ctx: &Ctx, run: &mut FeedRun) -> Result<(), HandlerError> {
    if run.summary.rows_settled() > 0 {
        run.tracker.value.sample(crate::clock::now());
    }
    // A refused save did nothing and is tried again with the same ETag: losing it would
    // make the next run redo every window of this one (through their claims, but still).
    let saved = again(
        Backoff::IN_RUN,
        "saving the tracker",
        || {
            let mut attempt = run.tracker.clone();
            async move { ctx.tracker().save(&mut attempt).await.map(|()| attempt) }
        },
        RepositoryError::is_transient,
    )
    .await;
    match saved.map(|saved| run.tracker = saved) {
        Ok(()) => {}
        Err(e) if e.is_conflict() => {
            tracing::warn!("tracker changed under us: another feeder ran; stopping");
            run.summary.stopped =
                Some("tracker changed by another feeder run; not advancing".to_owned());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The run's summary, its totals from the tracker as saved; the run's error when it stalled.
fn finish_run(run: FeedRun, rows_before: u64) -> Result<FeederSummary, HandlerError> {
    let FeedRun {
        tracker,
        mut summary,
        stalled,
        ..
    } = run;
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
        || ctx.hold().read(),
        RepositoryError::is_transient,
    )
    .await
}

#[cfg(test)]
mod tests;
