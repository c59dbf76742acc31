//! The operators' commands against the emulator: status's ETA, redrive (filters, dry run, an
//! interrupted redrive that loses nothing), hold/release, and resume.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use granary::adapters::aws::SqsQueue;
use granary::contracts::messages::RetryMessage;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::hold::Hold;
use granary::domain::lifecycle::ItemState::*;
use granary::domain::progress::Sample;
use granary::domain::tracker::{InventoryProgress, Tracker};
use granary::handlers::redrive::{redrive, RedriveFilter, RedriveOptions};
use granary::handlers::{item_sync, requeuer, resume};
use granary::ports::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
use granary::repositories::Versioned;
use granary_cli::ops::status;
use granary_tests::*;
use std::sync::atomic::{AtomicU64, Ordering};

#[tokio::test]
async fn status_reports_progress_queues_hold_and_eta_from_a_known_history() {
    let s = stack("status", 1, &[]).await;
    let ctx = &s.ctx;
    let t0 = DateTime::from_timestamp(1_750_000_000, 0).unwrap();
    // 3,000 rows an hour for four hours, 8,000 of 20,000 known rows left.
    let tracker = Tracker {
        inventories: vec![
            InventoryProgress {
                key: "inventories/a.parquet".into(),
                total_rows: Some(12_000),
                rows_submitted: 12_000,
                page_map: None,
                etag: None,
            },
            InventoryProgress {
                key: "inventories/b.parquet".into(),
                total_rows: Some(8_000),
                rows_submitted: 0,
                page_map: None,
                etag: None,
            },
        ],
        updated_at: Some(t0 + Duration::hours(4)),
        samples: (0..=4)
            .map(|h| Sample {
                at: t0 + Duration::hours(h),
                rows: 3_000 * h as u64,
            })
            .collect(),
        retry_windows: 0,
    };
    let mut v = Versioned {
        value: tracker,
        etag: None,
    };
    ctx.tracker().save(&mut v).await.unwrap();
    for i in 0..3 {
        ctx.failure_dlq
            .send(OutgoingMessage::new(format!("{{\"n\":{i}}}")))
            .await
            .unwrap();
    }
    ctx.retry_queue
        .send(OutgoingMessage::new("{}"))
        .await
        .unwrap();
    ctx.hold()
        .place(&Hold {
            reason: "image rollout".into(),
            held_by: "ops".into(),
            at: t0,
            evidence: Vec::new(),
            cancel: None,
        })
        .await
        .unwrap();

    let now = t0 + Duration::hours(4);
    let st = status::gather(ctx, now, true).await.unwrap();
    assert_eq!((st.rows_submitted, st.rows_known), (12_000, 20_000));
    assert_eq!(
        st.failure_dlq,
        QueueDepth {
            visible: 3,
            in_flight: 0
        }
    );
    assert_eq!(st.retry_queue.visible, 1);
    assert_eq!(
        st.hold.as_ref().map(|h| h.reason.as_str()),
        Some("image rollout")
    );
    let per_hour: Vec<f64> = st.rates.iter().map(|r| r.per_hour).collect();
    assert_eq!(per_hour, vec![3_000.0, 3_000.0, 3_000.0]);
    let eta = st.eta.unwrap();
    assert_eq!(eta.remaining_rows, 8_000);
    assert!((eta.hours - 8_000.0 / 3_000.0).abs() < 1e-9);
    assert_eq!(
        eta.at,
        now + Duration::milliseconds((8_000.0 / 3_000.0 * 3_600_000.0) as i64)
    );
}

#[tokio::test]
async fn the_feeder_submits_nothing_while_held_and_resumes_at_the_same_row() {
    let (s, granules) = stack_with_inventory("hold", &[], 60, "HO").await;
    let ctx = &s.ctx;
    assert_eq!(feed(ctx, 20).await.submitted, 20);
    ctx.hold()
        .place(&Hold {
            reason: "quota".into(),
            held_by: "ops".into(),
            at: Utc::now(),
            evidence: Vec::new(),
            cancel: None,
        })
        .await
        .unwrap();
    let held = feed(ctx, 20).await;
    assert_eq!(held.submitted, 0);
    assert!(
        held.early_exit.as_deref().unwrap().contains("held by ops"),
        "{held:?}"
    );
    assert_eq!(all_jobs(&s).await.len(), 20);
    ctx.store.delete(&ctx.config.layout.hold_key).await.unwrap();
    let resumed = feed(ctx, 20).await;
    assert_eq!((resumed.submitted, resumed.rows_submitted_total), (20, 40));
    // exactly rows 20..40 were submitted after the release
    let names: std::collections::BTreeSet<String> =
        all_jobs(&s).await.into_iter().map(|(n, _)| n).collect();
    for (row, g) in granules.iter().enumerate().take(40) {
        let name = granary::domain::job_name::job_name(None, &GranuleId::parse(g).unwrap(), 1);
        assert!(names.contains(&name), "row {row} was not submitted");
    }
    assert_eq!(names.len(), 40);
}

fn dlq_message(g: &str, attempt: u32, reason: &str) -> OutgoingMessage {
    let e = GranuleProcessingEvent {
        granule_id: GranuleId::parse(g).unwrap(),
        attempt,
    };
    OutgoingMessage::new(serde_json::to_string(&e).unwrap()).with_attribute("reason", reason)
}

async fn fill_dlq(q: &dyn Queue) {
    for (g, a, r) in [
        ("HLS.S30.T01AAA.2022001T000000.v2.0", 1, "exit code 2"),
        (
            "HLS.S30.T01BBB.2022001T000000.v2.0",
            4,
            "attempts exhausted",
        ),
        (
            "HLS.L30.T01CCC.2022001T000000.v2.0",
            4,
            "attempts exhausted",
        ),
        ("HLS.L30.T01DDD.2022001T000000.v2.0", 2, "exit code 137"),
        ("HLS.S30.T01EEE.2022001T000000.v2.0", 1, "exit code 2"),
    ] {
        q.send(dlq_message(g, a, r)).await.unwrap();
    }
    q.send(OutgoingMessage::new(
        r#"{"raw_granule_id":"bad id","inventory_key":"i","row":7}"#,
    ))
    .await
    .unwrap();
}

fn granules_of(msgs: &[ReceivedMessage]) -> Vec<String> {
    let mut out: Vec<String> = msgs
        .iter()
        .filter_map(|m| serde_json::from_str::<RetryMessage>(&m.body).ok())
        .map(|m| m.event.granule_id.to_string())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn redrive_filters_and_dry_runs() {
    let s = stack("redrive", 1, &[]).await;
    let (dlq, retry) = (s.ctx.failure_dlq.as_ref(), s.ctx.retry_queue.as_ref());
    fill_dlq(dlq).await;
    let by_reason = RedriveFilter {
        reason: Some(regex::Regex::new("^exit code").unwrap()),
        ..RedriveFilter::default()
    };
    let dry = RedriveOptions {
        dry_run: true,
        ..RedriveOptions::default()
    };
    let preview = redrive(dlq, retry, &by_reason, &dry, &|_| {})
        .await
        .unwrap();
    assert_eq!(preview.matched.len(), 3);
    assert_eq!(
        (preview.redriven, preview.not_granules, preview.not_matching),
        (0, 1, 2)
    );
    assert_eq!(
        dlq.depth().await.unwrap().visible,
        6,
        "a dry run moves nothing"
    );
    assert_eq!(
        retry.depth().await.unwrap(),
        granary::ports::QueueDepth::default()
    );

    let both = RedriveFilter {
        reason: Some(regex::Regex::new("^exit code").unwrap()),
        attempt: Some(1),
        granule: Some(regex::Regex::new(r"^HLS\.S30\.").unwrap()),
        granules: None,
        campaign: None,
    };
    let out = redrive(dlq, retry, &both, &RedriveOptions::default(), &|_| {})
        .await
        .unwrap();
    assert_eq!(out.redriven, 2);
    let sent = drain(&s.clients, &s.stack.retry_queue_url).await;
    assert_eq!(
        granules_of(&sent),
        [
            "HLS.S30.T01AAA.2022001T000000.v2.0",
            "HLS.S30.T01EEE.2022001T000000.v2.0"
        ]
    );
    assert!(sent.iter().all(|m| m.body.contains("\"redrive\":true")));
    assert_eq!(dlq.depth().await.unwrap().visible, 4);
}

/// A retry queue whose sends start failing after `ok` successes: the process dying mid-redrive.
struct FailingQueue {
    inner: SqsQueue,
    ok: AtomicU64,
}

#[async_trait]
impl Queue for FailingQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        if self.ok.load(Ordering::SeqCst) == 0 {
            return Err(QueueError::new(self.name(), "injected: connection reset"));
        }
        self.ok.fetch_sub(1, Ordering::SeqCst);
        self.inner.send(message).await
    }
    async fn receive(
        &self,
        max: u32,
        vis: u32,
        wait: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.inner.receive(max, vis, wait).await
    }
    async fn delete(&self, h: &str) -> Result<(), QueueError> {
        self.inner.delete(h).await
    }
    async fn release(&self, h: &str) -> Result<(), QueueError> {
        self.inner.release(h).await
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.inner.depth().await
    }
}

#[tokio::test]
async fn an_interrupted_redrive_loses_nothing_and_a_rerun_finishes_it() {
    let s = stack("redrivecut", 1, &[]).await;
    let dlq = s.ctx.failure_dlq.as_ref();
    fill_dlq(dlq).await;
    let failing = FailingQueue {
        inner: SqsQueue::new(s.clients.sqs.clone(), &s.stack.retry_queue_url),
        ok: AtomicU64::new(2),
    };
    let all = RedriveFilter::default();
    let cut = redrive(dlq, &failing, &all, &RedriveOptions::default(), &|_| {}).await;
    assert!(cut.is_err(), "the third send fails");
    // Nothing lost: every granule is on exactly one of the two queues, and all are visible now.
    let on_retry = retry_granules(&s).await;
    assert_eq!(on_retry.len(), 2);
    assert_eq!(
        dlq.depth().await.unwrap().visible,
        4,
        "3 granules + the invalid row left"
    );
    let rerun = redrive(
        dlq,
        s.ctx.retry_queue.as_ref(),
        &all,
        &RedriveOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!((rerun.redriven, rerun.not_granules), (3, 1));
    let mut everything = on_retry;
    everything.extend(retry_granules(&s).await);
    everything.sort();
    assert_eq!(everything.len(), 5);
    everything.dedup();
    assert_eq!(everything.len(), 5, "each granule redriven once");
    assert_eq!(
        dlq.depth().await.unwrap().visible,
        1,
        "the invalid row stays for a human"
    );
}

async fn retry_granules(s: &TestStack) -> Vec<String> {
    granules_of(&drain(&s.clients, &s.stack.retry_queue_url).await)
}

#[tokio::test]
async fn a_redriven_exhausted_granule_gets_one_more_attempt() {
    let s = stack("redrivereq", 1, &[("GRANARY_MAX_RETRIES", "1")]).await;
    let g = "HLS.S30.T01FFF.2022001T000000.v2.0";
    let m = RetryMessage::redriven(GranuleProcessingEvent {
        granule_id: GranuleId::parse(g).unwrap(),
        attempt: 2,
    });
    let out = requeuer::handle_message(&s.ctx, &serde_json::to_string(&m).unwrap())
        .await
        .unwrap();
    assert!(
        matches!(
            out,
            requeuer::RequeueOutcome::Resubmitted { attempt: 3, .. }
        ),
        "{out:?}"
    );
    // The DLQ is at least once (a crash between a dead letter's send and its mark sends a copy;
    // SQS may deliver one): the copy redriven too finds attempt 3 submitted and submits nothing.
    let copy = requeuer::handle_message(&s.ctx, &serde_json::to_string(&m).unwrap())
        .await
        .unwrap();
    assert!(
        matches!(
            copy,
            requeuer::RequeueOutcome::AlreadySubmitted { attempt: 3 }
        ),
        "{copy:?}"
    );
    // without the flag, attempt 3 is past the budget of 2
    let plain = serde_json::to_string(&m.event).unwrap();
    let out = requeuer::handle_message(&s.ctx, &plain).await.unwrap();
    assert!(
        matches!(out, requeuer::RequeueOutcome::DeadLettered { .. }),
        "{out:?}"
    );
}

#[tokio::test]
async fn resume_puts_a_failed_item_back_at_its_last_successful_state() {
    let s = stack("resume", 1, &[("GRANARY_MAX_RETRIES", "0")]).await;
    let ctx = &s.ctx;
    let importer_ctx = ctx.clone();
    let id = GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap();
    let first = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 1,
    };
    item_sync::submitted(ctx, &first, "job-1", None, "test")
        .await
        .unwrap();
    // Its application failed: dead-lettered, the item ABANDONED (nothing automatic retries it).
    let dead_lettered = granary::domain::lifecycle::decisions::end_states(
        granary::domain::classify::Route::FailureDlq,
    );
    let end = item_sync::End {
        job_id: "job-1",
        ends: dead_lettered,
        reason: "exit code 2",
        listed_in: None,
        repeated: false,
    };
    item_sync::finished(ctx, &first, end, "job-monitor")
        .await
        .unwrap();
    let untouched = GranuleId::parse("HLS.L30.T18TYN.2020002T153012.v2.0").unwrap();
    item_sync::submitted(
        ctx,
        &GranuleProcessingEvent {
            granule_id: untouched.clone(),
            attempt: 1,
        },
        "job-2",
        None,
        "test",
    )
    .await
    .unwrap();

    let dry = resume::resume(&importer_ctx, &[id.clone(), untouched.clone()], true)
        .await
        .unwrap();
    assert_eq!(dry.resumed.len(), 1);
    assert_eq!(
        ctx.items().get(&id).await.unwrap().unwrap().value.state,
        Abandoned
    );

    let done = resume::resume(&importer_ctx, &[id.clone(), untouched.clone()], false)
        .await
        .unwrap();
    assert_eq!(done.resumed[0].next_attempt, 2);
    assert_eq!(
        done.not_failed,
        vec![(untouched.to_string(), "PROCESSING".to_owned())]
    );
    let r = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!(
        (r.state, r.attempts.processing),
        (Ready, 1),
        "back at its last successful state"
    );
    // The requeuer grants attempt 2 although the budget (1 attempt) is spent.
    let msgs = drain(&s.clients, &s.stack.retry_queue_url).await;
    assert_eq!(msgs.len(), 1);
    requeuer::handle_message(ctx, &msgs[0].body).await.unwrap();
    let r = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!((r.state, r.attempts.processing), (Processing, 2));
    let path: Vec<_> = ctx
        .items()
        .history(&id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.to)
        .collect();
    assert_eq!(
        path,
        vec![
            Ready,
            Processing,
            ProcessingFailed,
            Abandoned,
            Ready,
            Processing
        ]
    );
    assert_eq!(all_jobs(&s).await.len(), 1, "attempt 2 submitted to Batch");
}
