//! The requeuer: a retryable failure in, the next attempt submitted (exactly once), or the DLQ
//! once the attempt budget is spent.

use super::Ctx;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::metrics::{Metric, FAILURE_CLASS, PLATFORM};
use crate::handlers::HandlerError;
use crate::ports::QueueError;
use crate::repositories::SubmitOutcome;
use serde::Serialize;

pub const ATTEMPTS_EXHAUSTED: &str = "attempts exhausted";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum RequeueOutcome {
    Resubmitted {
        attempt: u32,
        job_id: String,
    },
    /// The next attempt was already submitted (a duplicate retry message).
    AlreadySubmitted {
        attempt: u32,
    },
    DeadLettered {
        reason: String,
    },
}

pub async fn handle_sqs(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    // One message at a time: each is reported on its own, and Batch's SubmitJob rate is the limit anyway.
    super::for_each_record(event, 1, |body| async move {
        handle_message(ctx, &body).await.map(|_| ())
    })
    .await
}

pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<RequeueOutcome, HandlerError> {
    let message: RetryMessage = match serde_json::from_str(body) {
        Ok(m) => m,
        Err(e) => {
            // Permanent: recorded and dead-lettered at once, never redelivered.
            let reason = format!("malformed retry message: {e}");
            ctx.reject(
                crate::repositories::rejects::RejectKind::MalformedRetryMessage,
                &reason,
                "retry queue",
                body,
            )
            .await?;
            return Ok(RequeueOutcome::DeadLettered { reason });
        }
    };
    let span = tracing::info_span!(
        "retry_message",
        granule_id = %message.event.granule_id,
        attempt = message.event.attempt,
        campaign = message.campaign.as_ref().map_or("", |c| c.as_str()),
    );
    tracing::Instrument::instrument(requeue(ctx, message), span).await
}

/// The retry of a readable message (its granule and attempt on the span around it).
async fn requeue(ctx: &Ctx, message: RetryMessage) -> Result<RequeueOutcome, HandlerError> {
    // The attempt is its campaign's, whichever campaign this stack runs now.
    let ctx = &*ctx.in_campaign(message.campaign.as_ref());
    let event = message.event;
    let next = event.next_attempt();
    // A redrive (an operator's decision) grants the next attempt past the budget.
    if next.attempt > ctx.config.max_attempt() && !message.redrive {
        // The DLQ keeps the attempt and its campaign, so a redrive sends it back to the same.
        let body = serde_json::to_string(
            &RetryMessage::ended(event.granule_id.clone(), event.attempt)
                .of_campaign(message.campaign.clone()),
        )?;
        dead_letter(ctx, body, ATTEMPTS_EXHAUSTED, event.attempt).await?;
        // Counted once sent: a redelivery after a later failure sends (and counts) it again,
        // as the DLQ then holds it twice.
        let facts = ctx.config.layout.id_parser.facts(&event.granule_id);
        let dims = [
            (PLATFORM, facts.platform.as_deref().unwrap_or("unknown")),
            (FAILURE_CLASS, "attempts_exhausted"),
        ];
        ctx.metrics.count(Metric::GranulesDeadLettered, &dims, 1);
        super::item_sync::abandoned(ctx, &event).await?;
        tracing::warn!(granule_id = %event.granule_id, attempt = event.attempt, "attempts exhausted: dead-lettered");
        return Ok(RequeueOutcome::DeadLettered {
            reason: ATTEMPTS_EXHAUSTED.to_owned(),
        });
    }
    let outcome = ctx.submit_once(&next, "requeuer").await?;
    // Counted as it happens (a record write failing after it does not undo the submission; a
    // job a dead run submitted, found now, was never counted by that run).
    if matches!(
        outcome,
        SubmitOutcome::Submitted { .. } | SubmitOutcome::Recovered { .. }
    ) {
        ctx.metrics.count(Metric::GranulesSubmitted, &[], 1);
    }
    if let SubmitOutcome::Submitted { job_id }
    | SubmitOutcome::AlreadySubmitted { job_id }
    | SubmitOutcome::Recovered { job_id } = &outcome
    {
        super::item_sync::submitted(ctx, &next, job_id, None, "requeuer").await?;
    }
    match outcome {
        SubmitOutcome::Submitted { job_id } | SubmitOutcome::Recovered { job_id } => {
            tracing::info!(granule_id = %next.granule_id, attempt = next.attempt, job_id, "resubmitted");
            Ok(RequeueOutcome::Resubmitted {
                attempt: next.attempt,
                job_id,
            })
        }
        SubmitOutcome::AlreadySubmitted { .. } => Ok(RequeueOutcome::AlreadySubmitted {
            attempt: next.attempt,
        }),
        SubmitOutcome::InFlight => Err(HandlerError::InFlight(format!(
            "attempt {} of {} is claimed by a run still in flight",
            next.attempt, next.granule_id
        ))),
    }
}

async fn dead_letter(
    ctx: &Ctx,
    body: String,
    reason: &str,
    attempt: u32,
) -> Result<(), QueueError> {
    let notice = Notice::new(Outcome::NonRetryable, reason).attempt(attempt);
    ctx.failure_dlq.send(notice.on(body)).await
}
