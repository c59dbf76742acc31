//! SubmitJob paced to this function's share of the account's budget. AWS Batch accepts
//! SubmitJob at 50 calls a second per account and Region, a quota AWS does not raise (AWS Batch
//! user guide, "AWS Batch service quotas"), shared with every other submitter in the account;
//! past it Batch answers TooManyRequestsException. granary splits a budget well under it among
//! its submitters by configuration — each function's `GRANARY_SUBMIT_JOB_RATE`, calls a second
//! per invocation (template parameters `FeederSubmitJobRate`, `RequeuerSubmitJobRate` × the
//! requeuer's concurrency, `IngestSubmitJobRate`; `infra/model` checks their sum) — and each
//! invocation spaces its own calls. A refused call did nothing and is retried by the submission
//! protocol's backoff; none is ever sent twice (a lost answer is looked up by name first).

use crate::ports::{ActiveJobs, JobDescription, JobRequest, JobRunner, JobRunnerError, JobSummary};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Spaces calls `1 / rate` seconds apart: each caller takes the next free slot and waits for it.
pub struct Pacer {
    interval: Duration,
    next: tokio::sync::Mutex<Option<Instant>>,
}

impl Pacer {
    /// `None` for a rate that is not a positive number of calls a second (unpaced).
    pub fn per_second(rate: f64) -> Option<Self> {
        (rate.is_finite() && rate > 0.0).then(|| Self::spaced(Duration::from_secs_f64(1.0 / rate)))
    }

    /// Calls at least `interval` apart.
    pub fn spaced(interval: Duration) -> Self {
        Self {
            interval,
            next: tokio::sync::Mutex::new(None),
        }
    }

    /// Waits for this call's slot.
    pub async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().await;
            let now = Instant::now();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// Batch's side of the quota, for the in-memory twins: at most `per_second` calls in any second
/// (on tokio's clock, so a paused test clock counts virtual seconds).
#[derive(Debug)]
pub struct RateLimit {
    per_second: usize,
    recent: std::sync::Mutex<std::collections::VecDeque<Instant>>,
}

impl RateLimit {
    pub fn per_second(per_second: usize) -> Self {
        Self {
            per_second,
            recent: std::sync::Mutex::default(),
        }
    }

    /// Whether one more call fits in the last second (and counts it if so).
    pub fn admit(&self) -> bool {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            recent.pop_front();
        }
        if recent.len() >= self.per_second {
            return false;
        }
        recent.push_back(now);
        true
    }
}

/// What Batch answers a SubmitJob past the account's quota: a refusal (the job is not made).
pub fn too_many_requests() -> JobRunnerError {
    JobRunnerError::refused("TooManyRequestsException: Too Many Requests (SubmitJob rate exceeded)")
}

/// A job runner whose SubmitJob calls are paced; every other call passes straight through.
pub struct PacedJobs {
    pub inner: Arc<dyn JobRunner>,
    pub pacer: Pacer,
}

#[async_trait]
impl JobRunner for PacedJobs {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        self.pacer.wait().await;
        self.inner.submit(request).await
    }
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        self.inner.count_active(stop_at).await
    }
    async fn find_by_name(&self, name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        self.inner.find_by_name(name).await
    }
    /// Drawn from the same budget as SubmitJob: an operator's bulk cancel must not starve the
    /// account's submitters (Batch throttles its API calls per account).
    async fn terminate(&self, id: &str, reason: &str) -> Result<(), JobRunnerError> {
        self.pacer.wait().await;
        self.inner.terminate(id, reason).await
    }
    async fn describe(&self, id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        self.inner.describe(id).await
    }
    // Forwarded, or the inner runner's batched DescribeJobs would go one id a call.
    async fn describe_many(&self, ids: &[String]) -> Result<Vec<JobDescription>, JobRunnerError> {
        self.inner.describe_many(ids).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryJobRunner;
    use std::collections::BTreeMap;

    fn request(n: usize) -> JobRequest {
        JobRequest {
            job_name: format!("j{n}"),
            environment: BTreeMap::new(),
            parameters: BTreeMap::new(),
            array_size: None,
            queue: None,
            memory_mib: None,
        }
    }

    /// On the clock tokio lets a test pause: a hundred calls at AWS's own limit are each
    /// accepted by a twin that refuses the 51st call in a second, and take two seconds.
    #[tokio::test(start_paused = true)]
    async fn paced_calls_stay_inside_batchs_rate_and_unpaced_ones_do_not() {
        let twin = Arc::new(MemoryJobRunner::default().with_submit_limit(50));
        let paced = PacedJobs {
            inner: twin.clone(),
            pacer: Pacer::per_second(50.0).unwrap(),
        };
        let start = Instant::now();
        for n in 0..100 {
            paced.submit(request(n)).await.unwrap();
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1_980), "{took:?}");
        assert!(took < Duration::from_millis(2_100), "{took:?}");
        // Unpaced, the 51st call of the same second is refused, as Batch refuses it.
        let unpaced = MemoryJobRunner::default().with_submit_limit(50);
        let mut refused = 0;
        for n in 0..60 {
            if let Err(e) = unpaced.submit(request(n)).await {
                assert!(!e.may_have_taken_effect && e.message.contains("TooManyRequests"));
                refused += 1;
            }
        }
        assert_eq!(refused, 10);
        assert!(Pacer::per_second(0.0).is_none() && Pacer::per_second(f64::NAN).is_none());
    }
}
