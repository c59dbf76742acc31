//! A granule's attempt budget: how many of its attempts may fail before it is dead-lettered, and
//! which attempt is its last chance (the one an on-demand job queue may take).
//!
//! By default every retried end spends the one budget (`GRANARY_MAX_RETRIES`). With
//! `GRANARY_MAX_SPOT_RETRIES` set, the cloud's ends — a Spot reclaim, a job the queue's watchdog
//! cancelled for capacity (the brake's [`EndKind::Capacity`]) — spend a budget of their own, so
//! a night of Spot reclaims does not use up the attempts a real timeout or start-up error needs.
//! (Application failures are not retried at all: `domain::classify` routes them to the DLQ.)
//!
//! The budget is counted from the ends themselves, not from a store: a job the requeuer submits
//! carries how many of the granule's earlier attempts ended for capacity (`spot_ends`, a job
//! parameter, `domain::job_tags`), the monitor adds the end it handles and hands the sum to the
//! requeuer in the retry message. Every path that routes an end (the monitor, the reconciler's
//! late routing) reads it from the same job detail, so a redelivered or recovered end counts the
//! same. The count goes to the DLQ with the message and comes back with a redrive, whose attempt
//! is past the budget and so a last chance.

use super::brake::{end_kind, EndKind};
use super::classify::FailureKind;

/// The retries a granule's failed attempts may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptBudget {
    /// Retries after ends that are not capacity's (timeouts, start-up errors, unknown), or after
    /// any end when `spot_retries` is `None`.
    pub retries: u32,
    /// Retries after Spot reclaims and capacity cancels, apart; `None`: they share `retries`.
    pub spot_retries: Option<u32>,
}

/// How a granule's attempts so far have ended: `attempt` is the last one ended, `spot_ends` how
/// many of attempts `1..=attempt` ended for capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    pub attempt: u32,
    pub spot_ends: u32,
}

/// Whether an end of this kind is the cloud's taking capacity away (Spot, capacity cancel).
pub fn is_spot_end(failure: Option<&FailureKind>) -> bool {
    end_kind(failure) == EndKind::Capacity
}

impl AttemptBudget {
    /// Whether the granule gets another attempt after `ends` (the last one included).
    pub fn allows_retry(&self, ends: Ends) -> bool {
        match self.spot_retries {
            None => ends.attempt <= self.retries,
            Some(spot) => {
                let other = ends.attempt.saturating_sub(ends.spot_ends);
                other <= self.retries && ends.spot_ends <= spot
            }
        }
    }

    /// Whether attempt `ends.attempt + 1` is the granule's last chance against capacity: were it
    /// reclaimed or cancelled for capacity too, the granule would be dead-lettered. The attempt
    /// an on-demand job queue takes, where no reclaim can end it. A first attempt (an imported
    /// item's, `ends.attempt` 0) is never one: it goes where every first attempt goes.
    pub fn is_last_chance(&self, ends: Ends) -> bool {
        ends.attempt > 0
            && !self.allows_retry(Ends {
                // Counts from messages and job parameters: never past u32's end.
                attempt: ends.attempt.saturating_add(1),
                spot_ends: ends.spot_ends.saturating_add(1),
            })
    }

    /// The highest attempt number the budget can reach (every retry of both kinds spent): how
    /// far the item sweeper's and re-validation's own rules let a granule go before the
    /// requeuer, which knows its Spot ends, decides.
    pub fn last_attempt(&self) -> u32 {
        1u32.saturating_add(self.retries)
            .saturating_add(self.spot_retries.unwrap_or(0))
    }

    /// Why a granule whose attempts ended as `ends` gets no more (for its history).
    pub fn spent(&self, ends: Ends) -> String {
        match self.spot_retries {
            None => format!(
                "attempt {} was the last of {}",
                ends.attempt,
                self.retries.saturating_add(1)
            ),
            Some(spot) => format!(
                "attempt {} spent the budget: {} other failures with {} retries allowed, {} Spot or capacity ends with {} retries allowed",
                ends.attempt,
                ends.attempt.saturating_sub(ends.spot_ends),
                self.retries,
                ends.spot_ends,
                spot
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: AttemptBudget = AttemptBudget {
        retries: 3,
        spot_retries: None,
    };
    const APART: AttemptBudget = AttemptBudget {
        retries: 2,
        spot_retries: Some(3),
    };

    fn ends(attempt: u32, spot_ends: u32) -> Ends {
        Ends { attempt, spot_ends }
    }

    #[test]
    fn one_budget_counts_every_end_alike() {
        // Three retries: attempts 1..=3 may fail and be retried, attempt 4 is the last.
        for spot in 0..=3 {
            assert!(SHARED.allows_retry(ends(3, spot)));
            assert!(!SHARED.allows_retry(ends(4, spot)));
        }
        assert!(!SHARED.is_last_chance(ends(2, 0)));
        assert!(SHARED.is_last_chance(ends(3, 0)));
        assert_eq!(SHARED.spent(ends(4, 1)), "attempt 4 was the last of 4");
    }

    #[test]
    fn spot_ends_spend_their_own_budget() {
        // Three Spot reclaims leave both other retries: attempt 6 after two timeouts is the last.
        assert!(APART.allows_retry(ends(3, 3)));
        assert!(APART.allows_retry(ends(5, 3)));
        assert!(!APART.allows_retry(ends(6, 3)));
        // A fourth Spot end is one too many, however few other failures there were.
        assert!(!APART.allows_retry(ends(4, 4)));
        // Two timeouts and no reclaim: a third timeout is one too many.
        assert!(APART.allows_retry(ends(2, 0)));
        assert!(!APART.allows_retry(ends(3, 0)));
    }

    #[test]
    fn the_last_chance_is_the_attempt_a_reclaim_would_dead_letter() {
        assert!(!APART.is_last_chance(ends(1, 1)));
        assert!(!APART.is_last_chance(ends(2, 2)));
        // Three reclaims: the next one may not be reclaimed.
        assert!(APART.is_last_chance(ends(3, 3)));
        // Two timeouts with reclaims to spare: a reclaim of the next still leaves a retry.
        assert!(!APART.is_last_chance(ends(2, 0)));
        // Without spot retries at all, every retry is a last chance against capacity; a
        // first attempt (an imported item's hand-off) never is.
        let none = AttemptBudget {
            retries: 2,
            spot_retries: Some(0),
        };
        assert!(none.is_last_chance(ends(1, 0)));
        assert!(!none.is_last_chance(ends(0, 0)));
        assert_eq!((none.last_attempt(), APART.last_attempt()), (3, 6));
        assert_eq!(SHARED.last_attempt(), 4);
        // A count no granary wrote (a job's parameter, a message) does not overflow.
        assert!(SHARED.is_last_chance(ends(u32::MAX, u32::MAX)));
    }

    #[test]
    fn capacity_ends_are_spot_ends_and_others_are_not() {
        assert!(is_spot_end(Some(&FailureKind::SpotInterruption)));
        assert!(is_spot_end(Some(&FailureKind::Capacity {
            reason: "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY".into()
        })));
        assert!(!is_spot_end(Some(&FailureKind::AttemptTimeout)));
        assert!(!is_spot_end(Some(&FailureKind::ContainerStartup {
            error: "CannotPullContainerError".into()
        })));
        assert!(!is_spot_end(None));
    }

    #[test]
    fn the_spent_budget_says_which_part_ran_out() {
        let why = APART.spent(ends(4, 4));
        assert!(
            why.contains("4 Spot or capacity ends with 3 retries allowed"),
            "{why}"
        );
        let why = APART.spent(ends(6, 3));
        assert!(why.contains("3 other failures with 2 retries"), "{why}");
    }
}
