//! queue-feeder against the emulator.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::handlers::feeder::{self, FeederEvent, FeederSummary};
use granary::handlers::Ctx;
use granary_tests::*;
use std::sync::Arc;

#[tokio::test]
async fn submits_exactly_the_window_and_advances_the_tracker() {
    let s = stack("window", 2, &[]).await;
    let first = ids(250, "AA");
    let second = ids(30, "BB");
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/2024-01.parquet",
        &first,
        &small_layout(),
    )
    .await;
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/2024-02.parquet",
        &second,
        &small_layout(),
    )
    .await;

    let out = feed(&s.ctx, 120).await;
    assert_eq!(out.submitted, 120);
    assert_eq!(out.early_exit, None);
    let jobs = all_jobs(&s).await;
    assert_eq!(jobs.len(), 120);
    let want: Vec<String> = first[..120]
        .iter()
        .map(|g| {
            granary::domain::job_name::job_name(
                None,
                &granary::domain::granule::GranuleId::parse(g).unwrap(),
                1,
            )
        })
        .collect();
    let mut got: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    got.sort();
    assert_eq!(
        got, want_sorted,
        "exactly rows 0..120 of the first inventory"
    );
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(t.value.inventories[0].rows_submitted, 120);
    assert_eq!(t.value.inventories[0].total_rows, Some(250));

    // The next window crosses into the second inventory, in order.
    let out = feed(&s.ctx, 150).await;
    assert_eq!(out.submitted, 150);
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(t.value.inventories[0].rows_submitted, 250);
    assert_eq!(t.value.inventories[1].rows_submitted, 20);
    assert_eq!(all_jobs(&s).await.len(), 270);

    let out = feed(&s.ctx, 100).await;
    assert_eq!(out.submitted, 10);
    assert!(out.inventories_complete);
    let out = feed(&s.ctx, 100).await;
    assert_eq!(out.submitted, 0);
    assert_eq!(
        out.early_exit.as_deref(),
        Some("every inventory is fully submitted")
    );
    assert_eq!(all_jobs(&s).await.len(), 280);
}

#[tokio::test]
async fn exits_early_at_the_active_job_threshold() {
    // moto finishes every job inside SubmitJob, so nothing is ever active there: a threshold of 0
    // is "at the threshold" with zero jobs. (The in-memory runner's unit test covers real counts.)
    let (s, _) =
        stack_with_inventory("threshold", &[("GRANARY_MAX_ACTIVE_JOBS", "0")], 10, "CC").await;
    let out = feed(&s.ctx, 5).await;
    assert_eq!(out.submitted, 0);
    assert!(
        out.early_exit
            .as_deref()
            .unwrap_or("")
            .contains("threshold of 0"),
        "{out:?}"
    );
    assert!(all_jobs(&s).await.is_empty());
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(
        t.etag, None,
        "an early exit does not even touch the tracker"
    );
}

#[tokio::test]
async fn a_feeder_with_a_stale_etag_submits_nothing() {
    let (s, _) = stack_with_inventory("stale", &[], 100, "DD").await;
    // Create the tracker, then take a snapshot that will go stale.
    feed(&s.ctx, 10).await;
    let stale = s.ctx.tracker().load().await.unwrap();
    // Another feeder run moves on.
    let other = feed(&s.ctx, 40).await;
    assert_eq!(other.submitted, 40);
    let before = all_jobs(&s).await.len();

    let out = feeder::feed(&s.ctx, 40, stale, FeederSummary::default())
        .await
        .unwrap();
    assert_eq!(out.submitted, 0, "{out:?}");
    assert_eq!(out.already_submitted, 40);
    assert!(
        out.stopped
            .as_deref()
            .unwrap_or("")
            .contains("another feeder"),
        "{out:?}"
    );
    assert_eq!(all_jobs(&s).await.len(), before);
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(
        t.value.inventories[0].rows_submitted, 50,
        "the stale run did not move the tracker"
    );
}

#[tokio::test]
async fn a_feeder_killed_before_advancing_does_not_resubmit() {
    let (s, _) =
        stack_with_inventory("killed", &[("GRANARY_CLAIM_LEASE_SECS", "0")], 60, "EE").await;
    feed(&s.ctx, 10).await;

    // Run 1 dies writing the tracker (every try of it within the run fails): every job of its
    // window was submitted and recorded.
    let dying = Ctx {
        store: Arc::new(FailingStore::new(
            s.ctx.store.clone(),
            &s.ctx.config.layout.tracker_key,
            true,
            u64::from(granary::retry::Backoff::IN_RUN.tries),
        )),
        ..s.ctx.clone()
    };
    assert!(feeder::run(
        &dying,
        FeederEvent {
            granule_submit_count: 20
        }
    )
    .await
    .is_err());
    assert_eq!(all_jobs(&s).await.len(), 30);

    // Run 2 dies recording job ids in the claims (after SubmitJob; the claim's write that
    // carries its submission time): claims are left half-done.
    let dying = Ctx {
        store: Arc::new(
            FailingStore::new(s.ctx.store.clone(), "claims/", true, 5)
                .with_body("\"submitted_at\":\""),
        ),
        ..s.ctx.clone()
    };
    let run_two = feeder::run(
        &dying,
        FeederEvent {
            granule_submit_count: 25,
        },
    )
    .await;
    // A row whose claim write failed is tried again within the run, so some half-done claims
    // are already recovered (found by job name) in run 2 itself.
    let recovered_in_two = run_two.as_ref().map_or(0, |r| r.recovered);
    let after_two = all_jobs(&s).await.len();

    // The next healthy run resubmits nothing it already submitted.
    let out = feed(&s.ctx, 50).await;
    assert_eq!(
        out.submitted,
        (60 - after_two) as u64,
        "only rows never submitted are submitted: {out:?}"
    );
    // Half-done claims were found by job name (how many in which run depends on where the five
    // failed writes fell among the in-run retries); the proof is one job per granule, below.
    assert!(
        out.recovered + recovered_in_two >= 1,
        "half-done claims were found by job name: {out:?} after {run_two:?}"
    );
    let jobs = all_jobs(&s).await;
    assert_eq!(jobs.len(), 60, "one job per granule, never two");
    let mut names: Vec<&String> = jobs.iter().map(|(n, _)| n).collect();
    names.dedup();
    assert_eq!(names.len(), 60);
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(t.value.inventories[0].rows_submitted, 60);
}

#[tokio::test]
async fn invalid_rows_go_to_the_dlq_not_to_batch() {
    let s = stack("invalid", 2, &[]).await;
    let mut rows = ids(5, "FF");
    rows[2] = "bad/id".into();
    // Larger than an SQS message may be: quoting it whole would wedge the feeder at this row.
    rows[3] = "x".repeat(300_000);
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/a.parquet",
        &rows,
        &small_layout(),
    )
    .await;
    let out = feed(&s.ctx, 10).await;
    assert_eq!((out.submitted, out.rejected), (3, 2));
    let mut dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    dlq.sort_by_key(|m| m.attributes["reason"].contains("300000 bytes"));
    assert_eq!(dlq.len(), 2);
    assert!(dlq[0].body.contains("bad/id"));
    assert!(
        dlq[0].attributes["reason"].contains("'/'"),
        "{:?}",
        dlq[0].attributes
    );
    assert!(dlq[1].body.len() < 2_000, "{}", dlq[1].body.len());
    assert!(dlq[1].attributes["reason"].contains("300000 bytes long"));
    // Each is also kept in S3, with its reason and where it came from, for longer than SQS keeps it.
    for m in &dlq {
        let key = &m.attributes["record_key"];
        let record: granary::repositories::rejects::RejectRecord =
            granary::repositories::read_json(s.ctx.store.as_ref(), key)
                .await
                .unwrap()
                .unwrap()
                .value;
        assert_eq!(record.reason, m.attributes["reason"]);
        assert!(record.source.starts_with("inventories/a.parquet#row="));
    }
    let t = s.ctx.tracker().load().await.unwrap();
    assert_eq!(
        t.value.inventories[0].rows_submitted, 5,
        "the feed went past both"
    );
}

#[tokio::test]
async fn a_truncated_inventory_is_a_clear_error() {
    let s = stack("trunc", 2, &[]).await;
    let bytes = granary::adapters::parquet::write_inventory(
        &[granary::adapters::parquet::InventoryRow {
            granule_id: "a".into(),
            start_datetime: "x".into(),
        }],
        &small_layout(),
    )
    .unwrap();
    s.ctx
        .store
        .put(
            "inventories/a.parquet",
            bytes.slice(..bytes.len() - 10),
            granary::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let err = feeder::run(
        &s.ctx,
        FeederEvent {
            granule_submit_count: 10,
        },
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("not a readable Parquet file"),
        "{err}"
    );
}

/// Paced by what comes after (#32 item 7), through the real SQS API: while the downstream queue
/// holds more than its limit the feeder submits nothing and `granary status` says why; once the
/// downstream consumer takes enough, the feeder goes on.
#[tokio::test]
async fn waits_while_the_downstream_queue_is_over_its_limit() {
    let (clients, _) = clients().await;
    let name = unique_name("downstream");
    let url = clients
        .sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating the downstream queue: {e}"))
        .queue_url
        .unwrap_or_else(|| panic!("the emulator answered no queue URL"));
    let (s, _) = stack_with_inventory(
        "downstream",
        &[
            ("GRANARY_DOWNSTREAM_QUEUE_URL", url.as_str()),
            ("GRANARY_DOWNSTREAM_MAX_MESSAGES", "2"),
        ],
        10,
        "DS",
    )
    .await;
    for i in 0..3 {
        clients
            .sqs
            .send_message()
            .queue_url(&url)
            .message_body(format!("product {i}"))
            .send()
            .await
            .unwrap();
    }
    let waiting = feed(&s.ctx, 5).await;
    assert_eq!(waiting.submitted, 0, "{waiting:?}");
    assert!(
        all_jobs(&s).await.is_empty(),
        "no job while downstream is full"
    );
    let why = waiting.early_exit.unwrap_or_default();
    assert!(why.contains(&name) && why.contains("3 messages"), "{why}");
    let status = granary_cli::ops::status::gather(&s.ctx, chrono::Utc::now(), true)
        .await
        .unwrap();
    let downstream = status
        .downstream
        .expect("status shows the downstream queue");
    assert_eq!((downstream.waiting, downstream.max_messages), (3, 2));
    assert_eq!(downstream.feeder_waits.as_deref(), Some(why.as_str()));
    // The downstream consumer takes one: two wait, at the limit, and the feeder feeds.
    let taken = clients
        .sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(1)
        .send()
        .await
        .unwrap();
    let receipt = taken
        .messages()
        .first()
        .and_then(|m| m.receipt_handle())
        .unwrap_or_else(|| panic!("no message received from the downstream queue"));
    clients
        .sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    let fed = feed(&s.ctx, 5).await;
    assert_eq!((fed.submitted, fed.early_exit), (5, None));
}
