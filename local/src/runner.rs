//! The local Lambda runner: fires the feeder on its schedule and polls each SQS event source,
//! calling the same handlers Lambda would with the same event JSON, honouring batch size,
//! visibility timeout and batchItemFailures.

use super::simulator::BatchSimulator;
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use granary::adapters::tap::faults::{CrashMode, CrashPoint, FaultCounts, Faults};
use granary::adapters::tap::Tap;
use granary::handlers::feeder::{self, FeederEvent, FeederSummary};
use granary::handlers::{monitor, reconciler, requeuer, Ctx};
use granary::ports::{Queue, ReceivedMessage};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    pub monitor_invocations: u64,
    pub requeuer_invocations: u64,
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

/// Work the runner started on other threads and has not reaped yet (`RunnerOptions::parallel`).
#[derive(Default)]
struct UnderWay {
    feeding: Option<tokio::task::JoinHandle<FeederRun>>,
    monitoring: Option<tokio::task::JoinHandle<Result<Drained>>>,
}

impl UnderWay {
    fn any(&self) -> bool {
        self.feeding.is_some() || self.monitoring.is_some()
    }
}

/// What one drain of an event source did.
#[derive(Debug, Default)]
struct Drained {
    /// Records handed to invocations (handled or failed).
    handled: u64,
    failed: u64,
    crashed: u64,
    invocations: u64,
    /// The invocations' durations added up (side by side, more than the drain's wall time).
    busy: Duration,
}

/// Polls one event source until it has nothing visible, as Lambda's event source mapping does:
/// `concurrency` pollers, each one receive and one invocation, with the context `invocation`
/// gives. Under `RunnerOptions::parallel` the invocations run on the worker threads.
async fn drain(
    source: Source,
    queue: Arc<dyn Queue>,
    options: &RunnerOptions,
    mut invocation: impl FnMut() -> (Ctx, Option<Arc<Faults>>),
) -> Result<Drained> {
    let mut out = Drained::default();
    loop {
        let mut batches = Vec::new();
        for _ in 0..options.concurrency {
            let got = queue
                .receive(options.batch_size, options.visibility_timeout_secs, 0)
                .await?;
            if got.is_empty() {
                break;
            }
            batches.push(got);
        }
        if batches.is_empty() {
            return Ok(out);
        }
        let invocations: Vec<_> = once_per_round(batches)
            .into_iter()
            .map(|batch| {
                let (ctx, faults) = invocation();
                invoke(source, queue.clone(), batch, ctx, faults)
            })
            .collect();
        let ended: Vec<Result<Invoked>> = if options.parallel {
            let tasks = invocations
                .into_iter()
                .map(tokio::spawn)
                .collect::<Vec<_>>();
            futures::future::join_all(tasks)
                .await
                .into_iter()
                .map(|joined| joined.context("an invocation's task")?)
                .collect()
        } else {
            futures::future::join_all(invocations).await
        };
        for r in ended {
            let i = r?;
            out.handled += i.records;
            out.failed += i.failed;
            out.crashed += u64::from(i.crashed);
            out.invocations += 1;
            out.busy += i.took;
        }
    }
}

/// How long a round with nothing else to do waits for a feeder run or the monitor's poller
/// under way on another thread.
const UNDER_WAY_WAIT: Duration = Duration::from_millis(50);

/// Whether the feeder may start a run while `backlog` Batch events (waiting for the job monitor,
/// or held back by the simulator) are not handled yet: mostly jobs' ends, with the fault plan's
/// duplicates and intermediate states and the arrays' own events.
///
/// On AWS the feeder is metered by the jobs Batch still runs (`max_active_jobs`): jobs take
/// minutes, so ends reach the monitor at the pace the compute environment finishes them, and
/// Lambda scales the monitor out. The twins end a job the moment it is submitted, so nothing
/// meters the feeder but the monitor's own pace on the machine's cores: on a machine a few
/// times slower, a million-granule campaign held ~300,000 unhandled events in memory (1.3 GB of
/// RSS at its peak, against 0.4 GB once they were handled). Two feeder runs' worth of events
/// keeps the monitor busy and the backlog bounded, whatever the machine's speed.
fn feeder_may_run(backlog: u64, granule_submit_count: u64) -> bool {
    backlog <= granule_submit_count.saturating_mul(2)
}

/// One feeder run: its answer, whether it died at an injected crash, and how long it took.
struct FeederRun {
    run: std::result::Result<FeederSummary, granary::handlers::HandlerError>,
    crashed: bool,
    took: Duration,
}

/// What one invocation of the monitor or the requeuer did with its batch.
struct Invoked {
    records: u64,
    failed: u64,
    /// Whether it died at an injected crash.
    crashed: bool,
    /// How long it ran (what Lambda bills it for).
    took: Duration,
}

/// A round's batches with each message in one batch only, the one of its latest receive.
///
/// The round receives all its batches before it invokes any. Each receive starts a message's
/// visibility timeout (2 s in the runner, 1 s under chaos). moto answers a ReceiveMessage on a
/// deep queue slowly: ~1 s a call with 3,500 events waiting, after an array window's 10,000
/// children ended at once. So a message from the round's first receive could be visible again
/// by its third and be received twice. The 10,000-granule array campaign on the emulator then
/// handled one end up to four times side by side. Some events passed the queue's
/// `maxReceiveCount` and were parked on the events DLQ, so the reconciler had to find them.
/// Lambda's pollers invoke each batch as it comes, so none of this happens on AWS.
///
/// Keeps the latest receipt handle. Each receive of a message gives a new handle, and a
/// DeleteMessage with an older one may leave the message in the queue (Amazon SQS API
/// Reference, DeleteMessage). moto refuses it outright with ReceiptHandleIsInvalid once the
/// message is gone, which stopped that run. Distinct messages that carry the same event (the
/// fault plan's duplicated deliveries) have distinct ids, and all stay.
fn once_per_round(batches: Vec<Vec<ReceivedMessage>>) -> Vec<Vec<ReceivedMessage>> {
    let mut seen = HashSet::new();
    let mut latest_first: Vec<Vec<ReceivedMessage>> = batches
        .into_iter()
        .rev()
        .map(|batch| {
            batch
                .into_iter()
                .rev()
                .filter(|m| seen.insert(m.message_id.clone()))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect()
        })
        .filter(|batch: &Vec<ReceivedMessage>| !batch.is_empty())
        .collect();
    latest_first.reverse();
    latest_first
}

/// One invocation of the monitor or the requeuer on one batch, and what Lambda then does with
/// the batch's messages.
async fn invoke(
    source: Source,
    queue: Arc<dyn Queue>,
    batch: Vec<ReceivedMessage>,
    ctx: Ctx,
    faults: Option<Arc<Faults>>,
) -> Result<Invoked> {
    let started = Instant::now();
    let event = lambda_sqs_event(queue.name(), &batch)?;
    let response: SqsBatchResponse = match source {
        Source::Monitor => monitor::handle_sqs(&ctx, event).await,
        Source::Requeuer => requeuer::handle_sqs(&ctx, event).await,
    };
    let records = batch.len() as u64;
    // A dead invocation returns nothing to Lambda: every message of its batch comes back after
    // the visibility timeout, handled or not.
    if faults.as_ref().is_some_and(|f| f.crashed()) {
        return Ok(Invoked {
            records,
            failed: records,
            crashed: true,
            took: started.elapsed(),
        });
    }
    // Lambda deletes every record not reported as failed; failed ones reappear later.
    let failed: HashSet<String> = response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    for m in batch.iter().filter(|m| !failed.contains(&m.message_id)) {
        // A refused delete is not the function's error: Lambda's poller does not fail the
        // invocation over it, and the message, if still there, comes back after its visibility
        // timeout, as any redelivery does. moto refuses a handle whose message SQS moved to
        // the dead-letter queue on a later receive (past `maxReceiveCount`).
        if let Err(e) = queue.delete(&m.receipt_handle).await {
            tracing::warn!(queue = queue.name(), message_id = %m.message_id, error = %e, "deleting a handled message refused: it may come back");
        }
    }
    Ok(Invoked {
        records,
        failed: failed.len() as u64,
        crashed: false,
        took: started.elapsed(),
    })
}

#[derive(Clone, Copy)]
enum Source {
    Monitor,
    Requeuer,
}

impl Source {
    fn function(self) -> LambdaFunction {
        match self {
            Source::Monitor => LambdaFunction::Monitor,
            Source::Requeuer => LambdaFunction::Requeuer,
        }
    }
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

    /// The context one invocation sees: the runtime's, or under chaos one whose external calls
    /// pass through a fresh [`Faults`] (and the handle to ask whether the invocation died).
    fn invocation(&mut self, function: LambdaFunction) -> (Ctx, Option<Arc<Faults>>) {
        let ctx = self.function_ctx(function);
        let Some(chaos) = self.options.chaos.clone() else {
            return (ctx, None);
        };
        // The invocations before this one have all returned: their call counts are final.
        for (f, faults) in &self.invocations[self.calls_seen_upto..] {
            let most = self.most_calls.entry(*f).or_default();
            *most = (*most).max(faults.calls());
        }
        self.calls_seen_upto = self.invocations.len();
        let range = self
            .most_calls
            .get(&function)
            .copied()
            .unwrap_or(0)
            .max(chaos.min_crash_range)
            .max(1);
        let crash = (self.chaos_rng.random::<f64>() < chaos.crash_rate).then(|| CrashPoint {
            at_call: self.chaos_rng.random_range(1..=range),
            mode: if self.chaos_rng.random_bool(0.5) {
                CrashMode::Before
            } else {
                CrashMode::After
            },
        });
        let faults = Faults::new(
            crash,
            chaos.throttle_rate,
            self.chaos_rng.random(),
            self.faults.clone(),
        );
        self.invocations.push((function, faults.clone()));
        (ctx.with_faults(&faults), Some(faults))
    }

    /// External calls made by each function's invocations so far (under chaos).
    pub fn calls_by_function(&self) -> std::collections::BTreeMap<LambdaFunction, u64> {
        let mut calls = std::collections::BTreeMap::new();
        for (function, faults) in &self.invocations {
            *calls.entry(*function).or_default() += faults.calls();
        }
        calls
    }

    /// External calls by function and operation so far (under chaos).
    pub fn calls_by_function_and_op(
        &self,
    ) -> std::collections::BTreeMap<(LambdaFunction, granary::adapters::tap::Op), u64> {
        let mut calls = std::collections::BTreeMap::new();
        for (function, faults) in &self.invocations {
            for (op, n) in faults.calls_by_op() {
                *calls.entry((*function, op)).or_default() += n;
            }
        }
        calls
    }

    /// [`feeder_may_run`] with the events queue's depth and the simulator's held events.
    async fn monitor_keeps_up(&self) -> Result<bool> {
        let events = self.events_queue.depth().await?;
        let backlog = events.visible + events.in_flight + self.simulator.pending() as u64;
        Ok(feeder_may_run(backlog, self.options.granule_submit_count))
    }

    /// Whether no campaign holds an open claim or a parked retry: every submitted attempt's end
    /// has been handled. A campaign the stack was switched away from while its jobs ran is
    /// finished by the same functions, and quiescence waits for it.
    async fn open_claims_empty(&self) -> Result<bool> {
        for campaign in granary::handlers::campaigns_to_visit(&self.ctx).await? {
            let there = self.ctx.in_campaign(campaign.as_ref());
            let layout = &there.config.layout;
            // Nor a retry parked for the feeder's next window of retries (GRANARY_ARRAY_RETRIES):
            // the feeder's schedule takes it, and the campaign is not settled before.
            let parked = granary::domain::layout::claims::parked_prefix(&layout.claim_prefix);
            for prefix in [&layout.open_claim_prefix, &parked] {
                if !there.store.list(prefix).await?.is_empty() {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    async fn drain(&mut self, source: Source) -> Result<u64> {
        let queue = self.source_queue(source);
        let options = self.options.clone();
        let drained = drain(source, queue, &options, || {
            self.invocation(source.function())
        })
        .await?;
        Ok(self.drained(source, drained))
    }

    fn source_queue(&self, source: Source) -> Arc<dyn Queue> {
        match source {
            Source::Monitor => self.events_queue.clone(),
            Source::Requeuer => self.ctx.retry_queue.clone(),
        }
    }

    /// A drain's figures into the progress; the records it handled.
    fn drained(&mut self, source: Source, d: Drained) -> u64 {
        self.progress.failed_records += d.failed;
        self.progress.crashed_invocations += d.crashed;
        match source {
            Source::Monitor => self.progress.monitor_invocations += d.invocations,
            Source::Requeuer => self.progress.requeuer_invocations += d.invocations,
        }
        d.handled
    }

    /// The context a function's invocations see without chaos: the runtime's, through the
    /// function's own tap when it has one.
    fn function_ctx(&self, function: LambdaFunction) -> Ctx {
        match self.function_taps.get(&function) {
            // A tap per function only watches: the runtime's one warm instance stays warm.
            Some(tap) => self.ctx.watched(tap.clone()),
            None => self.ctx.clone(),
        }
    }

    /// The feeder run and the monitor's poller under way on other threads
    /// (`RunnerOptions::parallel`), reaped once done — waiting up to `wait` for each — into the
    /// progress; the activity they bring.
    async fn reap(
        &mut self,
        under_way: &mut UnderWay,
        wait: Duration,
        feeder_errors_in_a_row: &mut u32,
    ) -> Result<u64> {
        let mut activity = 0;
        if let Some(task) = under_way.feeding.as_mut() {
            if let Ok(joined) = tokio::time::timeout(wait, task).await {
                under_way.feeding = None;
                let ended = joined.context("the queue-feeder's task")?;
                activity += self.feeder_ended(ended, feeder_errors_in_a_row)?;
            }
        }
        if let Some(task) = under_way.monitoring.as_mut() {
            if let Ok(joined) = tokio::time::timeout(wait, task).await {
                under_way.monitoring = None;
                let drained = joined.context("the job-monitor's poller")?;
                let drained = drained.context("job-monitor")?;
                // Lambda bills each invocation its own duration, side by side or not.
                self.progress.monitor_time += drained.busy;
                activity += self.drained(Source::Monitor, drained);
            }
        }
        Ok(activity)
    }

    /// A feeder run's end, as the schedule sees it: its activity, or the error that stops the
    /// local runtime.
    fn feeder_ended(&mut self, ended: FeederRun, errors_in_a_row: &mut u32) -> Result<u64> {
        let FeederRun { run, crashed, took } = ended;
        self.progress.feeder_time += took;
        self.progress.feeder_runs += 1;
        self.progress.crashed_invocations += u64::from(crashed);
        let mut activity = 0;
        match run {
            Ok(summary) if !crashed => {
                *errors_in_a_row = 0;
                self.progress.inventories_complete = summary.inventories_complete;
                activity += summary.submitted;
                self.last_feed = Some(summary);
            }
            // A dead run's answer is lost; the schedule fires again.
            Ok(_) => activity += 1,
            // A failed run is logged by Lambda and the schedule fires again. Only a run
            // that keeps failing with no chaos to blame stops the local runtime — or,
            // where Batch's SubmitJob quota is enforced, with no refusal to blame (a run
            // whose SubmitJob calls stay refused past its retries stalls, as a deployed
            // feeder does, and the next run goes on).
            Err(e) => {
                tracing::warn!(error = %e, "queue-feeder run failed");
                self.progress.feeder_errors += 1;
                *errors_in_a_row += 1;
                activity += 1;
                let throttled = self.options.submit_quota
                    && matches!(e, granary::handlers::HandlerError::Stalled { .. });
                let blamed = self.options.chaos.is_some() || throttled;
                if !blamed || *errors_in_a_row > 1_000 {
                    return Err(anyhow::Error::new(e).context("queue-feeder"));
                }
            }
        }
        Ok(activity)
    }

    /// Runs until every inventory is submitted and nothing is left in flight anywhere.
    pub async fn run_to_quiescence(&mut self, on_progress: impl FnMut(&Progress)) -> Result<()> {
        self.run_while(on_progress, |_| true).await.map(|_| ())
    }

    /// [`Self::run_to_quiescence`], stopping early once `go_on` says no after a round (an
    /// operator redeploying mid-campaign, in tests). Whether it settled.
    pub async fn run_while(
        &mut self,
        mut on_progress: impl FnMut(&Progress),
        mut go_on: impl FnMut(&Progress) -> bool,
    ) -> Result<bool> {
        let started = Instant::now();
        let mut next_feed = Instant::now();
        let mut next_reconcile = Instant::now() + self.options.reconcile_interval;
        let mut quiet_rounds = 0;
        let mut feeder_errors_in_a_row = 0u32;
        let mut last_movement: Option<Movement> = None;
        let mut last_moved = Instant::now();
        let mut under_way = UnderWay::default();
        // The events queue's depth at the end of the last round (`events_queue_limit`).
        let mut events_queued = 0u64;
        anyhow::ensure!(
            !(self.options.parallel && self.options.chaos.is_some()),
            "parallel invocations and chaos do not mix: a chaos seed replays one order of calls"
        );
        loop {
            anyhow::ensure!(
                started.elapsed() < self.options.deadline,
                "campaign did not settle within {:?}",
                self.options.deadline
            );
            let mut activity = 0u64;
            if Instant::now() >= next_feed
                && under_way.feeding.is_none()
                && self.monitor_keeps_up().await?
            {
                next_feed = Instant::now() + self.options.feeder_interval;
                let (ctx, faults) = self.invocation(LambdaFunction::Feeder);
                let granule_submit_count = self.options.granule_submit_count;
                let run = move || async move {
                    let started = Instant::now();
                    let run = feeder::run(
                        &ctx,
                        FeederEvent {
                            granule_submit_count,
                        },
                    )
                    .await;
                    let crashed = faults.as_ref().is_some_and(|f| f.crashed());
                    FeederRun {
                        run,
                        crashed,
                        took: started.elapsed(),
                    }
                };
                if self.options.parallel {
                    // On a thread of its own, driven by the runtime's handle: the feeder's future
                    // is made there and never moves between threads (the compiler cannot prove
                    // it Send, rust-lang/rust#102211), and it needs only its context to be Send.
                    let runtime = tokio::runtime::Handle::current();
                    under_way.feeding =
                        Some(tokio::task::spawn_blocking(move || runtime.block_on(run())));
                } else {
                    let ended = run().await;
                    activity += self.feeder_ended(ended, &mut feeder_errors_in_a_row)?;
                }
            }
            // The depth the last round read: each round's one tick puts at most the room it
            // was given, so a round-old figure keeps the queue within the limit.
            if let Some(limit) = self.options.events_queue_limit {
                let room = limit.saturating_sub(events_queued);
                self.simulator.room = Some(usize::try_from(room).unwrap_or(usize::MAX));
            }
            let phase = Instant::now();
            activity += self.simulator.tick().await.context("batch simulator")? as u64;
            self.progress.simulator_time += phase.elapsed();
            if self.options.parallel {
                // The monitor's poller on tasks of its own, while this thread ticks the
                // simulator: Batch and the monitor work side by side as they do on AWS.
                activity += self
                    .reap(&mut under_way, Duration::ZERO, &mut feeder_errors_in_a_row)
                    .await?;
                let queue = self.source_queue(Source::Monitor);
                if under_way.monitoring.is_none() && queue.depth().await?.visible > 0 {
                    let options = self.options.clone();
                    let ctx = self.function_ctx(LambdaFunction::Monitor);
                    under_way.monitoring = Some(tokio::spawn(async move {
                        drain(Source::Monitor, queue, &options, || (ctx.clone(), None)).await
                    }));
                }
            } else {
                let phase = Instant::now();
                activity += self.drain(Source::Monitor).await.context("job-monitor")?;
                self.progress.monitor_time += phase.elapsed();
            }
            let phase = Instant::now();
            activity += self.drain(Source::Requeuer).await.context("requeuer")?;
            self.progress.requeuer_time += phase.elapsed();
            activity += self
                .reap(&mut under_way, Duration::ZERO, &mut feeder_errors_in_a_row)
                .await?;
            // A round that found nothing to do waits a little for the work under way rather
            // than judging the campaign on a run that has only just started (or spinning).
            if activity == 0 && under_way.any() {
                activity += self
                    .reap(&mut under_way, UNDER_WAY_WAIT, &mut feeder_errors_in_a_row)
                    .await?;
            }

            if Instant::now() >= next_reconcile {
                next_reconcile = Instant::now() + self.options.reconcile_interval;
                let (ctx, faults) = self.invocation(LambdaFunction::Sweeper);
                let run = reconciler::reconcile(&ctx, chrono::Utc::now()).await;
                self.progress.reconciler_runs += 1;
                let crashed = faults.as_ref().is_some_and(|f| f.crashed());
                self.progress.crashed_invocations += u64::from(crashed);
                match run {
                    Ok(summary) => {
                        self.progress.reconciled += summary.recovered;
                        activity += summary.recovered + summary.closed + summary.taken_over;
                        self.progress.reconciler_progress += summary.handled
                            + summary.recovered
                            + summary.closed
                            + summary.taken_over;
                        self.last_reconcile = Some(summary);
                    }
                    // A failed run is logged by Lambda; the schedule fires again.
                    Err(_) if self.options.chaos.is_some() => activity += 1,
                    Err(e) => return Err(anyhow::Error::new(e).context("reconciler")),
                }
            }

            let events = self.events_queue.depth().await?;
            events_queued = events.visible + events.in_flight;
            let retry = self.ctx.retry_queue.depth().await?;
            let dlq = self.ctx.failure_dlq.depth().await?;
            self.progress.submitted = self.simulator.stats.jobs;
            self.progress.succeeded = self.simulator.stats.succeeded;
            self.progress.retrying = retry.visible + retry.in_flight;
            self.progress.dead_lettered = dlq.visible + dlq.in_flight;
            on_progress(&self.progress);
            if !go_on(&self.progress) {
                while under_way.any() {
                    self.reap(&mut under_way, UNDER_WAY_WAIT, &mut feeder_errors_in_a_row)
                        .await?;
                }
                return Ok(false);
            }

            let quiet = |activity: u64, progress: &Progress, held: usize| {
                activity == 0
                    && progress.inventories_complete
                    && held == 0
                    && events.visible + events.in_flight == 0
                    && retry.visible + retry.in_flight == 0
            };
            // Quiet but for a feeder run or poller still under way: wait for it before judging.
            // Each round after a run ended starts the next one, so a run that takes longer than
            // a round's short wait (a feeder's ListJobs on moto, thousands of jobs deep) kept
            // every other round busy, and a campaign with nothing left never saw the two quiet
            // rounds in a row that settle it.
            // Bounded as the rounds are: a run that hangs is still reported by the deadline
            // or the stall check below.
            if under_way.any() && quiet(activity, &self.progress, self.simulator.pending()) {
                while under_way.any()
                    && started.elapsed() < self.options.deadline
                    && last_moved.elapsed() <= self.options.stall_limit
                {
                    activity += self
                        .reap(&mut under_way, UNDER_WAY_WAIT, &mut feeder_errors_in_a_row)
                        .await?;
                }
            }
            let mut idle =
                !under_way.any() && quiet(activity, &self.progress, self.simulator.pending());
            // Before calling it settled, make sure Batch holds no job the simulator never saw.
            if idle && self.simulator.sweep().await.context("batch simulator")? > 0 {
                idle = false;
                activity += 1;
            }
            // Nor an attempt whose end was never handled (a lost event the reconciler has yet to
            // find): the open-claims index is empty once every end is logged and routed. The
            // feeder's window markers leave it only through the reconciler, which looks at them
            // once they are GRANARY_RECONCILE_AFTER_SECS old: with nothing else to do, the runner
            // runs it as the sweeper's schedule would that much later.
            if idle && !self.open_claims_empty().await? {
                let (ctx, _) = self.invocation(LambdaFunction::Sweeper);
                let later = chrono::Duration::from_std(ctx.config.leases.reconcile_after)
                    .ok()
                    .and_then(|age| chrono::Utc::now().checked_add_signed(age))
                    .and_then(|t| t.checked_add_signed(chrono::Duration::seconds(1)))
                    .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
                match reconciler::reconcile(&ctx, later).await {
                    Ok(summary) => {
                        self.progress.reconciled += summary.recovered;
                        activity += summary.recovered;
                        self.progress.reconciler_progress += summary.handled
                            + summary.recovered
                            + summary.closed
                            + summary.taken_over;
                        self.last_reconcile = Some(summary);
                    }
                    Err(_) if self.options.chaos.is_some() => {}
                    Err(e) => return Err(anyhow::Error::new(e).context("reconciler")),
                }
                idle = activity == 0 && self.open_claims_empty().await?;
            }
            let open_claims = self
                .ctx
                .store
                .list(&self.ctx.config.layout.open_claim_prefix)
                .await?;
            let moved = Movement {
                jobs: self.simulator.stats.jobs,
                events: self.simulator.stats.events,
                queued: [events, retry, dlq].map(|d| (d.visible, d.in_flight)),
                open_claims: open_claims.len(),
                feeder_rows: self.last_feed.as_ref().map(|f| f.rows_submitted_total),
                reconciler: self.progress.reconciler_progress,
            };
            if last_movement.as_ref() != Some(&moved) {
                last_movement = Some(moved);
                last_moved = Instant::now();
            } else if last_moved.elapsed() > self.options.stall_limit {
                let keys: Vec<&str> = open_claims.iter().take(5).map(|m| m.key.as_str()).collect();
                anyhow::bail!(
                    "the campaign stalled: nothing moved for {:?} and it is not settled (inventories complete: {}, events held by the simulator: {}, queues (visible, in flight) events/retry/failure DLQ: {:?}, open claims {}: {keys:?}; the last reconciler pass: {:?}; the last feeder run: {:?})",
                    self.options.stall_limit,
                    self.progress.inventories_complete,
                    self.simulator.pending(),
                    last_movement.as_ref().map(|m| m.queued),
                    open_claims.len(),
                    self.last_reconcile,
                    self.last_feed,
                );
            }
            quiet_rounds = if idle { quiet_rounds + 1 } else { 0 };
            // Two quiet rounds: a job submitted in the last drain is seen by the next tick.
            if quiet_rounds >= 2 {
                return Ok(true);
            }
            // With work under way, the round above already waited for it.
            if activity == 0 && !under_way.any() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a campaign's progress is seen by: a runtime whose figures stay the same is stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Movement {
    jobs: u64,
    events: u64,
    queued: [(u64, u64); 3],
    open_claims: usize,
    feeder_rows: Option<u64>,
    reconciler: u64,
}

#[cfg(test)]
mod tests {
    use super::{feeder_may_run, once_per_round};
    use granary::ports::ReceivedMessage;

    fn received(id: &str, receipt: &str) -> ReceivedMessage {
        ReceivedMessage {
            message_id: id.into(),
            receipt_handle: receipt.into(),
            body: String::new(),
            attributes: Default::default(),
            receive_count: 1,
            sent_at_ms: None,
        }
    }

    /// Each message is invoked once a round, with its newest receipt; distinct messages (a
    /// duplicated delivery is one) all stay, in their order; a batch left empty goes.
    #[test]
    fn a_message_received_twice_in_a_round_is_invoked_once_with_its_latest_receipt() {
        let round = vec![
            vec![received("a", "a1"), received("b", "b1")],
            vec![received("c", "c1")],
            vec![received("a", "a2"), received("d", "d1")],
            vec![received("b", "b2")],
        ];
        let kept: Vec<Vec<(String, String)>> = once_per_round(round)
            .into_iter()
            .map(|batch| {
                batch
                    .into_iter()
                    .map(|m| (m.message_id, m.receipt_handle))
                    .collect()
            })
            .collect();
        let pair = |id: &str, receipt: &str| (id.to_owned(), receipt.to_owned());
        assert_eq!(
            kept,
            vec![
                vec![pair("c", "c1")],
                vec![pair("a", "a2"), pair("d", "d1")],
                vec![pair("b", "b2")],
            ]
        );
        let distinct = vec![vec![received("x", "x1"), received("y", "y1")]];
        assert_eq!(once_per_round(distinct.clone()), distinct);
    }

    #[test]
    fn the_feeder_waits_while_more_than_two_runs_of_ends_are_unhandled() {
        assert!(feeder_may_run(0, 10_000));
        assert!(feeder_may_run(20_000, 10_000));
        assert!(!feeder_may_run(20_001, 10_000));
        // A count too large to double waits for nothing (the backlog cannot pass it).
        assert!(feeder_may_run(u64::MAX, u64::MAX / 2 + 1));
        assert!(!feeder_may_run(u64::MAX, u64::MAX / 2 - 1));
    }
}
