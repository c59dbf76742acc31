//! The campaign's pace, before a run feeds (`domain::pace`): the run's count raised for the
//! deadline or cut to the budget, or, at the spend cap, the feeder held with the reason. The
//! hold is `granary hold`'s own object, so `granary status` shows it and `granary release`
//! lifts it; while the budget stays spent the next run places it again.

use super::Ctx;
use crate::domain::hold::Hold;
use crate::domain::metrics::Metric;
use crate::domain::pace::{paced_count, PaceDecision, Standing};
use crate::domain::progress::Sample;
use crate::domain::tracker::Tracker;
use crate::handlers::HandlerError;

/// Who the spend cap's hold names.
pub const SPEND_CAP_HOLDER: &str = "queue-feeder (spend cap)";

pub(super) enum Paced {
    Go(u64),
    Held(String),
}

pub(super) async fn pace_run(
    ctx: &Ctx,
    tracker: &Tracker,
    requested: u64,
) -> Result<Paced, HandlerError> {
    let Some(pace) = ctx.pace().read().await? else {
        return Ok(Paced::Go(requested));
    };
    let now = crate::clock::now();
    let mut standing = standing_of(tracker, now);
    // The deadline needs every row left, and the tracker knows an inventory's rows only once
    // the feeder has opened it: the others' footers say (a GET or two each, with a deadline
    // only).
    if pace.deadline.is_some() {
        let unopened = unopened_rows(ctx, tracker).await?;
        standing.left = Some(standing.left.unwrap_or(0) + unopened).filter(|l| *l > 0);
    }
    match paced_count(&pace, requested, standing) {
        PaceDecision::Go { count, why } => {
            if let Some(why) = why {
                tracing::info!(count, why, "paced");
            }
            Ok(Paced::Go(count))
        }
        PaceDecision::Hold { reason } => {
            let hold = Hold {
                reason,
                held_by: SPEND_CAP_HOLDER.to_owned(),
                at: now,
                evidence: Vec::new(),
                cancel: None,
            };
            // `None`: this hold is the one in place (counted once, when placed).
            let held = match ctx.hold().place(&hold).await? {
                None => {
                    ctx.metrics.count(Metric::SpendCapHeld, &[], 1);
                    tracing::warn!(reason = hold.reason, "spend cap: feeder held");
                    hold
                }
                Some(existing) => existing,
            };
            Ok(Paced::Held(held.describe()))
        }
    }
}

/// Where the campaign stands: rows submitted, rows known and left (once the feeder has opened
/// an inventory), and the feeder's period as its last two runs' samples measured it.
pub fn standing_of(tracker: &Tracker, now: chrono::DateTime<chrono::Utc>) -> Standing {
    let submitted = tracker.rows_submitted();
    let known = tracker.rows_known();
    Standing {
        submitted,
        left: (known > 0).then(|| known.saturating_sub(submitted)),
        period_secs: period_secs(&tracker.samples),
        now,
    }
}

/// Rows of the inventories listed and not yet opened by the feeder.
async fn unopened_rows(ctx: &Ctx, tracker: &Tracker) -> Result<u64, HandlerError> {
    let column = &ctx.config.feeder.inventory_id_column;
    let mut rows = 0;
    for listed in ctx.inventories().list().await? {
        let opened = tracker
            .inventories
            .iter()
            .any(|i| i.key == listed.key && i.total_rows.is_some());
        if listed.key.ends_with(".parquet") && !opened {
            let inventory = ctx.inventories().open(&listed.key, column).await?;
            rows += inventory.num_rows();
        }
    }
    Ok(rows)
}

fn period_secs(samples: &[Sample]) -> Option<i64> {
    let [.., before, last] = samples else {
        return None;
    };
    let secs = (last.at - before.at).num_seconds();
    (secs >= 60).then_some(secs)
}
