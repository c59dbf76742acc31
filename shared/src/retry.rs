//! Trying a call again within one invocation, with backoff.
//!
//! The AWS SDK already retries throttling, 5xx and I/O errors (standard mode, "Configuring
//! retries in the AWS SDK for Rust": up to the configured attempts, each after "a short, random
//! duration to avoid retry storms"). What reaches a handler has survived those retries; trying
//! again at once would only add to the load that refused it. Every in-run retry loop therefore
//! goes through [`again`]: a bounded number of tries, and between them an exponential backoff
//! with full jitter (delay drawn from `0 ..= min(cap, base × 2^(try-1))`, as in the AWS
//! Architecture Blog's "Exponential Backoff And Jitter"). Only errors the caller calls retryable
//! are tried again; a conflict or a refusal that cannot change is returned at once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many tries and how long to wait between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Tries in all (the first included); at least 1.
    pub tries: u32,
    /// The ceiling of the first wait; it doubles with each try.
    pub base: Duration,
    /// No wait is longer than this.
    pub cap: Duration,
}

impl Backoff {
    /// In-run retries of a handler: 5 tries, waits drawn from up to 50 ms, 100 ms, 200 ms, 400 ms.
    pub const IN_RUN: Backoff = Backoff {
        tries: 5,
        base: Duration::from_millis(50),
        cap: Duration::from_secs(2),
    };

    /// The longest wait before try `next` (2-based: the wait before the second try is `base`).
    pub fn ceiling(&self, next: u32) -> Duration {
        let doublings = next.saturating_sub(2).min(20);
        self.base.saturating_mul(1 << doublings).min(self.cap)
    }

    /// A wait before try `next`, drawn uniformly from `0 ..= ceiling(next)`.
    pub fn delay(&self, next: u32) -> Duration {
        let ceiling = self.ceiling(next).as_micros() as u64;
        Duration::from_micros(if ceiling == 0 {
            0
        } else {
            jitter() % (ceiling + 1)
        })
    }
}

/// Calls `call` until it succeeds, fails with an error `retryable` refuses, or `backoff.tries`
/// tries are spent; waits [`Backoff::delay`] between tries. Returns the last result.
pub async fn again<T, E, F, Fut>(
    backoff: Backoff,
    what: &str,
    mut call: F,
    retryable: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut tried = 0;
    loop {
        tried += 1;
        match call().await {
            Err(e) if tried < backoff.tries.max(1) && retryable(&e) => {
                let wait = backoff.delay(tried + 1);
                tracing::warn!(what, tried, wait_ms = wait.as_millis() as u64, error = %e, "trying again after a backoff");
                tokio::time::sleep(wait).await;
            }
            result => return result,
        }
    }
}

/// The jitter stream's position (0: not started).
static JITTER_STATE: AtomicU64 = AtomicU64::new(0);

/// Restarts the jitter sequence from `seed`: a harness that replays a run (the crash-point
/// harness crashing the same recovery at each of its calls) gets the same choices each time —
/// which marker a pass starts at included — so a call counted in one run is there in the next.
pub fn reseed_jitter(seed: u64) {
    JITTER_STATE.store(seed | 1, Ordering::Relaxed);
}

/// A cheap, unseeded stream for jitter (no rand crate in the Lambdas for this): splitmix64 over
/// a process-wide counter started from the clock.
pub(crate) fn jitter() -> u64 {
    let mut s = JITTER_STATE.load(Ordering::Relaxed);
    if s == 0 {
        s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
            | 1;
    }
    let next = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    JITTER_STATE.store(next, Ordering::Relaxed);
    let mut z = next;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    const FAST: Backoff = Backoff {
        tries: 4,
        base: Duration::from_millis(8),
        cap: Duration::from_millis(20),
    };

    #[test]
    fn the_ceiling_doubles_from_base_to_cap() {
        let waits: Vec<u128> = (2..=6).map(|n| FAST.ceiling(n).as_millis()).collect();
        assert_eq!(waits, [8, 16, 20, 20, 20]);
        for n in 2..=6 {
            assert!(FAST.delay(n) <= FAST.ceiling(n));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_retryable_error_is_tried_again_with_waits_and_stops_at_the_tries() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let out: Result<(), String> = again(
            FAST,
            "test",
            || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err("slow down".to_owned())
            },
            |_| true,
        )
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        // Three waits, each at most its ceiling (8 + 16 + 20 ms).
        assert!(started.elapsed() <= Duration::from_millis(44));
    }

    #[tokio::test(start_paused = true)]
    async fn success_and_unretryable_errors_return_at_once() {
        let calls = AtomicU32::new(0);
        let out: Result<u32, String> = again(
            FAST,
            "test",
            || async {
                let n = calls.fetch_add(1, Ordering::Relaxed);
                if n == 0 {
                    Err("slow down".to_owned())
                } else {
                    Ok(n)
                }
            },
            |_| true,
        )
        .await;
        assert_eq!(out, Ok(1));
        let refused: Result<(), String> = again(
            FAST,
            "test",
            || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err("conflict".to_owned())
            },
            |e| e != "conflict",
        )
        .await;
        assert!(refused.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }
}
