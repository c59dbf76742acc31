//! Memory-aware retries (#65 item 3), end to end through the job monitor and the requeuer. The
//! first end is a published event (`08-hlsvi-exit1-failed`, a job that reserved MEMORY 1000)
//! made into the out-of-memory end ECS documents ("OutOfMemoryError: Container killed due to
//! memory usage", exit 137; no published event has one, SOURCES.md lists it as a gap). Its
//! retry goes out with twice the memory, through SubmitJob's `containerOverrides`; the next
//! out-of-memory end doubles it to the cap; at the cap it is dead-lettered with the memory it
//! had. A Spot reclaim in between keeps the memory the attempt had.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::memory::{job_state_change, Ending, MemoryJobRunner};
use granary::config::Config;
use granary::contracts::messages::RetryMessage;
use granary::domain::batch_event::JobStatus;
use granary::domain::classify::Route;
use granary::domain::memory::memory_of;
use granary::handlers::monitor::{self, MonitorOutcome};
use granary::handlers::requeuer::{self, RequeueOutcome};
use granary::handlers::Ctx;
use granary::ports::Queue;
use serde_json::{json, Value};
use std::sync::Arc;

const OOM: &str = "OutOfMemoryError: Container killed due to memory usage";

fn published(name: &str) -> Value {
    let dir = match std::env::var_os("GRANARY_REAL_EVENTS") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/real-batch-events"),
    };
    let text = std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{}: {e} (set GRANARY_REAL_EVENTS)", dir.display()));
    serde_json::from_str(&text).unwrap()
}

/// The published failure as granary's job that ran out of memory: granule and attempt as
/// granary sets them, the container's reason and exit code as ECS documents an OOM kill.
fn documented_oom_end(granule: &str) -> Value {
    let raw = published("08-hlsvi-exit1-failed.json");
    let mut event = if raw.get("detail").is_some() {
        raw
    } else {
        json!({"detail-type": "Batch Job State Change", "source": "aws.batch", "detail": raw})
    };
    let d = &mut event["detail"];
    d["parameters"] = json!({"granule_id": granule, "attempt": "1"});
    if let Some(env) = d["container"]["environment"].as_array_mut() {
        env.retain(|kv| !matches!(kv["name"].as_str(), Some("GRANULE_ID" | "ATTEMPT")));
    }
    d["container"]["reason"] = json!(OOM);
    d["container"]["exitCode"] = json!(137);
    for a in d["attempts"].as_array_mut().unwrap() {
        a["container"]["reason"] = json!(OOM);
        a["container"]["exitCode"] = json!(137);
    }
    event
}

async fn one(q: &Arc<dyn Queue>) -> (RetryMessage, String) {
    let got = q.receive(10, 30, 0).await.unwrap();
    assert_eq!(got.len(), 1, "one message");
    q.delete(&got[0].receipt_handle).await.unwrap();
    let reason = got[0].attributes.get("reason").cloned().unwrap_or_default();
    (serde_json::from_str(&got[0].body).unwrap(), reason)
}

/// The monitor handles `event`; its retry message is handed to the requeuer.
async fn round(ctx: &Ctx, event: &Value) -> (RetryMessage, RequeueOutcome) {
    let out = monitor::handle_message(ctx, &event.to_string())
        .await
        .unwrap();
    assert_eq!(
        out,
        MonitorOutcome::Routed {
            route: Route::RetryQueue
        }
    );
    let (message, _) = one(&ctx.retry_queue).await;
    let body = serde_json::to_string(&message).unwrap();
    (message, requeuer::handle_message(ctx, &body).await.unwrap())
}

async fn described(ctx: &Ctx, job_id: &str) -> Value {
    ctx.jobs.describe(job_id).await.unwrap().unwrap().detail
}

#[tokio::test]
async fn out_of_memory_retries_double_to_the_cap_then_dead_letter_with_the_memory_they_had() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let env = [
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
        ("GRANARY_JOB_MEMORY_MIB", "1000:3000"),
        ("GRANARY_MAX_RETRIES", "5"),
    ];
    let mut ctx = Ctx::in_memory(Config::from_pairs(&env).unwrap());
    ctx.jobs = jobs.clone();
    let granule = "HLS.S30.T18TYN.2022002T153012.v2.0";

    // The documented end: classified out_of_memory, retried with the memory it had.
    let first = documented_oom_end(granule);
    assert_eq!(
        memory_of(&first["detail"]),
        Some(1000),
        "the published job reserved 1000 MiB"
    );
    let (message, out) = round(&ctx, &first).await;
    assert_eq!(
        (message.memory_mib, message.out_of_memory),
        (Some(1000), true)
    );
    let RequeueOutcome::Resubmitted { attempt: 2, job_id } = out else {
        panic!("{out:?}")
    };
    let logs = ctx.store.list("logs/outcome=failure/").await.unwrap();
    let log: Value =
        serde_json::from_slice(&ctx.store.get(&logs[0].key).await.unwrap().unwrap().body).unwrap();
    assert_eq!(log["classification"]["failure"]["kind"], "out_of_memory");
    assert_eq!(log["classification"]["outcome"], "RETRYABLE");
    // Twice the memory, as SubmitJob's override and the job's parameter.
    let submitted = jobs.submitted();
    assert_eq!(submitted.last().unwrap().memory_mib, Some(2000));
    let detail = described(&ctx, &job_id).await;
    assert_eq!(detail["parameters"]["memory_mib"], "2000");
    assert_eq!(
        detail["container"]["resourceRequirements"][0]["value"],
        "2000"
    );

    // A Spot reclaim of the 2000 MiB attempt: the next keeps 2000.
    let reclaimed = job_state_change(&jobs.end(&job_id, Ending::SpotReclaimed).unwrap());
    let (message, out) = round(&ctx, &reclaimed).await;
    assert_eq!(
        (message.memory_mib, message.out_of_memory),
        (Some(2000), false)
    );
    let RequeueOutcome::Resubmitted { attempt: 3, job_id } = out else {
        panic!("{out:?}")
    };
    assert_eq!(jobs.submitted().last().unwrap().memory_mib, Some(2000));

    // Out of memory at 2000: doubled, but only to the cap.
    let oom = job_state_change(&jobs.end(&job_id, Ending::OutOfMemory).unwrap());
    let (message, out) = round(&ctx, &oom).await;
    assert_eq!(
        (message.memory_mib, message.out_of_memory),
        (Some(2000), true)
    );
    let RequeueOutcome::Resubmitted { attempt: 4, job_id } = out else {
        panic!("{out:?}")
    };
    assert_eq!(jobs.submitted().last().unwrap().memory_mib, Some(3000));

    // Out of memory at the cap: dead-lettered, with the memory it had.
    let submitted_before = jobs.submitted().len();
    let oom = job_state_change(&jobs.end(&job_id, Ending::OutOfMemory).unwrap());
    let (_, out) = round(&ctx, &oom).await;
    let RequeueOutcome::DeadLettered { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.starts_with("out of memory at 3000 MiB"), "{reason}");
    assert_eq!(
        jobs.submitted().len(),
        submitted_before,
        "nothing more submitted"
    );
    let (dead, why) = one(&ctx.failure_dlq).await;
    assert_eq!(
        (dead.event.attempt, dead.memory_mib, dead.out_of_memory),
        (4, Some(3000), true)
    );
    assert_eq!(why, reason);
}
