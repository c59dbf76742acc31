//! The job queue's order and its limits at the handler level (seed 004): a higher-priority job
//! starts first; an estimate that finds a large job steps it back and re-keys it; a size no
//! server announces estimates as 0, and the download's true size re-checks the priority; a held
//! batch waits until released; a download that keeps failing fails its job once its attempts
//! are spent.

use super::*;

/// A submission of `files` (name, body) at `priority`, its manifest declaring no sizes.
async fn submit_at(w: &World, name: &str, files: &[(&str, &str)], priority: u8) -> BatchId {
    let manifest = w.manifest(name, files, &[]).await;
    let submission = crate::domain::ingest::record::Submission {
        collection: "coll".into(),
        manifest_url: manifest,
        kind: ManifestKind::Files,
        priority,
        callback: None,
        profile: None,
        submitter: "test".into(),
        deposit: Default::default(),
    };
    submit(&w.ingest_ctx, submission, Utc::now())
        .await
        .unwrap()
        .id
}

/// The (priority, job) markers the queue lists under `state`.
async fn listed(w: &World, state: JobState) -> Vec<(u8, JobId)> {
    w.ingest_ctx.ingest().listed(state).await.unwrap()
}

/// Ticks `n` times; Batch never ends a job, so whatever is admitted holds the capacity.
async fn ticks(w: &World, n: usize) {
    for _ in 0..n {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
}

#[tokio::test]
async fn a_higher_priority_job_starts_first_while_a_lower_one_waits() {
    let w = world(IngestSettings {
        capacity_bytes: 12,
        ..IngestSettings::default()
    });
    // The later submission asks for a higher priority (a lower number): it goes first.
    let low = submit_at(&w, "low", &[("low.bin", "0123456789")], 9).await;
    let high = submit_at(&w, "high", &[("high.bin", "0123456789")], 1).await;
    ticks(&w, 6).await;
    assert_eq!(w.job(&high.job(1)).await.state, JobState::Processing);
    assert_eq!(w.job(&low.job(1)).await.state, JobState::Provisioning);
    assert_eq!(
        listed(&w, JobState::Provisioning).await,
        vec![(9, low.job(1))]
    );
    // Once the first ends, the other is admitted (both run to the end, and are cleaned up).
    w.run(|_| true).await;
    assert_eq!(w.job(&low.job(1)).await.state, JobState::Deleted);
    assert_eq!(w.batch(&low).await.state, BatchState::Deleted);
}

#[tokio::test]
async fn an_estimate_that_finds_a_large_job_steps_it_back_behind_a_small_one() {
    let w = world(IngestSettings {
        capacity_bytes: 30,
        large_job_bytes: 15,
        ..IngestSettings::default()
    });
    let big = submit_at(&w, "big", &[("big.bin", "01234567890123456789")], 1).await;
    let small = submit_at(&w, "small", &[("small.bin", "0123456789")], 4).await;
    // Estimated, not yet provisioned: the large job is re-keyed at 1 + 5.
    for _ in 0..2 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let big_job = w.job(&big.job(1)).await;
    assert_eq!((big_job.space_needed, big_job.priority), (20, 6));
    assert_eq!(big_job.submitted_priority, Some(1));
    let waiting = [
        listed(&w, JobState::Provisioning).await,
        listed(&w, JobState::Downloading).await,
        listed(&w, JobState::Processing).await,
    ]
    .concat();
    assert!(waiting.contains(&(6, big.job(1))), "{waiting:?}");
    assert!(
        !waiting.iter().any(|(p, _)| *p == 1),
        "no marker keeps the old key: {waiting:?}"
    );
    assert_eq!(
        w.job(&small.job(1)).await.priority,
        4,
        "a small job keeps its priority"
    );
    w.run(|_| true).await;
    assert_eq!(
        w.batch(&big).await.state,
        BatchState::Deleted,
        "ran to the end"
    );
}

#[tokio::test]
async fn an_unknown_size_estimates_zero_and_the_download_re_checks_the_priority() {
    let w = world(IngestSettings {
        capacity_bytes: 10,
        large_job_bytes: 15,
        ..IngestSettings::default()
    });
    // A job already downloading holds the capacity, so the next waits in provisioning.
    let first = submit_at(&w, "first", &[("first.bin", "01234567890")], 1).await;
    ticks(&w, 3).await;
    assert_eq!(w.job(&first.job(1)).await.state, JobState::Processing);
    let id = submit_at(&w, "quiet", &[("quiet.bin", "01234567890123456789")], 2).await;
    w.remote.hide_size("http://archive/quiet.bin");
    ticks(&w, 3).await;
    // Estimating never fails: no size announced → 0 needed, and the job keeps its priority.
    let estimated = w.job(&id.job(1)).await;
    assert_eq!(estimated.state, JobState::Provisioning);
    assert_eq!((estimated.space_needed, estimated.priority), (0, 2));
    assert_eq!(
        listed(&w, JobState::Provisioning).await,
        vec![(2, id.job(1))]
    );
    // The download learns the true size: 20 bytes is large, so the job steps back to 7 (and is
    // re-keyed, as after an estimate).
    w.run(|_| true).await;
    let done = w.job(&id.job(1)).await;
    assert_eq!(done.state, JobState::Deleted, "completed and cleaned up");
    assert_eq!((done.space_needed, done.priority), (20, 7));
}

#[tokio::test]
async fn a_held_batch_waits_and_runs_once_released() {
    let w = world(IngestSettings::default());
    let id = submit_at(&w, "held", &[("a.txt", "alpha"), ("b.txt", "bravo")], 5).await;
    operator::hold(
        &w.ingest_ctx,
        &Target::Batch(id.clone()),
        "check it",
        "ops",
        Utc::now(),
    )
    .await
    .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.batch(&id).await.state, BatchState::Held);
    assert!(
        w.jobs.submitted().is_empty(),
        "nothing of a held batch runs"
    );
    assert!(
        w.ingest_ctx
            .ingest()
            .job(&id.job(1))
            .await
            .unwrap()
            .is_none(),
        "a held batch makes no jobs"
    );
    operator::release(&w.ingest_ctx, &Target::Batch(id.clone()), Utc::now())
        .await
        .unwrap();
    w.run(|_| true).await;
    assert_eq!(w.jobs.submitted().len(), 2, "both jobs processed");
    assert_eq!(
        w.batch(&id).await.state,
        BatchState::Deleted,
        "completed, then cleaned up"
    );
}

#[tokio::test]
async fn a_download_that_keeps_failing_fails_its_job_once_its_attempts_are_spent() {
    let w = world(IngestSettings::default());
    let attempts = w.ingest_ctx.config.ingest.download_attempts;
    assert!(attempts >= 2);
    let id = submit_at(
        &w,
        "flaky",
        &[("flaky.txt", "alpha"), ("shaky.txt", "bravo")],
        5,
    )
    .await;
    // One file's server answers 503 more often than the attempts allow, the other's fewer.
    w.remote.fail_fetches("http://archive/flaky.txt", attempts);
    w.remote
        .fail_fetches("http://archive/shaky.txt", attempts - 1);
    w.run(|_| true).await;
    let failed = w.job(&id.job(1)).await;
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(failed.last_successful_status, Some(JobState::Provisioning));
    assert!(
        failed
            .reason
            .contains(&format!("{attempts} attempts failed"))
            && failed.reason.contains("503"),
        "{}",
        failed.reason
    );
    assert_eq!(w.remote.fetches("http://archive/flaky.txt"), attempts);
    assert_ne!(
        w.job(&id.job(2)).await.state,
        JobState::Failed,
        "fewer 503s than attempts"
    );
    assert_eq!(w.remote.fetches("http://archive/shaky.txt"), attempts);
    assert_eq!(w.batch(&id).await.state, BatchState::Failed);
}

/// Seed 004 holds unestimated jobs while the free capacity is below a threshold: a job whose size
/// is unknown waits while less than `unestimated_reserve_bytes` is free, though a small job of
/// known size fits beside the one processing; once that ends, it starts.
#[tokio::test]
async fn an_unestimated_job_waits_while_less_than_the_reserve_is_free() {
    let w = world(IngestSettings {
        capacity_bytes: 100,
        unestimated_reserve_bytes: 50,
        large_job_bytes: 1_000,
        ..IngestSettings::default()
    });
    let big = submit_at(&w, "big", &[("big.bin", &"x".repeat(60))], 1).await;
    ticks(&w, 3).await;
    assert_eq!(w.job(&big.job(1)).await.state, JobState::Processing);
    let unknown = submit_at(&w, "unknown", &[("unknown.bin", "0123456789")], 2).await;
    w.remote.hide_size("http://archive/unknown.bin");
    let small = submit_at(&w, "small", &[("small.bin", &"y".repeat(30))], 3).await;
    ticks(&w, 3).await;
    // 40 bytes free: the 30-byte job fits, the unknown one waits for 50.
    let waiting = w.job(&unknown.job(1)).await;
    assert_eq!(
        (waiting.state, waiting.space_needed),
        (JobState::Provisioning, 0)
    );
    assert_eq!(w.job(&small.job(1)).await.state, JobState::Processing);
    w.run(|_| true).await;
    for id in [&big, &unknown, &small] {
        assert_eq!(
            w.job(&id.job(1)).await.state,
            JobState::Deleted,
            "completed"
        );
    }
}
