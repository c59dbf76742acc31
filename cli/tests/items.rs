//! `granary items` against the emulator: the seed's finders, as an operator runs them.

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
    let (code, _, err) = granary(&bucket, &["get", "nobody"]);
    assert_eq!(code, 1);
    assert!(err.contains("no item nobody"), "{err}");
    let (code, _, err) = granary(&bucket, &["find", "--state", "DONE"]);
    assert_eq!(code, 2);
    assert!(err.contains("states are DISCOVERED"), "{err}");
}
