//! The Batch simulator: notices jobs that reached the emulator's Batch queue, decides each one's
//! fate from the fault plan, and puts "Batch Job State Change" events on the EventBridge bus, from
//! where the stack's rule delivers them to the events queue — the path real Batch events take.

use super::events::{describe_facts, state_change_event};
use super::fault_plan::{retry_strategy_of, FaultPlan};
use anyhow::{Context, Result};
use aws_sdk_batch::types::JobStatus;
use granary::domain::batch_event::BatchJobStateChange;
use granary::domain::classify::{classify, Route};
use granary::ports::{BusEvent, EventBus};
use std::collections::HashSet;
use std::sync::Arc;

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
}

#[derive(Debug, Default, Clone)]
pub struct SimulatorStats {
    pub jobs: u64,
    pub events: u64,
    pub duplicates: u64,
    pub delayed: u64,
    pub intermediate: u64,
    pub batch_internal_retries: u64,
    pub succeeded: u64,
    pub retryable: u64,
    pub dead_letter_bound: u64,
}

pub struct BatchSimulator {
    batch: aws_sdk_batch::Client,
    bus: Arc<dyn EventBus>,
    job_queue: String,
    plan: FaultPlan,
    seen: HashSet<String>,
    held: Vec<(u32, BusEvent)>,
    /// At most this many events are delivered per tick; the rest wait for the next. Real jobs end
    /// spread over time, and the emulator's ReceiveMessage slows with queue length.
    pub max_events_per_tick: usize,
    pub planned: Vec<PlannedJob>,
    pub stats: SimulatorStats,
}

fn bus_event(value: serde_json::Value) -> BusEvent {
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
        detail: value["detail"].clone(),
    }
}

impl BatchSimulator {
    pub fn new(
        batch: aws_sdk_batch::Client,
        bus: Arc<dyn EventBus>,
        job_queue: &str,
        plan: FaultPlan,
    ) -> Self {
        Self {
            batch,
            bus,
            job_queue: job_queue.to_owned(),
            plan,
            seen: HashSet::new(),
            held: Vec::new(),
            max_events_per_tick: 100,
            planned: Vec::new(),
            stats: SimulatorStats::default(),
        }
    }

    /// Events held back (for reordering, or by the per-tick cap), not yet delivered.
    pub fn pending(&self) -> usize {
        self.held.len()
    }

    /// One pass: finish every new job and deliver what is due. Returns how many new jobs it saw.
    pub async fn tick(&mut self) -> Result<usize> {
        let mut new_ids = Vec::new();
        // The emulator finishes jobs inside SubmitJob; real Batch would have them RUNNING first.
        for status in [JobStatus::Succeeded, JobStatus::Failed] {
            let mut pages = self
                .batch
                .list_jobs()
                .job_queue(&self.job_queue)
                .job_status(status)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                for j in page
                    .context("ListJobs")?
                    .job_summary_list
                    .unwrap_or_default()
                {
                    if let Some(id) = j.job_id {
                        if !self.seen.contains(&id) {
                            new_ids.push(id);
                        }
                    }
                }
            }
        }
        let facts = describe_facts(&self.batch, &new_ids).await?;
        let mut out = Vec::new();
        for id in &new_ids {
            self.seen.insert(id.clone());
        }
        for f in &facts {
            let retry = retry_strategy_of(&f.retry_strategy);
            let fate = self.plan.fate(&f.job_name, &f.granule_id, &retry);
            self.stats.jobs += 1;
            self.stats.batch_internal_retries += fate.ends.len() as u64 - 1;
            if self.plan.intermediate_events {
                for k in 1..fate.ends.len() {
                    out.push((
                        0,
                        bus_event(state_change_event(f, &fate.ends[..k], "FAILED")),
                    ));
                    self.stats.intermediate += 1;
                }
            }
            let status = if fate.succeeded {
                "SUCCEEDED"
            } else {
                "FAILED"
            };
            let event = state_change_event(f, &fate.ends, status);
            let parsed = BatchJobStateChange::from_value(event.clone())
                .context("simulator built an unparsable event")?;
            let c = classify(&parsed.detail).context("simulator built a non-terminal event")?;
            match c.route() {
                Route::Done => self.stats.succeeded += 1,
                Route::RetryQueue => self.stats.retryable += 1,
                Route::FailureDlq => self.stats.dead_letter_bound += 1,
                Route::BatchRetries => {}
            }
            self.planned.push(PlannedJob {
                job_id: f.job_id.clone(),
                job_name: f.job_name.clone(),
                granule_id: f.granule_id.clone(),
                attempt: f.attempt,
                batch_attempts: fate.ends.len(),
                route: c.route(),
                reason: c.reason,
            });
            let delay = if fate.delayed {
                self.stats.delayed += 1;
                self.plan.delay_ticks
            } else {
                0
            };
            if fate.duplicate {
                self.stats.duplicates += 1;
                out.push((delay + 1, bus_event(event.clone())));
            }
            out.push((delay, bus_event(event)));
        }
        // Deliver what is due now; keep the rest for later ticks (this is the reordering).
        let mut due = Vec::new();
        for (wait, e) in std::mem::take(&mut self.held).into_iter().chain(out) {
            if wait == 0 && due.len() < self.max_events_per_tick {
                due.push(e);
            } else if wait == 0 {
                self.held.push((0, e));
            } else {
                self.held.push((wait - 1, e));
            }
        }
        self.stats.events += due.len() as u64;
        if !due.is_empty() {
            self.bus
                .put_events(due)
                .await
                .context("putting Batch events on the bus")?;
        }
        Ok(new_ids.len())
    }
}
