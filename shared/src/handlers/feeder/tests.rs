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
    ctx_with(&[("GRANARY_MAX_ACTIVE_JOBS", max_active)], jobs).await
}

async fn ctx_with(env: &[(&str, &str)], jobs: Arc<MemoryJobRunner>) -> Ctx {
    ctx_with_rows(env, jobs, 50).await
}

/// A context whose inventory lists `rows` granules, `g000` on.
async fn ctx_with_rows(env: &[(&str, &str)], jobs: Arc<MemoryJobRunner>, rows: usize) -> Ctx {
    let config = Config::for_unit_tests(env);
    let store = Arc::new(MemoryStore::new());
    let rows: Vec<InventoryRow> = (0..rows)
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
/// Windows are sized from the rate the feeder is paced at, not Batch's quota: paced at 20 calls
/// a second (the template's share), a 300 s run's window is what 75 s let through, 1,500 rows;
/// sized for 50 a second it would take 187 s, and a second one would outlive the run.
#[test]
fn windows_are_sized_from_the_paced_rate() {
    use std::time::Duration;
    let run = Some(Duration::from_secs(300));
    assert_eq!(window_ceiling(run, None), 3_750);
    assert_eq!(window_ceiling(run, Some(Duration::from_millis(50))), 1_500);
    // A spacing faster than the quota is held to the quota.
    assert_eq!(window_ceiling(run, Some(Duration::from_millis(1))), 3_750);
    assert_eq!(
        window_ceiling(None, Some(Duration::from_millis(50))),
        u64::MAX
    );
}

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
    assert_eq!(
        window_ceiling(Some(std::time::Duration::from_secs(4)), None),
        50
    );
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
    let rows: Vec<InventoryRow> = (0..30_000)
        .map(|i| InventoryRow {
            granule_id: format!("g{i:06}"),
            start_datetime: String::new(),
        })
        .collect();
    let layout = InventoryLayout {
        row_group_rows: 5_000,
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
    // The windows after it, across the row group boundary at 5,000 too.
    for _ in 0..7 {
        assert_eq!(tick().await.unwrap().submitted, 1_000);
        assert_eq!(count(&gets), 1);
    }
    let names: std::collections::BTreeSet<String> =
        jobs.submitted().into_iter().map(|r| r.job_name).collect();
    assert_eq!(names.len(), 8_000);
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

mod array_windows {
    use super::*;
    use crate::adapters::memory::{job_state_change, Ending};
    use crate::domain::window::WindowClaim;
    use crate::handlers::monitor::{self, MonitorOutcome};
    use crate::ports::JobRunner;

    async fn array_ctx(jobs: Arc<MemoryJobRunner>) -> Ctx {
        ctx_with(
            &[
                ("GRANARY_MAX_ACTIVE_JOBS", "1000"),
                ("GRANARY_ARRAY_WINDOWS", "true"),
            ],
            jobs,
        )
        .await
    }

    async fn window_claim(ctx: &Ctx) -> WindowClaim {
        let key = crate::domain::layout::claims::window_key(
            &ctx.config.layout.claim_prefix,
            "inventories/a.parquet",
            0,
        );
        crate::repositories::read_json::<WindowClaim>(ctx.store.as_ref(), &key)
            .await
            .unwrap()
            .unwrap()
            .value
    }

    /// A window of 20 granules is one SubmitJob; each child's end is its granule's, read from
    /// the claim; the parent's end routes nothing; the counts of active jobs are the children.
    #[tokio::test]
    async fn a_window_is_one_array_job_and_each_child_ends_its_own_granule() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let ctx = array_ctx(jobs.clone()).await;
        let summary = feed_rows(&ctx, 20).await;
        assert_eq!(summary.submitted, 20);
        let submitted = jobs.submitted();
        assert_eq!(submitted.len(), 1, "one SubmitJob for the window");
        assert_eq!(submitted[0].array_size, Some(20));
        assert_eq!(
            submitted[0].environment["GRANARY_WINDOW_CLAIM"],
            "s3://b/claims/windows/inventories/a.parquet/start=000000000000.json"
        );
        let claim = window_claim(&ctx).await;
        assert!(claim.array);
        let parent = claim.array_job_id.clone().unwrap();
        assert_eq!(jobs.count_active(1000).await.unwrap().total, 20);
        // No item record while the children run: the claim says they are in flight, and the
        // monitor makes each record at its child's end.
        let g007 = GranuleId::parse("g007").unwrap();
        assert!(ctx.items().get(&g007).await.unwrap().is_none());

        // Children end: 7 fails with exit 3 (dead-lettered), the rest succeed.
        for i in 0..20 {
            let child = format!("{parent}:{i}");
            let ending = if i == 7 {
                Ending::Exited(3)
            } else {
                Ending::Succeeded
            };
            let detail = jobs.end(&child, ending).unwrap();
            let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
                .await
                .unwrap();
            if i == 7 {
                assert!(matches!(out, MonitorOutcome::Routed { .. }), "{out:?}");
            } else {
                assert!(matches!(out, MonitorOutcome::Succeeded { .. }), "{out:?}");
            }
        }
        let logs = ctx.store.list("logs/").await.unwrap();
        assert_eq!(logs.len(), 20);
        assert!(logs
            .iter()
            .any(|l| l.key.contains("outcome=failure") && l.key.contains("g007")));
        // Each record, made at its end, names the granule's child and the window it was listed in.
        let record = ctx.items().get(&g007).await.unwrap().unwrap().value;
        assert_eq!(
            record.job_id.as_deref(),
            Some(format!("{parent}:7").as_str())
        );
        assert_eq!(
            record.source.as_deref(),
            Some("claims/windows/inventories/a.parquet/start=000000000000.json")
        );
        let history = ctx.items().history(&g007).await.unwrap();
        assert_eq!(history[0].reason, "listed in an inventory", "{history:?}");
        assert_eq!(ctx.failure_dlq.depth().await.unwrap().visible, 1);
        // The parent's end names no granule and routes nothing.
        let parent_detail = jobs.end(&parent, Ending::Exited(1)).unwrap();
        let out = monitor::handle_message(&ctx, &job_state_change(&parent_detail).to_string())
            .await
            .unwrap();
        assert_eq!(out, MonitorOutcome::ArrayParent);
        assert_eq!(ctx.store.list("logs/").await.unwrap().len(), 20);
        assert_eq!(ctx.failure_dlq.depth().await.unwrap().visible, 1);
        // The next run's window is the next array, of the rows after it.
        feed_rows(&ctx, 20).await;
        let submitted = jobs.submitted();
        assert_eq!(submitted.len(), 2);
        assert!(
            submitted[1].environment["GRANARY_WINDOW_CLAIM"].ends_with("start=000000000020.json")
        );
    }

    /// A window of `n` granules fed as one array that Batch holds RUNNING: its Batch, context
    /// and array job id.
    async fn array_window_of(n: u64) -> (Arc<MemoryJobRunner>, Ctx, String) {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let ctx = array_ctx(jobs.clone()).await;
        feed_rows(&ctx, n).await;
        let parent = window_claim(&ctx).await.array_job_id.unwrap();
        (jobs, ctx, parent)
    }

    async fn success_logs(ctx: &Ctx) -> usize {
        ctx.store.list("logs/outcome=success/").await.unwrap().len()
    }

    /// Ends children `ends` of array `parent` as succeeded, handing each end's event to the
    /// monitor except those in `lost` (events EventBridge never delivered).
    async fn end_children(
        ctx: &Ctx,
        jobs: &MemoryJobRunner,
        parent: &str,
        ends: std::ops::Range<usize>,
        lost: &[usize],
    ) {
        for i in ends {
            let detail = jobs
                .end(&format!("{parent}:{i}"), Ending::Succeeded)
                .unwrap();
            if !lost.contains(&i) {
                monitor::handle_message(ctx, &job_state_change(&detail).to_string())
                    .await
                    .unwrap();
            }
        }
    }

    /// One reconciler pass as at `at`.
    async fn reconcile_at(
        ctx: &Ctx,
        at: chrono::DateTime<chrono::Utc>,
    ) -> crate::handlers::reconciler::ReconcileSummary {
        crate::handlers::reconciler::reconcile(ctx, at)
            .await
            .unwrap()
    }

    /// A child whose event was lost is found by the reconciler through DescribeJobs of
    /// `<parent>:<index>`, and the window's marker closes once every child is handled.
    #[tokio::test]
    async fn the_reconciler_describes_the_children_it_has_not_heard_from() {
        let (jobs, ctx, parent) = array_window_of(5).await;
        // The events of children 1 and 3 are lost.
        end_children(&ctx, &jobs, &parent, 0..5, &[1, 3]).await;
        let s = reconcile_at(&ctx, chrono::Utc::now() + chrono::Duration::hours(2)).await;
        assert_eq!(
            (s.recovered, s.handled, s.closed, s.errors),
            (2, 3, 1, 0),
            "{s:?}"
        );
        assert_eq!(success_logs(&ctx).await, 5);
    }

    /// A tap noting, at each DescribeJobs, how many success logs have been written so far,
    /// and refusing DescribeJobs as throttled from call `refused_from` on (counting from 0).
    #[derive(Default)]
    struct LogsAtEachDescribe {
        logs: std::sync::atomic::AtomicUsize,
        seen: std::sync::Mutex<Vec<usize>>,
        refused_from: Option<usize>,
    }

    impl crate::adapters::tap::Tap for LogsAtEachDescribe {
        fn enter(
            &self,
            call: &crate::adapters::tap::Call<'_>,
        ) -> Result<crate::adapters::tap::Fate, crate::adapters::tap::Refusal> {
            use crate::adapters::tap::{Fate, Op, Refusal};
            if call.op != Op::JobDescribe {
                return Ok(Fate::Make);
            }
            let mut seen = self.seen.lock().unwrap();
            seen.push(self.logs.load(std::sync::atomic::Ordering::Relaxed));
            match self.refused_from {
                Some(from) if seen.len() > from => Err(Refusal {
                    message: "TooManyRequestsException: Too Many Requests",
                    ambiguous: false,
                }),
                _ => Ok(Fate::Make),
            }
        }
        fn leave(
            &self,
            call: &crate::adapters::tap::Call<'_>,
            answer: &crate::adapters::tap::Answer,
        ) {
            let success_log = call.op == crate::adapters::tap::Op::StorePut
                && call.target.starts_with("logs/outcome=success/");
            if success_log && answer.ok {
                self.logs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// A window larger than a DescribeJobs page (250 children, 125 of their events lost) is
    /// described a page at a time, each page looked at before the next is asked for, and one
    /// pass still finds every lost end and closes it: one DescribeJobs of the ended parent,
    /// then two pages for the 125 children the store does not show handled (none for the 125
    /// it does).
    #[tokio::test]
    async fn a_window_larger_than_a_describe_page_is_looked_at_page_by_page_in_one_pass() {
        use crate::adapters::tap::counting::RequestCounts;
        use std::sync::atomic::Ordering::Relaxed;
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let settings = [
            ("GRANARY_MAX_ACTIVE_JOBS", "1000"),
            ("GRANARY_ARRAY_WINDOWS", "true"),
        ];
        let ctx = ctx_with_rows(&settings, jobs.clone(), 250).await;
        assert_eq!(feed_rows(&ctx, 250).await.submitted, 250);
        let parent = window_claim(&ctx).await.array_job_id.unwrap();
        let lost: Vec<usize> = (0..250).filter(|i| i % 2 == 1).collect();
        end_children(&ctx, &jobs, &parent, 0..250, &lost).await;
        assert_eq!(jobs.end_array_parents().len(), 1);
        let counts = Arc::new(RequestCounts::default());
        let recorder = Arc::new(LogsAtEachDescribe::default());
        let watched = ctx.watched(counts.clone()).watched(recorder.clone());
        let later = chrono::Utc::now() + chrono::Duration::hours(2);
        let s = crate::handlers::reconciler::reconcile(&watched, later)
            .await
            .unwrap();
        assert_eq!(
            (s.recovered, s.handled, s.closed, s.errors, s.out_of_time),
            (125, 125, 1, 0, 0),
            "{s:?}"
        );
        assert_eq!(counts.batch_calls.load(Relaxed), 3);
        // The parent, then the pages: the first page's 100 ends were logged (on top of the
        // 125 the events logged) before the second page was asked for.
        assert_eq!(*recorder.seen.lock().unwrap(), vec![0, 0, 100]);
        assert_eq!(success_logs(&ctx).await, 250);
    }

    /// A DescribeJobs refused on the second page keeps what the first page's looks did, leaves
    /// the rest of the window open for the next pass (counted as one error, not closed), and
    /// the next pass finishes it.
    #[tokio::test]
    async fn a_refused_describe_page_leaves_the_rest_of_the_window_to_the_next_pass() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let settings = [
            ("GRANARY_MAX_ACTIVE_JOBS", "1000"),
            ("GRANARY_ARRAY_WINDOWS", "true"),
        ];
        let ctx = ctx_with_rows(&settings, jobs.clone(), 250).await;
        feed_rows(&ctx, 250).await;
        let parent = window_claim(&ctx).await.array_job_id.unwrap();
        let lost: Vec<usize> = (0..250).filter(|i| i % 2 == 1).collect();
        end_children(&ctx, &jobs, &parent, 0..250, &lost).await;
        jobs.end_array_parents();
        // DescribeJobs of the parent and of the first page answered, the second page refused.
        let refusing = ctx.tapped(Arc::new(LogsAtEachDescribe {
            refused_from: Some(2),
            ..LogsAtEachDescribe::default()
        }));
        let later = chrono::Utc::now() + chrono::Duration::hours(2);
        let s = reconcile_at(&refusing, later).await;
        assert_eq!(
            (s.recovered, s.handled, s.closed, s.errors),
            (100, 125, 0, 1),
            "{s:?}"
        );
        assert_eq!(success_logs(&ctx).await, 225);
        let s = reconcile_at(&ctx, later).await;
        assert_eq!((s.recovered, s.closed, s.errors), (25, 1, 0), "{s:?}");
        assert_eq!(success_logs(&ctx).await, 250);
    }

    /// While the window's array is under way, a pass asks Batch about the parent alone and reads
    /// no granule's record: a window waiting behind a long queue costs one DescribeJobs a pass,
    /// not a GET a granule. Once the array ended, the lost ends are found as before.
    #[tokio::test]
    async fn a_window_whose_array_is_under_way_waits_after_one_describe_and_no_reads() {
        use crate::adapters::tap::counting::RequestCounts;
        use std::sync::atomic::Ordering::Relaxed;
        let (jobs, ctx, parent) = array_window_of(5).await;
        // Children 0..3 end (the event of child 1 is lost); 4 is still running.
        end_children(&ctx, &jobs, &parent, 0..4, &[1]).await;
        let later = chrono::Utc::now() + chrono::Duration::hours(2);
        let counts = Arc::new(RequestCounts::default());
        let watched = ctx.watched(counts.clone());
        let s = crate::handlers::reconciler::reconcile(&watched, later)
            .await
            .unwrap();
        assert_eq!(
            (
                s.windows,
                s.awaiting_array,
                s.recovered,
                s.handled,
                s.closed
            ),
            (1, 5, 0, 0, 0),
            "{s:?}"
        );
        assert_eq!(counts.gets_by_folder().get("items"), None);
        assert_eq!(counts.batch_calls.load(Relaxed), 1);
        assert_eq!(
            counts.s3_put.load(Relaxed),
            0,
            "the marker is left as it was"
        );

        end_children(&ctx, &jobs, &parent, 4..5, &[]).await;
        let s = reconcile_at(&ctx, later).await;
        assert_eq!(
            (s.recovered, s.handled, s.closed, s.errors),
            (1, 4, 1, 0),
            "{s:?}"
        );
        assert_eq!(success_logs(&ctx).await, 5);
    }

    /// An array held for longer than `ARRAY_WAIT_LIMIT` (a child stuck where the queue cannot
    /// cancel it) no longer holds back its siblings' lost ends: they are found and routed, and
    /// the stuck child stays open.
    #[tokio::test]
    async fn a_lost_end_waits_for_its_array_no_longer_than_the_limit() {
        let (jobs, ctx, parent) = array_window_of(3).await;
        // Child 0 ends and its event is lost; 1 ends and is handled; 2 never ends.
        end_children(&ctx, &jobs, &parent, 0..2, &[0]).await;
        let limit = crate::handlers::reconciler::ARRAY_WAIT_LIMIT;
        let s = reconcile_at(
            &ctx,
            chrono::Utc::now() + limit - chrono::Duration::minutes(5),
        )
        .await;
        assert_eq!((s.awaiting_array, s.recovered), (3, 0), "{s:?}");
        let s = reconcile_at(
            &ctx,
            chrono::Utc::now() + limit + chrono::Duration::minutes(5),
        )
        .await;
        assert_eq!(
            (
                s.recovered,
                s.handled,
                s.still_running,
                s.closed,
                s.awaiting_array
            ),
            (1, 1, 1, 0, 0),
            "{s:?}"
        );
        assert_eq!(success_logs(&ctx).await, 2);
    }

    /// The window's claim removed by an operator and made again a second later, its granules in
    /// the other order, recording `array` (none: its array not recorded yet).
    async fn claim_again(ctx: &Ctx, old: &WindowClaim, array: Option<&str>) -> WindowClaim {
        let key = crate::domain::layout::claims::window_key(
            &ctx.config.layout.claim_prefix,
            "inventories/a.parquet",
            0,
        );
        ctx.store.delete(&key).await.unwrap();
        let mut again = WindowClaim::new(
            None,
            "inventories/a.parquet",
            0,
            4,
            old.granules.iter().rev().cloned().collect(),
            "queue-feeder",
            chrono::Utc::now() + chrono::Duration::seconds(1),
        )
        .in_array(true);
        again.array_job_id = array.map(str::to_owned);
        crate::repositories::write_json(
            ctx.store.as_ref(),
            &key,
            &again,
            crate::ports::PutCondition::IfAbsent,
        )
        .await
        .unwrap();
        again
    }

    /// A child of an earlier claim at the same key (an operator removed the claim and the
    /// feeder made the window again) is never given the new claim's granule.
    #[tokio::test]
    async fn a_child_of_an_earlier_claim_at_the_key_is_rejected_not_misnamed() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let ctx = array_ctx(jobs.clone()).await;
        feed_rows(&ctx, 4).await;
        let old = window_claim(&ctx).await;
        let parent = old.array_job_id.clone().unwrap();
        let again = claim_again(&ctx, &old, Some("another-array")).await;
        assert_ne!(again.token, old.token);
        let detail = jobs.end(&format!("{parent}:0"), Ending::Succeeded).unwrap();
        let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        let MonitorOutcome::Rejected { reason } = out else {
            panic!("{out:?}")
        };
        assert!(reason.contains("earlier claim"), "{reason}");
        assert!(ctx.store.list("logs/").await.unwrap().is_empty());
    }

    /// A child's detail need not carry its parent's parameters (AWS documents only its id and
    /// `arrayProperties.index`): it is matched by the array its claim recorded, its token read
    /// from the environment. A child of an earlier claim at the key is rejected by its token,
    /// and one with no token, met by a claim that has not recorded its array yet, is asked
    /// about again later, never given that claim's granule.
    #[tokio::test]
    async fn a_child_without_parameters_is_matched_by_its_array_and_never_guessed() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let ctx = array_ctx(jobs.clone()).await;
        feed_rows(&ctx, 4).await;
        let old = window_claim(&ctx).await;
        let parent = old.array_job_id.clone().unwrap();
        let bare = |mut detail: serde_json::Value| {
            detail["parameters"] = serde_json::json!({});
            detail
        };
        let detail = bare(jobs.end(&format!("{parent}:0"), Ending::Succeeded).unwrap());
        let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        assert!(
            !matches!(out, MonitorOutcome::Rejected { .. }),
            "matched by its array: {out:?}"
        );
        assert_eq!(success_logs(&ctx).await, 1);

        // Another instance (no claim read yet): the claim removed and made again, its array not
        // recorded yet.
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let ctx = array_ctx(jobs.clone()).await;
        feed_rows(&ctx, 4).await;
        let old = window_claim(&ctx).await;
        let parent = old.array_job_id.clone().unwrap();
        claim_again(&ctx, &old, None).await;
        let detail = bare(jobs.end(&format!("{parent}:1"), Ending::Succeeded).unwrap());
        let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        let MonitorOutcome::Rejected { reason } = out else {
            panic!("its environment's token is the earlier claim's: {out:?}")
        };
        assert!(reason.contains("earlier claim"), "{reason}");
        // Without a token anywhere: not guessed, asked again later.
        let mut detail = bare(jobs.end(&format!("{parent}:2"), Ending::Succeeded).unwrap());
        if let Some(env) = detail["container"]["environment"].as_array_mut() {
            env.retain(|v| v["name"] != crate::domain::job_tags::WINDOW_TOKEN_ENV);
        }
        let e = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap_err();
        assert!(
            matches!(e, crate::handlers::HandlerError::InFlight(_)),
            "{e}"
        );
        assert_eq!(success_logs(&ctx).await, 0, "no granule guessed");
    }

    /// A child event naming an index the claim has no granule at is rejected with the reason.
    #[tokio::test]
    async fn a_child_the_claim_cannot_name_is_rejected_with_the_reason() {
        let (jobs, ctx, parent) = array_window_of(3).await;
        let mut detail = jobs.end(&format!("{parent}:2"), Ending::Succeeded).unwrap();
        detail["jobId"] = format!("{parent}:9").into();
        detail["arrayProperties"]["index"] = 9.into();
        let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        let MonitorOutcome::Rejected { reason } = out else {
            panic!("{out:?}")
        };
        assert!(reason.contains("none at index 9"), "{reason}");
        detail["parameters"]["window_claim"] = "elsewhere/x.json".into();
        let out = monitor::handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        assert!(matches!(out, MonitorOutcome::Rejected { .. }), "{out:?}");
    }
}

/// Paced by what comes after: while the downstream queue holds more than its limit the feeder
/// submits nothing and says why; once it drains, feeding goes on where it stopped.
#[tokio::test]
async fn waits_while_the_downstream_queue_is_over_its_limit_and_resumes_when_it_drains() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx_with(
        &[
            (
                "GRANARY_DOWNSTREAM_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/123456789012/archive-intake",
            ),
            ("GRANARY_DOWNSTREAM_MAX_MESSAGES", "2"),
        ],
        jobs.clone(),
    )
    .await;
    let downstream = ctx.downstream.clone().expect("the gate's queue is wired");
    for i in 0..3 {
        downstream
            .send(crate::ports::OutgoingMessage::new(format!("product {i}")))
            .await
            .unwrap();
    }
    let waiting = feed_rows(&ctx, 20).await;
    assert_eq!(waiting.submitted, 0);
    assert!(
        jobs.submitted().is_empty(),
        "no job while downstream is full"
    );
    let why = waiting.early_exit.expect("the run says why it waits");
    assert!(
        why.contains("archive-intake") && why.contains("3 messages"),
        "{why}"
    );
    // The archive takes one product: two wait, at the limit, so the feeder feeds.
    let taken = downstream.receive(1, 30, 0).await.unwrap();
    downstream.delete(&taken[0].receipt_handle).await.unwrap();
    let fed = feed_rows(&ctx, 20).await;
    assert_eq!((fed.submitted, fed.early_exit), (20, None));
    assert_eq!(
        fed.rows_submitted_total, 20,
        "from the inventory's first row"
    );
}

#[test]
fn a_downstream_limit_without_its_queue_is_refused() {
    let e = Config::from_pairs(&[
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_DOWNSTREAM_MAX_MESSAGES", "10"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("GRANARY_DOWNSTREAM_QUEUE_URL"), "{e}");
}

/// Array retries: the requeuer parks ordinary retries (claim and marker, no job); the feeder's
/// next run submits them as one window of retries — an array at each granule's own attempt —
/// records each granule's job in its claim, removes the markers and moves the tracker on; a
/// duplicate retry message after that finds the attempt taken and parks nothing.
#[tokio::test]
async fn parked_retries_go_as_one_array_at_their_own_attempts() {
    use crate::contracts::messages::RetryMessage;
    use crate::domain::claim::Claim;
    use crate::domain::granule::GranuleProcessingEvent;
    use crate::domain::layout::claims::{claim_key, parked_prefix};
    use crate::handlers::requeuer::{self, RequeueOutcome};
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx_with(
        &[
            ("GRANARY_ARRAY_RETRIES", "on"),
            ("GRANARY_ARRAY_WINDOWS", "on"),
            ("GRANARY_MAX_SPOT_RETRIES", "3"),
        ],
        jobs.clone(),
    )
    .await;
    let retries = [("r-a", 1, 1), ("r-b", 2, 0), ("r-c", 1, 0)];
    for (id, attempt, spot_ends) in retries {
        let message =
            RetryMessage::ended(GranuleId::parse(id).unwrap(), attempt).with_spot_ends(spot_ends);
        let out = requeuer::handle_message(&ctx, &serde_json::to_string(&message).unwrap())
            .await
            .unwrap();
        assert_eq!(
            out,
            RequeueOutcome::Parked {
                attempt: attempt + 1
            }
        );
    }
    assert!(jobs.submitted().is_empty(), "parked, not submitted");
    let parked = parked_prefix(&ctx.config.layout.claim_prefix);
    assert_eq!(ctx.store.list(&parked).await.unwrap().len(), 3);

    // One feeder run: the retries first (the inventory's rows follow).
    let summary = feed_rows(&ctx, 1).await;
    assert_eq!(summary.retries_submitted, 3);
    let submitted = jobs.submitted();
    assert_eq!(submitted[0].array_size, Some(3), "{submitted:?}");
    assert_eq!(
        submitted[0].parameters["attempt"], "2",
        "the lowest attempt"
    );
    let claim_at = submitted[0].parameters["window_claim"].clone();
    let window: crate::domain::window::WindowClaim =
        crate::repositories::read_json(ctx.store.as_ref(), &claim_at)
            .await
            .unwrap()
            .unwrap()
            .value;
    let entries: Vec<(String, u32, u32)> = window
        .entries()
        .map(|e| (e.granule_id.to_string(), e.attempt, e.spot_ends))
        .collect();
    assert_eq!(
        entries,
        [
            ("r-a".to_owned(), 2, 1),
            ("r-b".to_owned(), 3, 0),
            ("r-c".to_owned(), 2, 0)
        ]
    );
    // Each granule's claim names its child; no marker is left; the tracker moved on.
    let parent = crate::ports::JobRunner::find_by_name(jobs.as_ref(), &submitted[0].job_name)
        .await
        .unwrap()
        .unwrap();
    for (i, (id, attempt, _)) in retries.iter().enumerate() {
        let event = GranuleProcessingEvent {
            granule_id: GranuleId::parse(id).unwrap(),
            attempt: attempt + 1,
        };
        let claim: Claim = crate::repositories::read_json(
            ctx.store.as_ref(),
            &claim_key(&ctx.config.layout.claim_prefix, &event),
        )
        .await
        .unwrap()
        .unwrap()
        .value;
        assert_eq!(claim.job_id, Some(format!("{}:{i}", parent.job_id)));
    }
    assert!(ctx.store.list(&parked).await.unwrap().is_empty());
    let tracker = ctx.tracker().load().await.unwrap();
    assert_eq!(tracker.value.retry_windows, 1);

    // A duplicate retry message: taken already, nothing parked, nothing submitted.
    let again = RetryMessage::ended(GranuleId::parse("r-a").unwrap(), 1).with_spot_ends(1);
    let out = requeuer::handle_message(&ctx, &serde_json::to_string(&again).unwrap())
        .await
        .unwrap();
    assert_eq!(out, RequeueOutcome::AlreadySubmitted { attempt: 2 });
    assert!(ctx.store.list(&parked).await.unwrap().is_empty());
    let before = jobs.submitted().len();
    feed_rows(&ctx, 1).await;
    assert!(
        jobs.submitted()[before..]
            .iter()
            .all(|r| r.parameters["attempt"] == "1"),
        "no retry submitted again"
    );
}

/// A marker written again after a window took its granule (a duplicate retry message that read
/// the claim just before the window recorded its job) is stale: the next window reads the
/// claim, removes the marker and submits nothing for it.
#[tokio::test]
async fn a_stale_parked_marker_is_removed_not_submitted_again() {
    use crate::domain::claim::{Claim, Placement};
    use crate::domain::granule::GranuleProcessingEvent;
    use crate::domain::layout::claims::{claim_key, parked_key, parked_prefix};
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx_with(&[("GRANARY_ARRAY_RETRIES", "on")], jobs.clone()).await;
    let event = GranuleProcessingEvent {
        granule_id: GranuleId::parse("r-a").unwrap(),
        attempt: 2,
    };
    let prefix = &ctx.config.layout.claim_prefix;
    let taken = Claim {
        job_id: Some("job-9:0".into()),
        ..Claim::new(&event, None, "requeuer", chrono::Utc::now())
            .placed(Placement::default())
            .parked()
    };
    crate::repositories::write_json(
        ctx.store.as_ref(),
        &claim_key(prefix, &event),
        &taken,
        PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    ctx.store
        .put(
            &parked_key(prefix, &event),
            bytes::Bytes::from_static(b"{}"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let summary = feed_rows(&ctx, 1).await;
    assert_eq!((summary.retries_submitted, summary.stale_parked), (0, 1));
    assert!(jobs
        .submitted()
        .iter()
        .all(|r| r.parameters["attempt"] == "1"));
    assert!(ctx
        .store
        .list(&parked_prefix(prefix))
        .await
        .unwrap()
        .is_empty());
}

/// Retries parked before the stack switched campaigns are not left behind: the feeder of the
/// new campaign submits them as a window of retries of the old one, in the old campaign's state
/// and with its tracker — and whether or not parking is still on.
#[tokio::test]
async fn retries_parked_before_a_campaign_switch_go_with_the_old_campaigns_window() {
    use crate::contracts::messages::RetryMessage;
    use crate::domain::campaign::Campaign;
    use crate::domain::layout::claims::parked_prefix;
    use crate::handlers::requeuer::{self, RequeueOutcome};
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let old = ctx_with(&[("GRANARY_ARRAY_RETRIES", "on")], jobs.clone()).await;
    for id in ["r-a", "r-b"] {
        let message = RetryMessage::ended(GranuleId::parse(id).unwrap(), 1);
        let out = requeuer::handle_message(&old, &serde_json::to_string(&message).unwrap())
            .await
            .unwrap();
        assert_eq!(out, RequeueOutcome::Parked { attempt: 2 });
    }
    // The stack now runs campaign v2, with parking off.
    let v2 = Campaign::parse("v2").unwrap();
    let mut new = (*old.in_campaign(Some(&v2))).clone();
    if let Some(j) = new.config.jobs.as_mut() {
        j.array_retries = false;
    }
    let retries = || {
        jobs.submitted()
            .into_iter()
            .filter(|r| r.parameters["attempt"] == "2")
            .map(|r| {
                (
                    r.parameters["granule_id"].clone(),
                    r.parameters.get("campaign").cloned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let summary = feed_rows(&new, 1).await;
    assert_eq!(summary.retries_submitted, 2, "{summary:?}");
    assert_eq!(
        retries(),
        [("r-a".to_owned(), None), ("r-b".to_owned(), None)],
        "the old campaign's retries, once each, in its name"
    );
    let parked = parked_prefix(&old.config.layout.claim_prefix);
    assert!(old.store.list(&parked).await.unwrap().is_empty());
    let tracker = old.tracker().load().await.unwrap();
    assert_eq!(
        tracker.value.retry_windows, 1,
        "the old campaign's own tracker"
    );
    // The next run finds nothing more to do.
    feed_rows(&new, 1).await;
    assert_eq!(retries().len(), 2);
}

/// An inventory replaced under its key after the feeder began it is another list of granules:
/// the feeder refuses to go on (its rows counted so far are not the new file's) and submits
/// nothing more, until the file it began is back.
#[tokio::test]
async fn an_inventory_replaced_under_its_key_stops_the_feeder() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx_with_rows(&[], jobs.clone(), 20).await;
    assert_eq!(feed_rows(&ctx, 10).await.submitted, 10);
    let began = ctx
        .store
        .get("inventories/a.parquet")
        .await
        .unwrap()
        .unwrap();
    let others: Vec<InventoryRow> = (0..20)
        .map(|i| InventoryRow {
            granule_id: format!("other{i:03}"),
            start_datetime: String::new(),
        })
        .collect();
    let bytes = write_inventory(&others, &InventoryLayout::granary()).unwrap();
    ctx.store
        .put("inventories/a.parquet", bytes, PutCondition::Overwrite)
        .await
        .unwrap();
    let refused = run(
        &ctx,
        FeederEvent {
            granule_submit_count: 10,
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("was replaced"), "{refused}");
    assert_eq!(jobs.submitted().len(), 10, "nothing more submitted");
    let tracker = ctx.tracker().load().await.unwrap().value;
    assert_eq!(tracker.inventories[0].rows_submitted, 10);
    assert!(
        began.etag
            != ctx
                .store
                .get("inventories/a.parquet")
                .await
                .unwrap()
                .unwrap()
                .etag
    );
}

/// The importer's discovery, run once just before the feeder marks its window open: the
/// record it creates lands after the feeder read the open windows, and its own look at the
/// open windows comes before the window's marker.
struct DiscoverBeforeTheMarker {
    importer: Ctx,
    open_windows: String,
    done: std::sync::atomic::AtomicBool,
}

impl crate::adapters::tap::Tap for DiscoverBeforeTheMarker {
    fn enter(
        &self,
        call: &crate::adapters::tap::Call<'_>,
    ) -> Result<crate::adapters::tap::Fate, crate::adapters::tap::Refusal> {
        use crate::adapters::tap::Op;
        let marker = call.op == Op::StorePut && call.target.starts_with(&self.open_windows);
        if marker && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // The in-memory twins never wait: the discovery runs to its end here.
            let found = futures::executor::block_on(crate::handlers::importer::discover::discover(
                &self.importer,
            ))
            .unwrap();
            assert_eq!((found.new, found.in_flight), (1, 0), "{found:?}");
        }
        Ok(crate::adapters::tap::Fate::Make)
    }
}

/// A file both listed in an inventory and discovered by the importer at the same moment is
/// submitted once: the feeder looks for its window's records only after marking the window
/// open, and the discovery reads the open windows only after creating its record, so whichever
/// comes second sees the other. Read before the claim (as it once was), the record was missed
/// and the granule ran twice.
#[tokio::test]
async fn a_file_listed_and_discovered_at_once_is_submitted_once() {
    use crate::adapters::memory::MemorySource;
    use crate::domain::item::id_from_hash;
    let hex = |c: char| c.to_string().repeat(32);
    let jobs = Arc::new(MemoryJobRunner::default());
    let base = ctx_with_rows(&[], jobs.clone(), 0).await;
    let ids: Vec<String> = ['a', 'b', 'c']
        .iter()
        .map(|c| format!("f{}", hex(*c)))
        .collect();
    let rows: Vec<InventoryRow> = ids
        .iter()
        .map(|id| InventoryRow {
            granule_id: id.clone(),
            start_datetime: String::new(),
        })
        .collect();
    let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
    base.store
        .put("inventories/a.parquet", bytes, PutCondition::Overwrite)
        .await
        .unwrap();
    let digest = format!("sha256:{}", hex('b'));
    let importer = Ctx {
        source: Some(Arc::new(MemorySource {
            files: vec![(
                crate::ports::SourceFile {
                    url: "https://source.example/b.h5".into(),
                    name: "b.h5".into(),
                    size: Some(3),
                    last_modified: None,
                    version: None,
                    digest: Some(digest.clone()),
                },
                bytes::Bytes::from_static(b"abc"),
            )],
        })),
        import_queue: Some(Arc::new(MemoryQueue::new("import"))),
        ..base.clone()
    };
    let shared = id_from_hash(&digest).unwrap();
    assert_eq!(shared.as_str(), ids[1]);
    let tap = Arc::new(DiscoverBeforeTheMarker {
        importer: importer.clone(),
        open_windows: crate::domain::layout::claims::windows_root(
            &base.config.layout.open_claim_prefix,
        ),
        done: false.into(),
    });
    let fed = feed_rows(&base.tapped(tap), 3).await;
    assert_eq!((fed.submitted, fed.known_before), (2, 1), "{fed:?}");
    let names: Vec<String> = jobs.submitted().into_iter().map(|r| r.job_name).collect();
    assert!(
        !names.iter().any(|n| n.contains(shared.as_str())),
        "{names:?}"
    );
    // The importer has it: DISCOVERED and queued for its download, and no window holds it.
    let record = base.items().look(&shared).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        crate::domain::lifecycle::ItemState::Discovered
    );
    let queued = importer
        .import_queue
        .as_ref()
        .unwrap()
        .depth()
        .await
        .unwrap();
    assert_eq!(queued.visible, 1, "{queued:?}");
}

#[path = "tests/pace.rs"]
mod pace_tests;
