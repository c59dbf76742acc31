//! The requeuer: a retryable failure in, the next attempt submitted (exactly once), or the DLQ
//! once the attempt budget is spent.

use super::Ctx;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::memory::{next_memory, MemoryLimits, MemoryStep};
use crate::domain::metrics::{Metric, FAILURE_CLASS, PLATFORM};
use crate::handlers::HandlerError;
use crate::ports::QueueError;
use crate::repositories::SubmitOutcome;
use serde::Serialize;

/// The DLQ reason of a granule whose attempts are spent (the audit counts it so too).
pub const ATTEMPTS_EXHAUSTED: &str = crate::domain::audit::EXHAUSTED;

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
    /// `granary cancel`'s hold takes the next attempt: not submitted, the granule listed for
    /// `granary resume --cancelled`.
    HeldBack {
        cancel: String,
    },
    /// Parked for the feeder's next window of retries (`GRANARY_ARRAY_RETRIES`): submitted with
    /// the other parked retries as one array job.
    Parked {
        attempt: u32,
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
    // Only the campaign the stack feeds has a feeder to take parked retries.
    let fed = message.campaign.as_ref() == ctx.campaign();
    // The attempt is its campaign's, whichever campaign this stack runs now.
    let ctx = &*ctx.in_campaign(message.campaign.as_ref());
    let ends = message.ends();
    // A redrive (an operator's decision) grants the next attempt past the budget.
    let budget = ctx.config.attempt_budget;
    if !budget.allows_retry(ends) && !message.redrive {
        return dead_letter_exhausted(ctx, &message, ends).await;
    }
    // An out-of-memory end goes round with more memory, or, at the cap, to the DLQ.
    let limits = ctx
        .config
        .jobs
        .as_ref()
        .map_or(DEFAULT_MEMORY, |j| j.memory);
    let memory_mib = match next_memory(
        message.memory_mib,
        message.out_of_memory,
        limits,
        message.redrive,
    ) {
        MemoryStep::Keep(mib) => mib,
        MemoryStep::Raise(mib) => Some(mib),
        MemoryStep::CapSpent { had } => {
            return Box::pin(dead_letter_out_of_memory(ctx, &message, had, limits)).await;
        }
    };
    let event = message.event;
    let next = event.next_attempt();
    // An operator's redrive or resume is their decision; a retry (not the importer's hand-off of
    // a READY item, attempt 0, which has no failed attempt to give up on) meets a cancel's hold.
    if !message.redrive && event.attempt > 0 {
        // Boxed: the requeuer's future stays the size it was for the common path.
        if let Some(cancel) = Box::pin(hold_back(ctx, &event)).await? {
            return Ok(RequeueOutcome::HeldBack { cancel });
        }
    }
    // A granule's last chance against capacity goes to the on-demand queue, when there is one.
    let placement = crate::domain::claim::Placement {
        spot_ends: message.spot_ends,
        job_queue: ctx
            .config
            .jobs
            .as_ref()
            .and_then(|j| j.last_attempt_queue.clone())
            .filter(|_| budget.is_last_chance(ends)),
        memory_mib,
    };
    // An ordinary retry of the fed campaign waits for the feeder's next window of retries, one
    // array job for all of them; a last chance (its own queue), an operator's resend and an
    // imported item's first attempt go at once, as single jobs.
    let parks = ctx.config.jobs.as_ref().is_some_and(|j| j.array_retries)
        && fed
        && !message.redrive
        && event.attempt > 0
        && placement.job_queue.is_none()
        // A window's children share one job's overrides: a retry with memory of its own goes
        // alone.
        && placement.memory_mib.is_none();
    if parks {
        if let Some(parked) = Box::pin(park(ctx, &next, placement.clone())).await? {
            return Ok(parked);
        }
    }
    submit_next(ctx, &next, placement).await
}

/// The retry given up once its attempts are spent: sent to the DLQ, counted, and its item
/// record abandoned.
async fn dead_letter_exhausted(
    ctx: &Ctx,
    message: &RetryMessage,
    ends: crate::domain::attempt_budget::Ends,
) -> Result<RequeueOutcome, HandlerError> {
    let event = &message.event;
    let budget = ctx.config.attempt_budget;
    // The DLQ keeps the attempt, its capacity ends and its campaign, so a redrive sends it
    // back to the same.
    let body = serde_json::to_string(
        &RetryMessage::ended(event.granule_id.clone(), event.attempt)
            .with_spot_ends(message.spot_ends)
            .with_memory(message.memory_mib, message.out_of_memory)
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
    super::item_sync::abandoned(ctx, event, &budget.spent(ends)).await?;
    tracing::warn!(granule_id = %event.granule_id, attempt = event.attempt, "attempts exhausted: dead-lettered");
    Ok(RequeueOutcome::DeadLettered {
        reason: ATTEMPTS_EXHAUSTED.to_owned(),
    })
}

/// The limits where no job section is read (a requeuer always reads one).
const DEFAULT_MEMORY: MemoryLimits = MemoryLimits {
    base_mib: 2048,
    cap_mib: 2048,
};

/// An out-of-memory end at the cap: sent to the DLQ with the memory it had (in the message and
/// the reason), counted, and its item record abandoned.
async fn dead_letter_out_of_memory(
    ctx: &Ctx,
    message: &RetryMessage,
    had: u32,
    limits: MemoryLimits,
) -> Result<RequeueOutcome, HandlerError> {
    let event = &message.event;
    let reason = crate::domain::memory::cap_spent_reason(had, limits);
    let body = serde_json::to_string(
        &RetryMessage::ended(event.granule_id.clone(), event.attempt)
            .with_spot_ends(message.spot_ends)
            .with_memory(Some(had), true)
            .of_campaign(message.campaign.clone()),
    )?;
    dead_letter(ctx, body, &reason, event.attempt).await?;
    let facts = ctx.config.layout.id_parser.facts(&event.granule_id);
    let dims = [
        (PLATFORM, facts.platform.as_deref().unwrap_or("unknown")),
        (FAILURE_CLASS, "out_of_memory"),
    ];
    ctx.metrics.count(Metric::GranulesDeadLettered, &dims, 1);
    super::item_sync::abandoned(ctx, event, &reason).await?;
    tracing::warn!(granule_id = %event.granule_id, attempt = event.attempt, had, "out of memory at the cap: dead-lettered");
    Ok(RequeueOutcome::DeadLettered { reason })
}

/// Submits `next` as a single job (parked instead when its claim turns out to be a parked
/// retry's) and makes its item record.
async fn submit_next(
    ctx: &Ctx,
    next: &crate::domain::granule::GranuleProcessingEvent,
    placement: crate::domain::claim::Placement,
) -> Result<RequeueOutcome, HandlerError> {
    let outcome = ctx
        .submit_placed(next, placement.clone(), "requeuer")
        .await?;
    if outcome == SubmitOutcome::InFlight {
        // A parked retry (an operator's resend of an item that waits for its window, a message
        // from before parking was turned off) is the window's to submit: its marker is written
        // again, and it goes with the next window.
        if let Some(parked) = Box::pin(park(ctx, next, placement)).await? {
            return Ok(parked);
        }
    }
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
        super::item_sync::submitted(ctx, next, job_id, None, "requeuer").await?;
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

/// Parks `next` for the feeder's next window of retries; `None` when the attempt has an
/// ordinary claim already (made before parking was on), which is finished as a single job. Its
/// item record stays as the failure left it (PROCESSING_FAILED) until the window submits it:
/// the pending marker and the feeder's schedule are what move it on.
async fn park(
    ctx: &Ctx,
    next: &crate::domain::granule::GranuleProcessingEvent,
    placement: crate::domain::claim::Placement,
) -> Result<Option<RequeueOutcome>, HandlerError> {
    use crate::repositories::ParkOutcome;
    Ok(match ctx.park(next, placement, "requeuer").await? {
        ParkOutcome::Parked => {
            tracing::info!(granule_id = %next.granule_id, attempt = next.attempt, "parked for the next window of retries");
            Some(RequeueOutcome::Parked {
                attempt: next.attempt,
            })
        }
        // A duplicate message: the item record is the window's to make.
        ParkOutcome::Windowed { .. } => Some(RequeueOutcome::AlreadySubmitted {
            attempt: next.attempt,
        }),
        ParkOutcome::Claimed => None,
    })
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

/// When a cancel's hold takes `event`'s next attempt: lists the granule as cancelled and gives
/// it up, and names the cancel.
async fn hold_back(
    ctx: &Ctx,
    event: &crate::domain::granule::GranuleProcessingEvent,
) -> Result<Option<String>, HandlerError> {
    let next = event.next_attempt();
    let Some(cancel) = held_back_by(ctx, &next).await? else {
        return Ok(None);
    };
    let entry = crate::domain::cancel::Cancelled {
        granule_id: event.granule_id.clone(),
        attempt: event.attempt,
        cancel: cancel.clone(),
        job_id: String::new(),
        reason: format!(
            "attempt {} not submitted: held back by granary cancel {cancel}",
            next.attempt
        ),
        at: crate::clock::now(),
    };
    // Listed first: a crash before the record gives up leaves a listing the redelivered message
    // writes again.
    ctx.cancelled().list(&entry).await?;
    super::item_sync::held_back(ctx, event, &cancel).await?;
    tracing::info!(granule_id = %event.granule_id, attempt = next.attempt, cancel, "held back by a cancel");
    Ok(Some(cancel))
}

/// The cancel whose hold takes `next` (the attempt the requeuer would submit), if any.
async fn held_back_by(
    ctx: &Ctx,
    next: &crate::domain::granule::GranuleProcessingEvent,
) -> Result<Option<String>, HandlerError> {
    let hold = ctx.hold().read().await?;
    let Some(cancel) = hold.and_then(|h| h.cancel) else {
        return Ok(None);
    };
    let open = crate::domain::cancel::OpenAttempt {
        granule_id: next.granule_id.clone(),
        attempt: next.attempt,
        job_id: None,
        inventory: None,
    };
    let platform = ctx.config.layout.id_parser.facts(&next.granule_id).platform;
    Ok(cancel
        .filter
        .takes(&open, platform.as_deref())
        .then_some(cancel.id))
}
