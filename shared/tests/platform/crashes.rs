//! The crash sweep every harness of this crate runs, whatever world it drives (the backfill
//! platform, the ingest queue, an archive job): a run plans its crashes as the Nth external call
//! counted across all of its invocations in the order they run, and each invocation gets a
//! [`Faults`] whose crash point is what is left of the next planned one ([`Crashes`]); a sweep
//! runs one fresh world per crash point of a clean run ([`at_every_call`]) or per pair of a
//! crash and a second one inside the recovery ([`inside_the_recovery`]) and fails on any run
//! the world's own audit rejects, and on a planned crash that was never reached — a harness
//! that stopped crashing would otherwise pass.

use granary::adapters::tap::faults::{CrashMode, CrashPoint, FaultCounts, Faults};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A run's planned crashes, in increasing order of the call they fall on, and what its
/// invocations have used of them.
pub struct Crashes {
    planned: Vec<CrashPoint>,
    calls: AtomicU64,
    reached: AtomicUsize,
    totals: Arc<FaultCounts>,
}

impl Crashes {
    pub fn new(planned: &[CrashPoint]) -> Self {
        Self {
            planned: planned.to_vec(),
            calls: AtomicU64::new(0),
            reached: AtomicUsize::new(0),
            totals: Arc::default(),
        }
    }

    /// The faults of the next invocation: the next planned crash, if it falls in its calls.
    pub fn invocation(&self) -> Arc<Faults> {
        let seen = self.calls.load(Relaxed);
        let point = self
            .planned
            .get(self.reached.load(Relaxed))
            .filter(|c| c.at_call > seen)
            .map(|c| CrashPoint {
                at_call: c.at_call - seen,
                mode: c.mode,
            });
        Faults::new(point, 0.0, 0, self.totals.clone())
    }

    /// Counts the invocation's calls and its crash; whether it lived.
    pub fn ended(&self, faults: &Faults) -> bool {
        self.calls.fetch_add(faults.calls(), Relaxed);
        if faults.crashed() {
            self.reached.fetch_add(1, Relaxed);
        }
        !faults.crashed()
    }

    /// External calls the run's invocations made.
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed)
    }

    /// How many of the planned crashes were reached.
    pub fn reached(&self) -> usize {
        self.reached.load(Relaxed)
    }
}

/// What one crash run came to: whether its crashes were all reached, and what its audit found.
pub struct CrashRun {
    pub reached: bool,
    pub audit: Result<(), String>,
}

/// One fresh world per crash point of a clean run of `calls` calls (each call, never made and
/// made with its answer lost), run and audited by `one`. Panics listing every run that failed
/// its audit, and if a crash point was not reached. Returns the runs made.
pub async fn at_every_call<F, Fut>(what: &str, calls: u64, mut one: F) -> u64
where
    F: FnMut(CrashPoint) -> Fut,
    Fut: std::future::Future<Output = CrashRun>,
{
    assert!(calls > 0, "{what}: the clean run made no external call");
    let mut failures = Vec::new();
    let mut unreached = Vec::new();
    for at_call in 1..=calls {
        for mode in [CrashMode::Before, CrashMode::After] {
            let run = one(CrashPoint { at_call, mode }).await;
            if !run.reached {
                unreached.push(format!("{mode:?} call {at_call}"));
            }
            if let Err(e) = run.audit {
                failures.push(format!("{what}: crash {mode:?} call {at_call}: {e}"));
            }
        }
    }
    assert!(
        unreached.is_empty(),
        "{what}: crash points never reached: {unreached:?}"
    );
    assert!(
        failures.is_empty(),
        "{} of {} crash runs failed:\n{}",
        failures.len(),
        2 * calls,
        failures.join("\n")
    );
    2 * calls
}

/// Runs with a crash inside the recovery ([`super::spread::two_crashes`] over a clean run of
/// `calls` calls), each a fresh world run and audited by `one`. A pair whose second crash falls
/// past the recovery's last call is not a run (nothing more to crash). Panics listing every run
/// that failed its audit, and unless more than `at_least` runs reached their second crash.
/// Returns the runs that did.
pub async fn inside_the_recovery<F, Fut>(what: &str, calls: u64, at_least: u64, mut one: F) -> u64
where
    F: FnMut([CrashPoint; 2]) -> Fut,
    Fut: std::future::Future<Output = CrashRun>,
{
    let mut failures = Vec::new();
    let mut runs = 0;
    for crashes in super::spread::two_crashes(calls) {
        let run = one(crashes).await;
        if !run.reached {
            continue;
        }
        runs += 1;
        if let Err(e) = run.audit {
            failures.push(format!("{what}: crashes {crashes:?}: {e}"));
        }
    }
    assert!(
        runs > at_least,
        "{what}: only {runs} runs reached their second crash"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    runs
}
