//! Batch's SubmitJob quota on the in-memory campaign: the Batch twin refuses calls past 50 a
//! second, as Batch answers TooManyRequestsException past the account's quota. Unpaced, the
//! feeder meets refusals and backs off, and still every granule is accounted for and none is
//! submitted twice; paced to a share of the quota (`GRANARY_SUBMIT_JOB_RATE`), it meets none.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::chaos;
use granary_local::simulate::on_the_virtual_clock;
use std::time::{Duration, Instant};

async fn run(rate: Option<&str>) -> (chaos::ChaosReport, u64) {
    let mut spec = CampaignSpec {
        granules: 400,
        inventories: 1,
        submit_limit: Some(50),
        env: rate
            .map(|r| vec![("GRANARY_SUBMIT_JOB_RATE".to_owned(), r.to_owned())])
            .unwrap_or_default(),
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 400;
    spec.runner.feeder_interval = Duration::from_millis(20);
    spec.runner.deadline = Duration::from_secs(300);
    let mut campaign = Campaign::in_memory(&spec).await.unwrap();
    let started = Instant::now();
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let report = chaos::audit(&campaign, started.elapsed()).await.unwrap();
    let refused = campaign
        .in_memory_batch
        .as_ref()
        .map(|b| b.refused_submits())
        .unwrap_or_default();
    (report, refused)
}

/// On the virtual clock (`simulate::on_the_virtual_clock`): the
/// quota's second, the backoff and the pacing are simulated seconds (on the wall the test took
/// 20 s, 1.5 s of it CPU).
#[test]
fn submit_job_past_batchs_quota_is_refused_backed_off_and_never_sent_twice() {
    let ran = on_the_virtual_clock(1, async {
        let (unpaced, refused) = run(None).await;
        assert!(
            refused > 0,
            "400 submissions at once meet the 50-a-second quota"
        );
        assert_eq!(unpaced.unaccounted, 0, "{unpaced:?}");
        assert_eq!(unpaced.duplicate_submissions, 0, "{unpaced:?}");
        assert_eq!(unpaced.granules, 400);

        let (paced, refused) = run(Some("40")).await;
        assert_eq!(refused, 0, "paced at 40 a second, the quota never refuses");
        assert_eq!(paced.unaccounted, 0, "{paced:?}");
        assert_eq!(paced.duplicate_submissions, 0, "{paced:?}");
        Ok(())
    });
    ran.unwrap();
}
