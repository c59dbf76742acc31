//! Archive jobs under crashes: one job (two shards, two destinations) runs through the
//! dispatcher's ticks and the task handler's deliveries; each pass (a tick, then every visible
//! task message) dies at one of its external calls in turn — the call never made, or made and its
//! answer lost — and then the schedule fires again and SQS redelivers what the dead handler held,
//! until nothing moves. Audited after each run: the job completed, each phase completed exactly
//! once (its history), both copies verify, the open-jobs index no longer lists it, and nothing is left in the
//! staging area.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use bytes::Bytes;
use granary::adapters::memory::{MemoryBuckets, MemoryEventBus, MemoryQueue, MemoryStore};
use granary::adapters::tap::faults::{CrashPoint, Faults};
use granary::adapters::tap::{Call, Fate, Op, Refusal, Tap, TappedStore};
use granary::config::archive::ArchiveSettings;
use granary::config::{Config, Section};
use granary::contracts::archive::TaskMessage;
use granary::domain::archive::job::ArchiveState;
use granary::domain::archive::manifest;
use granary::domain::archive::record::{ArchiveSource, Destination};
use granary::handlers::archive::{self, tasks, verify};
use granary::handlers::Ctx;
use granary::ports::{Buckets, ObjectStore, PutCondition, Queue};
use platform::crashes::{self, CrashRun, Crashes};
use std::sync::Arc;

struct World {
    store: Arc<MemoryStore>,
    buckets: Arc<MemoryBuckets>,
    queue: Arc<MemoryQueue>,
    /// The notification bus: completions and failures are announced here.
    bus: Arc<MemoryEventBus>,
    id: String,
    /// The failing run: a staged member rots once post-processing is waiting (its integrity
    /// check fails the job for good), and once the job has failed an operator restores it and
    /// runs `granary archive retry`.
    rot: Option<Rot>,
}

struct Rot {
    /// The member's key and bytes before it rotted.
    original: std::sync::Mutex<Option<(String, Bytes)>>,
    /// Whether the operator's retry went through.
    retried: std::sync::atomic::AtomicBool,
    /// Whether the mirror destination's bucket is still missing: every write to it is refused
    /// (a recoverable store failure) until an operator creates it, which they do once the job
    /// has met a recoverable error.
    mirror_missing: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Rot {
    fn default() -> Self {
        Self {
            original: Default::default(),
            retried: Default::default(),
            mirror_missing: Arc::new(true.into()),
        }
    }
}

/// Refuses writes to a bucket that does not exist (yet).
struct MissingBucket(Arc<std::sync::atomic::AtomicBool>);

impl Tap for MissingBucket {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        let write = matches!(
            call.op,
            Op::StorePut | Op::StoreUploadPart | Op::StoreUploadFinish | Op::StoreCopy
        );
        if write && self.0.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Refusal {
                message: "NoSuchBucket: the specified bucket does not exist",
                ambiguous: false,
            });
        }
        Ok(Fate::Make)
    }
}

/// The world's buckets, the mirror's writes refused while it is missing.
struct GatedBuckets {
    inner: Arc<dyn Buckets>,
    mirror_missing: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Buckets for GatedBuckets {
    fn store(&self, bucket: &str, class: Option<&str>) -> Arc<dyn ObjectStore> {
        let store = self.inner.store(bucket, class);
        match &self.mirror_missing {
            Some(missing) if bucket == "mirror" => Arc::new(TappedStore {
                inner: store,
                tap: Arc::new(MissingBucket(missing.clone())),
            }),
            _ => store,
        }
    }
}

fn archive_ctx(w: &World, faults: Option<Arc<Faults>>) -> Ctx {
    let settings = ArchiveSettings {
        objects_per_shard: 3,
        backoff: std::time::Duration::ZERO,
        // A message a dead handler held is redelivered each pass; no resend needed, but a
        // record marked sent whose message never left must be sent again soon.
        task_resend_after: std::time::Duration::ZERO,
        ..ArchiveSettings::default()
    };
    let key = Some(Arc::new(manifest::signing_key(&"42".repeat(32)).unwrap()));
    let bus = w.bus.clone();
    let buckets = Arc::new(GatedBuckets {
        inner: w.buckets.clone(),
        mirror_missing: w.rot.as_ref().map(|r| r.mirror_missing.clone()),
    });
    let config = Config::for_sections(&[Section::Layout, Section::Archive], |k| {
        (k == "GRANARY_BUCKET").then(|| "b".to_owned())
    })
    .expect("the harness's configuration is valid");
    // Every port the archive functions call passes through the faults: any call may be the
    // crash point.
    let ctx = Ctx {
        store: w.store.clone(),
        buckets,
        task_queue: w.queue.clone(),
        bus,
        signing_key: key,
        ..Ctx::in_memory(Config {
            archive: settings,
            ..config
        })
    };
    match faults {
        None => ctx,
        Some(f) => ctx.with_faults(&f),
    }
}

async fn world() -> World {
    world_with(None).await
}

async fn world_with(rot: Option<Rot>) -> World {
    let buckets = Arc::new(MemoryBuckets::default());
    let products = buckets.bucket("products");
    for n in 0..6 {
        products
            .put(
                &format!("l2/g{n}.nc"),
                Bytes::from(format!("granule {n} ").repeat(n + 1)),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    let mut w = World {
        store: Arc::new(MemoryStore::new()),
        buckets,
        queue: Arc::new(MemoryQueue::new("archive-tasks")),
        bus: Arc::new(MemoryEventBus::default()),
        id: String::new(),
        rot,
    };
    w.id = archive::create(
        &archive_ctx(&w, None),
        ArchiveSource {
            bucket: "products".into(),
            prefix: "l2/".into(),
        },
        vec![
            Destination::parse("s3://vault/a/:DEEP_ARCHIVE").unwrap(),
            Destination::parse("s3://mirror/a/").unwrap(),
        ],
        chrono::Utc::now(),
    )
    .await
    .unwrap()
    .id;
    w
}

/// One pass: a tick, then every visible task message (deleted only when handled). Whether
/// anything happened.
async fn pass(w: &World, faults: &Arc<Faults>) -> bool {
    w.queue.expire_visibility();
    let a = archive_ctx(w, Some(faults.clone()));
    let Ok(t) = archive::tick(&a, chrono::Utc::now()).await else {
        return true;
    };
    let mut busy = t.moved > 0 || t.tasks_sent > 0 || t.errors > 0;
    // Between the tick and the task handler: the tick that starts post-processing sends its
    // task, which the handler below checks, so the member rots before any check of it.
    if let Some(rot) = &w.rot {
        busy |= operator(w, rot, &a).await;
    }
    let Ok(got) = w.queue.receive(100, 60, 0).await else {
        return true;
    };
    for m in got {
        busy = true;
        let message: TaskMessage = serde_json::from_str(&m.body).unwrap();
        if tasks::handle(&a, &message, chrono::Utc::now())
            .await
            .is_ok()
        {
            // Deleting is Lambda's (not a call the handler makes): never crashes here.
            w.queue.delete(&m.receipt_handle).await.unwrap();
        }
    }
    busy
}

/// What happens to the failing run outside granary, between a pass's tick and its task
/// handler: the member rots (once post-processing has started), and after the failure an operator restores it and retries the job
/// (its calls through this pass's faults: a retry that dies is run again by the operator).
/// Whether the operator did anything.
async fn operator(w: &World, rot: &Rot, a: &Ctx) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    let clean = archive_ctx(w, None);
    let Some(job) = clean.archives().job(&w.id).await.unwrap() else {
        return false;
    };
    let state = job.value.state;
    let original = rot.original.lock().unwrap().clone();
    if state == ArchiveState::PostProcessing && original.is_none() {
        let members = w
            .store
            .list(&format!("{}members/", clean.archives().keys.staged(&w.id)))
            .await
            .unwrap();
        let key = members[0].key.clone();
        let body = w.store.get(&key).await.unwrap().unwrap().body;
        w.store
            .put(&key, Bytes::from_static(b"rot"), PutCondition::Overwrite)
            .await
            .unwrap();
        *rot.original.lock().unwrap() = Some((key, body));
        return false;
    }
    // The tick that records the recoverable error also retries the phase (no backoff here):
    // the operator goes by the history, not by the state between two ticks.
    let met = job
        .value
        .times(ArchiveState::Error, ArchiveState::RecoverableError)
        > 0;
    if met && rot.mirror_missing.load(SeqCst) {
        rot.mirror_missing.store(false, SeqCst);
        return true;
    }
    if state == ArchiveState::Failed && !rot.retried.load(SeqCst) {
        if let Some((key, body)) = original.as_ref() {
            w.store
                .put(key, body.clone(), PutCondition::Overwrite)
                .await
                .unwrap();
        }
        match archive::steps::retry(a, &w.id, chrono::Utc::now()).await {
            Ok(_) => rot.retried.store(true, SeqCst),
            // A retry that died after the job moved on: the rerun finds it no longer failed.
            Err(granary::handlers::HandlerError::Refused(_)) => rot.retried.store(true, SeqCst),
            Err(_) => {}
        }
        return true;
    }
    false
}

/// Passes until quiet, dying at `crash` (its call counted across the passes).
async fn run(w: &World, crash: Option<CrashPoint>) -> Crashes {
    let crashes = Crashes::new(crash.as_slice());
    passes(w, &crashes).await;
    crashes
}

/// Passes until quiet, dying at each planned crash in turn (a later one falls inside the
/// recovery from an earlier one).
async fn passes(w: &World, crashes: &Crashes) {
    for _ in 0..80 {
        let faults = crashes.invocation();
        let busy = pass(w, &faults).await;
        if crashes.ended(&faults) && !busy {
            return;
        }
    }
    panic!("the archive job did not settle");
}

async fn audit(w: &World) -> Result<(), String> {
    let a = archive_ctx(w, None);
    let job = a.archives().job(&w.id).await.unwrap().unwrap().value;
    if job.state != ArchiveState::Completed {
        return Err(format!("{} ({})", job.state, job.reason));
    }
    // Every transition at most once (a retried phase goes round through other transitions),
    // but the recoverable-error loop, which goes round until the destination is there.
    use ArchiveState::*;
    let recoverable_loop = [
        (Store, Error),
        (Error, RecoverableError),
        (RecoverableError, Store),
    ];
    for t in &job.history {
        let n = job.times(t.from, t.to);
        if n != 1 && !recoverable_loop.contains(&(t.from, t.to)) {
            return Err(format!("{} → {} {n} times", t.from, t.to));
        }
    }
    // Announced: the completion, and in the failing run the failure before it.
    let announced: Vec<String> = w
        .bus
        .events()
        .iter()
        .map(|e| e.detail_type.clone())
        .collect();
    use granary::contracts::archive::{ARCHIVE_COMPLETED, ARCHIVE_FAILED};
    let mut want = vec![ARCHIVE_COMPLETED];
    if w.rot.is_some() {
        want.insert(0, ARCHIVE_FAILED);
        for (from, to) in recoverable_loop {
            if job.times(from, to) == 0 {
                return Err(format!(
                    "never {from} → {to}: the missing mirror was not met"
                ));
            }
        }
        for (from, to) in [
            (Failure, ErrorHandling),
            (ErrorHandling, Cleanup),
            (Cleanup, Failed),
            (Failed, PostProcessing),
        ] {
            if job.times(from, to) != 1 {
                return Err(format!("{from} → {to} {} times", job.times(from, to)));
            }
        }
    }
    let mut seen = announced.clone();
    seen.dedup();
    if seen != want {
        return Err(format!("announced {announced:?}, want {want:?}"));
    }
    for (from, to) in [
        (ActivityArchiving, PostProcessing),
        (PostProcessing, Store),
        (Store, Cleanup),
        (Cleanup, Completed),
    ] {
        let n = job.times(from, to);
        if n != 1 {
            return Err(format!("{from} → {to} {n} times"));
        }
    }
    for bucket in ["vault", "mirror"] {
        let r = verify::verify(
            w.buckets.bucket(bucket),
            bucket,
            &format!("a/{}/", w.id),
            None,
        )
        .await;
        if !r.intact() || r.members_checked != 6 {
            return Err(format!("{bucket}: {r:?}"));
        }
    }
    let open = a.archives().open_ids().await.unwrap();
    if !open.is_empty() {
        return Err(format!("still listed open: {open:?}"));
    }
    let left = w.store.list(&a.archives().keys.work(&w.id)).await.unwrap();
    if !left.is_empty() {
        return Err(format!("{} objects left in staging", left.len()));
    }
    Ok(())
}

#[tokio::test]
async fn an_archive_job_recovers_from_a_crash_at_every_call() {
    let clean = world().await;
    let calls = run(&clean, None).await.calls();
    audit(&clean)
        .await
        .unwrap_or_else(|e| panic!("without a crash: {e}"));
    assert!(calls > 50, "{calls} calls");
    eprintln!("{calls} external calls in a clean run");
    crash_at_every_call(calls, || None).await;
}

/// The failure path under crashes: a staged member rots, the integrity check fails the job for
/// good (Error, Failure, ErrorHandling with its announcement, Cleanup, Failed), then an operator
/// restores the member and runs `granary archive retry`; each of those calls, the retry's
/// included, dies in turn. Audited as above, plus: the failure announced before the
/// completion, each failure-path transition once, the retry once.
#[tokio::test]
async fn a_failed_archive_job_and_its_retry_recover_from_a_crash_at_every_call() {
    let clean = world_with(Some(Rot::default())).await;
    let calls = run(&clean, None).await.calls();
    audit(&clean)
        .await
        .unwrap_or_else(|e| panic!("without a crash: {e}"));
    let failures_seen = archive_ctx(&clean, None)
        .archives()
        .job(&clean.id)
        .await
        .unwrap()
        .unwrap()
        .value
        .times(ArchiveState::Cleanup, ArchiveState::Failed);
    assert_eq!(failures_seen, 1, "the run did fail and was retried");
    crash_at_every_call(calls, || Some(Rot::default())).await;
}

/// Runs a fresh world (its failing run or not, as `rot` makes it) once per crash point — each of
/// the clean run's `calls`, before and after — and asserts every run passes the audit.
async fn crash_at_every_call(calls: u64, rot: impl Fn() -> Option<Rot>) {
    crashes::at_every_call("archive job", calls, |point| {
        let rot = rot();
        async move {
            let w = world_with(rot).await;
            let crashed = run(&w, Some(point)).await;
            CrashRun {
                reached: crashed.reached() == 1,
                audit: audit(&w).await,
            }
        }
    })
    .await;
}

/// A crash inside the recovery, on the failing run and its retry: the passes die at a first
/// call and again 1, 2, 3, 5, 8, … calls later, so the passes taking the dead one's work over
/// (the tick's repair, a redelivered task, the operator's retry) die too.
#[tokio::test]
async fn an_archive_job_recovers_from_a_crash_inside_its_recovery() {
    let clean = world_with(Some(Rot::default())).await;
    let calls = run(&clean, None).await.calls();
    let runs = crashes::inside_the_recovery("archive job", calls, 100, |planned| async move {
        let w = world_with(Some(Rot::default())).await;
        let crashes = Crashes::new(&planned);
        passes(&w, &crashes).await;
        CrashRun {
            reached: crashes.reached() == 2,
            audit: audit(&w).await,
        }
    })
    .await;
    eprintln!("{runs} runs with a second crash inside the recovery");
}
