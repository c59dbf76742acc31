//! What each event decides for an archive job, beside its table: the step its state calls for
//! on a tick ([`next_step`]), what its source's listing and its phase's tasks decide
//! ([`on_source_listed`], [`on_source_unreadable`], [`on_phase_tasks`]), an operator's retry
//! ([`on_operator_retry`]), when a retry may run. Pure: `handlers/archive/steps.rs` does the
//! work a step names, in order, then writes the step's [`JobMove`].

use super::job::{ArchiveState, Phase, TaskState};
use super::record::{ArchiveJob, TaskRecord};
use crate::domain::machine::{IllegalTransition, Move};
use chrono::{DateTime, Duration, Utc};

/// How long an archive job's source may fail to list before the job fails (a few dozen ticks
/// of the dispatcher's schedule): long enough for a bucket policy being fixed, short enough that
/// an operator sees the failure the same day.
pub const SOURCE_UNREADABLE_GRACE: Duration = Duration::hours(1);

/// What an archive job's state calls for on a tick: the work outside its record (done first, and
/// idempotent, so a crash before the record moves is finished by the next tick), then one move.
#[derive(Debug, Clone, PartialEq)]
pub enum ArchiveStep {
    /// Nothing now: it has ended, or waits for its retry time.
    Wait,
    /// List the source and write its shards; the listing decides the move
    /// ([`on_source_listed`], [`on_source_unreadable`]).
    ListSource,
    /// Send the phase's due tasks (repairing a fan-out a dead mover left), then fan in
    /// ([`on_phase_tasks`]).
    RunPhase(Phase),
    /// The phase's failed tasks back to pending, then the move (which starts the phase again).
    RerunPhase { phase: Phase, then: JobMove },
    /// Announce the job's failure, then the move.
    Announce(JobMove),
    /// Remove the temporaries — after a success also the staged archive, and announce it — then
    /// the move, then close the job's open marker.
    CleanUp { succeeded: bool, then: JobMove },
    /// Only the move.
    Move(JobMove),
}

/// One move of a job's record (the kernel's [`Move`], from the state it was decided in), setting
/// `sets`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobMove {
    pub moves: Move<ArchiveState>,
    pub sets: Vec<JobField>,
    /// The phase whose tasks the mover sends once the record has moved.
    pub starts: Option<Phase>,
}

/// A field a move sets on the record.
#[derive(Debug, Clone, PartialEq)]
pub enum JobField {
    /// The source's size, as listed.
    Listed { shards: u32, objects: u64 },
    /// Why it failed.
    Failure(String),
    /// The phase it erred in, and whether running it again may help.
    Erred { phase: Phase, recoverable: bool },
    /// When a recoverable error's retry may run.
    RetryAt(Option<DateTime<Utc>>),
    /// The phase runs again: the error is cleared; an automatic retry counts against the
    /// phase's budget, an operator's does not.
    Rerun { phase: Phase, automatic: bool },
}

impl JobMove {
    fn to(from: ArchiveState, to: ArchiveState, reason: impl Into<String>) -> Self {
        Self {
            moves: Move::new(&[from], to, reason),
            sets: Vec::new(),
            starts: Phase::of(to),
        }
    }

    fn setting(mut self, field: JobField) -> Self {
        self.sets.push(field);
        self
    }

    /// `job` moved, if it is still in `from`; `None` if it is not.
    pub fn apply(
        &self,
        job: &ArchiveJob,
        now: DateTime<Utc>,
    ) -> Result<Option<ArchiveJob>, IllegalTransition<ArchiveState>> {
        self.moves.apply_with(job, now, |next| self.set(next))
    }

    fn set(&self, next: &mut ArchiveJob) {
        for field in &self.sets {
            match field {
                JobField::Listed { shards, objects } => {
                    next.shards = *shards;
                    next.objects = *objects;
                }
                JobField::Failure(why) => next.failure = Some(why.clone()),
                JobField::Erred { phase, recoverable } => {
                    next.failed_phase = Some(*phase);
                    next.recoverable = Some(*recoverable);
                }
                JobField::RetryAt(at) => next.retry_at = *at,
                JobField::Rerun { phase, automatic } => {
                    if *automatic {
                        *next.retries.entry(*phase).or_insert(0) += 1;
                    }
                    next.retry_at = None;
                    next.failure = None;
                    next.recoverable = None;
                }
            }
        }
    }
}

/// How recoverable errors are retried (`GRANARY_ARCHIVE_MAX_RETRIES`, `…_BACKOFF_SECS`).
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub backoff: Duration,
}

/// The step job calls for now.
pub fn next_step(job: &ArchiveJob, now: DateTime<Utc>, policy: RetryPolicy) -> ArchiveStep {
    use ArchiveState::*;
    let step =
        |to: ArchiveState, reason: &str| ArchiveStep::Move(JobMove::to(job.state, to, reason));
    match job.state {
        Uninitialized => ArchiveStep::ListSource,
        Queued if job.failure.is_some() || job.objects == 0 => {
            let why = job
                .failure
                .clone()
                .unwrap_or_else(|| format!("{} holds no object to archive", job.source));
            ArchiveStep::Move(JobMove::to(Queued, Failure, &why).setting(JobField::Failure(why)))
        }
        Queued => step(Processing, "taken by the schedule"),
        Processing => step(ActivityArchiving, "archiving its shards"),
        ActivityArchiving | PostProcessing | Store => match Phase::of(job.state) {
            Some(phase) => ArchiveStep::RunPhase(phase),
            None => ArchiveStep::Wait,
        },
        Error => ArchiveStep::Move(on_error(job, now, policy)),
        RecoverableError => match job.failed_phase {
            Some(phase) if job.retry_at.is_none_or(|at| at <= now) => ArchiveStep::RerunPhase {
                phase,
                then: JobMove::to(RecoverableError, phase.state(), "retrying its failed tasks")
                    .setting(JobField::Rerun {
                        phase,
                        automatic: true,
                    }),
            },
            _ => ArchiveStep::Wait,
        },
        Failure => step(ErrorHandling, "handling the failure"),
        ErrorHandling => {
            ArchiveStep::Announce(JobMove::to(ErrorHandling, Cleanup, "failure announced"))
        }
        Cleanup if job.failure.is_none() => ArchiveStep::CleanUp {
            succeeded: true,
            then: JobMove::to(Cleanup, Completed, "stored, verified, cleaned up"),
        },
        Cleanup => ArchiveStep::CleanUp {
            succeeded: false,
            then: JobMove::to(Cleanup, Failed, "failed; cleaned up"),
        },
        Completed | Failed => ArchiveStep::Wait,
    }
}

/// An error: a retry at its backoff while recoverable with retries left, else failure.
fn on_error(job: &ArchiveJob, now: DateTime<Utc>, policy: RetryPolicy) -> JobMove {
    let used = job
        .failed_phase
        .and_then(|p| job.retries.get(&p).copied())
        .unwrap_or(0);
    let recoverable = job.recoverable.unwrap_or(false);
    let (to, at) = after_error(recoverable, used, policy.max_retries, policy.backoff, now);
    let reason = match to {
        ArchiveState::RecoverableError => {
            format!("recoverable: retry {} of {}", used + 1, policy.max_retries)
        }
        _ if recoverable => format!("retries spent ({used}): {}", job.reason),
        _ => format!("not recoverable: {}", job.reason),
    };
    let mv = JobMove::to(ArchiveState::Error, to, reason).setting(JobField::RetryAt(at));
    if to == ArchiveState::Failure {
        mv.setting(JobField::Failure(job.reason.clone()))
    } else {
        mv
    }
}

/// The source listed: `objects` keys in `shards` shards (written before this move).
pub fn on_source_listed(shards: u32, objects: u64) -> JobMove {
    JobMove::to(
        ArchiveState::Uninitialized,
        ArchiveState::Queued,
        format!("{objects} objects in {shards} shards"),
    )
    .setting(JobField::Listed { shards, objects })
}

/// The source could not be listed (`error`): tried again each tick while it may pass
/// (throttled, a grant on its way) — `None` — and past [`SOURCE_UNREADABLE_GRACE`] the job
/// fails with S3's reason rather than stay uninitialized for ever.
pub fn on_source_unreadable(job: &ArchiveJob, error: &str, now: DateTime<Utc>) -> Option<JobMove> {
    if now.signed_duration_since(job.created_at) < SOURCE_UNREADABLE_GRACE {
        return None;
    }
    let why = format!(
        "{} could not be listed for {} minutes: {error}",
        job.source,
        SOURCE_UNREADABLE_GRACE.num_minutes()
    );
    Some(
        JobMove::to(ArchiveState::Uninitialized, ArchiveState::Queued, &why)
            .setting(JobField::Failure(why)),
    )
}

/// The names of a phase's tasks.
pub fn task_names(job: &ArchiveJob, phase: Phase) -> Vec<String> {
    match phase {
        Phase::ActivityArchiving => (0..job.shards).map(|n| format!("shard-{n:05}")).collect(),
        Phase::PostProcessing => vec!["post".to_owned()],
        Phase::Store => (0..job.destinations.len())
            .map(|n| format!("dest-{n:02}"))
            .collect(),
    }
}

/// The phase's fan-in: once every task has ended the job moves on (every task done) or errs
/// (some failed); `None` while it runs (or before every task exists).
pub fn on_phase_tasks(job: &ArchiveJob, phase: Phase, tasks: &[TaskRecord]) -> Option<JobMove> {
    if job.state != phase.state() || tasks.len() < task_names(job, phase).len() {
        return None;
    }
    let states: Vec<TaskState> = tasks.iter().map(|t| t.state).collect();
    match phase_progress(&states) {
        PhaseProgress::Running => None,
        PhaseProgress::Done => Some(JobMove::to(
            phase.state(),
            phase.next(),
            format!("{phase}: all {} tasks done", tasks.len()),
        )),
        PhaseProgress::Failed { recoverable } => {
            let reasons: Vec<String> = tasks
                .iter()
                .filter(|t| matches!(t.state, TaskState::Failed { .. }))
                .map(|t| format!("{}: {}", t.task, t.reason))
                .collect();
            Some(
                JobMove::to(
                    phase.state(),
                    ArchiveState::Error,
                    format!("{phase} failed: {}", reasons.join("; ")),
                )
                .setting(JobField::Erred { phase, recoverable }),
            )
        }
    }
}

/// Why an operator's retry of an archive job is refused; the text is what the operator is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryRefused {
    #[error("archive job {job} is {state}, not failed")]
    NotFailed { job: String, state: ArchiveState },
    /// `failure`: the job's own failure reason, when it kept one.
    #[error(
        "archive job {job} failed before any phase ran ({}): create it again",
        .failure.as_deref().unwrap_or("no reason kept")
    )]
    NoPhaseRan {
        job: String,
        failure: Option<String>,
    },
}

/// `granary archive retry`: a failed job runs the phase that failed again (its failed tasks
/// only, not counted against its budget). `Err` says why it cannot.
pub fn on_operator_retry(job: &ArchiveJob) -> Result<(Phase, JobMove), RetryRefused> {
    if job.state != ArchiveState::Failed {
        return Err(RetryRefused::NotFailed {
            job: job.id.clone(),
            state: job.state,
        });
    }
    let Some(phase) = job.failed_phase else {
        return Err(RetryRefused::NoPhaseRan {
            job: job.id.clone(),
            failure: job.failure.clone(),
        });
    };
    let mv = JobMove::to(
        ArchiveState::Failed,
        phase.state(),
        "retried by an operator",
    )
    .setting(JobField::Rerun {
        phase,
        automatic: false,
    });
    Ok((phase, mv))
}

/// Where a phase stands, from its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseProgress {
    /// Some task has not ended.
    Running,
    /// Every task done: the phase hands on.
    Done,
    /// Every task ended and some failed: the phase errs, recoverable only if each failure is.
    Failed { recoverable: bool },
}

/// The phase's progress from its tasks' states. A phase with no task has not started.
pub fn phase_progress(tasks: &[TaskState]) -> PhaseProgress {
    if tasks.is_empty() || tasks.contains(&TaskState::Pending) {
        return PhaseProgress::Running;
    }
    let failures: Vec<bool> = tasks
        .iter()
        .filter_map(|t| match t {
            TaskState::Failed { recoverable } => Some(*recoverable),
            _ => None,
        })
        .collect();
    if failures.is_empty() {
        PhaseProgress::Done
    } else {
        PhaseProgress::Failed {
            recoverable: failures.iter().all(|r| *r),
        }
    }
}

/// After `Error` in `phase`, with `retries_used` retries of that phase already made: a retry
/// (at `now` + backoff) while the error is recoverable and retries are left, else failure.
pub fn after_error(
    recoverable: bool,
    retries_used: u32,
    max_retries: u32,
    base_backoff: Duration,
    now: DateTime<Utc>,
) -> (ArchiveState, Option<DateTime<Utc>>) {
    if recoverable && retries_used < max_retries {
        (
            ArchiveState::RecoverableError,
            Some(now + backoff(base_backoff, retries_used + 1)),
        )
    } else {
        (ArchiveState::Failure, None)
    }
}

/// Backoff before retry `n` (1-based): base, 2×base, 4×base, … capped at an hour.
pub fn backoff(base: Duration, n: u32) -> Duration {
    let factor = 1i32 << n.saturating_sub(1).min(16);
    (base * factor).min(Duration::hours(1))
}

#[cfg(test)]
mod tests;
