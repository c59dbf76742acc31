//! `granary-local simulate`: the chaos campaign on one virtual clock, run as an operator runs it
//! (the binary, one simulation a process). A seed replays exactly, and an invocation dropped at
//! its function's timeout — Lambda's own crash mode — loses nothing.
#![allow(clippy::too_many_lines)] // test code

// `granary pace` on the virtual clock: one simulation a process, as nextest runs them.
#[path = "simulate/pace.rs"]
mod pace;

use serde_json::Value;
use std::process::Command;

/// The report of `granary-local simulate ARGS --json`, and whether it exited 0.
fn simulate(args: &[&str]) -> (Value, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_granary-local"))
        .arg("simulate")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, out.status.success())
}

/// The report without what the machine decides (how long it took).
fn deterministic(mut report: Value) -> Value {
    for field in ["wall_secs", "simulated_hours_per_second"] {
        report.as_object_mut().unwrap().remove(field);
    }
    report["audit"].as_object_mut().unwrap().remove("wall_secs");
    report
}

#[test]
fn a_seed_replays_exactly_and_the_promise_holds() {
    let args = ["--seed", "11", "--granules", "400"];
    let (first, held) = simulate(&args);
    assert!(held, "{first:#}");
    assert_eq!(first["audit"]["unaccounted"], 0);
    assert!(
        first["simulated_secs"].as_f64().unwrap() > 60.0,
        "{first:#}"
    );
    let (second, _) = simulate(&args);
    assert_eq!(deterministic(first), deterministic(second));
}

#[test]
fn invocations_ended_at_their_functions_timeout_lose_nothing() {
    let (report, held) = simulate(&[
        "--seed",
        "3",
        "--granules",
        "400",
        "--monitor-timeout-ms",
        "20",
    ]);
    assert!(held, "{report:#}");
    assert!(
        report["timed_out_invocations"].as_u64().unwrap() > 0,
        "no invocation outlived its timeout: {report:#}"
    );
    assert_eq!(report["audit"]["unaccounted"], 0);
    assert_eq!(report["audit"]["duplicate_successes"], 0);
    assert!(report["replay"]
        .as_str()
        .unwrap()
        .contains("--monitor-timeout-ms 20"));
}

#[test]
fn jobs_that_take_a_spot_queues_time_end_each_granule_once() {
    // By default jobs take time: minutes queued, up to 45 minutes an attempt, now and then
    // hours waiting for Spot capacity (past the watchdog's four hours, cancelled and retried),
    // EventBridge's delays and a day's retries, DescribeJobs a minute behind.
    let (timed, held) = simulate(&["--seed", "21", "--granules", "2000"]);
    assert!(held, "{timed:#}");
    assert!(
        timed["capacity_cancels"].as_u64().unwrap() > 0,
        "no job waited past the watchdog's limit: {timed:#}"
    );
    let audit = &timed["audit"];
    assert_eq!(audit["unaccounted"], 0);
    assert_eq!(audit["duplicate_submissions"], 0);
    assert_eq!(audit["records_disagreeing"], 0);
    assert!(audit["events_lost"].as_u64().unwrap() > 0, "{timed:#}");
    // The reconciler found every lost end, though DescribeJobs lagged.
    assert!(
        audit["ends_reconciled"].as_u64().unwrap() >= audit["events_lost"].as_u64().unwrap(),
        "{timed:#}"
    );
    // The operator's cancel half an hour in took open attempts, and their resumes sent them
    // round: nothing lost (above).
    let operator = &timed["operator"];
    assert!(operator["cancelled"].as_u64().unwrap() > 0, "{timed:#}");
    assert!(operator["resumed"].as_u64().unwrap() > 0, "{timed:#}");
    // The stack switched to a second campaign over the same inventories, and back: each
    // granule ended once in each campaign's own state.
    let second = &operator["second_campaign"];
    // The inventories' 2,000, and the importer's 100 (`--imported-files`, every other one
    // listed too).
    assert_eq!(second["granules"], 2100, "{timed:#}");
    assert_eq!(second["unaccounted"], 0);
    assert_eq!(second["duplicate_submissions"], 0);
    // The same campaign with every job ending at once is over hours sooner.
    let (instant, held) = simulate(&["--seed", "21", "--granules", "2000", "--instant-jobs"]);
    assert!(held, "{instant:#}");
    assert_eq!(instant["capacity_cancels"], 0);
    let hours = |r: &Value| r["simulated_secs"].as_f64().unwrap() / 3600.0;
    assert!(
        hours(&timed) > hours(&instant) + 4.0,
        "{} h against {} h",
        hours(&timed),
        hours(&instant)
    );
    assert!(instant["replay"]
        .as_str()
        .unwrap()
        .contains("--instant-jobs"));
}

#[test]
fn the_ingest_queue_ends_every_job_as_its_fate_allows_on_the_virtual_clock() {
    // Seed 4: a depositor's server that never answers (its objects' downloads time out, one
    // attempt a tick), slow ones, altered and poisoned objects, Spot reclaims, lost events,
    // crashes, an operator's hold and release.
    let (report, held) = simulate(&["--ingest", "--seed", "4", "--crash-rate", "0.05"]);
    assert!(held, "{report:#}");
    let audit = &report["audit"];
    assert_eq!(audit["jobs"], 240);
    assert_eq!(audit["unfinished"], serde_json::json!([]));
    assert_eq!(audit["wrong_outcomes"], serde_json::json!([]));
    assert!(audit["failed"].as_u64().unwrap() > 0, "{report:#}");
    assert!(audit["completed"].as_u64().unwrap() > 150, "{report:#}");
    assert!(report["slow_attempts"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        report["crashes_injected"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(report["events_lost"].as_u64().unwrap() > 0, "{report:#}");
    assert_eq!(report["ticks_timed_out"], 0, "a tick within its budget");
    let (again, _) = simulate(&["--ingest", "--seed", "4", "--crash-rate", "0.05"]);
    assert_eq!(
        deterministic(report),
        deterministic(again),
        "a seed replays"
    );
}

#[test]
fn archive_jobs_on_the_virtual_clock_complete_and_verify_though_invocations_die() {
    // One invocation in four dies at a random call; a task a dead invocation held comes back
    // after the queue's 5,400 s visibility timeout: hours of simulated time.
    let (report, held) = simulate(&["--archive", "--seed", "4", "--crash-rate", "0.25"]);
    assert!(held, "{report:#}");
    assert_eq!(report["completed"], 4);
    assert_eq!(report["wrong"], serde_json::json!([]));
    assert!(
        report["crashes_injected"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        report["simulated_secs"].as_f64().unwrap() > 3_600.0,
        "{report:#}"
    );
}
