//! infra/template.yaml and granary's code agree: `make test` deploys the template into the
//! emulator (scripts/infra.sh deploy) and this test drives the deployed resources with granary's
//! handlers — the feeder submits to the deployed job queue and definition, Batch events put on the
//! bus reach the deployed events queue through the deployed rule, and the monitor and requeuer
//! write and route through the deployed bucket and queues.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::aws::{EventBridgeBus, SqsQueue};
use granary::handlers::{monitor, requeuer, Ctx};
use granary::ports::{BusEvent, EventBus, Queue};
use granary_local::runner::lambda_sqs_event;
use granary_tests::*;
use std::time::Duration;

fn outputs() -> serde_json::Value {
    let path = std::env::var("GRANARY_DEPLOYED_STACK")
        .unwrap_or_else(|_| panic!("GRANARY_DEPLOYED_STACK is not set: run `make test`, which deploys infra/template.yaml into the emulator first"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(v["status"], "CREATE_COMPLETE", "{v}");
    v
}

/// The deployed job queue's Batch: the endpoint's, or — where the endpoint has none and the
/// deployment stood in for it (LocalStack) — granary's in-memory Batch under the ARNs the
/// deployed rule and functions were given, with the RetryStrategy the template's job definition
/// declares.
fn deployed_batch(
    deployed: &serde_json::Value,
    clients: &granary::adapters::aws::AwsClients,
) -> (
    std::sync::Arc<dyn granary::ports::JobRunner>,
    std::sync::Arc<dyn granary_local::simulator::JobLedger>,
) {
    use std::sync::Arc;
    let out = &deployed["outputs"];
    let queue = out["JobQueueArn"].as_str().unwrap();
    let definition = out["JobDefinitionArn"].as_str().unwrap();
    if deployed["batch"] != false {
        return (
            Arc::new(granary::adapters::aws::BatchJobRunner::new(
                clients.batch.clone(),
                queue,
                definition,
            )),
            Arc::new(granary_local::simulator::EndpointBatch::new(
                clients.batch.clone(),
                queue,
            )),
        );
    }
    let template = granary_template::Template::granary().unwrap();
    let retry = &template.doc["Resources"]["JobDefinition"]["Properties"]["RetryStrategy"];
    let default_attempts = &template.doc["Parameters"]["BatchRetryAttempts"]["Default"];
    let strategy = serde_json::json!({
        "attempts": default_attempts,
        "evaluateOnExit": retry["EvaluateOnExit"].as_array().unwrap().iter().map(|e| serde_json::json!({
            "onStatusReason": e["OnStatusReason"], "onReason": e["OnReason"],
            "action": e["Action"].as_str().unwrap().to_lowercase(),
        })).collect::<Vec<_>>(),
    });
    let batch = Arc::new(granary_local::in_memory::InMemoryBatch::new(
        queue, definition, strategy,
    ));
    (batch.clone(), batch)
}

/// The ids of the jobs of `granules`' attempt `attempt` (by the names granary gives them): the
/// suite's other tests submit to the deployed job queue too.
async fn ours(
    ledger: &dyn granary_local::simulator::JobLedger,
    granules: &[String],
    attempt: u32,
) -> Vec<String> {
    let names: Vec<String> = granules
        .iter()
        .map(|g| {
            let id = granary::domain::granule::GranuleId::parse(g).unwrap();
            granary::domain::job_name::job_name(None, &id, attempt)
        })
        .collect();
    ledger
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|(name, _)| names.contains(name))
        .map(|(_, id)| id)
        .collect()
}

fn bus_event(value: serde_json::Value) -> BusEvent {
    BusEvent {
        source: "aws.batch".into(),
        detail_type: "Batch Job State Change".into(),
        resources: vec![],
        detail: value["detail"].clone(),
    }
}

/// Receives from the deployed events queue until `n` messages arrived (EventBridge delivery is async).
async fn receive_n(q: &SqsQueue, n: usize) -> Vec<granary::ports::ReceivedMessage> {
    let mut got = Vec::new();
    for _ in 0..50 {
        got.extend(q.receive(10, 30, 1).await.unwrap());
        if got.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    got
}

#[tokio::test]
async fn the_deployed_stack_runs_granary() {
    let deployed = outputs();
    let out = deployed["outputs"].clone();
    let (clients, _) = clients().await;
    let get = |k: &str| {
        out[k]
            .as_str()
            .unwrap_or_else(|| panic!("stack output {k} missing: {out}"))
            .to_owned()
    };
    let env = [
        ("GRANARY_BUCKET", get("DataBucketName")),
        ("GRANARY_JOB_QUEUE", get("JobQueueArn")),
        ("GRANARY_JOB_DEFINITION", get("JobDefinitionArn")),
        ("GRANARY_RETRY_QUEUE_URL", get("RetryQueueUrl")),
        ("GRANARY_FAILURE_DLQ_URL", get("FailureDlqUrl")),
    ];
    let config = granary::config::Config::from_lookup(|k| {
        env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    let (jobs, ledger) = deployed_batch(&deployed, &clients);
    let mut ctx = Ctx::aws(config, &clients).unwrap();
    ctx.jobs = jobs;

    // The feeder submits to the deployed job queue with the deployed job definition.
    let granules = ids(3, "ST");
    put_inventory(
        ctx.store.as_ref(),
        "inventories/a.parquet",
        &granules,
        &small_layout(),
    )
    .await;
    let fed = feed(&ctx, 3).await;
    assert_eq!(fed.submitted, 3, "{fed:?}");
    // This test's jobs only (by the names granary gives them): the suite's other tests submit to
    // the deployed job queue too (local/tests/lambda_runtime.rs runs the feeder and requeuer
    // binaries on this stack).
    let job_ids = ours(ledger.as_ref(), &granules, 1).await;
    assert_eq!(job_ids.len(), 3);
    let mut facts = ledger.facts(&job_ids).await.unwrap();
    facts.sort_by_key(|f| granules.iter().position(|g| *g == f.granule_id));
    // The job carries the deployed definition's RetryStrategy (3 attempts, Spot retried by Batch).
    assert_eq!(
        facts[0].retry_strategy["attempts"], 3,
        "{}",
        facts[0].retry_strategy
    );

    // Events on the default bus reach the deployed events queue through the deployed rule...
    let spot = || AttemptEnd::SpotInterruption {
        instance: "i-0123456789abcdef0".into(),
    };
    let bus = EventBridgeBus::new(clients.events.clone(), "default");
    bus.put_events(vec![
        bus_event(state_change_event(
            &facts[0],
            &[AttemptEnd::Success],
            "SUCCEEDED",
        )),
        bus_event(state_change_event(
            &facts[1],
            &[spot(), spot(), spot()],
            "FAILED",
        )),
        bus_event(state_change_event(
            &facts[2],
            &[AttemptEnd::AppFailure { exit_code: 4 }],
            "FAILED",
        )),
    ])
    .await
    .unwrap();
    // ...but not a job of another queue, nor a non-terminal state.
    let other = JobFacts {
        job_queue_arn: format!("{}-other", facts[0].job_queue_arn),
        ..facts[0].clone()
    };
    bus.put_events(vec![
        bus_event(state_change_event(
            &other,
            &[AttemptEnd::Success],
            "SUCCEEDED",
        )),
        bus_event(state_change_event(&facts[0], &[], "RUNNING")),
    ])
    .await
    .unwrap();
    let events_queue = SqsQueue::new(clients.sqs.clone(), get("BatchEventsQueueUrl"));
    let received = receive_n(&events_queue, 3).await;
    assert_eq!(
        received.len(),
        3,
        "exactly our three terminal events pass the rule"
    );
    assert!(events_queue.receive(10, 30, 1).await.unwrap().is_empty());

    // The monitor handles them as Lambda would hand them over, writing to the deployed bucket and
    // routing to the deployed queues.
    let response = monitor::handle_sqs(
        &ctx,
        lambda_sqs_event(&get("BatchEventsQueueUrl"), &received).unwrap(),
    )
    .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        keys(ctx.store.as_ref(), "logs/outcome=success/")
            .await
            .len(),
        1
    );
    assert_eq!(
        keys(ctx.store.as_ref(), "logs/outcome=failure/")
            .await
            .len(),
        2
    );
    let retry = SqsQueue::new(clients.sqs.clone(), get("RetryQueueUrl"));
    let retries = retry.receive(10, 30, 0).await.unwrap();
    assert_eq!(retries.len(), 1);
    let dlq = drain(&clients, &get("FailureDlqUrl")).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(
        dlq[0].attributes["reason"],
        "application exited with code 4"
    );

    // The requeuer resubmits the Spot victim's attempt 2 to the deployed queue.
    let response = requeuer::handle_sqs(
        &ctx,
        lambda_sqs_event(&get("RetryQueueUrl"), &retries).unwrap(),
    )
    .await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(ours(ledger.as_ref(), &granules, 1).await.len(), 3);
    assert_eq!(ours(ledger.as_ref(), &granules, 2).await.len(), 1);

    // Every granule has its item record in the deployed bucket.
    assert_eq!(
        ctx.items().find(&Default::default()).await.unwrap().len(),
        3
    );

    // The importer: a file under sources/ is discovered onto the deployed import queue, the step
    // handler downloads and admits it, and the READY item lands on the deployed retry queue.
    ctx.store
        .put(
            "sources/HLS.S30.T01GBH.2022226T214921.v2.0.h5",
            // An HDF5 file's signature first (`domain::file_format`), then anything.
            bytes::Bytes::from_static(b"\x89HDF\r\n\x1a\ngranule bytes"),
            granary::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let mut config = ctx.config.clone();
    config.importer.import_queue_url = Some(get("ImportQueueUrl"));
    config.importer.source_url = Some(format!("s3://{}/sources/", get("DataBucketName")));
    let importer_ctx = Ctx::aws(config, &clients).unwrap();
    let found = granary::handlers::importer::discover::discover(&importer_ctx)
        .await
        .unwrap();
    assert_eq!(found.new, 1);
    let steps = receive_n(
        &SqsQueue::new(clients.sqs.clone(), get("ImportQueueUrl")),
        1,
    )
    .await;
    let response = granary::handlers::importer::handle_sqs(
        &importer_ctx,
        lambda_sqs_event(&get("ImportQueueUrl"), &steps).unwrap(),
    )
    .await;
    assert!(response.batch_item_failures.is_empty());
    let ready = drain(&clients, &get("RetryQueueUrl")).await;
    assert_eq!(ready.len(), 1, "the admitted item is handed to processing");

    // An event the monitor kept failing on (or EventBridge could not deliver) waits in the
    // deployed events DLQ; `granary redrive-events` puts it back on the events queue unchanged.
    let events_dlq = SqsQueue::new(clients.sqs.clone(), get("BatchEventsDlqUrl"));
    let events_queue = SqsQueue::new(clients.sqs.clone(), get("BatchEventsQueueUrl"));
    let parked = r#"{"detail-type":"Batch Job State Change","detail":{"jobName":"parked-a1"}}"#;
    events_dlq
        .send(granary::ports::OutgoingMessage::new(parked))
        .await
        .unwrap();
    let moved = granary::handlers::redrive::redrive_events(
        &events_dlq,
        &events_queue,
        &granary::handlers::redrive::RedriveOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(moved.redriven, 1);
    assert_eq!(moved.matched[0].granule_id, "parked-a1");
    let back = receive_n(&events_queue, 1).await;
    assert_eq!(back[0].body, parked);
}
