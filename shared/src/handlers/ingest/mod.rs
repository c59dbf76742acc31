//! The ingest queue's steps (design document 004), each a plain async function over
//! [`IngestCtx`]: submit, then — on every tick of the dispatcher's schedule — batches spawn their
//! jobs, jobs move through estimating, provisioning, downloading, processing (an AWS Batch job),
//! recording and notify, and batches whose jobs have all ended report and are cleaned up. A step
//! reads the queue's index for its state (priority order), takes each job with a compare-and-swap
//! on its record, and decides with `domain::ingest::decisions`.

pub mod batches;
pub mod jobs;
pub mod operator;

use crate::domain::ingest::record::{BatchRecord, Submission};
use crate::ports::{EventBus, EventBusError, JobRunner, JobRunnerError, ObjectStore, Remote};
use crate::repositories::ingest::{Ingest, IngestError};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_PREFIX: &str = "ingest/";
pub const DEFAULT_CAPACITY_BYTES: u64 = 100 * 1024 * 1024 * 1024;
pub const DEFAULT_LARGE_JOB_BYTES: u64 = 10 * 1024 * 1024 * 1024;
pub const DEFAULT_DOWNLOAD_ATTEMPTS: u32 = 3;
pub const DEFAULT_CALLBACK_ATTEMPTS: u32 = 3;
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;
pub const DEFAULT_BUS: &str = "default";
/// A manifest larger than this is refused (it is read whole to spawn the batch's jobs).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024 * 1024;

/// The ingest queue's settings (`GRANARY_INGEST_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestSettings {
    /// Where its records, indexes, files and reports live in the bucket.
    pub prefix: String,
    /// Bytes that may be downloading or processing at once (the provisioning step's limit).
    pub capacity_bytes: u64,
    /// A job needing more than this steps back in priority after estimating.
    pub large_job_bytes: u64,
    pub download_attempts: u32,
    pub callback_attempts: u32,
    /// Per request (HEAD, GET of one file, callback).
    pub timeout: Duration,
    /// The EventBridge bus job and batch events are published on.
    pub bus_name: String,
}

impl Default for IngestSettings {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            capacity_bytes: DEFAULT_CAPACITY_BYTES,
            large_job_bytes: DEFAULT_LARGE_JOB_BYTES,
            download_attempts: DEFAULT_DOWNLOAD_ATTEMPTS,
            callback_attempts: DEFAULT_CALLBACK_ATTEMPTS,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            bus_name: DEFAULT_BUS.to_owned(),
        }
    }
}

impl IngestSettings {
    /// From any lookup; unset variables keep their defaults.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, crate::config::ConfigError> {
        let d = Self::default();
        let number = |var: &'static str, default: u64| -> Result<u64, crate::config::ConfigError> {
            match get(var).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(raw) => raw.parse().map_err(|e: std::num::ParseIntError| {
                    crate::config::ConfigError::Invalid {
                        var,
                        value: raw.clone(),
                        why: e.to_string(),
                    }
                }),
            }
        };
        let prefix = get("GRANARY_INGEST_PREFIX")
            .filter(|v| !v.is_empty())
            .unwrap_or(d.prefix);
        if prefix.starts_with('/') || !prefix.ends_with('/') {
            return Err(crate::config::ConfigError::Invalid {
                var: "GRANARY_INGEST_PREFIX",
                value: prefix,
                why: "a key prefix must end with '/' and not start with one".into(),
            });
        }
        let at_least_one = |n: u64| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        Ok(Self {
            prefix,
            capacity_bytes: number("GRANARY_INGEST_CAPACITY_BYTES", d.capacity_bytes)?,
            large_job_bytes: number("GRANARY_INGEST_LARGE_JOB_BYTES", d.large_job_bytes)?,
            download_attempts: at_least_one(number(
                "GRANARY_INGEST_DOWNLOAD_ATTEMPTS",
                u64::from(d.download_attempts),
            )?),
            callback_attempts: at_least_one(number(
                "GRANARY_INGEST_CALLBACK_ATTEMPTS",
                u64::from(d.callback_attempts),
            )?),
            timeout: Duration::from_secs(number(
                "GRANARY_INGEST_TIMEOUT_SECS",
                d.timeout.as_secs(),
            )?),
            bus_name: get("GRANARY_NOTIFICATION_BUS")
                .filter(|v| !v.is_empty())
                .unwrap_or(d.bus_name),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IngestStepError {
    #[error(transparent)]
    Records(#[from] IngestError),
    #[error(transparent)]
    Store(#[from] crate::ports::StoreError),
    #[error("asking Batch: {0}")]
    Batch(#[from] JobRunnerError),
    #[error("announcing: {0}")]
    Bus(#[from] EventBusError),
    #[error(transparent)]
    Encode(#[from] crate::contracts::EncodeError),
    #[error("{0}")]
    Refused(String),
}

/// Everything the ingest steps need.
#[derive(Clone)]
pub struct IngestCtx {
    pub bucket: String,
    pub store: Arc<dyn ObjectStore>,
    pub jobs: Arc<dyn JobRunner>,
    pub remote: Arc<dyn Remote>,
    pub bus: Arc<dyn EventBus>,
    pub ingest: Ingest,
    pub settings: IngestSettings,
}

impl IngestCtx {
    pub fn new(
        bucket: &str,
        store: Arc<dyn ObjectStore>,
        jobs: Arc<dyn JobRunner>,
        remote: Arc<dyn Remote>,
        bus: Arc<dyn EventBus>,
        settings: IngestSettings,
    ) -> Self {
        Self {
            bucket: bucket.to_owned(),
            ingest: Ingest::new(store.clone(), &settings.prefix),
            store,
            jobs,
            remote,
            bus,
            settings,
        }
    }
}

/// Creates a pending batch and returns at once; the dispatcher spawns its jobs.
pub async fn submit(
    ictx: &IngestCtx,
    submission: Submission,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<BatchRecord, IngestStepError> {
    let body = crate::contracts::encode("a submission", &submission)?;
    let key = format!("{}{}", String::from_utf8_lossy(&body), now.to_rfc3339());
    submit_keyed(ictx, submission, now, &key).await
}

/// Like [`submit`], with the batch id derived from `key` (a queue message's id): the same message
/// delivered twice creates one batch.
pub async fn submit_keyed(
    ictx: &IngestCtx,
    submission: Submission,
    now: chrono::DateTime<chrono::Utc>,
    key: &str,
) -> Result<BatchRecord, IngestStepError> {
    use sha2::{Digest, Sha256};
    if submission.collection.is_empty()
        || !submission
            .collection
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(IngestStepError::Refused(format!(
            "collection {:?}: letters, digits, '-' and '_' only",
            submission.collection
        )));
    }
    let digest = format!("{:x}", Sha256::digest(key.as_bytes()));
    let id = crate::domain::ingest::index::BatchId::new(now, &digest);
    let record = BatchRecord::new(id, submission, now);
    Ok(ictx.ingest.create_batch(&record).await?)
}

/// The ingest-submit Lambda: each SQS record is a submission — its JSON, or an EventBridge event
/// whose `detail` is one (the notification bus's submission rule forwards them). A record that is
/// not a submission is reported failed; SQS redelivers it and then parks it in the submissions
/// DLQ, where its alarm fires. The batch id comes from the message id, so a redelivered message
/// creates no second batch.
pub async fn handle_submissions(
    ictx: &IngestCtx,
    event: aws_lambda_events::event::sqs::SqsEvent,
    now: chrono::DateTime<chrono::Utc>,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        let outcome = match crate::contracts::ingest::submission_of(body) {
            Err(why) => Err(why),
            Ok(submission) => submit_keyed(ictx, submission, now, &id)
                .await
                .map(|b| tracing::info!(batch = %b.id, message = id, "batch submitted"))
                .map_err(|e| e.to_string()),
        };
        if let Err(why) = outcome {
            tracing::error!(
                message = id,
                error = why,
                "submission not taken; SQS will redeliver it"
            );
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// What one tick of the dispatcher did, per step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TickSummary {
    pub batches_spawned: u64,
    pub batches_held: u64,
    pub jobs_created: u64,
    pub dispatched: u64,
    pub held: u64,
    pub failed: u64,
    pub estimated: u64,
    pub provisioned: u64,
    pub waiting_for_capacity: u64,
    pub downloaded: u64,
    pub processing_submitted: u64,
    pub processed: u64,
    pub recorded: u64,
    pub notified: u64,
    pub batches_reported: u64,
    pub batches_cleaned: u64,
    /// Stale index markers repaired on the way.
    pub repaired: u64,
}

/// One pass of every step, in pipeline order. A step's trouble with one job is logged and left
/// for the next tick; the rest go on.
pub async fn tick(
    ictx: &IngestCtx,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<TickSummary, IngestStepError> {
    let mut s = TickSummary::default();
    batches::spawn(ictx, now, &mut s).await?;
    jobs::dispatch(ictx, now, &mut s).await?;
    jobs::estimate(ictx, now, &mut s).await?;
    jobs::provision(ictx, now, &mut s).await?;
    jobs::download(ictx, now, &mut s).await?;
    jobs::process(ictx, now, &mut s).await?;
    jobs::record(ictx, now, &mut s).await?;
    jobs::notify(ictx, now, &mut s).await?;
    batches::report(ictx, now, &mut s).await?;
    batches::clean_up(ictx, now, &mut s).await?;
    Ok(s)
}

#[cfg(test)]
mod tests;
