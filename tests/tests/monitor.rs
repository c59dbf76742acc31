//! job-monitor against the emulator: events built from real submitted jobs (DescribeJobs).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::parquet::InventoryLayout;
use granary::domain::classify::Route;
use granary::domain::layout::logs::LogRecord;
use granary::handlers::feeder::{self, FeederEvent};
use granary::handlers::monitor::{self, MonitorOutcome};
use granary::repositories::read_json;
use granary_tests::*;

const SPOT: fn() -> AttemptEnd = || AttemptEnd::SpotInterruption {
    instance: "i-0123456789abcdef0".into(),
};

/// A stack with `n` granules fed to Batch; returns it with each job's facts, in row order.
async fn fed(tag: &str, n: usize, batch_attempts: i32) -> (TestStack, Vec<JobFacts>) {
    fed_with(tag, n, batch_attempts, &[]).await
}

async fn fed_with(
    tag: &str,
    n: usize,
    batch_attempts: i32,
    env: &[(&str, &str)],
) -> (TestStack, Vec<JobFacts>) {
    let s = stack(tag, batch_attempts, env).await;
    let granules = ids(n, "MO");
    let layout = InventoryLayout {
        row_group_rows: 100,
        page_rows: 20,
        offset_index: true,
    };
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/a.parquet",
        &granules,
        &layout,
    )
    .await;
    feeder::run(
        &s.ctx,
        FeederEvent {
            granule_submit_count: n as u64,
        },
    )
    .await
    .unwrap();
    let job_ids: Vec<String> = all_jobs(&s).await.into_iter().map(|(_, id)| id).collect();
    let mut facts = facts(&s, &job_ids).await;
    facts.sort_by_key(|f| granules.iter().position(|g| *g == f.granule_id));
    assert_eq!(facts.len(), n);
    (s, facts)
}

fn body(facts: &JobFacts, ends: &[AttemptEnd], status: &str) -> String {
    state_change_event(facts, ends, status).to_string()
}

#[tokio::test]
async fn routes_each_outcome_and_writes_the_keys() {
    let (s, f) = fed("routes", 4, 2).await;
    let ctx = &s.ctx;
    let out = monitor::handle_message(ctx, &body(&f[0], &[AttemptEnd::Success], "SUCCEEDED"))
        .await
        .unwrap();
    assert_eq!(out, MonitorOutcome::Succeeded { relocated: 0 });
    // Spot on Batch's last attempt: ours to retry.
    let out = monitor::handle_message(ctx, &body(&f[1], &[SPOT(), SPOT()], "FAILED"))
        .await
        .unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );
    let out = monitor::handle_message(
        ctx,
        &body(&f[2], &[AttemptEnd::AppFailure { exit_code: 1 }], "FAILED"),
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::FailureDlq
        }
    );
    // When Batch retries an attempt it sends RUNNABLE (the rule filters it; if one gets through,
    // the monitor ignores it). A FAILED event is final even with a Batch attempt and a RETRY rule
    // left (a terminated or timed-out job): it is logged and routed, never dropped.
    let out = monitor::handle_message(ctx, &body(&f[3], &[SPOT()], "RUNNABLE"))
        .await
        .unwrap();
    assert_eq!(out, MonitorOutcome::Ignored);
    let out = monitor::handle_message(ctx, &body(&f[3], &[SPOT()], "FAILED"))
        .await
        .unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );

    let logs = keys(ctx.store.as_ref(), "logs/").await;
    let key_of = |i: usize, outcome: &str| {
        let id = &f[i].granule_id;
        let platform = &id[4..7];
        logs.iter().find(|k| k.contains(id.as_str())).map(|k| {
            (
                k.clone(),
                k.starts_with(&format!(
                    "logs/outcome={outcome}/platform={platform}/acquisition_date=2022-"
                )),
            )
        })
    };
    assert!(key_of(0, "success").unwrap().1, "{logs:?}");
    assert!(key_of(1, "failure").unwrap().1);
    assert!(key_of(2, "failure").unwrap().1);
    assert!(
        key_of(3, "failure").unwrap().1,
        "a FAILED event is always logged"
    );
    assert_eq!(logs.len(), 4);
    assert!(logs.iter().all(|k| k.ends_with("/attempt=1.json")));

    let record: LogRecord = read_json(ctx.store.as_ref(), &key_of(2, "failure").unwrap().0)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(
        record.classification.reason,
        "application exited with code 1"
    );
    // Routed, and marked so by the item record's move past the attempt (with item records, the
    // default, the log is written once); without records the log's `routed_at` is the mark.
    let track_items = ctx.config.layout.track_items;
    assert_eq!(record.routed_at.is_some(), !track_items, "{record:?}");
    if track_items {
        let id = granary::domain::granule::GranuleId::parse(&f[2].granule_id).unwrap();
        let standing = ctx.items().standing(&id).await.unwrap().unwrap();
        assert!(standing.past(1), "{standing:?}");
    }
    assert_eq!(record.job["jobId"], f[2].job_id.as_str());

    // Two retries: the Spot reclaim on Batch's last attempt, and the final FAILED with a Batch
    // attempt left (order on the queue is not guaranteed).
    let retry = drain(&s.clients, &s.stack.retry_queue_url).await;
    assert_eq!(retry.len(), 2);
    let mut retried: Vec<serde_json::Value> = retry
        .iter()
        .map(|m| {
            assert_eq!(m.attributes["outcome"], "RETRYABLE");
            assert!(m.attributes["reason"].starts_with("spot interruption"));
            serde_json::from_str(&m.body).unwrap()
        })
        .collect();
    retried.sort_by_key(|v| v["granule_id"].to_string());
    // Each counts its Spot end: the attempt budget's count (`domain::attempt_budget`).
    let mut expected = vec![
        serde_json::json!({"granule_id": f[1].granule_id, "attempt": 1, "spot_ends": 1}),
        serde_json::json!({"granule_id": f[3].granule_id, "attempt": 1, "spot_ends": 1}),
    ];
    expected.sort_by_key(|v| v["granule_id"].to_string());
    assert_eq!(retried, expected);
    let dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].attributes["outcome"], "NON_RETRYABLE");
    assert_eq!(
        dlq[0].attributes["reason"],
        "application exited with code 1"
    );
}

#[tokio::test]
async fn a_duplicated_event_routes_once() {
    let (s, f) = fed("dupes", 2, 1).await;
    let spot = body(&f[0], &[SPOT()], "FAILED");
    let exit = body(&f[1], &[AttemptEnd::AppFailure { exit_code: 3 }], "FAILED");
    let first = monitor::handle_message(&s.ctx, &spot).await.unwrap();
    assert_eq!(
        first,
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );
    // Same event again, and in one SQS batch twice more with the other one.
    assert_eq!(
        monitor::handle_message(&s.ctx, &spot).await.unwrap(),
        MonitorOutcome::Duplicate
    );
    // Two copies of `exit` handled concurrently: one routes, the other finds it mid-routing and
    // is handed back to SQS; on redelivery it is a duplicate.
    let resp = monitor::handle_sqs(
        &s.ctx,
        sqs_event(&[exit.clone(), spot.clone(), exit.clone()]),
    )
    .await;
    assert!(
        resp.batch_item_failures.len() <= 1,
        "{:?}",
        resp.batch_item_failures
    );
    assert_eq!(
        monitor::handle_message(&s.ctx, &exit).await.unwrap(),
        MonitorOutcome::Duplicate
    );
    assert_eq!(drain(&s.clients, &s.stack.retry_queue_url).await.len(), 1);
    assert_eq!(drain(&s.clients, &s.stack.failure_dlq_url).await.len(), 1);
}

#[tokio::test]
async fn a_delivery_that_died_after_logging_is_finished_by_the_next() {
    let (s, f) = fed_with("halfway", 1, 1, &[("GRANARY_ROUTE_LEASE_SECS", "0")]).await;
    let spot = body(&f[0], &[SPOT()], "FAILED");
    // The first delivery logs, then dies before sending to the retry queue.
    let broken = granary::handlers::Ctx {
        retry_queue: std::sync::Arc::new(granary::adapters::aws::SqsQueue::new(
            s.clients.sqs.clone(),
            format!("{}-missing", s.stack.retry_queue_url),
        )),
        ..s.ctx.clone()
    };
    assert!(monitor::handle_message(&broken, &spot).await.is_err());
    assert!(drain(&s.clients, &s.stack.retry_queue_url).await.is_empty());
    // Redelivery: the log exists but was never routed, so it is routed now, once.
    assert_eq!(
        monitor::handle_message(&s.ctx, &spot).await.unwrap(),
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );
    assert_eq!(
        monitor::handle_message(&s.ctx, &spot).await.unwrap(),
        MonitorOutcome::Duplicate
    );
    assert_eq!(drain(&s.clients, &s.stack.retry_queue_url).await.len(), 1);
}

#[tokio::test]
async fn permanent_errors_are_recorded_and_dead_lettered_at_once_the_rest_goes_on() {
    let (s, f) = fed("malformed", 2, 1).await;
    let good = [
        body(&f[0], &[AttemptEnd::Success], "SUCCEEDED"),
        body(&f[1], &[AttemptEnd::Success], "SUCCEEDED"),
    ];
    let mut no_granule = state_change_event(&f[0], &[AttemptEnd::Success], "SUCCEEDED");
    no_granule["detail"]["container"]["environment"] = serde_json::json!([]);
    no_granule["detail"]["parameters"] = serde_json::json!({});
    let batch = vec![
        good[0].clone(),
        "{not json".to_owned(),
        r#"{"detail-type":"Batch Job State Change","source":"aws.batch","detail":{"status":"FAILED"}}"#.to_owned(),
        no_granule.to_string(),
        good[1].clone(),
    ];
    let resp = monitor::handle_sqs(&s.ctx, sqs_event(&batch)).await;
    // No redelivery for what can never be handled: nothing is reported back to SQS.
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(
        keys(s.ctx.store.as_ref(), "logs/outcome=success/")
            .await
            .len(),
        2
    );
    let dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    let mut kinds: Vec<&str> = dlq.iter().map(|m| m.attributes["kind"].as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "event_without_granule",
            "unreadable_event",
            "unreadable_event"
        ]
    );
    assert!(dlq.iter().all(|m| !m.attributes["reason"].is_empty()));
    let no_granule_notice = dlq
        .iter()
        .find(|m| m.attributes["kind"] == "event_without_granule")
        .unwrap();
    assert!(no_granule_notice.attributes["reason"].contains("neither GRANULE_ID"));
    assert_eq!(keys(s.ctx.store.as_ref(), "rejects/").await.len(), 3);
}

#[tokio::test]
async fn success_relocates_earlier_failure_logs() {
    let (s, f) = fed("relocate", 1, 1).await;
    let ctx = &s.ctx;
    monitor::handle_message(ctx, &body(&f[0], &[SPOT()], "FAILED"))
        .await
        .unwrap();
    assert_eq!(
        keys(ctx.store.as_ref(), "logs/outcome=failure/")
            .await
            .len(),
        1
    );
    // Attempt 2 (as the requeuer would submit it) succeeds.
    let second = JobFacts {
        attempt: 2,
        job_id: format!("{}-2", f[0].job_id),
        ..f[0].clone()
    };
    let out = monitor::handle_message(ctx, &body(&second, &[AttemptEnd::Success], "SUCCEEDED"))
        .await
        .unwrap();
    assert_eq!(out, MonitorOutcome::Succeeded { relocated: 1 });
    assert!(keys(ctx.store.as_ref(), "logs/outcome=failure/")
        .await
        .is_empty());
    let moved = keys(ctx.store.as_ref(), "logs/outcome=success/").await;
    assert_eq!(moved.len(), 2);
    let old: LogRecord = read_json(
        ctx.store.as_ref(),
        moved
            .iter()
            .find(|k| k.ends_with("attempt=1.json"))
            .unwrap(),
    )
    .await
    .unwrap()
    .unwrap()
    .value;
    let sup = old.superseded.expect("marked superseded");
    assert_eq!(sup.by_attempt, 2);
    // A late duplicate of the attempt-1 failure does not send the granule round again.
    let late = monitor::handle_message(ctx, &body(&f[0], &[SPOT()], "FAILED"))
        .await
        .unwrap();
    assert_eq!(late, MonitorOutcome::AlreadySucceeded { by_attempt: 2 });
    assert_eq!(
        drain(&s.clients, &s.stack.retry_queue_url).await.len(),
        1,
        "only the original routing"
    );
    assert!(keys(ctx.store.as_ref(), "logs/outcome=failure/")
        .await
        .is_empty());
}

/// Jobs the job queue's watchdog cancelled in RUNNABLE (never started: no attempt) reach the
/// monitor as FAILED with Batch's reason: a capacity shortage goes to the retry queue, a job no
/// compute environment can place to the failure DLQ, each logged with its reason.
#[tokio::test]
async fn jobs_the_queue_cancelled_in_runnable_are_retried_for_capacity_and_dead_lettered_for_misconfiguration(
) {
    let (s, f) = fed("watchdog", 2, 1).await;
    let cancelled = |facts: &JobFacts, reason: &str| {
        let mut event = state_change_event(facts, &[], "FAILED");
        event["detail"]["statusReason"] =
            format!("{}{reason}", granary::domain::classify::STATE_TIME_LIMIT).into();
        event.to_string()
    };
    let capacity = cancelled(&f[0], "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY");
    let out = monitor::handle_message(&s.ctx, &capacity).await.unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );
    let misconfigured = cancelled(&f[1], "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT");
    let out = monitor::handle_message(&s.ctx, &misconfigured)
        .await
        .unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::FailureDlq
        }
    );
    let dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert!(
        dlq[0].attributes["reason"].contains("MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"),
        "{:?}",
        dlq[0].attributes
    );
    assert_eq!(drain(&s.clients, &s.stack.retry_queue_url).await.len(), 1);
}
