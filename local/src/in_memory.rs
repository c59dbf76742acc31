//! Batch and the EventBridge rule as in-memory twins, for a campaign that runs granary's handlers
//! over the in-memory store and queues instead of an emulator.
//!
//! What it is for: measuring granary's own cost per granule. The emulator is one Python process
//! that answers ~150–200 requests a second, so a campaign on it measures the emulator. On the
//! twins the same handlers, the same runner and the same Batch simulator run with nothing slower
//! than granary itself in the loop. Request counts are the same either way (they are counted at
//! granary's ports); only the time changes.

use super::events::JobFacts;
use super::simulator::JobLedger;
use anyhow::{Context, Result};
use async_trait::async_trait;
use granary::adapters::memory::ScratchFile;
use granary::domain::batch_event::JobStatus;
use granary::ports::{
    ActiveJobs, BusEvent, EventBus, EventBusError, JobDescription, JobRequest, JobRunner,
    JobRunnerError, JobSummary, OutgoingMessage, Queue,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const ACCOUNT: &str = "000000000000";
const REGION: &str = "us-east-1";

/// One job, kept small (a million of them in a large campaign): its id is its place in the list.
struct Job {
    /// Shared with the by-name index.
    name: Arc<str>,
    status: JobStatus,
    /// What was asked, until the simulator settles the job (DescribeJobs shows it queued).
    request: Option<Box<JobRequest>>,
    created_at_ms: i64,
    /// Where the JobDetail its final event carried is kept, as JSON text (a million parsed
    /// details would not fit in memory; DescribeJobs parses the one it answers).
    settled: Option<DetailAt>,
    /// An array's children, `<id>:<index>` (none for a single job).
    children: Box<[Child]>,
}

/// Where a settled job's detail is: a framed entry's offset in the twin's scratch file, or, for
/// a twin without one, its place in [`Jobs::held`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct DetailAt(u64);

/// One child of an array job in 8 bytes (a campaign of ten million granules has ten million
/// children, and 32 bytes each were 300 MB): its status in the top byte and, below, where its
/// settled detail is ([`DetailAt`]) or [`Child::UNSETTLED`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Child(u64);

/// Every status, each at the place [`Child`] keeps it by.
const STATUSES: [JobStatus; 7] = JobStatus::ALL;

impl Child {
    const PLACE_BITS: u32 = 56;
    const UNSETTLED: u64 = (1 << Self::PLACE_BITS) - 1;

    /// Where `status` is in [`STATUSES`]: a match, so a status added to the list is a compile
    /// error here rather than a child kept with another status.
    fn status_at(status: JobStatus) -> u64 {
        match status {
            JobStatus::Submitted => 0,
            JobStatus::Pending => 1,
            JobStatus::Runnable => 2,
            JobStatus::Starting => 3,
            JobStatus::Running => 4,
            JobStatus::Succeeded => 5,
            JobStatus::Failed => 6,
        }
    }

    /// A child not settled yet.
    fn queued(status: JobStatus) -> Self {
        Self(Self::status_at(status) << Self::PLACE_BITS | Self::UNSETTLED)
    }

    fn new(status: JobStatus, settled: DetailAt) -> Result<Self> {
        anyhow::ensure!(
            settled.0 < Self::UNSETTLED,
            "the Batch twin cannot keep a child's detail at {} (past 2^56)",
            settled.0
        );
        Ok(Self(
            Self::status_at(status) << Self::PLACE_BITS | settled.0,
        ))
    }

    fn status(self) -> JobStatus {
        // The top byte is always a place `status_at` gave (only `queued` and `new` make a
        // child); were it not, a failed child is routed like any end, never left looking active.
        STATUSES
            .get((self.0 >> Self::PLACE_BITS) as usize)
            .copied()
            .unwrap_or(JobStatus::Failed)
    }

    fn settled(self) -> Option<DetailAt> {
        let place = self.0 & Self::UNSETTLED;
        (place != Self::UNSETTLED).then_some(DetailAt(place))
    }
}

#[derive(Default)]
struct Jobs {
    all: Vec<Job>,
    /// The jobs not yet finished, so counting them does not walk a million finished ones.
    active: std::collections::BTreeSet<usize>,
    /// The newest job of each name (a name is submitted again only by a bug; the newest wins).
    by_name: HashMap<Arc<str>, usize>,
    /// Settled details, when the twin has no scratch file ([`DetailAt`] is the place here).
    held: Vec<Box<[u8]>>,
}

/// Shaped like Batch's UUIDs (log streams and event ids take their first characters), and
/// naming the job's place in the list.
fn job_id_of(index: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", index + 1, index + 1)
}

/// An array child's id split into its parent's and its index (`<parent>:<index>`).
fn child_of(job_id: &str) -> Option<(&str, usize)> {
    let (parent, index) = job_id.rsplit_once(':')?;
    Some((parent, index.parse().ok()?))
}

/// The place in the list of a job id made by [`job_id_of`]; `None` for any other id.
fn index_of(job_id: &str) -> Option<usize> {
    let n = usize::from_str_radix(job_id.rsplit('-').next()?, 16).ok()?;
    let index = n.checked_sub(1)?;
    (job_id_of(index) == job_id).then_some(index)
}

impl Jobs {
    fn get(&self, job_id: &str) -> Option<(usize, &Job)> {
        let i = index_of(job_id)?;
        Some((i, self.all.get(i)?))
    }

    fn summary(&self, index: usize) -> Option<JobSummary> {
        self.all.get(index).map(|j| JobSummary {
            job_id: job_id_of(index),
            job_name: j.name.to_string(),
            status: j.status,
        })
    }
}

/// AWS Batch as the emulator behaves: a job is finished as soon as it is submitted (the
/// [`super::simulator::BatchSimulator`] decides how it ended and emits the events). Lookups by id
/// and by name are indexed, so a 100,000-job campaign does not slow down as it grows.
pub struct InMemoryBatch {
    jobs: Mutex<Jobs>,
    job_queue_arn: String,
    job_definition_arn: String,
    /// The job definition's retryStrategy, as DescribeJobs would echo it.
    retry_strategy: Value,
    /// Where settled details go, when the twin has one.
    scratch: Option<ScratchFile>,
    /// How long after SubmitJob ListJobs starts to show a job (see [`InMemoryBatch::listing_lag`]).
    listing_lag_ms: i64,
    /// Batch's SubmitJob quota, when enforced ([`InMemoryBatch::submit_limit`]).
    submit_limit: Option<granary::adapters::paced::RateLimit>,
    /// SubmitJob calls refused for the quota.
    refused_submits: std::sync::atomic::AtomicU64,
}

/// A Batch resource's ARN from its name (or its ARN as given).
fn arn(kind: &str, name: &str, revision: &str) -> String {
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

    fn listed(&self, job: &Job) -> bool {
        chrono::Utc::now().timestamp_millis() - job.created_at_ms >= self.listing_lag_ms
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

    fn lock(&self) -> MutexGuard<'_, Jobs> {
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
            status: JobStatus::Succeeded,
        };
        jobs.by_name.insert(name.clone(), n);
        if !summary.status.is_terminal() {
            jobs.active.insert(n);
        }
        jobs.all.push(Job {
            name,
            status: summary.status,
            request: Some(Box::new(request)),
            created_at_ms: chrono::Utc::now().timestamp_millis(),
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

#[async_trait]
impl JobLedger for InMemoryBatch {
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>> {
        let jobs = self.lock();
        let mut out = Vec::with_capacity(job_ids.len());
        for id in job_ids {
            let Some((_, job)) = jobs.get(id) else {
                continue;
            };
            // Settled jobs were seen already: the simulator asks only about new ones.
            let Some(request) = &job.request else {
                continue;
            };
            let lookup = |param: &str, var: &str| {
                request
                    .parameters
                    .get(param)
                    .or_else(|| request.environment.get(var))
                    .cloned()
            };
            // Jobs without granary's parameters are not ours, as with DescribeJobs.
            let Some(super::events::JobWork {
                array,
                granule_id,
                attempt,
                campaign,
            }) = super::events::job_work(&lookup, request.array_size)
            else {
                continue;
            };
            out.push(JobFacts {
                job_id: id.clone(),
                job_name: job.name.to_string(),
                job_arn: format!("arn:aws:batch:{REGION}:{ACCOUNT}:job/{id}"),
                job_queue_arn: self.job_queue_arn.clone(),
                job_definition_arn: self.job_definition_arn.clone(),
                granule_id,
                attempt,
                retry_strategy: self.retry_strategy.clone(),
                created_at_ms: job.created_at_ms,
                account: ACCOUNT.into(),
                region: REGION.into(),
                array,
                campaign,
            });
        }
        Ok(out)
    }

    async fn settle(&self, job_id: &str, status: JobStatus, detail: &Value) -> Result<()> {
        // Written and compressed before the jobs' lock is taken (DescribeJobs and SubmitJob wait
        // on it); the scratch file orders its own appends.
        let text = serde_json::to_vec(detail).context("the job detail as JSON")?;
        let spilled = match &self.scratch {
            Some(scratch) => Some(DetailAt(
                scratch
                    .append_framed(&text)
                    .context("the Batch twin's scratch file")?,
            )),
            None => None,
        };
        let mut jobs = self.lock();
        let held = match spilled {
            Some(at) => at,
            None => {
                jobs.held.push(text.into_boxed_slice());
                DetailAt(jobs.held.len() as u64 - 1)
            }
        };
        // A child is settled in its parent's list; the parent keeps its request for the children
        // not settled yet (DescribeJobs shows them queued).
        if let Some((parent, i)) = child_of(job_id) {
            let child = index_of(parent)
                .and_then(|p| jobs.all.get_mut(p))
                .and_then(|job| job.children.get_mut(i));
            if let Some(child) = child {
                *child = Child::new(status, held)?;
            }
            return Ok(());
        }
        let index = index_of(job_id);
        if let Some(job) = index.and_then(|i| jobs.all.get_mut(i)) {
            job.status = status;
            job.settled = Some(held);
            if job.children.iter().all(|c| c.settled().is_some()) {
                job.request = None;
            }
        }
        if let (true, Some(i)) = (status.is_terminal(), index) {
            jobs.active.remove(&i);
        }
        Ok(())
    }

    async fn finished(&self) -> Result<Vec<String>> {
        Ok(self
            .lock()
            .all
            .iter()
            .enumerate()
            .filter(|(_, j)| j.status.is_terminal())
            .map(|(i, _)| job_id_of(i))
            .collect())
    }

    async fn jobs(&self) -> Result<Vec<(String, String)>> {
        let mut all: Vec<(String, String)> = self
            .lock()
            .all
            .iter()
            .enumerate()
            .map(|(i, j)| (j.name.to_string(), job_id_of(i)))
            .collect();
        all.sort();
        Ok(all)
    }
}

/// The EventBridge rule that buffers Batch events in SQS: terminal state changes of one job
/// queue, delivered as the full event envelope, which is what the job monitor reads.
pub struct RuleToQueue {
    queue: Arc<dyn Queue>,
    job_queue_arn: String,
    serial: AtomicU64,
}

impl RuleToQueue {
    pub fn new(queue: Arc<dyn Queue>, job_queue_arn: &str) -> Self {
        Self {
            queue,
            job_queue_arn: job_queue_arn.to_owned(),
            serial: AtomicU64::new(0),
        }
    }

    /// The rule's pattern: source aws.batch, "Batch Job State Change", this queue, terminal.
    fn matches(&self, e: &BusEvent) -> bool {
        e.source == "aws.batch"
            && e.detail_type == "Batch Job State Change"
            && e.detail["jobQueue"] == self.job_queue_arn.as_str()
            && matches!(e.detail["status"].as_str(), Some("SUCCEEDED" | "FAILED"))
    }
}

/// The envelope EventBridge delivers to a rule's target, in the order of the EventBridge user
/// guide's example ("Amazon EventBridge events").
#[derive(serde::Serialize)]
struct Envelope<'a> {
    version: &'a str,
    id: &'a str,
    #[serde(rename = "detail-type")]
    detail_type: &'a str,
    source: &'a str,
    account: &'a str,
    time: &'a str,
    region: &'a str,
    resources: &'a [String],
    detail: &'a serde_json::Value,
}

#[async_trait]
impl EventBus for RuleToQueue {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        for e in events.into_iter().filter(|e| self.matches(e)) {
            let n = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
            let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            // Written straight from the event: `json!` would copy the detail's whole tree
            // before writing it out (~2% of a campaign's CPU, perf).
            let envelope = serde_json::to_string(&Envelope {
                version: "0",
                id: &format!("{n:08x}-0000-4000-8000-000000000000"),
                detail_type: &e.detail_type,
                source: &e.source,
                account: ACCOUNT,
                time: &time,
                region: REGION,
                resources: &e.resources,
                detail: &e.detail,
            })
            .map_err(|err| EventBusError::new(err.to_string()))?;
            self.queue
                .send(OutgoingMessage::new(envelope))
                .await
                .map_err(|err| EventBusError::new(err.to_string()).with_source(err))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{default_retry_strategy, state_change_event, AttemptEnd};
    use granary::adapters::memory::MemoryQueue;
    use granary::domain::batch_event::BatchJobStateChange;
    use std::collections::BTreeMap;

    fn request(name: &str, granule: &str, attempt: u32) -> JobRequest {
        JobRequest {
            job_name: name.into(),
            environment: BTreeMap::new(),
            parameters: BTreeMap::from([
                ("granule_id".to_owned(), granule.to_owned()),
                ("attempt".to_owned(), attempt.to_string()),
            ]),
            array_size: None,
            queue: None,
        }
    }

    #[tokio::test]
    async fn list_jobs_shows_a_new_job_only_after_the_listing_lag() {
        let lag = std::time::Duration::from_millis(50);
        let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2)).listing_lag(lag);
        let a = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
        assert_eq!(batch.find_by_name("g-a1").await.unwrap(), None);
        // DescribeJobs, by id, answers at once.
        assert!(batch.describe(&a.job_id).await.unwrap().is_some());
        tokio::time::sleep(lag * 2).await;
        assert_eq!(
            batch.find_by_name("g-a1").await.unwrap().map(|j| j.job_id),
            Some(a.job_id)
        );
    }

    #[tokio::test]
    async fn submitted_jobs_are_found_by_id_and_name_and_described_for_the_simulator() {
        let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
        let a = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
        let b = batch.submit(request("g-a2", "G1", 2)).await.unwrap();
        assert_ne!(a.job_id, b.job_id);
        // Before the simulator settles it, DescribeJobs shows it queued with its parameters.
        let described = batch.describe(&b.job_id).await.unwrap().unwrap();
        assert_eq!(described.summary.job_id, b.job_id);
        assert_eq!(described.summary.status, JobStatus::Runnable);
        assert_eq!(described.detail["parameters"]["granule_id"], "G1");
        // The simulator asks for the facts of jobs it has not settled yet.
        let facts = batch
            .facts(&[b.job_id.clone(), "unknown".into()])
            .await
            .unwrap();
        assert_eq!(facts.len(), 1);
        assert_eq!((facts[0].granule_id.as_str(), facts[0].attempt), ("G1", 2));
        assert_eq!(facts[0].job_queue_arn, batch.job_queue_arn());
        let detail = serde_json::json!({"jobId": b.job_id, "status": "FAILED"});
        batch
            .settle(&b.job_id, JobStatus::Failed, &detail)
            .await
            .unwrap();
        let described = batch.describe(&b.job_id).await.unwrap().unwrap();
        assert_eq!(
            (described.summary.status, described.detail),
            (JobStatus::Failed, detail)
        );
        assert_eq!(batch.find_by_name("g-a1").await.unwrap(), Some(a.clone()));
        assert_eq!(batch.find_by_name("nope").await.unwrap(), None);
        // Finished at submission, as on the emulator: nothing counts as active.
        assert_eq!(batch.count_active(10).await.unwrap().total, 0);
        assert_eq!(
            batch.finished().await.unwrap(),
            vec![a.job_id.clone(), b.job_id.clone()]
        );
        assert!(
            batch
                .facts(std::slice::from_ref(&b.job_id))
                .await
                .unwrap()
                .is_empty(),
            "a settled job was seen: its request is no longer kept"
        );
    }

    #[tokio::test]
    async fn an_array_childs_status_and_detail_come_back_as_settled_held_or_spilled() {
        for batch in [
            InMemoryBatch::new("q", "d", default_retry_strategy(2)),
            InMemoryBatch::new("q", "d", default_retry_strategy(2))
                .spilling(tempfile::tempfile().unwrap()),
        ] {
            let mut array = request("w-1", "G1", 1);
            array.array_size = Some(3);
            let parent = batch.submit(array).await.unwrap().job_id;
            let mut details = Vec::new();
            for (i, status) in [(2, JobStatus::Failed), (0, JobStatus::Succeeded)] {
                let id = format!("{parent}:{i}");
                let detail = serde_json::json!({"jobId": id, "status": status.as_str()});
                batch.settle(&id, status, &detail).await.unwrap();
                details.push((id, status, detail));
            }
            for (id, status, detail) in details {
                let described = batch.describe(&id).await.unwrap().unwrap();
                assert_eq!(described.summary.job_id, id);
                assert_eq!(
                    (described.summary.status, described.detail),
                    (status, detail)
                );
            }
            // Not settled yet: queued, described from the array's request.
            let queued = batch
                .describe(&format!("{parent}:1"))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(queued.summary.status, JobStatus::Runnable);
            assert!(batch
                .describe(&format!("{parent}:3"))
                .await
                .unwrap()
                .is_none());
        }
    }

    #[test]
    fn a_child_keeps_every_status_beside_any_place_below_two_to_the_56() {
        for status in STATUSES {
            for place in [0, 1, 41, Child::UNSETTLED - 1] {
                let child = Child::new(status, DetailAt(place)).unwrap();
                assert_eq!(
                    (child.status(), child.settled()),
                    (status, Some(DetailAt(place)))
                );
            }
            let queued = Child::queued(status);
            assert_eq!((queued.status(), queued.settled()), (status, None));
        }
        assert!(Child::new(JobStatus::Failed, DetailAt(Child::UNSETTLED)).is_err());
        assert_eq!(std::mem::size_of::<Child>(), 8);
    }

    #[test]
    fn a_job_id_names_its_place_and_foreign_ids_name_none() {
        for i in [0, 1, 41, 999_999] {
            assert_eq!(index_of(&job_id_of(i)), Some(i));
        }
        for foreign in [
            "",
            "nope",
            "00000001-0000-4000-8000-00000000000g",
            "0-1",
            "x-1",
        ] {
            assert_eq!(index_of(foreign), None, "{foreign}");
        }
    }

    #[tokio::test]
    async fn a_job_without_granary_parameters_is_not_described() {
        let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
        let mut r = request("other", "G", 1);
        r.parameters.clear();
        let job = batch.submit(r).await.unwrap();
        assert!(batch.facts(&[job.job_id]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_rule_delivers_terminal_events_of_its_queue_as_envelopes() {
        let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
        let job = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
        let facts = batch.facts(&[job.job_id]).await.unwrap().remove(0);
        let queue = Arc::new(MemoryQueue::new("events"));
        let rule = RuleToQueue::new(queue.clone(), batch.job_queue_arn());
        let event = |status: &str, queue_arn: &str| {
            let mut v = state_change_event(&facts, &[AttemptEnd::Success], status);
            v["detail"]["jobQueue"] = serde_json::json!(queue_arn);
            BusEvent {
                source: "aws.batch".into(),
                detail_type: "Batch Job State Change".into(),
                resources: vec![],
                detail: v["detail"].clone(),
            }
        };
        let arn = batch.job_queue_arn().to_owned();
        rule.put_events(vec![
            event("SUCCEEDED", &arn),
            event("RUNNABLE", &arn),
            event(
                "SUCCEEDED",
                "arn:aws:batch:us-east-1:000000000000:job-queue/other",
            ),
        ])
        .await
        .unwrap();
        let bodies = queue.bodies();
        assert_eq!(bodies.len(), 1, "only the terminal event of this queue");
        let parsed: Value = serde_json::from_str(&bodies[0]).unwrap();
        let e = BatchJobStateChange::from_value(&parsed).unwrap();
        assert_eq!(e.detail_type, "Batch Job State Change");
    }

    /// A simulator over the in-memory Batch (`attempts` a job) whose events are neither
    /// duplicated, delayed nor lost, its events queue, and the Batch it watches submissions to.
    fn plain_simulator(
        attempts: u32,
    ) -> (
        Arc<InMemoryBatch>,
        Arc<MemoryQueue>,
        crate::simulator::BatchSimulator,
        Arc<dyn JobRunner>,
    ) {
        let batch = Arc::new(InMemoryBatch::new(
            "q",
            "d",
            default_retry_strategy(attempts),
        ));
        let events = Arc::new(MemoryQueue::new("events"));
        let rule = Arc::new(RuleToQueue::new(events.clone(), batch.job_queue_arn()));
        let plan = crate::fault_plan::FaultPlan {
            duplicate_rate: 0.0,
            delay_rate: 0.0,
            lost_rate: 0.0,
            ..crate::fault_plan::FaultPlan::default()
        };
        let sim = crate::simulator::BatchSimulator::new(batch.clone(), rule, plan);
        let tapped = sim.watch(batch.clone());
        (batch, events, sim, tapped)
    }

    #[tokio::test]
    async fn the_simulator_holds_events_the_events_queue_has_no_room_for() {
        let (_, events, mut sim, tapped) = plain_simulator(1);
        for i in 0..5 {
            let name = format!("g-{i}");
            tapped
                .submit(request(&name, &format!("G{i}"), 1))
                .await
                .unwrap();
        }
        sim.room = Some(0);
        assert_eq!(sim.tick().await.unwrap(), 5);
        assert_eq!(events.bodies().len(), 0, "no room: nothing put");
        assert!(sim.pending() > 0);
        sim.room = Some(2);
        sim.tick().await.unwrap();
        assert_eq!(events.bodies().len(), 2);
        sim.room = None;
        sim.tick().await.unwrap();
        assert_eq!(
            (events.bodies().len(), sim.pending()),
            (5, 0),
            "every end, once"
        );
    }

    #[tokio::test]
    async fn the_simulator_learns_jobs_from_submissions_and_sweeps_up_the_rest() {
        let (batch, events, mut sim, tapped) = plain_simulator(2);
        tapped.submit(request("g-a1", "G1", 1)).await.unwrap();
        // Submitted around the tap: only a full listing finds it.
        batch.submit(request("g-b1", "G2", 1)).await.unwrap();
        assert_eq!(sim.tick().await.unwrap(), 1);
        assert_eq!(sim.sweep().await.unwrap(), 1);
        assert_eq!(sim.tick().await.unwrap(), 1);
        assert_eq!(sim.sweep().await.unwrap(), 0, "nothing left unseen");
        assert_eq!(sim.tick().await.unwrap(), 0, "a job is finished once");
        assert_eq!((sim.stats.jobs, sim.stats.swept), (2, 1));
        let granules: Vec<String> = events
            .bodies()
            .iter()
            .map(|b| {
                let e = BatchJobStateChange::from_value(&serde_json::from_str(b).unwrap()).unwrap();
                e.detail.parameters["granule_id"].clone()
            })
            .collect();
        assert!(granules.contains(&"G1".to_owned()) && granules.contains(&"G2".to_owned()));
    }
}
