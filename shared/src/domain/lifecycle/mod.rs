//! The item lifecycle: eleven states, the fifteen transitions between them, and the rules that
//! pick a transition (attempt budgets, timeouts, admission). Pure: the engine that stores records
//! and history lives in `crate::repositories::items`; the decision each event causes is a named
//! function in [`decisions`].

pub mod decisions;

use super::machine::Cause;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ItemState {
    /// Known at its source, not fetched yet.
    Discovered,
    Downloading,
    Downloaded,
    DownloadingFailed,
    /// Download attempts exhausted: left alone for good.
    Ignore,
    /// Not eligible for processing (metadata, inactive slot, outdated).
    Skipped,
    /// Eligible for processing; backfill items start here.
    Ready,
    Processing,
    Processed,
    ProcessingFailed,
    /// Processing attempts exhausted.
    Abandoned,
}

use ItemState::*;

crate::state_machine!(ItemState, "an item", TRANSITIONS);

impl ItemState {
    pub const ALL: [ItemState; 11] = [
        Discovered,
        Downloading,
        Downloaded,
        DownloadingFailed,
        Ignore,
        Skipped,
        Ready,
        Processing,
        Processed,
        ProcessingFailed,
        Abandoned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Discovered => "DISCOVERED",
            Downloading => "DOWNLOADING",
            Downloaded => "DOWNLOADED",
            DownloadingFailed => "DOWNLOADING_FAILED",
            Ignore => "IGNORE",
            Skipped => "SKIPPED",
            Ready => "READY",
            Processing => "PROCESSING",
            Processed => "PROCESSED",
            ProcessingFailed => "PROCESSING_FAILED",
            Abandoned => "ABANDONED",
        }
    }

    /// Nothing happens to an item in a terminal state unless re-validation finds it corrupt
    /// (PROCESSED → PROCESSING_FAILED) or an operator resumes it.
    pub fn is_terminal(self) -> bool {
        matches!(self, Ignore | Skipped | Processed | Abandoned)
    }
}

/// The whole transition table. Nothing else may change an item's state. An operator's resume
/// takes the same edges the automatic retries take (PROCESSING_FAILED → READY, DOWNLOADING_FAILED
/// → DOWNLOADING), so every edge is listed as automatic.
pub const TRANSITIONS: [(ItemState, ItemState, Cause); 15] = [
    (Discovered, Downloading, Cause::Automatic),
    // The file is already where it belongs (the operational scenario).
    (Discovered, Downloaded, Cause::Automatic),
    (Downloading, DownloadingFailed, Cause::Automatic),
    (Downloading, Downloaded, Cause::Automatic),
    (DownloadingFailed, Downloading, Cause::Automatic),
    (DownloadingFailed, Ignore, Cause::Automatic),
    // Re-validation found the stored file corrupt.
    (Downloaded, DownloadingFailed, Cause::Automatic),
    (Downloaded, Skipped, Cause::Automatic),
    (Downloaded, Ready, Cause::Automatic),
    (Ready, Processing, Cause::Automatic),
    (Processing, ProcessingFailed, Cause::Automatic),
    (Processing, Processed, Cause::Automatic),
    (ProcessingFailed, Ready, Cause::Automatic),
    (ProcessingFailed, Abandoned, Cause::Automatic),
    // Re-validation found the product corrupt.
    (Processed, ProcessingFailed, Cause::Automatic),
];

/// Attempt budgets and timeouts for the two kinds of work an item goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_download_attempts: u32,
    pub max_processing_attempts: u32,
    pub download_timeout: Duration,
    pub processing_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_download_attempts: 3,
            max_processing_attempts: 4,
            download_timeout: Duration::minutes(30),
            processing_timeout: Duration::hours(6),
        }
    }
}

impl RetryPolicy {
    /// Where a failed download goes next: back to DOWNLOADING while attempts remain (a retry is
    /// immediate), else IGNORE. `attempts` counts attempts begun so far.
    pub fn after_download_failure(&self, attempts: u32) -> ItemState {
        if attempts < self.max_download_attempts {
            Downloading
        } else {
            Ignore
        }
    }

    /// Where a failed processing run goes next: READY (to be resubmitted) or ABANDONED.
    pub fn after_processing_failure(&self, attempts: u32) -> ItemState {
        if attempts < self.max_processing_attempts {
            Ready
        } else {
            Abandoned
        }
    }

    /// The timeout-recovery rules: an item stuck in DOWNLOADING or PROCESSING longer than its
    /// timeout goes to the failed state while attempts remain, to the give-up state after.
    /// The table has no DOWNLOADING → IGNORE or PROCESSING → ABANDONED edge, so giving up is the
    /// path through the failed state: the returned path holds one or two states, each a legal
    /// step from the one before. `None` while the item is within its time (or not timed).
    pub fn timeout_recovery(
        &self,
        state: ItemState,
        attempts: &Attempts,
        now: DateTime<Utc>,
    ) -> Option<Vec<ItemState>> {
        let (started, timeout, used, max, failed, give_up) = match state {
            Downloading => (
                attempts.download_started_at,
                self.download_timeout,
                attempts.download,
                self.max_download_attempts,
                DownloadingFailed,
                Ignore,
            ),
            Processing => (
                attempts.processing_started_at,
                self.processing_timeout,
                attempts.processing,
                self.max_processing_attempts,
                ProcessingFailed,
                Abandoned,
            ),
            _ => return None,
        };
        // An attempt with no start time is treated as started at the epoch: overdue.
        let started = started.unwrap_or(DateTime::<Utc>::MIN_UTC);
        if now.signed_duration_since(started) <= timeout {
            return None;
        }
        Some(if used < max {
            vec![failed]
        } else {
            vec![failed, give_up]
        })
    }
}

/// Attempt counters and when the current attempt began. Counted when an attempt begins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempts {
    pub download: u32,
    pub download_started_at: Option<DateTime<Utc>>,
    pub processing: u32,
    pub processing_started_at: Option<DateTime<Utc>>,
}

impl Attempts {
    /// Entering DOWNLOADING or PROCESSING begins an attempt.
    pub fn begin(&mut self, to: ItemState, now: DateTime<Utc>) {
        match to {
            Downloading => {
                self.download += 1;
                self.download_started_at = Some(now);
            }
            Processing => {
                self.processing += 1;
                self.processing_started_at = Some(now);
            }
            _ => {}
        }
    }
}

/// The three conditions for DOWNLOADED → READY, as the admit step found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionFacts {
    /// `Err(why)` when the stored file fails validation (size, digest, format).
    pub validation: Result<(), String>,
    /// `Err(why)` when the item is ineligible by its metadata or is outdated.
    pub eligibility: Result<(), String>,
    /// The slot the item belongs to (`None` when its name names none).
    pub slot: Option<String>,
    /// `Err(why)` while processing prerequisites are missing.
    pub prerequisites: Result<(), String>,
}

/// What admission decides for a DOWNLOADED item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Ready,
    /// A terminal no: ineligible metadata, outdated, or an inactive slot.
    Skip(String),
    /// The stored file is corrupt: back to the download path.
    Corrupt(String),
    /// Not yet: prerequisites missing. The item stays DOWNLOADED and is asked again later.
    Wait(String),
}

impl Admission {
    pub fn target(&self) -> Option<ItemState> {
        match self {
            Admission::Ready => Some(Ready),
            Admission::Skip(_) => Some(Skipped),
            Admission::Corrupt(_) => Some(DownloadingFailed),
            Admission::Wait(_) => None,
        }
    }
}

/// The set of slots that are ACTIVE. `All` admits every item, slot or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActiveSlots {
    All,
    Only(std::collections::BTreeSet<String>),
}

impl ActiveSlots {
    /// `*` (or empty) means every slot; otherwise a comma-separated list.
    pub fn parse(raw: &str) -> Self {
        let raw = raw.trim();
        if raw.is_empty() || raw == "*" {
            return ActiveSlots::All;
        }
        ActiveSlots::Only(
            raw.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        )
    }

    pub fn admits(&self, slot: Option<&str>) -> bool {
        match self {
            ActiveSlots::All => true,
            ActiveSlots::Only(set) => slot.is_some_and(|s| set.contains(s)),
        }
    }
}

/// Validation first (a corrupt file is a download problem whatever else is true), then
/// eligibility and slot (terminal), then prerequisites (which may still arrive).
pub fn decide_admission(facts: &AdmissionFacts, active: &ActiveSlots) -> Admission {
    if let Err(why) = &facts.validation {
        return Admission::Corrupt(why.clone());
    }
    if let Err(why) = &facts.eligibility {
        return Admission::Skip(why.clone());
    }
    if !active.admits(facts.slot.as_deref()) {
        return Admission::Skip(match &facts.slot {
            Some(s) => format!("slot {s} is not ACTIVE"),
            None => "the item belongs to no slot and only named slots are ACTIVE".to_owned(),
        });
    }
    if let Err(why) = &facts.prerequisites {
        return Admission::Wait(why.clone());
    }
    Admission::Ready
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::machine::check;
    use crate::domain::machine::State;
    use proptest::prelude::*;

    /// The seed's table, written out independently of `TRANSITIONS` so the two check each other.
    fn listed(from: ItemState, to: ItemState) -> bool {
        matches!(
            (from, to),
            (Discovered, Downloading)
                | (Discovered, Downloaded)
                | (Downloading, DownloadingFailed)
                | (Downloading, Downloaded)
                | (DownloadingFailed, Downloading)
                | (DownloadingFailed, Ignore)
                | (Downloaded, DownloadingFailed)
                | (Downloaded, Skipped)
                | (Downloaded, Ready)
                | (Ready, Processing)
                | (Processing, ProcessingFailed)
                | (Processing, Processed)
                | (ProcessingFailed, Ready)
                | (ProcessingFailed, Abandoned)
                | (Processed, ProcessingFailed)
        )
    }

    #[test]
    fn the_full_matrix_allows_exactly_the_listed_transitions() {
        let mut allowed = 0;
        for from in ItemState::ALL {
            for to in ItemState::ALL {
                let result = check(from, to);
                if listed(from, to) {
                    assert_eq!(
                        result,
                        Ok(Cause::Automatic),
                        "{from} → {to} must be allowed"
                    );
                    allowed += 1;
                } else {
                    let err = result.expect_err("unlisted transition allowed");
                    assert_eq!((err.from, err.to), (from, to));
                    assert_eq!(
                        err.to_string(),
                        format!("an item cannot go from {from} to {to}")
                    );
                }
            }
        }
        assert_eq!(allowed, 15);
    }

    #[test]
    fn four_terminal_states_and_only_processed_has_a_way_out() {
        let terminal: Vec<_> = ItemState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, vec![Ignore, Skipped, Processed, Abandoned]);
        for s in terminal {
            let next: Vec<_> = s.successors().collect();
            if s == Processed {
                assert_eq!(next, vec![ProcessingFailed]);
            } else {
                assert!(next.is_empty(), "{s} has successors {next:?}");
            }
        }
    }

    #[test]
    fn states_parse_from_their_names_and_reject_others() {
        for s in ItemState::ALL {
            assert_eq!(s.as_str().parse::<ItemState>(), Ok(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(
            "processing-failed".parse::<ItemState>(),
            Ok(ProcessingFailed)
        );
        assert!("DONE".parse::<ItemState>().is_err());
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_download_attempts: 3,
            max_processing_attempts: 2,
            download_timeout: Duration::minutes(10),
            processing_timeout: Duration::hours(1),
        }
    }

    #[test]
    fn retries_are_immediate_below_the_limit_and_give_up_at_it() {
        let p = policy();
        assert_eq!(p.after_download_failure(1), Downloading);
        assert_eq!(p.after_download_failure(2), Downloading);
        assert_eq!(p.after_download_failure(3), Ignore);
        assert_eq!(p.after_download_failure(4), Ignore);
        assert_eq!(p.after_processing_failure(1), Ready);
        assert_eq!(p.after_processing_failure(2), Abandoned);
    }

    #[test]
    fn attempts_are_counted_when_an_attempt_begins() {
        let t = Utc::now();
        let mut a = Attempts::default();
        a.begin(Downloaded, t);
        a.begin(Ready, t);
        assert_eq!(a, Attempts::default());
        a.begin(Downloading, t);
        a.begin(Processing, t);
        a.begin(Processing, t);
        assert_eq!((a.download, a.processing), (1, 2));
        assert_eq!(a.processing_started_at, Some(t));
    }

    #[test]
    fn timeout_recovery_at_its_boundaries() {
        let p = policy();
        let t0 = Utc::now();
        let downloading = |n| Attempts {
            download: n,
            download_started_at: Some(t0),
            ..Attempts::default()
        };
        let at = |d| t0 + d;
        // exactly at the timeout: not yet
        assert_eq!(
            p.timeout_recovery(Downloading, &downloading(1), at(Duration::minutes(10))),
            None
        );
        let late = at(Duration::minutes(10) + Duration::seconds(1));
        assert_eq!(
            p.timeout_recovery(Downloading, &downloading(2), late),
            Some(vec![DownloadingFailed])
        );
        assert_eq!(
            p.timeout_recovery(Downloading, &downloading(3), late),
            Some(vec![DownloadingFailed, Ignore])
        );
        let processing = |n| Attempts {
            processing: n,
            processing_started_at: Some(t0),
            ..Attempts::default()
        };
        assert_eq!(
            p.timeout_recovery(Processing, &processing(1), at(Duration::hours(1))),
            None
        );
        let late = at(Duration::hours(1) + Duration::seconds(1));
        assert_eq!(
            p.timeout_recovery(Processing, &processing(1), late),
            Some(vec![ProcessingFailed])
        );
        assert_eq!(
            p.timeout_recovery(Processing, &processing(2), late),
            Some(vec![ProcessingFailed, Abandoned])
        );
        // other states are never timed out
        for s in ItemState::ALL
            .into_iter()
            .filter(|s| !matches!(s, Downloading | Processing))
        {
            assert_eq!(p.timeout_recovery(s, &processing(9), late), None);
        }
        // no start time recorded: overdue
        assert_eq!(
            p.timeout_recovery(Processing, &Attempts::default(), t0),
            Some(vec![ProcessingFailed])
        );
    }

    fn facts() -> AdmissionFacts {
        AdmissionFacts {
            validation: Ok(()),
            eligibility: Ok(()),
            slot: Some("S30".into()),
            prerequisites: Ok(()),
        }
    }

    #[test]
    fn admission_needs_all_three_conditions() {
        let all = ActiveSlots::All;
        let s30 = ActiveSlots::parse("S30, L30");
        assert_eq!(decide_admission(&facts(), &all), Admission::Ready);
        assert_eq!(decide_admission(&facts(), &s30), Admission::Ready);
        let only_l = ActiveSlots::parse("L30");
        assert_eq!(
            decide_admission(&facts(), &only_l),
            Admission::Skip("slot S30 is not ACTIVE".into())
        );
        let mut f = facts();
        f.slot = None;
        assert!(matches!(decide_admission(&f, &only_l), Admission::Skip(_)));
        assert_eq!(decide_admission(&f, &all), Admission::Ready);
        let mut f = facts();
        f.prerequisites = Err("ancillary data missing".into());
        assert_eq!(
            decide_admission(&f, &all),
            Admission::Wait("ancillary data missing".into())
        );
        assert_eq!(decide_admission(&f, &all).target(), None);
        let mut f = facts();
        f.eligibility = Err("outdated".into());
        f.prerequisites = Err("x".into());
        assert_eq!(decide_admission(&f, &all).target(), Some(Skipped));
        // corruption wins over everything
        f.validation = Err("size 3 ≠ 5".into());
        assert_eq!(
            decide_admission(&f, &only_l),
            Admission::Corrupt("size 3 ≠ 5".into())
        );
        assert_eq!(decide_admission(&f, &all).target(), Some(DownloadingFailed));
        assert_eq!(ActiveSlots::parse(" * "), ActiveSlots::All);
        assert_eq!(ActiveSlots::parse(""), ActiveSlots::All);
    }

    fn any_state() -> impl Strategy<Value = ItemState> {
        (0usize..11).prop_map(|i| ItemState::ALL[i])
    }

    proptest! {
        /// Every failure rule lands on a state the table allows from the failed state.
        #[test]
        fn failure_rules_only_pick_legal_transitions(n in 0u32..10, max in 1u32..6) {
            let p = RetryPolicy { max_download_attempts: max, max_processing_attempts: max, ..policy() };
            check(DownloadingFailed, p.after_download_failure(n)).unwrap();
            check(ProcessingFailed, p.after_processing_failure(n)).unwrap();
            prop_assert_eq!(p.after_download_failure(n) == Ignore, n >= max);
        }

        #[test]
        fn timeout_recovery_only_picks_legal_transitions(
            s in any_state(), n in 0u32..6, mins in 0i64..1000,
        ) {
            let p = policy();
            let t0 = Utc::now();
            let a = Attempts { download: n, download_started_at: Some(t0), processing: n, processing_started_at: Some(t0) };
            if let Some(path) = p.timeout_recovery(s, &a, t0 + Duration::minutes(mins)) {
                let mut from = s;
                for to in path {
                    check(from, to).unwrap();
                    from = to;
                }
                let max = if s == Downloading { p.max_download_attempts } else { p.max_processing_attempts };
                prop_assert!(from.is_terminal() == (n >= max), "gives up exactly at the limit");
            }
        }
    }
}
