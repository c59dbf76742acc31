//! AWS Batch's twin: SubmitJob, ListJobs, TerminateJob and DescribeJobs over the in-memory job
//! list.

use super::jobs::{child_of, job_id_of, Child, DetailAt, Job, Jobs};
use super::{ACCOUNT, REGION};
use anyhow::Result;
use async_trait::async_trait;
use granary::adapters::memory::ScratchFile;
use granary::domain::batch_event::JobStatus;
use granary::ports::{
    ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// AWS Batch as the emulator behaves: a job is finished as soon as it is submitted (the
/// [`crate::simulator::BatchSimulator`] decides how it ended and emits the events). Lookups by id
/// and by name are indexed, so a 100,000-job campaign does not slow down as it grows.
pub struct InMemoryBatch {
    pub(super) jobs: Mutex<Jobs>,
    pub(super) job_queue_arn: String,
    pub(super) job_definition_arn: String,
    /// The job definition's retryStrategy, as DescribeJobs would echo it.
    pub(super) retry_strategy: Value,
    /// Where settled details go, when the twin has one.
    pub(super) scratch: Option<ScratchFile>,
    /// How long after SubmitJob ListJobs starts to show a job (see [`InMemoryBatch::listing_lag`]).
    pub(super) listing_lag_ms: i64,
    /// Batch's SubmitJob quota, when enforced ([`InMemoryBatch::submit_limit`]).
    pub(super) submit_limit: Option<granary::adapters::paced::RateLimit>,
    /// SubmitJob calls refused for the quota.
    pub(super) refused_submits: std::sync::atomic::AtomicU64,
    /// What status SubmitJob gives a job until the simulator settles it: SUCCEEDED as the
    /// emulator's (which finishes jobs inside SubmitJob), or RUNNABLE when jobs take time
    /// ([`InMemoryBatch::queued_until_settled`]).
    pub(super) submitted_as: JobStatus,
}

/// A Batch resource's ARN from its name (or its ARN as given).
pub(super) fn arn(kind: &str, name: &str, revision: &str) -> String {
    if name.starts_with("arn:") {
        name.to_owned()
    } else {
        format!("arn:aws:batch:{REGION}:{ACCOUNT}:{kind}/{name}{revision}")
    }
}

impl InMemoryBatch {
    /// A Batch with one job queue and definition, each named or given as an ARN.
    pub fn new(job_queue: &str, job_definition: &str, retry_strategy: Value) -> Self {
        Self {
            jobs: Mutex::new(Jobs::default()),
            job_queue_arn: arn("job-queue", job_queue, ""),
            job_definition_arn: arn("job-definition", job_definition, ":1"),
            retry_strategy,
            scratch: None,
            listing_lag_ms: 0,
            submit_limit: None,
            refused_submits: std::sync::atomic::AtomicU64::new(0),
            submitted_as: JobStatus::Succeeded,
        }
    }

    /// The same twin, whose jobs are RUNNABLE from SubmitJob until the simulator settles their
    /// end, as Batch's are: ListJobs lists them active, and the feeder's count of active jobs
    /// sees them (a simulation whose jobs take time, `fault_plan::BatchTiming`).
    pub fn queued_until_settled(self) -> Self {
        Self {
            submitted_as: JobStatus::Runnable,
            ..self
        }
    }

    /// The same twin, whose ListJobs (by name, and counting active jobs) shows a job only `lag`
    /// after its SubmitJob: the Batch API reference promises no read-after-write for ListJobs.
    /// granary assumes a job is listed within a claim's lease; a lag shorter than the campaign's
    /// lease keeps the twin inside that assumption while no lookup sees a job at once.
    /// Refuses SubmitJob past `per_second` calls in any second, as Batch refuses an account's
    /// calls past its quota (50 a second; AWS Batch user guide, "AWS Batch service quotas").
    pub fn submit_limit(self, per_second: Option<usize>) -> Self {
        Self {
            submit_limit: per_second.map(granary::adapters::paced::RateLimit::per_second),
            ..self
        }
    }

    /// SubmitJob calls Batch accepted (an array once, however many children it has).
    pub fn accepted_submits(&self) -> u64 {
        self.lock().all.len() as u64
    }

    /// Array jobs among them.
    pub fn array_jobs(&self) -> u64 {
        self.lock()
            .all
            .iter()
            .filter(|j| !j.children.is_empty())
            .count() as u64
    }

    /// SubmitJob calls refused for the quota so far.
    pub fn refused_submits(&self) -> u64 {
        self.refused_submits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn listing_lag(self, lag: std::time::Duration) -> Self {
        Self {
            listing_lag_ms: i64::try_from(lag.as_millis()).unwrap_or(i64::MAX),
            ..self
        }
    }

    pub(super) fn listed(&self, job: &Job) -> bool {
        granary::clock::now().timestamp_millis() - job.created_at_ms >= self.listing_lag_ms
    }

    /// The same twin keeping the settled jobs' details in `scratch` (an empty file open for
    /// reading and writing), not in memory: a million jobs' details are gigabytes.
    pub fn spilling(self, scratch: std::fs::File) -> Self {
        Self {
            scratch: Some(ScratchFile::new(scratch)),
            ..self
        }
    }

    pub fn job_queue_arn(&self) -> &str {
        &self.job_queue_arn
    }

    /// Job names submitted more than once: each is a (granule, attempt) that ran twice.
    pub fn names_submitted_twice(&self) -> Vec<String> {
        let jobs = self.lock();
        let mut per_name: HashMap<&str, usize> = HashMap::new();
        for j in &jobs.all {
            *per_name.entry(&j.name).or_default() += 1;
        }
        let mut twice: Vec<String> = per_name
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(name, _)| name.to_owned())
            .collect();
        twice.sort();
        twice
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Jobs> {
        // A poisoned lock only means another caller panicked; the job list itself is whole.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl JobRunner for InMemoryBatch {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        if self.submit_limit.as_ref().is_some_and(|l| !l.admit()) {
            self.refused_submits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(granary::adapters::paced::too_many_requests());
        }
        if let Some(queue) = request.queue.as_deref() {
            // This Batch has one job queue: a job for another one is refused, as Batch refuses
            // a queue it does not know (ClientException), never put on the wrong queue.
            if arn("job-queue", queue, "") != self.job_queue_arn {
                return Err(JobRunnerError::refused(format!(
                    "ClientException: job queue {queue} not found (the local Batch has only {})",
                    self.job_queue_arn
                )));
            }
        }
        let size = request.array_size.unwrap_or(0) as usize;
        if request.array_size.is_some() && !granary::domain::window::ARRAY_SIZES.contains(&size) {
            // Batch's answer to an array size outside 2..=10,000 (a ClientException): refused.
            return Err(JobRunnerError::refused(format!(
                "ClientException: array size {size} is outside 2..10000"
            )));
        }
        let mut jobs = self.lock();
        let n = jobs.all.len();
        let name: Arc<str> = request.job_name.as_str().into();
        let summary = JobSummary {
            job_id: job_id_of(n),
            job_name: request.job_name.clone(),
            status: self.submitted_as,
        };
        jobs.by_name.insert(name.clone(), n);
        if !summary.status.is_terminal() {
            jobs.active.insert(n);
        }
        jobs.all.push(Job {
            name,
            status: summary.status,
            request: Some(Box::new(request)),
            created_at_ms: granary::clock::now().timestamp_millis(),
            settled: None,
            children: vec![Child::queued(summary.status); size].into_boxed_slice(),
        });
        Ok(summary)
    }

    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        let mut active = ActiveJobs::default();
        let jobs = self.lock();
        for job in jobs.active.iter().filter_map(|&i| jobs.all.get(i)) {
            if active.total >= stop_at {
                break;
            }
            if !job.status.is_terminal() && self.listed(job) {
                *active
                    .by_status
                    .entry(job.status.as_str().to_owned())
                    .or_default() += 1;
                active.total += 1;
            }
        }
        Ok(active)
    }

    /// TerminateJob of a job this Batch gave (an array's child included): accepted; what it
    /// does to the job is the simulator's to play (`simulator::Terminations`), as the job's end
    /// is. An id it never gave is Batch's ClientException.
    async fn terminate(&self, job_id: &str, _reason: &str) -> Result<(), JobRunnerError> {
        let jobs = self.lock();
        let (parent_id, child) = match child_of(job_id) {
            Some((parent, i)) => (parent, Some(i)),
            None => (job_id, None),
        };
        let known = jobs
            .get(parent_id)
            .is_some_and(|(_, job)| child.is_none_or(|i| i < job.children.len()));
        if known {
            Ok(())
        } else {
            Err(JobRunnerError::refused(format!(
                "ClientException: job {job_id} not found"
            )))
        }
    }

    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        let jobs = self.lock();
        Ok(jobs
            .by_name
            .get(job_name)
            .filter(|&&i| jobs.all.get(i).is_some_and(|j| self.listed(j)))
            .and_then(|&i| jobs.summary(i)))
    }

    /// DescribeJobs: the detail the simulator settled the job with; before that, the job is
    /// RUNNABLE (queued, its fate not decided yet).
    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        let jobs = self.lock();
        // An array's child, `<parent>:<index>`: DescribeJobs takes child ids too.
        let (parent_id, child) = match child_of(job_id) {
            Some((parent, i)) => (parent, Some(i)),
            None => (job_id, None),
        };
        let Some((index, job)) = jobs.get(parent_id) else {
            return Ok(None);
        };
        let Some(mut summary) = jobs.summary(index) else {
            return Ok(None);
        };
        let settled = match child {
            Some(i) => {
                let Some(c) = job.children.get(i) else {
                    return Ok(None);
                };
                summary.job_id = job_id.to_owned();
                summary.status = c.status();
                c.settled()
            }
            None => job.settled,
        };
        Ok(Some(match (settled, &job.request) {
            (Some(DetailAt(place)), _) => {
                let unreadable = |e: &dyn std::fmt::Display| {
                    JobRunnerError::refused(format!("the twin's detail of {job_id}: {e}"))
                };
                let text = match &self.scratch {
                    Some(scratch) => std::borrow::Cow::Owned(
                        scratch.read_framed(place).map_err(|e| unreadable(&e))?,
                    ),
                    None => std::borrow::Cow::Borrowed(
                        usize::try_from(place)
                            .ok()
                            .and_then(|i| jobs.held.get(i))
                            .map(|bytes| &bytes[..])
                            .ok_or_else(|| unreadable(&"no detail held there"))?,
                    ),
                };
                JobDescription {
                    summary,
                    detail: serde_json::from_slice(&text).map_err(|e| unreadable(&e))?,
                }
            }
            (None, Some(request)) => JobDescription::of_request(
                JobSummary {
                    status: JobStatus::Runnable,
                    ..summary
                },
                request,
                &self.job_queue_arn,
            ),
            (None, None) => return Ok(None),
        }))
    }
}
