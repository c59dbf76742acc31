use crate::domain::batch_event::JobStatus;
use crate::ports::{ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary};
use async_trait::async_trait;
use std::sync::Mutex;

mod flaky;
pub use flaky::FlakyJobRunner;

/// How a job ends, for [`MemoryJobRunner::end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Succeeded,
    /// The container exited with this code (non-zero: the application failed).
    Exited(i32),
    /// The instance was reclaimed (Spot): another attempt may succeed.
    SpotReclaimed,
    /// The container used more memory than it reserved (`domain::memory`).
    OutOfMemory,
}

/// The container reason of a task ECS stopped for using more memory than it reserved (Amazon ECS
/// developer guide, "Troubleshooting Amazon ECS OutOfMemoryError errors").
pub const OUT_OF_MEMORY_REASON: &str = "OutOfMemoryError: Container killed due to memory usage";

/// The `statusReason` Batch gives a job whose Spot instance was reclaimed.
pub const SPOT_RECLAIM: &str = "Host EC2 (instance i-0123456789abcdef0) terminated.";

/// The EventBridge event Batch sends for a job that reached `detail`'s status.
pub fn job_state_change(detail: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "version": "0", "id": format!("event-{}", detail["jobId"].as_str().unwrap_or("")),
        "detail-type": crate::domain::batch_event::DETAIL_TYPE,
        "source": crate::domain::batch_event::SOURCE,
        "account": "000000000000", "time": crate::clock::now().to_rfc3339(),
        "region": "us-east-1", "resources": [], "detail": detail,
    })
}

/// In-memory job runner: records every submission; jobs stay in `initial_status` until
/// `set_status` moves them. DescribeJobs answers with the request echoed and no attempts, or with
/// the detail a test gave through `finish`.
#[derive(Debug)]
pub struct MemoryJobRunner {
    jobs: Mutex<Vec<(JobRequest, JobSummary)>>,
    details: Mutex<std::collections::HashMap<String, serde_json::Value>>,
    /// Jobs Batch has purged: finished jobs are kept "for at least 7 days" (AWS Batch user
    /// guide, "Job states"), then DescribeJobs and ListJobs no longer return them.
    forgotten: Mutex<std::collections::HashSet<String>>,
    /// Jobs ListJobs does not show yet (see [`MemoryJobRunner::listing_lags`]).
    unlisted: Mutex<std::collections::HashSet<String>>,
    listing_lags: bool,
    initial_status: JobStatus,
    /// When each job was submitted (epoch milliseconds), as ListJobs' `createdAt` says.
    created: Mutex<std::collections::HashMap<String, i64>>,
    /// SubmitJob calls accepted in a second, if limited ([`MemoryJobRunner::with_submit_limit`]).
    submit_limit: Option<crate::adapters::paced::RateLimit>,
    /// Details of the jobs TerminateJob ended whose events a test has not sent yet.
    terminated: Mutex<Vec<serde_json::Value>>,
    /// The queues ListJobs is asked about besides the runner's own ([`Self::listing_also`]).
    other_queues: Vec<String>,
}

/// The twin's own job queue: where a request that names none goes.
pub const MEMORY_QUEUE: &str = "memory";

impl Default for MemoryJobRunner {
    fn default() -> Self {
        Self::new(JobStatus::Submitted)
    }
}

impl MemoryJobRunner {
    /// Refuses SubmitJob past `per_second` calls in any second, as Batch refuses the account's
    /// calls past its quota (50 a second: AWS Batch user guide, "AWS Batch service quotas")
    /// with TooManyRequestsException — a refusal: the job is not created.
    pub fn with_submit_limit(mut self, per_second: usize) -> Self {
        self.submit_limit = Some(crate::adapters::paced::RateLimit::per_second(per_second));
        self
    }

    pub fn new(initial_status: JobStatus) -> Self {
        Self {
            jobs: Mutex::new(Vec::new()),
            details: Mutex::default(),
            forgotten: Mutex::default(),
            unlisted: Mutex::default(),
            listing_lags: false,
            created: Mutex::default(),
            submit_limit: None,
            terminated: Mutex::default(),
            other_queues: Vec::new(),
            initial_status,
        }
    }

    /// The same Batch, whose ListJobs is asked about `queues` as well as the runner's own, as
    /// the SDK adapter is (`BatchJobRunner::listing_also`): a job submitted to a queue not asked
    /// about is neither found by its name nor counted, as ListJobs lists one queue a call.
    pub fn listing_also(self, queues: Vec<String>) -> Self {
        Self {
            other_queues: queues,
            ..self
        }
    }

    /// The queue a request went to.
    fn queue_of(request: &JobRequest) -> &str {
        request.queue.as_deref().unwrap_or(MEMORY_QUEUE)
    }

    /// Whether ListJobs, as this runner asks it, lists the queue `request` went to.
    fn lists_queue_of(&self, request: &JobRequest) -> bool {
        let queue = Self::queue_of(request);
        queue == MEMORY_QUEUE || self.other_queues.iter().any(|q| q == queue)
    }

    /// The same Batch, whose ListJobs does not show a new job until [`Self::catch_up_listing`]:
    /// the Batch API reference promises no read-after-write for ListJobs (nor does any Batch
    /// page; "ListJobs", AWS Batch API Reference), so a job whose SubmitJob answer was lost may
    /// not be found by its name at once. granary assumes it is listed within a claim's lease
    /// (`GRANARY_CLAIM_LEASE_SECS`, 16 minutes): only a takeover after the lease looks for it.
    /// The crash harness catches the listing up when it lets leases run out, as that much time
    /// would. DescribeJobs, by id, answers at once.
    pub fn listing_lags(self) -> Self {
        Self {
            listing_lags: true,
            ..self
        }
    }

    /// Time has passed: ListJobs shows every job submitted so far. Whether any was hidden.
    pub fn catch_up_listing(&self) -> bool {
        let mut unlisted = self.unlisted.lock().unwrap_or_else(|p| p.into_inner());
        let any = !unlisted.is_empty();
        unlisted.clear();
        any
    }

    /// Whether ListJobs shows the job (an array's child: whether it shows its parent).
    fn is_listed(&self, job_id: &str) -> bool {
        let job_id = job_id.split(':').next().unwrap_or(job_id);
        !self
            .unlisted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(job_id)
    }

    /// The job with this id (an array's child included), as submitted and as it stands.
    fn job(&self, job_id: &str) -> Option<(JobRequest, JobSummary)> {
        self.lock()
            .iter()
            .find(|(_, s)| s.job_id == job_id)
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(JobRequest, JobSummary)>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What SubmitJob was asked, in order (an array once, not once per child).
    pub fn submitted(&self) -> Vec<JobRequest> {
        self.lock()
            .iter()
            .filter(|(_, s)| !s.job_id.contains(':'))
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// The RUNNING jobs, oldest first: what a test's Batch may end next (an array's children,
    /// not the parent, which only sums them up).
    pub fn running(&self) -> Vec<(JobRequest, JobSummary)> {
        self.lock()
            .iter()
            .filter(|(r, s)| s.status == JobStatus::Running && !is_array_parent(r, s))
            .cloned()
            .collect()
    }

    /// Ends `job_id` as Batch would describe it — status, `statusReason` and the last attempt
    /// for `ending` — and returns that description's detail, which is also what Batch's "Job
    /// State Change" event carries ([`job_state_change`]). `None` for a job never submitted.
    pub fn end(&self, job_id: &str, ending: Ending) -> Option<serde_json::Value> {
        let (request, summary) = self
            .lock()
            .iter()
            .find(|(_, s)| s.job_id == job_id)
            .cloned()?;
        let mut detail =
            JobDescription::of_request(summary, &request, Self::queue_of(&request)).detail;
        let (status, reason, attempt) = match ending {
            Ending::Succeeded => (
                JobStatus::Succeeded,
                "Essential container in task exited",
                serde_json::json!({"container": {"exitCode": 0}}),
            ),
            Ending::Exited(code) => (
                JobStatus::Failed,
                "Essential container in task exited",
                serde_json::json!({"container": {"exitCode": code}}),
            ),
            Ending::SpotReclaimed => (
                JobStatus::Failed,
                SPOT_RECLAIM,
                serde_json::json!({"container": {}, "statusReason": SPOT_RECLAIM}),
            ),
            // The container reason ECS documents for a task stopped for its memory, with the
            // kill's 137 (`domain::memory`).
            Ending::OutOfMemory => (
                JobStatus::Failed,
                "Essential container in task exited",
                serde_json::json!({"container": {"exitCode": 137, "reason": OUT_OF_MEMORY_REASON}}),
            ),
        };
        detail["status"] = status.as_str().into();
        detail["statusReason"] = reason.into();
        detail["attempts"] = serde_json::json!([attempt]);
        self.finish(job_id, status, detail.clone());
        Some(detail)
    }

    /// TerminateJob as Batch answers it: a job not yet STARTING is cancelled (FAILED, no attempt),
    /// a STARTING or RUNNING one is terminated (FAILED, its attempt's container killed: exit 137,
    /// as published event 14 shows), both with `reason` as the `statusReason`; a job that has
    /// ended is left as it ended (`Ok(None)`). Returns the ended job's detail (what its state
    /// change event carries). An id Batch never gave is a ClientException.
    pub fn terminate_now(
        &self,
        job_id: &str,
        reason: &str,
    ) -> Result<Option<serde_json::Value>, JobRunnerError> {
        let Some((request, summary)) = self.job(job_id) else {
            return Err(JobRunnerError::refused(format!(
                "ClientException: job {job_id} not found"
            )));
        };
        if summary.status.is_terminal() {
            return Ok(None);
        }
        let started = matches!(summary.status, JobStatus::Starting | JobStatus::Running);
        let mut detail =
            JobDescription::of_request(summary, &request, Self::queue_of(&request)).detail;
        detail["status"] = JobStatus::Failed.as_str().into();
        detail["statusReason"] = reason.into();
        detail["attempts"] = if started {
            // As published event 14 shows a job terminated while running: the kill's 137, and
            // the terminator's reason on the attempt too.
            serde_json::json!([{"container": {"exitCode": 137}, "statusReason": reason}])
        } else {
            serde_json::json!([])
        };
        self.finish(job_id, JobStatus::Failed, detail.clone());
        self.terminated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(detail.clone());
        Ok(Some(detail))
    }

    /// The jobs TerminateJob ended since the last call (their state change events' details).
    pub fn take_terminated(&self) -> Vec<serde_json::Value> {
        std::mem::take(&mut *self.terminated.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Ends every array parent whose children have all ended, as Batch does (AWS Batch user
    /// guide, "Array jobs"): SUCCEEDED when every child did, else FAILED ("Array Child Job
    /// failed"), with no attempts and its children counted by status. Returns their details.
    pub fn end_array_parents(&self) -> Vec<serde_json::Value> {
        let jobs = self.lock().clone();
        let mut ended = Vec::new();
        for (request, parent) in jobs
            .iter()
            .filter(|(r, s)| is_array_parent(r, s) && !s.status.is_terminal())
        {
            if let Some((status, detail)) = Self::array_end(&jobs, request, parent) {
                self.finish(&parent.job_id, status, detail.clone());
                ended.push(detail);
            }
        }
        ended
    }

    /// How array `parent` ended, once every child has: SUCCEEDED when every child did, else
    /// FAILED ("Array Child Job failed"), with no attempts and its children counted by status.
    /// `None` while a child is under way.
    fn array_end(
        jobs: &[(JobRequest, JobSummary)],
        request: &JobRequest,
        parent: &JobSummary,
    ) -> Option<(JobStatus, serde_json::Value)> {
        let prefix = format!("{}:", parent.job_id);
        let children: Vec<JobStatus> = jobs
            .iter()
            .filter(|(_, s)| s.job_id.starts_with(&prefix))
            .map(|(_, s)| s.status)
            .collect();
        if children.is_empty() || !children.iter().all(|s| s.is_terminal()) {
            return None;
        }
        let failed = children.iter().filter(|s| **s == JobStatus::Failed).count();
        let status = if failed == 0 {
            JobStatus::Succeeded
        } else {
            JobStatus::Failed
        };
        let mut detail =
            JobDescription::of_request(parent.clone(), request, Self::queue_of(request)).detail;
        detail["status"] = status.as_str().into();
        detail["arrayProperties"]["statusSummary"] = serde_json::json!({
            "SUCCEEDED": children.len() - failed, "FAILED": failed,
        });
        if failed > 0 {
            detail["statusReason"] = "Array Child Job failed".into();
        }
        Some((status, detail))
    }

    /// The job ended as `detail` (a JobDetail as DescribeJobs returns it) says.
    pub fn finish(&self, job_id: &str, status: JobStatus, detail: serde_json::Value) {
        self.set_status(job_id, status);
        self.details
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job_id.to_owned(), detail);
    }

    /// Batch purges the (finished) job: it is no longer described or listed.
    pub fn forget(&self, job_id: &str) {
        self.forgotten
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job_id.to_owned());
    }

    fn is_forgotten(&self, job_id: &str) -> bool {
        self.forgotten
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(job_id)
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
        if self.submit_limit.as_ref().is_some_and(|l| !l.admit()) {
            return Err(crate::adapters::paced::too_many_requests());
        }
        if let Some(size) = request.array_size {
            if !crate::domain::window::ARRAY_SIZES.contains(&(size as usize)) {
                // Batch's answer to an array size outside 2..=10,000: a ClientException.
                return Err(JobRunnerError::refused(format!(
                    "ClientException: array size {size} is outside 2..10000"
                )));
            }
        }
        let mut jobs = self.lock();
        let summary = JobSummary {
            job_id: format!("job-{}", jobs.len() + 1),
            job_name: request.job_name.clone(),
            status: self.initial_status,
        };
        // An array's children are jobs of their own, `<parent>:<index>`, each with the
        // parent's request (AWS Batch user guide, "Array jobs").
        for index in 0..request.array_size.unwrap_or(0) {
            let child = JobSummary {
                job_id: crate::domain::window::child_job_id(&summary.job_id, index as usize),
                ..summary.clone()
            };
            jobs.push((request.clone(), child));
        }
        let now = crate::clock::now().timestamp_millis();
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        for (_, child) in jobs
            .iter()
            .rev()
            .take(request.array_size.unwrap_or(0) as usize)
        {
            created.insert(child.job_id.clone(), now);
        }
        created.insert(summary.job_id.clone(), now);
        drop(created);
        jobs.push((request, summary.clone()));
        if self.listing_lags {
            self.unlisted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(summary.job_id.clone());
        }
        Ok(summary)
    }

    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError> {
        self.terminate_now(job_id, reason).map(|_| ())
    }

    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        let mut active = ActiveJobs::default();
        let jobs = self.lock().clone();
        // Counted as the adapter counts Batch's ListJobs: an array as its unfinished children.
        for (_, s) in jobs.iter().filter(|(r, s)| {
            !s.status.is_terminal()
                && !is_array_parent(r, s)
                && self.is_listed(&s.job_id)
                && self.lists_queue_of(r)
        }) {
            if active.total >= stop_at {
                break;
            }
            *active
                .by_status
                .entry(s.status.as_str().to_owned())
                .or_default() += 1;
            active.total += 1;
            if s.status == JobStatus::Runnable {
                let created = self.created.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(at) = created.get(&s.job_id) {
                    active.saw_runnable_created(*at);
                }
            }
        }
        Ok(active)
    }

    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        Ok(self
            .lock()
            .iter()
            .rev()
            // ListJobs lists an array's parent, not its children.
            .find(|(r, s)| {
                s.job_name == job_name
                    && !s.job_id.contains(':')
                    && self.is_listed(&s.job_id)
                    && self.lists_queue_of(r)
            })
            .map(|(_, s)| s.clone())
            .filter(|s| !self.is_forgotten(&s.job_id)))
    }

    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        if self.is_forgotten(job_id) {
            return Ok(None);
        }
        let Some((request, summary)) = self.job(job_id) else {
            return Ok(None);
        };
        // A parent is described as ended once its children have, before a test ends it
        // (`end_array_parents`, which sends its event): Batch ends it by itself.
        if is_array_parent(&request, &summary) && !summary.status.is_terminal() {
            if let Some((status, detail)) = Self::array_end(&self.lock(), &request, &summary) {
                let summary = JobSummary { status, ..summary };
                return Ok(Some(JobDescription { summary, detail }));
            }
        }
        let given = self
            .details
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job_id)
            .cloned();
        Ok(Some(match given {
            Some(detail) => JobDescription { summary, detail },
            None => JobDescription::of_request(summary, &request, Self::queue_of(&request)),
        }))
    }
}

/// An array job's parent: it runs nothing itself (AWS Batch user guide, "Array jobs").
fn is_array_parent(request: &JobRequest, summary: &JobSummary) -> bool {
    request.array_size.is_some() && !summary.job_id.contains(':')
}
#[cfg(test)]
mod tests;
