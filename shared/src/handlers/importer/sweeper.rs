//! The recovery sweeper (scheduled): items stuck in DOWNLOADING or PROCESSING past their timeout
//! go to the failed state while attempts remain (and back on their path at once), or give up
//! (IGNORE, ABANDONED) when none remain. Before touching a PROCESSING item it asks Batch whether
//! the job is still alive. It looks only at the in-flight index, never at every item.

use super::{ImportError, Importer, Step};
use crate::domain::item::Change;
use crate::domain::lifecycle::ItemState::{self, *};
use crate::items::Advanced;
use crate::ports::OutgoingMessage;
use chrono::{DateTime, Utc};
use serde::Serialize;

const BY: &str = "item-sweeper";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    pub examined: u64,
    pub within_time: u64,
    /// PROCESSING items past their time whose Batch job is still queued or running.
    pub job_alive: u64,
    /// PROCESSING items whose job Batch reports SUCCEEDED (its event never reached the monitor).
    pub completed_by_batch: u64,
    pub retried: u64,
    pub gave_up: u64,
    /// Index entries for items no longer in that state, removed.
    pub stale_markers: u64,
}

pub async fn sweep(imp: &Importer, now: DateTime<Utc>) -> Result<SweepSummary, ImportError> {
    let items = imp.ctx.items();
    let policy = imp.ctx.config.retry_policy;
    let mut summary = SweepSummary::default();
    for (marked, id) in items.inflight().await? {
        summary.examined += 1;
        let Some(current) = items.get(&id).await? else {
            items.clear_inflight(marked, &id).await?;
            summary.stale_markers += 1;
            continue;
        };
        let record = current.value;
        if record.state != marked {
            items.clear_inflight(marked, &id).await?;
            summary.stale_markers += 1;
            continue;
        }
        let Some(path) = policy.timeout_recovery(record.state, &record.attempts, now) else {
            summary.within_time += 1;
            continue;
        };
        if record.state == Processing {
            if let Some(job_id) = &record.job_id {
                match imp.ctx.jobs.describe(job_id).await {
                    Ok(Some(job)) if !job.status.is_terminal() => {
                        tracing::info!(item_id = %id, job_id, status = ?job.status, "past its time but the job is alive");
                        summary.job_alive += 1;
                        continue;
                    }
                    Ok(Some(job))
                        if job.status == crate::domain::batch_event::JobStatus::Succeeded =>
                    {
                        let seq = record.seq;
                        items
                            .advance(&id, BY, |r| {
                                (r.state == Processing && r.seq == seq).then(|| {
                                    Change::to(Processed, format!("Batch reports job {job_id} SUCCEEDED; its event never arrived"))
                                })
                            })
                            .await?;
                        summary.completed_by_batch += 1;
                        continue;
                    }
                    Ok(_) => {}
                    // Unsure whether the job lives: leave the item for the next sweep.
                    Err(e) => {
                        tracing::warn!(item_id = %id, job_id, error = %e, "cannot ask Batch about the job");
                        continue;
                    }
                }
            }
        }
        let state = record.state;
        let seq = record.seq;
        let timeout = if state == Downloading {
            policy.download_timeout
        } else {
            policy.processing_timeout
        };
        let mut last = Advanced::Unchanged(record.clone());
        let mut expected = (state, seq);
        for to in path {
            let reason = if to.is_terminal() {
                format!(
                    "timed out after {}s; no attempts left",
                    timeout.num_seconds()
                )
            } else {
                format!(
                    "timed out after {}s (timeout recovery)",
                    timeout.num_seconds()
                )
            };
            let (from, at) = expected;
            last = items
                .advance(&id, BY, |r| {
                    (r.state == from && r.seq == at).then(|| Change::to(to, reason.clone()))
                })
                .await?;
            match &last {
                Advanced::Moved(r) => expected = (r.state, r.seq),
                _ => break,
            }
        }
        let Advanced::Moved(after) = last else {
            continue;
        };
        match after.state {
            DownloadingFailed => {
                imp.enqueue(&id, Some(Step::Download)).await?;
                summary.retried += 1;
            }
            ProcessingFailed => {
                // PROCESSING_FAILED → READY → PROCESSING happens in the requeuer, like any retry.
                imp.hand_to_processing(&after).await?;
                summary.retried += 1;
            }
            Ignore | Abandoned => {
                summary.gave_up += 1;
                dead_letter(imp, &after.id, after.state).await?;
            }
            _ => {}
        }
    }
    tracing::info!(?summary, "sweep finished");
    Ok(summary)
}

/// Gave-up items are reported on the failure DLQ like any other failure an operator must see.
async fn dead_letter(
    imp: &Importer,
    id: &crate::domain::granule::GranuleId,
    state: ItemState,
) -> Result<(), ImportError> {
    let body = serde_json::json!({ "item_id": id, "state": state }).to_string();
    imp.ctx
        .failure_dlq
        .send(
            OutgoingMessage::new(body)
                .with_attribute("outcome", "TIMED_OUT")
                .with_attribute("reason", format!("timed out; attempts exhausted ({state})")),
        )
        .await?;
    Ok(())
}
