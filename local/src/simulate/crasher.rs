//! Where a simulation's invocations die: each, with the run's crash rate, at a random call
//! among as many as that function's invocations have made so far, before the call is made or
//! after it was made and its answer lost. Seeded: a run replays.

use granary::adapters::tap::faults::{CrashMode, CrashPoint, FaultCounts, Faults};
use granary::handlers::Ctx;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

/// With chance `rate`, a crash at a call in 1..=`range`, before it is made or after it was
/// made and its answer lost (the local runtime's chaos places its crashes the same way).
pub fn crash_point(rng: &mut impl Rng, rate: f64, range: u64) -> Option<CrashPoint> {
    (rng.random::<f64>() < rate).then(|| CrashPoint {
        at_call: rng.random_range(1..=range.max(1)),
        mode: if rng.random_bool(0.5) {
            CrashMode::Before
        } else {
            CrashMode::After
        },
    })
}

pub struct Crasher {
    rng: rand::rngs::StdRng,
    rate: f64,
    counts: Arc<FaultCounts>,
    /// The most calls an invocation of each function made, to place crashes among them.
    most_calls: BTreeMap<&'static str, u64>,
    /// Invocations that died at their crash point.
    pub crashes: u64,
}

impl Crasher {
    pub fn new(seed: u64, rate: f64) -> Self {
        Self {
            rng: rand::rngs::StdRng::seed_from_u64(seed ^ 0x1_96e5),
            rate,
            counts: Arc::default(),
            most_calls: BTreeMap::new(),
            crashes: 0,
        }
    }

    /// An invocation of `function` on `ctx`, perhaps set to die.
    pub fn invocation(&mut self, function: &'static str, ctx: &Ctx) -> (Ctx, Arc<Faults>) {
        let range = self.most_calls.get(function).copied().unwrap_or(20);
        let crash = crash_point(&mut self.rng, self.rate, range);
        let faults = Faults::new(crash, 0.0, self.rng.random(), self.counts.clone());
        (ctx.with_faults(&faults), faults)
    }

    /// The invocation ended (or died): its calls widen the range later crashes fall in.
    pub fn ended(&mut self, function: &'static str, faults: &Faults) {
        let most = self.most_calls.entry(function).or_default();
        *most = (*most).max(faults.calls());
        self.crashes += u64::from(faults.crashed());
    }
}
