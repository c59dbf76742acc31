//! IAM proven by use for the ingest functions: a whole batch (clean objects, a digest mismatch,
//! an unreadable line, a failing processing job, a failing callback, cleanup) runs through the
//! dispatcher with the environment the template gives it, and submissions (one delivered twice)
//! through ingest-submit; every call is recorded as the IAM action and ARN AWS checks, then both
//! ways against the functions' roles in `infra/template.yaml`: every call granted, every grant
//! used.

mod platform;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use granary::adapters::memory::{MemoryEventBus, MemoryJobRunner, MemoryRemote, MemoryStore};
use granary::adapters::tap::access_log::{Access, AccessLog};
use granary::adapters::tap::{Tap, TappedJobs, TappedStore};
use granary::config::{Config, Section};
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::ingest::{self, IngestCtx, IngestSettings, TickSummary};
use granary::ports::{BusEvent, EventBus, EventBusError, JobRunner, ObjectStore, PutCondition};
use granary_template::check_role;
use platform::{account, stack};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A bus that records the PutEvents access its calls need.
struct RecordingBus {
    inner: MemoryEventBus,
    arn: String,
    seen: Mutex<BTreeSet<Access>>,
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

fn env_of(logical_id: &str) -> BTreeMap<String, String> {
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

struct Recorded {
    ictx: IngestCtx,
    log: Arc<AccessLog>,
    bus: Arc<RecordingBus>,
    jobs: Arc<MemoryJobRunner>,
}

/// The ingest context function `logical_id` gets, on in-memory ports, its calls recorded.
fn recorded(logical_id: &str, store: Arc<MemoryStore>, remote: Arc<MemoryRemote>) -> Recorded {
    let env = env_of(logical_id);
    let config = Config::for_sections(&[Section::Jobs], |k| env.get(k).cloned()).unwrap();
    let settings = IngestSettings::from_lookup(|k| env.get(k).cloned()).unwrap();
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
    let ictx = IngestCtx::new(
        &config.layout.bucket,
        Arc::new(TappedStore {
            inner: store,
            tap: tap.clone(),
        }),
        Arc::new(TappedJobs {
            inner: jobs.clone(),
            tap,
        }),
        remote,
        bus.clone(),
        settings,
    );
    Recorded {
        ictx,
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

fn check(logical_id: &str, needed: &BTreeSet<Access>, problems: &mut Vec<String>) {
    let (_, resolved) = stack();
    let statements = resolved
        .function(logical_id)
        .and_then(|f| f.statements())
        .unwrap();
    let check = check_role(
        &statements,
        needed.iter().map(|a| (a.action, a.resource.as_str())),
    )
    .unwrap();
    for n in check.not_granted {
        problems.push(format!(
            "{logical_id} needs {n} and its role does not grant it"
        ));
    }
    for u in check.unused {
        problems.push(format!("{logical_id} is granted {u} and no call uses it"));
    }
}

#[tokio::test]
async fn the_ingest_functions_are_granted_what_they_use_and_use_what_they_are_granted() {
    let store = Arc::new(MemoryStore::new());
    let remote = Arc::new(MemoryRemote::default());
    let submit = recorded("IngestSubmitFunction", store.clone(), remote.clone());
    let dispatch = recorded("IngestDispatcherFunction", store.clone(), remote.clone());
    let bucket = dispatch.ictx.bucket.clone();

    // Two batches: one clean, one with a digest mismatch, an unreadable line, a processing job
    // that fails, and a callback that fails.
    let mut manifests = Vec::new();
    for (name, bad) in [("clean", false), ("troubled", true)] {
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
        .zip([None, Some("http://depositor/down")])
        .map(|(m, cb)| {
            serde_json::to_string(&Submission {
                collection: "maps".into(),
                manifest_url: m.clone(),
                kind: ManifestKind::Files,
                priority: 5,
                callback: cb.map(str::to_owned),
                profile: None,
                submitter: "svc".into(),
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
    ];
    let response = ingest::handle_submissions(&submit.ictx, event, chrono::Utc::now()).await;
    assert!(response.batch_item_failures.is_empty());

    for _ in 0..40 {
        let s = ingest::tick(&dispatch.ictx, chrono::Utc::now())
            .await
            .unwrap();
        for request in dispatch.jobs.submitted() {
            let found = dispatch
                .jobs
                .find_by_name(&request.job_name)
                .await
                .unwrap()
                .unwrap();
            if found.status == JobStatus::Running {
                // The troubled batch's third object fails its processing.
                let id = granary::domain::ingest::index::JobId::parse(
                    &request.environment["INGEST_JOB_ID"],
                )
                .unwrap();
                let job = dispatch.ictx.ingest.job(&id).await.unwrap().unwrap().value;
                let status = if job.object.local_id.as_deref() == Some("troubled-2") {
                    JobStatus::Failed
                } else {
                    JobStatus::Succeeded
                };
                dispatch.jobs.finish(
                    &found.job_id,
                    status,
                    serde_json::json!({"statusReason": "exit 1"}),
                );
            }
        }
        if s == TickSummary::default() {
            break;
        }
    }
    // The run went where it was meant to: both batches reported, one of them failed (the
    // mismatch, the unreadable line, the failed processing job, the callback).
    let statuses = granary::handlers::ingest::operator::status(&dispatch.ictx, None)
        .await
        .unwrap();
    assert_eq!(statuses.len(), 2);
    let failed: Vec<_> = statuses
        .iter()
        .filter(|b| b.batch.state == granary::domain::ingest::batch::BatchState::Failed)
        .collect();
    assert_eq!(failed.len(), 1, "{statuses:?}");
    let mut dispatcher_needs = dispatch.log.accesses();
    dispatcher_needs.extend(dispatch.bus.seen.lock().unwrap().iter().cloned());
    let submit_needs = submit.log.accesses();
    let actions: BTreeSet<&str> = dispatcher_needs.iter().map(|a| a.action).collect();
    for wanted in [
        "events:PutEvents",
        "batch:SubmitJob",
        "s3:AbortMultipartUpload",
        "s3:DeleteObject",
    ] {
        assert!(
            actions.contains(wanted),
            "the dispatcher never needed {wanted}: {actions:?}"
        );
    }
    let mut problems = Vec::new();
    check("IngestDispatcherFunction", &dispatcher_needs, &mut problems);
    check("IngestSubmitFunction", &submit_needs, &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
