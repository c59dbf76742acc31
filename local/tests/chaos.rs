//! The crash and throttling proof on a small campaign, through the library the `granary-local chaos`
//! command runs: many invocations die at a random external call (before it, or after it with the
//! answer lost), one call in ten is throttled, events are duplicated, delayed and preceded by
//! RUNNABLE notices, some final events never arrive (the reconciler finds those ends) — and still nothing is lost, submitted twice or succeeded twice.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary_local::chaos::{self, ChaosSpec};
use granary_local::runner::ChaosOptions;
use granary_local::simulate::on_the_virtual_clock;
use std::time::Duration;

/// Single jobs, then array windows with retries gathered into arrays (every retry parked by a
/// requeuer that may die at any call and submitted by a feeder that may too). Both run on one
/// virtual clock (`simulate::on_the_virtual_clock`, one a process): the 1 s leases, the listing
/// lag and the schedules are the same seconds, none of them waited on the wall (on the wall
/// the two took 96 s of CI's suite, 2 s of it CPU).
#[test]
fn nothing_lost_nothing_twice_under_crashes_and_throttling() {
    let ran = on_the_virtual_clock(11, async {
        holds_under_chaos(600, Vec::new()).await;
        let env = ["GRANARY_ARRAY_WINDOWS", "GRANARY_ARRAY_RETRIES"]
            .map(|var| (var.to_owned(), "on".to_owned()))
            .to_vec();
        let report = holds_under_chaos(400, env).await;
        assert!(report.retry_windows > 0, "{report:#?}");
        Ok(())
    });
    ran.unwrap();
}

async fn holds_under_chaos(granules: usize, env: Vec<(String, String)>) -> chaos::ChaosReport {
    let spec = ChaosSpec {
        granules,
        seed: 11,
        chaos: ChaosOptions {
            seed: 11,
            // Far above `granary-local chaos`'s default, so a small campaign crosses many crash
            // points (a crash may be drawn past an invocation's last call: it then survives).
            crash_rate: 0.5,
            throttle_rate: 0.10,
            min_crash_range: 16,
        },
        granule_submit_count: 100,
        feeder_interval: Duration::from_millis(20),
        lost_rate: 0.03,
        // ListJobs shows a new job only a quarter of a second later (AWS promises no
        // read-after-write for it). The margin to the 1 s chaos lease must cover how late in its
        // lease a run may send SubmitJob (throttling backoffs); production's is 16 min to seconds.
        listing_lag: Duration::from_millis(250),
        env,
    };
    let report = chaos::run(&spec, |_| {})
        .await
        .expect("the campaign settles");
    assert!(report.holds(), "{report:#?}");
    assert_eq!(report.unaccounted, 0);
    assert_eq!(report.succeeded + report.dead_lettered, granules as u64);
    // The test is only as strong as the faults it met.
    assert!(report.crashes_injected >= 15, "{report:#?}");
    assert!(report.throttles_injected >= 100, "{report:#?}");
    assert!(report.dead_lettered > 0 && report.duplicate_events > 0);
    // Events were lost and the reconciler found ends: with none unaccounted, every lost end was
    // handled (a reconciler run that crashed after handling one is not counted, so the two
    // figures need not match).
    assert!(report.events_lost > 0, "{report:#?}");
    assert!(report.ends_reconciled > 0, "{report:#?}");
    report
}
