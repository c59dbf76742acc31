//! `granary inventory convert` as an operator runs it, against the emulator (AWS_ENDPOINT_URL):
//! a local list of ids out to S3, read back the way the feeder reads it.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use granary::adapters::aws::{AwsClients, S3Store};
use granary::adapters::parquet::{Inventory, DEFAULT_ID_COLUMN};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread")]
async fn a_list_of_ids_becomes_a_sorted_inventory_in_s3() {
    let clients = AwsClients::from_env().await;
    let bucket = common::bucket(&clients, format!("granary-convert-{}", std::process::id())).await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("ids.txt");
    let mut text = String::new();
    for day in 1..=300u32 {
        text.push_str(&format!("HLS.S30.T18TYN.2022{day:03}T153012.v2.0\n"));
    }
    text.push_str("HLS.S30.T18TYN.2022150T153012.v2.0\nnot/an id\n");
    std::fs::write(&input, text).unwrap();
    let url = format!("s3://{bucket}/inventories/converted.parquet");
    let input = input.to_string_lossy().into_owned();
    let summary = common::json(&[], &["inventory", "convert", &input, "--out", &url]);
    assert_eq!(summary["written"], 300, "{summary}");
    assert_eq!(summary["duplicates"], 1, "{summary}");
    assert_eq!(summary["invalid"], 1, "{summary}");
    assert!(summary["invalid_sample"][0]["at"]
        .as_str()
        .unwrap()
        .ends_with("ids.txt:302"));
    // Read back as the feeder reads it: newest first.
    let store = Arc::new(S3Store::new(clients.s3.clone(), &bucket));
    let inv = Inventory::open(store, "inventories/converted.parquet", DEFAULT_ID_COLUMN)
        .await
        .unwrap();
    assert_eq!(inv.num_rows(), 300);
    let ids = inv.read_ids(0, 300).await.unwrap();
    assert_eq!(ids[0].text(), Some("HLS.S30.T18TYN.2022300T153012.v2.0"));
    assert_eq!(ids[299].text(), Some("HLS.S30.T18TYN.2022001T153012.v2.0"));
    // A bad destination is an error naming it.
    let (code, _, err) = common::granary(
        &[],
        &[
            "inventory",
            "convert",
            &input,
            "--out",
            "s3://only-a-bucket",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("s3://bucket/key"), "{err}");
}
