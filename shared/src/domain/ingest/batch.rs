//! A batch's states and the transitions between them. A batch is one submission: it spawns its
//! jobs, waits for every one to end, reports, and is cleaned up.

use crate::domain::machine::Cause;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchState {
    /// Submitted; its jobs are not created yet.
    Pending,
    /// Its collection is held: nothing happens until an operator releases it.
    Held,
    /// Its jobs exist and at least one has not ended.
    Processing,
    /// Every job ended: the report is being written and announced.
    Reporting,
    /// Reported with every job completed (or reported again after resumes).
    Completed,
    /// Reported with at least one job failed.
    Failed,
    /// An operator finished resuming failed jobs: a report of what changed is being written.
    UpdateReporting,
    /// Removed by an operator (failed or held) or by cleanup (completed).
    Deleted,
}

use BatchState::*;

crate::state_machine!(BatchState, "a batch", TRANSITIONS);

impl BatchState {
    pub const ALL: [BatchState; 8] = [
        Pending,
        Held,
        Processing,
        Reporting,
        Completed,
        Failed,
        UpdateReporting,
        Deleted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Pending => "pending",
            Held => "held",
            Processing => "processing",
            Reporting => "reporting",
            Completed => "completed",
            Failed => "failed",
            UpdateReporting => "update-reporting",
            Deleted => "deleted",
        }
    }

    /// Whether the dispatcher's tick lists batches in this state (to move them on, to clean them
    /// up, to release a hold): a failed or deleted batch is looked at only when an operator asks.
    pub fn is_scanned(self) -> bool {
        !matches!(self, Failed | Deleted)
    }
}

/// Every transition a batch may make, and who makes it.
pub const TRANSITIONS: [(BatchState, BatchState, Cause); 12] = [
    (Pending, Held, Cause::Automatic),
    (Pending, Processing, Cause::Automatic),
    (Held, Pending, Cause::Operator),
    (Held, Deleted, Cause::Operator),
    (Processing, Reporting, Cause::Automatic),
    (Reporting, Completed, Cause::Automatic),
    (Reporting, Failed, Cause::Automatic),
    (Failed, UpdateReporting, Cause::Operator),
    (Failed, Deleted, Cause::Operator),
    (UpdateReporting, Completed, Cause::Automatic),
    (UpdateReporting, Failed, Cause::Automatic),
    (Completed, Deleted, Cause::Automatic),
];

/// What a batch whose jobs have all ended reports as: failed if any job failed.
pub fn reported_state(failed_jobs: usize) -> BatchState {
    if failed_jobs == 0 {
        Completed
    } else {
        Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::machine::State;

    #[test]
    fn the_table_has_the_twelve_transitions_and_nothing_else() {
        let mut allowed = 0;
        for from in BatchState::ALL {
            for to in BatchState::ALL {
                if crate::domain::machine::check(from, to).is_ok() {
                    allowed += 1;
                }
            }
        }
        assert_eq!(allowed, 12);
        assert!(crate::domain::machine::check(Pending, Completed).is_err());
        assert!(crate::domain::machine::check(Completed, Failed).is_err());
        assert!(crate::domain::machine::check(Deleted, Pending).is_err());
    }

    #[test]
    fn only_operators_release_holds_ask_for_update_reports_and_delete_failed_or_held_batches() {
        let by_operator: Vec<_> = TRANSITIONS
            .iter()
            .filter(|(_, _, c)| *c == Cause::Operator)
            .map(|(f, t, _)| (*f, *t))
            .collect();
        assert_eq!(
            by_operator,
            vec![
                (Held, Pending),
                (Held, Deleted),
                (Failed, UpdateReporting),
                (Failed, Deleted)
            ]
        );
    }

    #[test]
    fn every_state_is_reachable_from_pending_and_only_deleted_is_final() {
        let mut seen = vec![Pending];
        let mut i = 0;
        while i < seen.len() {
            for next in seen[i].successors() {
                if !seen.contains(&next) {
                    seen.push(next);
                }
            }
            i += 1;
        }
        assert_eq!(seen.len(), BatchState::ALL.len());
        for s in BatchState::ALL {
            assert_eq!(s.successors().next().is_none(), s == Deleted, "{s}");
        }
    }

    #[test]
    fn names_read_back() {
        for s in BatchState::ALL {
            assert_eq!(s.as_str().parse::<BatchState>(), Ok(s));
        }
        assert_eq!(
            "UPDATE_REPORTING".parse::<BatchState>(),
            Ok(UpdateReporting)
        );
        assert_eq!(reported_state(0), Completed);
        assert_eq!(reported_state(2), Failed);
    }
}
