//! One tick of the simulator: each newly submitted job (an array window as its children) played
//! out from the fault plan, its events put on the bus, held back or reordered as the plan says.

use super::agenda::Due;
use super::{BatchSimulator, PlannedJob};
use crate::events::{array_parent_event, state_change_event, ArrayPlace, JobFacts};
use crate::fault_plan::{retry_strategy_of, BatchTiming, JobFate, JobTimes};
use crate::granule_list::id_hash;
use anyhow::{Context, Result};
use granary::domain::batch_event::BatchJobStateChange;
use granary::domain::classify::{classify, Classification, Route};
use granary::domain::granule::GranuleId;
use granary::ports::BusEvent;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// A tick's array windows: each parent's facts, how many of its children succeeded and failed,
/// and how long after now the last of them ends.
type ArrayParents = Vec<(JobFacts, u32, u32, Duration)>;

fn bus_event(mut value: serde_json::Value) -> BusEvent {
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
        // Moved, not copied: the event is the simulator's own and done with.
        detail: value
            .get_mut("detail")
            .map_or(serde_json::Value::Null, serde_json::Value::take),
    }
}

impl BatchSimulator {
    /// An array window's children, as their containers know them: child `i` processes granule
    /// `i` of the window claim the parent names.
    async fn children(&self, parent: &JobFacts) -> Result<Vec<JobFacts>> {
        let Some(ArrayPlace::Parent { size, window }) = &parent.array else {
            return Ok(Vec::new());
        };
        let store = self.claims.as_ref().context(
            "an array window was submitted, and the simulator has no store to read its claim from",
        )?;
        let claim = granary::repositories::read_json::<granary::domain::window::WindowClaim>(
            store.as_ref(),
            &window.claim_key,
        )
        .await
        .with_context(|| format!("reading window claim {}", window.claim_key))?
        .with_context(|| format!("window claim {} does not exist", window.claim_key))?
        .value;
        Ok((0..*size)
            .map(|i| JobFacts {
                job_id: granary::domain::window::child_job_id(&parent.job_id, i as usize),
                // A child without a granule at its index fails in its container; the monitor
                // rejects its end (no granule to name).
                granule_id: claim
                    .granules
                    .get(i as usize)
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
                // A window of retries holds each child's attempt (its container reads it there).
                attempt: claim
                    .entry(i as usize)
                    .map_or(parent.attempt, |e| e.attempt),
                array: Some(ArrayPlace::Child {
                    index: i,
                    window: window.clone(),
                }),
                ..parent.clone()
            })
            .collect())
    }

    /// One pass: finish every newly submitted job and deliver what is due. Returns how many new
    /// jobs it saw.
    pub async fn tick(&mut self) -> Result<usize> {
        let mut new_ids = self.submissions.take();
        // `seen` both skips jobs already finished and drops repeats within this batch.
        new_ids.retain(|id| self.seen.insert(id_hash(id)));
        let (facts, mut parents) = self.jobs_to_play(&new_ids).await?;
        let parent_at: HashMap<String, usize> = parents
            .iter()
            .enumerate()
            .map(|(i, (p, ..))| (p.job_id.clone(), i))
            .collect();
        // What was held back comes first, one tick nearer; this tick's events follow as they are
        // made, put on the bus a chunk at a time (an array window's 10,000 events held whole,
        // their details as JSON trees, were ~100 MB at the ten-million campaign's peak).
        let mut delivery = Delivery::default();
        for (wait, e) in std::mem::take(&mut self.held) {
            self.place(&mut delivery, wait, e);
        }
        self.do_what_is_due(&mut delivery).await?;
        for f in &facts {
            let (succeeded, ends_after) = self.play(f, &mut delivery).await?;
            let parent = match &f.array {
                Some(ArrayPlace::Child { .. }) => f
                    .job_id
                    .rsplit_once(':')
                    .and_then(|(id, _)| parent_at.get(id).copied()),
                _ => None,
            };
            if let Some((_, succeeded_children, failed_children, last_end)) =
                parent.and_then(|p| parents.get_mut(p))
            {
                if succeeded {
                    *succeeded_children += 1;
                } else {
                    *failed_children += 1;
                }
                *last_end = (*last_end).max(ends_after);
            }
        }
        self.end_array_parents(&parents, &mut delivery).await?;
        self.deliver(&mut delivery).await?;
        Ok(new_ids.len())
    }

    /// The jobs among `new_ids` to play this tick: an array window plays as its children, then
    /// its parent's summary (each parent with its children's successes and failures, none yet).
    async fn jobs_to_play(&mut self, new_ids: &[String]) -> Result<(Vec<JobFacts>, ArrayParents)> {
        let listed = self.ledger.facts(new_ids).await?;
        let mut facts = Vec::with_capacity(listed.len());
        let mut parents = Vec::new();
        for f in listed {
            if matches!(f.array, Some(ArrayPlace::Parent { .. })) {
                facts.extend(self.children(&f).await?);
                parents.push((f, 0u32, 0u32, Duration::ZERO));
                self.stats.arrays += 1;
            } else {
                facts.push(f);
            }
        }
        Ok((facts, parents))
    }

    /// Plays one job's life from the fault plan: its fate decided now, its end now or, when jobs
    /// take time, put on the agenda. Whether it succeeds, and how long after now it ends.
    async fn play(&mut self, f: &JobFacts, delivery: &mut Delivery) -> Result<(bool, Duration)> {
        let fate = self.fate_of(f);
        if !self.plan.timing.takes_time() {
            let succeeded = self.end_job(f, fate, None, delivery).await?;
            return Ok((succeeded, Duration::ZERO));
        }
        let times = self
            .plan
            .timing
            .times(self.plan.seed, &f.job_id, fate.ends.len());
        let succeeded = fate.succeeded && !times.cancelled_for_capacity;
        self.agenda.put(
            Instant::now() + times.ends_after,
            Due::End {
                facts: Box::new(f.clone()),
                fate,
                times,
            },
        );
        Ok((succeeded, times.ends_after))
    }

    /// Does what the agenda holds for now or earlier, in time order.
    async fn do_what_is_due(&mut self, delivery: &mut Delivery) -> Result<()> {
        self.agenda
            .end_now(&self.terminations.fresh(), Instant::now());
        while let Some(due) = self.agenda.next_due(Instant::now()) {
            match due {
                Due::End { facts, fate, times } => {
                    self.end_job(&facts, fate, Some(times), delivery).await?;
                }
                Due::ParentEnd {
                    facts,
                    succeeded,
                    failed,
                } => {
                    self.end_array_parent(&facts, succeeded, failed, delivery)
                        .await?
                }
                Due::Settle {
                    job_id,
                    status,
                    detail,
                } => self.ledger.settle(&job_id, status, &detail).await?,
                Due::Deliver(event) => self.place(delivery, 0, event),
            }
        }
        Ok(())
    }

    /// A job's end as its fate has it — unless TerminateJob or the job queue's watchdog ended it
    /// first: its intermediate events, its end settled in the ledger (at once, or DescribeJobs's
    /// lag later) and its final event on its way (unless lost). Whether it succeeded.
    async fn end_job(
        &mut self,
        f: &JobFacts,
        mut fate: JobFate,
        times: Option<JobTimes>,
        delivery: &mut Delivery,
    ) -> Result<bool> {
        // Terminated before it ran: cancelled, no attempt, the terminator's reason.
        let mut cancelled = self.terminations.take(&f.job_id);
        if cancelled.is_some() {
            self.cancelled += 1;
            fate.lost = false;
        } else if times.is_some_and(|t| t.cancelled_for_capacity) {
            self.stats.capacity_cancels += 1;
            cancelled = Some(BatchTiming::capacity_cancel_reason());
        }
        if cancelled.is_some() {
            fate.ends.clear();
            fate.succeeded = false;
        }
        self.stats.batch_internal_retries += (fate.ends.len() as u64).saturating_sub(1);
        if self.plan.intermediate_events {
            for k in 1..fate.ends.len() {
                let event = bus_event(state_change_event(f, &fate.ends[..k], "RUNNABLE"));
                self.place(delivery, 0, event);
                self.stats.intermediate += 1;
            }
        }
        let status = if fate.succeeded {
            "SUCCEEDED"
        } else {
            "FAILED"
        };
        let mut event = state_change_event(f, &fate.ends, status);
        if let Some(reason) = cancelled {
            event["detail"]["statusReason"] = reason.into();
        }
        let parsed = BatchJobStateChange::from_value(&event)
            .context("simulator built an unparsable event")?;
        let c = classify(&parsed.detail).context("simulator built a non-terminal event")?;
        self.settle(&f.job_id, parsed.detail.status, &event["detail"], times)
            .await?;
        match c.route() {
            Route::Done => self.stats.succeeded += 1,
            Route::RetryQueue => self.stats.retryable += 1,
            Route::FailureDlq => self.stats.dead_letter_bound += 1,
            Route::Cancelled => {}
        }
        if self.keep_plan {
            self.planned.push(planned_job(f, &fate, c));
        }
        let delay = times.map_or(Duration::ZERO, |t| t.delivered_after);
        self.send_end(event, &fate, delivery, delay).await?;
        Ok(fate.succeeded)
    }

    /// What DescribeJobs answers for the job from now on, or from DescribeJobs's lag later.
    async fn settle(
        &mut self,
        job_id: &str,
        status: granary::domain::batch_event::JobStatus,
        detail: &serde_json::Value,
        times: Option<JobTimes>,
    ) -> Result<()> {
        match times.map(|t| t.described_after) {
            Some(lag) if !lag.is_zero() => {
                let due = Due::Settle {
                    job_id: job_id.to_owned(),
                    status,
                    detail: detail.clone(),
                };
                self.agenda.put(Instant::now() + lag, due);
                Ok(())
            }
            _ => self.ledger.settle(job_id, status, detail).await,
        }
    }

    /// A job's fate from the fault plan, given its job definition's retry strategy.
    fn fate_of(&mut self, f: &JobFacts) -> JobFate {
        let retry = retry_strategy_of(&f.retry_strategy);
        // A child's fate is its granule's at its attempt, whether it runs as a child or
        // alone: the same plan gives the same outcomes in either mode.
        let fate_key = match (&f.array, GranuleId::parse(&f.granule_id)) {
            (Some(ArrayPlace::Child { .. }), Ok(g)) => {
                let campaign = f
                    .campaign
                    .as_deref()
                    .and_then(|c| granary::domain::campaign::Campaign::parse(c).ok());
                granary::domain::job_name::job_name(campaign.as_ref(), &g, f.attempt)
            }
            _ => f.job_name.clone(),
        };
        self.stats.jobs += 1;
        self.plan.fate(&fate_key, &f.granule_id, &retry)
    }

    /// A job's final event on its way to the bus as its fate has it: delayed, duplicated, or
    /// lost.
    async fn send_end(
        &mut self,
        event: serde_json::Value,
        fate: &JobFate,
        delivery: &mut Delivery,
        eventbridge_delay: Duration,
    ) -> Result<()> {
        let delay = if fate.delayed {
            self.stats.delayed += 1;
            self.plan.delay_ticks
        } else {
            0
        };
        // EventBridge gave up delivering it: only DescribeJobs (the reconciler) can tell.
        if fate.lost {
            self.stats.lost += 1;
            return Ok(());
        }
        if !eventbridge_delay.is_zero() {
            // On the way for a while (EventBridge's delay, or its retries): put on the bus then.
            let at = Instant::now() + eventbridge_delay;
            if fate.duplicate {
                self.stats.duplicates += 1;
                let copy = Due::Deliver(bus_event(event.clone()));
                self.agenda.put(at + Duration::from_secs(1), copy);
            }
            self.agenda.put(at, Due::Deliver(bus_event(event)));
            return Ok(());
        }
        if fate.duplicate {
            self.stats.duplicates += 1;
            self.place(delivery, delay + 1, bus_event(event.clone()));
        }
        self.place(delivery, delay, bus_event(event));
        if delivery.due.len() >= EVENTS_PUT_AT_ONCE {
            self.deliver(delivery).await?;
        }
        Ok(())
    }

    /// Each parent ends once its children have, with their count (its own event routes
    /// nothing; the rule delivers it all the same): now, or when its last child ends.
    async fn end_array_parents(
        &mut self,
        parents: &ArrayParents,
        delivery: &mut Delivery,
    ) -> Result<()> {
        for (parent, succeeded, failed, last_end) in parents {
            if self.plan.timing.takes_time() {
                let due = Due::ParentEnd {
                    facts: Box::new(parent.clone()),
                    succeeded: *succeeded,
                    failed: *failed,
                };
                self.agenda.put(Instant::now() + *last_end, due);
            } else {
                self.end_array_parent(parent, *succeeded, *failed, delivery)
                    .await?;
            }
        }
        Ok(())
    }

    async fn end_array_parent(
        &mut self,
        parent: &JobFacts,
        succeeded: u32,
        failed: u32,
        delivery: &mut Delivery,
    ) -> Result<()> {
        let event = array_parent_event(parent, succeeded, failed);
        let status = if failed == 0 {
            granary::domain::batch_event::JobStatus::Succeeded
        } else {
            granary::domain::batch_event::JobStatus::Failed
        };
        self.ledger
            .settle(&parent.job_id, status, &event["detail"])
            .await?;
        self.place(delivery, 0, bus_event(event));
        Ok(())
    }

    /// An event made (or held) this tick: due now while the tick's cap allows, else kept for a
    /// later tick, one tick nearer (this is the reordering).
    fn place(&mut self, delivery: &mut Delivery, wait: u32, event: BusEvent) {
        let cap = self
            .max_events_per_tick
            .min(self.room.unwrap_or(usize::MAX));
        if wait == 0 && delivery.put + delivery.due.len() < cap {
            delivery.due.push(event);
        } else if wait == 0 {
            self.held.push((0, event));
        } else {
            self.held.push((wait - 1, event));
        }
    }

    /// Puts the events due so far on the bus, in the order they were placed.
    async fn deliver(&mut self, delivery: &mut Delivery) -> Result<()> {
        let due = std::mem::take(&mut delivery.due);
        if due.is_empty() {
            return Ok(());
        }
        delivery.put += due.len();
        self.stats.events += due.len() as u64;
        self.bus
            .put_events(due)
            .await
            .context("putting Batch events on the bus")
    }
}

/// What the simulator decided for a job, as the campaign's accounting keeps it.
fn planned_job(f: &JobFacts, fate: &JobFate, c: Classification) -> PlannedJob {
    // A child is named by its array's name and its index: a window submitted twice
    // would show as two jobs of one name, as two single jobs of one name do.
    let job_name = match &f.array {
        Some(ArrayPlace::Child { index, .. }) => format!("{}:{index}", f.job_name),
        _ => f.job_name.clone(),
    };
    PlannedJob {
        job_id: f.job_id.clone(),
        job_name,
        granule_id: f.granule_id.clone(),
        attempt: f.attempt,
        batch_attempts: fate.ends.len(),
        route: c.route(),
        reason: c.reason,
        campaign: f.campaign.clone(),
    }
}

/// One tick's events on their way to the bus: those due and not yet put, and how many it put.
#[derive(Default)]
struct Delivery {
    due: Vec<BusEvent>,
    put: usize,
}

/// Events put on the bus in one call while a tick makes them.
const EVENTS_PUT_AT_ONCE: usize = 1_000;
