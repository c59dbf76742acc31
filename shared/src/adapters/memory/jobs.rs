use crate::domain::batch_event::JobStatus;
use crate::ports::{ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary};
use async_trait::async_trait;
use std::sync::Mutex;

/// In-memory job runner: records every submission; jobs stay in `initial_status` until
/// `set_status` moves them. DescribeJobs answers with the request echoed and no attempts, or with
/// the detail a test gave through `finish`.
#[derive(Debug)]
pub struct MemoryJobRunner {
    jobs: Mutex<Vec<(JobRequest, JobSummary)>>,
    details: Mutex<std::collections::HashMap<String, serde_json::Value>>,
    initial_status: JobStatus,
}

impl Default for MemoryJobRunner {
    fn default() -> Self {
        Self::new(JobStatus::Submitted)
    }
}

impl MemoryJobRunner {
    pub fn new(initial_status: JobStatus) -> Self {
        Self {
            jobs: Mutex::new(Vec::new()),
            details: Mutex::default(),
            initial_status,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(JobRequest, JobSummary)>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn submitted(&self) -> Vec<JobRequest> {
        self.lock().iter().map(|(r, _)| r.clone()).collect()
    }

    /// The job ended as `detail` (a JobDetail as DescribeJobs returns it) says.
    pub fn finish(&self, job_id: &str, status: JobStatus, detail: serde_json::Value) {
        self.set_status(job_id, status);
        self.details
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job_id.to_owned(), detail);
    }

    pub fn set_status(&self, job_id: &str, status: JobStatus) {
        for (_, s) in self.lock().iter_mut().filter(|(_, s)| s.job_id == job_id) {
            s.status = status;
        }
    }
}

#[async_trait]
impl JobRunner for MemoryJobRunner {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        let mut jobs = self.lock();
        let summary = JobSummary {
            job_id: format!("job-{}", jobs.len() + 1),
            job_name: request.job_name.clone(),
            status: self.initial_status,
        };
        jobs.push((request, summary.clone()));
        Ok(summary)
    }

    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        let mut active = ActiveJobs::default();
        for (_, s) in self.lock().iter().filter(|(_, s)| !s.status.is_terminal()) {
            if active.total >= stop_at {
                break;
            }
            *active
                .by_status
                .entry(s.status.as_str().to_owned())
                .or_default() += 1;
            active.total += 1;
        }
        Ok(active)
    }

    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        Ok(self
            .lock()
            .iter()
            .rev()
            .find(|(_, s)| s.job_name == job_name)
            .map(|(_, s)| s.clone()))
    }

    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        let Some((request, summary)) = self
            .lock()
            .iter()
            .find(|(_, s)| s.job_id == job_id)
            .cloned()
        else {
            return Ok(None);
        };
        let given = self
            .details
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job_id)
            .cloned();
        Ok(Some(match given {
            Some(detail) => JobDescription { summary, detail },
            None => JobDescription::of_request(summary, &request, "memory"),
        }))
    }
}
