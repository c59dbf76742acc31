//! The compute service (AWS Batch), bound to granary's job queue and job definition.

use crate::domain::batch_event::JobStatus;
use async_trait::async_trait;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
#[error("job runner: {message}")]
pub struct JobRunnerError {
    pub message: String,
    /// Whether the call may have taken effect although it failed: the request may have reached
    /// the service and only its answer was lost (a timeout, a dropped connection, a 5xx). A
    /// rejected call (4xx, throttling included, or one never sent) did not take effect. Decides
    /// whether a failed SubmitJob may be resubmitted at once or only after a lookup by name.
    pub may_have_taken_effect: bool,
    /// The SDK's error itself, when there is one.
    #[source]
    pub source: Option<super::BoxError>,
}

impl JobRunnerError {
    /// The call was refused or never sent: nothing happened.
    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            may_have_taken_effect: false,
            source: None,
        }
    }

    /// The same error with the underlying error kept as its source.
    pub fn with_source(self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            source: Some(Box::new(e)),
            ..self
        }
    }

    /// The call's answer is unknown: it may have happened.
    pub fn ambiguous(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            may_have_taken_effect: true,
            source: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    pub job_name: String,
    /// Container environment overrides (GRANULE_ID, ATTEMPT).
    pub environment: BTreeMap<String, String>,
    /// Job parameters, visible in DescribeJobs and in the state-change event.
    pub parameters: BTreeMap<String, String>,
    /// An array job of this many children (2 to 10,000: AWS Batch user guide, "Array jobs"),
    /// each `<job id>:<index>`; `None` for a single job.
    pub array_size: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    pub job_id: String,
    pub job_name: String,
    pub status: JobStatus,
}

/// What DescribeJobs says about one job: its summary, and its whole JobDetail as JSON in the shape
/// the job-state-change event's `detail` has (the same fields; the monitor reads either).
#[derive(Debug, Clone, PartialEq)]
pub struct JobDescription {
    pub summary: JobSummary,
    pub detail: serde_json::Value,
}

impl JobDescription {
    /// What Batch would describe for a job known only by its request and status: no attempts
    /// yet, the request's environment and parameters echoed (the in-memory twins start here).
    pub fn of_request(summary: JobSummary, request: &JobRequest, job_queue: &str) -> Self {
        let environment: Vec<serde_json::Value> = request
            .environment
            .iter()
            .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
            .collect();
        let mut detail = serde_json::json!({
            "jobId": summary.job_id,
            "jobName": summary.job_name,
            "jobQueue": job_queue,
            "status": summary.status.as_str(),
            "attempts": [],
            "parameters": request.parameters,
            "container": { "environment": environment },
        });
        // An array's parent has its size; each child (`<parent>:<index>`) its index.
        if let Some(size) = request.array_size {
            detail["arrayProperties"] = match crate::domain::job_end::child_index(&summary.job_id) {
                Some(index) => serde_json::json!({ "index": index }),
                None => serde_json::json!({ "size": size }),
            };
        }
        Self { summary, detail }
    }
}

/// Counts of unfinished jobs by status. Counting stops early at the caller's limit, so `total` is
/// exact below it and "at least the limit" at it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ActiveJobs {
    pub by_status: BTreeMap<String, u64>,
    pub total: u64,
    /// When the oldest RUNNABLE job counted was submitted (epoch milliseconds, ListJobs'
    /// `createdAt`): how long the queue's head has been waiting for a place to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_runnable_created_ms: Option<i64>,
}

impl ActiveJobs {
    /// Counts a RUNNABLE job submitted at `created_ms`.
    pub fn saw_runnable_created(&mut self, created_ms: i64) {
        self.oldest_runnable_created_ms = Some(
            self.oldest_runnable_created_ms
                .map_or(created_ms, |o| o.min(created_ms)),
        );
    }
}

#[async_trait]
pub trait JobRunner: Send + Sync {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError>;
    /// Jobs in SUBMITTED..RUNNING, counting until `stop_at` is reached.
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError>;
    /// The newest job with exactly this name, in any status.
    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError>;
    /// The job with this id, or `None` when Batch no longer (or never) knew it.
    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError>;
    /// The jobs with these ids that Batch knows, in any order. DescribeJobs takes up to
    /// [`DESCRIBE_BATCH`] ids a call (AWS Batch API reference, DescribeJobs: "A list of up to 100
    /// job IDs"); adapters that can ask for many at once override this one-by-one default.
    async fn describe_many(
        &self,
        job_ids: &[String],
    ) -> Result<Vec<JobDescription>, JobRunnerError> {
        let mut out = Vec::with_capacity(job_ids.len());
        for id in job_ids {
            out.extend(self.describe(id).await?);
        }
        Ok(out)
    }
}

/// How many job ids one DescribeJobs call takes.
pub const DESCRIBE_BATCH: usize = 100;
