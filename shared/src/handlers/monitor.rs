//! The job monitor: one Batch Job State Change event in, the outcome logged, then routed.

use super::Ctx;
use crate::domain::batch_event::{BatchEventError, BatchJobStateChange};
use crate::domain::classify::{classify, Classification, Route};
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::log_key::{LogKey, LogOutcome, LogRecord, Supersession};
use crate::ports::{OutgoingMessage, PutCondition, QueueError, StoreError};
use crate::state::{read_json, write_json, StateError};
use chrono::Utc;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error(transparent)]
    Event(#[from] BatchEventError),
    #[error("job {job_id} carries no usable granule: {why}")]
    NoGranule { job_id: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Queue(#[from] QueueError),
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
    /// Batch's RetryStrategy will retry: logged, not routed.
    BatchRetries,
    /// This event was already handled (a duplicate delivery).
    Duplicate,
    /// A failure for a granule that has already succeeded (a late or reordered event).
    AlreadySucceeded,
    /// Not a terminal state: nothing to do.
    Ignored,
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

/// Handles one SQS message body: an EventBridge event as delivered by the rule.
pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, MonitorError> {
    let raw: serde_json::Value = serde_json::from_str(body).map_err(BatchEventError::from)?;
    let event = BatchJobStateChange::from_value(raw.clone())?;
    let job = &event.detail;
    let classification = match classify(job) {
        Ok(c) => c,
        Err(not_terminal) => {
            tracing::info!(job_id = job.job_id, status = ?not_terminal.status, "non-terminal event ignored");
            return Ok(MonitorOutcome::Ignored);
        }
    };
    let granule = granule_of(job)?;
    let facts = ctx.config.id_parser.facts(&granule.granule_id);
    let route = classification.route();
    tracing::info!(
        granule_id = %granule.granule_id, attempt = granule.attempt, job_id = job.job_id,
        outcome = ?classification.outcome, ?route, reason = classification.reason, "job finished"
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
        job_id: job.job_id.clone(),
        job_name: job.job_name.clone(),
        logged_at: Utc::now(),
        routed_at: None,
        superseded: None,
        job: raw.get("detail").cloned().unwrap_or_default(),
    };
    let key = LogKey::new(record.outcome, &facts, &granule.granule_id, granule.attempt);
    let reason = classification.reason.clone();
    let outcome = match route {
        // The log line above is the record; the final event for this job will come.
        Route::BatchRetries => return Ok(MonitorOutcome::BatchRetries),
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
    Ok(outcome)
}

/// The granule and attempt a job was submitted for: its container environment, else its parameters.
fn granule_of(
    job: &crate::domain::batch_event::JobDetail,
) -> Result<GranuleProcessingEvent, MonitorError> {
    let no = |why: String| MonitorError::NoGranule {
        job_id: job.job_id.clone(),
        why,
    };
    let id = job
        .env("GRANULE_ID")
        .or(job.parameters.get("granule_id").map(String::as_str))
        .ok_or_else(|| {
            no("neither GRANULE_ID in the environment nor a granule_id parameter".into())
        })?;
    let attempt = job
        .env("ATTEMPT")
        .or(job.parameters.get("attempt").map(String::as_str))
        .ok_or_else(|| no("neither ATTEMPT in the environment nor an attempt parameter".into()))?;
    let granule_id = GranuleId::parse(id).map_err(|e| no(e.to_string()))?;
    let attempt = attempt
        .parse::<u32>()
        .ok()
        .filter(|a| *a >= 1)
        .ok_or_else(|| no(format!("attempt {attempt:?} is not a positive integer")))?;
    Ok(GranuleProcessingEvent {
        granule_id,
        attempt,
    })
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
    let outcome = serde_json::to_value(classification.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    queue
        .send(
            OutgoingMessage::new(serde_json::to_string(&message).unwrap_or_default())
                .with_attribute("outcome", outcome)
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
