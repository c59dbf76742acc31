//! A window claim: the exactly-once guard for the feeder's first attempts, one object for a whole
//! window of inventory rows instead of one claim per granule.
//!
//! The feeder creates it with If-None-Match (the rows it covers and their granules, attempt 1),
//! submits every granule's job, then records all the job ids with one If-Match write. Per granule
//! that is ~2/window-size PUTs instead of two, which is most of what exactly-once cost (see
//! BENCHMARKS.md). A window claim without its job ids was left half-done by a run that died:
//! whoever takes it over after the lease looks each job up by its deterministic name before
//! submitting it. Later attempts (the requeuer's) keep their per-granule claims.

use super::campaign::Campaign;
use super::claim::{JobsClaim, Lease};
use super::granule::{GranuleId, GranuleProcessingEvent};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The attempt a feeder's window claim submits: a granule's first.
pub const WINDOW_ATTEMPT: u32 = 1;

/// The "inventory" a window of parked retries names (its `start` is the window's number): not a
/// key the feeder reads, which all end in `.parquet`. Such a window gathers retries the requeuer
/// parked (`GRANARY_ARRAY_RETRIES`) into one array job, each at its own attempt.
pub const RETRY_WINDOWS: &str = "retries";

/// One granule of a window: the attempt its job runs and the Spot ends before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEntry {
    pub granule_id: GranuleId,
    pub attempt: u32,
    pub spot_ends: u32,
    /// Its item record is made at its end, by the job monitor ([`WindowClaim::records_at_end`]).
    pub record_at_end: bool,
}

impl WindowEntry {
    pub fn event(&self) -> GranuleProcessingEvent {
        GranuleProcessingEvent {
            granule_id: self.granule_id.clone(),
            attempt: self.attempt,
        }
    }
}

/// The sizes an array job may have (AWS Batch user guide, "Array jobs": "between 2 and 10,000").
pub const ARRAY_SIZES: std::ops::RangeInclusive<usize> = 2..=10_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowClaim {
    /// The inventory's object key.
    pub inventory: String,
    /// The first row the window covers.
    pub start: u64,
    /// How many rows it covers: `start .. start + rows` (invalid and repeated rows included).
    pub rows: u64,
    /// The distinct valid granules of those rows, in row order; each is submitted at attempt 1.
    pub granules: Vec<GranuleId>,
    #[serde(flatten)]
    pub lease: Lease,
    /// The job of each granule (same order), once recorded; empty before the first record.
    /// Empty for an array window, whose granule `i` is child `<array_job_id>:<i>`.
    #[serde(default)]
    pub job_ids: Vec<Option<String>>,
    /// Submitted as one array job, child `i` processing granule `i`, instead of one job per
    /// granule ([`WindowClaim::in_array`]). Decided when the window is claimed: a run that
    /// takes it over submits it as its claim says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub array: bool,
    /// The array job, once recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<String>,
    /// Names this claim (not its key) to the array's jobs: a child whose job carries another
    /// token belongs to an earlier claim at the same key (one an operator removed) and is never
    /// given this claim's granule. Set when the window is made an array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default)]
    pub submitted_at: Option<DateTime<Utc>>,
    /// The campaign whose window this is: its jobs' names and parameters carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
    /// Each granule's attempt (same order), in a window of parked retries; empty: every
    /// granule's first ([`WINDOW_ATTEMPT`]). An array's children all carry the parent's
    /// environment, so a child's container reads its attempt here (docs/array-windows.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<u32>,
    /// The Spot ends before each granule's attempt (same order; `domain::attempt_budget`);
    /// empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spot_ends: Vec<u32>,
    /// An array window of first attempts whose granules' item records are made at their ends by
    /// the job monitor, not when it is submitted (every window the feeder claims):
    /// until each child ends, this claim and the window's open marker are what say its granule is
    /// in flight. Decided when the window is claimed, so a run that takes it over, and the
    /// monitor, do as its claim says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub records_at_end: bool,
    /// Its granules are still to be looked for among the item records, once its open marker is
    /// written and before any job: the importer's discovery creates a record first and reads
    /// the open windows after, so one of the two sees the other (docs/guarantees.md, "A file
    /// both listed and discovered at once"). Cleared with the granules found dropped
    /// ([`WindowClaim::without`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub screen_pending: bool,
}

impl WindowClaim {
    pub fn new(
        campaign: Option<&Campaign>,
        inventory: &str,
        start: u64,
        rows: u64,
        granules: Vec<GranuleId>,
        claimed_by: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            inventory: inventory.to_owned(),
            start,
            rows,
            granules,
            lease: Lease::new(claimed_by, now),
            job_ids: Vec::new(),
            array: false,
            array_job_id: None,
            token: None,
            submitted_at: None,
            campaign: campaign.cloned(),
            attempts: Vec::new(),
            spot_ends: Vec::new(),
            records_at_end: false,
            screen_pending: false,
        }
    }

    /// The window's granules looked for among the item records before its jobs are submitted
    /// when `wanted` (a window of first attempts, with item records kept).
    pub fn with_screen(mut self, wanted: bool) -> Self {
        self.screen_pending = wanted && !self.is_retries();
        self
    }

    /// The window less the granules `known` names, its look done: still an array when enough
    /// remain to make one (its token kept), else a single job a granule whose record is made
    /// when it is submitted. Only for a window none of whose jobs is recorded (a pending look
    /// comes before any SubmitJob); its rows are unchanged, so its inventory moves on past them.
    pub fn without(&self, known: &std::collections::HashSet<GranuleId>) -> Self {
        let granules: Vec<GranuleId> = self
            .granules
            .iter()
            .filter(|g| !known.contains(*g))
            .cloned()
            .collect();
        let array = self.array && ARRAY_SIZES.contains(&granules.len());
        Self {
            granules,
            array,
            token: self.token.clone().filter(|_| array),
            records_at_end: self.records_at_end && array,
            screen_pending: false,
            ..self.clone()
        }
    }

    /// The window's first attempts recorded at their ends when `wanted` and it is an array
    /// window of first attempts (a single job's record, or a retry's, is written when it is
    /// submitted).
    pub fn with_records_at_end(mut self, wanted: bool) -> Self {
        self.records_at_end = wanted && self.is_array_of_first_attempts();
        self
    }

    /// Window `number` of the retries the requeuer parked: each entry's granule at its own
    /// attempt.
    pub fn of_retries(
        campaign: Option<&Campaign>,
        number: u64,
        entries: Vec<WindowEntry>,
        claimed_by: &str,
        now: DateTime<Utc>,
    ) -> Self {
        let mut window = Self::new(
            campaign,
            RETRY_WINDOWS,
            number,
            entries.len() as u64,
            entries.iter().map(|e| e.granule_id.clone()).collect(),
            claimed_by,
            now,
        );
        window.attempts = entries.iter().map(|e| e.attempt).collect();
        window.spot_ends = entries.iter().map(|e| e.spot_ends).collect();
        window
    }

    /// Whether this window is one array job of first attempts (an inventory's rows).
    pub fn is_array_of_first_attempts(&self) -> bool {
        self.array && !self.is_retries()
    }

    /// Whether this is a window of parked retries (not of an inventory's rows).
    pub fn is_retries(&self) -> bool {
        self.inventory == RETRY_WINDOWS
    }

    /// Granule `i`'s entry: its attempt and the Spot ends before it.
    pub fn entry(&self, i: usize) -> Option<WindowEntry> {
        let granule_id = self.granules.get(i)?.clone();
        Some(WindowEntry {
            granule_id,
            attempt: self.attempts.get(i).copied().unwrap_or(WINDOW_ATTEMPT),
            spot_ends: self.spot_ends.get(i).copied().unwrap_or(0),
            record_at_end: self.records_at_end,
        })
    }

    /// Every granule's entry, in order.
    pub fn entries(&self) -> impl Iterator<Item = WindowEntry> + '_ {
        (0..self.granules.len()).filter_map(|i| self.entry(i))
    }

    /// The window submitted as one array job when `wanted` and its granules make an array of a
    /// size Batch accepts; a window of one granule (or none) stays a single job.
    pub fn in_array(self, wanted: bool) -> Self {
        let array = wanted && ARRAY_SIZES.contains(&self.granules.len());
        let token = array.then(|| {
            use sha2::{Digest, Sha256};
            let made = format!(
                "{}\n{}\n{}",
                self.inventory,
                self.start,
                self.lease.claimed_at.format("%Y-%m-%dT%H:%M:%S%.9fZ")
            );
            Sha256::digest(made.as_bytes())
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect()
        });
        Self {
            array,
            token,
            ..self
        }
    }

    /// The name to look granule `i`'s job up by (a takeover, the reconciler): the array's, or
    /// the granule's own.
    pub fn lookup_name(&self, i: usize) -> Option<String> {
        if self.array {
            return Some(super::job_name::window_job_name(
                self.campaign.as_ref(),
                &self.inventory,
                self.start,
            ));
        }
        self.entry(i)
            .map(|e| super::job_name::job_name(self.campaign.as_ref(), &e.granule_id, e.attempt))
    }

    /// Granule `i`'s job, given the job found by [`Self::lookup_name`].
    pub fn job_of_found(&self, i: usize, found: &str) -> String {
        if self.array {
            child_job_id(found, i)
        } else {
            found.to_owned()
        }
    }

    /// The (granule, attempt) of every granule in the window.
    pub fn attempts(&self) -> impl Iterator<Item = GranuleProcessingEvent> + '_ {
        self.entries().map(|e| e.event())
    }

    /// The recorded job of granule `i`, if any: its own, or its child of the array.
    pub fn job_id(&self, i: usize) -> Option<String> {
        if self.array {
            return self
                .array_job_id
                .as_deref()
                .filter(|_| i < self.granules.len())
                .map(|parent| child_job_id(parent, i));
        }
        self.job_ids.get(i).cloned().flatten()
    }

    /// Whether the claim records granule `i`'s job (not to be found by its name): without
    /// formatting the child's id, as [`WindowClaim::job_id`] does.
    pub fn records_job(&self, i: usize) -> bool {
        if self.array {
            return self.array_job_id.is_some() && i < self.granules.len();
        }
        matches!(self.job_ids.get(i), Some(Some(_)))
    }

    /// When the jobs were recorded (the claim's time before that): the time of the item
    /// records the window's run creates, so a retry of that run writes them equal.
    pub fn recorded_at(&self) -> DateTime<Utc> {
        self.submitted_at.unwrap_or(self.lease.claimed_at)
    }

    /// Names the history batch of the records one recording of this window creates: the
    /// inventory (its `/` as `+`), the start row and the recording's time, so a takeover that
    /// records more jobs later writes a batch of its own.
    pub fn history_tag(&self) -> String {
        format!(
            "{}.{:012}.{}",
            self.inventory.replace('/', "+"),
            self.start,
            self.recorded_at().format("%Y%m%dT%H%M%S%.6fZ")
        )
    }
}

impl JobsClaim for WindowClaim {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn screen_pending(&self) -> bool {
        self.screen_pending
    }

    fn lease_mut(&mut self) -> &mut Lease {
        &mut self.lease
    }

    fn recorded(&self) -> Vec<Option<String>> {
        if self.array {
            return vec![self.array_job_id.clone()];
        }
        (0..self.granules.len()).map(|i| self.job_id(i)).collect()
    }

    fn recording(&self, found: &[Option<String>], now: DateTime<Utc>) -> Self {
        if self.array {
            return Self {
                array_job_id: self
                    .array_job_id
                    .clone()
                    .or_else(|| found.first().cloned().flatten()),
                submitted_at: Some(now),
                ..self.clone()
            };
        }
        let job_ids = (0..self.granules.len())
            .map(|i| self.job_id(i).or_else(|| found.get(i).cloned().flatten()))
            .collect();
        Self {
            job_ids,
            submitted_at: Some(now),
            ..self.clone()
        }
    }
}

/// Child `index` of array job `parent`, as Batch names it (AWS Batch user guide, "Array jobs").
pub fn child_job_id(parent: &str, index: usize) -> String {
    format!("{parent}:{index}")
}

/// What a window's open marker says: which of its granules (by their place in the claim) the
/// reconciler has seen ended and handled. A pass then looks only at the others, so the cost of a
/// window does not grow with the passes it stays open for. An empty marker (as the feeder writes
/// it) knows nothing yet; a marker that cannot be read counts as empty (the reconciler only
/// looks again at what it had already seen).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowProgress {
    /// Indices into the claim's granules, ascending.
    #[serde(default)]
    pub handled: Vec<u32>,
}

impl WindowProgress {
    /// The marker's body read back; empty or unreadable bodies know nothing.
    pub fn from_marker(body: &[u8]) -> Self {
        if body.is_empty() {
            return Self::default();
        }
        serde_json::from_slice(body).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "window marker unreadable; looking at every granule again");
            Self::default()
        })
    }

    pub fn is_handled(&self, index: usize) -> bool {
        u32::try_from(index).is_ok_and(|i| self.handled.binary_search(&i).is_ok())
    }

    /// Adds `index`; true if it was not there.
    pub fn mark(&mut self, index: usize) -> bool {
        let Ok(i) = u32::try_from(index) else {
            return false;
        };
        match self.handled.binary_search(&i) {
            Ok(_) => false,
            Err(at) => {
                self.handled.insert(at, i);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests;
