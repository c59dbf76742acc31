//! granary's one clock. Every reading of the time in granary's code (a lease's start, a log's
//! time, a record's history, a window's claim) comes from [`now`], and every wait from tokio's
//! timers (`tokio::time::sleep`, `timeout`, `Instant`). So a simulation that runs on a paused
//! tokio runtime moves leases, visibility timeouts, schedules, pacing, backoff, budgets and the
//! functions' timeouts together, on one virtual clock (`granary-local simulate`).
//!
//! Deployed, `now` is the wall clock (`Utc::now`). A simulation calls [`run_virtually_from`]
//! once, inside its paused runtime: from then on `now` is that epoch plus the time tokio's clock
//! has advanced since, which a paused runtime advances only when every task waits on a timer (a
//! simulated day takes the CPU time of its work, not a day). The epoch is the simulation's, so a
//! seed replays the same times, down to the hive partitions of the logs.
//!
//! Why not a clock port on the context: the repositories, the in-memory twins, the retry and
//! the pacer read the time too, and each would need it passed down; tokio's clock is already
//! one per runtime, which is what a simulation needs. Tests run one process each (nextest), so
//! a process-wide switch is one test's.

use chrono::{DateTime, Utc};
use std::sync::OnceLock;

/// Where a simulation's virtual time starts: its epoch, at tokio's instant then.
struct Anchor {
    epoch: DateTime<Utc>,
    at: tokio::time::Instant,
}

static VIRTUAL: OnceLock<Anchor> = OnceLock::new();

/// The time now: the wall clock, or a simulation's virtual time.
pub fn now() -> DateTime<Utc> {
    match VIRTUAL.get() {
        None => Utc::now(),
        Some(anchor) => {
            let ran = tokio::time::Instant::now().saturating_duration_since(anchor.at);
            anchor.epoch + chrono::Duration::from_std(ran).unwrap_or(chrono::Duration::MAX)
        }
    }
}

/// Whether [`now`] is a simulation's virtual time.
pub fn is_virtual() -> bool {
    VIRTUAL.get().is_some()
}

/// From now on [`now`] is `epoch` plus the time tokio's clock advances: called once, inside the
/// simulation's runtime (started paused). `false` if virtual time was set already (it stays as
/// it was: one simulation a process).
pub fn run_virtually_from(epoch: DateTime<Utc>) -> bool {
    VIRTUAL
        .set(Anchor {
            epoch,
            at: tokio::time::Instant::now(),
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn virtual_time_is_the_epoch_plus_what_tokio_advanced() {
        let epoch = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert!(!is_virtual());
        assert!(run_virtually_from(epoch));
        assert!(!run_virtually_from(Utc::now()), "one simulation a process");
        assert_eq!(now(), epoch);
        // A day of sleeping passes at once, and the clock says a day.
        tokio::time::sleep(Duration::from_secs(86_400)).await;
        assert_eq!(now(), epoch + chrono::Duration::days(1));
    }
}
