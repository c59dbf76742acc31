//! What each ingest step decides, as pure functions beside the tables: the handlers only read,
//! call one of these, and write what it returns.

use super::job::JobState;
use super::manifest::{Digest, DigestAlgorithm, Payload};
use super::record::JobRecord;
use crate::domain::classify::{Classification, Route};

/// A pending job: failed at once when its manifest entry could not be read (no retry helps), held
/// while its collection or batch is held, else on to estimating.
pub fn on_dispatch(job: &JobRecord, held_by: Option<&str>) -> (JobState, String) {
    if let Payload::Unreadable { line, why, .. } = &job.object.payload {
        return (
            JobState::Failed,
            format!("manifest line {line} cannot be ingested: {why}"),
        );
    }
    match held_by {
        Some(hold) => (JobState::Held, format!("held: {hold}")),
        None => (JobState::Estimating, "taken from the queue".to_owned()),
    }
}

/// Priority after estimating: a job over `large_bytes` steps back by five (it would hold the
/// capacity a long time), never past the lowest.
pub fn priority_after_estimate(priority: u8, space_needed: u64, large_bytes: u64) -> u8 {
    if large_bytes > 0 && space_needed > large_bytes {
        priority.saturating_add(5).min(super::index::MAX_PRIORITY)
    } else {
        priority
    }
}

/// Whether a job needing `need` bytes may start downloading while `in_flight` bytes are already
/// being downloaded or processed, under `capacity`. A job that could never fit runs alone rather
/// than never; an unestimated job (0) waits while the capacity is used up.
pub fn admits(need: u64, in_flight: u64, capacity: u64) -> bool {
    if in_flight == 0 {
        return true;
    }
    if need == 0 {
        return in_flight < capacity;
    }
    in_flight.saturating_add(need) <= capacity
}

/// The expected digest of a manifest file, as the transfer checks it (`md5:<hex>`, `sha256:…`).
pub fn expected_digest(digest: &Digest) -> String {
    match digest.algorithm {
        DigestAlgorithm::Md5 => format!("md5:{}", digest.value),
        DigestAlgorithm::Sha256 => format!("sha256:{}", digest.value),
    }
}

/// Whether a download failure can be fixed by trying again: a digest or size mismatch is the
/// depositor's to fix (a new submission), a server or network failure may pass.
pub fn download_failure_is_final(why: &str) -> bool {
    why.contains("digest mismatch") || why.contains("size mismatch") || why.contains("not retried")
}

/// What a processing job's end does to its ingest job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessingEnd {
    /// Not the attempt the record waits for: a duplicate delivery, the late end of an earlier
    /// attempt or run, or a job that has moved on. Nothing changes.
    Stale,
    /// Succeeded: on to recording.
    Processed { reason: String },
    /// A failure another attempt may fix (Spot, a host gone, a timeout) with attempts left: the
    /// record waits for attempt `attempt`, which the dispatcher submits.
    Retry { attempt: u32, reason: String },
    /// No attempt fixes it, or the attempts are spent: the job fails (its
    /// `last_successful_status` stays downloading, so a resume re-runs processing) and is
    /// dead-lettered.
    Failed { reason: String },
}

/// The decision for the end of Batch job `batch_job_name`, classified as the job monitor
/// classifies a granule's job, for `job` as its record stands. The name says which run and
/// attempt it was (`job_name::processing_job_name`); only the one the record waits for
/// counts. `max_attempts` is the backfill's budget (1 + GRANARY_MAX_RETRIES).
pub fn on_processing_end(
    job: &JobRecord,
    batch_job_name: &str,
    classification: &Classification,
    max_attempts: u32,
) -> ProcessingEnd {
    let waited_for = crate::domain::job_name::processing_job_name(
        &job.id,
        job.retry_count,
        job.processing_attempt,
    );
    if job.state != JobState::Processing || batch_job_name != waited_for {
        return ProcessingEnd::Stale;
    }
    let attempt = job.processing_attempt;
    let why = &classification.reason;
    match classification.route() {
        Route::Done => ProcessingEnd::Processed {
            reason: format!("{batch_job_name} succeeded"),
        },
        Route::RetryQueue if attempt < max_attempts => ProcessingEnd::Retry {
            attempt: attempt + 1,
            reason: format!(
                "{batch_job_name} failed ({why}): attempt {} of {max_attempts} next",
                attempt + 1
            ),
        },
        Route::RetryQueue => ProcessingEnd::Failed {
            reason: format!(
                "{batch_job_name} failed ({why}) on its last attempt ({attempt} of {max_attempts})"
            ),
        },
        Route::FailureDlq => ProcessingEnd::Failed {
            reason: format!("{batch_job_name} failed ({why}): no retry fixes it"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ingest::index::BatchId;
    use crate::domain::ingest::manifest::{single_file, ManifestKind, ManifestObject};
    use crate::domain::ingest::record::{BatchRecord, Submission};
    use chrono::Utc;

    fn job(payload: Option<Payload>) -> JobRecord {
        let b = BatchRecord::new(
            BatchId::parse("b1").unwrap(),
            Submission {
                collection: "c".into(),
                manifest_url: "m".into(),
                kind: ManifestKind::Files,
                priority: 5,
                callback: None,
                profile: None,
                submitter: "s".into(),
            },
            Utc::now(),
        );
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
        let (to, why) = on_dispatch(&bad, Some("collection c"));
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
            on_dispatch(&job(None), Some("collection c")).0,
            JobState::Held
        );
        assert_eq!(on_dispatch(&job(None), None).0, JobState::Estimating);
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
    fn large_jobs_step_back_and_capacity_admits_what_fits() {
        assert_eq!(priority_after_estimate(5, 10, 100), 5);
        assert_eq!(priority_after_estimate(5, 101, 100), 10);
        assert_eq!(priority_after_estimate(97, 101, 100), 99);
        assert!(admits(500, 0, 100), "alone, even too big");
        assert!(admits(40, 60, 100));
        assert!(!admits(41, 60, 100));
        assert!(admits(0, 99, 100));
        assert!(!admits(0, 100, 100));
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
}
