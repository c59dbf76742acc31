//! The scheduled functions: the feeder's schedule (metered by the monitor's backlog, its runs
//! on another thread under `RunnerOptions::parallel`) and the sweeper's reconciler passes.

use super::pollers::{Drained, Source};
use super::round::Rounds;
use super::{LambdaFunction, LocalRuntime};
use anyhow::{Context, Result};
use granary::handlers::feeder::{self, FeederEvent, FeederSummary};
use granary::handlers::reconciler;
use std::time::Duration;
use tokio::time::Instant;

/// Work the runner started on other threads and has not reaped yet (`RunnerOptions::parallel`).
#[derive(Default)]
pub(super) struct UnderWay {
    pub(super) feeding: Option<tokio::task::JoinHandle<FeederRun>>,
    pub(super) monitoring: Option<tokio::task::JoinHandle<Result<Drained>>>,
}

impl UnderWay {
    pub(super) fn any(&self) -> bool {
        self.feeding.is_some() || self.monitoring.is_some()
    }
}

/// How long a round with nothing else to do waits for a feeder run or the monitor's poller
/// under way on another thread.
pub(super) const UNDER_WAY_WAIT: Duration = Duration::from_millis(50);

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
pub(super) fn feeder_may_run(backlog: u64, granule_submit_count: u64) -> bool {
    backlog <= granule_submit_count.saturating_mul(2)
}

/// One feeder run: its answer, whether it died at an injected crash, and how long it took.
pub(super) struct FeederRun {
    run: std::result::Result<FeederSummary, granary::handlers::HandlerError>,
    crashed: bool,
    timed_out: bool,
    took: Duration,
}

impl LocalRuntime {
    /// [`feeder_may_run`] with the events queue's depth and the simulator's held events.
    async fn monitor_keeps_up(&self) -> Result<bool> {
        let events = self.events_queue.depth().await?;
        let backlog = events.visible + events.in_flight + self.simulator.pending() as u64;
        Ok(feeder_may_run(backlog, self.options.granule_submit_count))
    }

    /// The feeder's schedule: a run once its period has passed, none under way and the monitor
    /// keeping up with the events. Under `RunnerOptions::parallel` the run goes on another
    /// thread (reaped later); otherwise its activity.
    pub(super) async fn feed_if_due(&mut self, rounds: &mut Rounds) -> Result<u64> {
        if Instant::now() < rounds.next_feed
            || rounds.under_way.feeding.is_some()
            || !self.monitor_keeps_up().await?
        {
            return Ok(0);
        }
        rounds.next_feed = Instant::now() + self.options.feeder_interval;
        let (ctx, faults) = self.invocation(LambdaFunction::Feeder);
        let granule_submit_count = self.options.granule_submit_count;
        let timeout = self.options.timeouts.feeder;
        let run = move || async move {
            let started = Instant::now();
            let event = FeederEvent {
                granule_submit_count,
            };
            let ran = tokio::time::timeout(timeout, feeder::run(&ctx, event)).await;
            let timed_out = ran.is_err();
            let crashed = timed_out || faults.as_ref().is_some_and(|f| f.crashed());
            FeederRun {
                // A run Lambda ended answers nothing; `crashed` says so.
                run: ran.unwrap_or_else(|_| Ok(FeederSummary::default())),
                crashed,
                timed_out,
                took: started.elapsed(),
            }
        };
        if self.options.parallel {
            // On a thread of its own, driven by the runtime's handle: the feeder's future
            // is made there and never moves between threads (the compiler cannot prove
            // it Send, rust-lang/rust#102211), and it needs only its context to be Send.
            let runtime = tokio::runtime::Handle::current();
            rounds.under_way.feeding =
                Some(tokio::task::spawn_blocking(move || runtime.block_on(run())));
            Ok(0)
        } else {
            let ended = run().await;
            self.feeder_ended(ended, &mut rounds.feeder_errors_in_a_row)
        }
    }

    /// The feeder run and the monitor's poller under way on other threads
    /// (`RunnerOptions::parallel`), reaped once done — waiting up to `wait` for each — into the
    /// progress; the activity they bring.
    pub(super) async fn reap(
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
        let FeederRun {
            run,
            crashed,
            timed_out,
            took,
        } = ended;
        self.progress.feeder_time += took;
        self.progress.feeder_runs += 1;
        self.progress.crashed_invocations += u64::from(crashed);
        self.progress.timed_out_invocations += u64::from(timed_out);
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

    /// The sweeper's schedule: a reconciler pass once its period has passed. The activity it
    /// brings.
    pub(super) async fn reconcile_if_due(&mut self, rounds: &mut Rounds) -> Result<u64> {
        if Instant::now() < rounds.next_reconcile {
            return Ok(0);
        }
        rounds.next_reconcile = Instant::now() + self.options.reconcile_interval;
        let (ctx, faults) = self.invocation(LambdaFunction::Sweeper);
        let timeout = self.options.timeouts.sweeper;
        let ran = tokio::time::timeout(timeout, self.sweeper_pass(&ctx, timeout)).await;
        self.progress.reconciler_runs += 1;
        let timed_out = ran.is_err();
        let crashed = timed_out || faults.as_ref().is_some_and(|f| f.crashed());
        self.progress.crashed_invocations += u64::from(crashed);
        self.progress.timed_out_invocations += u64::from(timed_out);
        // A pass Lambda ended did what it did; the schedule fires again.
        let Ok(run) = ran else {
            return Ok(1);
        };
        match run {
            Ok(summary) => {
                let activity = summary.recovered + summary.closed + summary.taken_over;
                self.reconciled(summary);
                Ok(activity)
            }
            // A failed run is logged by Lambda; the schedule fires again.
            Err(_) if self.options.chaos.is_some() => Ok(1),
            Err(e) => Err(anyhow::Error::new(e).context("reconciler")),
        }
    }

    /// What the sweeper's schedule runs: the reconciler; with an importer, the item sweeper's
    /// whole pass (the reconciler, then the sweep of items past their timeouts), as the deployed
    /// function does within its timeout's planned share. The reconciler's summary.
    async fn sweeper_pass(
        &self,
        ctx: &granary::handlers::Ctx,
        timeout: Duration,
    ) -> std::result::Result<reconciler::ReconcileSummary, granary::handlers::HandlerError> {
        let now = granary::clock::now();
        if self.options.discover_interval.is_none() {
            return reconciler::reconcile(ctx, now).await;
        }
        let budget = granary::budget::Budget::of_invocation(Some(timeout));
        let pass = granary::handlers::importer::sweeper::scheduled_pass(ctx, now, &budget).await?;
        Ok(pass.reconcile)
    }

    /// A reconciler pass run as the sweeper's schedule would run it GRANARY_RECONCILE_AFTER_SECS
    /// from now, when the feeder's window markers are old enough for it to look at. The ends it
    /// recovered.
    pub(super) async fn reconcile_as_if_later(&mut self) -> Result<u64> {
        let (ctx, _) = self.invocation(LambdaFunction::Sweeper);
        let later = chrono::Duration::from_std(ctx.config.leases.reconcile_after)
            .ok()
            .and_then(|age| granary::clock::now().checked_add_signed(age))
            .and_then(|t| t.checked_add_signed(chrono::Duration::seconds(1)))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
        match reconciler::reconcile(&ctx, later).await {
            Ok(summary) => {
                let recovered = summary.recovered;
                self.reconciled(summary);
                Ok(recovered)
            }
            Err(_) if self.options.chaos.is_some() => Ok(0),
            Err(e) => Err(anyhow::Error::new(e).context("reconciler")),
        }
    }

    /// A reconciler pass's summary into the progress.
    fn reconciled(&mut self, summary: reconciler::ReconcileSummary) {
        self.progress.reconciled += summary.recovered;
        self.progress.reconciler_progress +=
            summary.handled + summary.recovered + summary.closed + summary.taken_over;
        self.last_reconcile = Some(summary);
    }
}
