//! A named campaign against the emulator, through the real SDK: its state lands under
//! `campaigns/<name>/` in S3 (nothing at the root), its jobs carry its name in their job name,
//! parameters and environment as Batch describes them back, a delimited ListObjectsV2 finds it
//! for the scheduled passes, and a stack running another campaign handles its jobs' ends in its
//! own state.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::campaign::Campaign;
use granary::handlers::monitor::{self, MonitorOutcome};
use granary_tests::*;

#[tokio::test]
async fn a_named_campaign_keeps_its_state_in_its_folder_and_its_jobs_name_it() {
    let s = stack("campaign", 2, &[("GRANARY_CAMPAIGN", "v2")]).await;
    let v2 = Campaign::parse("v2").unwrap();
    assert_eq!(s.ctx.campaign(), Some(&v2));
    let granules = ids(6, "CP");
    // The inventories are shared: at the root, whatever the campaign.
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/2024-01.parquet",
        &granules,
        &small_layout(),
    )
    .await;
    let out = feed(&s.ctx, 6).await;
    assert_eq!((out.submitted, out.stopped.clone()), (6, None), "{out:?}");

    let store = s.ctx.store.as_ref();
    assert!(store
        .get("campaigns/v2/tracker/tracker.json")
        .await
        .unwrap()
        .is_some());
    assert!(store.get("tracker/tracker.json").await.unwrap().is_none());
    assert!(!keys(store, "campaigns/v2/claims/").await.is_empty());
    assert!(keys(store, "claims/").await.is_empty());
    assert!(!keys(store, "campaigns/v2/open-claims/").await.is_empty());

    let jobs = all_jobs(&s).await;
    assert_eq!(jobs.len(), 6, "{jobs:?}");
    assert!(
        jobs.iter().all(|(name, _)| name.starts_with("v2_")),
        "{jobs:?}"
    );
    let job_ids: Vec<String> = jobs.iter().map(|(_, id)| id.clone()).collect();
    // As Batch describes them back (moto's DescribeJobs, or the in-memory Batch where the
    // endpoint has none): the campaign is a parameter and in the container's environment.
    for f in facts(&s, &job_ids).await {
        assert_eq!(f.campaign.as_deref(), Some("v2"), "{}", f.job_name);
    }

    // The scheduled passes find the campaign by a delimited listing, from any campaign.
    let unnamed = s.ctx.in_campaign(None);
    let visited = granary::handlers::campaigns_to_visit(&unnamed)
        .await
        .unwrap();
    assert_eq!(visited, vec![None, Some(v2.clone())]);

    // A stack redeployed to the unnamed campaign handles v2's ends in v2's state.
    if s.stack.batch {
        let described = s.ctx.jobs.describe_many(&job_ids).await.unwrap();
        assert_eq!(described.len(), 6);
        for d in described {
            assert!(d.summary.status.is_terminal(), "{:?}", d.summary);
            let outcome = monitor::described_job(&unnamed, d, "test", None)
                .await
                .unwrap();
            assert!(
                matches!(
                    outcome,
                    Some(MonitorOutcome::Succeeded { .. } | MonitorOutcome::Routed { .. })
                ),
                "{outcome:?}"
            );
        }
        let logged = keys(store, "campaigns/v2/logs/").await;
        assert_eq!(logged.len(), 6, "{logged:?}");
        assert!(keys(store, "logs/").await.is_empty());
        // Every end left v2's open-claims index (a window's marker waits for the reconciler).
        let open = keys(store, "campaigns/v2/open-claims/").await;
        assert!(open.iter().all(|k| k.contains("/windows/")), "{open:?}");
    }
}
