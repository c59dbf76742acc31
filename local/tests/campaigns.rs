//! Campaigns through the local runtime (in-memory twins, the production handlers): the same
//! inventories processed again under another name, and a stack switched to a second campaign
//! while the first still has jobs running and retries to make. Each campaign is audited in its
//! own state: every granule ends once there — succeeded or dead-lettered, its record and
//! history agreeing — and no job name is submitted twice across both.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::campaign::Campaign as CampaignName;
use granary::domain::report::{outcome_changes, NOT_RUN};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::chaos;
use std::time::{Duration, Instant};

const GRANULES: usize = 300;

fn spec() -> CampaignSpec {
    let mut spec = CampaignSpec {
        granules: GRANULES,
        inventories: 2,
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 60;
    spec.runner.feeder_interval = Duration::from_millis(20);
    spec.runner.deadline = Duration::from_secs(300);
    spec
}

/// The runtime's stack redeployed with `GRANARY_CAMPAIGN` naming `campaign`.
fn switch_to(campaign: &mut Campaign, to: Option<&CampaignName>) {
    campaign.runtime.ctx = campaign.runtime.ctx.in_campaign(to).into_owned();
}

async fn audit_whole(campaign: &Campaign, name: &str) -> chaos::ChaosReport {
    let r = chaos::audit(campaign, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(r.granules, GRANULES as u64, "{name}");
    assert_eq!(r.unaccounted, 0, "{name}: {r:?}");
    assert_eq!(r.succeeded + r.dead_lettered, r.granules, "{name}: {r:?}");
    assert_eq!(r.duplicate_submissions, 0, "{name}: {r:?}");
    assert_eq!(r.duplicate_successes, 0, "{name}: {r:?}");
    assert_eq!(r.failures_without_record, 0, "{name}: {r:?}");
    assert_eq!(r.open_claims_left, 0, "{name}: {r:?}");
    assert_eq!(r.records_disagreeing, 0, "{name}: {r:?}");
    assert_eq!(r.history_entries_missing, 0, "{name}: {r:?}");
    assert_eq!(r.history_entries_wrong, 0, "{name}: {r:?}");
    r
}

async fn log_facts(
    campaign: &Campaign,
    of: Option<&CampaignName>,
) -> Vec<granary::domain::report::LogFact> {
    let ctx = campaign.runtime.ctx.in_campaign(of);
    granary::repositories::logs::scan_log_facts(
        ctx.store.as_ref(),
        &ctx.config.layout.log_prefix,
        &|_, _| {},
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_campaign_processes_every_granule_again_in_its_own_state() {
    let v2 = CampaignName::parse("v2").unwrap();
    let mut campaign = Campaign::in_memory(&spec()).await.unwrap();
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let first = audit_whole(&campaign, "the unnamed campaign").await;
    let jobs_of_first = campaign.runtime.simulator.planned.len();

    switch_to(&mut campaign, Some(&v2));
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let second = audit_whole(&campaign, "campaign v2").await;
    // Every granule ran again: v2 submitted its own jobs, each granule at least once.
    let jobs_of_second = campaign.runtime.simulator.planned.len() - jobs_of_first;
    assert!(jobs_of_second >= GRANULES, "{jobs_of_second} jobs in v2");
    assert!(campaign.runtime.simulator.planned[jobs_of_first..]
        .iter()
        .all(|j| j.campaign.as_deref() == Some("v2") && j.job_name.starts_with("v2_")));
    // The first campaign's state is as it was.
    switch_to(&mut campaign, None);
    let again = audit_whole(&campaign, "the unnamed campaign, after v2").await;
    assert_eq!(
        (again.succeeded, again.dead_lettered),
        (first.succeeded, first.dead_lettered)
    );

    // The comparison accounts for every granule in both, none "not run".
    let changes = outcome_changes(
        &log_facts(&campaign, None).await,
        &log_facts(&campaign, Some(&v2)).await,
    );
    let total: u64 = changes.iter().map(|c| c.granules).sum();
    assert_eq!(total, GRANULES as u64, "{changes:?}");
    assert!(
        changes.iter().all(|c| c.from != NOT_RUN && c.to != NOT_RUN),
        "{changes:?}"
    );
    let succeeded_in = |to: bool| -> u64 {
        changes
            .iter()
            .filter(|c| (if to { &c.to } else { &c.from }) == "success")
            .map(|c| c.granules)
            .sum()
    };
    assert_eq!(succeeded_in(false), first.succeeded);
    assert_eq!(succeeded_in(true), second.succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_switched_mid_campaign_finishes_the_first_campaigns_work_where_it_lives() {
    let v2 = CampaignName::parse("v2").unwrap();
    // Spot reclaims that Batch does not retry itself: granary retries them.
    let mut spec = spec();
    spec.batch_attempts = 1;
    spec.plan.spot_rate = 0.2;
    let mut campaign = Campaign::in_memory(&spec).await.unwrap();
    // Redeployed as v2 mid-campaign: the retries the last round submitted have not run yet.
    let started = Instant::now();
    let settled = campaign
        .runtime
        .run_while(|_| {}, |p| p.submitted < 100)
        .await
        .unwrap();
    assert!(!settled, "the first campaign ended before the switch");
    // The first campaign's retries (attempt 2 on) that ran.
    let first_jobs = |c: &Campaign| {
        c.runtime
            .simulator
            .planned
            .iter()
            .filter(|j| j.campaign.is_none() && j.attempt > 1)
            .count()
    };
    let at_switch = first_jobs(&campaign);
    switch_to(&mut campaign, Some(&v2));
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let second = audit_whole(&campaign, "campaign v2").await;
    assert!(second.succeeded > 0);
    let first = campaign.runtime.ctx.in_campaign(None);
    let open = first
        .store
        .list(&first.config.layout.open_claim_prefix)
        .await
        .unwrap();
    assert!(open.is_empty(), "the first campaign left open: {open:?}");
    // The retries waiting at the switch were submitted as the first campaign's, in its state,
    // by the stack running v2.
    let retried_meanwhile = first_jobs(&campaign) - at_switch;
    assert!(
        retried_meanwhile > 0,
        "no retry of the first campaign after the switch"
    );

    // The first campaign's jobs that were running at the switch were handled in its own state
    // by the stack running v2: no open claim is left anywhere (quiescence waits for every
    // campaign's). Switching back finishes feeding it from where its tracker stands.
    switch_to(&mut campaign, None);
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    audit_whole(&campaign, "the unnamed campaign, switched back to").await;
    eprintln!(
        "switched after {at_switch} retries of the first campaign had run; {retried_meanwhile} \
         more ran under the stack running v2; both settled in {:?}",
        started.elapsed()
    );
}
