//! `granary items` against the emulator: the seed's finders, as an operator runs them.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use granary::adapters::aws::{AwsClients, S3Store};
use granary::domain::granule::GranuleId;
use granary::domain::item::{Change, NewItem};
use granary::domain::lifecycle::ItemState::*;
use granary::repositories::items::{ItemPrefixes, Items};
use std::process::Command;
use std::sync::Arc;

fn granary(bucket: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_granary"))
        .arg("items")
        .args(args)
        .env("GRANARY_BUCKET", bucket)
        .output()
        .unwrap_or_else(|e| panic!("running granary: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ids(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn finders_answer_by_id_name_state_completion_time_log_and_day() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let bucket = common::bucket(&clients, format!("gt-items-{}", std::process::id())).await;
    let items = Items::new(
        Arc::new(S3Store::new(clients.s3.clone(), &bucket)),
        ItemPrefixes::default(),
    );
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    for (id, state) in [("alpha", Ready), ("beta", Ready), ("gamma", Discovered)] {
        items
            .create(
                NewItem {
                    id: GranuleId::parse(id).unwrap(),
                    name: format!("{id}.h5"),
                    state,
                    reason: "test".into(),
                    raw_file_hash: None,
                    size: None,
                    checksum: None,
                    source: None,
                    source_modified: None,
                },
                "test",
            )
            .await
            .unwrap();
    }
    let beta = GranuleId::parse("beta").unwrap();
    for (to, why) in [
        (Processing, "job j-1"),
        (ProcessingFailed, "Host EC2 (instance i-9) terminated."),
    ] {
        items
            .advance(&beta, "test", |_| Some(Change::to(to, why)))
            .await
            .unwrap();
    }
    let find = |args: &[&str]| {
        let mut all = vec!["find", "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = granary(&bucket, &all);
        assert_eq!(code, 0, "{err}");
        ids(&out)
    };
    assert_eq!(find(&[]), ["alpha", "beta", "gamma"]);
    assert_eq!(find(&["--state", "READY"]), ["alpha"]);
    assert_eq!(find(&["--state", "processing_failed"]), ["beta"]);
    assert_eq!(find(&["--name", "gamma.h5"]), ["gamma"]);
    assert_eq!(find(&["--complete", "false"]).len(), 3);
    assert!(find(&["--complete", "true"]).is_empty());
    assert!(find(&["--terminal", "true"]).is_empty());
    assert_eq!(find(&["--log", r"Host EC2 \(instance"]), ["beta"]);
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(find(&["--created-on", &today]).len(), 3);
    assert!(find(&["--created-on", "2001-01-01"]).is_empty());
    assert_eq!(find(&["--updated-after", &before.to_rfc3339()]).len(), 3);

    let (code, out, _) = granary(&bucket, &["get", "beta", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(ids(&out), ["beta"]);
    let (code, out, _) = granary(&bucket, &["history", "beta"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("PROCESSING_FAILED") && out.contains("(created)"),
        "{out}"
    );
    // The status of each step, by the seed's finders.
    let steps = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["steps", "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = granary(&bucket, &all);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let beta_steps = steps(&["--item", "beta"]);
    assert_eq!(beta_steps.len(), 1, "{beta_steps:?}");
    assert_eq!(beta_steps[0]["id"], "beta.1");
    assert_eq!(beta_steps[0]["name"], "processing attempt 1");
    assert_eq!(beta_steps[0]["type"], "processing");
    assert_eq!(beta_steps[0]["step_complete"], true);
    assert_eq!(beta_steps[0]["ended_in"], "PROCESSING_FAILED");
    assert_eq!(beta_steps[0]["item_record"], "items/beta.json");
    assert_eq!(steps(&["--id", "beta.1"]), beta_steps);
    assert_eq!(
        steps(&["--type", "processing", "--complete", "true"]),
        beta_steps
    );
    assert_eq!(steps(&["--name", "processing attempt 1"]), beta_steps);
    assert!(steps(&["--complete", "false"]).is_empty());
    assert!(steps(&["--type", "download"]).is_empty());
    let (code, _, err) = granary(&bucket, &["steps", "--type", "upload"]);
    assert_eq!(code, 2);
    assert!(err.contains("download, admission or processing"), "{err}");
    let (code, _, err) = granary(&bucket, &["get", "nobody"]);
    assert_eq!(code, 1);
    assert!(err.contains("no item nobody"), "{err}");
    let (code, _, err) = granary(&bucket, &["find", "--state", "DONE"]);
    assert_eq!(code, 2);
    assert!(err.contains("states are DISCOVERED"), "{err}");
}

/// `granary revalidate --state PROCESSED` as an operator runs it: a dry run lists the items and
/// sends nothing; the run puts one `revalidate` import message per item on the import queue
/// (what the importer-step Lambda then runs); an item with nothing stored is left alone.
#[tokio::test]
async fn revalidate_asks_the_importer_once_per_stored_item() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let bucket = common::bucket(&clients, format!("gt-reval-{}", std::process::id())).await;
    let queue = clients
        .sqs
        .create_queue()
        .queue_name(format!("gt-reval-{}", std::process::id()))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let items = Items::new(
        Arc::new(S3Store::new(clients.s3.clone(), &bucket)),
        ItemPrefixes::default(),
    );
    for (id, state) in [
        ("done-1", Processed),
        ("done-2", Processed),
        ("fresh", Ready),
    ] {
        items
            .create(
                NewItem {
                    id: GranuleId::parse(id).unwrap(),
                    name: format!("{id}.h5"),
                    state,
                    reason: "test".into(),
                    raw_file_hash: None,
                    size: None,
                    checksum: None,
                    source: None,
                    source_modified: None,
                },
                "test",
            )
            .await
            .unwrap();
    }
    let vars = [
        ("GRANARY_BUCKET", bucket.as_str()),
        ("GRANARY_IMPORT_QUEUE_URL", queue.as_str()),
    ];
    let waiting = |clients: &AwsClients| {
        let (sqs, queue) = (clients.sqs.clone(), queue.clone());
        async move {
            let got = sqs
                .receive_message()
                .queue_url(&queue)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .unwrap();
            got.messages.unwrap_or_default()
        }
    };
    let (code, out, err) =
        common::granary(&vars, &["revalidate", "--state", "PROCESSED", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("would ask the importer").count(), 2, "{out}");
    assert!(
        waiting(&clients).await.is_empty(),
        "a dry run sends nothing"
    );
    let (code, out, err) = common::granary(&vars, &["revalidate", "done-1", "fresh", "--json"]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["requested"][0][0], "done-1");
    assert_eq!(
        summary["nothing_to_check"][0],
        serde_json::json!(["fresh", "READY"])
    );
    let sent = waiting(&clients).await;
    assert_eq!(sent.len(), 1);
    let body: serde_json::Value = serde_json::from_str(sent[0].body().unwrap()).unwrap();
    assert_eq!(
        (body["item_id"].as_str(), body["step"].as_str()),
        (Some("done-1"), Some("revalidate"))
    );
    let (code, _, err) = common::granary(&vars, &["revalidate", "--state", "READY"]);
    assert_eq!(code, 2, "a state with nothing stored is refused");
    assert!(err.contains("DOWNLOADED, PROCESSED"), "{err}");
}
