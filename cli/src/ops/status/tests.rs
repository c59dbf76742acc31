use super::*;
use granary::domain::progress::Sample;
use granary::domain::tracker::{InventoryProgress, Tracker};

#[test]
fn eta_uses_the_longest_window_with_movement() {
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    // 2,000 rows/h for 6 h, then stalled for the last hour
    let mut samples: Vec<Sample> = (0..=6)
        .map(|h| Sample {
            at: t0 + Duration::hours(h),
            rows: 2_000 * h as u64,
        })
        .collect();
    samples.push(Sample {
        at: t0 + Duration::hours(7),
        rows: 12_000,
    });
    let tracker = Tracker {
        inventories: vec![
            InventoryProgress {
                key: "a".into(),
                total_rows: Some(10_000),
                rows_submitted: 10_000,
                page_map: None,
                etag: None,
            },
            InventoryProgress {
                key: "b".into(),
                total_rows: Some(20_000),
                rows_submitted: 2_000,
                page_map: None,
                etag: None,
            },
            InventoryProgress {
                key: "c".into(),
                total_rows: None,
                rows_submitted: 0,
                page_map: None,
                etag: None,
            },
        ],
        updated_at: None,
        samples,
        retry_windows: 0,
    };
    let now = t0 + Duration::hours(7);
    let s = assemble(
        &tracker,
        now,
        Some(ActiveJobs::default()),
        QueueDepth::default(),
        QueueDepth::default(),
        None,
    );
    assert_eq!(s.rates.len(), 3);
    assert_eq!(s.rates[0].per_hour, 0.0, "the last hour stalled");
    // 24 h window: 12,000 rows over 7 h
    let per_hour = 12_000.0 / 7.0;
    let e = s.eta.unwrap();
    assert_eq!(e.remaining_rows, 18_000);
    assert!((e.per_hour - per_hour).abs() < 1e-9);
    assert!((e.hours - 18_000.0 / per_hour).abs() < 1e-9);
    assert_eq!(
        (s.rows_submitted, s.rows_known, s.inventories_unopened),
        (12_000, 30_000, 1)
    );
}

#[test]
fn open_ends_count_windows_and_attempts_and_the_oldest_marker() {
    let meta = |key: &str, secs: Option<i64>| granary::ports::ObjectMeta {
        key: key.to_owned(),
        size: 0,
        last_modified: secs.and_then(|s| DateTime::from_timestamp(1_700_000_000 + s, 0)),
        etag: None,
    };
    let p = "open-claims/";
    let listed = [
        meta(
            "open-claims/windows/inventories/a.parquet/start=000000000000.json",
            Some(50),
        ),
        meta(
            "open-claims/windows/inventories/a.parquet/start=000000010000.json",
            Some(20),
        ),
        meta(
            "open-claims/granule_id=HLS.S30.T18TYN.2022002T153012.v2.0/attempt=2.json",
            None,
        ),
        meta(
            "open-claims/granule_id=HLS.S30.T18TYN.2022003T153012.v2.0/attempt=3.json",
            Some(90),
        ),
        // Not a marker: not counted, and its time not taken.
        meta("open-claims/stray.json", Some(1)),
    ];
    let ends = open_ends(p, &listed);
    assert_eq!((ends.windows, ends.attempts), (2, 2));
    assert_eq!(
        ends.least_recently_written,
        DateTime::from_timestamp(1_700_000_020, 0)
    );
    assert_eq!(open_ends(p, &[]), OpenEnds::default());
}

#[tokio::test]
async fn other_campaigns_with_open_ends_are_named_and_counted() {
    use granary::ports::PutCondition;
    let vars = [
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "r"),
        ("GRANARY_FAILURE_DLQ_URL", "f"),
        ("GRANARY_CAMPAIGN", "v3"),
    ];
    let config = granary::config::Config::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    let ctx = Ctx::in_memory(config);
    let window = "windows/inventories/a.parquet/start=000000000000.json";
    let attempt = "granule_id=HLS.S30.T18TYN.2022002T153012.v2.0/attempt=2.json";
    for key in [
        format!("open-claims/{window}"),
        format!("open-claims/{attempt}"),
        format!("campaigns/v2/open-claims/{window}"),
        // This campaign's own are status's `open_ends`, not another's.
        format!("campaigns/v3/open-claims/{window}"),
    ] {
        ctx.store
            .put(&key, b"{}".to_vec().into(), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    // A campaign with nothing open is not listed.
    ctx.store
        .put(
            "campaigns/v1/tracker.json",
            b"{}".to_vec().into(),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let others = other_campaigns_open_ends(&ctx).await.unwrap();
    let counted: Vec<(Option<&str>, u64, u64)> = others
        .iter()
        .map(|o| {
            let name = o.campaign.as_deref();
            (name, o.open_ends.windows, o.open_ends.attempts)
        })
        .collect();
    assert_eq!(counted, [(None, 1, 1), (Some("v2"), 1, 0)]);
    assert_eq!(open_ends_in(&ctx).await.unwrap().windows, 1);
}
