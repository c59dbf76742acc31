//! `granary plan` as an operator runs it against the emulator (#32 item 4): the inventories'
//! rows from their footers, what the tracker says is settled, and the forecast the settings give.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use common::{granary, json};
use granary::adapters::aws::AwsClients;
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};

fn rows(n: usize, tag: &str) -> Vec<InventoryRow> {
    (0..n)
        .map(|i| InventoryRow {
            granule_id: format!(
                "HLS.S30.T{:02}{tag}.2022{:03}T153012.v2.0",
                i % 60,
                1 + i % 365
            ),
            start_datetime: "2022-01-01T00:00:00Z".to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn plan_reads_the_footers_and_forecasts_from_the_settings_and_the_tracker() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let bucket = common::bucket(&clients, format!("gt-plan-{}", std::process::id())).await;
    for (key, n, tag) in [
        ("inventories/a.parquet", 3000, "AAA"),
        ("inventories/b.parquet", 1000, "BBB"),
    ] {
        let body = write_inventory(&rows(n, tag), &InventoryLayout::granary()).unwrap();
        clients
            .s3
            .put_object()
            .bucket(&bucket)
            .key(key)
            .body(body.to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let vars = [("GRANARY_BUCKET", bucket.as_str())];
    // Before launch: everything is left. 1,000 every 60 minutes bounds it (capacity: 1,000 jobs
    // of 30 minutes, 5% retries, 1,905 an hour): four hours.
    let p = json(
        &vars,
        &[
            "plan",
            "--max-active-jobs",
            "1000",
            "--job-hour-price",
            "0.02",
        ],
    );
    assert_eq!(p["rows"], 4000, "{p}");
    assert_eq!(p["left"], 4000);
    assert_eq!(p["inventories"].as_array().unwrap().len(), 2);
    // Each footer's count under its own key, in the listing's order (footers are read at once).
    let per_key: Vec<(&str, u64)> = p["inventories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["key"].as_str().unwrap(), i["rows"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        per_key,
        [
            ("inventories/a.parquet", 3000),
            ("inventories/b.parquet", 1000)
        ]
    );
    let f = &p["forecast"];
    assert_eq!(f["bound_by"], "feeder");
    assert_eq!(f["hours"], 4.0);
    // 4,200 attempts of half an hour at $0.02.
    let compute = f["compute_dollars"].as_f64().unwrap();
    assert!((compute - 42.0).abs() < 1e-9, "{compute}");
    assert!(f["measured"].is_null());

    // The feeder moved 1,200 rows of a and 1,000 of b, over the last two hours.
    let now = chrono::Utc::now();
    let tracker = serde_json::json!({
        "inventories": [
            {"key": "inventories/a.parquet", "total_rows": 3000, "rows_submitted": 1200},
            {"key": "inventories/b.parquet", "total_rows": 1000, "rows_submitted": 1000},
        ],
        "samples": [
            {"at": now - chrono::Duration::hours(2), "rows": 0},
            {"at": now, "rows": 2200},
        ],
    });
    clients
        .s3
        .put_object()
        .bucket(&bucket)
        .key("tracker/tracker.json")
        .body(serde_json::to_vec(&tracker).unwrap().into())
        .send()
        .await
        .unwrap();
    let p = json(&vars, &["plan", "--inventory", "inventories/a.parquet"]);
    assert_eq!(
        (p["rows"].as_u64(), p["left"].as_u64()),
        (Some(3000), Some(1800))
    );
    let measured = &p["forecast"]["measured"];
    let per_hour = measured["per_hour"].as_f64().unwrap();
    assert!((per_hour - 1100.0).abs() < 1.0, "{measured}");

    // The table an operator reads.
    let (code, out, err) = granary(&vars, &["plan", "--job-minutes", "20"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1800 of 4000 rows left"), "{out}");
    assert!(out.contains("compute not forecast"), "{out}");
    assert!(out.contains("measured:"), "{out}");

    // A run asked for more than its time allows: 20 calls a second for half of 300 s, plus the
    // window in hand, sized from that rate (20 a second for a quarter of 300 s: 1,500 rows),
    // 4,500 an hour.
    let p = json(&vars, &["plan", "--submit-count", "100000"]);
    assert_eq!(p["forecast"]["feeder_per_hour"], 4500.0, "{p}");
    // Past Batch's quota, or not a number: said, nothing forecast.
    let (code, _, err) = granary(&vars, &["plan", "--submit-rate", "60"]);
    assert_ne!(code, 0);
    assert!(err.contains("quota of 50"), "{err}");
    let (code, _, err) = granary(&vars, &["plan", "--job-minutes", "NaN"]);
    assert_ne!(code, 0);
    assert!(err.contains("--job-minutes must be a number"), "{err}");

    // A key that is no inventory is named.
    let (code, _, err) = granary(&vars, &["plan", "--inventory", "inventories/none.parquet"]);
    assert_ne!(code, 0);
    assert!(err.contains("inventories/none.parquet"), "{err}");

    // A bucket with no inventories says so.
    let empty = common::bucket(&clients, format!("gt-plan-empty-{}", std::process::id())).await;
    let (code, _, err) = granary(&[("GRANARY_BUCKET", empty.as_str())], &["plan"]);
    assert_ne!(code, 0);
    assert!(err.contains("no inventories under inventories/"), "{err}");
}
