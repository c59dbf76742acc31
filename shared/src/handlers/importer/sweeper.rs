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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
    use crate::config::Config;
    use crate::domain::batch_event::JobStatus;
    use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
    use crate::domain::item::NewItem;
    use crate::handlers::Ctx;
    use crate::ports::{JobRequest, JobRunner, Queue};
    use std::sync::Arc;

    async fn importer(jobs: Arc<MemoryJobRunner>) -> (Importer, Arc<MemoryQueue>) {
        let env = [
            ("GRANARY_BUCKET", "b"),
            ("GRANARY_JOB_QUEUE", "q"),
            ("GRANARY_JOB_DEFINITION", "d"),
            ("GRANARY_RETRY_QUEUE_URL", "r"),
            ("GRANARY_FAILURE_DLQ_URL", "f"),
            ("GRANARY_PROCESSING_TIMEOUT_SECS", "60"),
            ("GRANARY_MAX_RETRIES", "0"),
        ];
        let config = Config::from_lookup(|k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
        let store = Arc::new(MemoryStore::new());
        let dlq = Arc::new(MemoryQueue::new("dlq"));
        let ctx = Ctx {
            config,
            store: store.clone(),
            jobs,
            retry_queue: Arc::new(MemoryQueue::new("retry")),
            failure_dlq: dlq.clone(),
        };
        let imp = Importer {
            ctx,
            source: None,
            import_queue: Some(Arc::new(MemoryQueue::new("import"))),
            prerequisites: Arc::new(super::super::ObjectsExist {
                store,
                templates: vec![],
            }),
        };
        (imp, dlq)
    }

    async fn processing(imp: &Importer, id: &str, job_id: &str) -> GranuleId {
        let id = GranuleId::parse(id).unwrap();
        imp.ctx
            .items()
            .create(NewItem::ready(id.clone(), "t", None), "t")
            .await
            .unwrap();
        let event = GranuleProcessingEvent {
            granule_id: id.clone(),
            attempt: 1,
        };
        crate::handlers::item_sync::submitted(&imp.ctx, &event, job_id, None, "t")
            .await
            .unwrap();
        id
    }

    async fn state(imp: &Importer, id: &GranuleId) -> ItemState {
        imp.ctx.items().get(id).await.unwrap().unwrap().value.state
    }

    #[tokio::test]
    async fn asks_batch_before_failing_a_processing_item() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let (imp, dlq) = importer(jobs.clone()).await;
        let request = |n: &str| JobRequest {
            job_name: n.into(),
            environment: Default::default(),
            parameters: Default::default(),
        };
        let alive = jobs.submit(request("alive")).await.unwrap().job_id;
        let done = jobs.submit(request("done")).await.unwrap().job_id;
        jobs.set_status(&done, JobStatus::Succeeded);
        let a = processing(&imp, "alive-item", &alive).await;
        let d = processing(&imp, "done-item", &done).await;
        let lost = processing(&imp, "lost-item", "no-such-job").await;
        let late = Utc::now() + chrono::Duration::seconds(61);
        let s = sweep(&imp, late).await.unwrap();
        assert_eq!(
            (s.examined, s.job_alive, s.completed_by_batch, s.gave_up),
            (3, 1, 1, 1),
            "{s:?}"
        );
        assert_eq!(state(&imp, &a).await, Processing);
        assert_eq!(state(&imp, &d).await, Processed);
        // one attempt allowed (GRANARY_MAX_RETRIES=0): the lost job's item gives up
        assert_eq!(state(&imp, &lost).await, Abandoned);
        assert_eq!(dlq.depth().await.unwrap().visible, 1);
        // only the live job's item is still indexed
        let left = imp.ctx.items().inflight().await.unwrap();
        assert_eq!(left, vec![(Processing, a)]);
    }

    #[tokio::test]
    async fn leaves_items_within_their_time_and_clears_stale_markers() {
        let (imp, _) = importer(Arc::new(MemoryJobRunner::default())).await;
        let id = processing(&imp, "fresh", "job-x").await;
        let s = sweep(&imp, Utc::now()).await.unwrap();
        assert_eq!((s.examined, s.within_time), (1, 1));
        // a marker left behind by a crash after the record moved on
        imp.ctx
            .store
            .put(
                "inflight/DOWNLOADING/fresh",
                bytes::Bytes::new(),
                crate::ports::PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let s = sweep(&imp, Utc::now()).await.unwrap();
        assert_eq!(s.stale_markers, 1);
        assert_eq!(
            imp.ctx.items().inflight().await.unwrap(),
            vec![(Processing, id)]
        );
    }
}
