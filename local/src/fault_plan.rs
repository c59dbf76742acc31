//! The seeded fault plan: what the Batch simulator makes happen to each job.
//!
//! Decisions are a pure function of (seed, job name) — and, for application failures, of the
//! granule alone, because a bug fails every attempt of the same input. Rerunning with the same seed
//! replays the same campaign.

use super::events::AttemptEnd;
use granary::domain::batch_event::{EvaluateOnExit, RetryStrategy};
use granary::domain::retry_strategy::BatchRetryDecision;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
pub use timing::{BatchTiming, JobTimes};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    pub seed: u64,
    /// Chance that one Batch attempt is killed by a Spot reclaim.
    pub spot_rate: f64,
    /// Share of granules whose processing always fails (application exit code).
    pub app_failure_rate: f64,
    /// Exit code those failures use.
    pub app_exit_code: i64,
    /// Chance an attempt hits the attempt timeout.
    pub timeout_rate: f64,
    /// Chance an attempt cannot pull its image.
    pub pull_error_rate: f64,
    /// Also emit the RUNNABLE event Batch sends when it retries an attempt itself (the failed
    /// attempt appended to `attempts`). granary's rule forwards only SUCCEEDED and FAILED, so these
    /// must be filtered out on the way; Batch never sends FAILED for an attempt it retries.
    pub intermediate_events: bool,
    /// Chance the final event is delivered twice.
    pub duplicate_rate: f64,
    /// Chance an event is held back and delivered after later ones (reordering).
    pub delay_rate: f64,
    /// How many simulator ticks a delayed event waits.
    pub delay_ticks: u32,
    /// Chance a job's final event is never delivered: EventBridge retries a failed delivery for
    /// up to 24 hours and then drops it (EventBridge user guide, "Event retry policy and using
    /// dead-letter queues"). Only granary's reconciler, asking DescribeJobs, learns such an end.
    pub lost_rate: f64,
    /// How long jobs take and their events travel (none by default: every job ends at the next
    /// tick; `granary-local simulate` gives a Spot queue's times on its virtual clock).
    pub timing: BatchTiming,
}

impl Default for FaultPlan {
    fn default() -> Self {
        Self {
            seed: 42,
            spot_rate: 0.08,
            app_failure_rate: 0.02,
            app_exit_code: 1,
            timeout_rate: 0.0,
            pull_error_rate: 0.005,
            intermediate_events: false,
            duplicate_rate: 0.03,
            delay_rate: 0.02,
            delay_ticks: 3,
            lost_rate: 0.0,
            timing: BatchTiming::instant(),
        }
    }
}

/// What happens to one job: its attempts' ends and its final status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFate {
    pub ends: Vec<AttemptEnd>,
    pub succeeded: bool,
    pub duplicate: bool,
    pub delayed: bool,
    pub lost: bool,
}

impl FaultPlan {
    /// No faults at all: every attempt succeeds, every event is delivered once, in order.
    pub fn none() -> Self {
        Self {
            spot_rate: 0.0,
            app_failure_rate: 0.0,
            timeout_rate: 0.0,
            pull_error_rate: 0.0,
            intermediate_events: false,
            duplicate_rate: 0.0,
            delay_rate: 0.0,
            lost_rate: 0.0,
            ..Self::default()
        }
    }

    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading fault plan {}", path.display()))?;
        let plan: Self = serde_json::from_str(&text).with_context(|| {
            format!(
                "fault plan {} (fields: see docs/configuration.md, The local demo)",
                path.display()
            )
        })?;
        plan.validate()?;
        Ok(plan)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, p) in [
            ("spot_rate", self.spot_rate),
            ("app_failure_rate", self.app_failure_rate),
            ("timeout_rate", self.timeout_rate),
            ("pull_error_rate", self.pull_error_rate),
            ("duplicate_rate", self.duplicate_rate),
            ("delay_rate", self.delay_rate),
            ("lost_rate", self.lost_rate),
            ("timing.capacity_wait_rate", self.timing.capacity_wait_rate),
            ("timing.late_event_rate", self.timing.late_event_rate),
        ] {
            anyhow::ensure!(
                (0.0..=1.0).contains(&p),
                "fault plan: {name} must be between 0 and 1, not {p}"
            );
        }
        anyhow::ensure!(
            self.spot_rate + self.timeout_rate + self.pull_error_rate <= 1.0,
            "fault plan: per-attempt rates add up to more than 1"
        );
        Ok(())
    }

    /// True when every attempt of this granule fails in the application.
    pub fn is_poisoned(&self, granule_id: &str) -> bool {
        unit(stable_hash(self.seed ^ 0x5eed, granule_id.as_bytes())) < self.app_failure_rate
    }

    /// The fate of a job, given its job definition's retry strategy.
    pub fn fate(&self, job_name: &str, granule_id: &str, retry: &RetryStrategy) -> JobFate {
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(stable_hash(self.seed, job_name.as_bytes()));
        let poisoned = self.is_poisoned(granule_id);
        let mut ends = Vec::new();
        loop {
            let r: f64 = rng.random();
            let end = if r < self.spot_rate {
                AttemptEnd::SpotInterruption {
                    instance: format!("i-0{:016x}", rng.random::<u64>()),
                }
            } else if r < self.spot_rate + self.pull_error_rate {
                AttemptEnd::PullError
            } else if r < self.spot_rate + self.pull_error_rate + self.timeout_rate {
                AttemptEnd::Timeout
            } else if poisoned {
                AttemptEnd::AppFailure {
                    exit_code: self.app_exit_code,
                }
            } else {
                AttemptEnd::Success
            };
            let done = end == AttemptEnd::Success;
            ends.push(end);
            if done || !batch_retries(retry, &ends) {
                break;
            }
        }
        JobFate {
            succeeded: ends.last() == Some(&AttemptEnd::Success),
            ends,
            duplicate: rng.random::<f64>() < self.duplicate_rate,
            delayed: rng.random::<f64>() < self.delay_rate,
            lost: rng.random::<f64>() < self.lost_rate,
        }
    }
}

/// Batch's own decision after these attempts, by granary's implementation of its rules. A job
/// terminated at its attempt timeout is never retried, whatever attempts and rules remain (AWS
/// Batch user guide, "Job timeouts": "If a job is terminated for exceeding the timeout duration,
/// it isn't retried").
fn batch_retries(retry: &RetryStrategy, ends: &[AttemptEnd]) -> bool {
    let Some(last) = ends.last() else {
        return false;
    };
    if *last == AttemptEnd::Timeout {
        return false;
    }
    let (status_reason, reason, exit) = last.summary();
    matches!(
        retry.decide(ends.len(), Some(&status_reason), reason.as_deref(), exit),
        BatchRetryDecision::WillRetry { .. }
    )
}

/// Parses the JSON retryStrategy carried in events into the domain type.
pub fn retry_strategy_of(value: &serde_json::Value) -> RetryStrategy {
    serde_json::from_value(value.clone()).unwrap_or(RetryStrategy {
        attempts: Some(1),
        evaluate_on_exit: Vec::<EvaluateOnExit>::new(),
    })
}

pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A small hash that is stable across runs and platforms (unlike std's), so fates replay.
pub(crate) fn stable_hash(seed: u64, bytes: &[u8]) -> u64 {
    {
        // FNV-1a, then a splitmix64 finaliser to spread the bits.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

#[cfg(test)]
mod tests;
mod timing;
