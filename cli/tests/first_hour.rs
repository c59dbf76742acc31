//! The operator's first hour, against the emulator: each command asks only for the variables it
//! uses, and a missing one is named.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use common::granary;
use granary::adapters::aws::AwsClients;

#[tokio::test]
async fn each_command_asks_only_for_what_it_uses() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let tag = std::process::id();
    let bucket = common::bucket(&clients, format!("gt-first-hour-{tag}")).await;
    let queue = |name: String| {
        let sqs = clients.sqs.clone();
        async move {
            sqs.create_queue()
                .queue_name(name)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap()
        }
    };
    let retry = queue(format!("gt-first-hour-retry-{tag}")).await;
    let dlq = queue(format!("gt-first-hour-dlq-{tag}")).await;

    // Reports read S3 only: the bucket is all they need.
    let (code, out, err) = granary(
        &[("GRANARY_BUCKET", &bucket)],
        &["report", "--scan", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(report.is_object(), "{out}");

    // Hold and release read and write one object in the bucket.
    let bucket_only = [("GRANARY_BUCKET", bucket.as_str())];
    assert_eq!(
        granary(&bucket_only, &["hold", "--reason", "first hour"]).0,
        0
    );
    assert_eq!(granary(&bucket_only, &["release"]).0, 0);

    // Redrive moves messages between two queues: no bucket, no Batch.
    let queues = [
        ("GRANARY_RETRY_QUEUE_URL", retry.as_str()),
        ("GRANARY_FAILURE_DLQ_URL", dlq.as_str()),
    ];
    let (code, out, err) = granary(&queues, &["redrive", "--all", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"examined\""), "{out}");

    // Status does ask Batch and the queues: a missing variable is named.
    let (code, _, err) = granary(&bucket_only, &["status"]);
    assert_eq!(code, 2);
    assert!(err.contains("GRANARY_JOB_QUEUE is not set"), "{err}");
    let (code, _, err) = granary(&[], &["report", "--scan"]);
    assert_eq!(code, 2);
    assert!(err.contains("GRANARY_BUCKET is not set"), "{err}");
}
