//! The local runtime's rounds: each round fires what is due on the schedules, ticks the Batch
//! simulator, drains the event sources, and judges whether the campaign has settled or stalled.

use super::pollers::Source;
use super::schedules::{UnderWay, UNDER_WAY_WAIT};
use super::{LocalRuntime, Progress};
use anyhow::{Context, Result};
use granary::ports::QueueDepth;
use std::time::Duration;
use tokio::time::Instant;

/// How long an idle round waits before the next: 100 ms on the wall clock. In a simulation
/// (`granary::clock`) it jumps towards the next schedule or job's end, looking at the queues at least every
/// simulated 10 s: a message back from its visibility timeout, or a job's end, waits at most that
/// long for its poller (Lambda's pollers long-poll); an hour idle is 360 rounds, not 36,000.
fn idle_wait(rounds: &Rounds, next_batch_end: Option<Instant>) -> Duration {
    if !granary::clock::is_virtual() {
        return Duration::from_millis(100);
    }
    let next_schedule = rounds
        .next_feed
        .min(rounds.next_reconcile)
        .min(rounds.next_discover);
    next_batch_end
        .map_or(next_schedule, |end| end.min(next_schedule))
        .saturating_duration_since(Instant::now())
        .clamp(Duration::from_millis(100), Duration::from_secs(10))
}

/// What `run_while`'s rounds carry from one to the next.
pub(super) struct Rounds {
    started: Instant,
    pub(super) next_feed: Instant,
    pub(super) next_reconcile: Instant,
    /// The importer's discovery (`RunnerOptions::discover_interval`; far off without one).
    pub(super) next_discover: Instant,
    quiet_rounds: u32,
    pub(super) feeder_errors_in_a_row: u32,
    last_movement: Option<Movement>,
    last_moved: Instant,
    pub(super) under_way: UnderWay,
    /// The events queue's depth at the end of the last round (`events_queue_limit`).
    events_queued: u64,
}

impl Rounds {
    fn new(reconcile_interval: Duration, discovers: bool) -> Self {
        let far = Duration::from_secs(365 * 86_400);
        Self {
            started: Instant::now(),
            next_feed: Instant::now(),
            next_reconcile: Instant::now() + reconcile_interval,
            next_discover: Instant::now() + if discovers { Duration::ZERO } else { far },
            quiet_rounds: 0,
            feeder_errors_in_a_row: 0,
            last_movement: None,
            last_moved: Instant::now(),
            under_way: UnderWay::default(),
            events_queued: 0,
        }
    }
}

/// The queues' depths a round read at its end.
#[derive(Clone, Copy)]
struct QueuesSeen {
    events: QueueDepth,
    retry: QueueDepth,
    dlq: QueueDepth,
    import: QueueDepth,
}

impl QueuesSeen {
    /// Whether a round with this `activity` and `held` events in the simulator did nothing and
    /// left nothing waiting.
    fn quiet(&self, activity: u64, progress: &Progress, held: usize) -> bool {
        activity == 0
            && progress.inventories_complete
            && held == 0
            && self.events.visible + self.events.in_flight == 0
            && self.retry.visible + self.retry.in_flight == 0
            && self.import.visible + self.import.in_flight == 0
    }
}

/// What a campaign's progress is seen by: a runtime whose figures stay the same is stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Movement {
    jobs: u64,
    events: u64,
    queued: [(u64, u64); 4],
    open_claims: usize,
    feeder_rows: Option<u64>,
    reconciler: u64,
}

impl LocalRuntime {
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
        let mut rounds = Rounds::new(
            self.options.reconcile_interval,
            self.options.discover_interval.is_some(),
        );
        anyhow::ensure!(
            !(self.options.parallel && self.options.chaos.is_some()),
            "parallel invocations and chaos do not mix: a chaos seed replays one order of calls"
        );
        loop {
            anyhow::ensure!(
                rounds.started.elapsed() < self.options.deadline,
                "campaign did not settle within {:?}",
                self.options.deadline
            );
            let mut activity = self.feed_if_due(&mut rounds).await?;
            activity += self.tick_simulator(rounds.events_queued).await?;
            activity += self.poll_monitor(&mut rounds).await?;
            let phase = Instant::now();
            activity += self.drain(Source::Requeuer).await.context("requeuer")?;
            self.progress.requeuer_time += phase.elapsed();
            if self.options.discover_interval.is_some() {
                activity += self.discover_if_due(&mut rounds).await?;
                activity += self.drain(Source::Importer).await.context("importer")?;
            }
            activity += self.reap_round(&mut rounds, Duration::ZERO).await?;
            // A round that found nothing to do waits a little for the work under way rather
            // than judging the campaign on a run that has only just started (or spinning).
            if activity == 0 && rounds.under_way.any() {
                activity += self.reap_round(&mut rounds, UNDER_WAY_WAIT).await?;
            }
            activity += self.reconcile_if_due(&mut rounds).await?;

            let queues = self.read_queues().await?;
            rounds.events_queued = queues.events.visible + queues.events.in_flight;
            on_progress(&self.progress);
            if !go_on(&self.progress) {
                while rounds.under_way.any() {
                    self.reap_round(&mut rounds, UNDER_WAY_WAIT).await?;
                }
                return Ok(false);
            }

            activity += self
                .wait_for_work_under_way(&mut rounds, &queues, activity)
                .await?;
            let idle = self.idle(&rounds, &queues, &mut activity).await?;
            self.check_stall(&mut rounds, &queues).await?;
            rounds.quiet_rounds = if idle { rounds.quiet_rounds + 1 } else { 0 };
            // Two quiet rounds: a job submitted in the last drain is seen by the next tick.
            if rounds.quiet_rounds >= 2 {
                return Ok(true);
            }
            // With work under way, the round above already waited for it.
            if activity == 0 && !rounds.under_way.any() {
                tokio::time::sleep(idle_wait(&rounds, self.simulator.next_due())).await;
            }
        }
    }

    /// [`Self::reap`] with the rounds' work under way.
    async fn reap_round(&mut self, rounds: &mut Rounds, wait: Duration) -> Result<u64> {
        self.reap(
            &mut rounds.under_way,
            wait,
            &mut rounds.feeder_errors_in_a_row,
        )
        .await
    }

    /// One tick of the Batch simulator, given the room the events queue had at the end of the
    /// last round. The activity it brings.
    async fn tick_simulator(&mut self, events_queued: u64) -> Result<u64> {
        // The depth the last round read: each round's one tick puts at most the room it
        // was given, so a round-old figure keeps the queue within the limit.
        if let Some(limit) = self.options.events_queue_limit {
            let room = limit.saturating_sub(events_queued);
            self.simulator.room = Some(usize::try_from(room).unwrap_or(usize::MAX));
        }
        let phase = Instant::now();
        let activity = self.simulator.tick().await.context("batch simulator")? as u64;
        self.progress.simulator_time += phase.elapsed();
        Ok(activity)
    }

    /// The queues' depths at the end of a round, and the progress they and the simulator show.
    async fn read_queues(&mut self) -> Result<QueuesSeen> {
        let events = self.events_queue.depth().await?;
        let retry = self.ctx.retry_queue.depth().await?;
        let dlq = self.ctx.failure_dlq.depth().await?;
        let import = self.source_queue(Source::Importer).depth().await?;
        self.progress.submitted = self.simulator.stats.jobs;
        self.progress.succeeded = self.simulator.stats.succeeded;
        self.progress.retrying = retry.visible + retry.in_flight;
        self.progress.dead_lettered = dlq.visible + dlq.in_flight;
        Ok(QueuesSeen {
            events,
            retry,
            dlq,
            import,
        })
    }

    /// Quiet but for a feeder run or poller still under way: wait for it before judging.
    /// Each round after a run ended starts the next one, so a run that takes longer than
    /// a round's short wait (a feeder's ListJobs on moto, thousands of jobs deep) kept
    /// every other round busy, and a campaign with nothing left never saw the two quiet
    /// rounds in a row that settle it.
    /// Bounded as the rounds are: a run that hangs is still reported by the deadline
    /// or the stall check. The activity the work under way brought.
    async fn wait_for_work_under_way(
        &mut self,
        rounds: &mut Rounds,
        queues: &QueuesSeen,
        activity: u64,
    ) -> Result<u64> {
        let mut brought = 0;
        if rounds.under_way.any()
            && queues.quiet(activity, &self.progress, self.simulator.pending())
        {
            while rounds.under_way.any()
                && rounds.started.elapsed() < self.options.deadline
                && rounds.last_moved.elapsed() <= self.options.stall_limit
            {
                brought += self.reap_round(rounds, UNDER_WAY_WAIT).await?;
            }
        }
        Ok(brought)
    }

    /// Whether the round was idle: quiet, nothing under way, and nothing left that the
    /// simulator or the reconciler would still find (what they find adds to `activity`).
    async fn idle(
        &mut self,
        rounds: &Rounds,
        queues: &QueuesSeen,
        activity: &mut u64,
    ) -> Result<bool> {
        let mut idle = !rounds.under_way.any()
            && queues.quiet(*activity, &self.progress, self.simulator.pending());
        // Before calling it settled, make sure Batch holds no job the simulator never saw.
        if idle && self.simulator.sweep().await.context("batch simulator")? > 0 {
            idle = false;
            *activity += 1;
        }
        // Nor an attempt whose end was never handled (a lost event the reconciler has yet to
        // find): the open-claims index is empty once every end is logged and routed. The
        // feeder's window markers leave it only through the reconciler, which looks at them
        // once they are GRANARY_RECONCILE_AFTER_SECS old: with nothing else to do, the runner
        // runs it as the sweeper's schedule would that much later.
        if idle && self.sweep_as_if_later().await? > 0 {
            idle = false;
            *activity += 1;
        }
        if idle && self.discover_as_if_later().await? > 0 {
            idle = false;
            *activity += 1;
        }
        if idle && !self.open_claims_empty().await? {
            *activity += self.reconcile_as_if_later().await?;
            idle = *activity == 0 && self.open_claims_empty().await?;
        }
        Ok(idle)
    }

    /// Notes whether anything moved this round; an error saying what is still open once
    /// nothing has for `RunnerOptions::stall_limit`.
    async fn check_stall(&mut self, rounds: &mut Rounds, queues: &QueuesSeen) -> Result<()> {
        let open_claims = self
            .ctx
            .store
            .list(&self.ctx.config.layout.open_claim_prefix)
            .await?;
        let moved = Movement {
            jobs: self.simulator.stats.jobs,
            events: self.simulator.stats.events,
            queued: [queues.events, queues.retry, queues.dlq, queues.import]
                .map(|d| (d.visible, d.in_flight)),
            open_claims: open_claims.len(),
            feeder_rows: self.last_feed.as_ref().map(|f| f.rows_submitted_total),
            reconciler: self.progress.reconciler_progress,
        };
        if rounds.last_movement.as_ref() != Some(&moved) {
            rounds.last_movement = Some(moved);
            rounds.last_moved = Instant::now();
        } else if rounds.last_moved.elapsed() > self.options.stall_limit {
            let keys: Vec<&str> = open_claims.iter().take(5).map(|m| m.key.as_str()).collect();
            anyhow::bail!(
                "the campaign stalled: nothing moved for {:?} and it is not settled (inventories complete: {}, events held by the simulator: {}, queues (visible, in flight) events/retry/failure DLQ/import: {:?}, open claims {}: {keys:?}; the last reconciler pass: {:?}; the last feeder run: {:?})",
                self.options.stall_limit,
                self.progress.inventories_complete,
                self.simulator.pending(),
                rounds.last_movement.as_ref().map(|m| m.queued),
                open_claims.len(),
                self.last_reconcile,
                self.last_feed,
            );
        }
        Ok(())
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
}
