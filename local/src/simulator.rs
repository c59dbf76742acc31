//! The Batch simulator: notices jobs that reached the emulator's Batch queue, decides each one's
//! fate from the fault plan, and puts "Batch Job State Change" events on the EventBridge bus, from
//! where the stack's rule delivers them to the events queue — the path real Batch events take.

use super::events::{array_parent_event, describe_facts, state_change_event, ArrayPlace, JobFacts};
use super::fault_plan::{retry_strategy_of, FaultPlan};
use crate::granule_list::id_hash;
use anyhow::{Context, Result};
use async_trait::async_trait;
use aws_sdk_batch::types::JobStatus;
use granary::domain::batch_event::BatchJobStateChange;
use granary::domain::classify::{classify, Route};
use granary::domain::granule::GranuleId;
use granary::ports::{
    ActiveJobs, BusEvent, EventBus, JobRequest, JobRunner, JobRunnerError, JobSummary,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The ids SubmitJob returned, in order, not yet seen by the simulator.
///
/// Real Batch knows every job it accepted; the simulator learns them the same way, from the
/// submissions, instead of listing every finished job on each tick. moto's ListJobs has no
/// pagination and returns the whole job list on every call, so listing made a tick cost
/// O(jobs so far) and a campaign quadratic. A full listing is still taken before the runtime
/// declares a campaign settled ([`BatchSimulator::sweep`]), so a job submitted some other way
/// is not missed.
#[derive(Debug, Default, Clone)]
pub struct Submissions(Arc<Mutex<Vec<String>>>);

impl Submissions {
    fn push(&self, job_id: String) {
        // A poisoned lock only means another submitter panicked; the list itself is whole.
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(job_id);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Jobs TerminateJob was called for, with its reason, that the simulator has not played yet.
/// Real Batch cancels a job not yet STARTING and terminates a running one, either way FAILED
/// with that reason (AWS Batch API Reference, TerminateJob); the simulator plays a job's whole
/// life at the first tick after its submission, so a termination it hears of before then ends
/// the job cancelled, and one after changes nothing (the job had ended).
#[derive(Debug, Default, Clone)]
pub struct Terminations(Arc<Mutex<std::collections::HashMap<String, String>>>);

impl Terminations {
    fn insert(&self, job_id: &str, reason: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(job_id.to_owned())
            .or_insert_with(|| reason.to_owned());
    }

    fn take(&self, job_id: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(job_id)
    }
}

/// A [`JobRunner`] that tells the simulator about every job it submits and terminates.
pub struct SubmissionTap {
    inner: Arc<dyn JobRunner>,
    submissions: Submissions,
    terminations: Terminations,
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

/// What the simulator reads about jobs from the Batch it stands beside.
#[async_trait]
pub trait JobLedger: Send + Sync {
    /// What Batch knows about these jobs; ids without granary's parameters are skipped.
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>>;
    /// The simulator decided how the job ended: what DescribeJobs answers from now on. An
    /// emulator's Batch keeps its own record of the job, which the simulator cannot change.
    async fn settle(
        &self,
        job_id: &str,
        status: granary::domain::batch_event::JobStatus,
        detail: &serde_json::Value,
    ) -> Result<()>;
    /// Every finished job on the job queue (for the settling sweep).
    async fn finished(&self) -> Result<Vec<String>>;
    /// Every job on the job queue in any status, as (name, id), sorted.
    async fn jobs(&self) -> Result<Vec<(String, String)>>;
}

/// The emulator's (or any endpoint's) Batch: DescribeJobs and ListJobs.
pub struct EndpointBatch {
    batch: aws_sdk_batch::Client,
    job_queue: String,
}

impl EndpointBatch {
    pub fn new(batch: aws_sdk_batch::Client, job_queue: &str) -> Self {
        Self {
            batch,
            job_queue: job_queue.to_owned(),
        }
    }
}

#[async_trait]
impl JobLedger for EndpointBatch {
    async fn facts(&self, job_ids: &[String]) -> Result<Vec<JobFacts>> {
        describe_facts(&self.batch, job_ids).await
    }

    /// The emulator's Batch keeps its own job records; what it describes is its own.
    async fn settle(
        &self,
        _job_id: &str,
        _status: granary::domain::batch_event::JobStatus,
        _detail: &serde_json::Value,
    ) -> Result<()> {
        Ok(())
    }

    async fn finished(&self) -> Result<Vec<String>> {
        // The emulator finishes jobs inside SubmitJob; real Batch would have them RUNNING first.
        let finished = self
            .listed(&[JobStatus::Succeeded, JobStatus::Failed])
            .await?;
        Ok(finished.into_iter().map(|(_, id)| id).collect())
    }

    async fn jobs(&self) -> Result<Vec<(String, String)>> {
        let mut all = self
            .listed(&[
                JobStatus::Submitted,
                JobStatus::Pending,
                JobStatus::Runnable,
                JobStatus::Starting,
                JobStatus::Running,
                JobStatus::Succeeded,
                JobStatus::Failed,
            ])
            .await?;
        all.sort();
        Ok(all)
    }
}

impl EndpointBatch {
    /// (name, id) of every job on the queue in one of `statuses`, through ListJobs' pages.
    async fn listed(&self, statuses: &[JobStatus]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for status in statuses {
            let mut pages = self
                .batch
                .list_jobs()
                .job_queue(&self.job_queue)
                .job_status(status.clone())
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.context("ListJobs")?;
                for j in page.job_summary_list.unwrap_or_default() {
                    out.push((j.job_name.unwrap_or_default(), j.job_id.unwrap_or_default()));
                }
            }
        }
        Ok(out)
    }
}

/// What the simulator decided for one job, for the campaign's accounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedJob {
    pub job_id: String,
    pub job_name: String,
    pub granule_id: String,
    pub attempt: u32,
    pub batch_attempts: usize,
    pub route: Route,
    pub reason: String,
    /// The campaign the job named (`GRANARY_CAMPAIGN`), if any.
    pub campaign: Option<String>,
}

impl PlannedJob {
    /// Whether the job is of `campaign`'s (none: the unnamed one).
    pub fn of_campaign(&self, campaign: Option<&granary::domain::campaign::Campaign>) -> bool {
        self.campaign.as_deref() == campaign.map(|c| c.as_str())
    }
}

#[derive(Debug, Default, Clone)]
pub struct SimulatorStats {
    pub jobs: u64,
    pub events: u64,
    pub duplicates: u64,
    pub delayed: u64,
    pub intermediate: u64,
    /// Final events never delivered (the fault plan's `lost_rate`).
    pub lost: u64,
    pub batch_internal_retries: u64,
    pub succeeded: u64,
    pub retryable: u64,
    pub dead_letter_bound: u64,
    /// Jobs found only by a full listing, not through the submission tap.
    pub swept: u64,
    /// Array windows played (each child is counted in `jobs`).
    pub arrays: u64,
}

pub struct BatchSimulator {
    ledger: Arc<dyn JobLedger>,
    bus: Arc<dyn EventBus>,
    plan: FaultPlan,
    /// The jobs already played out, by a hash of their id (a million ids would cost ~75 MB; a
    /// collision would leave a job unplayed, and the campaign would not settle: never silent).
    seen: HashSet<u64>,
    submissions: Submissions,
    terminations: Terminations,
    /// Jobs the simulator ended as cancelled (TerminateJob before they ran).
    pub cancelled: u64,
    held: Vec<(u32, BusEvent)>,
    /// At most this many events are delivered per tick; the rest wait for the next. Real jobs end
    /// spread over time, and the emulator's ReceiveMessage slows with queue length.
    pub max_events_per_tick: usize,
    /// How many more events the events queue has room for this tick, when the runner keeps it
    /// shallow (`RunnerOptions::events_queue_limit`); the rest are held, as past the cap above.
    pub room: Option<usize>,
    /// Every job's fate, for tests that check each granule's route (`keep_plan`, on by
    /// default; a benchmark of a million granules turns it off and counts by logs and DLQ).
    pub planned: Vec<PlannedJob>,
    pub keep_plan: bool,
    pub stats: SimulatorStats,
    /// granary's bucket, where an array window's children read their claim (as the container
    /// does: docs/array-windows.md).
    claims: Option<Arc<dyn granary::ports::ObjectStore>>,
}

fn bus_event(mut value: serde_json::Value) -> BusEvent {
    BusEvent {
        source: "aws.batch".into(),
        detail_type: "Batch Job State Change".into(),
        resources: value["resources"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        // Moved, not copied: the event is the simulator's own and done with.
        detail: value
            .get_mut("detail")
            .map_or(serde_json::Value::Null, serde_json::Value::take),
    }
}

impl BatchSimulator {
    /// The Batch the simulator plays out (the endpoint's or the in-memory one).
    pub fn ledger(&self) -> &Arc<dyn JobLedger> {
        &self.ledger
    }

    pub fn new(ledger: Arc<dyn JobLedger>, bus: Arc<dyn EventBus>, plan: FaultPlan) -> Self {
        Self {
            ledger,
            bus,
            plan,
            seen: HashSet::new(),
            submissions: Submissions::default(),
            terminations: Terminations::default(),
            cancelled: 0,
            held: Vec::new(),
            max_events_per_tick: 100,
            room: None,
            planned: Vec::new(),
            keep_plan: true,
            stats: SimulatorStats::default(),
            claims: None,
        }
    }

    /// The store array windows' children read their claims from (granary's bucket).
    pub fn read_claims_from(&mut self, store: Arc<dyn granary::ports::ObjectStore>) {
        self.claims = Some(store);
    }

    /// An array window's children, as their containers know them: child `i` processes granule
    /// `i` of the window claim the parent names.
    async fn children(&self, parent: &JobFacts) -> Result<Vec<JobFacts>> {
        let Some(ArrayPlace::Parent { size, window }) = &parent.array else {
            return Ok(Vec::new());
        };
        let store = self.claims.as_ref().context(
            "an array window was submitted, and the simulator has no store to read its claim from",
        )?;
        let claim = granary::repositories::read_json::<granary::domain::window::WindowClaim>(
            store.as_ref(),
            &window.claim_key,
        )
        .await
        .with_context(|| format!("reading window claim {}", window.claim_key))?
        .with_context(|| format!("window claim {} does not exist", window.claim_key))?
        .value;
        Ok((0..*size)
            .map(|i| JobFacts {
                job_id: granary::domain::window::child_job_id(&parent.job_id, i as usize),
                // A child without a granule at its index fails in its container; the monitor
                // rejects its end (no granule to name).
                granule_id: claim
                    .granules
                    .get(i as usize)
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
                // A window of retries holds each child's attempt (its container reads it there).
                attempt: claim
                    .entry(i as usize)
                    .map_or(parent.attempt, |e| e.attempt),
                array: Some(ArrayPlace::Child {
                    index: i,
                    window: window.clone(),
                }),
                ..parent.clone()
            })
            .collect())
    }

    /// Events held back (for reordering, or by the per-tick cap), not yet delivered.
    pub fn pending(&self) -> usize {
        self.held.len()
    }

    /// `jobs` with every submission reported to this simulator: give the handlers this runner.
    pub fn watch(&self, jobs: Arc<dyn JobRunner>) -> Arc<dyn JobRunner> {
        Arc::new(SubmissionTap {
            inner: jobs,
            submissions: self.submissions.clone(),
            terminations: self.terminations.clone(),
        })
    }

    /// Lists every finished job on the queue and queues the ones the simulator has not seen (jobs
    /// not submitted through [`Self::watch`]). O(jobs) on the emulator: the runtime calls it only
    /// when it is about to call a campaign settled. Returns how many it found.
    pub async fn sweep(&mut self) -> Result<usize> {
        let mut found = 0;
        for id in self.ledger.finished().await? {
            // An array's children were played with their parent. (Batch's ListJobs lists them
            // only when asked by `arrayJobId`; moto 5.2.5 lists them with the queue's jobs.)
            let played_with_parent = id
                .rsplit_once(':')
                .is_some_and(|(parent, _)| self.seen.contains(&id_hash(parent)));
            if !played_with_parent && !self.seen.contains(&id_hash(&id)) {
                self.submissions.push(id);
                found += 1;
            }
        }
        self.stats.swept += found as u64;
        Ok(found)
    }

    /// One pass: finish every newly submitted job and deliver what is due. Returns how many new
    /// jobs it saw.
    pub async fn tick(&mut self) -> Result<usize> {
        let mut new_ids = self.submissions.take();
        // `seen` both skips jobs already finished and drops repeats within this batch.
        new_ids.retain(|id| self.seen.insert(id_hash(id)));
        let listed = self.ledger.facts(&new_ids).await?;
        // An array window plays as its children, then its parent's summary.
        let mut facts = Vec::with_capacity(listed.len());
        let mut parents = Vec::new();
        for f in listed {
            if matches!(f.array, Some(ArrayPlace::Parent { .. })) {
                facts.extend(self.children(&f).await?);
                parents.push((f, 0u32, 0u32));
                self.stats.arrays += 1;
            } else {
                facts.push(f);
            }
        }
        let parent_at: std::collections::HashMap<String, usize> = parents
            .iter()
            .enumerate()
            .map(|(i, (p, _, _))| (p.job_id.clone(), i))
            .collect();
        // What was held back comes first, one tick nearer; this tick's events follow as they are
        // made, put on the bus a chunk at a time (an array window's 10,000 events held whole,
        // their details as JSON trees, were ~100 MB at the ten-million campaign's peak).
        let mut delivery = Delivery::default();
        for (wait, e) in std::mem::take(&mut self.held) {
            self.place(&mut delivery, wait, e);
        }
        for f in &facts {
            let retry = retry_strategy_of(&f.retry_strategy);
            // A child's fate is its granule's at its attempt, whether it runs as a child or
            // alone: the same plan gives the same outcomes in either mode.
            let fate_key = match (&f.array, GranuleId::parse(&f.granule_id)) {
                (Some(ArrayPlace::Child { .. }), Ok(g)) => {
                    let campaign = f
                        .campaign
                        .as_deref()
                        .and_then(|c| granary::domain::campaign::Campaign::parse(c).ok());
                    granary::domain::job_name::job_name(campaign.as_ref(), &g, f.attempt)
                }
                _ => f.job_name.clone(),
            };
            let mut fate = self.plan.fate(&fate_key, &f.granule_id, &retry);
            self.stats.jobs += 1;
            // Terminated before it ran: cancelled, no attempt, the terminator's reason.
            let terminated = self.terminations.take(&f.job_id);
            if terminated.is_some() {
                fate.ends.clear();
                fate.succeeded = false;
                fate.lost = false;
                self.cancelled += 1;
            }
            self.stats.batch_internal_retries += (fate.ends.len() as u64).saturating_sub(1);
            if self.plan.intermediate_events {
                for k in 1..fate.ends.len() {
                    let event = bus_event(state_change_event(f, &fate.ends[..k], "RUNNABLE"));
                    self.place(&mut delivery, 0, event);
                    self.stats.intermediate += 1;
                }
            }
            let status = if fate.succeeded {
                "SUCCEEDED"
            } else {
                "FAILED"
            };
            let mut event = state_change_event(f, &fate.ends, status);
            if let Some(reason) = terminated {
                event["detail"]["statusReason"] = reason.into();
            }
            let parsed = BatchJobStateChange::from_value(&event)
                .context("simulator built an unparsable event")?;
            let c = classify(&parsed.detail).context("simulator built a non-terminal event")?;
            self.ledger
                .settle(&f.job_id, parsed.detail.status, &event["detail"])
                .await?;
            let parent = match &f.array {
                Some(ArrayPlace::Child { .. }) => f
                    .job_id
                    .rsplit_once(':')
                    .and_then(|(id, _)| parent_at.get(id).copied()),
                _ => None,
            };
            if let Some((_, succeeded, failed)) = parent.and_then(|p| parents.get_mut(p)) {
                if fate.succeeded {
                    *succeeded += 1;
                } else {
                    *failed += 1;
                }
            }
            match c.route() {
                Route::Done => self.stats.succeeded += 1,
                Route::RetryQueue => self.stats.retryable += 1,
                Route::FailureDlq => self.stats.dead_letter_bound += 1,
                Route::Cancelled => {}
            }
            if self.keep_plan {
                // A child is named by its array's name and its index: a window submitted twice
                // would show as two jobs of one name, as two single jobs of one name do.
                let job_name = match &f.array {
                    Some(ArrayPlace::Child { index, .. }) => format!("{}:{index}", f.job_name),
                    _ => f.job_name.clone(),
                };
                self.planned.push(PlannedJob {
                    job_id: f.job_id.clone(),
                    job_name,
                    granule_id: f.granule_id.clone(),
                    attempt: f.attempt,
                    batch_attempts: fate.ends.len(),
                    route: c.route(),
                    reason: c.reason,
                    campaign: f.campaign.clone(),
                });
            }
            let delay = if fate.delayed {
                self.stats.delayed += 1;
                self.plan.delay_ticks
            } else {
                0
            };
            // EventBridge gave up delivering it: only DescribeJobs (the reconciler) can tell.
            if fate.lost {
                self.stats.lost += 1;
                continue;
            }
            if fate.duplicate {
                self.stats.duplicates += 1;
                self.place(&mut delivery, delay + 1, bus_event(event.clone()));
            }
            self.place(&mut delivery, delay, bus_event(event));
            if delivery.due.len() >= EVENTS_PUT_AT_ONCE {
                self.deliver(&mut delivery).await?;
            }
        }
        // Each parent ends once its children have, with their count (its own event routes
        // nothing; the rule delivers it all the same).
        for (parent, succeeded, failed) in &parents {
            let event = array_parent_event(parent, *succeeded, *failed);
            let status = if *failed == 0 {
                granary::domain::batch_event::JobStatus::Succeeded
            } else {
                granary::domain::batch_event::JobStatus::Failed
            };
            self.ledger
                .settle(&parent.job_id, status, &event["detail"])
                .await?;
            self.place(&mut delivery, 0, bus_event(event));
        }
        self.deliver(&mut delivery).await?;
        Ok(new_ids.len())
    }

    /// An event made (or held) this tick: due now while the tick's cap allows, else kept for a
    /// later tick, one tick nearer (this is the reordering).
    fn place(&mut self, delivery: &mut Delivery, wait: u32, event: BusEvent) {
        let cap = self
            .max_events_per_tick
            .min(self.room.unwrap_or(usize::MAX));
        if wait == 0 && delivery.put + delivery.due.len() < cap {
            delivery.due.push(event);
        } else if wait == 0 {
            self.held.push((0, event));
        } else {
            self.held.push((wait - 1, event));
        }
    }

    /// Puts the events due so far on the bus, in the order they were placed.
    async fn deliver(&mut self, delivery: &mut Delivery) -> Result<()> {
        let due = std::mem::take(&mut delivery.due);
        if due.is_empty() {
            return Ok(());
        }
        delivery.put += due.len();
        self.stats.events += due.len() as u64;
        self.bus
            .put_events(due)
            .await
            .context("putting Batch events on the bus")
    }
}

/// One tick's events on their way to the bus: those due and not yet put, and how many it put.
#[derive(Default)]
struct Delivery {
    due: Vec<BusEvent>,
    put: usize,
}

/// Events put on the bus in one call while a tick makes them.
const EVENTS_PUT_AT_ONCE: usize = 1_000;
