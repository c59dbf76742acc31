//! An archive job's states and the transitions between them, as a table. The three phases that
//! do the work (archiving, post-processing, store) fail into `Error`, which decides between a
//! retry (`RecoverableError`) and `Failure`; a failure is handled (recorded, announced), cleaned
//! up and ends `Failed`, from which an operator may retry the phase that failed.

use crate::domain::machine::Cause;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchiveState {
    /// Created; its source is not resolved yet.
    Uninitialized,
    /// Its source is resolved into shards: waiting for the schedule.
    Queued,
    /// Taken by the schedule: its first phase is about to start.
    Processing,
    /// One task per shard copies the source's objects into content-addressed members.
    ActivityArchiving,
    /// Check integrity, calculate checksums, sign (in that order).
    PostProcessing,
    /// One task per destination copies the archive there and verifies the copy.
    Store,
    /// A phase failed: recoverable or not is decided next.
    Error,
    /// Waiting to re-run the failed phase's failed tasks (with backoff).
    RecoverableError,
    /// Not recoverable, or the phase's retries are spent.
    Failure,
    /// The failure is recorded and announced.
    ErrorHandling,
    /// Temporaries are removed.
    Cleanup,
    Completed,
    /// Ended after a failure (cleaned up); an operator may retry the phase that failed.
    Failed,
}

use ArchiveState::*;

/// The phases that run tasks and may fail into `Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    ActivityArchiving,
    PostProcessing,
    Store,
}

impl Phase {
    pub const ALL: [Phase; 3] = [
        Phase::ActivityArchiving,
        Phase::PostProcessing,
        Phase::Store,
    ];

    pub fn state(self) -> ArchiveState {
        match self {
            Phase::ActivityArchiving => ActivityArchiving,
            Phase::PostProcessing => PostProcessing,
            Phase::Store => Store,
        }
    }

    pub fn of(state: ArchiveState) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.state() == state)
    }

    /// The state a phase hands on to when it succeeds.
    pub fn next(self) -> ArchiveState {
        match self {
            Phase::ActivityArchiving => PostProcessing,
            Phase::PostProcessing => Store,
            Phase::Store => Cleanup,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.state().as_str()
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ArchiveState {
    pub const ALL: [ArchiveState; 13] = [
        Uninitialized,
        Queued,
        Processing,
        ActivityArchiving,
        PostProcessing,
        Store,
        Error,
        RecoverableError,
        Failure,
        ErrorHandling,
        Cleanup,
        Completed,
        Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Uninitialized => "uninitialized",
            Queued => "queued",
            Processing => "processing",
            ActivityArchiving => "activity-archiving",
            PostProcessing => "post-processing",
            Store => "store",
            Error => "error",
            RecoverableError => "recoverable-error",
            Failure => "failure",
            ErrorHandling => "error-handling",
            Cleanup => "cleanup",
            Completed => "completed",
            Failed => "failed",
        }
    }

    /// Completed or failed: nothing more happens unless an operator retries.
    pub fn has_ended(self) -> bool {
        matches!(self, Completed | Failed)
    }
}

crate::state_machine!(ArchiveState, "an archive job", TRANSITIONS);

/// Every transition an archive job may make, and who makes it.
pub const TRANSITIONS: [(ArchiveState, ArchiveState, Cause); 22] = [
    (Uninitialized, Queued, Cause::Automatic),
    (Queued, Processing, Cause::Automatic),
    // Before any phase: nothing to retry (a source that cannot be read, an empty one).
    (Queued, Failure, Cause::Automatic),
    (Processing, ActivityArchiving, Cause::Automatic),
    (ActivityArchiving, PostProcessing, Cause::Automatic),
    (ActivityArchiving, Error, Cause::Automatic),
    (PostProcessing, Store, Cause::Automatic),
    (PostProcessing, Error, Cause::Automatic),
    (Store, Cleanup, Cause::Automatic),
    (Store, Error, Cause::Automatic),
    (Error, RecoverableError, Cause::Automatic),
    (Error, Failure, Cause::Automatic),
    // Retries re-run the phase that failed (only its tasks that failed).
    (RecoverableError, ActivityArchiving, Cause::Automatic),
    (RecoverableError, PostProcessing, Cause::Automatic),
    (RecoverableError, Store, Cause::Automatic),
    (Failure, ErrorHandling, Cause::Automatic),
    (ErrorHandling, Cleanup, Cause::Automatic),
    (Cleanup, Completed, Cause::Automatic),
    (Cleanup, Failed, Cause::Automatic),
    // `granary archive retry`: a failed job from the phase that failed.
    (Failed, ActivityArchiving, Cause::Operator),
    (Failed, PostProcessing, Cause::Operator),
    (Failed, Store, Cause::Operator),
];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_its_twenty_two_transitions_and_nothing_else() {
        let allowed = ArchiveState::ALL
            .iter()
            .flat_map(|f| ArchiveState::ALL.iter().map(move |t| (*f, *t)))
            .filter(|(f, t)| crate::domain::machine::check(*f, *t).is_ok())
            .count();
        assert_eq!(allowed, 22);
        assert!(crate::domain::machine::check(Queued, Store).is_err());
        assert!(crate::domain::machine::check(Completed, Failed).is_err());
        assert!(
            crate::domain::machine::check(Failure, Cleanup).is_err(),
            "handled first"
        );
    }

    #[test]
    fn each_phase_hands_on_fails_into_error_and_can_be_retried() {
        let mut state = Processing;
        let mut path = vec![state];
        for phase in Phase::ALL {
            assert!(crate::domain::machine::check(state, phase.state()).is_ok());
            assert!(crate::domain::machine::check(phase.state(), Error).is_ok());
            assert!(crate::domain::machine::check(RecoverableError, phase.state()).is_ok());
            assert!(crate::domain::machine::check(Failed, phase.state()).is_ok());
            state = phase.state();
            path.push(state);
        }
        assert!(crate::domain::machine::check(state, Cleanup).is_ok());
        assert!(crate::domain::machine::check(Cleanup, Completed).is_ok());
        assert_eq!(Phase::of(PostProcessing), Some(Phase::PostProcessing));
        assert_eq!(Phase::of(Cleanup), None);
        // Errors before any phase are failures at once.
        assert!(crate::domain::machine::check(Queued, Error).is_err());
        // Processing only hands on to the first phase: nothing fails there.
        assert!(crate::domain::machine::check(Processing, Failure).is_err());
        for s in ArchiveState::ALL {
            assert_eq!(s.as_str().parse::<ArchiveState>(), Ok(s));
        }
    }
}
