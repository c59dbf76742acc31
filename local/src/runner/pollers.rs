//! The SQS event sources' pollers: each receives batches from its queue and invokes the monitor
//! or the requeuer on them as Lambda's event source mapping does, deleting what the invocation
//! did not report as failed.

use super::round::Rounds;
use super::{lambda_sqs_event, LambdaFunction, LocalRuntime, RunnerOptions};
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::SqsBatchResponse;
use granary::adapters::tap::faults::Faults;
use granary::handlers::{importer, monitor, requeuer, Ctx};
use granary::ports::{Queue, ReceivedMessage};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What one drain of an event source did.
#[derive(Debug, Default)]
pub(super) struct Drained {
    /// Records handed to invocations (handled or failed).
    handled: u64,
    failed: u64,
    crashed: u64,
    timed_out: u64,
    invocations: u64,
    /// The invocations' durations added up (side by side, more than the drain's wall time).
    pub(super) busy: Duration,
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
            let (size, visibility) = source.batch(options);
            let got = queue.receive(size, visibility, 0).await?;
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
                let timeout = match source {
                    Source::Monitor => options.timeouts.monitor,
                    Source::Requeuer => options.timeouts.requeuer,
                    Source::Importer => options.timeouts.importer_step,
                };
                invoke(source, queue.clone(), batch, ctx, faults, timeout)
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
            out.timed_out += u64::from(i.timed_out);
            out.invocations += 1;
            out.busy += i.took;
        }
    }
}

/// What one invocation of the monitor or the requeuer did with its batch.
struct Invoked {
    records: u64,
    failed: u64,
    /// Whether it died at an injected crash, or outlived its function's timeout.
    crashed: bool,
    timed_out: bool,
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
pub(super) fn once_per_round(batches: Vec<Vec<ReceivedMessage>>) -> Vec<Vec<ReceivedMessage>> {
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
    timeout: Duration,
) -> Result<Invoked> {
    let started = Instant::now();
    let event = lambda_sqs_event(queue.name(), &batch)?;
    let handled = tokio::time::timeout(timeout, async {
        match source {
            Source::Monitor => monitor::handle_sqs(&ctx, event).await,
            Source::Requeuer => requeuer::handle_sqs(&ctx, event).await,
            Source::Importer => importer::handle_sqs(&ctx, event).await,
        }
    })
    .await;
    let records = batch.len() as u64;
    let timed_out = handled.is_err();
    // A dead invocation returns nothing to Lambda: every message of its batch comes back after
    // the visibility timeout, handled or not.
    let response: SqsBatchResponse = match handled {
        Ok(response) if !faults.as_ref().is_some_and(|f| f.crashed()) => response,
        _ => {
            return Ok(Invoked {
                records,
                failed: records,
                crashed: true,
                timed_out,
                took: started.elapsed(),
            })
        }
    };
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
        timed_out: false,
        took: started.elapsed(),
    })
}

#[derive(Clone, Copy)]
pub(super) enum Source {
    Monitor,
    Requeuer,
    Importer,
}

/// The importer-step function's event source as the template sets it: one item an invocation,
/// and the import queue's visibility timeout (a download may take its whole 900 s).
pub const IMPORT_BATCH_SIZE: u32 = 1;
pub const IMPORT_VISIBILITY_TIMEOUT_SECS: u32 = 5_400;

impl Source {
    fn function(self) -> LambdaFunction {
        match self {
            Source::Monitor => LambdaFunction::Monitor,
            Source::Requeuer => LambdaFunction::Requeuer,
            Source::Importer => LambdaFunction::ImporterStep,
        }
    }

    /// Its batch size and the visibility timeout its receives start.
    fn batch(self, options: &RunnerOptions) -> (u32, u32) {
        match self {
            Source::Importer => (IMPORT_BATCH_SIZE, IMPORT_VISIBILITY_TIMEOUT_SECS),
            _ => (options.batch_size, options.visibility_timeout_secs),
        }
    }
}

impl LocalRuntime {
    /// The job monitor's turn in a round: its queue drained here, or under
    /// `RunnerOptions::parallel` its poller started on tasks of its own (once the last one is
    /// reaped) while this thread ticks the simulator: Batch and the monitor work side by side as
    /// they do on AWS. The activity it brings.
    pub(super) async fn poll_monitor(&mut self, rounds: &mut Rounds) -> Result<u64> {
        if !self.options.parallel {
            let phase = Instant::now();
            let activity = self.drain(Source::Monitor).await.context("job-monitor")?;
            self.progress.monitor_time += phase.elapsed();
            return Ok(activity);
        }
        let activity = self
            .reap(
                &mut rounds.under_way,
                Duration::ZERO,
                &mut rounds.feeder_errors_in_a_row,
            )
            .await?;
        let queue = self.source_queue(Source::Monitor);
        if rounds.under_way.monitoring.is_none() && queue.depth().await?.visible > 0 {
            let options = self.options.clone();
            let ctx = self.function_ctx(LambdaFunction::Monitor);
            rounds.under_way.monitoring = Some(tokio::spawn(async move {
                drain(Source::Monitor, queue, &options, || (ctx.clone(), None)).await
            }));
        }
        Ok(activity)
    }

    /// One drain of the Batch events queue by the monitor, outside any round. A test that runs
    /// the feeder itself waits this way for ends that arrive after the round that sent them:
    /// LocalStack's EventBridge puts a rule's targets a moment after PutEvents answers. The
    /// records handled.
    pub async fn deliver_events(&mut self) -> Result<u64> {
        self.drain(Source::Monitor).await
    }

    pub(super) async fn drain(&mut self, source: Source) -> Result<u64> {
        let queue = self.source_queue(source);
        let options = self.options.clone();
        let drained = drain(source, queue, &options, || {
            self.invocation(source.function())
        })
        .await?;
        Ok(self.drained(source, drained))
    }

    pub(super) fn source_queue(&self, source: Source) -> Arc<dyn Queue> {
        match source {
            Source::Monitor => self.events_queue.clone(),
            Source::Requeuer => self.ctx.retry_queue.clone(),
            // No import queue: an empty one (the runner polls it only with an importer).
            Source::Importer => {
                self.ctx.import_queue.clone().unwrap_or_else(|| {
                    Arc::new(granary::adapters::memory::MemoryQueue::new("none"))
                })
            }
        }
    }

    /// A drain's figures into the progress; the records it handled.
    pub(super) fn drained(&mut self, source: Source, d: Drained) -> u64 {
        self.progress.failed_records += d.failed;
        self.progress.crashed_invocations += d.crashed;
        self.progress.timed_out_invocations += d.timed_out;
        match source {
            Source::Monitor => self.progress.monitor_invocations += d.invocations,
            Source::Requeuer => self.progress.requeuer_invocations += d.invocations,
            Source::Importer => self.progress.importer_invocations += d.invocations,
        }
        d.handled
    }
}
