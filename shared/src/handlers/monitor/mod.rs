//! The job monitor: one Batch Job State Change event in, the outcome logged, then routed.

use super::Ctx;
use crate::domain::batch_event::BatchEventError;
use crate::domain::classify::Route;
use crate::domain::job_end::{on_job_event, EventRejection, JobEnd};
use crate::handlers::ingest::processing::{self, EndedProcessing, ProcessingOutcome};
use crate::handlers::HandlerError;
use serde::Serialize;

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
    /// A failure for a granule that has already succeeded, at `by_attempt` (a late or reordered
    /// event, or a timeout the sweeper judged of an attempt that had succeeded): not routed; an
    /// item record still at the failing attempt follows the success.
    AlreadySucceeded { by_attempt: u32 },
    /// Not a terminal state: nothing to do.
    Ignored,
    /// The parent of an array window ended: its children's own events carry their granules.
    ArrayParent,
    /// An ingest job's processing job ended: its record moved on (or the end was stale).
    IngestProcessing {
        ingest_job: String,
        outcome: ProcessingOutcome,
    },
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
pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, HandlerError> {
    let outcome = handle_event(ctx, body).await?;
    use crate::domain::metrics::Metric;
    match outcome {
        MonitorOutcome::Rejected { .. } => ctx.metrics.count(Metric::EventsRejected, &[], 1),
        _ => ctx.metrics.count(Metric::EventsHandled, &[], 1),
    }
    Ok(outcome)
}

async fn handle_event(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, HandlerError> {
    let decided = serde_json::from_str::<serde_json::Value>(body)
        .map_err(|e| EventRejection::from(BatchEventError::from(e)))
        .and_then(|mut raw| {
            let (_, end) = on_job_event(&raw)?;
            // Moved out, not copied: the event is done with once decided.
            let detail = raw
                .get_mut("detail")
                .map_or(serde_json::Value::Null, serde_json::Value::take);
            Ok((end, detail))
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
        Ok((
            JobEnd::IngestJob {
                job_id,
                job_name,
                ingest_job,
                classification,
            },
            _,
        )) => {
            let ended = (job_id, job_name, ingest_job, classification);
            ingest_processing_ended(ctx, ended, body).await
        }
        Ok((JobEnd::Finished(finished), detail)) => job_finished(ctx, finished, detail, BY).await,
        Ok((JobEnd::WindowChild(child), detail)) => {
            window_child(ctx, child, detail, BY, "batch events queue", Some(body)).await
        }
        Ok((JobEnd::ArrayParent { job_id, status }, _)) => {
            tracing::info!(
                job_id,
                status = status.as_str(),
                "an array window's parent ended: its children's events are handled one by one"
            );
            Ok(MonitorOutcome::ArrayParent)
        }
    }
}

/// An ingest job's processing job ended: its record moves on (`processing::on_end`). A job naming
/// no ingest job id is rejected with the reason.
async fn ingest_processing_ended(
    ctx: &Ctx,
    (job_id, job_name, ingest_job, classification): (
        String,
        String,
        String,
        crate::domain::classify::Classification,
    ),
    body: &str,
) -> Result<MonitorOutcome, HandlerError> {
    let Ok(ingest_job) = crate::domain::ingest::index::JobId::parse(&ingest_job) else {
        let reason = format!(
            "job {job_id} names ingest job {:?}, which is no ingest job id",
            crate::domain::poison::RawText::of(&ingest_job).shown()
        );
        ctx.reject(
            crate::domain::poison::RejectKind::EventWithoutGranule,
            &reason,
            "batch events queue",
            body,
        )
        .await?;
        return Ok(MonitorOutcome::Rejected { reason });
    };
    let ended = EndedProcessing {
        ingest_job,
        batch_job_id: job_id,
        batch_job_name: job_name,
        classification,
    };
    let ingest = ctx.ingest();
    let outcome = processing::on_end(
        &ingest,
        ctx.failure_dlq.as_ref(),
        ctx.config.max_attempt(),
        &ended,
        crate::clock::now(),
    )
    .await?;
    Ok(MonitorOutcome::IngestProcessing {
        ingest_job: ended.ingest_job.to_string(),
        outcome,
    })
}

/// A child of an array window ended: its granule is read from the window claim, then its end is
/// handled as a single job's would be. A child whose claim cannot name its granule is rejected
/// with the reason (no delivery could ever handle it).
async fn window_child(
    ctx: &Ctx,
    child: crate::domain::job_end::WindowChildEnd,
    detail: serde_json::Value,
    by: &str,
    found_by: &str,
    // What the reject prefix keeps of an event that cannot be handled: the message as it came,
    // else (a DescribeJobs answer) the detail, written out only when it is rejected.
    input: Option<&str>,
) -> Result<MonitorOutcome, HandlerError> {
    use crate::repositories::windows::{ChildOf, WindowGranuleError};
    // The claim is in the array's campaign's state, whichever campaign this stack runs now.
    let ctx = &*ctx.in_campaign(child.campaign.as_ref());
    let parent = child
        .job_id
        .rsplit_once(':')
        .map_or(child.job_id.as_str(), |(p, _)| p);
    let granule = match &child.claim_bucket {
        Some(bucket) if *bucket != ctx.config.layout.bucket => {
            Err(WindowGranuleError::Unknown(format!(
                "its window claim is in bucket {}, not granary's",
                crate::domain::poison::RawText::of(bucket).shown()
            )))
        }
        _ => {
            ctx.window_granule(ChildOf {
                claim_key: &child.claim_key,
                parent,
                token: child.claim_token.as_deref(),
                index: child.index,
            })
            .await
        }
    };
    match granule {
        Ok(entry) => job_finished(ctx, child.of_entry(entry), detail, by).await,
        Err(WindowGranuleError::Read(e)) => Err(e.into()),
        // Delivered again after the visibility timeout, by when the claim names its array.
        Err(WindowGranuleError::NotRecordedYet(why)) => Err(HandlerError::InFlight(why)),
        Err(WindowGranuleError::Unknown(why)) => {
            let reason = format!("array child {}: {why}", child.job_id);
            let input = input.map_or_else(|| detail.to_string(), str::to_owned);
            ctx.reject(
                crate::domain::poison::RejectKind::EventWithoutGranule,
                &reason,
                found_by,
                &input,
            )
            .await?;
            Ok(MonitorOutcome::Rejected { reason })
        }
    }
}

mod brake;
mod described;
mod end;

pub use brake::brake;
pub use described::{described_job, job_finished, logged_end, KnownAttempt, BY, RECOVERED_BY};
use end::handle_end;

#[cfg(test)]
mod tests;
