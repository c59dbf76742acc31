//! The ingest queue's functions run the way the template deploys them, every call recorded as
//! the IAM access it needs: ingest-submit (a message delivered twice), the dispatcher (two
//! batches: clean objects, a digest mismatch, an unreadable line, a failing callback, cleanup)
//! and the job monitor (the processing jobs' ends: a success, a Spot reclaim, an application
//! failure), with some events lost so the dispatcher's DescribeJobs finds those ends.

use super::{account, stack};
use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use granary::adapters::memory::{
    job_state_change, Ending, MemoryEventBus, MemoryJobRunner, MemoryQueue, MemoryRemote,
    MemoryStore,
};
use granary::adapters::tap::access_log::{Access, AccessLog};
use granary::adapters::tap::{Tap, TappedJobs, TappedQueue, TappedStore};
use granary::config::{Config, Function};
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::ingest::{self, TickSummary};
use granary::handlers::{monitor, Ctx};
use granary::ports::{BusEvent, EventBus, EventBusError, ObjectStore, PutCondition};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A bus that records the PutEvents access its calls need.
pub struct RecordingBus {
    pub inner: MemoryEventBus,
    pub arn: String,
    pub seen: Mutex<BTreeSet<Access>>,
}

#[async_trait]
impl EventBus for RecordingBus {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(Access {
                action: "events:PutEvents",
                resource: self.arn.clone(),
            });
        self.inner.put_events(events).await
    }
}

/// Batch whose first SubmitJob answer is lost (the job is created; a read timeout): the
/// processing claim keeps its lease, and the tick after it finds the job by name (ListJobs).
pub struct FirstAnswerLost {
    pub inner: Arc<MemoryJobRunner>,
    pub lost: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl granary::ports::JobRunner for FirstAnswerLost {
    async fn submit(
        &self,
        request: granary::ports::JobRequest,
    ) -> Result<granary::ports::JobSummary, granary::ports::JobRunnerError> {
        let job = self.inner.submit(request).await?;
        if !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(granary::ports::JobRunnerError::ambiguous("read timeout"));
        }
        Ok(job)
    }
    async fn count_active(
        &self,
        n: u64,
    ) -> Result<granary::ports::ActiveJobs, granary::ports::JobRunnerError> {
        self.inner.count_active(n).await
    }
    async fn terminate(
        &self,
        id: &str,
        reason: &str,
    ) -> Result<(), granary::ports::JobRunnerError> {
        self.inner.terminate(id, reason).await
    }
    async fn find_by_name(
        &self,
        name: &str,
    ) -> Result<Option<granary::ports::JobSummary>, granary::ports::JobRunnerError> {
        self.inner.find_by_name(name).await
    }
    async fn describe(
        &self,
        id: &str,
    ) -> Result<Option<granary::ports::JobDescription>, granary::ports::JobRunnerError> {
        self.inner.describe(id).await
    }
}

pub fn env_of(logical_id: &str) -> BTreeMap<String, String> {
    let (_, resolved) = stack();
    resolved
        .function(logical_id)
        .and_then(|f| f.environment())
        .expect("the function and its environment resolve")
}

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

pub struct Recorded {
    ingest_ctx: Ctx,
    log: Arc<AccessLog>,
    bus: Arc<RecordingBus>,
    jobs: Arc<MemoryJobRunner>,
}

/// The config function `f` (template logical id `logical_id`) reads from its environment.
fn config_of(logical_id: &str, f: Function) -> Config {
    let env = env_of(logical_id);
    Config::for_sections(f.sections(), |k| env.get(k).cloned()).unwrap()
}

/// The ingest context function `logical_id` gets, on in-memory ports, its calls recorded.
fn recorded(
    logical_id: &str,
    f: Function,
    store: Arc<MemoryStore>,
    remote: Arc<MemoryRemote>,
    dlq: Arc<MemoryQueue>,
) -> Recorded {
    let config = config_of(logical_id, f);
    let settings = config.ingest.clone();
    let log = Arc::new(AccessLog::new(&config, account()));
    let (s, _) = stack();
    let bus = Arc::new(RecordingBus {
        inner: MemoryEventBus::default(),
        arn: format!(
            "arn:{}:events:{}:{}:event-bus/{}",
            s.partition, s.region, s.account, settings.bus_name
        ),
        seen: Mutex::default(),
    });
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let tap = log.clone() as Arc<dyn Tap>;
    let mut config = config;
    // Claims are taken over at once here, so the lost answer's job is found by name in the next
    // tick (with the stack's lease, 15 minutes later).
    config.leases.claim_lease = std::time::Duration::ZERO;
    // A stack with an identifier service mints from it (its twin here).
    let minter = config.ingest.ezid.as_ref().map(|_| {
        Arc::new(granary::adapters::memory::MemoryMinter::default())
            as Arc<dyn granary::ports::Minter>
    });
    let ingest_ctx = Ctx {
        minter,
        store: Arc::new(TappedStore {
            inner: store,
            tap: tap.clone(),
        }),
        jobs: Arc::new(TappedJobs {
            inner: Arc::new(FirstAnswerLost {
                inner: jobs.clone(),
                lost: false.into(),
            }),
            tap: tap.clone(),
        }),
        remote,
        bus: bus.clone(),
        failure_dlq: Arc::new(TappedQueue { inner: dlq, tap }),
        ..Ctx::in_memory(config)
    };
    Recorded {
        ingest_ctx,
        log,
        bus,
        jobs,
    }
}

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.to_owned());
    m.body = Some(body.to_owned());
    m
}

/// What each function needed, by its logical id in the template.
pub type Needs = BTreeMap<&'static str, BTreeSet<Access>>;

pub const SUBMIT: &str = "IngestSubmitFunction";
pub const DISPATCHER: &str = "IngestDispatcherFunction";
pub const MONITOR: &str = "JobMonitorFunction";

/// Runs two batches through the ingest functions and the job monitor; returns what each
/// function's calls needed, after checking the run went where it was meant to.
pub async fn ingest_needs() -> Needs {
    let store = Arc::new(MemoryStore::new());
    let remote = Arc::new(MemoryRemote::default());
    let monitor_config = config_of(MONITOR, Function::JobMonitor);
    let (retry_url, dlq_url) = monitor_config.queue_names();
    let dlq = Arc::new(MemoryQueue::new(&dlq_url));
    let submit = recorded(
        SUBMIT,
        Function::IngestSubmit,
        store.clone(),
        remote.clone(),
        dlq.clone(),
    );
    let dispatch = recorded(
        DISPATCHER,
        Function::IngestDispatcher,
        store.clone(),
        remote.clone(),
        dlq.clone(),
    );
    let monitor_log = Arc::new(AccessLog::new(&monitor_config, account()));
    let monitor_ctx = Ctx {
        store: store.clone(),
        jobs: Arc::new(granary::adapters::unset::UnsetJobRunner),
        retry_queue: Arc::new(MemoryQueue::new(&retry_url)),
        failure_dlq: dlq.clone(),
        ..Ctx::in_memory(monitor_config)
    }
    .tapped(monitor_log.clone() as Arc<dyn Tap>);
    let bucket = dispatch.ingest_ctx.config.layout.bucket.clone();

    // Two batches: one clean but for a processing job whose failure event is lost; one with a
    // digest mismatch, an unreadable line, a processing job that fails, one reclaimed by Spot,
    // and a callback that fails.
    let mut manifests = Vec::new();
    for (name, bad) in [("clean", false), ("troubled", true), ("plain", false)] {
        let mut text = String::from("#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n");
        for n in 0..4 {
            let url = format!("http://archive/{name}/{n}.dat");
            let body = format!("{name} {n}");
            remote.serve(&url, Bytes::from(body.clone()));
            let digest = if bad && n == 1 {
                "0".repeat(32)
            } else {
                md5_hex(body.as_bytes())
            };
            text.push_str(&format!(
                "{url} | md5 | {digest} | | {n}.dat | {name}-{n}\n"
            ));
        }
        if bad {
            text.push_str("not a url | | | | x | x\n");
        }
        let key = format!("ingest/manifests/{name}.checkm");
        store
            .put(&key, Bytes::from(text), PutCondition::Overwrite)
            .await
            .unwrap();
        manifests.push(format!("s3://{bucket}/{key}"));
    }
    remote.fail_callbacks_to("http://depositor/down");
    let bodies: Vec<String> = manifests
        .iter()
        .zip([None, Some("http://depositor/down"), None])
        .map(|(m, cb)| {
            serde_json::to_string(&Submission {
                collection: "maps".into(),
                manifest_url: m.clone(),
                kind: ManifestKind::Files,
                priority: 5,
                callback: cb.map(str::to_owned),
                profile: None,
                submitter: "svc".into(),
                deposit: Default::default(),
            })
            .unwrap()
        })
        .collect();
    // The second message is delivered twice: it finds its batch.
    let mut event = SqsEvent::default();
    event.records = vec![
        message("m-1", &bodies[0]),
        message("m-2", &bodies[1]),
        message("m-2", &bodies[1]),
        message("m-3", &bodies[2]),
    ];
    let response = ingest::handle_submissions(&submit.ingest_ctx, event, chrono::Utc::now()).await;
    assert!(response.batch_item_failures.is_empty());

    let mut lost_answers = 0;
    for _ in 0..40 {
        let s = ingest::tick(&dispatch.ingest_ctx, chrono::Utc::now())
            .await
            .unwrap_or_else(|e| panic!("tick: {e}"));
        // The step whose SubmitJob answer was lost fails (the others go on); the next tick finds
        // the job by name.
        match s.errors {
            0 => {}
            1 if lost_answers == 0 => {
                lost_answers += 1;
                continue;
            }
            n => panic!("{n} steps failed: {s:?}"),
        }
        let mut ended = 0;
        for (request, job) in dispatch.jobs.running() {
            let id =
                granary::domain::ingest::index::JobId::parse(&request.environment["INGEST_JOB_ID"])
                    .unwrap();
            let record = dispatch
                .ingest_ctx
                .ingest()
                .job(&id)
                .await
                .unwrap()
                .unwrap()
                .value;
            let first = job.job_name.ends_with("-a1");
            // (how it ends, whether its event reaches the monitor)
            let (ending, delivered) = match record.object.local_id.as_deref() {
                Some("troubled-2") => (Ending::Exited(1), true),
                Some("troubled-3") if first => (Ending::SpotReclaimed, true),
                Some("clean-3") => (Ending::Exited(1), false),
                Some("clean-2") if first => (Ending::SpotReclaimed, false),
                _ => (Ending::Succeeded, true),
            };
            let detail = dispatch.jobs.end(&job.job_id, ending).unwrap();
            if delivered {
                let event = job_state_change(&detail).to_string();
                monitor::handle_message(&monitor_ctx, &event).await.unwrap();
            }
            ended += 1;
        }
        // A completed batch waits for its archive job (no archive dispatcher runs here).
        let quiet = TickSummary {
            batches_waiting_for_archive: s.batches_waiting_for_archive,
            ..TickSummary::default()
        };
        if s == quiet && ended == 0 {
            break;
        }
    }
    assert_eq!(lost_answers, 1, "the lost SubmitJob answer never happened");
    // The run went where it was meant to: two batches reported and failed (the processing
    // failures, the mismatch, the unreadable line, the callback), each processing failure
    // dead-lettered once it was known — by the monitor or by the dispatcher; the plain one
    // completed and waits for the archive job it created.
    let statuses = granary::handlers::ingest::operator::status(&dispatch.ingest_ctx, None)
        .await
        .unwrap();
    use granary::domain::ingest::batch::BatchState;
    let states: Vec<BatchState> = statuses.iter().map(|b| b.batch.state).collect();
    assert_eq!(
        states.iter().filter(|s| **s == BatchState::Failed).count(),
        2,
        "{statuses:?}"
    );
    assert!(states.contains(&BatchState::Completed), "{statuses:?}");
    assert_eq!(dispatch.ingest_ctx.archives().ids().await.unwrap().len(), 1);
    assert_eq!(dlq.messages().len(), 2, "{:?}", dlq.messages());
    let mut dispatcher_needs = dispatch.log.accesses();
    dispatcher_needs.extend(dispatch.bus.seen.lock().unwrap().iter().cloned());
    // EZID's credentials are read once at start-up (wiring, not a port): the access it needs is
    // the parameter the template names for the dispatcher.
    let ezid = &dispatch.ingest_ctx.config.ingest.ezid;
    let credentials = ezid.as_ref().and_then(|e| e.credentials_parameter.clone());
    assert_eq!(credentials.as_deref(), Some(super::EZID_CREDENTIALS));
    let (s, _) = stack();
    dispatcher_needs.insert(Access {
        action: "ssm:GetParameter",
        resource: format!(
            "arn:{}:ssm:{}:{}:parameter{}",
            s.partition,
            s.region,
            s.account,
            super::EZID_CREDENTIALS
        ),
    });
    // Every completed object was minted an identifier (the run's minting is real).
    let mut minted = 0;
    for b in dispatch.ingest_ctx.ingest().batch_ids().await.unwrap() {
        for j in dispatch
            .ingest_ctx
            .ingest()
            .batch_job_records(&b)
            .await
            .unwrap()
        {
            minted += usize::from(j.identifier.is_some());
        }
    }
    assert!(minted >= 4, "{minted} objects got an identifier");
    Needs::from([
        (SUBMIT, submit.log.accesses()),
        (DISPATCHER, dispatcher_needs),
        (MONITOR, monitor_log.accesses()),
    ])
}
