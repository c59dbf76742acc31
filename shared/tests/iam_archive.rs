//! IAM proven by use for the archive functions: a job over a source bucket stored to two
//! destination buckets (one DEEP_ARCHIVE; the other refuses one upload part, so the Store phase
//! aborts its upload, errs, and succeeds on its retry), plus a source object that vanishes
//! between sharding and archiving in a second job over an ingest batch's objects (its upload
//! aborted; not recoverable). Each
//! function runs with the environment `infra/template.yaml` gives it; every call to every bucket,
//! the task queue and the bus is recorded as the IAM access AWS checks, then both ways against
//! the roles: every call granted, every grant used.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use bytes::Bytes;
use granary::adapters::memory::{MemoryBuckets, MemoryEventBus, MemoryQueue, MemoryStore};
use granary::adapters::tap::access_log::{Access, AccessLog};
use granary::adapters::tap::{Call, Fate, Op, Refusal, Tap, TappedQueue, TappedStore};
use granary::config::{Config, Function};
use granary::contracts::archive::TaskMessage;
use granary::domain::archive::job::ArchiveState;
use granary::domain::archive::manifest;
use granary::domain::archive::record::{ArchiveSource, Destination};
use granary::handlers::archive::{self, tasks};
use granary::handlers::Ctx;
use granary::ports::{Buckets, ObjectStore, PutCondition, Queue};
use platform::ingest::{env_of, RecordingBus};
use platform::{account, check_function_role as check, stack};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const PRODUCTS: &str = "granary-test-products-l2";
const VAULT: &str = "granary-test-vault-deep";
const MIRROR: &str = "granary-test-vault-mirror";

/// Refuses the first upload part written to it (a 503 mid-copy).
struct RefuseOnePart(AtomicU32);

impl Tap for RefuseOnePart {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        if call.op == Op::StoreUploadPart
            && self
                .0
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(Refusal {
                message: "503 SlowDown",
                ambiguous: false,
            });
        }
        Ok(Fate::Make)
    }
}

/// Every bucket's calls recorded as the IAM accesses they need (one log per bucket).
struct RecordingBuckets {
    inner: MemoryBuckets,
    config: Config,
    logs: Mutex<Vec<Arc<AccessLog>>>,
    mirror_refusals: Arc<RefuseOnePart>,
}

impl Buckets for RecordingBuckets {
    fn store(&self, bucket: &str, class: Option<&str>) -> Arc<dyn ObjectStore> {
        let mut config = self.config.clone();
        config.layout.bucket = bucket.to_owned();
        let log = Arc::new(AccessLog::new(&config, account()));
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(log.clone());
        let mut store = self.inner.store(bucket, class);
        if bucket == MIRROR {
            store = Arc::new(TappedStore {
                inner: store,
                tap: self.mirror_refusals.clone(),
            });
        }
        Arc::new(TappedStore {
            inner: store,
            tap: log,
        })
    }
}

struct Recorded {
    archive_ctx: Ctx,
    log: Arc<AccessLog>,
    buckets: Arc<RecordingBuckets>,
    bus: Arc<RecordingBus>,
    signing_parameter: Option<String>,
}

impl Recorded {
    fn needs(&self) -> BTreeSet<Access> {
        let mut all = self.log.accesses();
        for log in self.buckets.logs.lock().unwrap().iter() {
            all.extend(log.accesses());
        }
        all.extend(self.bus.seen.lock().unwrap().iter().cloned());
        // The signing seed is read once at start-up (wiring, not a port): the access it needs
        // is the parameter the template names for the function.
        if let Some(name) = &self.signing_parameter {
            let (s, _) = stack();
            all.insert(Access {
                action: "ssm:GetParameter",
                resource: format!(
                    "arn:{}:ssm:{}:{}:parameter{name}",
                    s.partition, s.region, s.account
                ),
            });
        }
        all
    }
}

fn recorded(
    logical_id: &str,
    f: Function,
    store: Arc<MemoryStore>,
    sources: &MemoryBuckets,
    queue: Arc<MemoryQueue>,
) -> Recorded {
    let env = env_of(logical_id);
    let config = Config::for_sections(f.sections(), |k| env.get(k).cloned()).unwrap();
    let log = Arc::new(AccessLog::new(&config, account()));
    let inner = MemoryBuckets::default();
    for b in [PRODUCTS, VAULT, MIRROR, config.layout.bucket.as_str()] {
        inner.adopt(b, sources.bucket(b));
    }
    let buckets = Arc::new(RecordingBuckets {
        inner,
        config: config.clone(),
        logs: Mutex::default(),
        mirror_refusals: Arc::new(RefuseOnePart(AtomicU32::new(1))),
    });
    let (s, _) = stack();
    let bus = Arc::new(RecordingBus {
        inner: MemoryEventBus::default(),
        arn: format!(
            "arn:{}:events:{}:{}:event-bus/{}",
            s.partition, s.region, s.account, config.archive.bus_name
        ),
        seen: Mutex::default(),
    });
    let tap = log.clone() as Arc<dyn Tap>;
    let signing_parameter = config.archive.signing_key_parameter.clone();
    let key = manifest::signing_key(&"11".repeat(32)).unwrap();
    let archive_ctx = Ctx {
        store: Arc::new(TappedStore {
            inner: store,
            tap: tap.clone(),
        }),
        buckets: buckets.clone(),
        task_queue: Arc::new(TappedQueue { inner: queue, tap }),
        bus: bus.clone(),
        signing_key: signing_parameter.as_ref().map(|_| Arc::new(key)),
        ..Ctx::in_memory(config.clone())
    };
    Recorded {
        archive_ctx,
        log,
        buckets,
        bus,
        signing_parameter,
    }
}

#[tokio::test]
async fn the_archive_functions_are_granted_what_they_use_and_use_what_they_are_granted() {
    let store = Arc::new(MemoryStore::new());
    let buckets = MemoryBuckets::default();
    let products = buckets.bucket(PRODUCTS);
    for n in 0..7 {
        products
            .put(
                &format!("l2/g{n}.nc"),
                Bytes::from(format!("granule {n}")),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    // An ingest batch's objects in the data bucket are a source too.
    for job in ["b1-j00001", "b1-j00002"] {
        store
            .put(
                &format!("ingest/objects/{job}/scan.tif"),
                Bytes::from(format!("scan of {job}")),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    let env = env_of("ArchiveTaskFunction");
    let data_bucket = env["GRANARY_BUCKET"].clone();
    buckets.adopt(&data_bucket, store.clone());
    let queue = Arc::new(MemoryQueue::new(&env["GRANARY_ARCHIVE_TASK_QUEUE_URL"]));
    let dispatcher = recorded(
        "ArchiveDispatcherFunction",
        Function::ArchiveDispatcher,
        store.clone(),
        &buckets,
        queue.clone(),
    );
    let task = recorded(
        "ArchiveTaskFunction",
        Function::ArchiveTask,
        store.clone(),
        &buckets,
        queue.clone(),
    );
    assert!(
        dispatcher.signing_parameter.is_none(),
        "only the task handler signs"
    );
    let dests = vec![
        Destination::parse(&format!("s3://{VAULT}/a/:DEEP_ARCHIVE")).unwrap(),
        Destination::parse(&format!("s3://{MIRROR}/a/")).unwrap(),
    ];
    let now = chrono::Utc::now;
    let good = archive::create(
        &dispatcher.archive_ctx,
        ArchiveSource {
            bucket: PRODUCTS.into(),
            prefix: "l2/".into(),
        },
        dests.clone(),
        now(),
    )
    .await
    .unwrap();
    let batch = archive::create(
        &dispatcher.archive_ctx,
        ArchiveSource {
            bucket: data_bucket.clone(),
            prefix: "ingest/objects/b1-".into(),
        },
        dests,
        now(),
    )
    .await
    .unwrap();
    // One of the second job's objects vanishes after it is sharded.
    archive::tick(&dispatcher.archive_ctx, now()).await.unwrap();
    store
        .delete("ingest/objects/b1-j00002/scan.tif")
        .await
        .unwrap();
    // Each pass ten minutes after the last: the template's retry backoff has passed.
    for pass in 0..40 {
        let at = now() + chrono::Duration::minutes(10 * pass);
        let t = archive::tick(&dispatcher.archive_ctx, at).await.unwrap();
        let got = queue.receive(10, 60, 0).await.unwrap();
        for m in &got {
            let message: TaskMessage = serde_json::from_str(&m.body).unwrap();
            tasks::handle(&task.archive_ctx, &message, at)
                .await
                .unwrap();
            queue.delete(&m.receipt_handle).await.unwrap();
        }
        if t.moved == 0 && t.tasks_sent == 0 && got.is_empty() {
            break;
        }
    }
    let state = |id: &str| {
        let a = &dispatcher.archive_ctx;
        let id = id.to_owned();
        async move { a.archives().job(&id).await.unwrap().unwrap().value }
    };
    let good = state(&good.id).await;
    assert_eq!(good.state, ArchiveState::Completed, "{:?}", good.history);
    assert_eq!(
        good.times(ArchiveState::Store, ArchiveState::Error),
        1,
        "the refused part"
    );
    let batch = state(&batch.id).await;
    assert_eq!(batch.state, ArchiveState::Failed, "{:?}", batch.history);

    let mut problems = Vec::new();
    let task_needs = task.needs();
    let actions: BTreeSet<&str> = task_needs.iter().map(|a| a.action).collect();
    assert!(actions.contains("s3:AbortMultipartUpload"), "{actions:?}");
    check(
        "ArchiveDispatcherFunction",
        &dispatcher.needs(),
        &mut problems,
    );
    check("ArchiveTaskFunction", &task_needs, &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
