//! The queue feeder: meters work from the inventories into Batch.

use super::Ctx;
use crate::adapters::parquet::{Inventory, InventoryError};
use crate::budget::Budget;
use crate::domain::granule::{GranuleId, GranuleProcessingEvent, IdCell};
use crate::domain::tracker::Tracker;
use crate::domain::window::WindowClaim;
use crate::handlers::HandlerError;
use crate::ports::StoreError;
use crate::repositories::items::ItemError;
use crate::repositories::rejects::RejectKind;
use crate::repositories::windows::WindowOutcome;
use crate::repositories::JobSubmission;
use crate::repositories::{load_tracker, save_tracker, RepositoryError, Versioned};
use crate::retry::{again, Backoff};
use futures::StreamExt;
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
    /// Why the run submitted nothing at all (threshold, done, ...).
    pub early_exit: Option<String>,
    /// Why the run stopped before its count (a claim in flight, a submit error, a tracker conflict).
    pub stopped: Option<String>,
    pub rows_submitted_total: u64,
    pub rows_known_total: u64,
    pub inventories_complete: bool,
}

pub async fn run(ctx: &Ctx, event: FeederEvent) -> Result<FeederSummary, HandlerError> {
    if event.granule_submit_count == 0 {
        return Err(HandlerError::BadEvent(
            "granule_submit_count must be at least 1".to_owned(),
        ));
    }
    let mut summary = FeederSummary::default();
    let hold = again(
        Backoff::IN_RUN,
        "reading the hold",
        || crate::repositories::read_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key),
        RepositoryError::is_transient,
    )
    .await?;
    if let Some(hold) = hold {
        summary.early_exit = Some(hold.describe());
        tracing::info!(
            reason = hold.reason,
            held_by = hold.held_by,
            "feeder held: exiting early"
        );
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
    let ceiling = window_ceiling(timeout);
    // No new window once this is spent: the one in hand, at most `ceiling` rows, still fits.
    let budget = Budget::of_invocation(timeout).part(1, 2);
    let mut windows = 0u32;
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
    if summary.submitted
        + summary.already_submitted
        + summary.recovered
        + summary.rejected
        + summary.repeated
        + summary.known_before
        == 0
        && summary.stopped.is_none()
    {
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
        if summary.submitted
            + summary.already_submitted
            + summary.recovered
            + summary.rejected
            + summary.repeated
            + summary.known_before
            > 0
        {
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

/// How often one item record is tried within a feeder run before the window stops at it.
const ITEM_SYNC_TRIES: u32 = 5;

/// How far past the next window a page map reaches: a row group of granary's layout, so a map
/// holds the next row group too and a window across the boundary still needs no footer.
const PAGE_MAP_LOOKAHEAD_ROWS: u64 = 128 * 1024;

/// Batch accepts at most 50 SubmitJob calls a second per account, a quota that cannot be raised
/// (AWS Batch User Guide, "AWS Batch service quotas").
pub const BATCH_SUBMITS_PER_SEC: u64 = 50;

/// The most rows one window may hold: what Batch's SubmitJob rate lets through in a quarter of
/// the feeder's timeout. A larger `granule_submit_count` is fed as several windows, and the run
/// starts no new one after half its time ([`Budget`]): a window never outlives the run that
/// claimed it. Unbounded when the timeout is not known.
pub fn window_ceiling(timeout: Option<std::time::Duration>) -> u64 {
    timeout.map_or(u64::MAX, |t| {
        (t.as_secs() / 4).max(1) * BATCH_SUBMITS_PER_SEC
    })
}

/// The current inventory, from the tracker's page map when it covers the window (no request),
/// otherwise from the file's footer and index; `true` when the file was opened.
async fn open_inventory(
    ctx: &Ctx,
    current: &crate::domain::tracker::InventoryProgress,
    count: u64,
) -> Result<(Inventory, bool), InventoryError> {
    let column = &ctx.config.feeder.inventory_id_column;
    if let Some(map) = current
        .page_map
        .as_ref()
        .filter(|m| m.covers(current.rows_submitted, count))
    {
        match Inventory::from_page_map(ctx.store.clone(), &current.key, column, map) {
            Ok(inventory) => return Ok((inventory, false)),
            Err(e) => {
                tracing::warn!(inventory = current.key, error = %e, "the tracker's page map is unreadable; opening the file")
            }
        }
    }
    let inventory = Inventory::open(ctx.store.clone(), &current.key, column).await?;
    Ok((inventory, true))
}

/// Feeds one window: rows `start ..` of the inventory (`ids`). Invalid rows are set aside; the
/// distinct valid granules are submitted at attempt 1 under one window claim
/// (`repositories::windows`), then their item records follow. Returns how many rows are settled
/// (all of the window's, or none: the window's next run redoes it through its claim) and why it
/// stopped short, if it did.
async fn feed_window(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    ids: &[IdCell],
    summary: &mut FeederSummary,
) -> Result<(u64, Option<Stop>), HandlerError> {
    let rows = ids.len() as u64;
    let WindowRows {
        granules,
        first_row,
        repeated,
        unusable,
    } = window_rows(ids, start);
    summary.repeated += repeated;
    // Set aside before the window is claimed: a crash in between sends a notice twice (rejects
    // are at least once), never none.
    for (row, why) in unusable {
        let raw = &ids[(row - start) as usize];
        if let Err(e) = reject(ctx, inventory_key, row, raw.text(), &why).await {
            return Ok((
                0,
                Some(Stop::Fail(format!("row {row} of {inventory_key}: {e}"))),
            ));
        }
        summary.rejected += 1;
    }
    // A granule granary already has a record for was listed before (an earlier window, another
    // inventory) or found by the importer: it is on its way, and this listing submits nothing
    // for it. The feeder runs one window at a time and makes a window's records before it moves
    // past it, so an earlier listing's records are there by now.
    // A window claimed before (a run redoing it) is worked as its claim says: its granules were
    // looked for when it was claimed, and are known now because that run made their records.
    let claimed = match ctx.windows().claimed(inventory_key, start).await {
        Ok(claimed) => claimed,
        Err(e) => {
            return Ok((
                0,
                Some(Stop::Fail(format!(
                    "looking for the claim of rows {start}.. of {inventory_key}: {e}"
                ))),
            ))
        }
    };
    let granules = if ctx.config.layout.track_items
        && !claimed
        && !crate::mutants::on("feeder-submits-known-granules")
    {
        let known = match ctx.items().exist(&granules).await {
            Ok(known) => known,
            Err(e) => {
                return Ok((
                    0,
                    Some(Stop::Fail(format!(
                        "looking for the item records of rows of {inventory_key}: {e}"
                    ))),
                ))
            }
        };
        let mut fresh = Vec::with_capacity(granules.len());
        for (granule, known) in granules.into_iter().zip(known) {
            if known {
                tracing::info!(granule_id = %granule, inventory = inventory_key, "already known to granary (listed before, or imported): not submitted again");
                summary.known_before += 1;
            } else {
                fresh.push(granule);
            }
        }
        fresh
    } else {
        granules
    };
    let window = WindowClaim::new(
        inventory_key,
        start,
        rows,
        granules,
        "queue-feeder",
        chrono::Utc::now(),
    );
    let (claim, submissions) = match ctx.windows().submit(window).await? {
        WindowOutcome::InFlight { claim } => {
            return Ok((
                0,
                Some(Stop::Wait(format!(
                    "rows {}..{} of {inventory_key} are claimed by a run still in flight",
                    claim.start,
                    claim.start + claim.rows
                ))),
            ))
        }
        WindowOutcome::Worked { claim, jobs } => (claim, jobs),
    };
    let mut stop = None;
    for (granule, submission) in claim.granules.iter().zip(&submissions) {
        match submission {
            JobSubmission::Submitted { .. } => summary.submitted += 1,
            JobSubmission::AlreadySubmitted { .. } => summary.already_submitted += 1,
            JobSubmission::Recovered { .. } => summary.recovered += 1,
            JobSubmission::NotSubmitted { error, .. } => {
                tracing::error!(granule_id = %granule, error, "granule not submitted");
                stop.get_or_insert_with(|| {
                    Stop::Fail(format!(
                        "{granule} of {inventory_key} not submitted: {error}"
                    ))
                });
            }
        }
    }
    // The item records follow the claim (an earlier run may have died before them).
    if let Some(failed) = record_window(ctx, inventory_key, &claim, &submissions, &first_row).await
    {
        stop.get_or_insert(failed);
    }
    Ok(if stop.is_none() {
        (claim.rows, None)
    } else {
        (0, stop)
    })
}

/// The item records of a window's granules whose jobs exist: made together where missing, the
/// others moved one by one (made earlier by another listing, an import, or a retry of this run).
/// A call throttled past the SDK's retries is tried again within the run; what still fails stops
/// the window (its tracker does not move past it), as `Some(stop)`.
async fn record_window(
    ctx: &Ctx,
    inventory_key: &str,
    claim: &WindowClaim,
    submissions: &[JobSubmission],
    first_row: &std::collections::HashMap<GranuleId, u64>,
) -> Option<Stop> {
    let mut failed = None;
    let source = |granule: &GranuleId| match first_row.get(granule) {
        Some(row) => format!("{inventory_key}#row={row}"),
        None => format!(
            "{inventory_key}#rows={}..{}",
            claim.start,
            claim.start + claim.rows
        ),
    };
    let pending: Vec<(GranuleProcessingEvent, String, String)> = claim
        .attempts()
        .zip(submissions)
        .filter_map(|(event, submission)| {
            let job_id = submission.job_id()?.to_owned();
            let source = source(&event.granule_id);
            Some((event, job_id, source))
        })
        .collect();
    // The records of granules new to granary, made together; a call throttled past the SDK's
    // retries is tried again within the run (the window only settles when every record is in
    // step, and each try is idempotent: it makes only the records still missing).
    let made = again(
        Backoff {
            tries: ITEM_SYNC_TRIES,
            ..Backoff::IN_RUN
        },
        "the window's item records",
        || super::item_sync::window_submitted(ctx, claim, &pending, "queue-feeder"),
        ItemError::is_transient,
    )
    .await;
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            tracing::error!(error = %e, "window's item records not made");
            return Some(Stop::Fail(format!(
                "item records of rows of {inventory_key}: {e}"
            )));
        }
    };
    // The rest had a record already (an earlier window, an import, a retry of this run): one
    // by one, like any submission.
    let synced: Vec<Result<(), HandlerError>> =
        futures::stream::iter(pending.into_iter().zip(made).filter(|(_, made)| !made))
            .map(|((event, job_id, source), _)| async move {
                again(
                    Backoff {
                        tries: ITEM_SYNC_TRIES,
                        ..Backoff::IN_RUN
                    },
                    "an item record",
                    || {
                        super::item_sync::submitted(
                            ctx,
                            &event,
                            &job_id,
                            Some(source.clone()),
                            "queue-feeder",
                        )
                    },
                    ItemError::is_transient,
                )
                .await
                .map_err(HandlerError::from)
            })
            .buffered(ctx.config.feeder.submit_concurrency)
            .collect()
            .await;
    for r in synced {
        if let Err(e) = r {
            tracing::error!(error = %e, "item record not updated");
            failed.get_or_insert_with(|| Stop::Fail(format!("rows of {inventory_key}: {e}")));
        }
    }
    failed
}

/// A window's rows, sorted: its distinct granules in row order, the first row each was listed
/// at, how many rows named a granule listed earlier in the window, and the rows no granule can be
/// made of (with why).
#[derive(Debug, Default, PartialEq)]
struct WindowRows {
    granules: Vec<GranuleId>,
    first_row: std::collections::HashMap<GranuleId, u64>,
    repeated: u64,
    unusable: Vec<(u64, String)>,
}

/// Sorts the rows of the window starting at row `start` (pure: no call is made).
fn window_rows(ids: &[IdCell], start: u64) -> WindowRows {
    let mut out = WindowRows::default();
    for (i, raw) in ids.iter().enumerate() {
        let row = start + i as u64;
        match raw.granule() {
            Ok(id) => match out.first_row.entry(id.clone()) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(row);
                    out.granules.push(id);
                }
                std::collections::hash_map::Entry::Occupied(_) => out.repeated += 1,
            },
            Err(why) => out.unusable.push((row, why)),
        }
    }
    out
}

/// An unusable row is recorded and dead-lettered (quoted by start, length and hash however long
/// it is, so the notice always fits in a message), and the feed goes on past it.
async fn reject(
    ctx: &Ctx,
    inventory_key: &str,
    row: u64,
    raw: Option<&str>,
    why: &str,
) -> Result<(), HandlerError> {
    let source = format!("{inventory_key}#row={row}");
    let reason = format!("invalid granule id: {why}");
    ctx.reject(
        RejectKind::InvalidInventoryRow,
        &reason,
        &source,
        raw.unwrap_or(""),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
    use crate::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
    use crate::config::Config;
    use crate::domain::batch_event::JobStatus;
    use crate::ports::{ObjectStore, PutCondition};
    use std::sync::Arc;

    async fn ctx(max_active: &str, jobs: Arc<MemoryJobRunner>) -> Ctx {
        let config = Config::for_unit_tests(&[("GRANARY_MAX_ACTIVE_JOBS", max_active)]);
        let store = Arc::new(MemoryStore::new());
        let rows: Vec<InventoryRow> = (0..50)
            .map(|i| InventoryRow {
                granule_id: format!("g{i:03}"),
                start_datetime: String::new(),
            })
            .collect();
        let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
        store
            .put("inventories/a.parquet", bytes, PutCondition::Overwrite)
            .await
            .unwrap();
        Ctx {
            store,
            jobs,
            retry_queue: Arc::new(MemoryQueue::new("retry")),
            failure_dlq: Arc::new(MemoryQueue::new("dlq")),
            ..Ctx::in_memory(config)
        }
    }

    /// One feeder run taking `count` rows, as the schedule would start it.
    async fn feed_rows(ctx: &Ctx, count: u64) -> FeederSummary {
        run(
            ctx,
            FeederEvent {
                granule_submit_count: count,
            },
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn stops_feeding_at_the_active_job_threshold_and_resumes_below_it() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let ctx = ctx("25", jobs.clone()).await;
        let first = feed_rows(&ctx, 20).await;
        assert_eq!((first.submitted, first.early_exit), (20, None));
        // 20 active < 25: feeds again, now 40 active
        assert_eq!(
            run(
                &ctx,
                FeederEvent {
                    granule_submit_count: 20
                }
            )
            .await
            .unwrap()
            .submitted,
            20
        );
        let held = feed_rows(&ctx, 20).await;
        assert_eq!(held.submitted, 0);
        assert_eq!(held.active_jobs, 25, "counting stops at the threshold");
        assert!(held.early_exit.unwrap().contains("threshold of 25"));
        // jobs finish: feeding resumes where it stopped
        for (i, _) in jobs.submitted().iter().enumerate() {
            jobs.set_status(&format!("job-{}", i + 1), JobStatus::Succeeded);
        }
        let resumed = feed_rows(&ctx, 20).await;
        assert_eq!(resumed.submitted, 10);
        assert!(resumed.inventories_complete);
        let names: std::collections::BTreeSet<String> =
            jobs.submitted().into_iter().map(|r| r.job_name).collect();
        assert_eq!(names.len(), 50);
    }

    /// A count larger than Batch lets through in a quarter of the feeder's timeout is fed as
    /// several windows; once half the run's time is spent no new window starts.
    #[tokio::test]
    async fn a_large_count_is_fed_as_windows_the_run_has_time_for() {
        let feed_with = |timeout_secs: u64| async move {
            let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
            let mut ctx = ctx("100000", jobs.clone()).await;
            ctx.config.leases.function_timeout = Some(std::time::Duration::from_secs(timeout_secs));
            let rows: Vec<InventoryRow> = (0..120)
                .map(|i| InventoryRow {
                    granule_id: format!("g{i:03}"),
                    start_datetime: String::new(),
                })
                .collect();
            ctx.store
                .put(
                    "inventories/a.parquet",
                    write_inventory(&rows, &InventoryLayout::granary()).unwrap(),
                    PutCondition::Overwrite,
                )
                .await
                .unwrap();
            let out = feed_rows(&ctx, 120).await;
            let windows: Vec<String> = ctx
                .store
                .list(&ctx.config.layout.claim_prefix)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.key)
                .filter(|k| k.contains("start="))
                .collect();
            (out, windows)
        };
        assert_eq!(window_ceiling(Some(std::time::Duration::from_secs(4))), 50);
        let (out, windows) = feed_with(4).await;
        assert_eq!(out.submitted, 120);
        assert_eq!(windows.len(), 3, "{windows:?}");
        assert!(
            windows
                .iter()
                .any(|k| k.ends_with("start=000000000100.json")),
            "{windows:?}"
        );
        assert!(out.stopped.is_none());
        // No time at all: the first window is fed, then the run stops and says why.
        let (out, windows) = feed_with(0).await;
        assert_eq!((out.submitted, windows.len()), (50, 1));
        assert!(out.stopped.unwrap().contains("70 rows are left"));
    }

    /// A granule listed in two windows and in two inventories is submitted once: the later
    /// listings find its item record and submit nothing for it.
    #[tokio::test]
    async fn a_granule_listed_again_is_not_submitted_again() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let ctx = ctx("100000", jobs.clone()).await;
        let inventory = |ids: &[&str]| {
            let rows: Vec<InventoryRow> = ids
                .iter()
                .map(|g| InventoryRow {
                    granule_id: (*g).to_owned(),
                    start_datetime: String::new(),
                })
                .collect();
            write_inventory(&rows, &InventoryLayout::granary()).unwrap()
        };
        for (key, ids) in [
            ("inventories/a.parquet", &["g1", "g2", "g3", "g1"][..]),
            ("inventories/b.parquet", &["g2", "g4"][..]),
        ] {
            ctx.store
                .put(key, inventory(ids), PutCondition::Overwrite)
                .await
                .unwrap();
        }
        let mut known = 0;
        for _ in 0..4 {
            // Windows of two rows: g1 comes back in a's second window, g2 in b's first.
            let out = feed_rows(&ctx, 2).await;
            known += out.known_before;
        }
        let mut names: Vec<String> = jobs.submitted().into_iter().map(|r| r.job_name).collect();
        names.sort();
        assert_eq!(names.len(), 4, "{names:?}");
        names.dedup();
        assert_eq!(names.len(), 4, "one job a granule");
        assert_eq!(known, 2, "g1 and g2 seen again");
    }

    /// A row whose id is not UTF-8 is rejected with its reason; the rest of its window is fed.
    #[tokio::test]
    async fn a_row_whose_id_is_not_utf8_is_rejected_alone() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let ctx = ctx("100", jobs.clone()).await;
        let ids: [&[u8]; 5] = [b"g0", b"g1", b"g\xff2", b"g3", b"g4"];
        ctx.store
            .put(
                "inventories/a.parquet",
                crate::adapters::parquet::tests::inventory_of_bytes(&ids, 5),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let out = feed_rows(&ctx, 10).await;
        assert_eq!((out.submitted, out.rejected), (4, 1));
        assert!(out.inventories_complete);
        let dlq = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
        assert_eq!(dlq.len(), 1);
        assert!(dlq[0].attributes["reason"].ends_with("granule id is not valid UTF-8"));
        assert!(dlq[0].body.contains("row=2"), "{}", dlq[0].body);
    }

    /// GETs of one object, counted at the store port.
    struct GetsOf(&'static str, std::sync::atomic::AtomicU64);

    impl crate::adapters::tap::Tap for GetsOf {
        fn leave(&self, call: &crate::adapters::tap::Call<'_>, _: &crate::adapters::tap::Answer) {
            if call.op == crate::adapters::tap::Op::StoreGet && call.target == self.0 {
                self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    #[tokio::test]
    async fn after_the_first_open_a_window_is_one_get_of_the_inventory() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let mut ctx = ctx("100000", jobs.clone()).await;
        let rows: Vec<InventoryRow> = (0..300_000)
            .map(|i| InventoryRow {
                granule_id: format!("g{i:06}"),
                start_datetime: String::new(),
            })
            .collect();
        let layout = InventoryLayout {
            row_group_rows: 50_000,
            ..InventoryLayout::granary()
        };
        let key = "inventories/a.parquet";
        ctx.store
            .put(
                key,
                write_inventory(&rows, &layout).unwrap(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let gets = Arc::new(GetsOf(key, Default::default()));
        ctx.store = Arc::new(crate::adapters::tap::TappedStore {
            inner: ctx.store.clone(),
            tap: gets.clone(),
        });
        let count = |gets: &GetsOf| gets.1.swap(0, std::sync::atomic::Ordering::Relaxed);
        let tick = || {
            run(
                &ctx,
                FeederEvent {
                    granule_submit_count: 1_000,
                },
            )
        };
        assert_eq!(tick().await.unwrap().submitted, 1_000);
        let first_open = count(&gets);
        assert!(first_open >= 2, "footer and pages: {first_open}");
        // The windows after it, across the row group boundary at 50,000 too.
        for _ in 0..60 {
            assert_eq!(tick().await.unwrap().submitted, 1_000);
            assert_eq!(count(&gets), 1);
        }
        let names: std::collections::BTreeSet<String> =
            jobs.submitted().into_iter().map(|r| r.job_name).collect();
        assert_eq!(names.len(), 61_000);
    }

    /// A feeder whose every SubmitJob is refused (past the SDK's and its own retries) must not
    /// look like a quiet success: the run fails as QueueFeeder.Stalled, its tracker stays where it
    /// was, and the next run, once Batch accepts again, submits the window.
    #[tokio::test(start_paused = true)]
    async fn a_run_stopped_by_refused_submissions_fails_as_stalled() {
        // Five granules, each refused at all of its SUBMIT_TRIES tries; accepted after that.
        let refusing = Arc::new(crate::adapters::memory::FlakyJobRunner::refusing(
            5 * crate::repositories::submission::SUBMIT_TRIES,
        ));
        let mut ctx = ctx("100", Arc::new(MemoryJobRunner::default())).await;
        ctx.jobs = refusing.clone();
        let err = run(
            &ctx,
            FeederEvent {
                granule_submit_count: 5,
            },
        )
        .await
        .unwrap_err();
        let HandlerError::Stalled { why, summary } = &err else {
            panic!("{err:?}")
        };
        assert!(why.contains("not submitted"), "{why}");
        assert_eq!((summary.submitted, summary.rows_submitted_total), (0, 0));
        assert_eq!(
            crate::handlers::LambdaFailure::of(crate::config::Function::QueueFeeder, &err)
                .error_type,
            "QueueFeeder.Stalled"
        );
        // Batch accepts again: the window is submitted.
        let out = feed_rows(&ctx, 5).await;
        assert_eq!((out.submitted, out.rows_submitted_total), (5, 5));
    }

    /// A run redoing a window (the run before made its jobs and records, and its tracker save
    /// was lost) works it from its claim: it does not look for the window's granules' records
    /// again (they exist now, made by that run), which under throttling cost a GET a granule a redo.
    #[tokio::test]
    async fn a_window_done_again_does_not_look_its_granules_up_again() {
        let jobs = Arc::new(MemoryJobRunner::default());
        let ctx = ctx("100", jobs.clone()).await;
        let first = feed_rows(&ctx, 5).await;
        assert_eq!(first.submitted, 5);
        ctx.store
            .delete(&ctx.config.layout.tracker_key)
            .await
            .unwrap();
        let again = feed_rows(&ctx, 5).await;
        assert_eq!(
            (again.already_submitted, again.known_before),
            (5, 0),
            "{again:?}"
        );
        assert_eq!(jobs.submitted().len(), 5);
    }

    #[tokio::test]
    async fn says_so_when_there_are_no_inventories() {
        let ctx = ctx("10", Arc::new(MemoryJobRunner::default())).await;
        ctx.store.delete("inventories/a.parquet").await.unwrap();
        let out = feed_rows(&ctx, 5).await;
        assert_eq!(
            out.early_exit.as_deref(),
            Some("no inventories (*.parquet) under inventories/")
        );
    }

    #[test]
    fn a_windows_rows_sort_into_granules_repeats_and_unusable_rows() {
        let a = "HLS.S30.T18TYN.2022002T153012.v2.0";
        let b = "HLS.L30.T18TYN.2022001T153012.v2.0";
        let ids = vec![
            IdCell::Text(a.into()),
            IdCell::Null,
            IdCell::Text(b.into()),
            IdCell::Text(a.into()),
            IdCell::NotUtf8,
        ];
        let rows = window_rows(&ids, 100);
        let (ga, gb) = (GranuleId::parse(a).unwrap(), GranuleId::parse(b).unwrap());
        assert_eq!(rows.granules, vec![ga.clone(), gb.clone()]);
        assert_eq!(rows.first_row[&ga], 100);
        assert_eq!(rows.first_row[&gb], 102);
        assert_eq!(rows.repeated, 1);
        let bad: Vec<u64> = rows.unusable.iter().map(|(row, _)| *row).collect();
        assert_eq!(bad, vec![101, 104]);
        assert!(rows.unusable[0].1.contains("null"), "{:?}", rows.unusable);
    }

    #[tokio::test]
    async fn zero_count_is_an_error() {
        let ctx = ctx("10", Arc::new(MemoryJobRunner::default())).await;
        assert!(matches!(
            run(
                &ctx,
                FeederEvent {
                    granule_submit_count: 0
                }
            )
            .await,
            Err(HandlerError::BadEvent(_))
        ));
    }
}
