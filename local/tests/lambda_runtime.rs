//! Every Lambda binary under a Runtime API that granary did not write: cargo-lambda's own
//! emulator (`cargo lambda watch --only-lambda-apis`), with the emulator's AWS behind it.
//!
//! `make test` deploys infra/template.yaml into moto (scripts/infra.sh deploy), which creates
//! each function with the environment the template gives it. Each binary runs here with exactly
//! that environment, and `cargo lambda invoke --data-file` sends it the event shapes AWS
//! documents for its trigger:
//! - an EventBridge schedule with `Input` delivers that input alone, and one without delivers the
//!   Scheduled Event itself (EventBridge API Reference, `Target.Input`; "Amazon EventBridge
//!   events": the `aws.events` Scheduled Event);
//! - an SQS event source mapping delivers `{"Records": [...]}` and reads a partial batch
//!   response, `{"batchItemFailures": [{"itemIdentifier": ...}]}` (Lambda Developer Guide,
//!   "Using Lambda with Amazon SQS", "Handling errors for an SQS event source");
//! - the monitor's records carry a Batch Job State Change as EventBridge delivers it: here the
//!   published events of `../shared/real-batch-events/`, read where they are.
//!
//! Each answer is checked as Lambda reads it, and each outcome in the emulator's S3 and SQS.
//! local/src/runtime_api.rs, granary's own minimal Runtime API, stays for the benchmarks.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

#[path = "lambda_runtime/harness.rs"]
mod harness;

use granary::adapters::aws::{AwsClients, S3Store};
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::layout::logs::{LogKey, LogOutcome};
use granary::ports::{ObjectStore, PutCondition};
use harness::{Deployed, Emulator, Own};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The Scheduled Event EventBridge sends a target that has no `Input` (the shape the EventBridge
/// User Guide gives for `aws.events`).
fn scheduled_event(rule: &str) -> Value {
    json!({
        "version": "0",
        "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-12-07T16:00:00Z",
        "region": "us-east-1",
        "resources": [format!("arn:aws:events:us-east-1:123456789012:rule/{rule}")],
        "detail": {}
    })
}

/// One SQS record as the event source mapping hands it over.
fn sqs_record(id: &str, body: &str) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("receipt-{id}"),
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1796659200000",
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1796659200001"
        },
        "messageAttributes": {},
        "md5OfBody": "0123456789abcdef0123456789abcdef",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:granary-queue",
        "awsRegion": "us-east-1"
    })
}

fn sqs_event(records: &[(&str, String)]) -> Value {
    json!({"Records": records.iter().map(|(id, body)| sqs_record(id, body)).collect::<Vec<_>>()})
}

/// A published Batch event (or JobDetail, wrapped as the rule delivers it) for one of granary's
/// jobs: the granule and attempt set where granary's job definition puts them.
fn published_event(file: &str, granule: &str) -> String {
    let path = harness::real_events_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the published Batch events: {}: {e}", path.display()));
    let mut event: Value = serde_json::from_str(&text).unwrap();
    if event.get("detail").is_none() {
        event = json!({"detail-type": "Batch Job State Change", "source": "aws.batch", "detail": event});
    }
    event["detail"]["parameters"] = json!({"granule_id": granule, "attempt": "1"});
    if let Some(Value::Array(env)) = event["detail"]
        .get_mut("container")
        .and_then(|c| c.get_mut("environment"))
    {
        env.retain(|kv| !matches!(kv["name"].as_str(), Some("GRANULE_ID" | "ATTEMPT")));
    }
    event.to_string()
}

fn failures(answer: &Value) -> Vec<String> {
    let list = answer["batchItemFailures"]
        .as_array()
        .unwrap_or_else(|| panic!("not a partial batch response: {answer}"));
    list.iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_answers_the_events_aws_sends_under_cargo_lambdas_runtime() {
    let deployed = Deployed::read();
    let clients = AwsClients::new(&granary::adapters::aws::load_sdk_config().await);
    let own = Own::make(&clients).await;
    let emulator = Emulator::start();
    let mut passed = BTreeMap::new();

    // The feeder: the schedule's Input, as the template writes it, over a two-row inventory.
    let feeder = deployed.function("QueueFeederFunction", &own);
    let ctx = feeder.ctx(&clients);
    let rows = granary_local::granule_list::sample_granules(2, 7);
    let inventory = granary::adapters::parquet::write_inventory(
        &rows,
        &granary::adapters::parquet::InventoryLayout::granary(),
    )
    .unwrap();
    ctx.store
        .put(
            "inventories/0001.parquet",
            inventory,
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let input = deployed.schedule_input("QueueFeederFunction", &[("GranuleSubmitCount", "2")]);
    let running = emulator.run(&feeder);
    let answer = running.invoke(&input).answer();
    assert_eq!(answer["submitted"], 2, "{answer}");
    // A malformed input is an error as Lambda reports it (errorType, errorMessage).
    let refused = running.invoke(&json!({"granule_submit_count": "two"}));
    refused.assert_error("DeserializeError");
    drop(running);
    passed.insert("queue-feeder", answer.to_string());

    // The monitor: two published events, a success and an application failure.
    let monitor = deployed.function("JobMonitorFunction", &own);
    let (done, failed) = (rows[0].granule_id.as_str(), rows[1].granule_id.as_str());
    let event = sqs_event(&[
        ("m-ok", published_event("01-ecs-props-succeeded.json", done)),
        (
            "m-bad",
            published_event("08-hlsvi-exit1-failed.json", failed),
        ),
    ]);
    let running = emulator.run(&monitor);
    let answer = running.invoke(&event).answer();
    drop(running);
    assert_eq!(failures(&answer), Vec::<String>::new(), "{answer}");
    let prefix = &ctx.config.layout.log_prefix;
    let logs = granary_tests::keys(ctx.store.as_ref(), prefix).await;
    assert!(
        logs.iter().any(|k| LogKey::parse(prefix, k)
            .is_ok_and(|l| l.granule_id.as_str() == done && l.outcome == LogOutcome::Success)),
        "the success is logged: {logs:?}"
    );
    let dead = granary_tests::drain(&clients, own.get("GRANARY_FAILURE_DLQ_URL")).await;
    assert!(
        dead.iter().any(|m| m.body.contains(failed)),
        "the application failure is dead-lettered: {dead:?}"
    );
    passed.insert("job-monitor", answer.to_string());

    // The requeuer: a retry, one whose next attempt another run holds (it fails alone and
    // comes back), and a malformed one (dead-lettered, not retried for ever).
    let requeuer = deployed.function("RequeuerFunction", &own);
    let held = GranuleProcessingEvent {
        granule_id: GranuleId::parse("held-granule").unwrap(),
        attempt: 2,
    };
    let claim = granary::domain::claim::Claim::new(&held, None, "someone", chrono::Utc::now());
    granary::repositories::write_json(
        ctx.store.as_ref(),
        &granary::domain::layout::claims::claim_key("claims/", &held),
        &claim,
        PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    let retry = |id: &str| {
        serde_json::to_string(&GranuleProcessingEvent {
            granule_id: GranuleId::parse(id).unwrap(),
            attempt: 1,
        })
        .unwrap()
    };
    let event = sqs_event(&[
        ("m-retry", retry(failed)),
        ("m-held", retry("held-granule")),
        ("m-garbage", "not json".to_owned()),
    ]);
    let running = emulator.run(&requeuer);
    let answer = running.invoke(&event).answer();
    drop(running);
    assert_eq!(failures(&answer), vec!["m-held".to_owned()], "{answer}");
    let dead = granary_tests::drain(&clients, own.get("GRANARY_FAILURE_DLQ_URL")).await;
    assert!(
        dead.iter().any(
            |m| m.attributes.get("kind").map(String::as_str) == Some("malformed_retry_message")
        ),
        "the malformed message is dead-lettered: {dead:?}"
    );
    passed.insert("requeuer", answer.to_string());

    // Discovery, on its schedule's Scheduled Event, finds the file the source lists.
    let discover = deployed.function("ImporterDiscoverFunction", &own);
    let sources = S3Store::new(clients.s3.clone(), harness::SOURCES_BUCKET);
    let file = "HLS.S30.T11SKA.2024001T000000.v2.0.h5";
    sources
        .put(
            &format!("{}/{file}", own.get("GRANARY_BUCKET")),
            bytes::Bytes::from(vec![b'x'; 4096]),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let running = emulator.run(&discover);
    let answer = running
        .invoke(&scheduled_event("granary-importer-discover"))
        .answer();
    drop(running);
    assert_eq!(answer["queued"], 1, "{answer}");
    passed.insert("importer-discover", answer.to_string());

    // The step, on the import queue's message.
    let step = deployed.function("ImporterStepFunction", &own);
    let messages = granary_tests::drain(&clients, own.get("GRANARY_IMPORT_QUEUE_URL")).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let event = sqs_event(&[("m-item", messages[0].body.clone())]);
    let running = emulator.run(&step);
    let answer = running.invoke(&event).answer();
    drop(running);
    assert_eq!(failures(&answer), Vec::<String>::new(), "{answer}");
    let message: granary::contracts::messages::ImportMessage =
        serde_json::from_str(&messages[0].body).unwrap();
    let record = ctx.items().look(&message.item_id).await.unwrap();
    let record = record.unwrap_or_else(|| panic!("{} has no record", message.item_id));
    assert_ne!(
        record.state,
        granary::domain::lifecycle::ItemState::Discovered,
        "the step moved its item on: {record:?}"
    );
    passed.insert("importer-step", answer.to_string());

    // The sweeper, on its Scheduled Event: the reconciler's pass, then the sweep.
    let sweeper = deployed.function("ItemSweeperFunction", &own);
    let running = emulator.run(&sweeper);
    let answer = running
        .invoke(&scheduled_event("granary-item-sweeper"))
        .answer();
    drop(running);
    assert_eq!(answer["reconcile"]["errors"], 0, "{answer}");
    assert_eq!(answer["sweep"]["errors"], 0, "{answer}");
    passed.insert("item-sweeper", answer.to_string());

    // Ingest: a submission whose manifest is not there is recorded as refused, not retried.
    let submit = deployed.function("IngestSubmitFunction", &own);
    let submission = json!({
        "collection": "maps",
        "manifest_url": format!("s3://{}/ingest/manifests/missing.csv", own.get("GRANARY_BUCKET")),
        "kind": "files",
        "priority": 5,
        "submitter": "svc",
    });
    let event = sqs_event(&[("m-submission", submission.to_string())]);
    let running = emulator.run(&submit);
    let answer = running.invoke(&event).answer();
    drop(running);
    assert_eq!(failures(&answer), Vec::<String>::new(), "{answer}");
    let batches = granary_tests::keys(ctx.store.as_ref(), "ingest/batches/").await;
    assert!(!batches.is_empty(), "the submission made a batch");
    passed.insert("ingest-submit", answer.to_string());

    let dispatcher = deployed.function("IngestDispatcherFunction", &own);
    let running = emulator.run(&dispatcher);
    let answer = running
        .invoke(&scheduled_event("granary-ingest-dispatcher"))
        .answer();
    drop(running);
    assert_eq!(answer["errors"], 0, "{answer}");
    assert_eq!(
        answer["failed"], 1,
        "the batch with no manifest failed: {answer}"
    );
    passed.insert("ingest-dispatcher", answer.to_string());

    // Archive: the dispatcher's tick, and a task of a job that does not exist.
    let archive = deployed.function("ArchiveDispatcherFunction", &own);
    let running = emulator.run(&archive);
    let answer = running
        .invoke(&scheduled_event("granary-archive-dispatcher"))
        .answer();
    drop(running);
    assert_eq!(answer["errors"], 0, "{answer}");
    passed.insert("archive-dispatcher", answer.to_string());

    let task = deployed.function("ArchiveTaskFunction", &own);
    let message = granary::contracts::archive::TaskMessage {
        job: "no-such-job".into(),
        phase: granary::domain::archive::job::Phase::ActivityArchiving,
        task: "0".into(),
    };
    let event = sqs_event(&[("m-task", serde_json::to_string(&message).unwrap())]);
    let running = emulator.run(&task);
    let answer = running.invoke(&event).answer();
    drop(running);
    assert_eq!(failures(&answer), Vec::<String>::new(), "{answer}");
    passed.insert("archive-task", answer.to_string());

    for (name, answer) in &passed {
        println!("{name}: {answer}");
    }
    assert_eq!(
        passed.len(),
        deployed.function_count(),
        "every function of the template answered under the emulator"
    );
}
