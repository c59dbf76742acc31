//! The ports of a section a function does not read (`config::Function::sections`): every call is
//! refused with the variable that would configure it, so a function that reaches for a port it
//! was not given says so plainly instead of calling AWS with an empty name.

use crate::ports::{
    ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary, OutgoingMessage,
    Queue, QueueDepth, QueueError, ReceivedMessage,
};
use async_trait::async_trait;

/// A job runner for a reader of configuration without the Jobs section.
pub struct UnsetJobRunner;

impl UnsetJobRunner {
    fn refuse<T>(&self) -> Result<T, JobRunnerError> {
        Err(JobRunnerError::refused(
            "no job queue: this function does not read the Jobs section (GRANARY_JOB_QUEUE, GRANARY_JOB_DEFINITION)",
        ))
    }
}

#[async_trait]
impl JobRunner for UnsetJobRunner {
    async fn submit(&self, _: JobRequest) -> Result<JobSummary, JobRunnerError> {
        self.refuse()
    }
    async fn count_active(&self, _: u64) -> Result<ActiveJobs, JobRunnerError> {
        self.refuse()
    }
    async fn find_by_name(&self, _: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        self.refuse()
    }
    async fn terminate(&self, _: &str, _: &str) -> Result<(), JobRunnerError> {
        self.refuse()
    }
    async fn describe(&self, _: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        self.refuse()
    }
}

/// A queue for a reader of configuration without the Queues section; `var` names the variable.
pub struct UnsetQueue {
    pub var: &'static str,
}

impl UnsetQueue {
    fn refuse<T>(&self) -> Result<T, QueueError> {
        Err(QueueError::new(
            self.var,
            format!(
                "not configured: this function does not read the Queues section ({})",
                self.var
            ),
        ))
    }
}

#[async_trait]
impl Queue for UnsetQueue {
    fn name(&self) -> &str {
        self.var
    }
    async fn send(&self, _: OutgoingMessage) -> Result<(), QueueError> {
        self.refuse()
    }
    async fn receive(&self, _: u32, _: u32, _: u32) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.refuse()
    }
    async fn delete(&self, _: &str) -> Result<(), QueueError> {
        self.refuse()
    }
    async fn release(&self, _: &str) -> Result<(), QueueError> {
        self.refuse()
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.refuse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_call_is_refused_naming_the_variable() {
        let q = UnsetQueue {
            var: "GRANARY_RETRY_QUEUE_URL",
        };
        let e = q.send(OutgoingMessage::new("x")).await.unwrap_err();
        assert!(e.to_string().contains("GRANARY_RETRY_QUEUE_URL"), "{e}");
        let e = UnsetJobRunner.count_active(1).await.unwrap_err();
        assert!(e.message.contains("GRANARY_JOB_QUEUE") && !e.may_have_taken_effect);
    }
}
