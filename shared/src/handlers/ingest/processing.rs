//! A processing job's end, applied to its ingest job: by the job monitor when Batch's event comes
//! (the same rule and queue as granules' ends), or by the dispatcher when DescribeJobs finds the
//! end first (the reconciler for a lost event). Both call [`on_end`]; the record's If-Match and
//! the attempt named in the job's name make the second one a no-op.

use crate::contracts::ingest::IngestNotice;
use crate::contracts::messages::{Notice, Outcome};
use crate::domain::classify::Classification;
use crate::domain::ingest::decisions::{on_processing_end, ProcessingEnd};
use crate::domain::ingest::index::JobId;
use crate::domain::ingest::job::JobState;
use crate::domain::machine::Refused;
use crate::handlers::HandlerError;
use crate::ports::Queue;
use crate::repositories::ingest::{Changed, Ingest};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One ended processing job, as Batch described it.
#[derive(Debug, Clone)]
pub struct EndedProcessing {
    pub ingest_job: JobId,
    pub batch_job_id: String,
    pub batch_job_name: String,
    pub classification: Classification,
}

/// What the end did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingOutcome {
    /// Not the attempt the record waits for (or the job is gone): nothing changed.
    Stale,
    /// On to storing.
    Processed,
    /// The next attempt is due: the dispatcher submits it on its next tick.
    Retrying { attempt: u32 },
    /// Failed and dead-lettered.
    Failed,
}

/// Applies `ended` to its ingest job. A failure is dead-lettered *before* the record says
/// failed: a crash between the two leaves a processing record, and the next delivery (or the
/// dispatcher's DescribeJobs) decides again and sends again — a notice may come twice, never
/// not at all.
pub async fn on_end(
    ingest: &Ingest,
    failure_dlq: &dyn Queue,
    max_attempts: u32,
    ended: &EndedProcessing,
    now: DateTime<Utc>,
) -> Result<ProcessingOutcome, HandlerError> {
    let decide = |job: &crate::domain::ingest::record::JobRecord| {
        on_processing_end(
            job,
            &ended.batch_job_name,
            &ended.classification,
            max_attempts,
        )
    };
    let Some(current) = ingest.job(&ended.ingest_job).await? else {
        tracing::warn!(ingest_job = %ended.ingest_job, batch_job = ended.batch_job_id, "the ingest job is gone (deleted): its processing end is dropped");
        return Ok(ProcessingOutcome::Stale);
    };
    let first = decide(&current.value);
    let notice_after_record = crate::mutants::on("ingest-notice-after-record");
    // The DLQ notice of a failed processing, for the job as `job` has it.
    let send_notice = |job: &crate::domain::ingest::record::JobRecord, reason: &str| {
        let body = IngestNotice {
            ingest_job: job.id.clone(),
            batch: job.batch.clone(),
            collection: job.collection.clone(),
            processing_job: ended.batch_job_id.clone(),
            attempt: job.processing_attempt,
        };
        let notice = Notice::new(Outcome::NonRetryable, reason)
            .job(ended.batch_job_id.clone())
            .attempt(job.processing_attempt);
        async move {
            failure_dlq.send(body.to_message(&notice)?).await?;
            Ok::<(), HandlerError>(())
        }
    };
    if let (ProcessingEnd::Failed { reason }, false) = (&first, notice_after_record) {
        send_notice(&current.value, reason).await?;
    }
    let changed = ingest
        .change_job(&ended.ingest_job, |r| {
            decide(r).applied(r, now).map_err(Refused::of)
        })
        .await?;
    let Changed::Moved(after) = changed else {
        return Ok(ProcessingOutcome::Stale);
    };
    if let (ProcessingEnd::Failed { reason }, true) = (&first, notice_after_record) {
        send_notice(&after, reason).await?;
    }
    tracing::info!(ingest_job = %after.id, batch_job = ended.batch_job_id, state = %after.state, reason = after.reason, "processing ended");
    Ok(match after.state {
        JobState::Storing => ProcessingOutcome::Processed,
        JobState::Failed => ProcessingOutcome::Failed,
        _ => ProcessingOutcome::Retrying {
            attempt: after.processing_attempt,
        },
    })
}
