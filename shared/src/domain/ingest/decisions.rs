//! What each ingest step decides, as pure functions beside the tables: the handlers only read,
//! call one of these, and write the [`Move`] it returns (with If-Match, from the state it was
//! decided in). The tick's steps come first, then the processing end, then what an operator's
//! commands decide (resume, update report, delete, release).

use super::batch::{reported_state, BatchState};
use super::index::{BatchId, JobId};
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
pub fn on_provisioning(
    need: u64,
    in_flight: u64,
    capacity: u64,
    unestimated_reserve: u64,
) -> Option<JobMove> {
    admits(need, in_flight, capacity, unestimated_reserve).then(|| {
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

/// Processing with no container configured (`GRANARY_INGEST_CONTAINER_STEP=off`): straight on
/// to storing.
pub fn on_processing_skipped() -> JobMove {
    Move::new(
        &[JobState::Processing],
        JobState::Storing,
        "no processing container configured: on to storing",
    )
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

/// Whether a batch submitted under `profile` confirms the queueing of its jobs to its
/// depositor: its profile is one of `confirming` (or `confirming` holds `*`).
pub fn confirms_queueing(profile: Option<&str>, confirming: &[String]) -> bool {
    confirming
        .iter()
        .any(|c| c == "*" || profile.is_some_and(|p| p == c))
}

/// A job's priority for its size: over `large_bytes` it steps back by five from the priority its
/// submission asked for (it would hold the capacity a long time), never past the lowest. Asked
/// after the estimate and again after the download, which knows the true size (seed 004: the
/// download recalculates space_needed and priority "in case the estimate was inaccurate"); from
/// the submitted priority each time, so asking twice never steps back twice.
pub fn priority_for(submitted: u8, space_needed: u64, large_bytes: u64) -> u8 {
    if large_bytes > 0 && space_needed > large_bytes {
        submitted.saturating_add(5).min(super::index::MAX_PRIORITY)
    } else {
        submitted
    }
}

/// Whether a job needing `need` bytes may start downloading while `in_flight` bytes are already
/// being downloaded or processed, under `capacity`. A job that could never fit runs alone rather
/// than never. An unestimated job (0: its size is unknown, it may be large) waits while less
/// than `unestimated_reserve` of the capacity is free (seed 004: unestimated jobs are held while
/// the free space is below a threshold).
pub fn admits(need: u64, in_flight: u64, capacity: u64, unestimated_reserve: u64) -> bool {
    if in_flight == 0 {
        return true;
    }
    if need == 0 {
        let free = capacity.saturating_sub(in_flight);
        return free > 0 && free >= unestimated_reserve;
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
    // An ingest job's memory is its job definition's: it is never raised (`domain::memory`
    // raises granules' retries), so running out again is all a retry would do.
    let out_of_memory = matches!(
        classification.failure,
        Some(crate::domain::classify::FailureKind::OutOfMemory)
    );
    match classification.route() {
        Route::RetryQueue if out_of_memory => ProcessingEnd::Failed {
            reason: format!(
                "{batch_job_name} ran out of memory ({why}): raise the job definition's memory"
            ),
        },
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
        // `granary cancel` takes the backfill campaign's attempts only; an ingest job someone
        // terminated with its reason ends as failed, as any other cancel of it does.
        Route::Cancelled => ProcessingEnd::Failed {
            reason: format!("{batch_job_name} cancelled ({why})"),
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
                Move::new(&from, JobState::Storing, reason.as_str()).apply(job, now)
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

/// Why an operator's command on an ingest job or batch is refused; the text is what the
/// operator is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorRefusal {
    #[error("it is {0}, not failed")]
    NotFailed(JobState),
    /// `reason`: the job's own failure reason.
    #[error("it failed before any step succeeded ({reason}): submit it again")]
    NoStepSucceeded { reason: String },
    #[error("batch {batch} still has {running} jobs running; report when they have ended")]
    JobsRunning { batch: BatchId, running: usize },
    #[error("job {job} is {state}: only failed or held jobs can be deleted")]
    JobNotDeletable { job: JobId, state: JobState },
    #[error(
        "batch {batch} has not reported yet: deleting job {job} means its depositor never hears of it; confirm to go on"
    )]
    UnreportedJobUnconfirmed { batch: BatchId, job: JobId },
    #[error("batch {0} is held: deleting it is not reported to its depositor; confirm to go on")]
    HeldBatchUnconfirmed(BatchId),
    #[error("batch {batch} is {state}: only failed or held batches can be deleted")]
    BatchNotDeletable { batch: BatchId, state: BatchState },
}

/// An operator resumes a failed job: it restarts at the step after its last success. Refused
/// for a job not failed, or failed before any step succeeded (its manifest entry is the problem:
/// only a new submission helps).
pub fn on_resume(job: &JobRecord) -> Result<JobMove, OperatorRefusal> {
    if job.state != JobState::Failed {
        return Err(OperatorRefusal::NotFailed(job.state));
    }
    match resume_target(job.last_successful_status) {
        Some(to) => Ok(Move::new(&[JobState::Failed], to, "resumed by an operator")),
        None => Err(OperatorRefusal::NoStepSucceeded {
            reason: job.reason.clone(),
        }),
    }
}

/// An operator asks a batch for an update report (after resuming its failed jobs): refused while
/// `running` of its jobs have not ended.
pub fn on_update_report(batch: &BatchId, running: usize) -> Result<BatchMove, OperatorRefusal> {
    if running > 0 {
        return Err(OperatorRefusal::JobsRunning {
            batch: batch.clone(),
            running,
        });
    }
    Ok(Move::new(
        &[],
        BatchState::UpdateReporting,
        "an operator asked for an update report",
    ))
}

/// An operator deletes a job: only a failed or held one, and while its batch has not
/// `reported`, only `confirmed` (its depositor would never hear of it).
pub fn on_delete_job(
    job: &JobRecord,
    reported: bool,
    confirmed: bool,
) -> Result<JobMove, OperatorRefusal> {
    let from = [JobState::Failed, JobState::Held];
    if !from.contains(&job.state) {
        return Err(OperatorRefusal::JobNotDeletable {
            job: job.id.clone(),
            state: job.state,
        });
    }
    if !reported && !confirmed {
        return Err(OperatorRefusal::UnreportedJobUnconfirmed {
            batch: job.batch.clone(),
            job: job.id.clone(),
        });
    }
    Ok(Move::new(
        &from,
        JobState::Deleted,
        "deleted by an operator",
    ))
}

/// An operator deletes a batch: a failed one, or a held one `confirmed` (its depositor is not
/// told).
pub fn on_delete_batch(batch: &BatchRecord, confirmed: bool) -> Result<BatchMove, OperatorRefusal> {
    let id = &batch.id;
    match batch.state {
        BatchState::Failed => {}
        BatchState::Held if confirmed => {}
        BatchState::Held => return Err(OperatorRefusal::HeldBatchUnconfirmed(id.clone())),
        other => {
            return Err(OperatorRefusal::BatchNotDeletable {
                batch: id.clone(),
                state: other,
            })
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
mod tests;
