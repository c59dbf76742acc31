//! A job's states and the transitions between them: one object of a batch, from pending to
//! completed (or failed, and resumed by an operator from where it failed).

use crate::domain::machine::Cause;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Pending,
    /// Its collection or batch is held: an operator releases it.
    Held,
    /// HEAD of every file: how much space it needs (never fails).
    Estimating,
    /// Waiting for room: the bytes in flight would exceed the configured capacity.
    Provisioning,
    /// GET of every file into S3, digests checked.
    Downloading,
    /// The depositor's own processing container runs on AWS Batch (when one is configured).
    Processing,
    /// Seed 004's processing step: the identifier (kept, looked up or minted), the ERC and
    /// Dublin Core files, the object stored with its storage manifest, the store's answer checked.
    Storing,
    /// The catalog record of what was stored is written.
    Recording,
    /// The job's event is announced (and the callback called).
    Notify,
    Completed,
    Failed,
    Deleted,
}

use JobState::*;

crate::state_machine!(JobState, "a job", TRANSITIONS);

impl JobState {
    pub const ALL: [JobState; 12] = [
        Pending,
        Held,
        Estimating,
        Provisioning,
        Downloading,
        Processing,
        Storing,
        Recording,
        Notify,
        Completed,
        Failed,
        Deleted,
    ];

    /// The steps a job works through, in order.
    pub const STEPS: [JobState; 7] = [
        Estimating,
        Provisioning,
        Downloading,
        Processing,
        Storing,
        Recording,
        Notify,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Pending => "pending",
            Held => "held",
            Estimating => "estimating",
            Provisioning => "provisioning",
            Downloading => "downloading",
            Processing => "processing",
            Storing => "storing",
            Recording => "recording",
            Notify => "notify",
            Completed => "completed",
            Failed => "failed",
            Deleted => "deleted",
        }
    }

    /// Completed or failed: the job counts as ended for its batch.
    pub fn has_ended(self) -> bool {
        matches!(self, Completed | Failed)
    }

    /// The step after this one, for a job moving on.
    pub fn next_step(self) -> Option<JobState> {
        match self {
            Pending => Some(Estimating),
            Estimating => Some(Provisioning),
            Provisioning => Some(Downloading),
            Downloading => Some(Processing),
            Processing => Some(Storing),
            Storing => Some(Recording),
            Recording => Some(Notify),
            Notify => Some(Completed),
            _ => None,
        }
    }
}

/// Every transition a job may make, and who makes it.
pub const TRANSITIONS: [(JobState, JobState, Cause); 24] = [
    // A corrupt manifest or a digest that cannot match: no retry can help.
    (Pending, Failed, Cause::Automatic),
    (Pending, Held, Cause::Automatic),
    (Pending, Estimating, Cause::Automatic),
    (Held, Pending, Cause::Operator),
    (Held, Deleted, Cause::Operator),
    (Estimating, Provisioning, Cause::Automatic),
    (Provisioning, Downloading, Cause::Automatic),
    (Downloading, Processing, Cause::Automatic),
    (Downloading, Failed, Cause::Automatic),
    (Processing, Storing, Cause::Automatic),
    (Processing, Failed, Cause::Automatic),
    // Minting or storage failed (or a local id names another identifier).
    (Storing, Recording, Cause::Automatic),
    (Storing, Failed, Cause::Automatic),
    (Recording, Notify, Cause::Automatic),
    (Recording, Failed, Cause::Automatic),
    (Notify, Completed, Cause::Automatic),
    (Notify, Failed, Cause::Automatic),
    // Resumes: back to the step after the last one that succeeded.
    (Failed, Downloading, Cause::Operator),
    (Failed, Processing, Cause::Operator),
    (Failed, Storing, Cause::Operator),
    (Failed, Recording, Cause::Operator),
    (Failed, Notify, Cause::Operator),
    (Failed, Deleted, Cause::Operator),
    // Cleanup of a completed batch.
    (Completed, Deleted, Cause::Automatic),
];

/// `last_successful_status` after `from` → `to`: a step that hands on to the next step has
/// succeeded; a failure, a hold or a resume keeps the value it had.
pub fn last_successful_after(
    from: JobState,
    to: JobState,
    before: Option<JobState>,
) -> Option<JobState> {
    if JobState::STEPS.contains(&from) && from.next_step() == Some(to) {
        Some(from)
    } else {
        before
    }
}

/// Where a failed job resumes: the step after the last one that succeeded. `None` when it failed
/// before any step succeeded (a corrupt manifest, a digest mismatch): only a new submission helps.
/// A job that failed estimating or provisioning resumes downloading: those two never fail.
pub fn resume_target(last_successful: Option<JobState>) -> Option<JobState> {
    match last_successful? {
        Estimating | Provisioning => Some(Downloading),
        Downloading => Some(Processing),
        Processing => Some(Storing),
        Storing => Some(Recording),
        Recording => Some(Notify),
        _ => None,
    }
}

/// The batch's own index of its jobs: whether the job still counts against the batch ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchGroup {
    Processing,
    Completed,
    Failed,
}

impl BatchGroup {
    pub const ALL: [BatchGroup; 3] = [
        BatchGroup::Processing,
        BatchGroup::Completed,
        BatchGroup::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchGroup::Processing => "batch-processing",
            BatchGroup::Completed => "batch-completed",
            BatchGroup::Failed => "batch-failed",
        }
    }

    /// The group a job in `state` belongs to; `None` once deleted.
    pub fn of(state: JobState) -> Option<BatchGroup> {
        match state {
            Completed => Some(BatchGroup::Completed),
            Failed => Some(BatchGroup::Failed),
            Deleted => None,
            _ => Some(BatchGroup::Processing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_twenty_four_transitions_and_nothing_else() {
        let allowed = JobState::ALL
            .iter()
            .flat_map(|f| JobState::ALL.iter().map(move |t| (*f, *t)))
            .filter(|(f, t)| crate::domain::machine::check(*f, *t).is_ok())
            .count();
        assert_eq!(allowed, 24);
        assert!(crate::domain::machine::check(Pending, Downloading).is_err());
        assert!(crate::domain::machine::check(Failed, Estimating).is_err());
        assert!(crate::domain::machine::check(Completed, Failed).is_err());
    }

    #[test]
    fn every_step_hands_on_to_the_next_and_every_step_after_provisioning_may_fail() {
        for step in JobState::STEPS {
            let next = step.next_step().unwrap();
            assert!(
                crate::domain::machine::check(step, next).is_ok(),
                "{step} → {next}"
            );
        }
        // Estimating never fails; provisioning waits instead of failing.
        for (step, fails) in [
            (Estimating, false),
            (Provisioning, false),
            (Downloading, true),
            (Processing, true),
            (Storing, true),
            (Recording, true),
            (Notify, true),
        ] {
            assert_eq!(
                crate::domain::machine::check(step, Failed).is_ok(),
                fails,
                "{step}"
            );
        }
    }

    #[test]
    fn last_successful_status_follows_the_seed() {
        let mut last = None;
        let mut state = Pending;
        for to in [Estimating, Provisioning, Downloading, Processing] {
            last = last_successful_after(state, to, last);
            state = to;
        }
        assert_eq!(last, Some(Downloading));
        // A failure keeps it; the resume goes to the step after it and keeps it too.
        last = last_successful_after(Processing, Failed, last);
        assert_eq!(last, Some(Downloading));
        let back = resume_target(last).unwrap();
        assert_eq!(back, Processing);
        assert!(crate::domain::machine::check(Failed, back).is_ok());
        assert_eq!(last_successful_after(Failed, back, last), Some(Downloading));
        assert_eq!(last_successful_after(Pending, Estimating, None), None);
    }

    #[test]
    fn every_resume_target_is_in_the_table_and_an_early_failure_has_none() {
        assert_eq!(resume_target(None), None);
        for last in JobState::STEPS {
            if let Some(to) = resume_target(Some(last)) {
                assert!(
                    crate::domain::machine::check(Failed, to).is_ok(),
                    "{last} → {to}"
                );
            }
        }
        assert_eq!(resume_target(Some(Recording)), Some(Notify));
        assert_eq!(
            resume_target(Some(Notify)),
            None,
            "notify succeeded: the job completed"
        );
    }

    #[test]
    fn batch_groups_and_names() {
        assert_eq!(BatchGroup::of(Held), Some(BatchGroup::Processing));
        assert_eq!(BatchGroup::of(Failed), Some(BatchGroup::Failed));
        assert_eq!(BatchGroup::of(Deleted), None);
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
    }
}
