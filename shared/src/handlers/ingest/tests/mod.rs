//! The ingest queue end to end on the in-memory twins: every step, holds, capacity, failures,
//! resume, reports and cleanup.

use super::operator::{self, Target};
use super::*;
use crate::adapters::memory::{
    job_state_change, Ending, MemoryEventBus, MemoryJobRunner, MemoryQueue, MemoryRemote,
    MemoryStore,
};
use crate::domain::batch_event::JobStatus;
use crate::domain::ingest::batch::BatchState;
use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::manifest::ManifestKind;
use crate::handlers::monitor::{self, MonitorOutcome};
use crate::handlers::Ctx;
use crate::ports::PutCondition;
use crate::ports::{JobRunner, ObjectStore, Queue};
use bytes::Bytes;
use chrono::Utc;
use std::sync::Arc;

struct World {
    ingest_ctx: Ctx,
    remote: Arc<MemoryRemote>,
    jobs: Arc<MemoryJobRunner>,
    bus: Arc<MemoryEventBus>,
    store: Arc<MemoryStore>,
    dlq: Arc<MemoryQueue>,
    /// The job monitor on the same bucket and failure DLQ: Batch's events go to it.
    monitor: crate::handlers::Ctx,
}

/// Processing attempts in these tests (GRANARY_MAX_RETRIES=2).
const MAX_ATTEMPTS: u32 = 3;

fn world(settings: IngestSettings) -> World {
    let store = Arc::new(MemoryStore::new());
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let remote = Arc::new(MemoryRemote::default());
    let bus = Arc::new(MemoryEventBus::default());
    let dlq = Arc::new(MemoryQueue::new("failure-dlq"));
    let config = crate::config::Config::from_pairs(&[
        ("GRANARY_BUCKET", "bucket"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "failure-dlq"),
        ("GRANARY_MAX_RETRIES", "2"),
    ])
    .unwrap();
    assert_eq!(config.max_attempt(), MAX_ATTEMPTS);
    let config = crate::config::Config {
        ingest: settings,
        ..config
    };
    let ingest_ctx = Ctx {
        store: store.clone(),
        jobs: jobs.clone(),
        remote: remote.clone(),
        bus: bus.clone(),
        failure_dlq: dlq.clone(),
        ..Ctx::in_memory(config)
    };
    let monitor = Ctx {
        jobs: Arc::new(crate::adapters::unset::UnsetJobRunner),
        ..ingest_ctx.clone()
    };
    World {
        ingest_ctx,
        remote,
        jobs,
        bus,
        store,
        dlq,
        monitor,
    }
}

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

impl World {
    /// Serves `files` (name, body) and keeps a files manifest listing them in the bucket; the
    /// names in `wrong_digest` are listed with a digest that does not match.
    async fn manifest(&self, name: &str, files: &[(&str, &str)], wrong_digest: &[&str]) -> String {
        let mut text = String::from(
            "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n",
        );
        for (file, body) in files {
            let url = format!("http://archive/{file}");
            self.remote.serve(&url, Bytes::from(body.to_string()));
            let digest = if wrong_digest.contains(file) {
                "0".repeat(32)
            } else {
                md5_hex(body.as_bytes())
            };
            text.push_str(&format!("{url} | md5 | {digest} | | {file} | {file}\n"));
        }
        let key = self.ingest_ctx.ingest().keys.manifest(name);
        self.store
            .put(&key, Bytes::from(text), PutCondition::Overwrite)
            .await
            .unwrap();
        format!("s3://bucket/{key}")
    }

    async fn submit(
        &self,
        manifest_url: &str,
        collection: &str,
        callback: Option<&str>,
    ) -> BatchId {
        let submission = crate::domain::ingest::record::Submission {
            collection: collection.into(),
            manifest_url: manifest_url.into(),
            kind: ManifestKind::Files,
            priority: 5,
            callback: callback.map(str::to_owned),
            profile: None,
            submitter: "test".into(),
            deposit: Default::default(),
        };
        submit(&self.ingest_ctx, submission, Utc::now())
            .await
            .unwrap()
            .id
    }

    /// Ticks until nothing moves, finishing every Batch job as `succeed` says; each end reaches
    /// the job monitor as Batch's event.
    async fn run(&self, succeed: impl Fn(&str) -> bool) -> TickSummary {
        self.run_with(
            |job, _| {
                if succeed(job) {
                    Ending::Succeeded
                } else {
                    Ending::Exited(1)
                }
            },
            true,
        )
        .await
    }

    /// Ticks until nothing moves; Batch ends each running job as `ending` (ingest job id, the
    /// job's name) says, and its event reaches the monitor when `events` (otherwise only the
    /// dispatcher's DescribeJobs finds the end).
    async fn run_with(&self, ending: impl Fn(&str, &str) -> Ending, events: bool) -> TickSummary {
        let mut total = TickSummary::default();
        for _ in 0..40 {
            let s = tick(&self.ingest_ctx, Utc::now()).await.unwrap();
            let mut finished = 0;
            for (request, job) in self.jobs.running() {
                let id = &request.environment["INGEST_JOB_ID"];
                let detail = self
                    .jobs
                    .end(&job.job_id, ending(id, &job.job_name))
                    .unwrap();
                finished += 1;
                if events {
                    let event = job_state_change(&detail).to_string();
                    let out = monitor::handle_message(&self.monitor, &event)
                        .await
                        .unwrap();
                    assert!(
                        matches!(out, MonitorOutcome::IngestProcessing { .. }),
                        "{out:?}"
                    );
                }
            }
            let quiet = s == TickSummary::default() && finished == 0;
            total.failed += s.failed;
            total.notified += s.notified;
            total.processed += s.processed;
            total.slow_attempts += s.slow_attempts;
            total.processing_retried += s.processing_retried;
            total.batches_reported += s.batches_reported;
            if quiet {
                break;
            }
        }
        total
    }

    async fn batch(&self, id: &BatchId) -> crate::domain::ingest::record::BatchRecord {
        self.ingest_ctx
            .ingest()
            .batch(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }

    async fn job(&self, id: &JobId) -> crate::domain::ingest::record::JobRecord {
        self.ingest_ctx
            .ingest()
            .job(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }
}

#[tokio::test]
async fn a_clean_batch_goes_all_the_way_and_is_cleaned_up() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest(
            "m1",
            &[("a.txt", "alpha"), ("b.txt", "bravo"), ("c.txt", "charlie")],
            &[],
        )
        .await;
    let id = w.submit(&m, "coll", Some("http://depositor/cb")).await;
    assert_eq!(
        w.batch(&id).await.state,
        BatchState::Pending,
        "submit returns at once"
    );
    let s = w.run(|_| true).await;
    assert_eq!(s.notified, 3);
    let batch = w.batch(&id).await;
    assert_eq!(
        batch.state,
        BatchState::Deleted,
        "completed, then cleaned up"
    );
    assert_eq!(batch.jobs, 3);
    assert_eq!(batch.reports, 1);
    let report = &operator::reports(&w.ingest_ctx, &id).await.unwrap()[0];
    assert_eq!(report.completed.len(), 3);
    assert!(report.failed.is_empty());
    // Working files are gone; the catalog records and the report stay.
    assert!(w.store.list("ingest/objects/").await.unwrap().is_empty());
    assert_eq!(w.store.list("ingest/catalog/").await.unwrap().len(), 3);
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Deleted);
    assert_eq!(job.last_successful_status, Some(JobState::Notify));
    // Every job announced, the batch announced, the depositor called back for each and the batch.
    let kinds: Vec<String> = w
        .bus
        .events()
        .iter()
        .map(|e| e.detail_type.clone())
        .collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "Ingest Job Completed")
            .count(),
        3
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "Ingest Batch Reported")
            .count(),
        1
    );
    assert_eq!(w.remote.calls().len(), 4);
}

#[tokio::test]
async fn a_digest_mismatch_and_an_unreadable_line_fail_at_once_and_the_batch_reports_failed() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest(
            "m2",
            &[("ok.txt", "fine"), ("bad.txt", "tampered")],
            &["bad.txt"],
        )
        .await;
    let key = m.strip_prefix("s3://bucket/").unwrap();
    let mut text =
        String::from_utf8(w.store.get(key).await.unwrap().unwrap().body.to_vec()).unwrap();
    text.push_str("ftp://nowhere/x | | | | x | x\n");
    w.store
        .put(key, Bytes::from(text), PutCondition::Overwrite)
        .await
        .unwrap();
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    let batch = w.batch(&id).await;
    assert_eq!(batch.state, BatchState::Failed);
    let report = &operator::reports(&w.ingest_ctx, &id).await.unwrap()[0];
    assert_eq!(report.completed, vec![id.job(1)]);
    assert_eq!(report.failed.len(), 2);
    let mismatch = &report.failed[0];
    assert!(
        mismatch.reason.contains("digest mismatch"),
        "{}",
        mismatch.reason
    );
    assert_eq!(
        mismatch.last_successful_status,
        Some(JobState::Provisioning)
    );
    let unreadable = &report.failed[1];
    assert!(
        unreadable.reason.contains("line 5"),
        "{}",
        unreadable.reason
    );
    assert_eq!(unreadable.last_successful_status, None);
    assert_eq!(
        w.jobs.submitted().len(),
        1,
        "only the good object was processed"
    );
    // The unreadable one cannot resume; the mismatch can (it restarts downloading).
    let resumed = operator::resume(&w.ingest_ctx, &[id.job(3), id.job(2)], Utc::now())
        .await
        .unwrap();
    assert!(resumed[0]
        .outcome
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("submit it again"));
    assert_eq!(resumed[1].outcome, Ok(JobState::Downloading));
    assert_eq!(w.job(&id.job(2)).await.retry_count, 1);
}

#[tokio::test]
async fn a_held_collection_holds_new_batches_until_released() {
    let w = world(IngestSettings::default());
    operator::hold(
        &w.ingest_ctx,
        &Target::Collection("coll".into()),
        "migration",
        "ops",
        Utc::now(),
    )
    .await
    .unwrap();
    let m = w.manifest("m3", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Held);
    assert!(w.jobs.submitted().is_empty());
    let released = operator::release(
        &w.ingest_ctx,
        &Target::Collection("coll".into()),
        Utc::now(),
    )
    .await
    .unwrap();
    assert_eq!(released.batches, vec![id.clone()]);
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
}

#[tokio::test]
async fn a_held_job_waits_and_a_released_one_goes_on() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest("m4", &[("a.txt", "alpha"), ("b.txt", "bravo")], &[])
        .await;
    let id = w.submit(&m, "coll", None).await;
    operator::hold(
        &w.ingest_ctx,
        &Target::Job(id.job(2)),
        "check it",
        "ops",
        Utc::now(),
    )
    .await
    .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.job(&id.job(1)).await.state, JobState::Completed);
    assert_eq!(w.job(&id.job(2)).await.state, JobState::Held);
    assert_eq!(
        w.batch(&id).await.state,
        BatchState::Processing,
        "a held job keeps its batch open"
    );
    operator::release(&w.ingest_ctx, &Target::Job(id.job(2)), Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
}

/// A release that died right after removing its hold: the held batch and job are moved back by
/// the next tick (no hold covers them), never left held with nothing to release them.
#[tokio::test]
async fn a_release_that_died_after_removing_its_hold_strands_nothing() {
    let w = world(IngestSettings::default());
    let target = Target::Collection("coll".into());
    operator::hold(&w.ingest_ctx, &target, "migration", "ops", Utc::now())
        .await
        .unwrap();
    let m = w.manifest("m3b", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Held);
    // The release's first call, and nothing after it.
    let key = target.key(&w.ingest_ctx);
    w.store.delete(&key).await.unwrap();
    let tick = super::tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    assert_eq!(tick.released, 1, "{tick:?}");
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
}

#[tokio::test]
async fn provisioning_admits_only_what_fits_and_re_evaluates_every_tick() {
    let w = world(IngestSettings {
        capacity_bytes: 12,
        ..IngestSettings::default()
    });
    let m = w
        .manifest(
            "m5",
            &[
                ("a.bin", "0123456789"),
                ("b.bin", "0123456789"),
                ("c.bin", "0123456789"),
            ],
            &[],
        )
        .await;
    let id = w.submit(&m, "coll", None).await;
    // Jobs are never finished: the first job holds the capacity.
    for _ in 0..6 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let states: Vec<JobState> = futures::future::join_all((1..=3).map(|n| {
        let jid = id.job(n);
        let w = &w;
        async move { w.job(&jid).await.state }
    }))
    .await;
    assert_eq!(
        states
            .iter()
            .filter(|s| **s == JobState::Provisioning)
            .count(),
        2,
        "{states:?}"
    );
    // The running job ends: the next one is admitted, and so on until all are done.
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
}

/// One id followed through the logs: a job's step in a tick logs inside a span naming the job,
/// its batch and its collection.
#[tokio::test]
async fn each_log_line_of_a_jobs_step_names_the_job_its_batch_and_collection() {
    let lines = crate::handlers::log_capture::Lines::default();
    let _logs = lines.capture();
    let w = world(IngestSettings::default());
    w.remote.fail_callbacks_to("http://depositor/down");
    let m = w.manifest("m7", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", Some("http://depositor/down")).await;
    w.run(|_| true).await;
    let failed = lines.saying("callback failed");
    assert!(!failed.is_empty());
    for line in &failed {
        let span = crate::handlers::log_capture::span(line, "ingest_job");
        assert_eq!(span["job"], id.job(1).to_string());
        assert_eq!(span["batch"], id.to_string());
        assert_eq!(span["collection"], "coll");
    }
}

#[tokio::test]
async fn a_failing_callback_fails_the_job_and_a_resume_retries_only_the_notify() {
    let w = world(IngestSettings::default());
    w.remote.fail_callbacks_to("http://depositor/down");
    let m = w.manifest("m6", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", Some("http://depositor/down")).await;
    w.run(|_| true).await;
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.contains("callback"), "{}", job.reason);
    assert_eq!(job.last_successful_status, Some(JobState::Recording));
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    // The depositor's server is back; the job resumes at notify, not from the start.
    let w2 = World {
        ingest_ctx: Ctx {
            remote: Arc::new(MemoryRemote::default()),
            ..w.ingest_ctx.clone()
        },
        ..w
    };
    let resumed = operator::resume(&w2.ingest_ctx, &[id.job(1)], Utc::now())
        .await
        .unwrap();
    assert_eq!(resumed[0].outcome, Ok(JobState::Notify));
    w2.run(|_| true).await;
    assert_eq!(w2.job(&id.job(1)).await.state, JobState::Completed);
    assert_eq!(w2.jobs.submitted().len(), 1, "not processed again");
    // Update report: what changed since the first.
    operator::update_report(&w2.ingest_ctx, &id, Utc::now())
        .await
        .unwrap();
    w2.run(|_| true).await;
    let reports = operator::reports(&w2.ingest_ctx, &id).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[1].newly_completed, vec![id.job(1)]);
    assert!(reports[1].failed.is_empty());
    assert_eq!(w2.batch(&id).await.state, BatchState::Deleted);
}

#[tokio::test]
async fn a_failed_processing_job_resumes_with_a_new_batch_job_and_a_failed_batch_can_be_deleted() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest("m7", &[("a.txt", "alpha"), ("b.txt", "bravo")], &[])
        .await;
    let id = w.submit(&m, "coll", None).await;
    let bad = id.job(2).to_string();
    w.run(|job| job != bad).await;
    let failed = w.job(&id.job(2)).await;
    assert_eq!(failed.state, JobState::Failed);
    assert!(
        failed.reason.contains("exited with code 1"),
        "{}",
        failed.reason
    );
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    let refused = operator::delete_batch(&w.ingest_ctx, &id, false, Utc::now()).await;
    assert!(
        refused.is_ok(),
        "a failed batch may be deleted: {refused:?}"
    );
    assert!(w
        .ingest_ctx
        .ingest()
        .job(&id.job(2))
        .await
        .unwrap()
        .is_none());
    assert!(w.store.list("ingest/objects/").await.unwrap().is_empty());
}

#[tokio::test]
async fn deleting_a_job_before_its_batch_reported_needs_a_confirmation() {
    let w = world(IngestSettings::default());
    let m = w.manifest("m8", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    operator::hold(
        &w.ingest_ctx,
        &Target::Job(id.job(1)),
        "wrong object",
        "ops",
        Utc::now(),
    )
    .await
    .unwrap();
    w.run(|_| true).await;
    let e = operator::delete_job(&w.ingest_ctx, &id.job(1), false, Utc::now()).await;
    assert!(
        matches!(e, Err(HandlerError::Refused(ref why)) if why.contains("confirm")),
        "{e:?}"
    );
    let deleted = operator::delete_job(&w.ingest_ctx, &id.job(1), true, Utc::now())
        .await
        .unwrap();
    assert_eq!(deleted.state, JobState::Deleted);
    w.run(|_| true).await;
    // Its only job deleted, the batch has nothing to wait for: it reports (an empty report) and
    // ends, rather than stay processing for ever (it did, with nothing left to report on).
    let batch = w.batch(&id).await;
    assert_eq!(batch.reports, 1, "{batch:?}");
    assert_eq!(
        batch.state,
        BatchState::Deleted,
        "reported, then cleaned up"
    );
}

#[tokio::test]
async fn a_job_resumed_at_processing_runs_a_new_batch_job_and_the_update_report_says_so() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest("m9", &[("a.txt", "alpha"), ("b.txt", "bravo")], &[])
        .await;
    let id = w.submit(&m, "coll", None).await;
    let bad = id.job(2).to_string();
    w.run(|job| job != bad).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    let resumed = operator::resume(&w.ingest_ctx, &[id.job(2)], Utc::now())
        .await
        .unwrap();
    assert_eq!(resumed[0].outcome, Ok(JobState::Processing));
    // Still failing: the update report keeps the batch failed and says what is still failing.
    w.run(|job| job != bad).await;
    operator::update_report(&w.ingest_ctx, &id, Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    let reports = operator::reports(&w.ingest_ctx, &id).await.unwrap();
    assert_eq!(reports[1].still_failed, vec![id.job(2)]);
    let names: Vec<String> = w
        .jobs
        .submitted()
        .iter()
        .map(|r| r.job_name.clone())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with("j00002-r1-a1")),
        "{names:?}"
    );
    // Fixed now: resumed again, it completes; the next update report completes the batch.
    operator::resume(&w.ingest_ctx, &[id.job(2)], Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    operator::update_report(&w.ingest_ctx, &id, Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    let reports = operator::reports(&w.ingest_ctx, &id).await.unwrap();
    assert_eq!(reports.len(), 3);
    assert_eq!(reports[2].newly_completed, vec![id.job(2)]);
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
    assert_eq!(w.job(&id.job(2)).await.retry_count, 2);
}

#[tokio::test]
async fn a_held_batch_and_a_reported_failed_job_can_be_deleted() {
    let w = world(IngestSettings::default());
    operator::hold(
        &w.ingest_ctx,
        &Target::Collection("frozen".into()),
        "legal",
        "ops",
        Utc::now(),
    )
    .await
    .unwrap();
    let m = w.manifest("m10", &[("a.txt", "alpha")], &[]).await;
    let held = w.submit(&m, "frozen", None).await;
    w.run(|_| true).await;
    assert!(
        operator::delete_batch(&w.ingest_ctx, &held, false, Utc::now())
            .await
            .is_err()
    );
    let gone = operator::delete_batch(&w.ingest_ctx, &held, true, Utc::now())
        .await
        .unwrap();
    assert_eq!(gone.state, BatchState::Deleted);

    let m = w.manifest("m11", &[("b.txt", "bravo")], &["b.txt"]).await;
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    // Reported: no confirmation needed.
    let deleted = operator::delete_job(&w.ingest_ctx, &id.job(1), false, Utc::now())
        .await
        .unwrap();
    assert_eq!(deleted.state, JobState::Deleted);
    assert!(w
        .ingest_ctx
        .ingest()
        .listed(JobState::Failed)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_downloaded_file_lost_before_storing_fails_the_job_and_a_resume_stores_it_again() {
    let w = world(IngestSettings::default());
    let m = w.manifest("m12", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    // Up to processing: the job's file is stored, its Batch job still runs.
    for _ in 0..6 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Processing);
    let stored = job.stored[0].key.clone();
    let kept = w.store.get(&stored).await.unwrap().unwrap().body;
    w.store.delete(&stored).await.unwrap();
    w.run(|_| true).await;
    let failed = w.job(&id.job(1)).await;
    assert_eq!(failed.state, JobState::Failed);
    assert!(failed.reason.contains("is missing"), "{}", failed.reason);
    assert_eq!(failed.last_successful_status, Some(JobState::Processing));
    // The file is put back (the processing job's output restored); the resume stores again.
    w.store
        .put(&stored, kept, PutCondition::Overwrite)
        .await
        .unwrap();
    let resumed = operator::resume(&w.ingest_ctx, &[id.job(1)], Utc::now())
        .await
        .unwrap();
    assert_eq!(resumed[0].outcome, Ok(JobState::Storing));
    w.run(|_| true).await;
    assert_eq!(w.job(&id.job(1)).await.state, JobState::Completed);
    assert_eq!(w.jobs.submitted().len(), 1, "processing is not repeated");
    // The batch had reported failed; its update report completes it, and cleanup follows.
    operator::update_report(&w.ingest_ctx, &id, Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.job(&id.job(1)).await.state, JobState::Deleted);
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
}

/// A manifest of manifests through the dispatcher: each object's own files manifest is read
/// as the batch spawns its jobs, so an object whose manifest is corrupt fails at once, with
/// why, and the other objects go all the way.
#[tokio::test]
async fn a_manifest_of_manifests_spawns_an_object_each_and_a_corrupt_one_fails_at_once() {
    let w = world(IngestSettings::default());
    let good = w
        .manifest("o1", &[("p1.txt", "one"), ("p2.txt", "two")], &[])
        .await;
    let keys = &w.ingest_ctx.ingest().keys;
    w.store
        .put(
            &keys.manifest("o2"),
            Bytes::from_static(b"<html>not a manifest</html>\n"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let top = format!(
        "#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-manifest-batch-manifest\n\
         #%fields | nfo:fileUrl | mrt:localIdentifier\n\
         {good} | o1\ns3://bucket/{} | o2\n",
        keys.manifest("o2")
    );
    w.store
        .put(
            &keys.manifest("top"),
            Bytes::from(top),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let submission = crate::domain::ingest::record::Submission {
        collection: "coll".into(),
        manifest_url: format!("s3://bucket/{}", keys.manifest("top")),
        kind: ManifestKind::Manifests,
        priority: 5,
        callback: None,
        profile: None,
        submitter: "test".into(),
        deposit: Default::default(),
    };
    let id = submit(&w.ingest_ctx, submission, Utc::now())
        .await
        .unwrap()
        .id;
    w.run(|_| true).await;
    let first = w.job(&id.job(1)).await;
    assert_eq!(first.state, JobState::Completed, "{}", first.reason);
    let names: Vec<&str> = first.stored.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["p1.txt", "p2.txt"]);
    let second = w.job(&id.job(2)).await;
    assert_eq!(second.state, JobState::Failed);
    assert!(
        second.reason.contains("not a manifest</html>") && second.reason.contains("line 1"),
        "{}",
        second.reason
    );
    // Failed at once: it never reached processing.
    assert_eq!(w.jobs.submitted().len(), 1);
}

/// A processing job Batch describes in a way no code can read, whose event never came, fails
/// with why instead of waiting in PROCESSING for ever (its event could not be read either); the
/// description is kept under rejects/ and the failure dead-lettered.
#[tokio::test]
async fn a_processing_job_described_unreadably_fails_with_why() {
    let w = world(IngestSettings::default());
    let m = w.manifest("m-unreadable", &[("a.txt", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    for _ in 0..6 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let running = w.jobs.running();
    assert_eq!(running.len(), 1, "{running:?}");
    let batch_job = running[0].1.job_id.clone();
    w.jobs.finish(
        &batch_job,
        JobStatus::Failed,
        serde_json::json!({"jobId": 7, "status": ["FAILED"]}),
    );
    for _ in 0..3 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.contains("cannot be read"), "{}", job.reason);
    let rejects = w
        .store
        .list(&w.ingest_ctx.config.layout.reject_prefix)
        .await
        .unwrap();
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    // The kept description's notice, and the job's failure.
    let reasons: Vec<String> = w
        .dlq
        .messages()
        .iter()
        .map(|m| m.attributes[crate::contracts::messages::attribute::REASON].clone())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("cannot be read")),
        "{reasons:?}"
    );
}

/// Seed 004's cleanup: a job's working files go as it completes, even when its batch ends
/// Failed (whose own cleanup waits for an operator).
#[tokio::test]
async fn a_completed_jobs_files_go_as_it_completes_though_its_batch_fails() {
    let w = world(IngestSettings::default());
    let m = w
        .manifest(
            "m-clean",
            &[("ok.txt", "fine"), ("bad.txt", "tampered")],
            &["bad.txt"],
        )
        .await;
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
    let done = w.job(&id.job(1)).await;
    assert_eq!(done.state, JobState::Completed, "{}", done.reason);
    let left = w
        .store
        .list(&w.ingest_ctx.ingest().keys.objects(&id.job(1)))
        .await
        .unwrap();
    assert!(left.is_empty(), "working files left: {left:?}");
}

/// A submission may not name what granary keeps for others: a key of its own bucket outside the
/// manifests folder (here another collection's stored files manifest) fails the job unread.
#[tokio::test]
async fn a_manifest_url_naming_another_collections_object_is_refused_unread() {
    let w = world(IngestSettings::default());
    let kept = w
        .manifest("theirs", &[("secret-content.txt", "x")], &[])
        .await;
    let key = kept.strip_prefix("s3://bucket/").unwrap();
    let body = w.store.get(key).await.unwrap().unwrap().body;
    let theirs = "ingest/objects/other-collection/files.checkm";
    w.store
        .put(theirs, body, PutCondition::Overwrite)
        .await
        .unwrap();
    let id = w
        .submit(&format!("s3://bucket/{theirs}"), "coll", None)
        .await;
    w.run(|_| true).await;
    let report = &operator::reports(&w.ingest_ctx, &id).await.unwrap()[0];
    assert!(report.completed.is_empty(), "{report:?}");
    let reason = &report.failed[0].reason;
    assert!(
        reason.contains("is not a manifest granary keeps"),
        "{reason}"
    );
    assert!(
        !format!("{report:?}").contains("secret-content"),
        "{report:?}"
    );
}

#[tokio::test]
async fn an_object_of_several_files_downloads_them_all_and_fails_on_the_first_bad_one() {
    let w = world(IngestSettings::default());
    let mut text = String::from("#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n");
    for (object, files) in [("good", ["p1", "p2", "p3"]), ("bad", ["q1", "q2", "q3"])] {
        for f in files {
            let url = format!("http://archive/{object}/{f}");
            w.remote.serve(&url, Bytes::from(f.to_owned()));
            let digest = if f == "q2" {
                "0".repeat(32)
            } else {
                md5_hex(f.as_bytes())
            };
            text.push_str(&format!("{url} | md5 | {digest} | | {f} | {object}\n"));
        }
    }
    let key = w.ingest_ctx.ingest().keys.manifest("multi");
    w.store
        .put(&key, Bytes::from(text), PutCondition::Overwrite)
        .await
        .unwrap();
    let id = w.submit(&format!("s3://bucket/{key}"), "coll", None).await;
    w.run(|_| true).await;
    let reports = operator::reports(&w.ingest_ctx, &id).await.unwrap();
    assert_eq!(reports[0].completed, vec![id.job(1)]);
    assert!(
        reports[0].failed[0].reason.contains("bad/q2"),
        "{:?}",
        reports[0].failed
    );
    let good = w.job(&id.job(1)).await;
    let names: Vec<&str> = good.stored.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["p1", "p2", "p3"], "stored in manifest order");
}

/// The DLQ's messages: (outcome attribute, reason attribute, body as an ingest notice).
async fn dead_letters(w: &World) -> Vec<(String, String, crate::contracts::ingest::IngestNotice)> {
    use crate::contracts::messages::attribute;
    w.dlq
        .messages()
        .iter()
        .map(|m| {
            (
                m.attributes[attribute::OUTCOME].clone(),
                m.attributes[attribute::REASON].clone(),
                serde_json::from_str(&m.body).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn spot_gets_the_next_attempt_and_an_application_failure_or_a_spent_budget_is_dead_lettered()
{
    let w = world(IngestSettings::default());
    let m = w
        .manifest(
            "m20",
            &[("a", "alpha"), ("b", "bravo"), ("c", "charlie")],
            &[],
        )
        .await;
    let id = w.submit(&m, "coll", None).await;
    let (a, b) = (id.job(1).to_string(), id.job(2).to_string());
    // a: reclaimed once, then fine; b: the application fails; c: reclaimed every time.
    let total = w
        .run_with(
            |job, name| {
                if job == a {
                    if name.ends_with("-a1") {
                        Ending::SpotReclaimed
                    } else {
                        Ending::Succeeded
                    }
                } else if job == b {
                    Ending::Exited(1)
                } else {
                    Ending::SpotReclaimed
                }
            },
            true,
        )
        .await;
    assert_eq!(
        total.processing_retried, 0,
        "the monitor saw every end first"
    );
    let ja = w.job(&id.job(1)).await;
    assert_eq!((ja.state, ja.processing_attempt), (JobState::Completed, 2));
    let jb = w.job(&id.job(2)).await;
    assert_eq!(jb.state, JobState::Failed);
    assert!(jb.reason.contains("no retry fixes it"), "{}", jb.reason);
    assert_eq!(jb.last_successful_status, Some(JobState::Downloading));
    let jc = w.job(&id.job(3)).await;
    assert_eq!(
        (jc.state, jc.processing_attempt),
        (JobState::Failed, MAX_ATTEMPTS)
    );
    assert!(jc.reason.contains("last attempt (3 of 3)"), "{}", jc.reason);
    // One Batch job per attempt, none submitted twice.
    let mut names: Vec<String> = w.jobs.submitted().into_iter().map(|r| r.job_name).collect();
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!((count, names.len()), (6, 6), "{names:?}");
    // Both failures are on the failure DLQ with their reasons; `granary redrive` leaves them
    // (not granules): `granary ingest resume` is what restarts an ingest job.
    let mut letters = dead_letters(&w).await;
    letters.sort_by(|x, y| x.2.ingest_job.cmp(&y.2.ingest_job));
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(letters[0].2.ingest_job, id.job(2));
    assert_eq!(letters[0].0, "NON_RETRYABLE");
    assert!(
        letters[0].1.contains("no retry fixes it"),
        "{}",
        letters[0].1
    );
    assert_eq!(
        (letters[1].2.ingest_job.clone(), letters[1].2.attempt),
        (id.job(3), 3)
    );
    let retry = MemoryQueue::new("retry");
    let opts = crate::handlers::redrive::RedriveOptions {
        dry_run: true,
        ..Default::default()
    };
    let summary = crate::handlers::redrive::redrive(
        w.dlq.as_ref(),
        &retry,
        &Default::default(),
        &opts,
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!((summary.not_granules, summary.redriven), (2, 0));
    // A resume of b runs processing again as a new run, its attempts counted afresh.
    operator::resume(&w.ingest_ctx, &[id.job(2)], Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    let jb = w.job(&id.job(2)).await;
    assert_eq!(
        (jb.state, jb.retry_count, jb.processing_attempt),
        (JobState::Completed, 1, 1)
    );
    assert!(w
        .jobs
        .find_by_name(&format!("ingest-{}-r1-a1", id.job(2)))
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_lost_event_is_found_by_describe_jobs_and_a_late_or_repeated_event_changes_nothing() {
    let w = world(IngestSettings::default());
    let m = w.manifest("m21", &[("a", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    let mut ends = Vec::new();
    let total = w
        .run_with(
            |_, name| {
                if name.ends_with("-a1") {
                    Ending::SpotReclaimed
                } else {
                    Ending::Succeeded
                }
            },
            false,
        )
        .await;
    assert_eq!(
        (total.processing_retried, total.processed),
        (1, 1),
        "{total:?}"
    );
    let reports = operator::reports(&w.ingest_ctx, &id).await.unwrap();
    assert_eq!(reports[0].completed, vec![id.job(1)]);
    // The batch is complete and cleaned up: its job record says deleted.
    let before = w.job(&id.job(1)).await;
    // The events come after all (EventBridge retries for 24 hours): both are stale now.
    for (_, job) in w.jobs.submitted().iter().zip(1..) {
        let name = format!("ingest-{}-r0-a{job}", id.job(1));
        let found = w.jobs.find_by_name(&name).await.unwrap().unwrap();
        let detail = w
            .jobs
            .describe(&found.job_id)
            .await
            .unwrap()
            .unwrap()
            .detail;
        ends.push(job_state_change(&detail).to_string());
    }
    for event in ends.iter().chain(ends.iter()) {
        let out = monitor::handle_message(&w.monitor, event).await.unwrap();
        assert_eq!(
            out,
            MonitorOutcome::IngestProcessing {
                ingest_job: id.job(1).to_string(),
                outcome: processing::ProcessingOutcome::Stale
            }
        );
    }
    assert_eq!(w.job(&id.job(1)).await, before);
    assert_eq!(
        w.dlq.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );
}

#[tokio::test]
async fn an_event_naming_no_ingest_job_is_rejected_not_retried() {
    let w = world(IngestSettings::default());
    let detail = serde_json::json!({"jobName": "x", "jobId": "j-9", "jobQueue": "q",
        "status": "FAILED", "statusReason": "Essential container in task exited",
        "attempts": [{"container": {"exitCode": 1}}],
        "container": {"environment": [{"name": "INGEST_JOB_ID", "value": "../etc"}]}});
    let out = monitor::handle_message(&w.monitor, &job_state_change(&detail).to_string())
        .await
        .unwrap();
    assert!(
        matches!(&out, MonitorOutcome::Rejected { reason } if reason.contains("no ingest job id")),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_completed_batch_is_archived_before_its_files_are_cleaned_up() {
    use crate::handlers::archive::{self, tasks, verify};
    let w = world(IngestSettings {
        archive_destinations: vec![crate::domain::archive::record::Destination::parse(
            "s3://vault/ingest/",
        )
        .unwrap()],
        ..IngestSettings::default()
    });
    let m = w
        .manifest("m30", &[("a.txt", "alpha"), ("b.txt", "bravo")], &[])
        .await;
    let id = w.submit(&m, "coll", None).await;
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Completed, "waits");
    let summary = tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    assert_eq!(summary.batches_waiting_for_archive, 1);
    let archive_id = super::batches::archive_id(&id);
    // The archive jobs run (dispatcher and tasks) over the same bucket.
    let buckets = Arc::new(crate::adapters::memory::MemoryBuckets::default());
    buckets.adopt("bucket", w.store.clone());
    let queue = Arc::new(MemoryQueue::new("archive-tasks"));
    let key = crate::domain::archive::manifest::signing_key(&"33".repeat(32)).unwrap();
    let archive_ctx = Ctx {
        buckets: buckets.clone(),
        task_queue: queue.clone(),
        bus: Arc::new(MemoryEventBus::default()),
        signing_key: Some(Arc::new(key)),
        ..w.ingest_ctx.clone()
    };
    for _ in 0..20 {
        let t = archive::tick(&archive_ctx, Utc::now()).await.unwrap();
        let got = queue.receive(10, 60, 0).await.unwrap();
        for m in &got {
            let message = serde_json::from_str(&m.body).unwrap();
            tasks::handle(&archive_ctx, &message, Utc::now())
                .await
                .unwrap();
            queue.delete(&m.receipt_handle).await.unwrap();
        }
        if t.moved == 0 && got.is_empty() {
            break;
        }
    }
    let job = archive_ctx
        .archives()
        .job(&archive_id)
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(
        job.state,
        crate::domain::archive::job::ArchiveState::Completed,
        "{:?}",
        job.history
    );
    // Now the batch is cleaned up, and its objects live on in the archive.
    tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
    assert!(w.store.list("ingest/objects/").await.unwrap().is_empty());
    let r = verify::verify(
        buckets.bucket("vault"),
        "vault",
        &format!("ingest/{archive_id}/"),
        None,
    )
    .await;
    assert!(r.intact() && r.members_checked == 2, "{r:?}");
    let manifest = buckets
        .bucket("vault")
        .get(&format!("ingest/{archive_id}/manifest.json"))
        .await
        .unwrap()
        .unwrap()
        .body;
    let text = String::from_utf8(manifest.to_vec()).unwrap();
    // Members are named by job within the batch: `j00001/a.txt`.
    assert!(text.contains("\"j00001/a.txt\""), "{text}");
}

/// Batch as the processing submission must survive it: SubmitJob creates the job and loses the
/// answer once (a read timeout), and ListJobs does not show new jobs yet (the Batch API
/// reference promises no read-after-write for ListJobs, and granary assumes none).
struct LostAnswerLaggingList {
    inner: Arc<MemoryJobRunner>,
    lose_next: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl crate::ports::JobRunner for LostAnswerLaggingList {
    async fn submit(
        &self,
        request: crate::ports::JobRequest,
    ) -> Result<crate::ports::JobSummary, crate::ports::JobRunnerError> {
        let job = self.inner.submit(request).await?;
        if self
            .lose_next
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(crate::ports::JobRunnerError::ambiguous("read timeout"));
        }
        Ok(job)
    }
    async fn count_active(
        &self,
        n: u64,
    ) -> Result<crate::ports::ActiveJobs, crate::ports::JobRunnerError> {
        self.inner.count_active(n).await
    }
    async fn terminate(&self, id: &str, reason: &str) -> Result<(), crate::ports::JobRunnerError> {
        self.inner.terminate(id, reason).await
    }
    async fn find_by_name(
        &self,
        _: &str,
    ) -> Result<Option<crate::ports::JobSummary>, crate::ports::JobRunnerError> {
        Ok(None)
    }
    async fn describe(
        &self,
        id: &str,
    ) -> Result<Option<crate::ports::JobDescription>, crate::ports::JobRunnerError> {
        self.inner.describe(id).await
    }
}

/// A lost SubmitJob answer with a ListJobs that does not show the job yet, then the scheduled
/// tick and an operator's `granary ingest tick` at once: the processing job is submitted once
/// (its claim holds its lease), where a lookup by name alone submitted it again.
#[tokio::test]
async fn a_lost_answer_a_lagging_list_and_two_ticks_submit_processing_once() {
    let mut w = world(IngestSettings::default());
    w.ingest_ctx.jobs = Arc::new(LostAnswerLaggingList {
        inner: w.jobs.clone(),
        lose_next: true.into(),
    });
    let m = w.manifest("m40", &[("a", "alpha")], &[]).await;
    w.submit(&m, "coll", None).await;
    for _ in 0..8 {
        // The tick that loses the answer fails; the others find the claim in its lease.
        let _ = tick(&w.ingest_ctx, Utc::now()).await;
        let (a, b) = tokio::join!(
            tick(&w.ingest_ctx, Utc::now()),
            tick(&w.ingest_ctx, Utc::now())
        );
        let _ = (a, b);
    }
    let names: Vec<String> = w.jobs.submitted().into_iter().map(|r| r.job_name).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// Without a lost answer, concurrent ticks submit once and the job record names the job.
#[tokio::test]
async fn concurrent_ticks_submit_processing_once_and_record_it() {
    let w = world(IngestSettings::default());
    let m = w.manifest("m41", &[("a", "alpha")], &[]).await;
    let id = w.submit(&m, "coll", None).await;
    for _ in 0..8 {
        let (a, b) = tokio::join!(
            tick(&w.ingest_ctx, Utc::now()),
            tick(&w.ingest_ctx, Utc::now())
        );
        let _ = (a, b);
    }
    let submitted = w.jobs.submitted();
    assert_eq!(submitted.len(), 1, "{submitted:?}");
    let job = w.job(&id.job(1)).await;
    assert_eq!(
        job.processing_job.as_deref(),
        Some(w.jobs.running()[0].1.job_id.as_str())
    );
}

/// A submission message delivered again after its visibility timeout (the first delivery died
/// after making the batch): the redelivery finds that batch. The batch id's time is the
/// message's SentTimestamp; with the delivery's clock, the second delivery made a second batch.
#[tokio::test]
async fn a_submission_redelivered_minutes_later_makes_no_second_batch() {
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
    let w = world(IngestSettings::default());
    let body = serde_json::json!({
        "collection": "maps",
        "manifest_url": "s3://bucket/ingest/manifests/m",
        "kind": "files",
        "priority": 5,
        "submitter": "svc",
    })
    .to_string();
    let sent = Utc::now();
    let delivery = || {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(body.clone());
        m.attributes
            .insert("SentTimestamp".into(), sent.timestamp_millis().to_string());
        let mut event = SqsEvent::default();
        event.records = vec![m];
        event
    };
    let first = super::handle_submissions(&w.ingest_ctx, delivery(), sent).await;
    let later = sent + chrono::Duration::minutes(6);
    let again = super::handle_submissions(&w.ingest_ctx, delivery(), later).await;
    assert!(first.batch_item_failures.is_empty() && again.batch_item_failures.is_empty());
    let batches = w.store.list("ingest/batches/").await.unwrap();
    let records: Vec<_> = batches
        .iter()
        .filter(|m| m.key.ends_with(".json"))
        .collect();
    assert_eq!(records.len(), 1, "{batches:?}");
}

mod budget;
mod container;
mod priority;
mod queued;
mod storing;
