use super::window::*;
use super::*;
use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
use crate::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use crate::config::Config;
use crate::domain::batch_event::JobStatus;
use crate::domain::granule::{GranuleId, IdCell};
use crate::ports::{ObjectStore, PutCondition};
use std::sync::Arc;

async fn ctx(max_active: &str, jobs: Arc<MemoryJobRunner>) -> Ctx {
    let config = Config::for_unit_tests(&[("GRANARY_MAX_ACTIVE_JOBS", max_active)]);
    let store = Arc::new(MemoryStore::new());
    let rows: Vec<InventoryRow> = (0..50)
        .map(|i| InventoryRow {
            granule_id: format!("g{i:03}"),
            start_datetime: String::new(),
        })
        .collect();
    let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
    store
        .put("inventories/a.parquet", bytes, PutCondition::Overwrite)
        .await
        .unwrap();
    Ctx {
        store,
        jobs,
        retry_queue: Arc::new(MemoryQueue::new("retry")),
        failure_dlq: Arc::new(MemoryQueue::new("dlq")),
        ..Ctx::in_memory(config)
    }
}

/// One feeder run taking `count` rows, as the schedule would start it.
async fn feed_rows(ctx: &Ctx, count: u64) -> FeederSummary {
    run(
        ctx,
        FeederEvent {
            granule_submit_count: count,
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn stops_feeding_at_the_active_job_threshold_and_resumes_below_it() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx("25", jobs.clone()).await;
    let first = feed_rows(&ctx, 20).await;
    assert_eq!((first.submitted, first.early_exit), (20, None));
    // 20 active < 25: feeds again, now 40 active
    assert_eq!(
        run(
            &ctx,
            FeederEvent {
                granule_submit_count: 20
            }
        )
        .await
        .unwrap()
        .submitted,
        20
    );
    let held = feed_rows(&ctx, 20).await;
    assert_eq!(held.submitted, 0);
    assert_eq!(held.active_jobs, 25, "counting stops at the threshold");
    assert!(held.early_exit.unwrap().contains("threshold of 25"));
    // jobs finish: feeding resumes where it stopped
    for (i, _) in jobs.submitted().iter().enumerate() {
        jobs.set_status(&format!("job-{}", i + 1), JobStatus::Succeeded);
    }
    let resumed = feed_rows(&ctx, 20).await;
    assert_eq!(resumed.submitted, 10);
    assert!(resumed.inventories_complete);
    let names: std::collections::BTreeSet<String> =
        jobs.submitted().into_iter().map(|r| r.job_name).collect();
    assert_eq!(names.len(), 50);
}

/// A count larger than Batch lets through in a quarter of the feeder's timeout is fed as
/// several windows; once half the run's time is spent no new window starts.
#[tokio::test]
async fn a_large_count_is_fed_as_windows_the_run_has_time_for() {
    let feed_with = |timeout_secs: u64| async move {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
        let mut ctx = ctx("100000", jobs.clone()).await;
        ctx.config.leases.function_timeout = Some(std::time::Duration::from_secs(timeout_secs));
        let rows: Vec<InventoryRow> = (0..120)
            .map(|i| InventoryRow {
                granule_id: format!("g{i:03}"),
                start_datetime: String::new(),
            })
            .collect();
        ctx.store
            .put(
                "inventories/a.parquet",
                write_inventory(&rows, &InventoryLayout::granary()).unwrap(),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let out = feed_rows(&ctx, 120).await;
        let windows: Vec<String> = ctx
            .store
            .list(&ctx.config.layout.claim_prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .filter(|k| k.contains("start="))
            .collect();
        (out, windows)
    };
    assert_eq!(window_ceiling(Some(std::time::Duration::from_secs(4))), 50);
    let (out, windows) = feed_with(4).await;
    assert_eq!(out.submitted, 120);
    assert_eq!(windows.len(), 3, "{windows:?}");
    assert!(
        windows
            .iter()
            .any(|k| k.ends_with("start=000000000100.json")),
        "{windows:?}"
    );
    assert!(out.stopped.is_none());
    // No time at all: the first window is fed, then the run stops and says why.
    let (out, windows) = feed_with(0).await;
    assert_eq!((out.submitted, windows.len()), (50, 1));
    assert!(out.stopped.unwrap().contains("70 rows are left"));
}

/// A granule listed in two windows and in two inventories is submitted once: the later
/// listings find its item record and submit nothing for it.
#[tokio::test]
async fn a_granule_listed_again_is_not_submitted_again() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx("100000", jobs.clone()).await;
    let inventory = |ids: &[&str]| {
        let rows: Vec<InventoryRow> = ids
            .iter()
            .map(|g| InventoryRow {
                granule_id: (*g).to_owned(),
                start_datetime: String::new(),
            })
            .collect();
        write_inventory(&rows, &InventoryLayout::granary()).unwrap()
    };
    for (key, ids) in [
        ("inventories/a.parquet", &["g1", "g2", "g3", "g1"][..]),
        ("inventories/b.parquet", &["g2", "g4"][..]),
    ] {
        ctx.store
            .put(key, inventory(ids), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    let mut known = 0;
    for _ in 0..4 {
        // Windows of two rows: g1 comes back in a's second window, g2 in b's first.
        let out = feed_rows(&ctx, 2).await;
        known += out.known_before;
    }
    let mut names: Vec<String> = jobs.submitted().into_iter().map(|r| r.job_name).collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    names.dedup();
    assert_eq!(names.len(), 4, "one job a granule");
    assert_eq!(known, 2, "g1 and g2 seen again");
}

/// A row whose id is not UTF-8 is rejected with its reason; the rest of its window is fed.
#[tokio::test]
async fn a_row_whose_id_is_not_utf8_is_rejected_alone() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx("100", jobs.clone()).await;
    let ids: [&[u8]; 5] = [b"g0", b"g1", b"g\xff2", b"g3", b"g4"];
    ctx.store
        .put(
            "inventories/a.parquet",
            crate::adapters::parquet::tests::inventory_of_bytes(&ids, 5),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let out = feed_rows(&ctx, 10).await;
    assert_eq!((out.submitted, out.rejected), (4, 1));
    assert!(out.inventories_complete);
    let dlq = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert!(dlq[0].attributes["reason"].ends_with("granule id is not valid UTF-8"));
    assert!(dlq[0].body.contains("row=2"), "{}", dlq[0].body);
}

/// GETs of one object, counted at the store port.
struct GetsOf(&'static str, std::sync::atomic::AtomicU64);

impl crate::adapters::tap::Tap for GetsOf {
    fn leave(&self, call: &crate::adapters::tap::Call<'_>, _: &crate::adapters::tap::Answer) {
        if call.op == crate::adapters::tap::Op::StoreGet && call.target == self.0 {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn after_the_first_open_a_window_is_one_get_of_the_inventory() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let mut ctx = ctx("100000", jobs.clone()).await;
    let rows: Vec<InventoryRow> = (0..300_000)
        .map(|i| InventoryRow {
            granule_id: format!("g{i:06}"),
            start_datetime: String::new(),
        })
        .collect();
    let layout = InventoryLayout {
        row_group_rows: 50_000,
        ..InventoryLayout::granary()
    };
    let key = "inventories/a.parquet";
    ctx.store
        .put(
            key,
            write_inventory(&rows, &layout).unwrap(),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let gets = Arc::new(GetsOf(key, Default::default()));
    ctx.store = Arc::new(crate::adapters::tap::TappedStore {
        inner: ctx.store.clone(),
        tap: gets.clone(),
    });
    let count = |gets: &GetsOf| gets.1.swap(0, std::sync::atomic::Ordering::Relaxed);
    let tick = || {
        run(
            &ctx,
            FeederEvent {
                granule_submit_count: 1_000,
            },
        )
    };
    assert_eq!(tick().await.unwrap().submitted, 1_000);
    let first_open = count(&gets);
    assert!(first_open >= 2, "footer and pages: {first_open}");
    // The windows after it, across the row group boundary at 50,000 too.
    for _ in 0..60 {
        assert_eq!(tick().await.unwrap().submitted, 1_000);
        assert_eq!(count(&gets), 1);
    }
    let names: std::collections::BTreeSet<String> =
        jobs.submitted().into_iter().map(|r| r.job_name).collect();
    assert_eq!(names.len(), 61_000);
}

/// A feeder whose every SubmitJob is refused (past the SDK's and its own retries) must not
/// look like a quiet success: the run fails as QueueFeeder.Stalled, its tracker stays where it
/// was, and the next run, once Batch accepts again, submits the window.
#[tokio::test(start_paused = true)]
async fn a_run_stopped_by_refused_submissions_fails_as_stalled() {
    // Five granules, each refused at all of its SUBMIT_TRIES tries; accepted after that.
    let refusing = Arc::new(crate::adapters::memory::FlakyJobRunner::refusing(
        5 * crate::repositories::submission::SUBMIT_TRIES,
    ));
    let mut ctx = ctx("100", Arc::new(MemoryJobRunner::default())).await;
    ctx.jobs = refusing.clone();
    let err = run(
        &ctx,
        FeederEvent {
            granule_submit_count: 5,
        },
    )
    .await
    .unwrap_err();
    let HandlerError::Stalled { why, summary } = &err else {
        panic!("{err:?}")
    };
    assert!(why.contains("not submitted"), "{why}");
    assert_eq!((summary.submitted, summary.rows_submitted_total), (0, 0));
    assert_eq!(
        crate::handlers::LambdaFailure::of(crate::config::Function::QueueFeeder, &err).error_type,
        "QueueFeeder.Stalled"
    );
    // Batch accepts again: the window is submitted.
    let out = feed_rows(&ctx, 5).await;
    assert_eq!((out.submitted, out.rows_submitted_total), (5, 5));
}

/// A run redoing a window (the run before made its jobs and records, and its tracker save
/// was lost) works it from its claim: it does not look for the window's granules' records
/// again (they exist now, made by that run), which under throttling cost a GET a granule a redo.
#[tokio::test]
async fn a_window_done_again_does_not_look_its_granules_up_again() {
    let jobs = Arc::new(MemoryJobRunner::default());
    let ctx = ctx("100", jobs.clone()).await;
    let first = feed_rows(&ctx, 5).await;
    assert_eq!(first.submitted, 5);
    ctx.store
        .delete(&ctx.config.layout.tracker_key)
        .await
        .unwrap();
    let again = feed_rows(&ctx, 5).await;
    assert_eq!(
        (again.already_submitted, again.known_before),
        (5, 0),
        "{again:?}"
    );
    assert_eq!(jobs.submitted().len(), 5);
}

#[tokio::test]
async fn says_so_when_there_are_no_inventories() {
    let ctx = ctx("10", Arc::new(MemoryJobRunner::default())).await;
    ctx.store.delete("inventories/a.parquet").await.unwrap();
    let out = feed_rows(&ctx, 5).await;
    assert_eq!(
        out.early_exit.as_deref(),
        Some("no inventories (*.parquet) under inventories/")
    );
}

#[test]
fn a_windows_rows_sort_into_granules_repeats_and_unusable_rows() {
    let a = "HLS.S30.T18TYN.2022002T153012.v2.0";
    let b = "HLS.L30.T18TYN.2022001T153012.v2.0";
    let ids = vec![
        IdCell::Text(a.into()),
        IdCell::Null,
        IdCell::Text(b.into()),
        IdCell::Text(a.into()),
        IdCell::NotUtf8,
    ];
    let rows = window_rows(&ids, 100);
    let (ga, gb) = (GranuleId::parse(a).unwrap(), GranuleId::parse(b).unwrap());
    assert_eq!(rows.granules, vec![ga.clone(), gb.clone()]);
    assert_eq!(rows.first_row[&ga], 100);
    assert_eq!(rows.first_row[&gb], 102);
    assert_eq!(rows.repeated, 1);
    let bad: Vec<u64> = rows.unusable.iter().map(|(row, _)| *row).collect();
    assert_eq!(bad, vec![101, 104]);
    assert!(rows.unusable[0].1.contains("null"), "{:?}", rows.unusable);
}

#[tokio::test]
async fn zero_count_is_an_error() {
    let ctx = ctx("10", Arc::new(MemoryJobRunner::default())).await;
    assert!(matches!(
        run(
            &ctx,
            FeederEvent {
                granule_submit_count: 0
            }
        )
        .await,
        Err(HandlerError::BadEvent(_))
    ));
}
