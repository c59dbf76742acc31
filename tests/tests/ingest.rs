//! The ingest queue against the emulator: S3 (records, indexes, files, reports), the depositor's
//! files and callbacks over real HTTP (the loopback archive), events on EventBridge, failures
//! dead-lettered on the stack's SQS failure DLQ. The processing jobs go to the in-memory job
//! runner, and each end reaches the job monitor as Batch's "Job State Change" event, as the
//! stack's rule delivers it.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use bytes::Bytes;
use granary::adapters::aws::EventBridgeBus;
use granary::adapters::http::remote::HttpRemote;
use granary::adapters::memory::{job_state_change, Ending, MemoryJobRunner};
use granary::adapters::tap::{Call, Fate, Op, Refusal, Tap, TappedStore};
use granary::contracts::ingest as ingest_contract;
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::index::BatchId;
use granary::domain::ingest::job::JobState;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::ingest::operator::{self, Target};
use granary::handlers::ingest::{self, IngestSettings, TickSummary};
use granary::handlers::monitor::{self, MonitorOutcome};
use granary::handlers::Ctx;
use granary::ports::PutCondition;
use granary_tests::http_source::{self, Behaviour};
use std::sync::Arc;
use std::time::Duration;

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

/// The context on the stack's S3, EventBridge and failure DLQ, the archive's HTTP, an in-memory
/// job runner.
fn ingest_on(
    s: &granary_tests::TestStack,
    jobs: Arc<MemoryJobRunner>,
    settings: IngestSettings,
) -> Ctx {
    Ctx {
        jobs,
        remote: Arc::new(HttpRemote::new(settings.timeout)),
        bus: Arc::new(EventBridgeBus::new(s.clients.events.clone(), "default")),
        config: granary::config::Config {
            ingest: settings,
            ..s.ctx.config.clone()
        },
        ..s.ctx.clone()
    }
}

/// One pass: a tick, then Batch ends every running processing job (those whose names `fail`
/// lists exit 1, the others succeed) and the monitor handles each end's event. Whether anything
/// moved.
async fn pass(
    s: &granary_tests::TestStack,
    ingest_ctx: &Ctx,
    jobs: &MemoryJobRunner,
    fail: &[&str],
) -> bool {
    let summary = ingest::tick(ingest_ctx, chrono::Utc::now()).await.unwrap();
    let mut finished = 0;
    for (_, job) in jobs.running() {
        let ending = if fail.contains(&job.job_name.as_str()) {
            Ending::Exited(1)
        } else {
            Ending::Succeeded
        };
        let detail = jobs.end(&job.job_id, ending).unwrap();
        let event = job_state_change(&detail).to_string();
        let out = monitor::handle_message(&s.ctx, &event).await.unwrap();
        assert!(
            matches!(out, MonitorOutcome::IngestProcessing { .. }),
            "{out:?}"
        );
        finished += 1;
    }
    summary != TickSummary::default() || finished > 0
}

/// Passes until nothing moves.
async fn settle(
    s: &granary_tests::TestStack,
    ingest_ctx: &Ctx,
    jobs: &MemoryJobRunner,
    fail: &[&str],
) {
    for _ in 0..60 {
        if !pass(s, ingest_ctx, jobs, fail).await {
            return;
        }
    }
    panic!("the ingest queue did not settle in 60 passes");
}

/// Objects in the batch: enough that each kind of trouble below shows up twice (every 20th file is
/// altered, every 25th flaps) among files that store cleanly; the count proves nothing more, and
/// each object costs the emulator about a second of calls.
const OBJECTS: usize = 40;

/// The files served altered: their digests cannot match.
fn altered(n: usize) -> bool {
    n % 20 == 7
}

#[tokio::test]
async fn a_batch_of_objects_with_bad_digests_a_hold_and_a_resume() {
    let s = granary_tests::stack("ingest", 1, &[]).await;
    let server = http_source::start().await;
    let base = server.index_url.clone();
    let mut manifest = String::from(
        "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n",
    );
    for n in 0..OBJECTS {
        let name = format!("obj{n:03}.dat");
        let body = format!("object {n} payload").repeat(1 + n % 7);
        // An altered file is served with the same length and other bytes: its digest cannot
        // match. Every 25th fails twice (a flapping server) before it serves.
        let digest = md5_hex(body.as_bytes());
        let served = if altered(n) {
            body.replace('o', "0")
        } else {
            body.clone()
        };
        let plan = if n % 25 == 3 {
            vec![Behaviour::Fail, Behaviour::Fail, Behaviour::Serve]
        } else {
            vec![]
        };
        server.archive.put(&name, served.as_bytes(), plan);
        manifest.push_str(&format!(
            "{base}{name} | md5 | {digest} | {} | {name} | local-{n:03}\n",
            body.len()
        ));
    }
    server.archive.put("callback", b"ok", vec![]);
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let settings = IngestSettings {
        capacity_bytes: 20_000,
        timeout: Duration::from_secs(10),
        ..IngestSettings::default()
    };
    let ingest_ctx = ingest_on(&s, jobs.clone(), settings);
    let key = ingest_ctx.ingest().keys.manifest("objects.checkm");
    s.ctx
        .store
        .put(&key, Bytes::from(manifest), PutCondition::IfAbsent)
        .await
        .unwrap();
    // The collection is held when the batch arrives: nothing moves until it is released.
    operator::hold(
        &ingest_ctx,
        &Target::Collection("maps".into()),
        "audit",
        "ops",
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let batch = ingest::submit(
        &ingest_ctx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("s3://{}/{key}", s.stack.bucket),
            kind: ManifestKind::Files,
            priority: 5,
            callback: Some(format!("{base}callback")),
            profile: None,
            submitter: "test".into(),
            deposit: Default::default(),
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    let held = ingest_ctx
        .ingest()
        .batch(&batch.id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(held.state, BatchState::Held);
    assert!(jobs.submitted().is_empty());
    operator::release(
        &ingest_ctx,
        &Target::Collection("maps".into()),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;

    let bad = (0..OBJECTS).filter(|n| altered(*n)).count();
    let good = OBJECTS - bad;
    assert_eq!(bad, 2);
    let done = ingest_ctx
        .ingest()
        .batch(&batch.id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(
        done.state,
        BatchState::Failed,
        "{bad} digests could not match"
    );
    assert_eq!(done.jobs, OBJECTS);
    let reports = operator::reports(&ingest_ctx, &batch.id).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0].completed.len(),
        good,
        "failed: {:?}",
        reports[0].failed
    );
    assert_eq!(reports[0].failed.len(), bad);
    for f in &reports[0].failed {
        assert!(f.reason.contains("digest mismatch"), "{}", f.reason);
        assert_eq!(f.last_successful_status, Some(JobState::Provisioning));
    }
    assert_eq!(
        server.archive.gets("obj003.dat"),
        3,
        "two failures, then the file"
    );
    assert_eq!(jobs.submitted().len(), good);
    // What was stored is in the inventory, and its bytes are in S3 with the right digest.
    let inventory =
        granary_tests::keys(s.ctx.store.as_ref(), "ingest/catalog/collection=maps/").await;
    assert_eq!(inventory.len(), good);

    // The depositor's server serves the altered files as listed now; the operator resumes the
    // jobs (they restart downloading) and asks for an update report.
    for n in (0..OBJECTS).filter(|n| altered(*n)) {
        let body = format!("object {n} payload").repeat(1 + n % 7);
        server
            .archive
            .put(&format!("obj{n:03}.dat"), body.as_bytes(), vec![]);
    }
    let resumed = operator::resume(
        &ingest_ctx,
        &reports[0]
            .failed
            .iter()
            .map(|f| f.job.clone())
            .collect::<Vec<_>>(),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert!(resumed
        .iter()
        .all(|r| r.outcome == Ok(JobState::Downloading)));
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    operator::update_report(&ingest_ctx, &batch.id, chrono::Utc::now())
        .await
        .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    let reports = operator::reports(&ingest_ctx, &batch.id).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[1].newly_completed.len(), bad);
    assert!(reports[1].failed.is_empty() && reports[1].still_failed.is_empty());
    let resumed_job = ingest_ctx
        .ingest()
        .job(&reports[0].failed[0].job)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(resumed_job.retry_count, 1);
    assert_eq!(
        resumed_job.state,
        JobState::Deleted,
        "completed, then cleaned up"
    );
    // Completed after the update report, the batch was cleaned up: no working files, no
    // queue markers; records, inventory and reports stay.
    let cleaned = ingest_ctx
        .ingest()
        .batch(&batch.id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(cleaned.state, BatchState::Deleted);
    assert!(granary_tests::keys(s.ctx.store.as_ref(), "ingest/objects/")
        .await
        .is_empty());
    assert!(
        granary_tests::keys(s.ctx.store.as_ref(), "ingest/job-states/pending/")
            .await
            .is_empty()
    );
    assert_eq!(
        granary_tests::keys(s.ctx.store.as_ref(), "ingest/catalog/collection=maps/")
            .await
            .len(),
        OBJECTS
    );
}

#[tokio::test]
async fn a_failing_callback_fails_the_job_at_notify_and_a_resume_restarts_there() {
    let s = granary_tests::stack("ingestcb", 1, &[]).await;
    let server = http_source::start().await;
    let base = server.index_url.clone();
    server.archive.put("a.txt", b"alpha", vec![]);
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let settings = IngestSettings {
        callback_attempts: 2,
        timeout: Duration::from_secs(10),
        ..IngestSettings::default()
    };
    let ingest_ctx = ingest_on(&s, jobs.clone(), settings);
    let batch = ingest::submit(
        &ingest_ctx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("{base}a.txt"),
            kind: ManifestKind::File,
            priority: 5,
            // Not served: the archive answers 404.
            callback: Some(format!("{base}no-such-callback")),
            profile: None,
            submitter: "test".into(),
            deposit: Default::default(),
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    let job = ingest_ctx
        .ingest()
        .job(&batch.id.job(1))
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(job.state, JobState::Failed);
    assert!(
        job.reason.contains("callback") && job.reason.contains("404"),
        "{}",
        job.reason
    );
    assert_eq!(job.last_successful_status, Some(JobState::Recording));
    let b = ingest_ctx
        .ingest()
        .batch(&batch.id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(b.state, BatchState::Failed);
    assert_eq!(
        operator::resume(
            &ingest_ctx,
            std::slice::from_ref(&job.id),
            chrono::Utc::now()
        )
        .await
        .unwrap()[0]
            .outcome,
        Ok(JobState::Notify)
    );
}

#[tokio::test]
async fn every_transition_of_both_tables_on_the_emulator() {
    use granary::domain::ingest::index::JobId;
    let s = granary_tests::stack("ingestall", 1, &[]).await;
    let server = http_source::start().await;
    let base = server.index_url.clone();
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let settings = IngestSettings {
        timeout: Duration::from_secs(10),
        callback_attempts: 1,
        ..IngestSettings::default()
    };
    let ingest_ctx = ingest_on(&s, jobs.clone(), settings);
    let now = chrono::Utc::now;
    let put_manifest = |name: &str, lines: &[String]| {
        let key = ingest_ctx.ingest().keys.manifest(name);
        let text = format!(
            "#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n{}\n",
            lines.join("\n")
        );
        let store = s.ctx.store.clone();
        let bucket = s.stack.bucket.clone();
        async move {
            store
                .put(&key, Bytes::from(text), PutCondition::Overwrite)
                .await
                .unwrap();
            format!("s3://{bucket}/{key}")
        }
    };
    let line = |name: &str, body: &str| {
        server.archive.put(name, body.as_bytes(), vec![]);
        format!(
            "{base}{name} | md5 | {} | | {name} | {name}",
            md5_hex(body.as_bytes())
        )
    };
    let submit = |url: String, collection: &str| {
        let ingest_ctx = &ingest_ctx;
        let collection = collection.to_owned();
        async move {
            ingest::submit(
                ingest_ctx,
                Submission {
                    collection,
                    manifest_url: url,
                    kind: ManifestKind::Files,
                    priority: 5,
                    callback: None,
                    profile: None,
                    submitter: "t".into(),
                    deposit: Default::default(),
                },
                now(),
            )
            .await
            .unwrap()
            .id
        }
    };
    let state = |id: JobId| {
        let ingest_ctx = &ingest_ctx;
        async move { ingest_ctx.ingest().job(&id).await.unwrap().unwrap().value }
    };
    let batch_state = |id: BatchId| {
        let ingest_ctx = &ingest_ctx;
        async move {
            ingest_ctx
                .ingest()
                .batch(&id)
                .await
                .unwrap()
                .unwrap()
                .value
                .state
        }
    };

    // Batch A: o1 fine; an unreadable line (pending → failed); o3's processing fails once
    // (processing → failed → processing); o4's downloaded file is lost before storing
    // (storing → failed → storing); o5 is held and deleted (held → deleted); o6's stored file
    // is lost between storing and recording (recording → failed → recording).
    let lines = vec![
        line("a1.dat", "one"),
        "not-a-url | | | | x | x".to_owned(),
        line("a3.dat", "three"),
        line("a4.dat", "four"),
        line("a5.dat", "five"),
        line("a6.dat", "six"),
    ];
    let a = submit(put_manifest("a.checkm", &lines).await, "c1").await;
    let o3_first = format!("ingest-{}-r0-a1", a.job(3));
    operator::hold(&ingest_ctx, &Target::Job(a.job(5)), "check", "ops", now())
        .await
        .unwrap();
    // Up to processing, then o4's file goes missing.
    for _ in 0..6 {
        ingest::tick(&ingest_ctx, now()).await.unwrap();
    }
    let o4 = state(a.job(4)).await;
    assert_eq!(o4.state, JobState::Processing);
    let lost = o4.stored[0].key.clone();
    let kept = s.ctx.store.get(&lost).await.unwrap().unwrap().body;
    s.ctx.store.delete(&lost).await.unwrap();
    // o6's stored copy goes missing as recording lists it.
    let o6_storage = ingest_ctx.ingest().keys.storage(
        "c1",
        &granary::domain::ingest::deposit::storage_name(None, a.job(6).as_str()),
    );
    let o6_stored = format!("{o6_storage}producer/a6.dat");
    let losing = Ctx {
        store: Arc::new(LosesBeforeListing {
            inner: s.ctx.store.clone(),
            prefix: o6_storage.clone(),
            victim: std::sync::Mutex::new(Some(o6_stored.clone())),
        }),
        ..ingest_ctx.clone()
    };
    settle(&s, &losing, &jobs, &[&o3_first]).await;
    assert_eq!(state(a.job(1)).await.state, JobState::Completed);
    assert_eq!(state(a.job(2)).await.state, JobState::Failed);
    assert_eq!(state(a.job(3)).await.state, JobState::Failed);
    let o6 = state(a.job(6)).await;
    assert_eq!(o6.state, JobState::Failed);
    assert!(o6.reason.contains("is missing"), "{}", o6.reason);
    assert_eq!(o6.last_successful_status, Some(JobState::Storing));
    // Its processing failure is on the stack's failure DLQ, with its reason, as a granule's is.
    let letters = s.ctx.failure_dlq.receive(10, 30, 1).await.unwrap();
    let notice: Vec<ingest_contract::IngestNotice> = letters
        .iter()
        .filter_map(|m| serde_json::from_str(&m.body).ok())
        .collect();
    assert_eq!(notice.len(), 1, "{letters:?}");
    assert_eq!(
        (notice[0].ingest_job.clone(), notice[0].attempt),
        (a.job(3), 1)
    );
    assert!(
        letters[0].attributes["reason"].contains("exited with code 1"),
        "{:?}",
        letters[0].attributes
    );
    let o4 = state(a.job(4)).await;
    assert_eq!(o4.state, JobState::Failed);
    assert!(o4.reason.starts_with("storage:"), "{}", o4.reason);
    assert_eq!(state(a.job(5)).await.state, JobState::Held);
    assert_eq!(
        batch_state(a.clone()).await,
        BatchState::Processing,
        "a held job keeps it open"
    );
    let deleted = operator::delete_job(&ingest_ctx, &a.job(5), true, now())
        .await
        .unwrap();
    assert_eq!(deleted.state, JobState::Deleted);
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(batch_state(a.clone()).await, BatchState::Failed);
    // Resumes: o3 at processing (a new Batch job), o4 at storing once its file is back, o6
    // at recording once its stored copy is.
    s.ctx
        .store
        .put(&lost, kept, PutCondition::Overwrite)
        .await
        .unwrap();
    s.ctx
        .store
        .put(&o6_stored, Bytes::from("six"), PutCondition::Overwrite)
        .await
        .unwrap();
    let resumed = operator::resume(
        &ingest_ctx,
        &[a.job(3), a.job(4), a.job(2), a.job(6)],
        now(),
    )
    .await
    .unwrap();
    assert_eq!(resumed[0].outcome, Ok(JobState::Processing));
    assert_eq!(resumed[1].outcome, Ok(JobState::Storing));
    assert!(
        resumed[2].outcome.is_err(),
        "an unreadable line cannot resume"
    );
    assert_eq!(resumed[3].outcome, Ok(JobState::Recording));
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    // The unreadable one is still failed: the update report keeps the batch failed.
    operator::update_report(&ingest_ctx, &a, now())
        .await
        .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(batch_state(a.clone()).await, BatchState::Failed);
    // Deleted (reported, so no confirmation), the next update report completes the batch and
    // cleanup follows.
    operator::delete_job(&ingest_ctx, &a.job(2), false, now())
        .await
        .unwrap();
    operator::update_report(&ingest_ctx, &a, now())
        .await
        .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(batch_state(a.clone()).await, BatchState::Deleted);
    let reports = operator::reports(&ingest_ctx, &a).await.unwrap();
    assert_eq!(reports.len(), 3);
    assert_eq!(reports[2].failed.len(), 0);
    for n in [1, 3, 4, 6] {
        let job = state(a.job(n)).await;
        assert_eq!(job.state, JobState::Deleted, "job {n} cleaned up");
        // Stored on the emulator's S3 (a server-side copy per file), and kept after cleanup.
        let manifest = job.storage_manifest.unwrap();
        assert!(
            s.ctx.store.get(&manifest).await.unwrap().is_some(),
            "{manifest}"
        );
    }

    // Batch B: its collection is held; it is deleted while held (confirmed).
    operator::hold(
        &ingest_ctx,
        &Target::Collection("c2".into()),
        "legal",
        "ops",
        now(),
    )
    .await
    .unwrap();
    let b = submit(
        put_manifest("b.checkm", &[line("b1.dat", "bee")]).await,
        "c2",
    )
    .await;
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(batch_state(b.clone()).await, BatchState::Held);
    assert!(operator::delete_batch(&ingest_ctx, &b, false, now())
        .await
        .is_err());
    operator::delete_batch(&ingest_ctx, &b, true, now())
        .await
        .unwrap();
    assert_eq!(batch_state(b.clone()).await, BatchState::Deleted);

    // Batch C: its job is held, then released (held → pending); then clean, straight from
    // reporting to completed.
    let c = submit(
        put_manifest("c.checkm", &[line("c1.dat", "sea")]).await,
        "c3",
    )
    .await;
    operator::hold(
        &ingest_ctx,
        &Target::Job(c.job(1)),
        "look first",
        "ops",
        now(),
    )
    .await
    .unwrap();
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(state(c.job(1)).await.state, JobState::Held);
    let released = operator::release(&ingest_ctx, &Target::Job(c.job(1)), now())
        .await
        .unwrap();
    assert_eq!(released.jobs, vec![c.job(1)]);
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    let reports = operator::reports(&ingest_ctx, &c).await.unwrap();
    assert_eq!((reports.len(), reports[0].completed.len()), (1, 1));
    assert_eq!(batch_state(c).await, BatchState::Deleted);

    // Batch D: a file served altered fails it; a failed batch is deleted with its jobs.
    server.archive.put("d1.dat", b"DEE", vec![]);
    let d_line = format!("{base}d1.dat | md5 | {} | | d1.dat | d1", md5_hex(b"dee"));
    let d = submit(put_manifest("d.checkm", &[d_line]).await, "c4").await;
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    assert_eq!(batch_state(d.clone()).await, BatchState::Failed);
    operator::delete_batch(&ingest_ctx, &d, false, now())
        .await
        .unwrap();
    assert_eq!(batch_state(d.clone()).await, BatchState::Deleted);
    assert!(ingest_ctx.ingest().job(&d.job(1)).await.unwrap().is_none());
}

/// A bucket in which `victim` disappears just before the first listing under `prefix` (what
/// recording does first): a stored copy lost between storing and recording.
struct LosesBeforeListing {
    inner: Arc<dyn granary::ports::ObjectStore>,
    prefix: String,
    victim: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl granary::ports::ObjectStore for LosesBeforeListing {
    async fn get(
        &self,
        key: &str,
    ) -> Result<Option<granary::ports::StoredObject>, granary::ports::StoreError> {
        self.inner.get(key).await
    }
    async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, granary::ports::StoreError> {
        self.inner.get_range(key, range).await
    }
    async fn get_suffix(
        &self,
        key: &str,
        len: u64,
    ) -> Result<(Bytes, u64), granary::ports::StoreError> {
        self.inner.get_suffix(key, len).await
    }
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, granary::ports::StoreError> {
        self.inner.put(key, body, condition).await
    }
    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<granary::ports::ObjectMeta>, granary::ports::StoreError> {
        if prefix == self.prefix {
            let victim = self.victim.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(key) = victim {
                self.inner.delete(&key).await?;
            }
        }
        self.inner.list(prefix).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), granary::ports::StoreError> {
        self.inner.copy(from, to).await
    }
    async fn delete(&self, key: &str) -> Result<(), granary::ports::StoreError> {
        self.inner.delete(key).await
    }
    async fn begin_upload<'a>(
        &'a self,
        key: &str,
    ) -> Result<Box<dyn granary::ports::Upload + 'a>, granary::ports::StoreError> {
        self.inner.begin_upload(key).await
    }
}

/// Dies right after the `nth` write of a job record (a key under `jobs/`): the write is made and
/// its answer lost, and every call after it is refused (the invocation is dead).
struct DieAfterRecordWrite {
    nth: usize,
    writes: std::sync::atomic::AtomicUsize,
    dead: std::sync::atomic::AtomicBool,
}

impl Tap for DieAfterRecordWrite {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        use std::sync::atomic::Ordering;
        if self.dead.load(Ordering::SeqCst) {
            return Err(Refusal {
                message: "the invocation died",
                ambiguous: false,
            });
        }
        if call.op == Op::StorePut
            && call.target.contains("/jobs/")
            && self.writes.fetch_add(1, Ordering::SeqCst) + 1 == self.nth
        {
            self.dead.store(true, Ordering::SeqCst);
            return Ok(Fate::MakeAndLoseAnswer);
        }
        Ok(Fate::Make)
    }
}

#[tokio::test]
async fn a_crash_between_a_job_record_and_its_index_is_repaired_by_the_next_pass() {
    let s = granary_tests::stack("ingestcrash", 1, &[]).await;
    let server = http_source::start().await;
    server.archive.put("a.txt", b"alpha", vec![]);
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let settings = IngestSettings {
        timeout: Duration::from_secs(10),
        ..IngestSettings::default()
    };
    let ingest_ctx = ingest_on(&s, jobs.clone(), settings);
    let batch = ingest::submit(
        &ingest_ctx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("{}a.txt", server.index_url),
            kind: ManifestKind::File,
            priority: 5,
            callback: None,
            profile: None,
            deposit: Default::default(),
            submitter: "test".into(),
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    // The pass that spawns the job (the record's first write) and moves it on dies right after
    // the record's change to estimating: on S3 the record says estimating, the queue's index
    // still lists it pending.
    let mut crashing = ingest_ctx.clone();
    let tap = Arc::new(DieAfterRecordWrite {
        nth: 2,
        writes: Default::default(),
        dead: Default::default(),
    });
    crashing.store = Arc::new(TappedStore {
        inner: s.ctx.store.clone(),
        tap: tap.clone(),
    });
    assert!(ingest::tick(&crashing, chrono::Utc::now()).await.is_err());
    let id = batch.id.job(1);
    let record = ingest_ctx.ingest().job(&id).await.unwrap().unwrap().value;
    assert_eq!(record.state, JobState::Estimating);
    assert_eq!(
        ingest_ctx.ingest().listed(JobState::Pending).await.unwrap(),
        vec![(5, id.clone())],
        "the stale marker"
    );
    assert!(ingest_ctx
        .ingest()
        .listed(JobState::Estimating)
        .await
        .unwrap()
        .is_empty());
    // The schedule fires again: the lister repairs the index and the job goes all the way.
    settle(&s, &ingest_ctx, &jobs, &[]).await;
    let job = ingest_ctx.ingest().job(&id).await.unwrap().unwrap().value;
    assert!(
        matches!(job.state, JobState::Completed | JobState::Deleted),
        "{}",
        job.state
    );
    for state in JobState::ALL {
        assert!(
            ingest_ctx.ingest().listed(state).await.unwrap().is_empty() || state == job.state,
            "{id} still listed {state}"
        );
    }
    let b = ingest_ctx
        .ingest()
        .batch(&batch.id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(b.state, BatchState::Deleted, "completed and cleaned up");
}
