//! `granary-local simulate --ingest`: the ingest queue on the virtual clock. Batches arrive on
//! the submissions queue over the first hours; the dispatcher ticks every minute with the
//! template's 900 s timeout, at most one at a time (its reserved concurrency); depositors'
//! servers answer in milliseconds, minutes, or never (the HTTP client's timeout ends the
//! request); processing jobs wait and run for minutes, Spot reclaims some, some applications
//! fail, and their ends reach the job monitor seconds later or never (the dispatcher's
//! DescribeJobs finds those). Every invocation may die at a random call, or at its function's
//! timeout. Then the audit by outcome (`super::ingest_audit`). One seed replays one run.

use super::ingest_world::{IngestWorld, WorldShape};
use anyhow::{Context, Result};
use granary::adapters::tap::faults::Faults;
use granary::handlers::{ingest, monitor, Ctx};
use granary::ports::Queue;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The dispatcher's schedule and timeout, the monitor's timeout, and the events queue's
/// visibility timeout, as the template sets them (`local/tests/function_timeouts.rs`).
pub const TICK_EVERY: Duration = Duration::from_secs(60);
pub const DISPATCHER_TIMEOUT: Duration = Duration::from_secs(900);
pub const MONITOR_TIMEOUT: Duration = Duration::from_secs(60);
const EVENTS_VISIBILITY_SECS: u32 = 360;

/// What an ingest simulation runs.
#[derive(Debug, Clone)]
pub struct IngestSimSpec {
    pub seed: u64,
    pub batches: usize,
    /// Objects in each batch.
    pub objects: usize,
    /// Share of invocations that die at a random external call.
    pub crash_rate: f64,
}

impl Default for IngestSimSpec {
    fn default() -> Self {
        Self {
            seed: 1,
            batches: 6,
            objects: 40,
            crash_rate: 0.05,
        }
    }
}

/// What a run did, and the audit.
#[derive(Debug, Clone, Serialize)]
pub struct IngestSimReport {
    pub seed: u64,
    pub simulated_secs: f64,
    pub wall_secs: f64,
    pub ticks: u64,
    /// Ticks Lambda ended at their timeout (dropped mid-await).
    pub ticks_timed_out: u64,
    /// Steps a tick's budget cut short or never started, left for the next tick.
    pub steps_out_of_time: u64,
    /// Downloads and callbacks that timed out, their next attempt left for the next tick.
    pub slow_attempts: u64,
    pub monitor_invocations: u64,
    pub crashes_injected: u64,
    /// Processing ends whose event never came (the dispatcher's DescribeJobs found them).
    pub events_lost: u64,
    /// Jobs failed "minting outcome unknown" (EZID lost its answer) that the operator resolved.
    pub mints_resolved: u64,
    /// Every batch ended and nothing left queued or on its way; false when the run stopped
    /// because nothing had moved for a simulated day.
    pub settled: bool,
    pub audit: super::ingest_audit::IngestAudit,
    pub replay: String,
}

impl IngestSimReport {
    /// Settled, and the audit held (a run that stopped moving for a day did not settle).
    pub fn holds(&self) -> bool {
        self.settled && self.audit.holds()
    }
}

pub fn replay_command(spec: &IngestSimSpec) -> String {
    format!(
        "granary-local simulate --ingest --seed {} --batches {} --objects {} --crash-rate {}",
        spec.seed, spec.batches, spec.objects, spec.crash_rate
    )
}

/// Runs `spec` on the virtual clock (`super::on_the_virtual_clock`).
pub fn run(spec: &IngestSimSpec) -> Result<IngestSimReport> {
    let (mut report, wall) = super::on_the_virtual_clock(spec.seed, async {
        let world = IngestWorld::new(&WorldShape::of(spec)).await?;
        let mut sim = Simulation::new(spec, world);
        let settled = sim.run().await?;
        sim.report(spec, settled).await
    })?;
    report.wall_secs = wall;
    Ok(report)
}

/// The platform around the ingest handlers: schedules, queues, Batch, crashes.
struct Simulation {
    world: IngestWorld,
    crasher: super::crasher::Crasher,
    ticks: u64,
    ticks_timed_out: u64,
    steps_out_of_time: u64,
    slow_attempts: u64,
    monitor_invocations: u64,
    started: Instant,
    batches: usize,
}

/// The longest a run may take in simulated time before it is called stuck.
const DEADLINE: Duration = Duration::from_secs(7 * 86_400);
/// Nothing moving for this long ends the run (the audit then lists what was left).
const STALL: Duration = Duration::from_secs(86_400);

impl Simulation {
    fn new(spec: &IngestSimSpec, world: IngestWorld) -> Self {
        Self {
            world,
            crasher: super::crasher::Crasher::new(spec.seed, spec.crash_rate),
            ticks: 0,
            ticks_timed_out: 0,
            steps_out_of_time: 0,
            slow_attempts: 0,
            monitor_invocations: 0,
            started: Instant::now(),
            batches: spec.batches,
        }
    }

    fn invocation(&mut self, function: &'static str, ctx: &Ctx) -> (Ctx, Arc<Faults>) {
        self.crasher.invocation(function, ctx)
    }

    fn ended(&mut self, function: &'static str, faults: &Faults) {
        self.crasher.ended(function, faults);
    }

    /// Until every batch has ended and nothing is left moving (`true`), or nothing has moved
    /// for a simulated day (`false`).
    async fn run(&mut self) -> Result<bool> {
        let mut next_tick = Instant::now();
        let (mut last_seen, mut last_moved) = (String::new(), Instant::now());
        loop {
            anyhow::ensure!(
                self.started.elapsed() < DEADLINE,
                "the ingest queue did not settle within {DEADLINE:?}"
            );
            self.submit_due().await?;
            if Instant::now() >= next_tick {
                self.tick().await;
                // One at a time (reserved concurrency 1): the next run is the schedule's first
                // after this one ended.
                next_tick += TICK_EVERY;
                while next_tick <= Instant::now() {
                    next_tick += TICK_EVERY;
                }
            }
            self.world.end_jobs_due().await?;
            self.world.deliver_events_due().await?;
            self.monitor().await?;
            self.world.operate().await?;
            if self.world.settled(self.batches).await? {
                return Ok(true);
            }
            // Nothing has moved for a simulated day: what is left is the audit's to say.
            let seen = self.world.progress().await?;
            if seen != last_seen {
                (last_seen, last_moved) = (seen, Instant::now());
            } else if last_moved.elapsed() > STALL {
                return Ok(false);
            }
            let wake = self
                .world
                .next_due()
                .map_or(next_tick, |t| t.min(next_tick));
            tokio::time::sleep_until(wake.max(Instant::now() + Duration::from_secs(1))).await;
        }
    }

    /// The submissions queue's messages sent by now, delivered to ingest-submit.
    async fn submit_due(&mut self) -> Result<()> {
        for event in self.world.submissions_due() {
            loop {
                let (ctx, faults) = self.invocation("ingest-submit", &self.world.ctx.clone());
                let response =
                    ingest::handle_submissions(&ctx, event.clone(), granary::clock::now()).await;
                self.ended("ingest-submit", &faults);
                if !faults.crashed() && response.batch_item_failures.is_empty() {
                    break;
                }
                // SQS delivers it again after the visibility timeout.
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
        Ok(())
    }

    async fn tick(&mut self) {
        let (ctx, faults) = self.invocation("ingest-dispatcher", &self.world.ctx.clone());
        let ran = tokio::time::timeout(
            DISPATCHER_TIMEOUT,
            ingest::tick(&ctx, granary::clock::now()),
        )
        .await;
        self.ticks += 1;
        match ran {
            Err(_) => self.ticks_timed_out += 1,
            Ok(Err(e)) if !faults.crashed() => {
                tracing::warn!(error = %e, "a tick failed; the schedule runs the next");
            }
            Ok(Ok(s)) => {
                self.steps_out_of_time += s.out_of_time;
                self.slow_attempts += s.slow_attempts;
            }
            Ok(Err(_)) => {}
        }
        self.ended("ingest-dispatcher", &faults);
    }

    /// The job monitor's event source: ten messages an invocation, each handled, deleted when
    /// the invocation lived and handled it; the rest come back after the visibility timeout.
    async fn monitor(&mut self) -> Result<()> {
        loop {
            let got = self
                .world
                .events
                .receive(10, EVENTS_VISIBILITY_SECS, 0)
                .await
                .context("receiving events")?;
            if got.is_empty() {
                return Ok(());
            }
            let (ctx, faults) = self.invocation("job-monitor", &self.world.monitor_ctx.clone());
            self.monitor_invocations += 1;
            let mut handled = Vec::new();
            let batch = async {
                for m in &got {
                    if monitor::handle_message(&ctx, &m.body).await.is_ok() && !faults.crashed() {
                        handled.push(m.receipt_handle.clone());
                    }
                }
            };
            // Past its timeout, Lambda ends it: none of the batch is deleted.
            if tokio::time::timeout(MONITOR_TIMEOUT, batch).await.is_ok() {
                for receipt in handled {
                    self.world.events.delete(&receipt).await?;
                }
            }
            self.ended("job-monitor", &faults);
        }
    }

    async fn report(&self, spec: &IngestSimSpec, settled: bool) -> Result<IngestSimReport> {
        Ok(IngestSimReport {
            seed: spec.seed,
            simulated_secs: self.started.elapsed().as_secs_f64(),
            wall_secs: 0.0,
            ticks: self.ticks,
            ticks_timed_out: self.ticks_timed_out,
            steps_out_of_time: self.steps_out_of_time,
            slow_attempts: self.slow_attempts,
            monitor_invocations: self.monitor_invocations,
            crashes_injected: self.crasher.crashes,
            events_lost: self.world.events_lost,
            mints_resolved: self.world.resolved.len() as u64,
            settled,
            audit: super::ingest_audit::audit(&self.world, spec).await?,
            replay: replay_command(spec),
        })
    }
}
