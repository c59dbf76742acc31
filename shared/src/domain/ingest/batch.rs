//! A batch's states and the transitions between them. A batch is one submission: it spawns its
//! jobs, waits for every one to end, reports, and is cleaned up.

use serde::{Deserialize, Serialize};
use std::fmt;

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

    pub fn successors(self) -> impl Iterator<Item = BatchState> {
        TRANSITIONS
            .iter()
            .filter(move |(from, _, _)| *from == self)
            .map(|(_, to, _)| *to)
    }
}

impl fmt::Display for BatchState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BatchState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == wanted)
            .ok_or_else(|| format!("{s:?} is not a batch state"))
    }
}

/// Who causes a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A handler, on its own.
    Automatic,
    /// An operator's command.
    Operator,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a batch cannot go from {from} to {to}")]
pub struct IllegalBatchTransition {
    pub from: BatchState,
    pub to: BatchState,
}

/// Refuses any change the table does not list.
pub fn check_batch_transition(
    from: BatchState,
    to: BatchState,
) -> Result<(), IllegalBatchTransition> {
    if TRANSITIONS.iter().any(|(f, t, _)| *f == from && *t == to) {
        Ok(())
    } else {
        Err(IllegalBatchTransition { from, to })
    }
}

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

    #[test]
    fn the_table_has_the_twelve_transitions_and_nothing_else() {
        let mut allowed = 0;
        for from in BatchState::ALL {
            for to in BatchState::ALL {
                if check_batch_transition(from, to).is_ok() {
                    allowed += 1;
                }
            }
        }
        assert_eq!(allowed, 12);
        assert!(check_batch_transition(Pending, Completed).is_err());
        assert!(check_batch_transition(Completed, Failed).is_err());
        assert!(check_batch_transition(Deleted, Pending).is_err());
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
