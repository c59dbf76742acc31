//! The crash-point harness: every handler is stopped at each of its external calls in turn — the
//! call never made, or made and its answer lost — and the platform then does what AWS does after
//! a dead invocation (the SQS message comes back once its visibility timeout passes, the schedule
//! fires again, an operator reruns an interrupted command) until nothing moves any more. After
//! each run the promise is audited: no item stranded, no (granule, attempt) submitted twice, every
//! failure that ends an item dead-lettered with a reason, every success logged.
//!
//! Everything runs on the in-memory twins; the handlers are the production ones, and each
//! invocation's S3, SQS and Batch calls pass through one `Faults` (see `adapters::faults`).

use chrono::Utc;
use granary::adapters::faults::{CrashMode, CrashPoint, FaultCounts, Faults};
use granary::adapters::memory::{MemoryJobRunner, MemoryQueue, MemorySource, MemoryStore};
use granary::config::Config;
use granary::domain::batch_event::JobStatus;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::item::{Change, ItemQuery, NewItem};
use granary::domain::lifecycle::ItemState;
use granary::handlers::importer::{self, discover, sweeper, Importer, ObjectsExist};
use granary::handlers::{feeder, item_sync, monitor, reconciler, requeuer, resume, Ctx};
use granary::inventory::{write_inventory, InventoryLayout, InventoryRow};
use granary::ports::{JobRunner, PutCondition, Queue, SourceFile};
use granary::redrive::{self, RedriveFilter, RedriveOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const BACKFILL: [&str; 2] = [
    "HLS.S30.T18TYN.2022002T153012.v2.0",
    "HLS.L30.T18TYN.2022001T153012.v2.0",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Feeder,
    Discover,
    ImportStep,
    Requeuer,
    MonitorSuccess,
    MonitorFailure,
    Reconciler,
    SweeperProcessing,
    SweeperDownload,
    Revalidate,
    Resume,
    Redrive,
}

const ALL: [Scenario; 12] = [
    Scenario::Feeder,
    Scenario::Discover,
    Scenario::ImportStep,
    Scenario::Requeuer,
    Scenario::MonitorSuccess,
    Scenario::MonitorFailure,
    Scenario::Reconciler,
    Scenario::SweeperProcessing,
    Scenario::SweeperDownload,
    Scenario::Revalidate,
    Scenario::Resume,
    Scenario::Redrive,
];

struct World {
    imp: Importer,
    jobs: Arc<MemoryJobRunner>,
    import: Arc<MemoryQueue>,
    retry: Arc<MemoryQueue>,
    dlq: Arc<MemoryQueue>,
    events: Arc<MemoryQueue>,
    /// Attempts whose job fails in the application (exit code 1: dead-lettered).
    failing_attempts: BTreeSet<u32>,
    /// Final events EventBridge never delivers: only the reconciler learns those ends.
    lose_events: bool,
    /// Whether the feeder's schedule fires (the backfill scenarios).
    feeder: bool,
    /// Whether the importer-discover schedule fires.
    discover: bool,
}

fn world(scenario: Scenario) -> World {
    let config = Config::from_pairs(&[
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
        ("GRANARY_IMPORT_QUEUE_URL", "import"),
        ("GRANARY_MAX_RETRIES", "2"),
        // A dead invocation's claim is taken over at its next delivery (time is moved on by
        // expiring visibility timeouts, not by waiting).
        ("GRANARY_CLAIM_LEASE_SECS", "0"),
        ("GRANARY_ROUTE_LEASE_SECS", "0"),
    ])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let retry = Arc::new(MemoryQueue::new("retry"));
    let dlq = Arc::new(MemoryQueue::new("dlq"));
    let import = Arc::new(MemoryQueue::new("import"));
    let ctx = Ctx {
        config,
        store: store.clone(),
        jobs: jobs.clone(),
        retry_queue: retry.clone(),
        failure_dlq: dlq.clone(),
    };
    let body = bytes::Bytes::from_static(b"a raw granule file");
    let file = SourceFile {
        url: "mem://source/granule-a.bin".into(),
        name: "granule-a.bin".into(),
        size: Some(body.len() as u64),
        last_modified: Some(Utc::now()),
        version: None,
        digest: None,
    };
    let imp = Importer {
        ctx,
        source: Some(Arc::new(MemorySource {
            files: vec![(file, body)],
        })),
        import_queue: Some(import.clone()),
        prerequisites: Arc::new(ObjectsExist {
            templates: vec![],
        }),
    };
    World {
        imp,
        jobs,
        import,
        retry,
        dlq,
        events: Arc::new(MemoryQueue::new("batch-events")),
        failing_attempts: match scenario {
            Scenario::MonitorFailure | Scenario::Resume | Scenario::Redrive => BTreeSet::from([1]),
            _ => BTreeSet::new(),
        },
        lose_events: scenario == Scenario::Reconciler,
        feeder: scenario == Scenario::Feeder,
        discover: scenario == Scenario::Discover,
    }
}

fn ctx(w: &World) -> &Ctx {
    &w.imp.ctx
}

/// Handles every visible message of `queue` with `handle`; deletes the ones handled (as Lambda
/// does with records not reported failed). Returns how many it handled.
async fn drain<F, Fut, T, E>(queue: &MemoryQueue, handle: F) -> u64
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut handled = 0;
    loop {
        let got = queue.receive(10, 30, 0).await.unwrap();
        if got.is_empty() {
            return handled;
        }
        for m in got {
            handled += 1;
            if handle(m.body.clone()).await.is_ok() {
                queue.delete(&m.receipt_handle).await.unwrap();
            }
        }
    }
}

/// Batch runs every RUNNING job to its end and, unless events are lost, EventBridge delivers the
/// final event to the events queue.
async fn finish_jobs(w: &World) -> u64 {
    let mut finished = 0;
    for request in w.jobs.submitted() {
        let Some(job) = w.jobs.find_by_name(&request.job_name).await.unwrap() else {
            continue;
        };
        if job.status != JobStatus::Running {
            continue;
        }
        let attempt: u32 = request.parameters["attempt"].parse().unwrap();
        let fails = w.failing_attempts.contains(&attempt);
        let mut detail = w.jobs.describe(&job.job_id).await.unwrap().unwrap().detail;
        let (status, exit) = if fails {
            (JobStatus::Failed, 1)
        } else {
            (JobStatus::Succeeded, 0)
        };
        detail["status"] = status.as_str().into();
        detail["statusReason"] = "Essential container in task exited".into();
        detail["attempts"] = serde_json::json!([{"container": {"exitCode": exit}}]);
        w.jobs.finish(&job.job_id, status, detail.clone());
        if !w.lose_events {
            let event = serde_json::json!({
                "version": "0", "id": format!("event-{}", job.job_id),
                "detail-type": "Batch Job State Change", "source": "aws.batch",
                "account": "000000000000", "time": Utc::now().to_rfc3339(),
                "region": "us-east-1", "resources": [], "detail": detail,
            });
            w.events
                .send(granary::ports::OutgoingMessage::new(event.to_string()))
                .await
                .unwrap();
        }
        finished += 1;
    }
    finished
}

/// The platform, fault-free, until nothing moves: the feeder's schedule, the import, retry and
/// events queues' event sources, Batch, and the sweeper's schedule (reconciler, then sweeper) a
/// day later. Between rounds every visibility timeout runs out, so what a dead invocation left
/// behind is delivered again.
async fn settle(w: &World) -> Result<(), String> {
    let c = ctx(w);
    for _ in 0..60 {
        // The visibility timeout of whatever a dead invocation held has passed.
        for q in [&w.import, &w.retry, &w.events, &w.dlq] {
            q.expire_visibility();
        }
        let mut activity = 0;
        if w.feeder {
            let run = feeder::run(
                c,
                feeder::FeederEvent {
                    granule_submit_count: 10,
                },
            )
            .await
            .map_err(|e| format!("feeder: {e}"))?;
            activity += run.submitted;
        }
        if w.discover {
            let run = discover::discover(&w.imp)
                .await
                .map_err(|e| format!("discover: {e}"))?;
            activity += run.new;
        }
        activity += drain(&w.import, |b| async move {
            importer::handle_message(&w.imp, &b).await
        })
        .await;
        activity += drain(&w.retry, |b| async move {
            requeuer::handle_message(c, &b).await
        })
        .await;
        activity += finish_jobs(w).await;
        activity += drain(&w.events, |b| async move {
            monitor::handle_message(c, &b).await
        })
        .await;
        let later = Utc::now() + chrono::Duration::days(1);
        let r = reconciler::reconcile(c, later)
            .await
            .map_err(|e| e.to_string())?;
        activity += r.recovered + r.closed;
        let s = sweeper::sweep(&w.imp, later)
            .await
            .map_err(|e| e.to_string())?;
        activity += s.retried + s.gave_up + s.finished_by_batch + s.stale_markers;
        if activity == 0 {
            return Ok(());
        }
    }
    Err("the platform did not settle in 60 rounds".into())
}

async fn only_item(w: &World) -> GranuleId {
    let items = ctx(w).items().find(&ItemQuery::default()).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    items[0].id.clone()
}

/// Brings the world to the moment just before the invocation under test.
async fn prepare(w: &World, scenario: Scenario) {
    let c = ctx(w);
    use Scenario::*;
    match scenario {
        Feeder => {
            let rows: Vec<InventoryRow> = BACKFILL
                .iter()
                .map(|id| InventoryRow {
                    granule_id: (*id).to_owned(),
                    start_datetime: "2022-01-01T15:30:12Z".into(),
                })
                .collect();
            let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
            let key = format!("{}0001.parquet", c.config.inventory_prefix);
            c.store
                .put(&key, bytes, PutCondition::Overwrite)
                .await
                .unwrap();
        }
        Discover => {}
        SweeperProcessing => {
            // PROCESSING with a job Batch does not know, past its timeout.
            let id = GranuleId::parse("lost-job-item").unwrap();
            c.items()
                .create(NewItem::ready(id.clone(), "t", None), "t")
                .await
                .unwrap();
            let event = GranuleProcessingEvent {
                granule_id: id,
                attempt: 1,
            };
            item_sync::submitted(c, &event, "no-such-job", None, "t")
                .await
                .unwrap();
        }
        _ => {
            discover::discover(&w.imp).await.unwrap();
            if scenario == ImportStep {
                return;
            }
            if scenario == SweeperDownload {
                // A download whose Lambda timed out again and again: its message went to the
                // import queue's dead-letter queue, the item is left DOWNLOADING.
                let id = only_item(w).await;
                for m in w.import.receive(10, 30, 0).await.unwrap() {
                    w.import.delete(&m.receipt_handle).await.unwrap();
                }
                c.items()
                    .advance(&id, "t", |r| {
                        (r.state == ItemState::Discovered)
                            .then(|| Change::to(ItemState::Downloading, "download attempt 1"))
                    })
                    .await
                    .unwrap();
                return;
            }
            drain(&w.import, |b| async move {
                importer::handle_message(&w.imp, &b).await
            })
            .await;
            if scenario == Requeuer {
                return;
            }
            drain(&w.retry, |b| async move {
                requeuer::handle_message(c, &b).await
            })
            .await;
            finish_jobs(w).await;
            if matches!(scenario, MonitorSuccess | MonitorFailure | Reconciler) {
                return;
            }
            settle(w).await.unwrap();
            if scenario == Revalidate {
                // The stored file went bad after processing: re-validation fails it.
                let record = c.items().get(&only_item(w).await).await.unwrap().unwrap();
                let key = record.value.stored_key.clone().unwrap();
                c.store
                    .put(
                        &key,
                        bytes::Bytes::from_static(b"damaged"),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
                let message = serde_json::json!({"item_id": record.value.id, "step": "revalidate"});
                w.import
                    .send(granary::ports::OutgoingMessage::new(message.to_string()))
                    .await
                    .unwrap();
            }
        }
    }
}

/// Runs the invocation under test with its external calls passing through `faults`, and does what
/// the platform does with its answer (deletes the message it handled, if it lived).
async fn act(w: &World, scenario: Scenario, faults: &Arc<Faults>) {
    let imp = w.imp.with_faults(faults);
    let c = &imp.ctx;
    let later = Utc::now() + chrono::Duration::days(1);
    use Scenario::*;
    let take = |q: Arc<MemoryQueue>| async move {
        let got = q.receive(1, 30, 0).await.unwrap();
        assert_eq!(got.len(), 1, "the scenario's message is not there");
        got.into_iter().next().unwrap()
    };
    let (queue, message) = match scenario {
        Feeder => {
            let _ = feeder::run(
                c,
                feeder::FeederEvent {
                    granule_submit_count: 10,
                },
            )
            .await;
            return;
        }
        Reconciler => {
            let _ = reconciler::reconcile(c, later).await;
            return;
        }
        Discover => {
            let _ = discover::discover(&imp).await;
            return;
        }
        SweeperProcessing | SweeperDownload => {
            let _ = sweeper::sweep(&imp, later).await;
            return;
        }
        Resume => {
            let id = only_item(w).await;
            if resume::resume(&imp, std::slice::from_ref(&id), false)
                .await
                .is_err()
                || faults.crashed()
            {
                // An operator reruns a command that died.
                resume::resume(&w.imp, &[id], false).await.unwrap();
            }
            return;
        }
        Redrive => {
            let opts = RedriveOptions {
                per_second: 10_000.0,
                visibility_secs: 30,
                ..RedriveOptions::default()
            };
            let run = redrive::redrive(
                c.failure_dlq.as_ref(),
                c.retry_queue.as_ref(),
                &RedriveFilter::default(),
                &opts,
                &|_| {},
            )
            .await;
            if run.is_err() || faults.crashed() {
                w.dlq.expire_visibility();
                redrive::redrive(
                    w.dlq.as_ref(),
                    w.retry.as_ref(),
                    &RedriveFilter::default(),
                    &opts,
                    &|_| {},
                )
                .await
                .unwrap();
            }
            return;
        }
        ImportStep | Revalidate => (w.import.clone(), take(w.import.clone()).await),
        Requeuer => (w.retry.clone(), take(w.retry.clone()).await),
        MonitorSuccess | MonitorFailure => (w.events.clone(), take(w.events.clone()).await),
    };
    let ok = match scenario {
        ImportStep | Revalidate => importer::handle_message(&imp, &message.body).await.is_ok(),
        Requeuer => requeuer::handle_message(c, &message.body).await.is_ok(),
        _ => monitor::handle_message(c, &message.body).await.is_ok(),
    };
    if ok && !faults.crashed() {
        queue.delete(&message.receipt_handle).await.unwrap();
    }
}

/// What is wrong with the settled world; empty when the promise held.
async fn audit(w: &World) -> Vec<String> {
    let c = ctx(w);
    let mut problems = Vec::new();
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    for r in w.jobs.submitted() {
        *names.entry(r.job_name).or_default() += 1;
    }
    for (name, n) in &names {
        if *n > 1 {
            problems.push(format!("{name} submitted {n} times"));
        }
    }
    let dlq = w.dlq.messages();
    for m in &dlq {
        if m.attributes.get("reason").is_none_or(|r| r.is_empty()) {
            problems.push(format!("DLQ message without a reason: {}", m.body));
        }
    }
    let logs: Vec<String> = c
        .store
        .list(&c.config.log_prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    let items = c.items().find(&ItemQuery::default()).await.unwrap();
    if w.feeder {
        for g in BACKFILL {
            if !items.iter().any(|r| r.id.as_str() == g) {
                problems.push(format!("{g} from the inventory has no item record"));
            }
        }
    }
    for r in &items {
        let id = r.id.as_str();
        let on_dlq = dlq.iter().any(|m| m.body.contains(id));
        let logged = |outcome: &str| {
            logs.iter()
                .any(|k| k.contains(id) && k.contains(&format!("outcome={outcome}")))
        };
        match r.state {
            ItemState::Processed if !logged("success") => {
                problems.push(format!("{id} PROCESSED without a success log"))
            }
            ItemState::Processed | ItemState::Skipped => {}
            ItemState::ProcessingFailed | ItemState::Abandoned | ItemState::Ignore if !on_dlq => {
                problems.push(format!("{id} ended {} and is not on the DLQ", r.state))
            }
            ItemState::ProcessingFailed if !logged("failure") => {
                problems.push(format!("{id} PROCESSING_FAILED without a failure log"))
            }
            ItemState::ProcessingFailed | ItemState::Abandoned | ItemState::Ignore => {}
            other => problems.push(format!("{id} stranded in {other}: {}", r.reason)),
        }
    }
    problems
}

#[tokio::test]
async fn every_crash_point_of_every_handler_loses_nothing_and_submits_nothing_twice() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for scenario in ALL {
        // How many external calls the invocation makes when nothing goes wrong.
        let w = world(scenario);
        prepare(&w, scenario).await;
        let clean = Faults::new(None, 0.0, 0, Arc::default());
        act(&w, scenario, &clean).await;
        settle(&w).await.unwrap();
        let problems = audit(&w).await;
        assert!(
            problems.is_empty(),
            "{scenario:?} without a crash: {problems:?}"
        );
        let calls = clean.calls();
        assert!(calls > 0, "{scenario:?} made no external call");

        let mut crashes = 0;
        for at_call in 1..=calls {
            for mode in [CrashMode::Before, CrashMode::After] {
                let w = world(scenario);
                prepare(&w, scenario).await;
                let totals = Arc::new(FaultCounts::default());
                let faults = Faults::new(Some(CrashPoint { at_call, mode }), 0.0, 0, totals);
                act(&w, scenario, &faults).await;
                crashes += u64::from(faults.crashed());
                let outcome = match settle(&w).await {
                    Ok(()) => audit(&w).await,
                    Err(e) => vec![e],
                };
                if !outcome.is_empty() {
                    failures.push(format!(
                        "{scenario:?} crash {mode:?} call {at_call}: {outcome:?}"
                    ));
                }
            }
        }
        // Every crash point was reached: the harness cannot pass by never crashing.
        assert_eq!(crashes, 2 * calls, "{scenario:?}");
        report.push(format!("{scenario:?}: {calls} calls, {crashes} crashes"));
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_malformed_import_message_is_recorded_and_dead_lettered_at_once() {
    let w = world(Scenario::ImportStep);
    let report = importer::handle_message(&w.imp, "{\"item_id\": 42}")
        .await
        .expect("a poison message is handled, not redelivered");
    assert!(report.steps[0].starts_with("rejected: malformed import message"));
    let c = ctx(&w);
    let rejects = c.store.list(&c.config.reject_prefix).await.unwrap();
    assert_eq!(rejects.len(), 1);
    assert!(rejects[0].key.contains("kind=malformed_import_message"));
    assert_eq!(
        w.dlq.messages()[0].attributes["kind"],
        "malformed_import_message"
    );
}
