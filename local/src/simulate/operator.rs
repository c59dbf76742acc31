//! An operator in a simulated backfill: half an hour in, they cancel every open attempt ("wrong
//! container image", the feeder held); an hour later they resume the cancelled attempts and
//! release the feeder, and they resume again whatever the cancel's late ends listed since (an
//! end EventBridge delivered hours late is listed after the first resume), as `granary status`
//! would tell them to. The campaign must then settle as if nothing had been cancelled: each
//! granule one success or one dead letter.

use crate::campaign::Campaign;
use anyhow::{Context, Result};
use granary::domain::cancel::CancelFilter;
use granary::handlers::cancel::{self, CancelRequest};
use serde::Serialize;
use std::time::Duration;

pub const CANCEL_AFTER: Duration = Duration::from_secs(30 * 60);
pub const RESUME_AFTER: Duration = Duration::from_secs(60 * 60);

/// What the operator did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OperatorReport {
    /// Open attempts the cancel terminated.
    pub cancelled: u64,
    /// Cancelled attempts resumed, over every `resume --cancelled`.
    pub resumed: u64,
    /// Times the operator ran `resume --cancelled`.
    pub resumes: u64,
}

/// Runs `campaign` to its end with the operator's cancel and resumes on the way.
pub async fn run_with_a_cancel(campaign: &mut Campaign) -> Result<OperatorReport> {
    let mut report = OperatorReport::default();
    let start = tokio::time::Instant::now();
    let runtime = &mut campaign.runtime;
    let settled = runtime
        .run_while(|_| {}, |_| start.elapsed() < CANCEL_AFTER)
        .await?;
    if settled {
        return Ok(report);
    }
    let request = CancelRequest {
        filter: CancelFilter::default(),
        reason: "wrong container image".into(),
        by: "ops".into(),
        dry_run: false,
        hold_feeder: true,
        per_second: 20.0,
    };
    let s = cancel::cancel(&runtime.ctx, &request, granary::clock::now(), 7, |_, _| {})
        .await
        .context("the operator's cancel")?;
    report.cancelled = s.terminated;
    let until = tokio::time::Instant::now() + RESUME_AFTER;
    runtime
        .run_while(|_| {}, |_| tokio::time::Instant::now() < until)
        .await?;
    runtime
        .ctx
        .hold()
        .release()
        .await
        .context("granary release")?;
    // As often as late ends list more; ten rounds is past any end EventBridge still holds.
    for _ in 0..10 {
        let resumed = cancel::resume_cancelled(&runtime.ctx, None, false)
            .await
            .context("granary resume --cancelled")?;
        report.resumes += 1;
        report.resumed += resumed.len() as u64;
        runtime.run_to_quiescence(|_| {}).await?;
        if cancel::cancelled(&runtime.ctx).await?.is_empty() {
            return Ok(report);
        }
    }
    anyhow::bail!("cancelled attempts still listed after ten resumes")
}
