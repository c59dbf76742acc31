//! A whole campaign on the emulator (or on the in-memory twins): stack, sample inventory, local
//! runtime, and the accounting at the end ("did anything get lost").

use super::events::default_retry_strategy;
use super::fault_plan::FaultPlan;
use super::granule_list::GranuleList;
use super::in_memory::{InMemoryBatch, RuleToQueue};
use super::runner::{LocalRuntime, RunnerOptions};
use super::simulator::BatchSimulator;
use super::stack::{config_from, EmulatorStack, StackOptions};
use anyhow::{Context, Result};
use granary::adapters::aws::{AwsClients, EventBridgeBus, SqsQueue};
use granary::adapters::memory::{MemoryQueue, MemoryStore};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::adapters::tap::counting::RequestCounts;
use granary::adapters::tap::TappedQueue;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::layout::logs::{LogKey, LogOutcome};
use granary::handlers::Ctx;
use granary::ports::{PutCondition, Queue};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CampaignSpec {
    pub granules: usize,
    pub inventories: usize,
    pub plan: FaultPlan,
    pub runner: RunnerOptions,
    /// The job definition's RetryStrategy.attempts.
    pub batch_attempts: i32,
    pub env: Vec<(String, String)>,
    /// How long after SubmitJob the in-memory Batch's ListJobs shows a job (none by default; see
    /// `InMemoryBatch::listing_lag`).
    pub listing_lag: std::time::Duration,
    /// SubmitJob calls the in-memory Batch accepts in a second (`None`: no limit; Batch's own
    /// is 50 per account). With `GRANARY_SUBMIT_JOB_RATE` in `env`, the submitters pace
    /// themselves to it.
    pub submit_limit: Option<usize>,
}

impl Default for CampaignSpec {
    fn default() -> Self {
        Self {
            granules: 10_000,
            inventories: 2,
            plan: FaultPlan::default(),
            runner: RunnerOptions::default(),
            batch_attempts: 2,
            env: Vec::new(),
            listing_lag: std::time::Duration::ZERO,
            submit_limit: None,
        }
    }
}

/// The spec's configuration overrides, with the local runtime's defaults.
fn campaign_env(spec: &CampaignSpec) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = spec.env.iter().cloned().collect();
    // Locally, a delivery that dies is retried within seconds, not minutes.
    env.entry("GRANARY_ROUTE_LEASE_SECS".into())
        .or_insert_with(|| "10".into());
    env
}

pub use super::granule_list::{sample_granules, SampleGranules};

/// Whether a failure-DLQ message is of `campaign`'s (its `campaign` field; none: the unnamed
/// campaign's). Messages that name no granule or item (poison notices) count for every campaign.
pub fn dlq_message_of(campaign: Option<&granary::domain::campaign::Campaign>, body: &str) -> bool {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(body) else {
        return true;
    };
    if message.get("granule_id").is_none() && message.get("item_id").is_none() {
        return true;
    }
    message.get("campaign").and_then(|c| c.as_str()) == campaign.map(|c| c.as_str())
}

/// maxReceiveCount of the retry queue's redrive policy in infra/template.yaml.
pub const RETRY_QUEUE_MAX_RECEIVES: u32 = 10;
/// maxReceiveCount of the Batch events queue's redrive policy in infra/template.yaml.
pub const EVENTS_QUEUE_MAX_RECEIVES: u32 = 5;

pub struct Campaign {
    /// The emulator stack it runs on; `None` for a campaign on the in-memory twins.
    pub stack: Option<EmulatorStack>,
    pub runtime: LocalRuntime,
    pub counts: Arc<RequestCounts>,
    /// Every granule the campaign's inventories list, in their order.
    pub granules: GranuleList,
    /// Where the events queue's redrive policy puts events that failed the monitor five times.
    events_dlq: Arc<dyn Queue>,
    /// The in-memory Batch, for a campaign on the in-memory twins.
    pub in_memory_batch: Option<Arc<InMemoryBatch>>,
    /// The in-memory twins' scratch files (handles to the same unlinked files), to say how much
    /// disk a campaign's bodies and job details took.
    scratch_files: Vec<std::fs::File>,
    /// Whether [`Campaign::summarize`] hands back the DLQ's messages (`Summary::dlq`, on by
    /// default; the bench's ten million granules' 200,000 are ~200 MB it does not need).
    pub keep_dlq_messages: bool,
}

/// The events queue's depth at an endpoint past which the simulator holds Batch's events
/// (`RunnerOptions::events_queue_limit`): a few rounds of the monitor's receives (4 batches of
/// 10 a round), and shallow enough that moto's walk of the queue on every receive stays cheap.
const ENDPOINT_EVENTS_QUEUE_LIMIT: u64 = 200;

impl Campaign {
    /// A campaign on the emulator (or any endpoint with Batch): provisions a stack named `name`.
    pub async fn setup(
        clients: &AwsClients,
        iam: &aws_sdk_iam::Client,
        name: &str,
        spec: &CampaignSpec,
    ) -> Result<Self> {
        let options = StackOptions {
            batch_attempts: spec.batch_attempts,
            env: campaign_env(spec),
        };
        let stack = EmulatorStack::provision(clients, iam, name, options).await?;
        let counts = Arc::new(RequestCounts::default());
        // Without Batch at the endpoint (LocalStack), jobs go to granary's in-memory Batch; S3,
        // SQS and EventBridge stay the endpoint's.
        let super::stack::StackBatch {
            jobs,
            ledger,
            in_memory: in_memory_batch,
        } = super::stack::stack_batch(&stack, clients);
        let mut ctx = Ctx::aws(stack.config()?, clients)?;
        ctx.jobs = jobs;
        let ctx = ctx.tapped(counts.clone());
        let events_queue: Arc<dyn Queue> = Arc::new(TappedQueue {
            inner: Arc::new(SqsQueue::new(clients.sqs.clone(), &stack.events_queue_url)),
            tap: counts.clone(),
        });
        let events_dlq = Arc::new(SqsQueue::new(clients.sqs.clone(), &stack.events_dlq_url));
        let simulator = BatchSimulator::new(
            ledger,
            Arc::new(EventBridgeBus::new(clients.events.clone(), "default")),
            spec.plan.clone(),
        );
        let mut spec = spec.clone();
        spec.runner
            .events_queue_limit
            .get_or_insert(ENDPOINT_EVENTS_QUEUE_LIMIT);
        let mut campaign = Self::assemble(
            Some(stack),
            ctx,
            counts,
            events_queue,
            events_dlq,
            simulator,
            &spec,
        )
        .await?;
        campaign.in_memory_batch = in_memory_batch;
        Ok(campaign)
    }

    /// The same campaign on the in-memory twins of every port (store, queues, Batch, the
    /// EventBridge rule): granary's own cost, with no emulator in the loop. The events queue has
    /// no redrive here, so an event that keeps failing the monitor shows as a campaign that does
    /// not settle rather than in an events DLQ.
    pub async fn in_memory(spec: &CampaignSpec) -> Result<Self> {
        let mut spec = spec.clone();
        spec.runner.submit_quota |= spec.submit_limit.is_some();
        let spec = &spec;
        let mut env = campaign_env(spec);
        for (k, v) in [
            ("GRANARY_BUCKET", "granary-in-memory"),
            ("GRANARY_JOB_QUEUE", "granary-jobs"),
            ("GRANARY_JOB_DEFINITION", "granary-job"),
            ("GRANARY_RETRY_QUEUE_URL", "retry"),
            ("GRANARY_FAILURE_DLQ_URL", "failure-dlq"),
            ("GRANARY_IMPORT_QUEUE_URL", "import"),
        ] {
            env.entry(k.to_owned()).or_insert_with(|| v.to_owned());
        }
        let config = config_from(&env)?;
        let attempts = u32::try_from(spec.batch_attempts).unwrap_or(1).max(1);
        let jobs = config
            .jobs
            .clone()
            .context("the in-memory campaign's configuration names no job queue")?;
        let batch_scratch = tempfile::tempfile().context("a scratch file for the Batch twin")?;
        let mut scratch_files = vec![batch_scratch
            .try_clone()
            .context("a second handle on the Batch twin's scratch file")?];
        let batch = Arc::new(
            InMemoryBatch::new(
                &jobs.job_queue,
                &jobs.job_definition,
                default_retry_strategy(attempts),
            )
            .spilling(batch_scratch)
            .listing_lag(spec.listing_lag)
            .submit_limit(spec.submit_limit),
        );
        // The submitters' pacing, as wiring gives a deployed function.
        let paced: Arc<dyn granary::ports::JobRunner> = match jobs.submit_spacing {
            Some(spacing) => Arc::new(granary::adapters::paced::PacedJobs {
                inner: batch.clone(),
                pacer: granary::adapters::paced::Pacer::spaced(spacing),
            }),
            None => batch.clone(),
        };
        let (retry_url, dlq_url) = config.queue_names();
        let counts = Arc::new(RequestCounts::default());
        // Bodies go to a scratch file (removed when the campaign ends): a million granules write
        // gigabytes of logs, records and history.
        let scratch = tempfile::tempfile().context("a scratch file for the in-memory store")?;
        scratch_files.push(
            scratch
                .try_clone()
                .context("a second handle on the store's scratch file")?,
        );
        // The queues' redrive policies as the template sets them (`local/tests` checks the
        // counts against infra/template.yaml): a retry message the requeuer keeps failing on is
        // parked on the failure DLQ, an event the monitor keeps failing on on the events DLQ.
        let failure_dlq = Arc::new(MemoryQueue::new(&dlq_url));
        let ctx = Ctx {
            store: Arc::new(MemoryStore::spilling(scratch)),
            jobs: paced,
            retry_queue: Arc::new(
                MemoryQueue::new(&retry_url)
                    .with_redrive(failure_dlq.clone(), RETRY_QUEUE_MAX_RECEIVES),
            ),
            failure_dlq,
            ..Ctx::in_memory(config)
        }
        .tapped(counts.clone());
        let events_dlq = Arc::new(MemoryQueue::new("batch-events-dlq"));
        let events = Arc::new(
            MemoryQueue::new("batch-events")
                .with_redrive(events_dlq.clone(), EVENTS_QUEUE_MAX_RECEIVES),
        );
        let events_queue: Arc<dyn Queue> = Arc::new(TappedQueue {
            inner: events.clone(),
            tap: counts.clone(),
        });
        let rule = Arc::new(RuleToQueue::new(events, batch.job_queue_arn()));
        let mut simulator = BatchSimulator::new(batch.clone(), rule, spec.plan.clone());
        // The per-tick cap stands in for the emulator's slow ReceiveMessage; without an emulator
        // it would only hold a fast feeder's events back in memory (a million granules' worth).
        simulator.max_events_per_tick = usize::MAX;
        let mut campaign =
            Self::assemble(None, ctx, counts, events_queue, events_dlq, simulator, spec).await?;
        campaign.in_memory_batch = Some(batch);
        campaign.scratch_files = scratch_files;
        Ok(campaign)
    }

    /// The sample inventories in the store, and the runtime around the handlers.
    async fn assemble(
        stack: Option<EmulatorStack>,
        mut ctx: Ctx,
        counts: Arc<RequestCounts>,
        events_queue: Arc<dyn Queue>,
        events_dlq: Arc<dyn Queue>,
        simulator: BatchSimulator,
        spec: &CampaignSpec,
    ) -> Result<Self> {
        // One inventory's rows at a time (a campaign of millions never holds them all).
        let per = spec.granules.div_ceil(spec.inventories.max(1)).max(1);
        let mut rows = SampleGranules::new(spec.plan.seed).take(spec.granules);
        let granules = GranuleList::sample(spec.plan.seed, spec.granules);
        for i in 0.. {
            let chunk: Vec<InventoryRow> = rows.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            let bytes = write_inventory(&chunk, &InventoryLayout::granary())
                .context("writing the sample inventory")?;
            // Inventory keys sort in feed order: newest first.
            ctx.store
                .put(
                    &format!("{}{:04}.parquet", ctx.config.layout.inventory_prefix, i + 1),
                    bytes,
                    PutCondition::Overwrite,
                )
                .await?;
        }
        // Batch learns of a job when it is submitted; so does the simulator. An array window's
        // children read their claim from granary's bucket, as their containers would.
        let mut simulator = simulator;
        simulator.read_claims_from(ctx.store.clone());
        ctx.jobs = simulator.watch(ctx.jobs.clone());
        let runtime = LocalRuntime::new(ctx, events_queue, simulator, spec.runner.clone());
        Ok(Self {
            stack,
            runtime,
            counts,
            granules,
            events_dlq,
            in_memory_batch: None,
            scratch_files: Vec::new(),
            keep_dlq_messages: true,
        })
    }

    /// Bytes the in-memory twins have written to their scratch files (0 on the emulator).
    pub fn scratch_bytes(&self) -> std::io::Result<u64> {
        self.scratch_files
            .iter()
            .map(|f| f.metadata().map(|m| m.len()))
            .sum()
    }

    pub async fn summarize(&self, wall: Duration) -> Result<Summary> {
        let ctx = &self.runtime.ctx;
        let prefix = &ctx.config.layout.log_prefix;
        let parser = &ctx.config.layout.id_parser;
        // Per granule, by its place in the campaign's list: a million granules' logs are read
        // one partition folder at a time, never all keys at once.
        let places = self.granules.places()?;
        let place = |g: &str| places.of(g);
        // Attempt numbers in 16 bits (a granule's attempts are a handful; 65,535 at most are told
        // apart): 20 MB less at ten million granules, whose accounting sets the bench's peak RSS.
        let mut success_attempt: Vec<u16> = vec![0; self.granules.len()];
        let attempt_of = |a: u32| u16::try_from(a).unwrap_or(u16::MAX);
        let mut still_failing: Vec<bool> = vec![false; self.granules.len()];
        let mut partitions: BTreeSet<String> = BTreeSet::new();
        for g in self.granules.iter() {
            let Ok(id) = GranuleId::parse(&g) else {
                continue;
            };
            let facts = parser.facts(&id);
            for outcome in [LogOutcome::Success, LogOutcome::Failure] {
                partitions.insert(LogKey::new(outcome, &facts, &id, 1).partition_prefix(prefix));
            }
        }
        let mut logs = 0u64;
        for partition in &partitions {
            for meta in ctx.store.list(partition).await? {
                let Ok(key) = LogKey::parse(prefix, &meta.key) else {
                    continue;
                };
                logs += 1;
                let Some(i) = place(key.granule_id.as_str()) else {
                    continue;
                };
                match key.outcome {
                    LogOutcome::Success => {
                        success_attempt[i] = success_attempt[i].max(attempt_of(key.attempt))
                    }
                    LogOutcome::Failure => still_failing[i] = true,
                }
            }
        }
        let platform = |g: &str| {
            GranuleId::parse(g)
                .map(|id| parser.facts(&id).platform_label().to_owned())
                .unwrap_or_default()
        };
        let mut dlq_by_reason: BTreeMap<String, u64> = BTreeMap::new();
        // By place, as the logs are: a dead letter of a granule not in the list is no outcome of
        // this campaign's (a set of 200,000 ids was ~20 MB at the accounting's peak).
        let mut dead: Vec<bool> = vec![false; self.granules.len()];
        let mut stale_parked_retries = 0u64;
        let mut dlq_messages = 0u64;
        let mut dlq = Vec::new();
        peek_each(ctx.failure_dlq.as_ref(), |m| {
            // Another campaign's dead letters are not this one's outcomes.
            if !dlq_message_of(ctx.campaign(), &m.body) {
                return;
            }
            dlq_messages += 1;
            *dlq_by_reason
                .entry(
                    m.attributes
                        .get("reason")
                        .cloned()
                        .unwrap_or_else(|| "(no reason)".into()),
                )
                .or_default() += 1;
            if let Ok(e) = serde_json::from_str::<GranuleProcessingEvent>(&m.body) {
                let at = place(e.granule_id.as_str());
                if is_stale_parked_retry(&m, at.map(|i| u32::from(success_attempt[i]))) {
                    stale_parked_retries += 1;
                } else if let Some(i) = at {
                    dead[i] = true;
                }
            }
            if self.keep_dlq_messages {
                dlq.push(m);
            }
        })
        .await?;
        let mut per_platform: BTreeMap<String, PlatformCounts> = BTreeMap::new();
        let mut attempts_histogram: BTreeMap<u32, u64> = BTreeMap::new();
        let mut succeeded = 0u64;
        for (g, &attempt) in self.granules.iter().zip(&success_attempt) {
            if attempt == 0 {
                continue;
            }
            succeeded += 1;
            per_platform.entry(platform(&g)).or_default().succeeded += 1;
            *attempts_histogram.entry(u32::from(attempt)).or_default() += 1;
        }
        for (g, _) in self.granules.iter().zip(&dead).filter(|(_, &d)| d) {
            per_platform.entry(platform(&g)).or_default().dead_lettered += 1;
        }
        let unaccounted = success_attempt
            .iter()
            .zip(&dead)
            .filter(|(&attempt, &d)| attempt == 0 && !d)
            .count() as u64;
        let ended_twice = success_attempt
            .iter()
            .zip(&dead)
            .filter(|(&attempt, &d)| attempt > 0 && d)
            .count() as u64;
        let events_dlq = self.events_dlq.depth().await?;
        let n = self.granules.len().max(1) as f64;
        let secs = wall.as_secs_f64().max(1e-9);
        let sim = &self.runtime.simulator.stats;
        Ok(Summary {
            granules: self.granules.len() as u64,
            succeeded,
            dead_lettered: dead.iter().filter(|d| **d).count() as u64,
            dlq_messages,
            stale_parked_retries,
            still_failing_logs: still_failing.iter().filter(|f| **f).count() as u64,
            unaccounted,
            ended_twice,
            per_platform,
            attempts_histogram,
            dlq_by_reason,
            events_dlq: events_dlq.visible + events_dlq.in_flight,
            log_objects: logs,
            batch_jobs: sim.jobs,
            batch_internal_retries: sim.batch_internal_retries,
            events_emitted: sim.events,
            duplicate_events: sim.duplicates,
            delayed_events: sim.delayed,
            wall_secs: secs,
            granules_per_sec: n / secs,
            s3_requests: self.counts.s3_total(),
            sqs_requests: self.counts.sqs_total(),
            s3_per_granule: self.counts.s3_total() as f64 / n,
            sqs_per_granule: self.counts.sqs_total() as f64 / n,
            dlq,
        })
    }
}

/// Reads every message on a queue without consuming it: each is made visible again once read,
/// so an operator exploring the campaign afterwards (`granary redrive --dry-run`) sees them all.
pub async fn peek_all(queue: &dyn Queue) -> Result<Vec<granary::ports::ReceivedMessage>> {
    let mut all = Vec::new();
    peek_each(queue, |m| all.push(m)).await?;
    Ok(all)
}

/// Every message on `queue`, each given to `visit` once, then made visible again; only their
/// ids and receipts are kept meanwhile (a ten-million-granule campaign's 200,000 dead letters
/// held whole were ~200 MB at the very end of the run).
pub async fn peek_each(
    queue: &dyn Queue,
    mut visit: impl FnMut(granary::ports::ReceivedMessage),
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    let mut receipts = Vec::new();
    // As many receives as the queue's depth needs, and some: a message read once stays invisible
    // for 30 s, so a long peek meets the first ones again (kept once) and must stop somewhere.
    // (A fixed 10,000 receives read at most 100,000 messages: a ten-million-granule campaign's
    // 200,000 dead letters were half unread, and their granules counted unaccounted.)
    let depth = queue.depth().await?;
    let receives = (depth.visible + depth.in_flight).div_ceil(10) + 100;
    for _ in 0..receives {
        let got = queue.receive(10, 30, 0).await?;
        if got.is_empty() {
            break;
        }
        for m in got {
            if seen.insert(m.message_id.clone()) {
                receipts.push(m.receipt_handle.clone());
                visit(m);
            }
        }
    }
    for receipt in &receipts {
        queue.release(receipt).await?;
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PlatformCounts {
    pub succeeded: u64,
    pub dead_lettered: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub granules: u64,
    pub succeeded: u64,
    pub dead_lettered: u64,
    pub dlq_messages: u64,
    /// Retry messages SQS parked on the failure DLQ (the requeuer failed on them
    /// maxReceiveCount times) for granules that then succeeded through another copy: stale,
    /// neither dead-lettered nor lost ([`is_stale_parked_retry`]).
    pub stale_parked_retries: u64,
    /// Granules with logs under outcome=failure (should equal the dead-lettered ones).
    pub still_failing_logs: u64,
    /// Granules neither succeeded nor dead-lettered: lost work. Must be 0.
    pub unaccounted: u64,
    /// Granules both succeeded and dead-lettered (a dead letter that is not a stale parked
    /// retry): an end handled twice, two ways. Must be 0.
    pub ended_twice: u64,
    pub per_platform: BTreeMap<String, PlatformCounts>,
    /// The attempt at which each successful granule succeeded.
    pub attempts_histogram: BTreeMap<u32, u64>,
    pub dlq_by_reason: BTreeMap<String, u64>,
    /// Events that failed the monitor five times (should be 0).
    pub events_dlq: u64,
    pub log_objects: u64,
    pub batch_jobs: u64,
    pub batch_internal_retries: u64,
    pub events_emitted: u64,
    pub duplicate_events: u64,
    pub delayed_events: u64,
    pub wall_secs: f64,
    pub granules_per_sec: f64,
    pub s3_requests: u64,
    pub sqs_requests: u64,
    pub s3_per_granule: f64,
    pub sqs_per_granule: f64,
    /// The DLQ's messages as read for this summary, when the campaign keeps them
    /// ([`Campaign::keep_dlq_messages`]; reading hides them for a while, so callers use these
    /// rather than reading again).
    #[serde(skip)]
    pub dlq: Vec<granary::ports::ReceivedMessage>,
}

/// A retry message on the failure DLQ that the retry queue's redrive policy moved there (its
/// outcome is RETRYABLE: the requeuer failed on it maxReceiveCount times, "Amazon SQS moves the
/// message to a dead-letter queue", Amazon SQS Developer Guide, "Using dead-letter queues"),
/// for a granule that succeeded at or after the attempt it retried: another copy of the same
/// message (SQS delivers at least once; the monitor may send twice) went through. It is not a
/// final failure: `granary redrive` of it finds the next attempt already submitted.
pub fn is_stale_parked_retry(
    m: &granary::ports::ReceivedMessage,
    succeeded_at: Option<u32>,
) -> bool {
    let retried = serde_json::from_str::<GranuleProcessingEvent>(&m.body).map(|e| e.attempt);
    parked_by_sqs(m) && matches!((retried, succeeded_at), (Ok(a), Some(s)) if s > a)
}

/// A message on the failure DLQ that the retry queue's redrive policy moved there, not one
/// granary sent: it keeps the monitor's attributes, outcome RETRYABLE (granary's own dead
/// letters are NON_RETRYABLE).
pub fn parked_by_sqs(m: &granary::ports::ReceivedMessage) -> bool {
    use granary::contracts::messages::{attribute, Outcome};
    m.attributes.get(attribute::OUTCOME).map(String::as_str) == Some(Outcome::Retryable.as_str())
}

#[cfg(test)]
mod tests {
    use super::is_stale_parked_retry;
    use granary::ports::ReceivedMessage;

    fn on_dlq(outcome: &str, attempt: u32) -> ReceivedMessage {
        ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body: format!(
                r#"{{"granule_id":"HLS.S30.T30DIB.2025039T000129.v2.0","attempt":{attempt}}}"#
            ),
            attributes: [("outcome".to_owned(), outcome.to_owned())].into(),
            receive_count: 1,
            sent_at_ms: None,
        }
    }

    #[test]
    fn only_a_parked_retry_of_a_granule_that_later_succeeded_is_stale() {
        assert!(is_stale_parked_retry(&on_dlq("RETRYABLE", 1), Some(2)));
        // Not yet succeeded, or succeeded at the very attempt that failed: a real question.
        assert!(!is_stale_parked_retry(&on_dlq("RETRYABLE", 1), None));
        assert!(!is_stale_parked_retry(&on_dlq("RETRYABLE", 2), Some(2)));
        // A final failure is never stale, whatever else happened.
        assert!(!is_stale_parked_retry(&on_dlq("NON_RETRYABLE", 1), Some(2)));
    }
}
