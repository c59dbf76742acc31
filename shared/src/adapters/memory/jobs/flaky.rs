//! A job runner whose calls fail at a given rate: the twins' throttling.

use super::*;

/// A Batch that fails SubmitJob the two ways that matter for exactly-once: it refuses the first
/// `refusals` calls (throttled: nothing created), and with `lose_answers` it creates every job
/// and then loses the answer (a read timeout: created, but the caller cannot know).
pub struct FlakyJobRunner {
    pub inner: MemoryJobRunner,
    pub refusals: std::sync::atomic::AtomicU32,
    pub lose_answers: bool,
}

impl FlakyJobRunner {
    /// Refuses the first `n` submissions, then creates jobs as asked.
    pub fn refusing(n: u32) -> Self {
        Self {
            inner: MemoryJobRunner::default(),
            refusals: n.into(),
            lose_answers: false,
        }
    }

    /// Creates every job and loses every answer.
    pub fn losing_answers() -> Self {
        Self {
            lose_answers: true,
            ..Self::refusing(0)
        }
    }
}

#[async_trait]
impl JobRunner for FlakyJobRunner {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        use std::sync::atomic::Ordering;
        if self.lose_answers {
            self.inner.submit(request).await?;
            return Err(JobRunnerError::ambiguous("read timeout"));
        }
        if self
            .refusals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(JobRunnerError::refused("TooManyRequestsException"));
        }
        self.inner.submit(request).await
    }
    async fn count_active(&self, n: u64) -> Result<ActiveJobs, JobRunnerError> {
        self.inner.count_active(n).await
    }
    async fn terminate(&self, id: &str, reason: &str) -> Result<(), JobRunnerError> {
        self.inner.terminate(id, reason).await
    }
    async fn find_by_name(&self, name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        self.inner.find_by_name(name).await
    }
    async fn describe(&self, id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        self.inner.describe(id).await
    }
}
