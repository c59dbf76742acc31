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
    /// (PROCESSED → PROCESSING_FAILED) or an operator sends it round again (ABANDONED → READY).
    pub fn is_terminal(self) -> bool {
        matches!(self, Ignore | Skipped | Processed | Abandoned)
    }

    /// The item's workflow succeeded: its product is made and stored.
    pub fn completes_the_workflow(self) -> bool {
        self == Processed
    }
}

/// The whole transition table. Nothing else may change an item's state. An operator's resume
/// of a failed item takes the same edges the automatic retries take (PROCESSING_FAILED → READY,
/// DOWNLOADING_FAILED → DOWNLOADING); only an abandoned item's way back is the operator's alone.
pub const TRANSITIONS: [(ItemState, ItemState, Cause); 16] = [
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
    // A dead-lettered or spent item sent round again (`granary resume`, a DLQ redrive).
    (Abandoned, Ready, Cause::Operator),
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

/// The three conditions for DOWNLOADED → READY, as the admit step found them. Each check's
/// error is its own (the checks do I/O this module does not know of); admission reads only its
/// words, which become the item's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionFacts<Invalid, Ineligible, Missing> {
    /// `Err(why)` when the stored file fails validation (size, digest, format).
    pub validation: Result<(), Invalid>,
    /// `Err(why)` when the item is ineligible by its metadata or is outdated.
    pub eligibility: Result<(), Ineligible>,
    /// The slot the item belongs to (`None` when its name names none).
    pub slot: Option<String>,
    /// `Err(why)` while processing prerequisites are missing.
    pub prerequisites: Result<(), Missing>,
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
pub fn decide_admission<Invalid, Ineligible, Missing>(
    facts: &AdmissionFacts<Invalid, Ineligible, Missing>,
    active: &ActiveSlots,
) -> Admission
where
    Invalid: std::fmt::Display,
    Ineligible: std::fmt::Display,
    Missing: std::fmt::Display,
{
    if let Err(why) = &facts.validation {
        return Admission::Corrupt(why.to_string());
    }
    if let Err(why) = &facts.eligibility {
        return Admission::Skip(why.to_string());
    }
    if !active.admits(facts.slot.as_deref()) {
        return Admission::Skip(match &facts.slot {
            Some(s) => format!("slot {s} is not ACTIVE"),
            None => "the item belongs to no slot and only named slots are ACTIVE".to_owned(),
        });
    }
    if let Err(why) = &facts.prerequisites {
        return Admission::Wait(why.to_string());
    }
    Admission::Ready
}

#[cfg(test)]
mod tests;
