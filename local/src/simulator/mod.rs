//! The Batch simulator: notices jobs that reached the emulator's Batch queue, decides each one's
//! fate from the fault plan, and puts "Batch Job State Change" events on the EventBridge bus, from
//! where the stack's rule delivers them to the events queue — the path real Batch events take.

use crate::fault_plan::FaultPlan;
use crate::granule_list::id_hash;
use anyhow::Result;
use granary::domain::classify::Route;
use granary::ports::{BusEvent, EventBus, JobRunner};
use std::collections::HashSet;
use std::sync::Arc;

mod agenda;
mod ledger;
mod submissions;
mod tick;

pub use ledger::{EndpointBatch, JobLedger};
pub use submissions::{SubmissionTap, Submissions, Terminations};

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
    /// Jobs the job queue's watchdog cancelled after waiting past its limit for capacity.
    pub capacity_cancels: u64,
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
    /// Ends, DescribeJobs's catching up and deliveries still to come, when jobs take time.
    agenda: agenda::Agenda,
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
            agenda: agenda::Agenda::default(),
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

    /// Events held back (for reordering, or by the per-tick cap) and ends still to come, not
    /// yet delivered.
    pub fn pending(&self) -> usize {
        self.held.len() + self.agenda.len()
    }

    /// When the next job ends or event arrives, if jobs take time and one is still to come.
    pub fn next_due(&self) -> Option<tokio::time::Instant> {
        self.agenda.next_at()
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
}
