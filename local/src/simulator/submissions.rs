//! What the simulator learns from the handlers' own calls: the jobs SubmitJob accepted and the
//! ones TerminateJob was called for, told by a [`JobRunner`] standing in front of Batch.

use anyhow::Result;
use async_trait::async_trait;
use granary::ports::{ActiveJobs, JobRequest, JobRunner, JobRunnerError, JobSummary};
use std::sync::{Arc, Mutex};

/// The ids SubmitJob returned, in order, not yet seen by the simulator.
///
/// Real Batch knows every job it accepted; the simulator learns them the same way, from the
/// submissions, instead of listing every finished job on each tick. moto's ListJobs has no
/// pagination and returns the whole job list on every call, so listing made a tick cost
/// O(jobs so far) and a campaign quadratic. A full listing is still taken before the runtime
/// declares a campaign settled ([`BatchSimulator::sweep`](super::BatchSimulator::sweep)), so a
/// job submitted some other way is not missed.
#[derive(Debug, Default, Clone)]
pub struct Submissions(Arc<Mutex<Vec<String>>>);

impl Submissions {
    pub(super) fn push(&self, job_id: String) {
        // A poisoned lock only means another submitter panicked; the list itself is whole.
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(job_id);
    }

    pub(super) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Jobs TerminateJob was called for, with its reason, that the simulator has not played yet.
/// Real Batch cancels a job not yet STARTING and terminates a running one, either way FAILED
/// with that reason (AWS Batch API Reference, TerminateJob). With instant jobs the simulator
/// plays a job's whole life at the first tick after its submission, so a termination it hears
/// of before then ends the job cancelled, and one after changes nothing (the job had ended);
/// with jobs that take time, a job whose end is still to come ends at the next tick, cancelled
/// (no attempt listed, though a running one would list its attempt).
#[derive(Debug, Default, Clone)]
pub struct Terminations(Arc<Mutex<TerminationsHeld>>);

#[derive(Debug, Default)]
pub(super) struct TerminationsHeld {
    /// Each terminated job's reason, until its end is played.
    reasons: std::collections::HashMap<String, String>,
    /// Jobs terminated since the simulator last looked: a job whose end is still to come
    /// (jobs that take time) ends now, as TerminateJob ends it, not at its drawn end.
    fresh: Vec<String>,
}

impl Terminations {
    fn lock(&self) -> std::sync::MutexGuard<'_, TerminationsHeld> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, job_id: &str, reason: &str) {
        let mut held = self.lock();
        if !held.reasons.contains_key(job_id) {
            held.reasons.insert(job_id.to_owned(), reason.to_owned());
            held.fresh.push(job_id.to_owned());
        }
    }

    pub(super) fn take(&self, job_id: &str) -> Option<String> {
        self.lock().reasons.remove(job_id)
    }

    /// The jobs terminated since the last call.
    pub(super) fn fresh(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().fresh)
    }
}

/// A [`JobRunner`] that tells the simulator about every job it submits and terminates.
pub struct SubmissionTap {
    pub(super) inner: Arc<dyn JobRunner>,
    pub(super) submissions: Submissions,
    pub(super) terminations: Terminations,
}

#[async_trait]
impl JobRunner for SubmissionTap {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        let job = self.inner.submit(request).await?;
        self.submissions.push(job.job_id.clone());
        Ok(job)
    }
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        self.inner.count_active(stop_at).await
    }
    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError> {
        self.inner.terminate(job_id, reason).await?;
        self.terminations.insert(job_id, reason);
        Ok(())
    }
    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        self.inner.find_by_name(job_name).await
    }
    async fn describe(
        &self,
        job_id: &str,
    ) -> Result<Option<granary::ports::JobDescription>, JobRunnerError> {
        self.inner.describe(job_id).await
    }
    async fn describe_many(
        &self,
        job_ids: &[String],
    ) -> Result<Vec<granary::ports::JobDescription>, JobRunnerError> {
        self.inner.describe_many(job_ids).await
    }
}
