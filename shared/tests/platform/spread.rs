//! Where a crash harness puts its crash points when one per call would be too many runs.

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
