//! How long Batch and EventBridge take, in a simulation on the virtual clock
//! (`granary-local simulate`): each job's wait in the queue, its attempts' run times, a wait
//! for Spot capacity that the job queue's watchdog may end, the delay before its end is
//! delivered, and how long DescribeJobs goes on showing the job unfinished. Drawn from the
//! seed and the job's name, so a run replays. [`BatchTiming::instant`] is the simulator of the
//! real-time runs: every job ends at the next tick.

use super::{stable_hash, unit};
use granary::domain::classify::STATE_TIME_LIMIT;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A range of whole seconds, `[least, most]`, drawn uniformly.
pub type Secs = [u64; 2];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchTiming {
    /// From SubmitJob to the first attempt's start, when capacity is there.
    pub queue_wait_secs: Secs,
    /// Each attempt's run time (Batch's own retries run one after another).
    pub attempt_secs: Secs,
    /// Chance a job waits in RUNNABLE for Spot capacity before it starts.
    pub capacity_wait_rate: f64,
    /// How long such a wait lasts. Past `capacity_limit_secs` the job queue's watchdog cancels
    /// the job instead (`jobStateTimeLimitActions`).
    pub capacity_wait_secs: Secs,
    /// The template's `RunnableCapacityLimitSeconds` (14,400 by default): a job RUNNABLE this
    /// long for capacity is cancelled, "Canceled by JobStateTimeLimit action due to reason:
    /// CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" (AWS Batch user guide, "Jobs stuck in a
    /// RUNNABLE status"; `shared/tests/runnable_watchdog.rs` reads the template's actions).
    pub capacity_limit_secs: u64,
    /// EventBridge's usual delay from a job's end to its event reaching the queue.
    pub event_delay_secs: Secs,
    /// Chance a delivery fails and EventBridge retries it, "for up to 24 hours and up to 185
    /// times" by default (EventBridge user guide, "Event retry policy"): the event arrives late.
    pub late_event_rate: f64,
    pub late_event_secs: Secs,
    /// How long after a job's end DescribeJobs (and ListJobs) still show it unfinished.
    pub describe_lag_secs: Secs,
}

impl Default for BatchTiming {
    fn default() -> Self {
        Self::instant()
    }
}

/// One job's times, from its submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTimes {
    /// When its end happens (the last attempt stops, or the watchdog cancels it).
    pub ends_after: Duration,
    /// Ended by the job queue's watchdog, with this reason, before any attempt ran.
    pub cancelled_for_capacity: bool,
    /// From its end to its event on the queue.
    pub delivered_after: Duration,
    /// From its end to DescribeJobs showing it.
    pub described_after: Duration,
}

impl BatchTiming {
    /// Every job ends, is described and is delivered at once (the real-time runs').
    pub fn instant() -> Self {
        Self {
            queue_wait_secs: [0, 0],
            attempt_secs: [0, 0],
            capacity_wait_rate: 0.0,
            capacity_wait_secs: [0, 0],
            capacity_limit_secs: 14_400,
            event_delay_secs: [0, 0],
            late_event_rate: 0.0,
            late_event_secs: [0, 0],
            describe_lag_secs: [0, 0],
        }
    }

    /// A Spot queue as a campaign meets it: minutes in the queue, a quarter to three quarters
    /// of an hour an attempt, one job in fifty waiting hours for capacity (some past the
    /// watchdog's four), EventBridge's seconds, one delivery in two hundred retried for up to
    /// a day, and DescribeJobs a minute behind at most.
    pub fn spot_queue() -> Self {
        Self {
            queue_wait_secs: [5, 600],
            attempt_secs: [900, 2_700],
            capacity_wait_rate: 0.02,
            capacity_wait_secs: [3_600, 21_600],
            capacity_limit_secs: 14_400,
            event_delay_secs: [0, 30],
            late_event_rate: 0.005,
            late_event_secs: [3_600, 86_400],
            describe_lag_secs: [0, 60],
        }
    }

    /// Whether any job takes time: the simulator then keeps an agenda of ends to come.
    pub fn takes_time(&self) -> bool {
        *self != Self::instant()
    }

    /// The message the watchdog's cancel carries as the job's `statusReason`.
    pub fn capacity_cancel_reason() -> String {
        format!("{STATE_TIME_LIMIT}CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY")
    }

    /// The times of the job named `job_name` with `attempts` attempts, under `seed`.
    pub fn times(&self, seed: u64, job_name: &str, attempts: usize) -> JobTimes {
        let mut draw = Draws {
            h: stable_hash(seed ^ 0x7157_ba7c, job_name.as_bytes()),
        };
        let queued = draw.secs(self.queue_wait_secs);
        let capacity = if draw.unit() < self.capacity_wait_rate {
            draw.secs(self.capacity_wait_secs)
        } else {
            0
        };
        let cancelled_for_capacity = capacity > self.capacity_limit_secs;
        let ran: u64 = (0..attempts.max(1))
            .map(|_| draw.secs(self.attempt_secs))
            .sum();
        let ends_after = if cancelled_for_capacity {
            queued + self.capacity_limit_secs
        } else {
            queued + capacity + ran
        };
        let mut delivered_after = draw.secs(self.event_delay_secs);
        if draw.unit() < self.late_event_rate {
            delivered_after += draw.secs(self.late_event_secs);
        }
        JobTimes {
            ends_after: Duration::from_secs(ends_after),
            cancelled_for_capacity,
            delivered_after: Duration::from_secs(delivered_after),
            described_after: Duration::from_secs(draw.secs(self.describe_lag_secs)),
        }
    }
}

/// A stream of draws from one hash (splitmix64 steps: stable across runs and platforms).
struct Draws {
    h: u64,
}

impl Draws {
    fn next(&mut self) -> u64 {
        self.h = stable_hash(self.h, b"next");
        self.h
    }

    fn unit(&mut self) -> f64 {
        unit(self.next())
    }

    fn secs(&mut self, [least, most]: Secs) -> u64 {
        if most <= least {
            return least;
        }
        least + self.next() % (most - least + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_timing_takes_no_time() {
        let t = BatchTiming::instant().times(7, "granary-g1-a1", 3);
        assert_eq!(t.ends_after, Duration::ZERO);
        assert_eq!(t.delivered_after, Duration::ZERO);
        assert!(!t.cancelled_for_capacity);
        assert!(!BatchTiming::instant().takes_time());
    }

    #[test]
    fn a_spot_queues_times_replay_and_stay_in_their_ranges() {
        let timing = BatchTiming::spot_queue();
        let (mut cancelled, mut late, mut waited) = (0, 0, 0);
        for i in 0..20_000 {
            let name = format!("granary-g{i}-a1");
            let t = timing.times(3, &name, 1);
            assert_eq!(t, timing.times(3, &name, 1), "a seed replays");
            let ends = t.ends_after.as_secs();
            if t.cancelled_for_capacity {
                cancelled += 1;
                // Cancelled at the watchdog's limit, after its queue wait, no attempt run.
                assert!((14_405..=15_000).contains(&ends), "{ends}");
            } else {
                assert!((905..=600 + 21_600 + 2_700).contains(&ends), "{ends}");
                waited += u32::from(ends > 600 + 2_700);
            }
            late += u32::from(t.delivered_after.as_secs() > 30);
            assert!(t.described_after.as_secs() <= 60);
        }
        // One in fifty waits for capacity (400); of those, (21,600 - 14,400) / 18,000 are
        // cancelled (160).
        assert!((120..=200).contains(&cancelled), "{cancelled}");
        assert!((320..=480).contains(&(waited + cancelled)), "{waited}");
        assert!((60..=150).contains(&late), "{late}");
    }
}
