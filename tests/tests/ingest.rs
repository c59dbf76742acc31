//! The ingest queue against the emulator: S3 (records, indexes, files, reports), the depositor's
//! files and callbacks over real HTTP (the loopback archive), events on EventBridge. The
//! processing jobs go to the in-memory job runner: what Batch does with them is the backfill
//! loop's tests' business; here only their outcome matters.

use bytes::Bytes;
use granary::adapters::aws::EventBridgeBus;
use granary::adapters::http::remote::HttpRemote;
use granary::adapters::memory::MemoryJobRunner;
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::job::JobState;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::ingest::operator::{self, Target};
use granary::handlers::ingest::{self, IngestCtx, IngestSettings, TickSummary};
use granary::ports::{JobRunner, PutCondition};
use granary_tests::http_source::{self, Behaviour};
use std::sync::Arc;
use std::time::Duration;

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

/// Ticks until a pass changes nothing, finishing every processing job successfully.
async fn run(ictx: &IngestCtx, jobs: &MemoryJobRunner) {
    for _ in 0..60 {
        let s = ingest::tick(ictx, chrono::Utc::now()).await.unwrap();
        for request in jobs.submitted() {
            if let Some(found) = jobs.find_by_name(&request.job_name).await.unwrap() {
                if found.status == JobStatus::Running {
                    jobs.finish(&found.job_id, JobStatus::Succeeded, serde_json::json!({}));
                }
            }
        }
        if s == TickSummary::default() {
            return;
        }
    }
    panic!("the ingest queue did not settle in 60 ticks");
}

#[tokio::test]
async fn a_batch_of_two_hundred_objects_with_bad_digests_a_hold_and_a_resume() {
    let s = granary_tests::stack("ingest", 1, &[]).await;
    let server = http_source::start().await;
    let base = server.index_url.clone();
    let mut manifest = String::from(
        "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n",
    );
    for n in 0..200 {
        let name = format!("obj{n:03}.dat");
        let body = format!("object {n} payload").repeat(1 + n % 7);
        // Every 40th file is served altered (same length, other bytes): its digest cannot
        // match. Every 50th fails twice (a flapping server) before it serves.
        let digest = md5_hex(body.as_bytes());
        let served = if n % 40 == 7 {
            body.replace('o', "0")
        } else {
            body.clone()
        };
        let plan = if n % 50 == 3 {
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
    let ictx = IngestCtx::new(
        &s.stack.bucket,
        s.ctx.store.clone(),
        jobs.clone(),
        Arc::new(HttpRemote::new(settings.timeout).unwrap()),
        Arc::new(EventBridgeBus::new(s.clients.events.clone(), "default")),
        settings,
    );
    let key = ictx.ingest.keys.manifest("two-hundred.checkm");
    s.ctx
        .store
        .put(&key, Bytes::from(manifest), PutCondition::IfAbsent)
        .await
        .unwrap();
    // The collection is held when the batch arrives: nothing moves until it is released.
    operator::hold(
        &ictx,
        &Target::Collection("maps".into()),
        "audit",
        "ops",
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let batch = ingest::submit(
        &ictx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("s3://{}/{key}", s.stack.bucket),
            kind: ManifestKind::Files,
            priority: 5,
            callback: Some(format!("{base}callback")),
            profile: None,
            submitter: "test".into(),
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    run(&ictx, &jobs).await;
    let held = ictx.ingest.batch(&batch.id).await.unwrap().unwrap().value;
    assert_eq!(held.state, BatchState::Held);
    assert!(jobs.submitted().is_empty());
    operator::release(
        &ictx,
        &Target::Collection("maps".into()),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    run(&ictx, &jobs).await;

    let done = ictx.ingest.batch(&batch.id).await.unwrap().unwrap().value;
    assert_eq!(
        done.state,
        BatchState::Failed,
        "five digests could not match"
    );
    assert_eq!(done.jobs, 200);
    let reports = operator::reports(&ictx, &batch.id).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0].completed.len(),
        195,
        "failed: {:?}",
        reports[0].failed
    );
    assert_eq!(reports[0].failed.len(), 5);
    for f in &reports[0].failed {
        assert!(f.reason.contains("digest mismatch"), "{}", f.reason);
        assert_eq!(f.last_successful_status, Some(JobState::Provisioning));
    }
    assert_eq!(
        server.archive.gets("obj003.dat"),
        3,
        "two failures, then the file"
    );
    assert_eq!(jobs.submitted().len(), 195);
    // What was stored is in the inventory, and its bytes are in S3 with the right digest.
    let inventory =
        granary_tests::keys(s.ctx.store.as_ref(), "ingest/inventory/collection=maps/").await;
    assert_eq!(inventory.len(), 195);

    // The depositor's server serves the five files as listed now; the operator resumes the
    // jobs (they restart downloading) and asks for an update report.
    for n in (0..200).filter(|n| n % 40 == 7) {
        let body = format!("object {n} payload").repeat(1 + n % 7);
        server
            .archive
            .put(&format!("obj{n:03}.dat"), body.as_bytes(), vec![]);
    }
    let resumed = operator::resume(
        &ictx,
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
    run(&ictx, &jobs).await;
    operator::update_report(&ictx, &batch.id, chrono::Utc::now())
        .await
        .unwrap();
    run(&ictx, &jobs).await;
    let reports = operator::reports(&ictx, &batch.id).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[1].newly_completed.len(), 5);
    assert!(reports[1].failed.is_empty() && reports[1].still_failed.is_empty());
    let resumed_job = ictx
        .ingest
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
    let cleaned = ictx.ingest.batch(&batch.id).await.unwrap().unwrap().value;
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
        granary_tests::keys(s.ctx.store.as_ref(), "ingest/inventory/collection=maps/")
            .await
            .len(),
        200
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
    let ictx = IngestCtx::new(
        &s.stack.bucket,
        s.ctx.store.clone(),
        jobs.clone(),
        Arc::new(HttpRemote::new(settings.timeout).unwrap()),
        Arc::new(EventBridgeBus::new(s.clients.events.clone(), "default")),
        settings,
    );
    let batch = ingest::submit(
        &ictx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("{base}a.txt"),
            kind: ManifestKind::File,
            priority: 5,
            // Not served: the archive answers 404.
            callback: Some(format!("{base}no-such-callback")),
            profile: None,
            submitter: "test".into(),
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    run(&ictx, &jobs).await;
    let job = ictx
        .ingest
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
    let b = ictx.ingest.batch(&batch.id).await.unwrap().unwrap().value;
    assert_eq!(b.state, BatchState::Failed);
    assert_eq!(
        operator::resume(&ictx, std::slice::from_ref(&job.id), chrono::Utc::now())
            .await
            .unwrap()[0]
            .outcome,
        Ok(JobState::Notify)
    );
}
