//! Which change an event causes to an item record: one named pure function per event, beside the
//! transition table ([`super::TRANSITIONS`]) that every change is checked against when it is
//! applied. Each looks only at the record it is given — the items repository asks again after a
//! lost compare-and-swap — and answers "no change" when the record has already moved past the
//! event (a duplicate, a late delivery, a concurrent runner that got there first).

use super::ItemState::{self, *};
use super::RetryPolicy;
use crate::domain::classify::Route;
use crate::domain::item::{Change, ItemRecord};
use chrono::{DateTime, Utc};

/// The change that submitting a job makes: PROCESSING with the job id.
fn submit_change(attempt: u32, job_id: &str) -> Change {
    Change {
        job_id: Some(job_id.to_owned()),
        attempt: Some(attempt),
        ..Change::to(
            Processing,
            format!("attempt {attempt} submitted as job {job_id}"),
        )
    }
}

/// Attempt `attempt` was submitted as `job_id`. An attempt begins on entering PROCESSING, so a
/// record already at this attempt or later changes nothing. A retry goes PROCESSING_FAILED →
/// READY → PROCESSING in one write, and so does an ABANDONED item an operator sent round again
/// (`granary resume`, a redrive of its DLQ notice: nothing else submits past the end); a record still PROCESSING an earlier attempt (the sweeper sent
/// its retry before recording the timeout, and may have died before the write) records that
/// attempt as superseded first — the next attempt's submission proves the earlier one is over.
/// A DISCOVERED file a feeder's window submitted at attempt 1 is taken over by that job.
pub fn on_submitted(r: &ItemRecord, attempt: u32, job_id: &str) -> Vec<Change> {
    if submission_recorded(r, attempt) {
        return Vec::new();
    }
    let retrying = || Change::to(Ready, format!("retrying as attempt {attempt}"));
    let submit = submit_change(attempt, job_id);
    match r.state {
        ProcessingFailed | Abandoned => vec![retrying(), submit],
        Ready => vec![submit],
        // A file the importer discovered whose id a feeder's window listed and submitted
        // first: its discovery left it unqueued (`importer::discover`), and the window's job
        // takes it over along the edges an operational file takes, its listing vouching for it.
        Discovered if attempt == 1 => vec![
            Change::to(
                Downloaded,
                "listed in an inventory, whose window's job reads it where it is",
            ),
            Change::to(Ready, "listed in an inventory"),
            submit,
        ],
        Processing => vec![
            Change::to(
                ProcessingFailed,
                format!(
                    "attempt {} superseded: attempt {attempt} submitted",
                    r.attempts.processing
                ),
            ),
            retrying(),
            submit,
        ],
        _ => Vec::new(),
    }
}

/// Whether the record already knows attempt `attempt` was submitted (an attempt begins on
/// entering PROCESSING, so a processing count at or past it means it has begun): a submission
/// changes nothing then.
pub fn submission_recorded(r: &ItemRecord, attempt: u32) -> bool {
    r.attempts.processing >= attempt
}

/// Attempt `attempt` submitted as `job_id`, for a record created along with it (READY, then
/// PROCESSING, counting `attempt` attempts): a window's first attempts, or a submitter that
/// found no record.
pub fn submission(attempt: u32, job_id: &str) -> Change {
    submit_change(attempt, job_id)
}

/// Where a job's end takes its item, by the monitor's route: a success to PROCESSED; a failure
/// granary retries to PROCESSING_FAILED, which the requeuer moves on (READY for the next attempt,
/// or ABANDONED once the attempts are spent); a failure dead-lettered for a human (the
/// application's exit, a cancel, an unknown end) on to ABANDONED in the same write. Nothing would
/// ever move that one out of PROCESSING_FAILED, and granary does not retry what the code broke:
/// `granary resume` (or a redrive of its DLQ notice) sends it round again once it is fixed.
pub fn end_states(route: Route) -> &'static [ItemState] {
    match route {
        Route::Done => &[Processed],
        Route::RetryQueue => &[ProcessingFailed],
        // Given up until an operator sends it round (`granary resume --cancelled`, or
        // `granary resume --state ABANDONED`): nothing else may move it on.
        Route::FailureDlq | Route::Cancelled => &[ProcessingFailed, Abandoned],
    }
}

/// The changes that take an item along `ends` ([`end_states`]) for attempt `attempt`'s end.
fn ended(attempt: u32, ends: &[ItemState], reason: &str) -> Vec<Change> {
    ends.iter()
        .map(|to| match to {
            // Given up for a human: dead-lettered, or (its reason names `granary cancel`) listed
            // for the operator's resume.
            Abandoned if reason.contains(crate::domain::cancel::REASON_PREFIX) => {
                Change::to(Abandoned, format!("attempt {attempt} {reason}"))
            }
            Abandoned => Change::to(
                Abandoned,
                format!("attempt {attempt} dead-lettered: {reason}"),
            ),
            to => Change::to(*to, format!("attempt {attempt}: {reason}")),
        })
        .collect()
}

/// The monitor saw attempt `attempt` (job `job_id`) end: PROCESSING (that attempt) → along
/// `ends` ([`end_states`]). A record that does not know yet that the attempt was submitted (its
/// submitter's record write came late: the requeuer's message was redelivered after the job had
/// already run) is caught up first, in the same write — else the submitter's late write would
/// leave it PROCESSING an attempt whose end was already handled. An end of an earlier attempt
/// changes nothing.
pub fn on_job_finished(
    r: &ItemRecord,
    attempt: u32,
    job_id: &str,
    ends: &[ItemState],
    reason: &str,
) -> Vec<Change> {
    if r.state == Processing && r.attempts.processing == attempt {
        return ended(attempt, ends, reason);
    }
    let mut steps = on_submitted(r, attempt, job_id);
    if !steps.is_empty() {
        steps.extend(ended(attempt, ends, reason));
    }
    steps
}

/// The monitor saw attempt `attempt` end and the granule has no record yet: its submitter's write
/// is still to come (a window's records are made after its jobs are submitted, and a fast job may
/// end first — or a first attempt failed, its retry ran and succeeded, all before the window's
/// record was made). The record is made READY and moved along these changes in the same write,
/// counting `attempt` attempts, so the submitter's late creation finds it and changes nothing: a
/// record made after the end was handled would sit in PROCESSING with nothing left to move it.
pub fn on_job_finished_unrecorded(
    attempt: u32,
    job_id: &str,
    ends: &[ItemState],
    reason: &str,
) -> Vec<Change> {
    let mut steps = vec![submit_change(attempt, job_id)];
    steps.extend(ended(attempt, ends, reason));
    steps
}

/// The requeuer found the attempt budget spent after attempt `attempt` (`why`: the budget's own
/// words, `domain::attempt_budget`): PROCESSING_FAILED → ABANDONED (unless a later attempt has
/// begun since).
pub fn on_attempts_spent(r: &ItemRecord, attempt: u32, why: &str) -> Option<Change> {
    (r.state == ProcessingFailed && r.attempts.processing <= attempt)
        .then(|| Change::to(Abandoned, why.to_owned()))
}

/// `granary cancel`'s hold took the next attempt of an item whose attempt `attempt` failed:
/// PROCESSING_FAILED → ABANDONED (unless a later attempt has begun since), given up until the
/// operator's `granary resume --cancelled`.
pub fn on_held_back(r: &ItemRecord, attempt: u32, cancel: &str) -> Option<Change> {
    (r.state == ProcessingFailed && r.attempts.processing <= attempt).then(|| {
        Change::to(
            Abandoned,
            format!(
                "attempt {} held back by granary cancel {cancel}",
                attempt + 1
            ),
        )
    })
}

/// An operator resumed a failed or abandoned item read at `seq`: PROCESSING_FAILED or ABANDONED
/// → READY, if the record has not moved since (the requeuer may have got there first).
pub fn on_operator_resume(r: &ItemRecord, seq: u32, next_attempt: u32) -> Option<Change> {
    (matches!(r.state, ProcessingFailed | Abandoned) && r.seq == seq).then(|| {
        Change::to(
            Ready,
            format!("resumed by an operator: attempt {next_attempt} next"),
        )
    })
}

/// A download message found the item DOWNLOADING: past the download timeout with attempts left,
/// the attempt is recorded as failed (DOWNLOADING_FAILED) so a download can begin again.
pub fn on_download_timed_out(
    r: &ItemRecord,
    policy: &RetryPolicy,
    now: DateTime<Utc>,
) -> Option<Change> {
    (r.state == Downloading
        && policy.timeout_recovery(Downloading, &r.attempts, now) == Some(vec![DownloadingFailed]))
    .then(|| {
        Change::to(
            DownloadingFailed,
            format!(
                "timed out after {}s (timeout recovery)",
                policy.download_timeout.num_seconds()
            ),
        )
    })
}

/// A file stored in granary's bucket, as checked or as just written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub key: String,
    pub size: u64,
    pub sha256: String,
}

impl StoredFile {
    fn change(&self, reason: String) -> Change {
        Change {
            stored_key: Some(self.key.clone()),
            size: Some(self.size),
            checksum: Some(self.sha256.clone()),
            ..Change::to(Downloaded, reason)
        }
    }
}

/// A DISCOVERED item's file is already stored and intact: DOWNLOADED without a download.
pub fn on_found_stored(r: &ItemRecord, file: &StoredFile) -> Option<Change> {
    (r.state == Discovered).then(|| file.change(format!("already stored at {}", file.key)))
}

/// A download is wanted: begin attempt 1 (DISCOVERED), the next attempt while the budget lasts or
/// an operator `granted` one (DOWNLOADING_FAILED), or give up (IGNORE). Only one runner wins the
/// compare-and-swap that writes it.
pub fn on_download_wanted(r: &ItemRecord, policy: &RetryPolicy, granted: bool) -> Option<Change> {
    let next = r.attempts.download + 1;
    match r.state {
        Discovered => Some(Change::to(Downloading, "download attempt 1")),
        DownloadingFailed if granted => Some(Change::to(
            Downloading,
            format!("download attempt {next} (resumed by an operator)"),
        )),
        DownloadingFailed => match policy.after_download_failure(r.attempts.download) {
            Downloading => Some(Change::to(Downloading, format!("download attempt {next}"))),
            _ => Some(Change::to(
                Ignore,
                format!("{} download attempts failed", r.attempts.download),
            )),
        },
        _ => None,
    }
}

/// How one download attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownloadResult {
    Stored(StoredFile),
    Failed(String),
}

/// Download attempt `attempt` ended: DOWNLOADED or DOWNLOADING_FAILED, if the record is still in
/// that attempt (a timeout recovery may have moved it on meanwhile).
pub fn on_download_result(r: &ItemRecord, attempt: u32, result: &DownloadResult) -> Option<Change> {
    if r.state != Downloading || r.attempts.download != attempt {
        return None;
    }
    Some(match result {
        DownloadResult::Stored(file) => file.change(format!(
            "attempt {attempt}: {} bytes stored at {}",
            file.size, file.key
        )),
        DownloadResult::Failed(why) => {
            Change::to(DownloadingFailed, format!("attempt {attempt}: {why}"))
        }
    })
}

/// Admission decided `to` (READY, SKIPPED, DOWNLOADING_FAILED…) for a DOWNLOADED record read at
/// `seq`; written only if it has not moved since.
pub fn on_admission(r: &ItemRecord, seq: u32, to: ItemState, reason: &str) -> Option<Change> {
    (r.state == Downloaded && r.seq == seq).then(|| Change::to(to, reason))
}

/// What re-validation found wrong with an item read in state `was` at `seq`: its stored file
/// (DOWNLOADED → DOWNLOADING_FAILED) or its products (PROCESSED → PROCESSING_FAILED).
pub fn on_revalidation_failed(
    r: &ItemRecord,
    was: ItemState,
    seq: u32,
    reason: &str,
) -> Option<Change> {
    let to = if was == Downloaded {
        DownloadingFailed
    } else {
        ProcessingFailed
    };
    (r.state == was && r.seq == seq).then(|| Change::to(to, reason))
}

/// A failed item with no processing attempts left: PROCESSING_FAILED → ABANDONED.
pub fn on_no_attempts_left(r: &ItemRecord, reason: &str) -> Option<Change> {
    (r.state == ProcessingFailed).then(|| Change::to(Abandoned, reason))
}

/// One step of a timeout recovery (the sweeper): `from` at `seq` → `to`, if the record has not
/// moved since the sweeper read it.
pub fn on_timeout(
    r: &ItemRecord,
    from: ItemState,
    seq: u32,
    path: &[ItemState],
    timeout_secs: i64,
) -> Vec<Change> {
    if r.state != from || r.seq != seq {
        return Vec::new();
    }
    // The whole path is one write (each step its history entry): a sweeper that died between
    // two writes would leave a FAILED state no sweep looks at again.
    path.iter()
        .map(|to| {
            let reason = if to.is_terminal() {
                format!("timed out after {timeout_secs}s; no attempts left")
            } else {
                format!("timed out after {timeout_secs}s (timeout recovery)")
            };
            Change::to(*to, reason)
        })
        .collect()
}

#[cfg(test)]
mod tests;
