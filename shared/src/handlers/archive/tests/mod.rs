//! Archive jobs end to end on the in-memory twins: the happy path, duplicate and reordered task
//! deliveries, a recoverable store failure, a corrupted member, retries spent, and `verify`.

use super::*;
use crate::adapters::memory::{MemoryBuckets, MemoryEventBus, MemoryQueue, MemoryStore};
use crate::adapters::tap::{Call, Fate, Op, Refusal, Tap, TappedStore};
use crate::config::archive::ArchiveSettings;
use crate::contracts::archive::TaskMessage;
use crate::domain::archive::job::{ArchiveState, Phase};
use crate::domain::archive::manifest;
use crate::ports::{Buckets, ObjectStore};
use crate::ports::{PutCondition, Queue};
use bytes::Bytes;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod transitions;

const SEED: &str = "2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a";

/// Buckets where `flaky` refuses its first `failures` writes (PUTs and upload parts).
struct World {
    archive_ctx: Ctx,
    buckets: Arc<FlakyBuckets>,
    queue: Arc<MemoryQueue>,
    bus: Arc<MemoryEventBus>,
    store: Arc<MemoryStore>,
}

struct FlakyBuckets {
    inner: MemoryBuckets,
    flaky: &'static str,
    /// Writes `flaky` still refuses (shared by every store of it; leaked for the tap's sake).
    failures: &'static AtomicU32,
}

struct RefuseWrites<'a>(&'a AtomicU32);

impl Tap for RefuseWrites<'static> {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        let write = matches!(
            call.op,
            Op::StorePut | Op::StoreUploadPart | Op::StoreUploadFinish
        );
        if write
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

/// Every call refused as S3 refuses a caller its bucket policy shuts out.
struct Locked;

impl Tap for Locked {
    fn enter(&self, _: &Call<'_>) -> Result<Fate, Refusal> {
        Err(Refusal {
            message: "403 AccessDenied",
            ambiguous: false,
        })
    }
}

impl Buckets for FlakyBuckets {
    fn store(&self, bucket: &str, class: Option<&str>) -> Arc<dyn ObjectStore> {
        let inner = self.inner.store(bucket, class);
        if bucket == "locked" {
            return Arc::new(TappedStore {
                inner,
                tap: Arc::new(Locked),
            });
        }
        if bucket != self.flaky {
            return inner;
        }
        Arc::new(TappedStore {
            inner,
            tap: Arc::new(RefuseWrites(self.failures)),
        })
    }
}

fn dest(raw: &str) -> Destination {
    Destination::parse(raw).unwrap()
}

async fn world(objects: usize, flaky_failures: u32, settings: ArchiveSettings) -> World {
    let store = Arc::new(MemoryStore::new());
    let buckets = Arc::new(FlakyBuckets {
        inner: MemoryBuckets::default(),
        flaky: "mirror",
        failures: Box::leak(Box::new(AtomicU32::new(flaky_failures))),
    });
    let products = buckets.inner.bucket("products");
    for n in 0..objects {
        let body = format!("granule {n} ").repeat(1 + n % 5);
        products
            .put(
                &format!("l2/g{n:04}.nc"),
                Bytes::from(body),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    // Two objects with the same bytes: one member, two names.
    products
        .put(
            "l2/copy-of-g0000.nc",
            Bytes::from("granule 0 "),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let queue = Arc::new(MemoryQueue::new("archive-tasks"));
    let bus = Arc::new(MemoryEventBus::default());
    let key = manifest::signing_key(SEED).unwrap();
    let config = crate::config::Config::for_sections(
        &[
            crate::config::Section::Layout,
            crate::config::Section::Archive,
        ],
        |k| (k == "GRANARY_BUCKET").then(|| "b".to_owned()),
    )
    .unwrap();
    let archive_ctx = Ctx {
        store: store.clone(),
        buckets: buckets.clone(),
        task_queue: queue.clone(),
        bus: bus.clone(),
        signing_key: Some(Arc::new(key)),
        ..Ctx::in_memory(crate::config::Config {
            archive: settings,
            ..config
        })
    };
    World {
        archive_ctx,
        buckets,
        queue,
        bus,
        store,
    }
}

fn settings() -> ArchiveSettings {
    ArchiveSettings {
        objects_per_shard: 100,
        backoff: std::time::Duration::ZERO,
        max_retries: 2,
        ..ArchiveSettings::default()
    }
}

impl World {
    async fn create(&self) -> String {
        create(
            &self.archive_ctx,
            ArchiveSource {
                bucket: "products".into(),
                prefix: "l2/".into(),
            },
            vec![
                dest("s3://vault/archives:DEEP_ARCHIVE"),
                dest("s3://mirror/copies/"),
            ],
            Utc::now(),
        )
        .await
        .unwrap()
        .id
    }

    /// Delivers every visible task message; `twice` delivers each twice, in reverse order.
    async fn deliver(&self, twice: bool) -> usize {
        let got = self.queue.receive(100, 60, 0).await.unwrap();
        let mut messages: Vec<TaskMessage> = got
            .iter()
            .map(|m| serde_json::from_str(&m.body).unwrap())
            .collect();
        if twice {
            messages.reverse();
            let again = messages.clone();
            messages.extend(again);
        }
        for m in &messages {
            tasks::handle(&self.archive_ctx, m, Utc::now())
                .await
                .unwrap();
        }
        for m in &got {
            self.queue.delete(&m.receipt_handle).await.unwrap();
        }
        got.len()
    }

    /// Ticks and deliveries until nothing moves.
    async fn run(&self, twice: bool) {
        for _ in 0..60 {
            let t = tick(&self.archive_ctx, Utc::now()).await.unwrap();
            assert_eq!(t.errors, 0, "{t:?}");
            let delivered = self.deliver(twice).await;
            if t.moved == 0 && t.tasks_sent == 0 && delivered == 0 {
                return;
            }
        }
        panic!("the archive job did not settle");
    }

    async fn job(&self, id: &str) -> ArchiveJob {
        self.archive_ctx
            .archives()
            .job(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }

    async fn verify(
        &self,
        bucket: &str,
        prefix: &str,
        pinned: Option<&str>,
    ) -> verify::VerifyReport {
        verify::verify(self.buckets.inner.bucket(bucket), bucket, prefix, pinned).await
    }
}

fn each_phase_completed_once(job: &ArchiveJob) {
    use ArchiveState::*;
    for (from, to) in [
        (Uninitialized, Queued),
        (Queued, Processing),
        (Processing, ActivityArchiving),
        (ActivityArchiving, PostProcessing),
        (PostProcessing, Store),
        (Store, Cleanup),
        (Cleanup, Completed),
    ] {
        assert_eq!(job.times(from, to), 1, "{from} → {to}: {:?}", job.history);
    }
}

#[tokio::test]
async fn an_archive_is_sharded_archived_checked_signed_stored_twice_verified_and_cleaned_up() {
    let w = world(250, 0, settings()).await;
    let id = w.create().await;
    w.run(false).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Completed, "{:?}", job.history);
    assert_eq!((job.objects, job.shards), (251, 3));
    each_phase_completed_once(&job);
    for (bucket, prefix) in [("vault", "archives/"), ("mirror", "copies/")] {
        let r = w.verify(bucket, &format!("{prefix}{id}/"), None).await;
        assert!(r.intact(), "{bucket}: {r:?}");
        assert_eq!(r.members_checked, 251);
    }
    // Content-addressed: 251 names, 250 distinct members.
    let members = w
        .buckets
        .inner
        .bucket("mirror")
        .list(&format!("copies/{id}/members/"))
        .await
        .unwrap();
    assert_eq!(members.len(), 250);
    assert_eq!(
        w.buckets.inner.storage_class("vault").as_deref(),
        Some("DEEP_ARCHIVE")
    );
    assert!(
        w.store
            .list(&w.archive_ctx.archives().keys.work(&id))
            .await
            .unwrap()
            .is_empty(),
        "staging and tasks removed"
    );
    let events = w.bus.events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].detail_type,
        crate::contracts::archive::ARCHIVE_COMPLETED
    );
}

#[tokio::test]
async fn duplicated_and_reordered_task_deliveries_complete_each_phase_exactly_once() {
    let w = world(120, 0, settings()).await;
    let id = w.create().await;
    w.run(true).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Completed);
    each_phase_completed_once(&job);
    // Two deliveries of one task at the same time: both may run it; the phase still ends once.
    let w = world(50, 0, settings()).await;
    let id = w.create().await;
    for _ in 0..3 {
        tick(&w.archive_ctx, Utc::now()).await.unwrap();
    }
    let got = w.queue.receive(10, 60, 0).await.unwrap();
    assert_eq!(got.len(), 1, "one shard");
    let m: TaskMessage = serde_json::from_str(&got[0].body).unwrap();
    let (a, b) = tokio::join!(
        tasks::handle(&w.archive_ctx, &m, Utc::now()),
        tasks::handle(&w.archive_ctx, &m, Utc::now())
    );
    a.unwrap();
    b.unwrap();
    w.queue.delete(&got[0].receipt_handle).await.unwrap();
    w.run(false).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Completed);
    each_phase_completed_once(&job);
}

#[tokio::test]
async fn a_recoverable_store_failure_is_retried_after_its_backoff_and_succeeds() {
    let w = world(30, 1, settings()).await;
    let id = w.create().await;
    w.run(false).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Completed, "{:?}", job.history);
    assert_eq!(job.retries.get(&Phase::Store), Some(&1));
    use ArchiveState::*;
    assert_eq!(job.times(Store, Error), 1);
    assert_eq!(job.times(Error, RecoverableError), 1);
    assert_eq!(job.times(RecoverableError, Store), 1);
    assert!(w
        .verify("mirror", &format!("copies/{id}/"), None)
        .await
        .intact());
    assert!(w
        .verify("vault", &format!("archives/{id}/"), None)
        .await
        .intact());
}

#[tokio::test]
async fn a_member_corrupted_before_its_integrity_check_fails_the_job_for_good() {
    let w = world(20, 0, settings()).await;
    let id = w.create().await;
    // Until the post-processing task is waiting on the queue.
    for _ in 0..20 {
        tick(&w.archive_ctx, Utc::now()).await.unwrap();
        if w.job(&id).await.state == ArchiveState::PostProcessing {
            break;
        }
        w.deliver(false).await;
    }
    assert_eq!(w.job(&id).await.state, ArchiveState::PostProcessing);
    let staged = w.archive_ctx.archives().keys.staged(&id);
    let member = w
        .store
        .list(&format!("{staged}members/"))
        .await
        .unwrap()
        .remove(3)
        .key;
    w.store
        .put(&member, Bytes::from("bit rot"), PutCondition::Overwrite)
        .await
        .unwrap();
    w.run(false).await;
    let job = w.job(&id).await;
    use ArchiveState::*;
    assert_eq!(job.state, Failed, "{:?}", job.history);
    for (from, to) in [
        (PostProcessing, Error),
        (Error, Failure),
        (Failure, ErrorHandling),
        (ErrorHandling, Cleanup),
        (Cleanup, Failed),
    ] {
        assert_eq!(job.times(from, to), 1, "{from} → {to}");
    }
    let failure = job.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("integrity") && failure.contains("reads back as 7 bytes"),
        "{failure}"
    );
    assert_eq!(job.recoverable, Some(false));
    assert!(w
        .store
        .list(&w.archive_ctx.archives().keys.tmp(&id))
        .await
        .unwrap()
        .is_empty());
    let events = w.bus.events();
    assert_eq!(
        events[0].detail_type,
        crate::contracts::archive::ARCHIVE_FAILED
    );
    // Nothing reached a destination.
    assert!(w
        .buckets
        .inner
        .bucket("mirror")
        .list("")
        .await
        .unwrap()
        .is_empty());
    // An operator's retry re-runs post-processing; the member is still corrupt, so it fails again.
    assert_eq!(
        steps::retry(&w.archive_ctx, &id, Utc::now()).await.unwrap(),
        PostProcessing
    );
    w.run(false).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, Failed);
    assert_eq!(job.times(Failed, PostProcessing), 1);
    assert!(steps::retry(&w.archive_ctx, "a-none", Utc::now())
        .await
        .is_err());
}

#[tokio::test]
async fn a_destination_that_keeps_failing_spends_the_retries_and_fails_the_job() {
    let w = world(10, 1000, settings()).await;
    let id = w.create().await;
    w.run(false).await;
    let job = w.job(&id).await;
    use ArchiveState::*;
    assert_eq!(job.state, Failed, "{:?}", job.history);
    assert_eq!(job.retries.get(&Phase::Store), Some(&2));
    assert_eq!(job.times(Store, Error), 3);
    assert_eq!(job.times(Error, Failure), 1);
    assert!(job.reason.contains("failed"), "{}", job.reason);
    assert!(job
        .history
        .iter()
        .any(|t| t.reason.contains("retries spent")));
    // The vault's copy was made (its task succeeded the first time and was not re-run).
    assert!(w
        .verify("vault", &format!("archives/{id}/"), None)
        .await
        .intact());
}

#[tokio::test]
async fn verify_catches_a_flipped_byte_and_a_forged_signature() {
    let w = world(15, 0, settings()).await;
    let id = w.create().await;
    w.run(false).await;
    let mirror = w.buckets.inner.bucket("mirror");
    let at = format!("copies/{id}/");
    let member = mirror
        .list(&format!("{at}members/"))
        .await
        .unwrap()
        .remove(0)
        .key;
    let mut body = mirror.get(&member).await.unwrap().unwrap().body.to_vec();
    body[0] ^= 0x01;
    mirror
        .put(&member, Bytes::from(body), PutCondition::Overwrite)
        .await
        .unwrap();
    let r = w.verify("mirror", &at, None).await;
    assert!(!r.intact());
    assert!(r.signature_ok, "the signature still covers the checksums");
    assert!(r.problems.iter().any(|p| p.contains(&member)), "{r:?}");
    // A forger rewrites the checksums and signs them with their own key, leaving the stored key.
    let sums = mirror
        .get(&format!("{at}{}", manifest::SUMS))
        .await
        .unwrap()
        .unwrap()
        .body;
    let forged_sums = String::from_utf8(sums.to_vec())
        .unwrap()
        .replacen('0', "1", 1);
    let forger = manifest::signing_key(&"13".repeat(32)).unwrap();
    let (sig, _) = manifest::sign(&forger, forged_sums.as_bytes());
    for (name, body) in [
        (manifest::SUMS, forged_sums.clone()),
        (manifest::SIGNATURE, sig),
    ] {
        mirror
            .put(
                &format!("{at}{name}"),
                Bytes::from(body),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    let r = w.verify("mirror", &at, None).await;
    assert!(!r.signature_ok, "{r:?}");
    // The vault's copy is intact, also against the operator's pinned key; another key fails it.
    let public = hex::encode(
        manifest::signing_key(SEED)
            .unwrap()
            .verifying_key()
            .to_bytes(),
    );
    assert!(w
        .verify("vault", &format!("archives/{id}/"), Some(&public))
        .await
        .intact());
    let other = hex::encode(forger.verifying_key().to_bytes());
    assert!(
        !w.verify("vault", &format!("archives/{id}/"), Some(&other))
            .await
            .signature_ok
    );
}

#[tokio::test]
async fn an_empty_source_fails_before_any_phase_and_cannot_be_retried() {
    let w = world(0, 0, settings()).await;
    let id = create(
        &w.archive_ctx,
        ArchiveSource {
            bucket: "products".into(),
            prefix: "nothing-here/".into(),
        },
        vec![dest("s3://mirror/")],
        Utc::now(),
    )
    .await
    .unwrap()
    .id;
    w.run(false).await;
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Failed);
    assert_eq!(job.times(ArchiveState::Queued, ArchiveState::Failure), 1);
    let e = steps::retry(&w.archive_ctx, &id, Utc::now())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("create it again"), "{e}");
    assert!(create(
        &w.archive_ctx,
        ArchiveSource {
            bucket: "b".into(),
            prefix: String::new()
        },
        vec![],
        Utc::now()
    )
    .await
    .is_err());
}

/// A source granary may not list is tried again each tick for an hour, then fails the job with
/// S3's reason: the job ends Failed (and is announced), never Uninitialized for ever.
#[tokio::test]
async fn a_source_that_cannot_be_listed_fails_the_job_after_its_grace() {
    let w = world(0, 0, settings()).await;
    let id = create(
        &w.archive_ctx,
        ArchiveSource {
            bucket: "locked".into(),
            prefix: "l2/".into(),
        },
        vec![dest("s3://vault/archives/")],
        Utc::now(),
    )
    .await
    .unwrap()
    .id;
    let t = tick(&w.archive_ctx, Utc::now()).await.unwrap();
    assert_eq!(t.errors, 1, "{t:?}");
    assert_eq!(w.job(&id).await.state, ArchiveState::Uninitialized);
    let later = Utc::now()
        + crate::domain::archive::decisions::SOURCE_UNREADABLE_GRACE
        + chrono::Duration::minutes(1);
    for _ in 0..10 {
        tick(&w.archive_ctx, later).await.unwrap();
        w.deliver(false).await;
    }
    let job = w.job(&id).await;
    assert_eq!(job.state, ArchiveState::Failed, "{:?}", job.history);
    let failure = job.failure.unwrap();
    assert!(
        failure.contains("could not be listed") && failure.contains("AccessDenied"),
        "{failure}"
    );
}

/// A tick stops starting steps once its budget (four fifths of `GRANARY_FUNCTION_TIMEOUT_SECS`)
/// is spent and says how many jobs it left; the next tick takes them up. Before, the archive
/// dispatcher read no timeout: a tick ran until Lambda ended it, always at the same job.
#[tokio::test]
async fn a_tick_whose_time_is_spent_leaves_the_jobs_to_the_next_tick_and_says_so() {
    let mut w = world(120, 0, settings()).await;
    let first = w.create().await;
    let second = w.create().await;
    w.archive_ctx.config.leases.function_timeout = Some(std::time::Duration::ZERO);
    let t = tick(&w.archive_ctx, Utc::now()).await.unwrap();
    assert_eq!((t.moved, t.out_of_time), (0, 2), "{t:?}");
    w.archive_ctx.config.leases.function_timeout = Some(std::time::Duration::from_secs(300));
    w.run(false).await;
    for id in [first, second] {
        assert_eq!(w.job(&id).await.state, ArchiveState::Completed);
    }
}
