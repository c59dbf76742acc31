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

    /// Batch refused the call for its rate (TooManyRequestsException, HTTP 429: "Too many
    /// requests", AWS Batch API Reference, "Common Errors"), past the SDK's own retries.
    pub fn is_throttle(&self) -> bool {
        !self.may_have_taken_effect
            && (self.message.contains("TooManyRequests") || self.message.contains("Throttl"))
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
    /// The job queue to submit to instead of the runner's own: a granule's last chance on the
    /// on-demand queue (`GRANARY_LAST_ATTEMPT_JOB_QUEUE`, `domain::attempt_budget`).
    pub queue: Option<String>,
    /// The memory to reserve instead of the job definition's, MiB: SubmitJob's
    /// `containerOverrides.resourceRequirements` MEMORY (`domain::memory`).
    pub memory_mib: Option<u32>,
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
    /// Child `index` (`child_id`) of array `parent` as its parent describes it, for a child
    /// Batch does not describe itself: the parent's status and reason, the child's id and index,
    /// no attempts of its own.
    pub fn child_of(parent: &JobDescription, child_id: &str, index: u32) -> Self {
        let mut detail = parent.detail.clone();
        detail["jobId"] = child_id.into();
        detail["attempts"] = serde_json::json!([]);
        detail["arrayProperties"] = serde_json::json!({ "index": index });
        if let Some(arn) = detail["jobArn"].as_str().map(|a| format!("{a}:{index}")) {
            detail["jobArn"] = arn.into();
        }
        Self {
            summary: JobSummary {
                job_id: child_id.to_owned(),
                ..parent.summary.clone()
            },
            detail,
        }
    }

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
        // Memory SubmitJob overrode: the container's MEMORY requirement says so.
        if let Some(mib) = request.memory_mib {
            detail["container"]["resourceRequirements"] =
                serde_json::json!([{ "type": "MEMORY", "value": mib.to_string() }]);
        }
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
    /// TerminateJob: a job not yet STARTING is cancelled, a STARTING or RUNNING one is
    /// terminated; either ends FAILED with `reason` as its `statusReason` (AWS Batch API
    /// Reference, TerminateJob; `reason` at most 1,024 characters). What it does to a job that
    /// has ended is not documented for TerminateJob (the bulk TerminateJobs treats jobs it cannot
    /// find as processed); granary's cancel asks only for jobs whose end it has not logged.
    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError>;
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

/// DescribeJobs for `job_ids`, answering for an array's child that Batch does not describe from
/// its parent: an array parent is SUBMITTED until its children exist ("Array jobs", AWS Batch
/// User Guide: the parent "is updated to PENDING when any child job is updated to RUNNABLE"),
/// and nothing promises `<parent>:<index>` is described before then. A missing child of an
/// unfinished parent is described as the parent's status (not ended); of a finished parent (one
/// cancelled before its children ran), as the parent ended, with its reason
/// ([`JobDescription::child_of`]); of a parent Batch does not know either, not at all.
pub async fn describe_with_parents(
    jobs: &dyn JobRunner,
    job_ids: &[String],
) -> Result<Vec<JobDescription>, JobRunnerError> {
    Parents::default().describe(jobs, job_ids).await
}

/// The array parents [`describe_with_parents`] has asked Batch about (`None`: Batch does not
/// describe it), kept so that several calls for one array's children — a pass over a window a
/// DescribeJobs page at a time — describe each parent once.
#[derive(Default)]
pub struct Parents(BTreeMap<String, Option<JobDescription>>);

impl Parents {
    /// [`describe_with_parents`], asking only about parents not asked about before.
    pub async fn describe(
        &mut self,
        jobs: &dyn JobRunner,
        job_ids: &[String],
    ) -> Result<Vec<JobDescription>, JobRunnerError> {
        let mut found = jobs.describe_many(job_ids).await?;
        let seen: std::collections::HashSet<&str> =
            found.iter().map(|d| d.summary.job_id.as_str()).collect();
        let missing: Vec<(&str, &str, u32)> = job_ids
            .iter()
            .filter(|id| !seen.contains(id.as_str()))
            .filter_map(|id| {
                let (parent, _) = id.rsplit_once(':')?;
                Some((
                    id.as_str(),
                    parent,
                    crate::domain::job_end::child_index(id)?,
                ))
            })
            .collect();
        if missing.is_empty() {
            return Ok(found);
        }
        let mut unasked: Vec<String> = missing
            .iter()
            .map(|(_, p, _)| (*p).to_owned())
            .filter(|p| !self.0.contains_key(p))
            .collect();
        unasked.sort();
        unasked.dedup();
        if !unasked.is_empty() {
            let mut described: BTreeMap<String, JobDescription> = jobs
                .describe_many(&unasked)
                .await?
                .into_iter()
                .map(|d| (d.summary.job_id.clone(), d))
                .collect();
            for parent in unasked {
                let description = described.remove(&parent);
                self.0.insert(parent, description);
            }
        }
        for (child, parent, index) in missing {
            if let Some(Some(parent)) = self.0.get(parent) {
                found.push(JobDescription::child_of(parent, child, index));
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryJobRunner;
    use crate::domain::job_end::{on_job_detail, JobEnd};

    /// Children Batch does not describe (not created yet, or forgotten) are answered from their
    /// parent: not ended while it is not, ended as it ended, and not at all without it.
    #[tokio::test]
    async fn a_child_batch_does_not_describe_is_answered_from_its_parent() {
        let jobs = MemoryJobRunner::new(JobStatus::Submitted);
        let request = crate::contracts::job::window_job_request(
            "w-a-w0-0123456789",
            None,
            "b",
            "claims/windows/inv/a.parquet/start=000000000000.json",
            Some("t0"),
            3,
            1,
        );
        let parent = jobs.submit(request).await.unwrap().job_id;
        let (c0, c1) = (format!("{parent}:0"), format!("{parent}:1"));
        jobs.forget(&c1);
        let ids = [c0.clone(), c1.clone()];
        let got = describe_with_parents(&jobs, &ids).await.unwrap();
        assert_eq!(got.len(), 2);
        let one = got.iter().find(|d| d.summary.job_id == c1).unwrap();
        assert_eq!(one.summary.status, JobStatus::Submitted);
        assert_eq!(one.detail["arrayProperties"]["index"], 1);
        // The parent cancelled before its children ran: the child ends as it did, with its reason.
        let mut ended = jobs.describe(&parent).await.unwrap().unwrap().detail;
        ended["status"] = "FAILED".into();
        ended["statusReason"] = "Canceled by an operator".into();
        jobs.finish(&parent, JobStatus::Failed, ended);
        let got = describe_with_parents(&jobs, &ids[1..]).await.unwrap();
        let detail: crate::domain::batch_event::JobDetail =
            serde_json::from_value(got[0].detail.clone()).unwrap();
        let JobEnd::WindowChild(child) = on_job_detail(&detail).unwrap() else {
            panic!("{detail:?}")
        };
        assert_eq!((child.index, child.job_id.as_str()), (1, c1.as_str()));
        assert!(
            child.classification.reason.contains("Canceled"),
            "{child:?}"
        );
        // Batch knows neither: nothing is said.
        jobs.forget(&parent);
        assert!(describe_with_parents(&jobs, &ids[1..])
            .await
            .unwrap()
            .is_empty());
    }
}
