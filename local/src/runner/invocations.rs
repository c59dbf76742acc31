//! The context each invocation of a function sees: through the function's tap, and under chaos
//! through a fresh set of injected faults drawn from the chaos seed.

use super::{LambdaFunction, LocalRuntime};
use granary::adapters::tap::faults::Faults;
use granary::handlers::Ctx;
use rand::Rng;
use std::sync::Arc;

impl LocalRuntime {
    /// The context one invocation sees: the runtime's, or under chaos one whose external calls
    /// pass through a fresh [`Faults`] (and the handle to ask whether the invocation died).
    pub(super) fn invocation(&mut self, function: LambdaFunction) -> (Ctx, Option<Arc<Faults>>) {
        let ctx = self.function_ctx(function);
        let Some(chaos) = self.options.chaos.clone() else {
            return (ctx, None);
        };
        // The invocations before this one have all returned: their call counts are final.
        for (f, faults) in &self.invocations[self.calls_seen_upto..] {
            let most = self.most_calls.entry(*f).or_default();
            *most = (*most).max(faults.calls());
        }
        self.calls_seen_upto = self.invocations.len();
        let range = self
            .most_calls
            .get(&function)
            .copied()
            .unwrap_or(0)
            .max(chaos.min_crash_range)
            .max(1);
        let crash =
            crate::simulate::crasher::crash_point(&mut self.chaos_rng, chaos.crash_rate, range);
        let faults = Faults::new(
            crash,
            chaos.throttle_rate,
            self.chaos_rng.random(),
            self.faults.clone(),
        );
        self.invocations.push((function, faults.clone()));
        (ctx.with_faults(&faults), Some(faults))
    }

    /// External calls made by each function's invocations so far (under chaos).
    pub fn calls_by_function(&self) -> std::collections::BTreeMap<LambdaFunction, u64> {
        let mut calls = std::collections::BTreeMap::new();
        for (function, faults) in &self.invocations {
            *calls.entry(*function).or_default() += faults.calls();
        }
        calls
    }

    /// External calls by function and operation so far (under chaos).
    pub fn calls_by_function_and_op(
        &self,
    ) -> std::collections::BTreeMap<(LambdaFunction, granary::adapters::tap::Op), u64> {
        let mut calls = std::collections::BTreeMap::new();
        for (function, faults) in &self.invocations {
            for (op, n) in faults.calls_by_op() {
                *calls.entry((*function, op)).or_default() += n;
            }
        }
        calls
    }

    /// The context a function's invocations see without chaos: the runtime's, through the
    /// function's own tap when it has one.
    pub(super) fn function_ctx(&self, function: LambdaFunction) -> Ctx {
        match self.function_taps.get(&function) {
            // A tap per function only watches: the runtime's one warm instance stays warm.
            Some(tap) => self.ctx.watched(tap.clone()),
            None => self.ctx.clone(),
        }
    }
}
