use super::*;
use crate::domain::ingest::index::BatchId;
use crate::domain::ingest::manifest::{single_file, ManifestKind, ManifestObject};
use crate::domain::ingest::record::{BatchRecord, Submission};
use chrono::Utc;

fn job(payload: Option<Payload>) -> JobRecord {
    let b = BatchRecord::new(BatchId::parse("b1").unwrap(), j_submission(), Utc::now());
    let object = match payload {
        Some(payload) => ManifestObject {
            local_id: None,
            primary_id: None,
            payload,
        },
        None => single_file("http://h/a", None),
    };
    JobRecord::new(b.id.job(1), &b, object, Utc::now())
}

#[test]
fn a_pending_job_fails_held_or_moves_on() {
    let bad = job(Some(Payload::Unreadable {
        line: 3,
        input: "x".into(),
        why: "no file URL".into(),
    }));
    let Move {
        to, reason: why, ..
    } = on_dispatch(&bad, Some("collection c"));
    assert_eq!(
        to,
        JobState::Failed,
        "an unreadable entry fails even when held"
    );
    assert!(
        why.contains("line 3") && why.contains("no file URL"),
        "{why}"
    );
    assert_eq!(
        on_dispatch(&job(None), Some("collection c")).to,
        JobState::Held
    );
    assert_eq!(on_dispatch(&job(None), None).to, JobState::Estimating);
}

#[test]
fn each_tick_step_moves_on_or_fails_with_its_reason() {
    assert_eq!(on_estimated(0).reason, "estimated: size unknown");
    assert_eq!(on_estimated(9).to, JobState::Provisioning);
    assert_eq!(on_provisioning(10, 95, 100, 0), None);
    let admitted = on_provisioning(5, 95, 100, 0).unwrap();
    assert_eq!(admitted.reason, "room for 5 bytes (95 of 100 in use)");
    let stored = [StoredFile {
        name: "a".into(),
        key: "k".into(),
        size: 7,
        sha256: "x".into(),
    }];
    let downloaded = on_downloaded(Ok(&stored));
    assert_eq!(
        (downloaded.to, downloaded.reason.as_str()),
        (JobState::Processing, "1 files, 7 bytes stored")
    );
    assert_eq!(on_downloaded(Err("digest mismatch")).to, JobState::Failed);
    assert_eq!(on_recording(Some("gone"), "k").reason, "not recorded: gone");
    assert_eq!(on_recording(None, "k").to, JobState::Notify);
    assert_eq!(on_notified(None).to, JobState::Completed);
    assert_eq!(
        on_notified(Some("callback failed".into())).to,
        JobState::Failed
    );
    // Every move is in the job table.
    let mut j = job(None);
    for mv in [on_dispatch(&j, None), on_estimated(1), admitted, downloaded] {
        j = mv.apply(&j, Utc::now()).unwrap().unwrap();
    }
    assert_eq!(j.state, JobState::Processing);
    // A move decided for another state leaves the record alone.
    assert_eq!(on_estimated(1).apply(&j, Utc::now()).unwrap(), None);
}

#[test]
fn a_batch_is_held_spawned_reported_once_and_cleaned_up() {
    let j = job(None);
    let b = BatchRecord::new(j.batch.clone(), j_submission(), Utc::now());
    assert_eq!(
        on_batch_pending(Some("collection c"), 3).to,
        BatchState::Held
    );
    let spawned = on_batch_pending(None, 3);
    assert_eq!(spawned.reason, "3 jobs created");
    let b = spawned.apply(&b, Utc::now()).unwrap().unwrap();
    assert_eq!(on_batch_jobs(1), None);
    let b = on_batch_jobs(0)
        .unwrap()
        .apply(&b, Utc::now())
        .unwrap()
        .unwrap();
    let reported = on_reported(&b, 1, 2, 1).unwrap();
    assert_eq!(reported.reason, "report 1: 2 completed, 1 failed");
    let mut b = reported.apply(&b, Utc::now()).unwrap().unwrap();
    assert_eq!(b.state, BatchState::Failed);
    b.reports = 1;
    assert_eq!(on_reported(&b, 1, 2, 1), None, "a report is written once");
    let (job_gone, batch_gone) = on_cleaned_up();
    assert_eq!(
        (job_gone.to, batch_gone.to),
        (JobState::Deleted, BatchState::Deleted)
    );
}

fn j_submission() -> Submission {
    Submission {
        collection: "c".into(),
        manifest_url: "m".into(),
        kind: ManifestKind::Files,
        priority: 5,
        callback: None,
        profile: None,
        submitter: "s".into(),
        deposit: Default::default(),
    }
}

#[test]
fn operators_resume_report_delete_and_release_only_what_may_be() {
    let mut j = job(None);
    assert_eq!(
        on_resume(&j).unwrap_err().to_string(),
        "it is pending, not failed"
    );
    j.state = JobState::Failed;
    assert!(on_resume(&j)
        .unwrap_err()
        .to_string()
        .contains("before any step succeeded"));
    j.last_successful_status = Some(JobState::Downloading);
    assert_eq!(on_resume(&j).unwrap().to, JobState::Processing);
    // Deleting: failed or held only, and confirmed until the batch reported.
    assert!(on_delete_job(&j, false, false)
        .unwrap_err()
        .to_string()
        .contains("confirm to go on"));
    assert_eq!(
        on_delete_job(&j, true, false).unwrap().to,
        JobState::Deleted
    );
    assert_eq!(
        on_delete_job(&j, false, true).unwrap().to,
        JobState::Deleted
    );
    j.state = JobState::Processing;
    assert!(on_delete_job(&j, true, true)
        .unwrap_err()
        .to_string()
        .contains("only failed or held"));
    let mut b = BatchRecord::new(j.batch.clone(), j_submission(), Utc::now());
    assert!(on_update_report(&b.id, 2)
        .unwrap_err()
        .to_string()
        .contains("2 jobs running"));
    assert_eq!(
        on_update_report(&b.id, 0).unwrap().to,
        BatchState::UpdateReporting
    );
    assert!(on_delete_batch(&b, true)
        .unwrap_err()
        .to_string()
        .contains("only failed or held"));
    b.state = BatchState::Held;
    assert!(on_delete_batch(&b, false)
        .unwrap_err()
        .to_string()
        .contains("confirm"));
    assert_eq!(on_delete_batch(&b, true).unwrap().to, BatchState::Deleted);
    let (job_back, batch_back) = on_released("collection c released");
    assert_eq!(
        (job_back.from, job_back.to),
        (vec![JobState::Held], JobState::Pending)
    );
    assert_eq!(
        batch_back.apply(&b, Utc::now()).unwrap().unwrap().state,
        BatchState::Pending
    );
}

fn processing(attempt: u32) -> JobRecord {
    let mut j = job(None);
    j.state = JobState::Processing;
    j.processing_attempt = attempt;
    j
}

fn ended(outcome: crate::domain::classify::JobOutcome) -> Classification {
    Classification {
        outcome,
        failure: None,
        batch_rules: String::new(),
        reason: "why".into(),
    }
}

#[test]
fn a_processing_end_counts_only_for_the_attempt_the_record_waits_for() {
    use crate::domain::classify::JobOutcome::*;
    let j = processing(1);
    let a1 = "ingest-b1-j00001-r0-a1";
    assert!(matches!(
        on_processing_end(&j, a1, &ended(Success), 4),
        ProcessingEnd::Processed { .. }
    ));
    // Spot and the like: the next attempt, while the budget lasts.
    assert!(matches!(
        on_processing_end(&j, a1, &ended(Retryable), 4),
        ProcessingEnd::Retry { attempt: 2, .. }
    ));
    let last = processing(4);
    let a4 = "ingest-b1-j00001-r0-a4";
    let ProcessingEnd::Failed { reason } = on_processing_end(&last, a4, &ended(Retryable), 4)
    else {
        panic!("the last attempt's retryable end fails the job")
    };
    assert!(reason.contains("last attempt"), "{reason}");
    assert!(matches!(
        on_processing_end(&j, a1, &ended(NonRetryable), 4),
        ProcessingEnd::Failed { .. }
    ));
    // A late end of attempt 1 once attempt 2 runs, another run's job, a job gone on.
    assert_eq!(
        on_processing_end(&processing(2), a1, &ended(NonRetryable), 4),
        ProcessingEnd::Stale
    );
    assert_eq!(
        on_processing_end(&j, "ingest-b1-j00001-r1-a1", &ended(Success), 4),
        ProcessingEnd::Stale
    );
    let mut recording = processing(1);
    recording.state = JobState::Recording;
    assert_eq!(
        on_processing_end(&recording, a1, &ended(Success), 4),
        ProcessingEnd::Stale
    );
}

#[test]
fn an_ingest_job_that_runs_out_of_memory_fails_rather_than_run_out_again() {
    let oom = Classification {
        failure: Some(crate::domain::classify::FailureKind::OutOfMemory),
        ..ended(crate::domain::classify::JobOutcome::Retryable)
    };
    let ProcessingEnd::Failed { reason } =
        on_processing_end(&processing(1), "ingest-b1-j00001-r0-a1", &oom, 4)
    else {
        panic!("an ingest job's memory is never raised: no retry")
    };
    assert!(reason.contains("ran out of memory"), "{reason}");
}

#[test]
fn large_jobs_step_back_and_capacity_admits_what_fits() {
    assert_eq!(priority_for(5, 10, 100), 5);
    assert_eq!(priority_for(5, 101, 100), 10);
    assert_eq!(priority_for(97, 101, 100), 99);
    // Asked again (after the download) from the submitted priority: never stepped back twice,
    // and a job found small after all comes forward again.
    assert_eq!(priority_for(5, 101, 100), priority_for(5, 5_000, 100));
    assert_eq!(priority_for(5, 0, 100), 5);
    assert_eq!(
        priority_for(5, 101, 0),
        5,
        "no large-job threshold: no step back"
    );
    assert!(admits(500, 0, 100, 30), "alone, even too big");
    assert!(admits(40, 60, 100, 30));
    assert!(!admits(41, 60, 100, 30));
    // Unestimated: only while at least the reserve is free (and never with nothing free).
    assert!(admits(0, 70, 100, 30));
    assert!(!admits(0, 71, 100, 30));
    assert!(admits(0, 99, 100, 0));
    assert!(!admits(0, 100, 100, 0));
    assert!(admits(0, 0, 100, 500), "alone, whatever the reserve");
}

#[test]
fn mismatches_are_final_and_outages_are_not() {
    assert!(download_failure_is_final(
        "digest mismatch: expected md5:1, got md5:2"
    ));
    assert!(download_failure_is_final(
        "http://h/a: HTTP 404 Not Found (not retried)"
    ));
    assert!(!download_failure_is_final("http://h/a: HTTP 503"));
    assert!(!download_failure_is_final("timed out after 30s"));
}

#[test]
fn a_profile_asks_for_the_queueing_confirmation_by_name_or_everyone_does_by_star() {
    let named = vec!["merritt-demo".to_owned()];
    assert!(confirms_queueing(Some("merritt-demo"), &named));
    assert!(!confirms_queueing(Some("other"), &named));
    assert!(!confirms_queueing(None, &named));
    assert!(confirms_queueing(None, &["*".to_owned()]));
    assert!(!confirms_queueing(Some("merritt-demo"), &[]));
}
