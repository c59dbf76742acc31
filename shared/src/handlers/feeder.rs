//! The queue feeder: meters work from the inventories into Batch.

use super::Ctx;
use crate::adapters::parquet::{Inventory, InventoryError};
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::tracker::Tracker;
use crate::ports::StoreError;
use crate::repositories::rejects::RejectKind;
use crate::repositories::{load_tracker, save_tracker, RepositoryError, SubmitOutcome, Versioned};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// The scheduled event: how many granules to submit this tick.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeederEvent {
    pub granule_submit_count: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum FeederError {
    #[error("granule_submit_count must be at least 1")]
    ZeroCount,
    #[error(transparent)]
    State(#[from] RepositoryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error(transparent)]
    Tracker(#[from] crate::domain::tracker::TrackerError),
    #[error("setting aside an invalid inventory row: {0}")]
    Reject(#[from] crate::repositories::rejects::RejectError),
    #[error("counting active jobs: {0}")]
    Jobs(#[from] crate::ports::JobRunnerError),
    #[error("updating the item record: {0}")]
    Items(#[from] crate::repositories::items::ItemError),
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
    pub active_jobs: u64,
    /// Why the run submitted nothing at all (threshold, done, ...).
    pub early_exit: Option<String>,
    /// Why the run stopped before its count (a claim in flight, a submit error, a tracker conflict).
    pub stopped: Option<String>,
    pub rows_submitted_total: u64,
    pub rows_known_total: u64,
    pub inventories_complete: bool,
}

pub async fn run(ctx: &Ctx, event: FeederEvent) -> Result<FeederSummary, FeederError> {
    if event.granule_submit_count == 0 {
        return Err(FeederError::ZeroCount);
    }
    let mut summary = FeederSummary::default();
    if let Some(hold) =
        crate::repositories::read_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key).await?
    {
        summary.early_exit = Some(hold.describe());
        tracing::info!(
            reason = hold.reason,
            held_by = hold.held_by,
            "feeder held: exiting early"
        );
        return Ok(summary);
    }
    let active = ctx
        .jobs
        .count_active(ctx.config.feeder.max_active_jobs)
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
    let tracker = load_tracker(ctx.store.as_ref(), &ctx.config.layout.tracker_key).await?;
    feed(ctx, event.granule_submit_count, tracker, summary).await
}

/// Feeds up to `count` rows starting where `tracker` says, then advances it with If-Match.
/// Public so tests can hand it a stale tracker.
pub async fn feed(
    ctx: &Ctx,
    count: u64,
    mut tracker: Versioned<Tracker>,
    mut summary: FeederSummary,
) -> Result<FeederSummary, FeederError> {
    let listed = ctx.store.list(&ctx.config.layout.inventory_prefix).await?;
    let added = tracker.value.add_inventories(
        listed
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k.ends_with(".parquet")),
    );
    let mut changed = added > 0 || tracker.etag.is_none();
    let mut remaining = count;
    while remaining > 0 {
        let Some(current) = tracker.value.current().cloned() else {
            break;
        };
        let inventory = Inventory::open(
            ctx.store.clone(),
            &current.key,
            &ctx.config.feeder.inventory_id_column,
        )
        .await?;
        if current.total_rows.is_none() {
            tracker
                .value
                .set_total_rows(&current.key, inventory.num_rows())?;
            changed = true;
        }
        let start = current.rows_submitted;
        let ids = inventory.read_ids(start, remaining).await?;
        let (done, stop) = submit_rows(ctx, &current.key, start, &ids, &mut summary).await?;
        if done > 0 {
            tracker.value.advance_to(&current.key, start + done)?;
            changed = true;
        }
        if let Some(why) = stop {
            summary.stopped = Some(why);
            break;
        }
        remaining -= ids.len() as u64;
        if ids.is_empty() {
            break;
        }
    }
    if summary.submitted + summary.already_submitted + summary.recovered + summary.rejected == 0
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
        if summary.submitted + summary.already_submitted + summary.recovered + summary.rejected > 0
        {
            tracker.value.sample(chrono::Utc::now());
        }
        match save_tracker(
            ctx.store.as_ref(),
            &ctx.config.layout.tracker_key,
            &mut tracker,
        )
        .await
        {
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
    tracing::info!(?summary, "feeder run finished");
    Ok(summary)
}

/// How often one row is tried within a feeder run before the run stops at it.
const ROW_TRIES: u32 = 5;

/// Submits one valid row's granule (once, by its claim) and keeps its item record in step.
async fn submit_row(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    source: &str,
) -> Result<RowResult, FeederError> {
    let outcome = ctx.submit_once(event, "queue-feeder").await?;
    if let SubmitOutcome::Submitted { job_id }
    | SubmitOutcome::AlreadySubmitted { job_id }
    | SubmitOutcome::Recovered { job_id } = &outcome
    {
        super::item_sync::submitted(ctx, event, job_id, Some(source.to_owned()), "queue-feeder")
            .await?;
    }
    Ok(RowResult::Done(outcome))
}

enum RowResult {
    Done(SubmitOutcome),
    Rejected,
}

/// Submits rows concurrently; returns how many leading rows are settled (so the tracker can move
/// past them) and why it stopped short, if it did.
async fn submit_rows(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    ids: &[Option<String>],
    summary: &mut FeederSummary,
) -> Result<(u64, Option<String>), FeederError> {
    let results: Vec<Result<RowResult, FeederError>> = futures::stream::iter(
        ids.iter().enumerate(),
    )
    .map(|(i, raw)| async move {
        let row = start + i as u64;
        let id = match raw.as_deref().map(GranuleId::parse) {
            Some(Ok(id)) => id,
            Some(Err(e)) => {
                return reject(ctx, inventory_key, row, raw.as_deref(), &e.to_string()).await
            }
            None => return reject(ctx, inventory_key, row, None, "granule id is null").await,
        };
        let event = GranuleProcessingEvent::first(id);
        let source = format!("{inventory_key}#row={row}");
        // A row that failed (a call throttled past the SDK's retries, a 5xx) is tried
        // again within the run: the tracker only moves past settled rows, so one
        // unlucky row would otherwise make the next run redo the whole window. Each try
        // is idempotent (the claim decides).
        let mut tries = 0;
        loop {
            tries += 1;
            match submit_row(ctx, &event, &source).await {
                Err(e) if tries < ROW_TRIES => {
                    tracing::warn!(row, tries, error = %e, "row not submitted; trying again");
                }
                result => return result,
            }
        }
    })
    .buffered(ctx.config.feeder.submit_concurrency)
    .collect()
    .await;
    let mut settled = 0u64;
    let mut stop = None;
    for (i, r) in results.into_iter().enumerate() {
        let ok = match r {
            Ok(RowResult::Rejected) => {
                summary.rejected += 1;
                true
            }
            Ok(RowResult::Done(SubmitOutcome::Submitted { .. })) => {
                summary.submitted += 1;
                true
            }
            Ok(RowResult::Done(SubmitOutcome::AlreadySubmitted { .. })) => {
                summary.already_submitted += 1;
                true
            }
            Ok(RowResult::Done(SubmitOutcome::Recovered { .. })) => {
                summary.recovered += 1;
                true
            }
            Ok(RowResult::Done(SubmitOutcome::InFlight)) => {
                stop.get_or_insert_with(|| {
                    format!(
                        "row {} of {inventory_key} is claimed by a run still in flight",
                        start + i as u64
                    )
                });
                false
            }
            Err(e) => {
                tracing::error!(row = start + i as u64, error = %e, "row not submitted");
                stop.get_or_insert_with(|| {
                    format!("row {} of {inventory_key}: {e}", start + i as u64)
                });
                false
            }
        };
        // Rows after the first unsettled one may be done too; their claims make the rerun skip them.
        if ok && stop.is_none() {
            settled += 1;
        }
    }
    Ok((settled, stop))
}

/// An unusable row is recorded and dead-lettered (quoted by start, length and hash however long
/// it is, so the notice always fits in a message), and the feed goes on past it.
async fn reject(
    ctx: &Ctx,
    inventory_key: &str,
    row: u64,
    raw: Option<&str>,
    why: &str,
) -> Result<RowResult, FeederError> {
    let source = format!("{inventory_key}#row={row}");
    let reason = format!("invalid granule id: {why}");
    ctx.reject(
        RejectKind::InvalidInventoryRow,
        &reason,
        &source,
        raw.unwrap_or(""),
    )
    .await?;
    Ok(RowResult::Rejected)
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
        let env = [
            ("GRANARY_BUCKET", "b"),
            ("GRANARY_JOB_QUEUE", "q"),
            ("GRANARY_JOB_DEFINITION", "d"),
            ("GRANARY_RETRY_QUEUE_URL", "r"),
            ("GRANARY_FAILURE_DLQ_URL", "f"),
            ("GRANARY_MAX_ACTIVE_JOBS", max_active),
        ];
        let config = Config::from_lookup(|k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
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
            config,
            store,
            jobs,
            retry_queue: Arc::new(MemoryQueue::new("retry")),
            failure_dlq: Arc::new(MemoryQueue::new("dlq")),
        }
    }

    #[tokio::test]
    async fn stops_feeding_at_the_active_job_threshold_and_resumes_below_it() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let ctx = ctx("25", jobs.clone()).await;
        let first = run(
            &ctx,
            FeederEvent {
                granule_submit_count: 20,
            },
        )
        .await
        .unwrap();
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
        let held = run(
            &ctx,
            FeederEvent {
                granule_submit_count: 20,
            },
        )
        .await
        .unwrap();
        assert_eq!(held.submitted, 0);
        assert_eq!(held.active_jobs, 25, "counting stops at the threshold");
        assert!(held.early_exit.unwrap().contains("threshold of 25"));
        // jobs finish: feeding resumes where it stopped
        for (i, _) in jobs.submitted().iter().enumerate() {
            jobs.set_status(&format!("job-{}", i + 1), JobStatus::Succeeded);
        }
        let resumed = run(
            &ctx,
            FeederEvent {
                granule_submit_count: 20,
            },
        )
        .await
        .unwrap();
        assert_eq!(resumed.submitted, 10);
        assert!(resumed.inventories_complete);
        let names: std::collections::BTreeSet<String> =
            jobs.submitted().into_iter().map(|r| r.job_name).collect();
        assert_eq!(names.len(), 50);
    }

    #[tokio::test]
    async fn says_so_when_there_are_no_inventories() {
        let ctx = ctx("10", Arc::new(MemoryJobRunner::default())).await;
        ctx.store.delete("inventories/a.parquet").await.unwrap();
        let out = run(
            &ctx,
            FeederEvent {
                granule_submit_count: 5,
            },
        )
        .await
        .unwrap();
        assert_eq!(
            out.early_exit.as_deref(),
            Some("no inventories (*.parquet) under inventories/")
        );
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
            Err(FeederError::ZeroCount)
        ));
    }
}
