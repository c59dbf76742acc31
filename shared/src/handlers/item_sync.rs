//! Keeps each granule's item record in step with the backfill loop: PROCESSING when its attempt
//! is submitted, PROCESSED / PROCESSING_FAILED when the monitor sees the job end, ABANDONED when
//! the requeuer spends the last attempt. Backfill items enter at READY: the inventory vouches for
//! them. Every step is guarded by the attempt number, so duplicate and late events change nothing.

use super::Ctx;
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::item::{Change, NewItem};
use crate::domain::lifecycle::ItemState::{self, *};
use crate::items::{Advanced, Created, ItemError};

/// The attempt was submitted as `job_id`: READY (or PROCESSING_FAILED, for a retry) → PROCESSING.
pub async fn submitted(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    job_id: &str,
    source: Option<String>,
    by: &str,
) -> Result<(), ItemError> {
    if !ctx.config.track_items {
        return Ok(());
    }
    let items = ctx.items();
    let id = &event.granule_id;
    let attempt = event.attempt;
    let submit = Change {
        job_id: Some(job_id.to_owned()),
        ..Change::to(
            Processing,
            format!("attempt {attempt} submitted as job {job_id}"),
        )
    };
    // The common case, a granule's first attempt: READY and PROCESSING in one PUT. Later
    // attempts find their record (one without, from before records were kept, stays without).
    let new = NewItem::ready(id.clone(), "listed in an inventory", source);
    if attempt == 1 {
        let created = items
            .create_along(new, std::slice::from_ref(&submit), by)
            .await?;
        if let Created::New(_) = created {
            return Ok(());
        }
    }
    // An attempt begins on entering PROCESSING, so PROCESSING with attempt n means n has begun.
    // A retry goes PROCESSING_FAILED → READY → PROCESSING in one write.
    let moved = items
        .advance_steps(id, by, |r| {
            if r.attempts.processing >= attempt {
                return Vec::new();
            }
            match r.state {
                ProcessingFailed => vec![
                    Change::to(Ready, format!("retrying as attempt {attempt}")),
                    submit.clone(),
                ],
                Ready => vec![submit.clone()],
                // An earlier attempt still shows PROCESSING: the sweeper sent its retry before
                // recording the timeout (and may have died before the write). The next
                // attempt's submission proves the earlier one is over.
                Processing => vec![
                    Change::to(
                        ProcessingFailed,
                        format!(
                            "attempt {} superseded: attempt {attempt} submitted",
                            r.attempts.processing
                        ),
                    ),
                    Change::to(Ready, format!("retrying as attempt {attempt}")),
                    submit.clone(),
                ],
                _ => Vec::new(),
            }
        })
        .await?;
    warn_if_lagging(&moved, event, Processing);
    Ok(())
}

/// The monitor saw attempt `event.attempt` end: PROCESSING → `to` (PROCESSED or PROCESSING_FAILED).
pub async fn finished(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    to: ItemState,
    reason: &str,
) -> Result<(), ItemError> {
    if !ctx.config.track_items {
        return Ok(());
    }
    let attempt = event.attempt;
    let moved = ctx
        .items()
        .advance(&event.granule_id, "job-monitor", |r| {
            (r.state == Processing && r.attempts.processing == attempt)
                .then(|| Change::to(to, format!("attempt {attempt}: {reason}")))
        })
        .await?;
    warn_if_lagging(&moved, event, to);
    Ok(())
}

/// The requeuer spent the last attempt: PROCESSING_FAILED → ABANDONED.
pub async fn abandoned(ctx: &Ctx, event: &GranuleProcessingEvent) -> Result<(), ItemError> {
    if !ctx.config.track_items {
        return Ok(());
    }
    let attempt = event.attempt;
    ctx.items()
        .advance(&event.granule_id, "requeuer", |r| {
            (r.state == ProcessingFailed && r.attempts.processing <= attempt).then(|| {
                Change::to(
                    Abandoned,
                    format!(
                        "attempt {attempt} was the last of {}",
                        ctx.config.max_attempt()
                    ),
                )
            })
        })
        .await?;
    Ok(())
}

fn warn_if_lagging(moved: &Advanced, event: &GranuleProcessingEvent, wanted: ItemState) {
    match moved {
        Advanced::Missing => tracing::warn!(
            granule_id = %event.granule_id, attempt = event.attempt,
            "no item record: it was submitted before item records were kept"
        ),
        Advanced::Unchanged(r) if r.state != wanted => tracing::info!(
            granule_id = %event.granule_id, attempt = event.attempt, state = %r.state,
            record_attempt = r.attempts.processing, "item record already past this event"
        ),
        _ => {}
    }
}
