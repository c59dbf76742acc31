//! A window's item records: those of granules new to granary made together, the others moved on
//! one by one.

use super::super::Stop;
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::window::WindowClaim;
use crate::handlers::{Ctx, HandlerError};
use crate::repositories::{JobSubmission, RecordError};
use crate::retry::{again, Backoff};
use futures::StreamExt;

/// How often one item record is tried within a feeder run before the window stops at it.
const ITEM_SYNC_TRIES: u32 = 5;

/// The item records of a window's granules whose jobs exist: made together where missing, the
/// others moved one by one (made earlier by another listing, an import, or a retry of this run).
/// A call throttled past the SDK's retries is tried again within the run; what still fails stops
/// the window (its tracker does not move past it), as `Some(stop)`.
pub(in crate::handlers::feeder) async fn record_window(
    ctx: &Ctx,
    inventory_key: &str,
    claim: &WindowClaim,
    submissions: &[JobSubmission],
    first_row: &std::collections::HashMap<GranuleId, u64>,
    known_absent: bool,
) -> Option<Stop> {
    // An array window of first attempts leaves its records to the monitor, which makes each at
    // its child's end (`item_sync::finished`); the claim says they are in flight meanwhile.
    if claim.records_at_end {
        return None;
    }
    let source = |granule: &GranuleId| match first_row.get(granule) {
        Some(row) => format!("{inventory_key}#row={row}"),
        None => format!(
            "{inventory_key}#rows={}..{}",
            claim.start,
            claim.start + claim.rows
        ),
    };
    let pending: Vec<(GranuleProcessingEvent, String, String)> = claim
        .attempts()
        .zip(submissions)
        .filter_map(|(event, submission)| {
            let job_id = submission.job_id()?.to_owned();
            let source = source(&event.granule_id);
            Some((event, job_id, source))
        })
        .collect();
    // The records of granules new to granary, made together; a call throttled past the SDK's
    // retries is tried again within the run (the window only settles when every record is in
    // step, and each try is idempotent: it makes only the records still missing). A window of
    // retries has its granules' records already (made at their first attempt, or by the
    // monitor): each is moved on below, one by one, at its own attempt.
    let made = if claim.is_retries() {
        Ok(vec![false; pending.len()])
    } else {
        again(
            Backoff {
                tries: ITEM_SYNC_TRIES,
                ..Backoff::IN_RUN
            },
            "the window's item records",
            || {
                crate::handlers::item_sync::window_submitted(
                    ctx,
                    claim,
                    &pending,
                    known_absent,
                    "queue-feeder",
                )
            },
            RecordError::is_transient,
        )
        .await
    };
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            tracing::error!(error = %e, "window's item records not made");
            return Some(Stop::Fail(format!(
                "item records of rows of {inventory_key}: {e}"
            )));
        }
    };
    move_on_known_records(ctx, inventory_key, claim, pending, made).await
}

/// The records of the window's granules that had one already (an earlier window, an import, a
/// retry of this run), each moved on to its attempt one by one, like any submission; `Some(stop)`
/// when one could not be.
async fn move_on_known_records(
    ctx: &Ctx,
    inventory_key: &str,
    claim: &WindowClaim,
    pending: Vec<(GranuleProcessingEvent, String, String)>,
    made: Vec<bool>,
) -> Option<Stop> {
    let mut failed = None;
    let synced: Vec<Result<(), HandlerError>> =
        futures::stream::iter(pending.into_iter().zip(made).filter(|(_, made)| !made))
            .map(|((event, job_id, source), _)| async move {
                again(
                    Backoff {
                        tries: ITEM_SYNC_TRIES,
                        ..Backoff::IN_RUN
                    },
                    "an item record",
                    || {
                        crate::handlers::item_sync::submitted(
                            ctx,
                            &event,
                            &job_id,
                            // A window of retries is no listing: a record it must make
                            // (one lost since its first attempt) names no source, as the
                            // requeuer's would.
                            (!claim.is_retries()).then(|| source.clone()),
                            "queue-feeder",
                        )
                    },
                    RecordError::is_transient,
                )
                .await
                .map_err(HandlerError::from)
            })
            .buffered(ctx.config.feeder.submit_concurrency)
            .collect()
            .await;
    for r in synced {
        if let Err(e) = r {
            tracing::error!(error = %e, "item record not updated");
            failed.get_or_insert_with(|| Stop::Fail(format!("rows of {inventory_key}: {e}")));
        }
    }
    failed
}
