use super::*;
use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
use crate::config::Config;
use crate::domain::batch_event::JobStatus;
use crate::domain::claim::JobsClaim;
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::item::NewItem;
use crate::domain::layout::claims::window_key;
use crate::domain::window::WindowClaim;
use crate::handlers::monitor::MonitorOutcome;
use crate::handlers::Ctx;
use crate::ports::{JobRunner, Queue};
use std::sync::Arc;

async fn importer(jobs: Arc<MemoryJobRunner>) -> (Ctx, Arc<MemoryQueue>) {
    let config = Config::for_unit_tests(&[
        ("GRANARY_PROCESSING_TIMEOUT_SECS", "60"),
        ("GRANARY_MAX_RETRIES", "0"),
    ]);
    let store = Arc::new(MemoryStore::new());
    let dlq = Arc::new(MemoryQueue::new("dlq"));
    let importer_ctx = Ctx {
        store: store.clone(),
        jobs,
        retry_queue: Arc::new(MemoryQueue::new("retry")),
        failure_dlq: dlq.clone(),
        import_queue: Some(Arc::new(MemoryQueue::new("import"))),
        ..Ctx::in_memory(config)
    };
    (importer_ctx, dlq)
}

async fn processing(importer_ctx: &Ctx, id: &str, job_id: &str) -> GranuleId {
    let id = GranuleId::parse(id).unwrap();
    importer_ctx
        .items()
        .create(NewItem::ready(id.clone(), "t", None), "t")
        .await
        .unwrap();
    let event = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 1,
    };
    crate::handlers::item_sync::submitted(importer_ctx, &event, job_id, None, "t")
        .await
        .unwrap();
    id
}

async fn state(importer_ctx: &Ctx, id: &GranuleId) -> ItemState {
    importer_ctx
        .items()
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .value
        .state
}

#[tokio::test]
async fn asks_batch_before_failing_a_processing_item() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let (importer_ctx, dlq) = importer(jobs.clone()).await;
    let request = |item: &str| {
        let id = GranuleId::parse(item).unwrap();
        crate::contracts::job::job_request(&format!("{item}-1"), None, &id, 1)
    };
    let alive = jobs.submit(request("alive-item")).await.unwrap().job_id;
    let done = jobs.submit(request("done-item")).await.unwrap().job_id;
    jobs.set_status(&done, JobStatus::Succeeded);
    let a = processing(&importer_ctx, "alive-item", &alive).await;
    let d = processing(&importer_ctx, "done-item", &done).await;
    let lost = processing(&importer_ctx, "lost-item", "no-such-job").await;
    let late = Utc::now() + chrono::Duration::seconds(61);
    let s = sweep(&importer_ctx, late).await.unwrap();
    assert_eq!(
        (s.examined, s.job_alive, s.finished_by_batch, s.gave_up),
        (3, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(state(&importer_ctx, &a).await, Processing);
    // The finished job went through the monitor's handler: logged, and the item PROCESSED;
    // so did the lost one's timed-out attempt (logged as a failure).
    assert_eq!(state(&importer_ctx, &d).await, Processed);
    let logs = importer_ctx
        .store
        .list(&importer_ctx.config.layout.log_prefix)
        .await
        .unwrap();
    let logged: Vec<bool> = ["outcome=success/", "outcome=failure/"]
        .iter()
        .map(|o| logs.iter().any(|l| l.key.contains(o)))
        .collect();
    assert_eq!((logs.len(), logged), (2, vec![true, true]), "{logs:?}");
    // one attempt allowed (GRANARY_MAX_RETRIES=0): the lost job's item gives up
    assert_eq!(state(&importer_ctx, &lost).await, Abandoned);
    assert_eq!(dlq.depth().await.unwrap().visible, 1);
    // only the live job's item is still indexed
    let left = importer_ctx.items().inflight().await.unwrap();
    assert_eq!(left, vec![(Processing, a)]);
}

#[tokio::test]
async fn a_windows_granules_are_swept_through_its_open_marker_and_close_it() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let (importer_ctx, dlq) = importer(jobs.clone()).await;
    let ctx = &importer_ctx;
    let ids: Vec<GranuleId> = ["alive-item", "lost-item"]
        .iter()
        .map(|g| GranuleId::parse(g).unwrap())
        .collect();
    let alive = jobs
        .submit(crate::contracts::job::job_request(
            "alive-item-1",
            None,
            &ids[0],
            1,
        ))
        .await
        .unwrap()
        .job_id;
    // The feeder's window: claimed, jobs recorded, records made together, marker open.
    let found = vec![Some(alive.clone()), Some("forgotten-by-batch".to_owned())];
    let claim = WindowClaim::new(None, "inv.parquet", 0, 2, ids.clone(), "t", Utc::now())
        .recording(&found, Utc::now());
    let layout = &ctx.config.layout;
    for prefix in [&layout.claim_prefix, &layout.open_claim_prefix] {
        crate::repositories::write_json(
            ctx.store.as_ref(),
            &window_key(prefix, "inv.parquet", 0),
            &claim,
            crate::ports::PutCondition::IfAbsent,
        )
        .await
        .unwrap();
    }
    let submitted: Vec<_> = claim
        .attempts()
        .zip(&found)
        .map(|(e, j)| (e, j.clone().unwrap(), "inv.parquet#row=0".to_owned()))
        .collect();
    let made = crate::handlers::item_sync::window_submitted(ctx, &claim, &submitted, false, "t")
        .await
        .unwrap();
    assert_eq!(made, vec![true, true]);
    assert!(ctx.items().inflight().await.unwrap().is_empty());

    let late = Utc::now() + chrono::Duration::seconds(61);
    let s = sweep(&importer_ctx, late).await.unwrap();
    assert_eq!(
        (s.window_granules, s.job_alive, s.gave_up, s.stale_markers),
        (2, 1, 1, 0),
        "{s:?}"
    );
    assert_eq!(state(&importer_ctx, &ids[0]).await, Processing);
    assert_eq!(
        state(&importer_ctx, &ids[1]).await,
        Abandoned,
        "Batch lost its job"
    );
    assert_eq!(dlq.depth().await.unwrap().visible, 1);

    // The reconciler keeps the window open while a job runs; once it has ended, the
    // lost one counts as handled (its record moved on) and the marker goes.
    let open = || async {
        ctx.store
            .list(&layout.open_claim_prefix)
            .await
            .unwrap()
            .len()
    };
    let later = late + chrono::Duration::days(1);
    let r = crate::handlers::reconciler::reconcile(ctx, later)
        .await
        .unwrap();
    assert_eq!((r.handled, r.still_running, r.closed), (1, 1, 0), "{r:?}");
    assert_eq!(open().await, 1);
    jobs.set_status(&alive, JobStatus::Succeeded);
    // The marker remembers the handled one: this pass looks only at the other.
    let r = crate::handlers::reconciler::reconcile(ctx, later)
        .await
        .unwrap();
    assert_eq!((r.recovered, r.handled, r.closed), (1, 0, 1), "{r:?}");
    assert_eq!(open().await, 0);
    assert_eq!(state(&importer_ctx, &ids[0]).await, Processed);
    // Nothing of the window is left for the sweeper.
    let s = sweep(&importer_ctx, late).await.unwrap();
    assert_eq!(s.examined, 0, "{s:?}");
}

/// An array window whose records are made at its children's ends left nothing for the sweeper:
/// its granules' records are not read (one LIST of the open markers and one GET of the claim,
/// not a GET a granule).
#[tokio::test]
async fn an_array_windows_granules_cost_the_sweeper_no_record_reads() {
    use crate::adapters::tap::counting::RequestCounts;
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let (importer_ctx, _) = importer(jobs).await;
    let ids: Vec<GranuleId> = (0..50)
        .map(|i| GranuleId::parse(&format!("array-item-{i}")).unwrap())
        .collect();
    let claim = WindowClaim::new(None, "inv.parquet", 0, 50, ids, "t", Utc::now())
        .in_array(true)
        .with_records_at_end(true);
    let layout = &importer_ctx.config.layout;
    for prefix in [&layout.claim_prefix, &layout.open_claim_prefix] {
        crate::repositories::write_json(
            importer_ctx.store.as_ref(),
            &window_key(prefix, "inv.parquet", 0),
            &claim,
            crate::ports::PutCondition::IfAbsent,
        )
        .await
        .unwrap();
    }
    let counts = Arc::new(RequestCounts::default());
    let watched = importer_ctx.watched(counts.clone());
    let late = Utc::now() + chrono::Duration::seconds(61);
    let s = sweep(&watched, late).await.unwrap();
    assert_eq!(s.window_granules, 0, "{s:?}");
    let item_gets = counts.gets_by_folder().get("items").copied().unwrap_or(0);
    assert_eq!(item_gets, 0, "{:?}", counts.gets_by_folder());
}

/// A scheduled pass with no time left touches nothing and says how much it left; the same
/// items are swept by the next pass that has time.
#[tokio::test]
async fn a_pass_whose_time_is_spent_leaves_the_rest_for_the_next() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let (importer_ctx, _) = importer(jobs.clone()).await;
    let attempt = crate::domain::granule::GranuleProcessingEvent {
        granule_id: GranuleId::parse("marked-item").unwrap(),
        attempt: 1,
    };
    importer_ctx.submit_once(&attempt, "t").await.unwrap();
    let ids: Vec<GranuleId> = ["a-item", "b-item", "c-item"]
        .iter()
        .map(|g| GranuleId::parse(g).unwrap())
        .collect();
    for id in &ids {
        processing(&importer_ctx, id.as_str(), "no-such-job").await;
    }
    let late = Utc::now() + chrono::Duration::seconds(61);
    let spent = Budget::within(std::time::Duration::ZERO);
    let pass = scheduled_pass(&importer_ctx, late, &spent).await.unwrap();
    assert_eq!(pass.reconcile.out_of_time, 1, "{:?}", pass.reconcile);
    assert_eq!((pass.sweep.examined, pass.sweep.out_of_time), (0, 3));
    for id in &ids {
        assert_eq!(state(&importer_ctx, id).await, Processing);
    }
    let pass = scheduled_pass(&importer_ctx, late, &Budget::unlimited())
        .await
        .unwrap();
    assert_eq!((pass.reconcile.out_of_time, pass.sweep.out_of_time), (0, 0));
    assert_eq!(pass.reconcile.open_claims, 1, "{:?}", pass.reconcile);
    assert_eq!(pass.sweep.gave_up, 3, "{:?}", pass.sweep);
}

#[tokio::test]
async fn leaves_items_within_their_time_and_clears_stale_markers() {
    let (importer_ctx, _) = importer(Arc::new(MemoryJobRunner::default())).await;
    let id = processing(&importer_ctx, "fresh", "job-x").await;
    let s = sweep(&importer_ctx, Utc::now()).await.unwrap();
    assert_eq!((s.examined, s.within_time), (1, 1));
    // a marker left behind by a crash after the record moved on
    importer_ctx
        .store
        .put(
            "inflight/DOWNLOADING/fresh",
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let s = sweep(&importer_ctx, Utc::now()).await.unwrap();
    assert_eq!(s.stale_markers, 1);
    assert_eq!(
        importer_ctx.items().inflight().await.unwrap(),
        vec![(Processing, id)]
    );
}

/// A timed-out attempt is an end like any other: logged, then routed, then recorded. So once a
/// later attempt has succeeded, a late end of the timed-out one (its job ran after all) finds
/// that success at its own attempt's key and is not sent round again: no retry, no DLQ notice
/// for a granule that succeeded.
/// An item whose attempt 1 the sweeper timed out (Batch no longer knowing its job): logged as a
/// failure and routed to the retry queue. Returns the importer, the item, the retry queue and the DLQ.
async fn timed_out_at_attempt_one() -> (Ctx, GranuleId, Arc<MemoryQueue>, Arc<MemoryQueue>) {
    use crate::domain::classify::FailureKind;
    use crate::domain::layout::logs::LogRecord;
    let config = Config::for_unit_tests(&[("GRANARY_PROCESSING_TIMEOUT_SECS", "60")]);
    let (retry, dlq) = (
        Arc::new(MemoryQueue::new("retry")),
        Arc::new(MemoryQueue::new("dlq")),
    );
    let importer_ctx = Ctx {
        store: Arc::new(MemoryStore::new()),
        jobs: Arc::new(MemoryJobRunner::new(JobStatus::Running)),
        retry_queue: retry.clone(),
        failure_dlq: dlq.clone(),
        ..Ctx::in_memory(config)
    };
    let id = processing(&importer_ctx, "slow-item", "job-batch-forgot").await;
    let late = Utc::now() + chrono::Duration::seconds(61);
    let s = sweep(&importer_ctx, late).await.unwrap();
    assert_eq!((s.retried, s.gave_up), (1, 0), "{s:?}");
    assert_eq!(state(&importer_ctx, &id).await, ProcessingFailed);
    assert_eq!(retry.depth().await.unwrap().visible, 1);
    let logs = importer_ctx
        .store
        .list(&importer_ctx.config.layout.log_prefix)
        .await
        .unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(logs[0].key.contains("outcome=failure/"), "{}", logs[0].key);
    let log: LogRecord = crate::repositories::read_json(importer_ctx.store.as_ref(), &logs[0].key)
        .await
        .unwrap()
        .unwrap()
        .value;
    // Routed: the retry message above, and the record past the attempt as its mark (with item
    // records the log is not marked too).
    assert!(log.routed_at.is_none(), "{log:?}");
    assert_eq!(
        log.classification.failure,
        Some(FailureKind::AttemptTimeout)
    );
    assert_eq!((log.attempt, log.job_id.as_str()), (1, "job-batch-forgot"));
    (importer_ctx, id, retry, dlq)
}

/// Attempt `attempt`'s end (job `job-<attempt>`), handed to the monitor's handler.
async fn end(importer_ctx: &Ctx, id: &GranuleId, attempt: u32, succeeded: bool) -> MonitorOutcome {
    use crate::domain::classify::{Classification, FailureKind, JobOutcome, Route};
    use crate::domain::job_end::FinishedJob;
    let (outcome, route) = if succeeded {
        (JobOutcome::Success, Route::Done)
    } else {
        (JobOutcome::Retryable, Route::RetryQueue)
    };
    let finished = FinishedJob {
        granule: GranuleProcessingEvent {
            granule_id: id.clone(),
            attempt,
        },
        campaign: None,
        classification: Classification {
            outcome,
            failure: (route != Route::Done).then_some(FailureKind::SpotInterruption),
            batch_rules: String::new(),
            reason: format!("attempt {attempt} ended"),
        },
        route,
        spot_ends_before: None,
        listed_in: None,
    };
    let detail = serde_json::json!({"jobId": format!("job-{attempt}"), "jobName": "n"});
    crate::handlers::monitor::job_finished(importer_ctx, finished, detail, "t")
        .await
        .unwrap()
}

#[tokio::test]
async fn a_timed_out_attempt_is_logged_so_a_later_success_supersedes_its_late_end() {
    let (importer_ctx, id, retry, dlq) = timed_out_at_attempt_one().await;
    // The requeuer's attempt 2 succeeds...
    let succeeded = end(&importer_ctx, &id, 2, true).await;
    assert_eq!(succeeded, MonitorOutcome::Succeeded { relocated: 1 });
    // ...and then attempt 1's own end arrives: a failure, too late to matter.
    let late_end = end(&importer_ctx, &id, 1, false).await;
    assert_eq!(late_end, MonitorOutcome::AlreadySucceeded { by_attempt: 2 });
    assert_eq!(retry.depth().await.unwrap().visible, 1, "no second retry");
    assert_eq!(
        dlq.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );
    assert_eq!(state(&importer_ctx, &id).await, Processed);
}

/// The other order: attempt 1, timed out, succeeds after all while attempt 2 runs (its record
/// says PROCESSING 2, which the late success leaves alone); attempt 2 then fails. The granule
/// succeeded: nothing is routed, and the record follows the success to PROCESSED (it was left
/// PROCESSING with nothing coming).
#[tokio::test]
async fn a_failure_after_an_earlier_attempts_late_success_leaves_the_item_processed() {
    let (importer_ctx, id, retry, dlq) = timed_out_at_attempt_one().await;
    let attempt_two = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 2,
    };
    crate::handlers::item_sync::submitted(&importer_ctx, &attempt_two, "job-2", None, "t")
        .await
        .unwrap();
    let late_success = end(&importer_ctx, &id, 1, true).await;
    assert!(
        matches!(late_success, MonitorOutcome::Succeeded { .. }),
        "{late_success:?}"
    );
    assert_eq!(state(&importer_ctx, &id).await, Processing);
    let failed = end(&importer_ctx, &id, 2, false).await;
    assert_eq!(failed, MonitorOutcome::AlreadySucceeded { by_attempt: 1 });
    assert_eq!(retry.depth().await.unwrap().visible, 1, "no second retry");
    assert_eq!(
        dlq.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );
    let record = importer_ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!((record.state, record.attempts.processing), (Processed, 2));
    assert!(
        record.reason.contains("succeeded at attempt 1"),
        "{}",
        record.reason
    );
}

/// Two handlers may judge one attempt differently: the reconciler dead-letters a job Batch
/// forgot, the sweeper retries an attempt past its time. Whichever logged it first decides, and
/// the record follows the message that was sent: here the reconciler's handling died after its
/// DLQ notice, before the record; the sweeper's handling finds that log and abandons the item
/// (a PROCESSING_FAILED record with no retry coming would sit with nothing to move it).
#[tokio::test]
async fn an_attempt_already_dead_lettered_is_abandoned_not_left_failed() {
    use crate::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
    let config = Config::for_unit_tests(&[("GRANARY_PROCESSING_TIMEOUT_SECS", "60")]);
    let retry = Arc::new(MemoryQueue::new("retry"));
    let importer_ctx = Ctx {
        store: Arc::new(MemoryStore::new()),
        jobs: Arc::new(MemoryJobRunner::new(JobStatus::Running)),
        retry_queue: retry.clone(),
        ..Ctx::in_memory(config)
    };
    let id = processing(&importer_ctx, "forgotten-item", "job-forgotten").await;
    let attempt = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 1,
    };
    let forgotten = crate::domain::job_end::forgotten_by_batch(attempt, None, "job-forgotten");
    let record = LogRecord {
        granule_id: id.clone(),
        attempt: 1,
        outcome: LogOutcome::Failure,
        classification: forgotten.classification.clone(),
        route: forgotten.route,
        job_id: "job-forgotten".to_owned(),
        job_name: "n".to_owned(),
        logged_at: Utc::now(),
        routed_at: None,
        superseded: None,
        revoked: None,
        job: serde_json::json!({}),
        spot_ends_before: None,
    };
    let facts = importer_ctx.config.layout.id_parser.facts(&id);
    let key = LogKey::new(LogOutcome::Failure, &facts, &id, 1);
    let logs = importer_ctx.logs();
    let crate::repositories::logs::FailureLogged::New(log) =
        logs.log_failure(&key, record).await.unwrap()
    else {
        panic!("the log was there before");
    };
    logs.mark_routed(&key, log).await.unwrap();

    let late = Utc::now() + chrono::Duration::seconds(61);
    let s = sweep(&importer_ctx, late).await.unwrap();
    assert_eq!(s.errors, 0, "{s:?}");
    assert_eq!(state(&importer_ctx, &id).await, Abandoned);
    assert_eq!(
        retry.depth().await.unwrap(),
        crate::ports::QueueDepth::default(),
        "no retry was sent"
    );
}
