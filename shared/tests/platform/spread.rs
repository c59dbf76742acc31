//! Where a crash harness puts its crash points when one per call would be too many runs.

use granary::adapters::tap::faults::{CrashMode, CrashPoint};

/// 1, 2, 3, 5, 8, 13, 21, … up to `n`: every one of a run's first calls, then ever more sparsely
/// (the Fibonacci numbers), so a recovery is crashed early and late without a run per call.
pub fn spread(n: u64) -> Vec<u64> {
    let (mut a, mut b) = (1u64, 2u64);
    let mut out = Vec::new();
    while a <= n {
        out.push(a);
        (a, b) = (b, a + b);
    }
    out
}

/// Two crashes for a run of `calls` external calls: the first at a spread of the calls, the
/// second a spread of calls after it (inside the recovery), one before its call and the other
/// after it with the answer lost, each way round.
pub fn two_crashes(calls: u64) -> Vec<[CrashPoint; 2]> {
    let mut out = Vec::new();
    for first in spread(calls) {
        for gap in spread(calls) {
            for (m1, m2) in [
                (CrashMode::Before, CrashMode::After),
                (CrashMode::After, CrashMode::Before),
            ] {
                out.push([
                    CrashPoint {
                        at_call: first,
                        mode: m1,
                    },
                    CrashPoint {
                        at_call: first + gap,
                        mode: m2,
                    },
                ]);
            }
        }
    }
    out
}
