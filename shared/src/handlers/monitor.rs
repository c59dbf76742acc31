//! The job monitor: one Batch Job State Change event in, the outcome logged, then routed.

use super::Ctx;
use crate::domain::batch_event::BatchEventError;
use crate::domain::classify::{Classification, Route};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::job_end::{on_job_event, EventRejection, FinishedJob, JobEnd};
use crate::domain::log_key::{LogKey, LogOutcome, LogRecord, Supersession};
use crate::ports::{OutgoingMessage, PutCondition, QueueError, StoreError};
use crate::rejects::RejectError;
use crate::state::{read_json, write_json, StateError};
use chrono::Utc;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Reject(#[from] RejectError),
    #[error("serialising the retry message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("updating the item record: {0}")]
    Items(#[from] crate::items::ItemError),
    #[error("attempt {attempt} of {granule_id} is being routed by another delivery; retry later")]
    RoutingInFlight { granule_id: String, attempt: u32 },
}

/// What the monitor did with one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum MonitorOutcome {
    /// Success logged (and earlier failure logs relocated).
    Succeeded { relocated: usize },
    /// Failure logged and sent to the retry queue or the DLQ.
    Routed { route: Route },
    /// This event was already handled (a duplicate delivery).
    Duplicate,
    /// A failure for a granule that has already succeeded (a late or reordered event).
    AlreadySucceeded,
    /// Not a terminal state: nothing to do.
    Ignored,
    /// An event no delivery could ever handle: recorded under the reject prefix and
    /// dead-lettered with its reason at once, instead of being redelivered until SQS parks it.
    Rejected { reason: String },
}

pub async fn handle_sqs(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    super::for_each_record(event, 10, |body| async move {
        handle_message(ctx, &body).await.map(|_| ())
    })
    .await
}

/// Handles one SQS message body: an EventBridge event as delivered by the rule. Transient errors
/// (S3, SQS) are returned, so SQS redelivers the message; permanent ones are rejected here.
pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, MonitorError> {
    let decided = serde_json::from_str::<serde_json::Value>(body)
        .map_err(|e| EventRejection::from(BatchEventError::from(e)))
        .and_then(|raw| {
            let detail = raw
                .get("detail")
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            on_job_event(raw).map(|(_, end)| (end, detail))
        });
    match decided {
        Err(rejection) => {
            let reason = rejection.to_string();
            ctx.reject(rejection.kind(), &reason, "batch events queue", body)
                .await?;
            Ok(MonitorOutcome::Rejected { reason })
        }
        Ok((JobEnd::NotFinished { job_id, status }, _)) => {
            tracing::info!(
                job_id,
                status = status.as_str(),
                "non-terminal event ignored"
            );
            Ok(MonitorOutcome::Ignored)
        }
        Ok((JobEnd::Finished(finished), detail)) => job_finished(ctx, finished, detail).await,
    }
}

/// A job as DescribeJobs describes it, handled as its event would have been (the reconciler and the
/// sweeper find ends whose event never came). `Ok(None)` while the job has not ended; a
/// description no code can read is recorded and dead-lettered like an unreadable event.
pub async fn described_job(
    ctx: &Ctx,
    description: crate::ports::JobDescription,
    found_by: &str,
) -> Result<Option<MonitorOutcome>, MonitorError> {
    if !description.summary.status.is_terminal() {
        return Ok(None);
    }
    let decided =
        serde_json::from_value::<crate::domain::batch_event::JobDetail>(description.detail.clone())
            .map_err(|e| EventRejection::from(BatchEventError::from(e)))
            .and_then(|detail| crate::domain::job_end::on_job_detail(&detail));
    match decided {
        Ok(JobEnd::Finished(finished)) => {
            Ok(Some(job_finished(ctx, finished, description.detail).await?))
        }
        Ok(JobEnd::NotFinished { .. }) => Ok(None),
        Err(rejection) => {
            let reason = format!(
                "DescribeJobs answer for job {}: {rejection}",
                description.summary.job_id
            );
            ctx.reject(
                rejection.kind(),
                &reason,
                found_by,
                &description.detail.to_string(),
            )
            .await?;
            Ok(Some(MonitorOutcome::Rejected { reason }))
        }
    }
}

/// Logs a finished job's outcome, then routes its granule. `detail` is the whole JobDetail as
/// Batch gave it (the log keeps it, `attempts[]` included, so Spot reclaims Batch absorbed stay
/// countable). Also called for jobs found finished by other means than an event.
pub async fn job_finished(
    ctx: &Ctx,
    finished: FinishedJob,
    detail: serde_json::Value,
) -> Result<MonitorOutcome, MonitorError> {
    let FinishedJob {
        granule,
        classification,
        route,
    } = finished;
    let facts = ctx.config.id_parser.facts(&granule.granule_id);
    let job_id = detail
        .get("jobId")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    let job_name = detail
        .get("jobName")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    tracing::info!(
        granule_id = %granule.granule_id, attempt = granule.attempt, job_id,
        outcome = ?classification.outcome, ?route, reason = classification.reason,
        batch_rules = classification.batch_rules, "job finished"
    );
    let record = LogRecord {
        granule_id: granule.granule_id.clone(),
        attempt: granule.attempt,
        outcome: if route == Route::Done {
            LogOutcome::Success
        } else {
            LogOutcome::Failure
        },
        classification: classification.clone(),
        route,
        job_id,
        job_name,
        logged_at: Utc::now(),
        routed_at: None,
        superseded: None,
        job: detail,
    };
    let key = LogKey::new(record.outcome, &facts, &granule.granule_id, granule.attempt);
    let reason = classification.reason.clone();
    let outcome = match route {
        Route::Done => log_success(ctx, &key, &record).await?,
        Route::RetryQueue | Route::FailureDlq => {
            log_and_route_failure(ctx, &key, record, &classification).await?
        }
    };
    // The log is the evidence and the route is the action; the item record follows them, also on
    // a duplicate delivery (the first may have died before getting here).
    let to = match (route, &outcome) {
        (_, MonitorOutcome::AlreadySucceeded) => None,
        (Route::Done, _) => Some(crate::domain::lifecycle::ItemState::Processed),
        _ => Some(crate::domain::lifecycle::ItemState::ProcessingFailed),
    };
    if let Some(to) = to {
        super::item_sync::finished(ctx, &granule, to, &reason).await?;
    }
    // Logged, routed, recorded: the attempt leaves the open-claims index the reconciler reads.
    ctx.store
        .delete(&crate::domain::claim::claim_key(
            &ctx.config.open_claim_prefix,
            &granule,
        ))
        .await?;
    Ok(outcome)
}

async fn log_success(
    ctx: &Ctx,
    key: &LogKey,
    record: &LogRecord,
) -> Result<MonitorOutcome, MonitorError> {
    let prefix = &ctx.config.log_prefix;
    let duplicate = match write_json(
        ctx.store.as_ref(),
        &key.to_key(prefix),
        record,
        PutCondition::IfAbsent,
    )
    .await
    {
        Ok(_) => false,
        Err(StoreError::Conflict { .. }) => true,
        Err(e) => return Err(e.into()),
    };
    // Attempt 1 has no earlier failures. On a duplicate, relocation still runs: the first delivery
    // may have died half-way through it.
    let relocated = if record.attempt > 1 {
        relocate_failures(ctx, key, record).await?
    } else {
        0
    };
    Ok(if duplicate && relocated == 0 {
        MonitorOutcome::Duplicate
    } else {
        MonitorOutcome::Succeeded { relocated }
    })
}

/// Moves the granule's failure logs under outcome=success, marked superseded, so that
/// outcome=failure means "still failing". Copy first, delete after: a crash leaves a duplicate,
/// never a loss.
async fn relocate_failures(
    ctx: &Ctx,
    success_key: &LogKey,
    success: &LogRecord,
) -> Result<usize, MonitorError> {
    let prefix = &ctx.config.log_prefix;
    let failures = success_key
        .with_outcome(LogOutcome::Failure)
        .granule_prefix(prefix);
    let mut moved = 0;
    for meta in ctx.store.list(&failures).await? {
        let Ok(old_key) = LogKey::parse(prefix, &meta.key) else {
            tracing::warn!(
                key = meta.key,
                "foreign object under the failure logs left alone"
            );
            continue;
        };
        let Some(old) = read_json::<LogRecord>(ctx.store.as_ref(), &meta.key).await? else {
            continue;
        };
        let mut record = old.value;
        record.superseded = Some(Supersession {
            by_attempt: success.attempt,
            by_job_id: success.job_id.clone(),
            at: Utc::now(),
        });
        let new_key = old_key.with_outcome(LogOutcome::Success).to_key(prefix);
        write_json(
            ctx.store.as_ref(),
            &new_key,
            &record,
            PutCondition::Overwrite,
        )
        .await?;
        ctx.store.delete(&meta.key).await?;
        moved += 1;
    }
    Ok(moved)
}

async fn log_and_route_failure(
    ctx: &Ctx,
    key: &LogKey,
    mut record: LogRecord,
    classification: &Classification,
) -> Result<MonitorOutcome, MonitorError> {
    let prefix = &ctx.config.log_prefix;
    let store = ctx.store.as_ref();
    // A late failure for a granule that already succeeded must not send it round again.
    let successes = key.with_outcome(LogOutcome::Success).granule_prefix(prefix);
    let succeeded = ctx
        .store
        .list(&successes)
        .await?
        .iter()
        .filter_map(|m| read_attempt(prefix, &m.key))
        .max();
    if let Some(by_attempt) = succeeded {
        let late_key = key.with_outcome(LogOutcome::Success).to_key(prefix);
        if by_attempt != record.attempt {
            record.superseded = Some(Supersession {
                by_attempt,
                by_job_id: String::new(),
                at: Utc::now(),
            });
            // Keep the evidence, filed as superseded; never overwrite the success itself.
            match write_json(store, &late_key, &record, PutCondition::IfAbsent).await {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!(granule_id = %record.granule_id, attempt = record.attempt, by_attempt, "failure for an already-succeeded granule: not routed");
        return Ok(MonitorOutcome::AlreadySucceeded);
    }

    let log_key = key.to_key(prefix);
    let etag = match write_json(store, &log_key, &record, PutCondition::IfAbsent).await {
        Ok(etag) => etag,
        Err(StoreError::Conflict { .. }) => {
            let Some(existing) = read_json::<LogRecord>(store, &log_key).await? else {
                return Err(StoreError::Conflict { key: log_key }.into());
            };
            if existing.value.routed_at.is_some() {
                return Ok(MonitorOutcome::Duplicate);
            }
            // Logged but not routed: either a concurrent delivery is routing it right now (wait,
            // SQS brings this message back) or one died before routing (finish its work).
            let age = Utc::now().signed_duration_since(existing.value.logged_at);
            if age.to_std().unwrap_or_default() < ctx.config.route_lease {
                return Err(MonitorError::RoutingInFlight {
                    granule_id: existing.value.granule_id.to_string(),
                    attempt: existing.value.attempt,
                });
            }
            record = existing.value;
            existing.etag.unwrap_or_default()
        }
        Err(e) => return Err(e.into()),
    };
    let route = record.route;
    let queue = if route == Route::RetryQueue {
        &ctx.retry_queue
    } else {
        &ctx.failure_dlq
    };
    let message = GranuleProcessingEvent {
        granule_id: record.granule_id.clone(),
        attempt: record.attempt,
    };
    queue
        .send(
            OutgoingMessage::new(serde_json::to_string(&message)?)
                .with_attribute("outcome", classification.outcome.as_str())
                .with_attribute("reason", record.classification.reason.clone())
                .with_attribute("job_id", record.job_id.clone())
                .with_attribute("attempt", record.attempt.to_string()),
        )
        .await?;
    record.routed_at = Some(Utc::now());
    match write_json(store, &log_key, &record, PutCondition::IfMatch(etag)).await {
        // A concurrent duplicate marked it first; the requeuer's claim absorbs the second message.
        Ok(_) | Err(StoreError::Conflict { .. }) => Ok(MonitorOutcome::Routed { route }),
        Err(e) => Err(e.into()),
    }
}

fn read_attempt(prefix: &str, key: &str) -> Option<u32> {
    LogKey::parse(prefix, key).ok().map(|k| k.attempt)
}
