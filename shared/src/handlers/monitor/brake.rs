//! The automatic brake: the monitor holds the feeder itself when too many recent ends failed.

use crate::handlers::Ctx;

/// The automatic brake (`domain::brake`): this end joins the instance's window; past a
/// threshold the feeder's hold is placed (If-None-Match: an operator's hold, or an earlier
/// brake's, is kept) with the reason and the latest failures behind it. A hold that cannot be
/// placed now is tried again at the next end; it never fails the end's handling, which is done.
pub async fn brake(ctx: &Ctx, kind: crate::domain::brake::EndKind, what: String) {
    let settings = ctx.config.brake;
    let braking = {
        let mut window = ctx.end_window.lock().unwrap_or_else(|p| p.into_inner());
        window.record(kind, what, &settings);
        window.judge(&settings)
    };
    let Some(braking) = braking else { return };
    let hold = crate::domain::hold::Hold {
        reason: braking.reason,
        held_by: "job-monitor (automatic brake)".to_owned(),
        at: crate::clock::now(),
        evidence: braking.evidence,
        cancel: None,
    };
    let placed = ctx.hold().place(&hold).await;
    match placed {
        Ok(None) => {
            tracing::warn!(reason = hold.reason, evidence = ?hold.evidence, "automatic brake: feeder held");
            ctx.metrics
                .count(crate::domain::metrics::Metric::FeederBraked, &[], 1);
        }
        Ok(Some(existing)) => {
            tracing::info!(
                held_by = existing.held_by,
                "automatic brake: the feeder is held already"
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "automatic brake: the hold could not be placed; tried again at the next end");
            return;
        }
    }
    ctx.end_window
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
}
