//! The automatic brake (#32 item 3) on the emulator, as an operator meets it: a campaign whose
//! container fails for half its granules is held by the job monitor itself after a window of
//! ends, with the reason and the failures behind it; `granary status` says so, the feeder
//! submits nothing more, and `granary release` lets it go on.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use common::granary;
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use granary_tests::{clients, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_holds_the_feeder_when_the_code_keeps_failing() {
    let (clients, iam) = clients().await;
    let mut spec = CampaignSpec {
        granules: 400,
        plan: FaultPlan {
            seed: 7,
            spot_rate: 0.0,
            pull_error_rate: 0.0,
            app_failure_rate: 0.5,
            ..FaultPlan::default()
        },
        env: vec![
            ("GRANARY_BRAKE_WINDOW_ENDS".into(), "20".into()),
            ("GRANARY_BRAKE_APPLICATION_PERCENT".into(), "30".into()),
        ],
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 20;
    let mut c = Campaign::setup(&clients, &iam, &unique_name("brake"), &spec)
        .await
        .unwrap();
    // Twenty-five feeder runs: the first ones submit 20 granules each, their ends (half of them
    // failures) reach the monitor, and its first judgement (5 ends) holds the feeder long before
    // the 400 granules are all submitted.
    c.runtime
        .run_while(|_| {}, |p| p.feeder_runs < 25)
        .await
        .unwrap();
    assert!(
        c.runtime.progress.submitted < 400,
        "the feeder was held before the end: {} submitted",
        c.runtime.progress.submitted
    );
    let ctx = &c.runtime.ctx;
    let hold = ctx
        .hold()
        .read()
        .await
        .unwrap()
        .expect("the brake held the feeder");
    assert_eq!(hold.held_by, "job-monitor (automatic brake)");
    assert!(
        hold.reason.contains("application failures"),
        "{}",
        hold.reason
    );
    assert!(!hold.evidence.is_empty() && hold.evidence.len() <= 5);
    // The evidence names granules that failed, with their reason.
    for seen in &hold.evidence {
        let (granule, reason) = seen.split_once(": ").unwrap();
        assert!(reason.contains("exited with code"), "{seen}");
        let id = granary::domain::granule::GranuleId::parse(granule).unwrap();
        let record = ctx.items().look(&id).await.unwrap();
        assert!(
            record.is_some_and(|r| r.state != granary::domain::lifecycle::ItemState::Processed),
            "{granule} did not succeed"
        );
    }

    // The operator sees it.
    let owned = common::stack_vars(&c);
    let vars = common::vars(&owned);
    let (code, out, err) = granary(&vars, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("feeder: HELD — held by job-monitor (automatic brake)"),
        "{out}"
    );
    assert!(out.contains("behind it: "), "{out}");

    // The feeder submits nothing while held, and keeps its place.
    let feed = |ctx| {
        granary::handlers::feeder::run(
            ctx,
            granary::handlers::feeder::FeederEvent {
                granule_submit_count: 20,
            },
        )
    };
    let held = feed(ctx).await.unwrap();
    assert_eq!(held.submitted, 0);
    assert!(held
        .early_exit
        .unwrap_or_default()
        .contains("automatic brake"));
    let (code, _, err) = granary(&vars, &["release"]);
    assert_eq!(code, 0, "{err}");
    let released = feed(ctx).await.unwrap();
    assert!(released.submitted > 0, "{released:?}");
}
