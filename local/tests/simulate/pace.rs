//! `granary pace` in the simulation, on the virtual clock (#65 item 2): a campaign whose budget
//! pays for 150 of its 400 granules holds at the cap, with the reason, every granule it fed
//! ended and none lost; raised and released, it finishes. A campaign whose schedule would feed
//! it in eight hours meets a deadline of four and a half: the feeder raises its count; without
//! the pace the same campaign misses it.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::pace::Pace;
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::{BatchTiming, FaultPlan};
use granary_local::simulate::on_the_virtual_clock;
use std::time::Duration;

const GRANULES: usize = 400;

fn spec(seed: u64) -> CampaignSpec {
    let mut spec = CampaignSpec {
        granules: GRANULES,
        plan: FaultPlan {
            seed,
            spot_rate: 0.05,
            app_failure_rate: 0.0,
            timeout_rate: 0.0,
            pull_error_rate: 0.0,
            timing: BatchTiming::spot_queue(),
            ..FaultPlan::default()
        },
        ..CampaignSpec::default()
    };
    spec.runner.granule_submit_count = 50;
    spec.runner.feeder_interval = Duration::from_secs(3_600);
    spec.runner.reconcile_interval = Duration::from_secs(900);
    spec.runner.deadline = Duration::from_secs(3 * 86_400);
    spec.runner.stall_limit = Duration::from_secs(86_400);
    spec
}

fn pace(budget: Option<f64>, deadline: Option<chrono::DateTime<chrono::Utc>>) -> Pace {
    Pace {
        budget_dollars: budget,
        deadline,
        dollars_per_granule: 0.01,
        measured_over: 0,
        set_at: granary::clock::now(),
        set_by: "test".into(),
    }
}

/// When the feeder had submitted every row (its tracker's samples), if it did.
async fn all_fed_at(c: &Campaign) -> Option<chrono::DateTime<chrono::Utc>> {
    let tracker = c.runtime.ctx.tracker().load().await.unwrap().value;
    tracker
        .samples
        .iter()
        .find(|s| s.rows == GRANULES as u64)
        .map(|s| s.at)
}

#[test]
fn a_campaign_over_its_budget_holds_at_the_cap_and_loses_nothing() {
    let ((), _) = on_the_virtual_clock(3, async {
        let mut c = Campaign::in_memory(&spec(3)).await?;
        c.runtime.ctx.pace().write(&pace(Some(1.50), None)).await?;
        // Twelve hourly feeder runs: three feed the 150 the budget pays for, their jobs end
        // within the next hours, and the runs after are held. (A held campaign never settles:
        // rows are left; the runner would call it stalled.)
        c.runtime.run_while(|_| {}, |p| p.feeder_runs < 12).await?;
        let ctx = &c.runtime.ctx;
        let tracker = ctx.tracker().load().await?.value;
        assert_eq!(
            tracker.rows_submitted(),
            150,
            "what $1.50 pays for at $0.01"
        );
        let hold = ctx.hold().read().await?.expect("held at the cap");
        assert_eq!(hold.held_by, granary::handlers::feeder::SPEND_CAP_HOLDER);
        assert!(hold.reason.contains("spend cap"), "{}", hold.reason);
        // The metric behind the alarm: once, when the hold was placed (the runs after found it).
        let docs = ctx
            .metrics
            .take_documents(&ctx.config.stack, chrono::Utc::now());
        let held: f64 = docs.iter().filter_map(|d| d["SpendCapHeld"].as_f64()).sum();
        assert_eq!(held, 1.0);
        // Every granule fed ended: succeeded or dead-lettered, none missing, none in flight.
        let out = tempfile::tempdir()?;
        let audit = granary_cli::ops::audit::audit(ctx, out.path(), 1 << 20, &|_| {}).await?;
        let st = &audit.judged.standings;
        assert_eq!(
            st.get("succeeded").copied().unwrap_or(0)
                + st.get("dead_lettered").copied().unwrap_or(0),
            150,
            "{st:?}"
        );
        assert_eq!(st.get("not_fed").copied(), Some(250), "{st:?}");
        assert_eq!(
            (st.get("missing"), st.get("in_flight")),
            (None, None),
            "{st:?}"
        );
        // Raised and released: the rest is fed.
        ctx.pace().write(&pace(Some(10.0), None)).await?;
        ctx.hold().release().await?;
        c.runtime.run_to_quiescence(|_| {}).await?;
        let tracker = c.runtime.ctx.tracker().load().await?.value;
        assert_eq!(tracker.rows_submitted(), GRANULES as u64);
        Ok(())
    })
    .unwrap();
}

/// Feeds the campaign with or without the deadline's pace; when every row was fed, and the
/// deadline. One simulation a process: its clock is process-wide (nextest runs each test in its
/// own).
fn fed_against_deadline(
    paced: bool,
) -> (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) {
    let (out, _) = on_the_virtual_clock(5, async {
        let mut c = Campaign::in_memory(&spec(5)).await?;
        let deadline = granary::clock::now() + chrono::Duration::minutes(270);
        if paced {
            c.runtime
                .ctx
                .pace()
                .write(&pace(None, Some(deadline)))
                .await?;
        }
        c.runtime.run_to_quiescence(|_| {}).await?;
        let fed = all_fed_at(&c).await.expect("every row fed in the end");
        Ok((fed, deadline))
    })
    .unwrap();
    out
}

#[test]
fn a_campaign_that_can_meet_its_deadline_meets_it() {
    let (fed, deadline) = fed_against_deadline(true);
    assert!(
        fed <= deadline,
        "fed at {fed}, after the deadline {deadline}"
    );
}

#[test]
fn the_same_campaign_unpaced_misses_the_deadline() {
    let (fed, deadline) = fed_against_deadline(false);
    assert!(
        fed > deadline,
        "unpaced, fed at {fed}: the schedule alone must miss it, or the paced test proves nothing"
    );
}
