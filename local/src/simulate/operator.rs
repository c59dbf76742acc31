//! An operator in a simulated backfill: half an hour in, they cancel every open attempt ("wrong
//! container image", the feeder held); an hour later they resume the cancelled attempts and
//! release the feeder. Half an hour on they redeploy the stack as campaign v2 over the same
//! inventories, while the first campaign's retries and late ends are still to come, and after
//! v2 has settled they switch back. They resume again whatever the cancel's late ends listed
//! since, as `granary status` would tell them to. Each campaign must settle as if nothing had
//! been cancelled or switched: each granule one success or one dead letter, in its own state.

use crate::campaign::Campaign;
use anyhow::{Context, Result};
use granary::domain::campaign::Campaign as CampaignName;
use granary::domain::cancel::CancelFilter;
use granary::handlers::cancel::{self, CancelRequest};
use serde::Serialize;
use std::time::Duration;

pub const CANCEL_AFTER: Duration = Duration::from_secs(30 * 60);
pub const RESUME_AFTER: Duration = Duration::from_secs(60 * 60);
pub const SWITCH_AFTER: Duration = Duration::from_secs(30 * 60);

/// What the operator did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OperatorReport {
    /// Open attempts the cancel terminated.
    pub cancelled: u64,
    /// Cancelled attempts resumed, over every `resume --cancelled`.
    pub resumed: u64,
    /// Times the operator ran `resume --cancelled`.
    pub resumes: u64,
    /// The audit of campaign v2, the stack's second campaign over the same inventories.
    pub second_campaign: Option<crate::chaos::ChaosReport>,
}

/// Runs `campaign` to its end with the operator's cancel and resumes on the way.
pub async fn run_with_a_cancel(campaign: &mut Campaign) -> Result<OperatorReport> {
    let mut report = OperatorReport::default();
    let start = tokio::time::Instant::now();
    let runtime = &mut campaign.runtime;
    let settled = runtime
        .run_while(|_| {}, |_| start.elapsed() < CANCEL_AFTER)
        .await?;
    // (A campaign over before the cancel: nothing to cancel, no switch.)
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
    resume_cancelled(campaign, &mut report).await?;
    // Half an hour on, the stack is redeployed as campaign v2 over the same inventories, the
    // first campaign's retries and late ends still to come: they are handled in its own state.
    let until = tokio::time::Instant::now() + SWITCH_AFTER;
    campaign
        .runtime
        .run_while(|_| {}, |_| tokio::time::Instant::now() < until)
        .await?;
    let v2 = CampaignName::parse("v2").context("campaign v2")?;
    switch_to(campaign, Some(&v2));
    campaign.runtime.run_to_quiescence(|_| {}).await?;
    report.second_campaign = Some(crate::chaos::audit(campaign, Duration::ZERO).await?);
    // Switched back: the first campaign finishes from where its tracker stands, and what the
    // cancel's late ends listed meanwhile is resumed.
    switch_to(campaign, None);
    loop_resumes(campaign, &mut report).await
}

/// The runtime's stack redeployed with `GRANARY_CAMPAIGN` naming `to`.
fn switch_to(campaign: &mut Campaign, to: Option<&CampaignName>) {
    campaign.runtime.ctx = campaign.runtime.ctx.in_campaign(to).into_owned();
}

/// One `granary resume --cancelled`.
async fn resume_cancelled(campaign: &mut Campaign, report: &mut OperatorReport) -> Result<()> {
    let resumed = cancel::resume_cancelled(&campaign.runtime.ctx, None, false)
        .await
        .context("granary resume --cancelled")?;
    report.resumes += 1;
    report.resumed += resumed.len() as u64;
    Ok(())
}

/// Runs to the end, resuming as often as late ends list more cancelled attempts; ten rounds is
/// past any end EventBridge still holds.
async fn loop_resumes(
    campaign: &mut Campaign,
    report: &mut OperatorReport,
) -> Result<OperatorReport> {
    for _ in 0..10 {
        campaign.runtime.run_to_quiescence(|_| {}).await?;
        if cancel::cancelled(&campaign.runtime.ctx).await?.is_empty() {
            return Ok(report.clone());
        }
        resume_cancelled(campaign, report).await?;
    }
    anyhow::bail!("cancelled attempts still listed after ten resumes")
}
