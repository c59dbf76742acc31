//! What each event decides for an archive job, beside its table: a phase's tasks ending, an
//! error being classified, when a retry may run.

use super::job::{ArchiveState, Phase};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// A task of a phase, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Pending,
    Done,
    /// Failed; `recoverable` says whether running it again may help.
    Failed {
        recoverable: bool,
    },
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

/// The phase a failed job's retry restarts: the one that failed; a job that failed before any
/// phase ran cannot be retried (its source is the problem: create it again).
pub fn retry_target(failed_phase: Option<Phase>) -> Option<ArchiveState> {
    failed_phase.map(Phase::state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    #[test]
    fn a_phase_ends_when_every_task_has_and_errs_if_any_failed() {
        assert_eq!(phase_progress(&[]), PhaseProgress::Running);
        assert_eq!(phase_progress(&[Done, Pending]), PhaseProgress::Running);
        assert_eq!(phase_progress(&[Done, Done]), PhaseProgress::Done);
        assert_eq!(
            phase_progress(&[Done, Failed { recoverable: true }]),
            PhaseProgress::Failed { recoverable: true }
        );
        assert_eq!(
            phase_progress(&[Failed { recoverable: true }, Failed { recoverable: false }]),
            PhaseProgress::Failed { recoverable: false }
        );
    }

    #[test]
    fn recoverable_errors_retry_with_backoff_until_the_budget_is_spent() {
        let now = Utc::now();
        let base = Duration::seconds(30);
        let (to, at) = after_error(true, 0, 2, base, now);
        assert_eq!((to, at), (ArchiveState::RecoverableError, Some(now + base)));
        let (_, at) = after_error(true, 1, 2, base, now);
        assert_eq!(at, Some(now + base * 2));
        assert_eq!(after_error(true, 2, 2, base, now).0, ArchiveState::Failure);
        assert_eq!(after_error(false, 0, 2, base, now).0, ArchiveState::Failure);
        assert_eq!(backoff(base, 40), Duration::hours(1));
        assert_eq!(retry_target(Some(Phase::Store)), Some(ArchiveState::Store));
        assert_eq!(retry_target(None), None);
    }
}
