//! How long an invocation may still work. A Lambda stopped by its timeout is killed where it
//! stands: whatever it had not reached is not reached, and in a function that runs two passes
//! (the reconciler, then the sweeper) the second never runs at scale. So each pass takes a share
//! of the invocation's time, looks at the clock before each unit of work, and leaves what it did
//! not reach for the next invocation, saying how much.
//!
//! On `tokio::time`'s clock, so a test with a paused clock decides when time is spent.

use std::time::Duration;
use tokio::time::Instant;

/// The part of a function's timeout its passes plan to use: the rest covers the unit of work in
/// hand when the budget runs out and the reply.
const PLANNED_SHARE_NUM: u32 = 4;
const PLANNED_SHARE_DEN: u32 = 5;

/// A unit of work's share of the time left ([`Budget::unit_share`]).
const UNIT_SHARE_DEN: u32 = 4;

/// A deadline, or none (an operator's command, a test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    deadline: Option<Instant>,
}

impl Budget {
    pub fn unlimited() -> Self {
        Self { deadline: None }
    }

    /// From now for `time`.
    pub fn within(time: Duration) -> Self {
        Self {
            deadline: Some(Instant::now() + time),
        }
    }

    /// An invocation's planned time: four fifths of the function's timeout
    /// (`GRANARY_FUNCTION_TIMEOUT_SECS`); unlimited when the timeout is not known.
    pub fn of_invocation(timeout: Option<Duration>) -> Self {
        match timeout {
            Some(t) => Self::within(t * PLANNED_SHARE_NUM / PLANNED_SHARE_DEN),
            None => Self::unlimited(),
        }
    }

    /// `num / den` of the time left, for the first of several passes (the next one gets what
    /// the first leaves, at least the rest of this split).
    pub fn part(&self, num: u32, den: u32) -> Self {
        match self.left() {
            Some(left) => Self::within(left * num / den.max(1)),
            None => *self,
        }
    }

    /// Time left; `None` when unlimited.
    pub fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// How long one unit of work may take: a quarter of the time left, so that one unit that
    /// hangs (a depositor's server that never answers) leaves most of the pass to the others —
    /// or `at_least` (what one request of the unit may take), so that a large transfer is not
    /// cut short for ever — and never more than the time left. `None`: unlimited.
    pub fn unit_share(&self, at_least: Duration) -> Option<Duration> {
        self.left()
            .map(|left| (left / UNIT_SHARE_DEN).max(at_least).min(left))
    }

    /// Whether the time is up: no new unit of work should start.
    pub fn spent(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Where a pass over `n` units starts, so that passes cut short by their budget do not always
/// reach the same units first and leave the same ones for ever: a fresh offset each pass.
pub fn first_of(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    (crate::retry::jitter() % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_budget_is_spent_when_its_time_has_passed_and_a_part_is_of_what_is_left() {
        let b = Budget::of_invocation(Some(Duration::from_secs(100)));
        assert_eq!(b.left(), Some(Duration::from_secs(80)));
        tokio::time::sleep(Duration::from_secs(20)).await;
        let half = b.part(1, 2);
        assert_eq!(half.left(), Some(Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(half.spent());
        assert!(!b.spent());
        assert_eq!(b.left(), Some(Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(b.spent());
        assert_eq!(b.left(), Some(Duration::ZERO));
        let none = Budget::of_invocation(None);
        assert!(!none.spent() && none.left().is_none() && none.part(1, 2) == none);
    }

    #[test]
    fn passes_start_at_varying_places() {
        assert_eq!(first_of(0), 0);
        let starts: std::collections::BTreeSet<usize> = (0..200).map(|_| first_of(7)).collect();
        assert!(starts.iter().all(|s| *s < 7));
        assert!(starts.len() > 3, "{starts:?}");
    }
}
