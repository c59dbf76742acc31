//! What each ingest step decides, as pure functions beside the tables: the handlers only read,
//! call one of these, and write the [`Move`] it returns (with If-Match, from the state it was
//! decided in). The tick's steps come first, then the processing end, then what an operator's
//! commands decide (resume, update report, delete, release).

use super::batch::{reported_state, BatchState};
use super::index::BatchId;
use super::job::{resume_target, JobState};
use super::manifest::{Digest, DigestAlgorithm, Payload};
use super::record::{BatchRecord, JobRecord, StoredFile};
use crate::domain::classify::{Classification, Route};
use crate::domain::machine::{IllegalTransition, Move};
use chrono::{DateTime, Utc};

type JobMove = Move<JobState>;
type BatchMove = Move<BatchState>;

/// A pending job: failed at once when its manifest entry could not be read (no retry helps), held
/// while its collection or batch is held, else on to estimating.
pub fn on_dispatch(job: &JobRecord, held_by: Option<&str>) -> JobMove {
    let from = [JobState::Pending];
    if let Payload::Unreadable { line, why, .. } = &job.object.payload {
        return Move::new(
            &from,
            JobState::Failed,
            format!("manifest line {line} cannot be ingested: {why}"),
        );
    }
    match held_by {
        Some(hold) => Move::new(&from, JobState::Held, format!("held: {hold}")),
        None => Move::new(&from, JobState::Estimating, "taken from the queue"),
    }
}

/// Estimated at `need` bytes (0: unknown): on to provisioning.
pub fn on_estimated(need: u64) -> JobMove {
    let reason = if need == 0 {
        "estimated: size unknown".to_owned()
    } else {
        format!("estimated: {need} bytes")
    };
    Move::new(&[JobState::Estimating], JobState::Provisioning, reason)
}

/// A provisioning job needing `need` bytes while `in_flight` of `capacity` are in use: on to
/// downloading if [`admits`] says so, else `None` (it waits for the next tick).
pub fn on_provisioning(need: u64, in_flight: u64, capacity: u64) -> Option<JobMove> {
    admits(need, in_flight, capacity).then(|| {
        Move::new(
            &[JobState::Provisioning],
            JobState::Downloading,
            format!("room for {need} bytes ({in_flight} of {capacity} in use)"),
        )
    })
}

/// A download ended: every file stored (on to processing), or the first failure (in manifest
/// order) fails the job.
pub fn on_downloaded(outcome: Result<&[StoredFile], &str>) -> JobMove {
    let from = [JobState::Downloading];
    match outcome {
        Ok(stored) => {
            let size: u64 = stored.iter().map(|f| f.size).sum();
            let reason = format!("{} files, {size} bytes stored", stored.len());
            Move::new(&from, JobState::Processing, reason)
        }
        Err(why) => Move::new(&from, JobState::Failed, why),
    }
}

/// Recording: a stored file no longer as stored (`changed`) fails the job (a resume records
/// again); else the job's record of stored files is written at `key` and it moves on to notify.
pub fn on_recording(changed: Option<&str>, key: &str) -> JobMove {
    let from = [JobState::Recording];
    match changed {
        Some(why) => Move::new(&from, JobState::Failed, format!("not recorded: {why}")),
        None => Move::new(&from, JobState::Notify, format!("recorded at {key}")),
    }
}

/// Notify: announced, and the depositor's callback answered (or there is none) — completed; a
/// callback that kept failing (`callback_failure`) fails the job (a resume notifies again).
pub fn on_notified(callback_failure: Option<String>) -> JobMove {
    let from = [JobState::Notify];
    match callback_failure {
        Some(why) => Move::new(&from, JobState::Failed, why),
        None => Move::new(&from, JobState::Completed, "announced"),
    }
}

/// A pending batch: held while `held_by` holds it, else its `jobs` are created and it moves on.
pub fn on_batch_pending(held_by: Option<&str>, jobs: usize) -> BatchMove {
    let from = [BatchState::Pending];
    match held_by {
        Some(hold) => Move::new(&from, BatchState::Held, hold),
        None => Move::new(
            &from,
            BatchState::Processing,
            format!("{jobs} jobs created"),
        ),
    }
}

/// A processing batch with `running` jobs not ended: reporting once none is (none left at all
/// means an operator deleted them, and the batch reports what it has rather than wait for ever).
pub fn on_batch_jobs(running: usize) -> Option<BatchMove> {
    (running == 0).then(|| {
        Move::new(
            &[BatchState::Processing],
            BatchState::Reporting,
            "every job has ended",
        )
    })
}

/// Report `number` written (`completed` and `failed` jobs): the batch is completed or failed as
/// the report says. `None` for a batch that already wrote that report (a rerun of the tick).
pub fn on_reported(
    batch: &BatchRecord,
    number: u32,
    completed: usize,
    failed: usize,
) -> Option<BatchMove> {
    (batch.reports < number).then(|| {
        Move::new(
            &[BatchState::Reporting, BatchState::UpdateReporting],
            reported_state(failed),
            format!("report {number}: {completed} completed, {failed} failed"),
        )
    })
}

/// A completed batch's cleanup: each completed job, then the batch, deleted (records and reports
/// stay).
pub fn on_cleaned_up() -> (JobMove, BatchMove) {
    (
        Move::new(
            &[JobState::Completed],
            JobState::Deleted,
            "batch cleaned up",
        ),
        Move::new(
            &[BatchState::Completed],
            BatchState::Deleted,
            "cleaned up after completion",
        ),
    )
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

impl ProcessingEnd {
    /// `job` as the end leaves it; `None` for a stale end. A retry is not a transition: the job
    /// stays processing, waiting for its next attempt.
    pub fn applied(
        &self,
        job: &JobRecord,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>, IllegalTransition<JobState>> {
        let from = [JobState::Processing];
        match self {
            ProcessingEnd::Stale => Ok(None),
            ProcessingEnd::Processed { reason } => {
                Move::new(&from, JobState::Recording, reason.as_str()).apply(job, now)
            }
            ProcessingEnd::Failed { reason } => {
                Move::new(&from, JobState::Failed, reason.as_str()).apply(job, now)
            }
            ProcessingEnd::Retry { attempt, reason } => {
                let mut next = job.clone();
                next.processing_attempt = *attempt;
                next.processing_job = None;
                next.reason = reason.clone();
                next.last_modified = now;
                Ok(Some(next))
            }
        }
    }
}

/// An operator resumes a failed job: it restarts at the step after its last success. Refused
/// (the reason) for a job not failed, or failed before any step succeeded (its manifest entry is
/// the problem: only a new submission helps).
pub fn on_resume(job: &JobRecord) -> Result<JobMove, String> {
    if job.state != JobState::Failed {
        return Err(format!("it is {}, not failed", job.state));
    }
    match resume_target(job.last_successful_status) {
        Some(to) => Ok(Move::new(&[JobState::Failed], to, "resumed by an operator")),
        None => Err(format!(
            "it failed before any step succeeded ({}): submit it again",
            job.reason
        )),
    }
}

/// An operator asks a batch for an update report (after resuming its failed jobs): refused while
/// `running` of its jobs have not ended.
pub fn on_update_report(batch: &BatchId, running: usize) -> Result<BatchMove, String> {
    if running > 0 {
        return Err(format!(
            "batch {batch} still has {running} jobs running; report when they have ended"
        ));
    }
    Ok(Move::new(
        &[],
        BatchState::UpdateReporting,
        "an operator asked for an update report",
    ))
}

/// An operator deletes a job: only a failed or held one, and while its batch has not
/// `reported`, only `confirmed` (its depositor would never hear of it).
pub fn on_delete_job(job: &JobRecord, reported: bool, confirmed: bool) -> Result<JobMove, String> {
    let from = [JobState::Failed, JobState::Held];
    if !from.contains(&job.state) {
        return Err(format!(
            "job {} is {}: only failed or held jobs can be deleted",
            job.id, job.state
        ));
    }
    if !reported && !confirmed {
        return Err(format!(
            "batch {} has not reported yet: deleting job {} means its depositor never hears of it; confirm to go on",
            job.batch, job.id
        ));
    }
    Ok(Move::new(
        &from,
        JobState::Deleted,
        "deleted by an operator",
    ))
}

/// An operator deletes a batch: a failed one, or a held one `confirmed` (its depositor is not
/// told).
pub fn on_delete_batch(batch: &BatchRecord, confirmed: bool) -> Result<BatchMove, String> {
    let id = &batch.id;
    match batch.state {
        BatchState::Failed => {}
        BatchState::Held if confirmed => {}
        BatchState::Held => {
            return Err(format!(
                "batch {id} is held: deleting it is not reported to its depositor; confirm to go on"
            ))
        }
        other => {
            return Err(format!(
                "batch {id} is {other}: only failed or held batches can be deleted"
            ))
        }
    }
    Ok(Move::new(
        &[batch.state],
        BatchState::Deleted,
        "deleted by an operator",
    ))
}

/// A held batch or job no hold holds any more goes back to pending (`reason`: which release).
pub fn on_released(reason: &str) -> (JobMove, BatchMove) {
    (
        Move::new(&[JobState::Held], JobState::Pending, reason),
        Move::new(&[BatchState::Held], BatchState::Pending, reason),
    )
}

#[cfg(test)]
mod tests {
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
        assert_eq!(on_provisioning(10, 95, 100), None);
        let admitted = on_provisioning(5, 95, 100).unwrap();
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
        }
    }

    #[test]
    fn operators_resume_report_delete_and_release_only_what_may_be() {
        let mut j = job(None);
        assert_eq!(on_resume(&j).unwrap_err(), "it is pending, not failed");
        j.state = JobState::Failed;
        assert!(on_resume(&j)
            .unwrap_err()
            .contains("before any step succeeded"));
        j.last_successful_status = Some(JobState::Downloading);
        assert_eq!(on_resume(&j).unwrap().to, JobState::Processing);
        // Deleting: failed or held only, and confirmed until the batch reported.
        assert!(on_delete_job(&j, false, false)
            .unwrap_err()
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
            .contains("only failed or held"));
        let mut b = BatchRecord::new(j.batch.clone(), j_submission(), Utc::now());
        assert!(on_update_report(&b.id, 2)
            .unwrap_err()
            .contains("2 jobs running"));
        assert_eq!(
            on_update_report(&b.id, 0).unwrap().to,
            BatchState::UpdateReporting
        );
        assert!(on_delete_batch(&b, true)
            .unwrap_err()
            .contains("only failed or held"));
        b.state = BatchState::Held;
        assert!(on_delete_batch(&b, false).unwrap_err().contains("confirm"));
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
