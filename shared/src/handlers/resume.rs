//! Admin resume: failed items back to their last successful state, their next attempt granted
//! even past the budget. PROCESSING_FAILED or ABANDONED (dead-lettered, or its attempts spent) →
//! READY and a redrive-flagged retry message (the requeuer submits attempt n + 1); DOWNLOADING_FAILED → its next download attempt through the
//! import queue; DOWNLOADED (an item whose admission waited for prerequisites until its import
//! message was parked in the import DLQ) → its admission looked at again through the import
//! queue. IGNORE (a download given up) has no way back in the lifecycle table.

use super::importer::{ImportMessage, Step};
use super::Ctx;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::ItemState::*;
use crate::handlers::HandlerError;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resumed {
    pub item_id: String,
    pub from: String,
    /// The attempt the item will make next.
    pub next_attempt: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ResumeSummary {
    pub resumed: Vec<Resumed>,
    /// Items not in a failed state (id, state): nothing to resume.
    pub not_failed: Vec<(String, String)>,
    pub missing: Vec<String>,
}

/// Resumes each item in `ids`; `dry_run` reports what would happen and changes nothing.
pub async fn resume(
    ctx: &Ctx,
    ids: &[GranuleId],
    dry_run: bool,
) -> Result<ResumeSummary, HandlerError> {
    let items = ctx.items();
    let mut summary = ResumeSummary::default();
    for id in ids {
        let Some(current) = items.get(id).await? else {
            summary.missing.push(id.to_string());
            continue;
        };
        let r = current.value;
        let (next_attempt, from) = match r.state {
            ProcessingFailed | Abandoned => (r.attempts.processing + 1, r.state),
            DownloadingFailed => (r.attempts.download + 1, r.state),
            // Not failed, but waiting with nothing to wake it once its message is parked: the
            // admission is decided again (it waits again if the prerequisites are still
            // missing; admitting twice is harmless, the admission re-reads the record).
            Downloaded => (r.attempts.processing + 1, r.state),
            other => {
                summary.not_failed.push((id.to_string(), other.to_string()));
                continue;
            }
        };
        if !dry_run {
            if matches!(from, ProcessingFailed | Abandoned) {
                // The message first: the requeuer moves a PROCESSING_FAILED item on by itself
                // (→ READY → PROCESSING), so a crash before the READY write below strands
                // nothing, and a rerun of the command only repeats a message the requeuer's
                // claim makes harmless.
                let ended = GranuleProcessingEvent {
                    granule_id: id.clone(),
                    attempt: r.attempts.processing,
                };
                let placed = ctx.placed_before(&ended).await?;
                let message = RetryMessage::redriven(ended)
                    .with_spot_ends(placed.spot_ends)
                    .with_memory(placed.memory_mib, false)
                    .of_campaign(ctx.campaign().cloned())
                    .to_message(&Notice::new(Outcome::Resumed, "resumed by an operator"))?;
                ctx.retry_queue.send(message).await?;
                // Listed by `granary cancel`, perhaps: sent round now, so no longer waiting.
                ctx.cancelled()
                    .unlist(&GranuleProcessingEvent {
                        granule_id: id.clone(),
                        attempt: r.attempts.processing,
                    })
                    .await?;
                let seq = r.seq;
                // The history says who resumed it; if the requeuer got there first, its own
                // entries say the same.
                items
                    .advance(id, "operator", |x| {
                        decisions::on_operator_resume(x, seq, next_attempt)
                    })
                    .await?;
            } else if from == Downloaded {
                ctx.send(ImportMessage {
                    item_id: id.clone(),
                    step: Some(Step::Admit),
                    resume: true,
                    campaign: None,
                })
                .await?;
            } else {
                ctx.send(ImportMessage {
                    item_id: id.clone(),
                    step: Some(Step::Download),
                    resume: true,
                    campaign: None,
                })
                .await?;
            }
        }
        summary.resumed.push(Resumed {
            item_id: id.to_string(),
            from: from.to_string(),
            next_attempt,
        });
    }
    Ok(summary)
}

/// A granule an audit listed (`granary resume --from-list`), with the latest attempt it knew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedAttempt {
    pub granule_id: GranuleId,
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListedSummary {
    /// Failed items, resumed by their records (as [`resume`]).
    pub items: ResumeSummary,
    /// Granules sent round from their listed attempt: the next one follows.
    pub sent: Vec<Resumed>,
    /// Granules that succeeded or went past the listed attempt since the list was written.
    pub moved_on: Vec<String>,
    /// Granules with neither a failed record nor an attempt in the list.
    pub no_attempt: Vec<String>,
}

/// Resumes listed granules: a failed item by its record; any other by a redrive-flagged retry
/// message of its listed attempt (the requeuer submits the next one, as `granary resume
/// --cancelled` does), unless it has moved on since.
pub async fn resume_listed(
    ctx: &Ctx,
    listed: &[ListedAttempt],
    dry_run: bool,
) -> Result<ListedSummary, HandlerError> {
    let mut summary = ListedSummary::default();
    for l in listed {
        if ctx.config.layout.track_items {
            let failed = ctx.items().get(&l.granule_id).await?.is_some_and(|r| {
                matches!(
                    r.value.state,
                    ProcessingFailed | Abandoned | DownloadingFailed
                )
            });
            if failed {
                let one = resume(ctx, std::slice::from_ref(&l.granule_id), dry_run).await?;
                summary.items.resumed.extend(one.resumed);
                continue;
            }
        }
        let Some(attempt) = l.attempt else {
            summary.no_attempt.push(l.granule_id.to_string());
            continue;
        };
        let ended = GranuleProcessingEvent {
            granule_id: l.granule_id.clone(),
            attempt,
        };
        if super::cancel::moved_on(ctx, &ended).await? {
            summary.moved_on.push(l.granule_id.to_string());
            continue;
        }
        if !dry_run {
            let placed = ctx.placed_before(&ended).await?;
            let message = RetryMessage::redriven(ended)
                .with_spot_ends(placed.spot_ends)
                .with_memory(placed.memory_mib, false)
                .of_campaign(ctx.campaign().cloned())
                .to_message(&Notice::new(
                    Outcome::Resumed,
                    "resumed from an audit's list",
                ))?;
            ctx.retry_queue.send(message).await?;
        }
        summary.sent.push(Resumed {
            item_id: l.granule_id.to_string(),
            from: format!("attempt {attempt}"),
            next_attempt: attempt + 1,
        });
    }
    Ok(summary)
}
