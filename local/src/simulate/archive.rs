//! `granary-local simulate --archive`: archive jobs on the virtual clock. An operator asks for
//! a job every twenty minutes, each over a prefix of a few dozen to a few hundred products; the
//! dispatcher ticks every minute with the template's 300 s timeout (one at a time); the task
//! queue delivers one message an invocation, up to ten invocations at once whose calls
//! interleave, each ended at 900 s, and a message a dead invocation held comes back after the
//! queue's 5,400 s visibility timeout, as the template sets it; the
//! template's shard size, backoff and resend times. Every invocation may die at a random call.
//! Then the audit by outcome: every job completed, each phase handed on once, both
//! destinations verified member by member, nothing left open, staged or queued.

use super::crasher::Crasher;
use anyhow::{Context, Result};
use bytes::Bytes;
use granary::adapters::memory::{MemoryBuckets, MemoryEventBus, MemoryQueue, MemoryStore};
use granary::adapters::tap::faults::Interleave;
use granary::config::archive::ArchiveSettings;
use granary::config::{Config, Function};
use granary::contracts::archive::TaskMessage;
use granary::domain::archive::job::ArchiveState;
use granary::domain::archive::manifest;
use granary::domain::archive::record::{ArchiveSource, Destination};
use granary::handlers::archive::{self, tasks, verify};
use granary::handlers::Ctx;
use granary::ports::{ObjectStore, PutCondition, Queue};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The template's: the dispatcher's schedule and timeout, the task function's timeout, the
/// task queue's visibility timeout (`local/tests/function_timeouts.rs`).
pub const TICK_EVERY: Duration = Duration::from_secs(60);
pub const DISPATCHER_TIMEOUT: Duration = Duration::from_secs(300);
pub const TASK_TIMEOUT: Duration = Duration::from_secs(900);
pub const TASK_VISIBILITY_SECS: u32 = 5_400;
const JOB_EVERY: Duration = Duration::from_secs(20 * 60);
const DEADLINE: Duration = Duration::from_secs(7 * 86_400);

#[derive(Debug, Clone)]
pub struct ArchiveSimSpec {
    pub seed: u64,
    pub jobs: usize,
    pub crash_rate: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArchiveSimReport {
    pub seed: u64,
    pub simulated_secs: f64,
    pub wall_secs: f64,
    pub ticks: u64,
    pub ticks_timed_out: u64,
    pub task_invocations: u64,
    pub crashes_injected: u64,
    pub objects: u64,
    /// Every job's end and anything wrong with it. Empty `wrong`: the promise held.
    pub completed: u64,
    pub wrong: Vec<String>,
    pub replay: String,
}

impl ArchiveSimReport {
    pub fn holds(&self) -> bool {
        self.wrong.is_empty()
    }
}

pub fn replay_command(spec: &ArchiveSimSpec) -> String {
    format!(
        "granary-local simulate --archive --seed {} --jobs {} --crash-rate {}",
        spec.seed, spec.jobs, spec.crash_rate
    )
}

struct World {
    store: Arc<MemoryStore>,
    buckets: Arc<MemoryBuckets>,
    queue: Arc<MemoryQueue>,
    ctx: Ctx,
    /// Each job's prefix and how many products it holds, in the order the operator asks.
    planned: Vec<(String, usize)>,
    /// The jobs asked for so far.
    ids: Vec<String>,
}

/// Products per job: 20 to 400, from the seed.
fn objects_of(seed: u64, k: usize) -> usize {
    let h = (seed ^ 0x0a2c_41fe).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k as u64 * 0x2545_f491);
    20 + (h.rotate_left(17) % 381) as usize
}

impl World {
    async fn new(spec: &ArchiveSimSpec) -> Result<Self> {
        let buckets = Arc::new(MemoryBuckets::default());
        let products = buckets.bucket("products");
        let mut planned = Vec::new();
        for k in 0..spec.jobs {
            let (prefix, n) = (format!("l2/run{k}/"), objects_of(spec.seed, k));
            for i in 0..n {
                let body = format!("run {k} granule {i} ").repeat(1 + i % 7);
                products
                    .put(
                        &format!("{prefix}g{i}.nc"),
                        Bytes::from(body),
                        PutCondition::Overwrite,
                    )
                    .await?;
            }
            planned.push((prefix, n));
        }
        let config = Config::for_sections(Function::ArchiveDispatcher.sections(), |k| match k {
            "GRANARY_BUCKET" => Some("b".to_owned()),
            "GRANARY_FUNCTION_TIMEOUT_SECS" => Some(DISPATCHER_TIMEOUT.as_secs().to_string()),
            _ => None,
        })
        .context("the simulation's configuration")?;
        let settings = ArchiveSettings {
            objects_per_shard: 100,
            backoff: Duration::from_secs(60),
            task_resend_after: Duration::from_secs(5_400),
            ..ArchiveSettings::default()
        };
        let store = Arc::new(MemoryStore::new());
        let queue = Arc::new(MemoryQueue::new("archive-tasks"));
        let ctx = Ctx {
            store: store.clone(),
            buckets: buckets.clone(),
            task_queue: queue.clone(),
            bus: Arc::new(MemoryEventBus::default()),
            signing_key: Some(Arc::new(manifest::signing_key(&"42".repeat(32))?)),
            ..Ctx::in_memory(Config {
                archive: settings,
                ..config
            })
        };
        Ok(Self {
            store,
            buckets,
            queue,
            ctx,
            planned,
            ids: Vec::new(),
        })
    }

    /// The operator asks for the next job once its time has come (`granary archive create`).
    async fn ask_when_due(&mut self, started: Instant) -> Result<()> {
        let k = self.ids.len();
        let Some((prefix, _)) = self.planned.get(k) else {
            return Ok(());
        };
        if started.elapsed() < JOB_EVERY * k as u32 {
            return Ok(());
        }
        let job = archive::create(
            &self.ctx,
            ArchiveSource {
                bucket: "products".into(),
                prefix: prefix.clone(),
            },
            vec![
                Destination::parse("s3://vault/a/:DEEP_ARCHIVE")?,
                Destination::parse("s3://mirror/a/")?,
            ],
            granary::clock::now(),
        )
        .await
        .context("granary archive create")?;
        self.ids.push(job.id);
        Ok(())
    }

    /// Whether every job the operator will ask for has ended and nothing is queued.
    async fn settled(&self) -> Result<bool> {
        if self.ids.len() < self.planned.len() || !self.ctx.archives().open_ids().await?.is_empty()
        {
            return Ok(false);
        }
        let depth = self.queue.depth().await?;
        Ok(depth.visible + depth.in_flight == 0)
    }
}

/// Runs `spec` on the virtual clock (`super::on_the_virtual_clock`).
pub fn run(spec: &ArchiveSimSpec) -> Result<ArchiveSimReport> {
    let (mut report, wall) = super::on_the_virtual_clock(spec.seed, async {
        let mut world = World::new(spec).await?;
        let mut sim = Simulation {
            crasher: Crasher::new(spec.seed, spec.crash_rate),
            ticks: 0,
            ticks_timed_out: 0,
            task_invocations: 0,
        };
        let started = Instant::now();
        sim.run(&mut world, started).await?;
        let simulated = started.elapsed();
        sim.report(spec, &world, simulated).await
    })?;
    report.wall_secs = wall;
    Ok(report)
}

struct Simulation {
    crasher: Crasher,
    ticks: u64,
    ticks_timed_out: u64,
    task_invocations: u64,
}

impl Simulation {
    async fn run(&mut self, w: &mut World, started: Instant) -> Result<()> {
        loop {
            anyhow::ensure!(
                started.elapsed() < DEADLINE,
                "the archive jobs did not settle within {DEADLINE:?}"
            );
            w.ask_when_due(started).await?;
            self.tick(w).await;
            self.deliver(w).await?;
            if w.settled().await? {
                return Ok(());
            }
            tokio::time::sleep(TICK_EVERY).await;
        }
    }

    async fn tick(&mut self, w: &World) {
        let (ctx, faults) = self.crasher.invocation("archive-dispatcher", &w.ctx);
        let ran = tokio::time::timeout(
            DISPATCHER_TIMEOUT,
            archive::tick(&ctx, granary::clock::now()),
        )
        .await;
        self.ticks += 1;
        self.ticks_timed_out += u64::from(ran.is_err());
        self.crasher.ended("archive-dispatcher", &faults);
    }

    /// The task queue's event source: one message an invocation (BatchSize 1), up to ten
    /// invocations at once whose calls interleave one by one (tasks of one phase run side by
    /// side, as the function's concurrency lets them, and the last to end fans in); a message
    /// is deleted when its invocation lived and handled it, the others come back after the
    /// visibility timeout.
    async fn deliver(&mut self, w: &World) -> Result<()> {
        loop {
            let got = w.queue.receive(10, TASK_VISIBILITY_SECS, 0).await?;
            if got.is_empty() {
                return Ok(());
            }
            let mut runs = Vec::with_capacity(got.len());
            for m in &got {
                let message: TaskMessage =
                    serde_json::from_str(&m.body).context("a task message granary sent")?;
                let (ctx, faults) = self.crasher.invocation("archive-task", &w.ctx);
                let ctx = ctx.tapped(Arc::new(Interleave) as Arc<dyn granary::adapters::tap::Tap>);
                runs.push((message, ctx, faults));
            }
            self.task_invocations += runs.len() as u64;
            let handled = futures::future::join_all(runs.iter().map(|(message, ctx, _)| {
                tokio::time::timeout(
                    TASK_TIMEOUT,
                    tasks::handle(ctx, message, granary::clock::now()),
                )
            }))
            .await;
            for ((m, (_, _, faults)), handled) in got.iter().zip(&runs).zip(handled) {
                if matches!(handled, Ok(Ok(_))) && !faults.crashed() {
                    w.queue.delete(&m.receipt_handle).await?;
                }
                self.crasher.ended("archive-task", faults);
            }
        }
    }

    async fn report(
        &self,
        spec: &ArchiveSimSpec,
        w: &World,
        simulated: Duration,
    ) -> Result<ArchiveSimReport> {
        let (completed, wrong) = audit(w).await?;
        Ok(ArchiveSimReport {
            seed: spec.seed,
            simulated_secs: simulated.as_secs_f64(),
            wall_secs: 0.0,
            ticks: self.ticks,
            ticks_timed_out: self.ticks_timed_out,
            task_invocations: self.task_invocations,
            crashes_injected: self.crasher.crashes,
            objects: w.planned.iter().map(|(_, n)| *n as u64).sum(),
            completed,
            wrong,
            replay: replay_command(spec),
        })
    }
}

/// Each job by outcome: completed; every phase handed on once (the recoverable-error loop
/// aside); both destinations hold every product, verified against the signed manifest; its
/// staging gone. And nothing left open.
async fn audit(w: &World) -> Result<(u64, Vec<String>)> {
    use ArchiveState::*;
    let mut wrong = Vec::new();
    let mut completed = 0;
    for (id, (_, objects)) in w.ids.iter().zip(&w.planned) {
        let Some(job) = w.ctx.archives().job(id).await? else {
            wrong.push(format!("{id}: no record"));
            continue;
        };
        let job = job.value;
        if job.state != Completed {
            wrong.push(format!("{id}: {} ({})", job.state, job.reason));
            continue;
        }
        completed += 1;
        for (from, to) in [
            (ActivityArchiving, PostProcessing),
            (PostProcessing, Store),
            (Store, Cleanup),
            (Cleanup, Completed),
        ] {
            let n = job.times(from, to);
            if n != 1 {
                wrong.push(format!("{id}: {from} → {to} {n} times"));
            }
        }
        for bucket in ["vault", "mirror"] {
            let prefix = format!("a/{id}/");
            let r = verify::verify(w.buckets.bucket(bucket), bucket, &prefix, None).await;
            if !r.intact() || r.members_checked != *objects as u64 {
                wrong.push(format!("{id} in {bucket}: {r:?}"));
            }
        }
        let staged = w.store.list(&w.ctx.archives().keys.work(id)).await?;
        if !staged.is_empty() {
            wrong.push(format!("{id}: {} objects left in staging", staged.len()));
        }
    }
    let open = w.ctx.archives().open_ids().await?;
    if !open.is_empty() {
        wrong.push(format!("still listed open: {open:?}"));
    }
    Ok((completed, wrong))
}
