//! A [`Tap`] that makes the cloud misbehave on purpose, for the crash-point harness and
//! `granary-local chaos`: every external call of one handler invocation passes through one [`Faults`].
//!
//! - **Crash at call N.** The invocation dies at its Nth external call: either the call is never
//!   made ([`CrashMode::Before`]) or it is made and its answer lost ([`CrashMode::After`]). From
//!   then on every call of that invocation fails too — a dead process makes no more calls — and
//!   [`Faults::crashed`] tells the platform (the local runner) to treat the invocation as lost:
//!   Lambda deletes none of its SQS messages, the schedule simply fires again.
//! - **Throttling at a rate.** A call is refused before it is made, as S3 (503 SlowDown), SQS and
//!   Batch (TooManyRequestsException) refuse calls over their rates once the SDK's own retries are
//!   spent. A refused SubmitJob did nothing.

use super::{Call, Fate, Refusal, Tap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// The process dies just before the call: it is never made.
    Before,
    /// The call is made, then the process dies before it sees the answer.
    After,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPoint {
    /// 1-based index of the external call at which the invocation dies.
    pub at_call: u64,
    pub mode: CrashMode,
}

/// Totals across every invocation of a run.
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub calls: AtomicU64,
    pub crashes: AtomicU64,
    pub throttles: AtomicU64,
    /// Calls by operation (the crashing ones included), to see where a run's calls went.
    pub by_op: Mutex<std::collections::BTreeMap<super::Op, u64>>,
}

impl FaultCounts {
    /// Calls by operation so far.
    pub fn calls_by_op(&self) -> std::collections::BTreeMap<super::Op, u64> {
        self.by_op.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The faults of one handler invocation.
pub struct Faults {
    crash: Option<CrashPoint>,
    throttle_rate: f64,
    totals: Arc<FaultCounts>,
    state: Mutex<State>,
}

struct State {
    calls: u64,
    /// This invocation's calls by operation.
    ops: std::collections::BTreeMap<super::Op, u64>,
    crashed: bool,
    /// splitmix64: a seeded, reproducible stream (no rand crate in the Lambdas for this).
    rng: u64,
}

impl Faults {
    pub fn new(
        crash: Option<CrashPoint>,
        throttle_rate: f64,
        seed: u64,
        totals: Arc<FaultCounts>,
    ) -> Arc<Self> {
        Arc::new(Self {
            crash,
            throttle_rate,
            totals,
            state: Mutex::new(State {
                calls: 0,
                ops: Default::default(),
                crashed: false,
                rng: seed,
            }),
        })
    }

    /// Whether this invocation died (its caller must behave as the platform does after a crash).
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// External calls this invocation attempted (the crashing one included).
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// This invocation's calls by operation.
    pub fn calls_by_op(&self) -> std::collections::BTreeMap<super::Op, u64> {
        self.lock().ops.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Decides the fate of each call: refused unmade, made, or made with its answer lost. Any call
/// may be the crash point, a download from a source or a depositor's server too; only AWS
/// calls are throttled (a download that fails is the download step's own, tested failure).
impl Tap for Faults {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        let mut s = self.lock();
        if s.crashed {
            return Err(CRASHED);
        }
        s.calls += 1;
        *s.ops.entry(call.op).or_default() += 1;
        self.totals.calls.fetch_add(1, Ordering::Relaxed);
        *self
            .totals
            .by_op
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(call.op)
            .or_default() += 1;
        if let Some(c) = self.crash.filter(|c| c.at_call == s.calls) {
            s.crashed = true;
            self.totals.crashes.fetch_add(1, Ordering::Relaxed);
            return match c.mode {
                CrashMode::Before => Err(CRASHED),
                CrashMode::After => Ok(Fate::MakeAndLoseAnswer),
            };
        }
        if self.throttle_rate > 0.0
            && !call.op.is_outside_aws()
            && unit(&mut s.rng) < self.throttle_rate
        {
            self.totals.throttles.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal {
                message: "injected throttling: slow down",
                ambiguous: false,
            });
        }
        Ok(Fate::Make)
    }
}

/// Makes nothing fail: every call gives way to other tasks, so invocations joined on one task
/// (two deliveries of one SQS message, two overlapping schedule runs) interleave call by call.
pub struct Interleave;

impl Tap for Interleave {
    fn interleaves(&self) -> bool {
        true
    }
}

const CRASHED: Refusal = Refusal {
    message: "injected crash: the invocation died",
    ambiguous: true,
};

/// The next number of a splitmix64 stream, as a fraction in [0, 1).
fn unit(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use crate::adapters::tap::TappedStore;
    use crate::ports::{ObjectStore, PutCondition};
    use bytes::Bytes;

    fn store(crash: Option<CrashPoint>, rate: f64) -> (TappedStore, Arc<MemoryStore>, Arc<Faults>) {
        let inner = Arc::new(MemoryStore::new());
        let faults = Faults::new(crash, rate, 7, Arc::default());
        (
            TappedStore {
                inner: inner.clone(),
                tap: faults.clone(),
            },
            inner,
            faults,
        )
    }

    #[tokio::test]
    async fn a_crash_before_the_call_leaves_no_trace_and_kills_the_rest() {
        let crash = CrashPoint {
            at_call: 2,
            mode: CrashMode::Before,
        };
        let (s, inner, faults) = store(Some(crash), 0.0);
        s.put("a", Bytes::from_static(b"1"), PutCondition::Overwrite)
            .await
            .unwrap();
        assert!(s
            .put("b", Bytes::new(), PutCondition::Overwrite)
            .await
            .is_err());
        assert!(s
            .put("c", Bytes::new(), PutCondition::Overwrite)
            .await
            .is_err());
        assert!(faults.crashed());
        let keys: Vec<String> = inner
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(keys, ["a"]);
    }

    #[tokio::test]
    async fn a_crash_after_the_call_keeps_its_effect_but_loses_the_answer() {
        let crash = CrashPoint {
            at_call: 1,
            mode: CrashMode::After,
        };
        let (s, inner, faults) = store(Some(crash), 0.0);
        assert!(s
            .put("a", Bytes::new(), PutCondition::Overwrite)
            .await
            .is_err());
        assert!(faults.crashed());
        assert!(inner.get("a").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn throttling_refuses_about_the_rate_of_calls() {
        let (s, inner, faults) = store(None, 0.25);
        let mut refused = 0;
        for i in 0..2000 {
            if s.put(&format!("k{i}"), Bytes::new(), PutCondition::Overwrite)
                .await
                .is_err()
            {
                refused += 1;
            }
        }
        assert!((400..600).contains(&refused), "{refused}");
        assert!(!faults.crashed());
        assert_eq!(inner.list("").await.unwrap().len(), 2000 - refused);
    }
}
