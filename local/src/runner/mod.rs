//! The local Lambda runner: fires the feeder on its schedule and polls each SQS event source,
//! calling the same handlers Lambda would with the same event JSON, honouring batch size,
//! visibility timeout and batchItemFailures.

use super::simulator::BatchSimulator;
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsEvent;
use granary::adapters::tap::faults::{FaultCounts, Faults};
use granary::adapters::tap::Tap;
use granary::handlers::feeder::FeederSummary;
use granary::handlers::{reconciler, Ctx};
use granary::ports::{Queue, ReceivedMessage};
use rand::SeedableRng;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

mod importer;
mod invocations;
mod pollers;
pub use pollers::{IMPORT_BATCH_SIZE, IMPORT_VISIBILITY_TIMEOUT_SECS};
mod round;
mod schedules;
#[cfg(test)]
mod tests;

#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// The feeder schedule's period.
    pub feeder_interval: Duration,
    pub granule_submit_count: u64,
    /// SQS event-source batch size (Lambda's BatchSize).
    pub batch_size: u32,
    pub visibility_timeout_secs: u32,
    /// Concurrent invocations per event source.
    pub concurrency: usize,
    /// Give up if the campaign has not settled by then.
    pub deadline: Duration,
    /// Crashes and throttling injected into the handlers' external calls (`granary-local chaos`).
    pub chaos: Option<ChaosOptions>,
    /// The reconciler's schedule (in the stack, the item sweeper's). It acts only on open claims
    /// older than GRANARY_RECONCILE_AFTER_SECS.
    pub reconcile_interval: Duration,
    /// Give up, saying what is still open, once nothing has moved for this long: no job
    /// submitted, no event emitted, no queue, DLQ or open-claims count changed.
    pub stall_limit: Duration,
    /// Batch's SubmitJob quota is enforced by the Batch twin: a feeder run stalled by its
    /// refusals is one the schedule runs again, not the end of the campaign.
    pub submit_quota: bool,
    /// Invocations run on the async runtime's worker threads, side by side as Lambda runs them:
    /// the feeder's run goes on while the simulator ticks and the queues drain, and a drain's
    /// concurrent invocations are spread over the threads (a campaign of millions of granules
    /// then uses every core). Off by default: the order in which the handlers' calls interleave
    /// would follow the threads, and chaos replays a seed (the two do not mix).
    pub parallel: bool,
    /// Batch's events are put on the bus only while the events queue holds fewer than this many
    /// messages (visible and in flight); the simulator holds the rest until the monitor has
    /// drained some. On moto every ReceiveMessage and GetQueueAttributes walks the whole queue
    /// (`Queue.attributes` counts every message for each message received), so a queue 10,000
    /// deep drained at ~1 event a second where a shallow one drains at the monitor's own pace
    /// (py-spy of moto 5.2.5 in a 2,500-granule array campaign: 39% of its samples under
    /// ReceiveMessage). An event held here is late, as EventBridge's are while a target fails
    /// (it retries for up to 24 hours by default), and none is lost; more ends then reach the
    /// reconciler first than would on AWS. `None`: delivered as they are made.
    pub events_queue_limit: Option<u64>,
    /// Each function's timeout: an invocation that outlives it is dropped where it stands.
    pub timeouts: FunctionTimeouts,
    /// The importer's discovery schedule (`None`: no importer). With it, the import queue is
    /// polled as the importer-step function's event source, and the sweeper's schedule runs
    /// the item sweeper's whole pass (the reconciler, then the sweep), as it does deployed.
    pub discover_interval: Option<Duration>,
}

/// Each function's timeout as the template sets it (`Timeout:`; `local/tests/function_timeouts.rs`
/// compares them). An invocation that outlives its function's timeout is dropped mid-await, as
/// Lambda ends it: a crash beside the call-boundary ones, which the proof must survive. Lambda
/// then treats an SQS batch as failed: "If the invocation fails or times out, every message in
/// the batch will be returned to the queue" after its visibility timeout (AWS Lambda Developer
/// Guide, "Lambda event source mappings", retries on errors); a scheduled run's work is simply
/// cut short, and the schedule fires again. (Lambda also retries a failed scheduled, that is
/// asynchronous, invocation twice, a minute and two minutes later: not modelled here; the
/// runs it adds do what the next scheduled one would.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionTimeouts {
    pub feeder: Duration,
    pub monitor: Duration,
    pub requeuer: Duration,
    /// The item sweeper's, whose schedule runs the reconciler.
    pub sweeper: Duration,
    pub importer_discover: Duration,
    pub importer_step: Duration,
}

impl Default for FunctionTimeouts {
    fn default() -> Self {
        Self {
            feeder: Duration::from_secs(300),
            monitor: Duration::from_secs(60),
            requeuer: Duration::from_secs(60),
            sweeper: Duration::from_secs(300),
            importer_discover: Duration::from_secs(600),
            importer_step: Duration::from_secs(900),
        }
    }
}

/// What `granary-local chaos` does to the handlers on top of the fault plan's Batch misbehaviour.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    pub seed: u64,
    /// Share of handler invocations that die at a random external call.
    pub crash_rate: f64,
    /// Share of external calls refused as throttled.
    pub throttle_rate: f64,
    /// A crash happens at a call chosen uniformly in 1..=N, where N is the most calls any
    /// invocation of the same function has made so far (at least this): any call of an
    /// invocation may be its last, the 2,000th of a feeder run as well as the first. An
    /// invocation making fewer calls than the one drawn survives (only crashes that happened
    /// are counted).
    pub min_crash_range: u64,
}

impl Default for ChaosOptions {
    fn default() -> Self {
        Self {
            seed: 42,
            crash_rate: 0.01,
            throttle_rate: 0.05,
            min_crash_range: 12,
        }
    }
}

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            feeder_interval: Duration::from_millis(200),
            granule_submit_count: 200,
            batch_size: 10,
            visibility_timeout_secs: 2,
            concurrency: 4,
            deadline: Duration::from_secs(3600),
            chaos: None,
            reconcile_interval: Duration::from_secs(1),
            stall_limit: Duration::from_secs(300),
            submit_quota: false,
            parallel: false,
            events_queue_limit: None,
            timeouts: FunctionTimeouts::default(),
            discover_interval: None,
        }
    }
}

/// Live figures for progress display.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub submitted: u64,
    pub succeeded: u64,
    pub retrying: u64,
    pub dead_lettered: u64,
    pub feeder_runs: u64,
    /// Feeder runs that ended in an error (the schedule fires again, as on AWS).
    pub feeder_errors: u64,
    /// Invocations that died at an injected crash.
    pub crashed_invocations: u64,
    /// Invocations that outlived their function's timeout and were dropped (counted among the
    /// crashed too).
    pub timed_out_invocations: u64,
    pub monitor_invocations: u64,
    pub requeuer_invocations: u64,
    pub importer_invocations: u64,
    pub reconciler_runs: u64,
    /// Finished jobs whose end only the reconciler saw (their event was lost).
    pub reconciled: u64,
    /// Granules the reconciler's passes newly saw handled, ends it handed on and windows it
    /// closed: its progress, which a long pass over large windows makes without anything else
    /// moving.
    pub reconciler_progress: u64,
    pub failed_records: u64,
    pub inventories_complete: bool,
    /// Time spent in each phase, for finding the bottleneck and pricing Lambda: the feeder's runs'
    /// own; a drain's wall time when the runner goes one invocation after another, and under
    /// `RunnerOptions::parallel` (the monitor's poller on threads of its own) its invocations'
    /// durations added up, as Lambda bills invocations that run side by side.
    pub feeder_time: Duration,
    pub simulator_time: Duration,
    pub monitor_time: Duration,
    pub requeuer_time: Duration,
}

/// The functions the local runtime plays (the reconciler runs in the item sweeper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LambdaFunction {
    Feeder,
    Monitor,
    Requeuer,
    Sweeper,
    ImporterDiscover,
    ImporterStep,
}

pub struct LocalRuntime {
    pub ctx: Ctx,
    /// A tap per function its invocations' calls also pass through (IAM by use records them, the
    /// bench counts them); it watches and changes nothing (`Ctx::watched`).
    pub function_taps: std::collections::BTreeMap<LambdaFunction, Arc<dyn Tap>>,
    pub events_queue: Arc<dyn Queue>,
    pub simulator: BatchSimulator,
    pub options: RunnerOptions,
    pub progress: Progress,
    pub last_feed: Option<FeederSummary>,
    /// The last reconciler pass's summary (what keeps open claims open, when a campaign stalls).
    pub last_reconcile: Option<reconciler::ReconcileSummary>,
    /// Calls, crashes and throttles injected so far (all zero without chaos).
    pub faults: Arc<FaultCounts>,
    /// Each invocation's faults under chaos, to count calls by function.
    invocations: Vec<(LambdaFunction, Arc<Faults>)>,
    /// The most calls one invocation of each function has made (the crash range under chaos),
    /// from `invocations[..calls_seen_upto]`.
    most_calls: std::collections::BTreeMap<LambdaFunction, u64>,
    calls_seen_upto: usize,
    chaos_rng: rand::rngs::StdRng,
}

/// The JSON Lambda sends for an SQS batch, parsed the way Lambda's runtime would parse it.
pub fn lambda_sqs_event(queue_name: &str, messages: &[ReceivedMessage]) -> Result<SqsEvent> {
    let records: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| {
            let attrs: serde_json::Map<String, serde_json::Value> = m
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), json!({"stringValue": v, "dataType": "String", "stringListValues": [], "binaryListValues": []})))
                .collect();
            json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": m.receive_count.to_string(),
                    "SentTimestamp": m.sent_at_ms.unwrap_or(0).to_string(),
                },
                "messageAttributes": attrs,
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_name,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).context("building the Lambda SQS event")
}

impl LocalRuntime {
    pub fn new(
        ctx: Ctx,
        events_queue: Arc<dyn Queue>,
        simulator: BatchSimulator,
        options: RunnerOptions,
    ) -> Self {
        Self {
            ctx,
            events_queue,
            simulator,
            chaos_rng: rand::rngs::StdRng::seed_from_u64(
                options.chaos.as_ref().map_or(0, |c| c.seed),
            ),
            options,
            progress: Progress::default(),
            function_taps: Default::default(),
            last_feed: None,
            last_reconcile: None,
            faults: Arc::default(),
            invocations: Vec::new(),
            most_calls: Default::default(),
            calls_seen_upto: 0,
        }
    }
}
