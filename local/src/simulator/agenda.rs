//! What the simulator has yet to do at a time to come, when jobs take time
//! (`fault_plan::BatchTiming`): a job's end, an array window's parent's end, DescribeJobs
//! catching up with an end, an event reaching the bus. Kept in time order, ties in the order
//! they were put, so a seed replays.

use crate::events::JobFacts;
use crate::fault_plan::{JobFate, JobTimes};
use granary::domain::batch_event::JobStatus;
use granary::ports::BusEvent;
use std::collections::BTreeMap;
use tokio::time::Instant;

pub(super) enum Due {
    /// A job's last attempt stops (or the job queue's watchdog cancels it).
    End {
        facts: Box<JobFacts>,
        fate: JobFate,
        times: JobTimes,
    },
    /// An array window's parent ends, once its last child has, with their counts.
    ParentEnd {
        facts: Box<JobFacts>,
        succeeded: u32,
        failed: u32,
    },
    /// DescribeJobs shows the job's end from now on.
    Settle {
        job_id: String,
        status: JobStatus,
        detail: serde_json::Value,
    },
    /// EventBridge delivers the event.
    Deliver(BusEvent),
}

#[derive(Default)]
pub(super) struct Agenda {
    items: BTreeMap<(Instant, u64), Due>,
    put: u64,
}

impl Agenda {
    pub(super) fn put(&mut self, at: Instant, due: Due) {
        self.items.insert((at, self.put), due);
        self.put += 1;
    }

    /// The earliest thing due by `now`, if any.
    pub(super) fn next_due(&mut self, now: Instant) -> Option<Due> {
        let first = self.items.first_key_value().map(|(k, _)| *k)?;
        if first.0 > now {
            return None;
        }
        self.items.remove(&first)
    }

    /// The ends of `job_ids` still to come, made due now: TerminateJob ends a job when it is
    /// called (AWS Batch API reference, "TerminateJob": a job not yet started is cancelled, a
    /// running one moves to FAILED), not at the end drawn for it.
    pub(super) fn end_now(&mut self, job_ids: &[String], now: Instant) {
        if job_ids.is_empty() {
            return;
        }
        let wanted: std::collections::HashSet<&str> = job_ids.iter().map(String::as_str).collect();
        let keys: Vec<(Instant, u64)> = self
            .items
            .iter()
            .filter(|(at, due)| {
                at.0 > now
                    && matches!(due, Due::End { facts, .. } if wanted.contains(facts.job_id.as_str()))
            })
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(due) = self.items.remove(&key) {
                self.put(now, due);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// When the next thing is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.items.first_key_value().map(|((at, _), _)| *at)
    }
}
