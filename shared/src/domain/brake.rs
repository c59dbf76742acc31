//! The automatic brake: when too many of the latest job ends are failures — the code's
//! (application exits, containers that cannot start, misconfiguration) or the cloud's (Spot
//! interruptions, no capacity) — the job monitor places the feeder's hold itself, with the
//! reason and the evidence, so a broken container or a market with no Spot capacity stops
//! burning attempts and money until an operator looks (`granary release` lifts it).
//!
//! The two rates are judged apart: a campaign on Spot tolerates many more reclaims than
//! application failures. The window is the ends one job-monitor instance handled lately (each
//! instance keeps its own: no request and no shared state, so the brake costs nothing per job).
//! What that costs in judgement: with N instances each needs its own quarter-window of ends
//! before it judges (a container that always fails burns up to N × that many attempts first); a
//! warm instance's window does not age, so it may mix ends hours apart; each instance judges
//! after every end, so N judges near a threshold hold more readily than one would; a new
//! instance, and the one that placed or met a hold, start empty. Only settled ends that came as
//! events count: a duplicate delivery is not an end again, and the reconciler's recoveries are
//! not judged.

use crate::domain::classify::FailureKind;
use std::collections::VecDeque;

/// When the brake acts (`GRANARY_BRAKE_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BrakeSettings {
    /// The latest ends judged.
    pub window: usize,
    /// No judgement before this many ends are in the window.
    pub min_ends: usize,
    /// Application failures, percent of the window's ends, at which the brake acts (`None`:
    /// never).
    pub application_percent: Option<f64>,
    /// Spot interruptions and capacity ends, percent of the window's ends.
    pub capacity_percent: Option<f64>,
    /// How many of the latest failures' reasons the hold quotes.
    pub evidence: usize,
}

impl Default for BrakeSettings {
    fn default() -> Self {
        Self {
            window: 200,
            // A quarter of the window (as `GRANARY_BRAKE_WINDOW_ENDS` sets it).
            min_ends: 50,
            application_percent: Some(25.0),
            capacity_percent: Some(50.0),
            evidence: 5,
        }
    }
}

/// What kind of end a job's end is, for the brake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndKind {
    Succeeded,
    /// The code's: the application exited non-zero, its container could not start, or its
    /// job cannot run as defined.
    Application,
    /// The cloud's: Spot took the instance, or no capacity came.
    Capacity,
    /// Anything else (a timeout, a cancellation, an end no rule knows).
    Other,
    /// `granary cancel`'s: the operator's, saying nothing of how the campaign fares; not
    /// counted in the window at all.
    Operator,
}

/// The kind of an end from its failure (`None`: it succeeded).
pub fn end_kind(failure: Option<&FailureKind>) -> EndKind {
    match failure {
        None => EndKind::Succeeded,
        Some(
            FailureKind::ApplicationExit { .. }
            | FailureKind::ContainerStartup { .. }
            | FailureKind::Misconfiguration { .. },
        ) => EndKind::Application,
        Some(FailureKind::SpotInterruption | FailureKind::Capacity { .. }) => EndKind::Capacity,
        // Out of memory is retried with more (`domain::memory`): the job's size, not a bug to
        // hold the campaign for, nor the cloud's.
        Some(
            FailureKind::AttemptTimeout
            | FailureKind::OutOfMemory
            | FailureKind::Cancelled
            | FailureKind::Unknown,
        ) => EndKind::Other,
        Some(FailureKind::GranaryCancel { .. }) => EndKind::Operator,
    }
}

/// The brake acts: why, and the latest failures' reasons behind it (newest first).
#[derive(Debug, Clone, PartialEq)]
pub struct Braking {
    pub reason: String,
    pub evidence: Vec<String>,
}

/// The latest ends one monitor instance handled: kind, granule and reason.
#[derive(Debug, Default)]
pub struct EndWindow {
    ends: VecDeque<(EndKind, String)>,
}

impl EndWindow {
    /// One more end (`what`: the granule and its reason, for the evidence); the oldest leaves
    /// past the window's size.
    pub fn record(&mut self, kind: EndKind, what: String, settings: &BrakeSettings) {
        if kind == EndKind::Operator {
            return;
        }
        self.ends.push_back((kind, what));
        while self.ends.len() > settings.window.max(1) {
            self.ends.pop_front();
        }
    }

    /// After the brake acted (or found a hold already there): the next judgement needs a fresh
    /// window of ends.
    pub fn clear(&mut self) {
        self.ends.clear();
    }

    /// Whether the brake acts now: the first rate at or over its threshold, application
    /// failures judged first.
    pub fn judge(&self, settings: &BrakeSettings) -> Option<Braking> {
        let n = self.ends.len();
        if n == 0 || n < settings.min_ends {
            return None;
        }
        let judge = |kind: EndKind, threshold: Option<f64>, what: &str| -> Option<Braking> {
            let threshold = threshold?;
            let count = self.ends.iter().filter(|(k, _)| *k == kind).count();
            let percent = 100.0 * count as f64 / n as f64;
            (percent >= threshold).then(|| Braking {
                reason: format!(
                    "automatic brake: {what} were {count} of the last {n} job ends ({percent:.0}%, \
                     at or over GRANARY_BRAKE_{}_PERCENT={threshold})",
                    if kind == EndKind::Application {
                        "APPLICATION"
                    } else {
                        "CAPACITY"
                    }
                ),
                evidence: self
                    .ends
                    .iter()
                    .rev()
                    .filter(|(k, _)| *k == kind)
                    .take(settings.evidence)
                    .map(|(_, what)| what.clone())
                    .collect(),
            })
        };
        judge(
            EndKind::Application,
            settings.application_percent,
            "application failures",
        )
        .or_else(|| {
            judge(
                EndKind::Capacity,
                settings.capacity_percent,
                "Spot interruptions and capacity ends",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BrakeSettings {
        BrakeSettings {
            window: 10,
            min_ends: 5,
            application_percent: Some(30.0),
            capacity_percent: Some(60.0),
            evidence: 2,
        }
    }

    fn window(kinds: &[EndKind]) -> EndWindow {
        let mut w = EndWindow::default();
        for (i, k) in kinds.iter().enumerate() {
            w.record(*k, format!("g{i}: {k:?}"), &settings());
        }
        w
    }

    use EndKind::*;

    #[test]
    fn an_operators_cancel_is_not_an_end_the_brake_counts() {
        assert_eq!(
            end_kind(Some(&FailureKind::GranaryCancel {
                cancel: "c1".into()
            })),
            Operator
        );
        // Five application failures judge; five more cancels neither dilute nor count.
        let mut kinds = vec![Application; 5];
        kinds.extend([Operator; 5]);
        assert_eq!(
            window(&kinds).judge(&settings()),
            window(&[Application; 5]).judge(&settings())
        );
        assert_eq!(window(&[Operator; 10]).judge(&settings()), None);
    }

    #[test]
    fn no_judgement_before_the_minimum_of_ends() {
        assert_eq!(window(&[Application; 4]).judge(&settings()), None);
        assert!(window(&[Application; 5]).judge(&settings()).is_some());
    }

    #[test]
    fn application_failures_at_the_threshold_brake_with_the_newest_reasons() {
        let w = window(&[
            Succeeded,
            Application,
            Succeeded,
            Succeeded,
            Application,
            Succeeded,
            Succeeded,
            Application,
            Succeeded,
            Succeeded,
        ]);
        let b = w.judge(&settings()).expect("3 of 10 is 30%");
        assert!(b.reason.contains("3 of the last 10"), "{}", b.reason);
        assert!(b.reason.contains("APPLICATION"), "{}", b.reason);
        assert_eq!(b.evidence, vec!["g7: Application", "g4: Application"]);
        let fewer = window(&[
            Succeeded,
            Application,
            Succeeded,
            Succeeded,
            Application,
            Succeeded,
            Succeeded,
            Succeeded,
            Succeeded,
            Succeeded,
        ]);
        assert_eq!(fewer.judge(&settings()), None, "2 of 10 is under 30%");
    }

    #[test]
    fn capacity_ends_are_judged_apart_and_tolerated_more() {
        let mut kinds = vec![Capacity; 5];
        kinds.extend([Succeeded; 5]);
        assert_eq!(window(&kinds).judge(&settings()), None, "50% < 60%");
        kinds[5] = Capacity;
        let b = window(&kinds).judge(&settings()).unwrap();
        assert!(b.reason.contains("Spot interruptions"), "{}", b.reason);
        // Timeouts and the like count in the window, for neither rate.
        assert_eq!(window(&[Other; 10]).judge(&settings()), None);
    }

    #[test]
    fn the_window_keeps_only_the_latest_ends_and_a_threshold_can_be_off() {
        let mut kinds = vec![Application; 10];
        kinds.extend([Succeeded; 10]);
        assert_eq!(window(&kinds).judge(&settings()), None, "the failures left");
        let off = BrakeSettings {
            application_percent: None,
            ..settings()
        };
        assert_eq!(window(&[Application; 10]).judge(&off), None);
        let mut w = window(&[Application; 10]);
        w.clear();
        assert_eq!(w.judge(&settings()), None);
    }

    #[test]
    fn both_rates_over_their_thresholds_name_the_application_failures() {
        let mut kinds = vec![Application; 4];
        kinds.extend([Capacity; 6]);
        let b = window(&kinds).judge(&settings()).unwrap();
        assert!(b.reason.contains("application failures"), "{}", b.reason);
    }

    #[test]
    fn kinds_follow_the_classification() {
        assert_eq!(end_kind(None), Succeeded);
        assert_eq!(
            end_kind(Some(&FailureKind::ApplicationExit { exit_code: 1 })),
            Application
        );
        assert_eq!(end_kind(Some(&FailureKind::SpotInterruption)), Capacity);
        assert_eq!(end_kind(Some(&FailureKind::AttemptTimeout)), Other);
    }
}
