//! The item record (one per item: where it is now) and its history entries (one per transition,
//! written once), with the keys both live under. Pure: storing them is `crate::items`.

use super::granule::GranuleId;
use super::lifecycle::{Attempts, ItemState};
use super::machine::IllegalTransition;
use chrono::{DateTime, NaiveDate, Utc};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// Log messages kept on the record; the history keeps every one.
pub const MAX_LOG_MESSAGES: usize = 50;

/// The current-status record of one item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRecord {
    /// Key-safe identity: the granule id for backfill items, a content-hash id for discovered files.
    pub id: GranuleId,
    /// Human name: the file name at the source, or the granule id.
    pub name: String,
    pub state: ItemState,
    /// The state before the last transition (`None` right after creation).
    pub previous_state: Option<ItemState>,
    /// Why the last transition happened.
    pub reason: String,
    /// Transitions applied so far; the history entry of the current state has this number.
    pub seq: u32,
    /// True once the item's workflow succeeded: its product is made and stored (PROCESSED), as
    /// seed 001's `workflow_complete` ("the data file has been stored successfully").
    pub workflow_complete: bool,
    /// True in a terminal state, success or not (PROCESSED, SKIPPED, IGNORE, ABANDONED): nothing
    /// more happens to the item by itself. (Records written before this field read as false
    /// until their next change.)
    #[serde(default)]
    pub terminal: bool,
    pub log_messages: Vec<String>,
    #[serde(flatten)]
    pub attempts: Attempts,
    pub last_updated: DateTime<Utc>,
    /// Never changes after creation.
    pub created: DateTime<Utc>,
    /// Identity of the raw file as its source describes it; unique across items.
    pub raw_file_hash: Option<String>,
    pub size: Option<u64>,
    /// Digest of the stored raw file, `sha256:<hex>` (or the source's published digest).
    pub checksum: Option<String>,
    /// Where the item came from: an http(s) URL, an s3:// URL, or an inventory key.
    pub source: Option<String>,
    /// When the source last modified the file (admission skips outdated files).
    #[serde(default)]
    pub source_modified: Option<DateTime<Utc>>,
    /// Where granary stored the raw file in its bucket.
    pub stored_key: Option<String>,
    /// The Batch job of the current processing attempt.
    pub job_id: Option<String>,
    /// Who made the last change (a handler name, or `operator`).
    pub updated_by: String,
    /// Set when the record was created with others of its window: its first entries are lines
    /// of the window's history objects, not objects of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_batch: Option<HistoryBatch>,
    /// The entries of the transitions this record's last write made before its current one
    /// (a multi-step write, PROCESSING_FAILED → READY → PROCESSING). With the current state's
    /// own entry they are what the record holds of its history ([`HistoryEntry::held_by`]):
    /// written as history objects only when the record moves past them, by whoever moves it
    /// ([`crate::repositories::items`]). The record is the only thing written atomically, so
    /// the entries of its latest write live in it until then: none is lost to a crash, and a
    /// record that never moves again (a granule's end) costs no history write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_steps: Vec<HistoryEntry>,
}

/// Where a record created with its window keeps its first history entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryBatch {
    /// The batch objects (one per state entered), JSON lines, one line per transition.
    pub keys: Vec<String>,
    /// The entries up to this sequence number are in them.
    pub through_seq: u32,
}

/// What a caller wants changed besides the state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    pub to: Option<ItemState>,
    pub reason: String,
    pub size: Option<u64>,
    pub checksum: Option<String>,
    pub stored_key: Option<String>,
    pub job_id: Option<String>,
    /// For a change into PROCESSING: the number of the attempt it begins (the submission's own
    /// number), so that a record made late — after earlier attempts it never saw — counts its
    /// attempts as the submitter did. Without it, entering PROCESSING counts one more.
    pub attempt: Option<u32>,
}

impl Change {
    pub fn to(to: ItemState, reason: impl Into<String>) -> Self {
        Self {
            to: Some(to),
            reason: reason.into(),
            ..Self::default()
        }
    }
}

/// A new record in its first state; the creation is history entry 0.
#[derive(Debug, Clone)]
pub struct NewItem {
    pub id: GranuleId,
    pub name: String,
    pub state: ItemState,
    pub reason: String,
    pub raw_file_hash: Option<String>,
    pub size: Option<u64>,
    pub checksum: Option<String>,
    pub source: Option<String>,
    pub source_modified: Option<DateTime<Utc>>,
}

impl NewItem {
    /// A backfill granule: READY, named by its id, vouched for by `source` (an inventory row).
    pub fn ready(id: GranuleId, reason: impl Into<String>, source: Option<String>) -> Self {
        Self {
            name: id.to_string(),
            id,
            state: ItemState::Ready,
            reason: reason.into(),
            raw_file_hash: None,
            size: None,
            checksum: None,
            source,
            source_modified: None,
        }
    }

    pub fn into_record(self, now: DateTime<Utc>, by: &str) -> ItemRecord {
        let mut record = ItemRecord {
            id: self.id,
            name: self.name,
            state: self.state,
            previous_state: None,
            reason: self.reason.clone(),
            seq: 0,
            workflow_complete: self.state.completes_the_workflow(),
            terminal: self.state.is_terminal(),
            log_messages: Vec::new(),
            attempts: Attempts::default(),
            last_updated: now,
            created: now,
            raw_file_hash: self.raw_file_hash,
            size: self.size,
            checksum: self.checksum,
            source: self.source,
            source_modified: self.source_modified,
            stored_key: None,
            job_id: None,
            updated_by: by.to_owned(),
            history_batch: None,
            earlier_steps: Vec::new(),
        };
        record.attempts.begin(self.state, now);
        record.log(format!("created {}: {}", self.state, self.reason), now);
        record
    }
}

impl ItemRecord {
    fn log(&mut self, message: String, now: DateTime<Utc>) {
        self.log_messages
            .push(format!("{} {message}", now.format("%Y-%m-%dT%H:%M:%SZ")));
        let excess = self.log_messages.len().saturating_sub(MAX_LOG_MESSAGES);
        self.log_messages.drain(..excess);
    }

    /// The record after `change`, checked against the transition table. A change without a
    /// target state only updates fields and logs the reason (no history entry is owed for it).
    pub fn apply(
        &self,
        change: &Change,
        now: DateTime<Utc>,
        by: &str,
    ) -> Result<ItemRecord, IllegalTransition<ItemState>> {
        let mut next = self.clone();
        if let Some(to) = change.to {
            super::machine::check(self.state, to)?;
            // A new transition owes nothing of the last write's (they are paid before a record
            // moves on); a note without a transition keeps them owed.
            next.earlier_steps.clear();
            next.previous_state = Some(self.state);
            next.state = to;
            next.seq += 1;
            next.reason = change.reason.clone();
            next.workflow_complete = to.completes_the_workflow();
            next.terminal = to.is_terminal();
            next.attempts.begin(to, now);
            if let (ItemState::Processing, Some(attempt)) = (to, change.attempt) {
                next.attempts.processing = attempt;
            }
            next.log(format!("{} → {to}: {}", self.state, change.reason), now);
        } else {
            next.log(change.reason.clone(), now);
        }
        if change.size.is_some() {
            next.size = change.size;
        }
        if change.checksum.is_some() {
            next.checksum = change.checksum.clone();
        }
        if change.stored_key.is_some() {
            next.stored_key = change.stored_key.clone();
        }
        if change.job_id.is_some() {
            next.job_id = change.job_id.clone();
        }
        next.last_updated = now;
        next.updated_by = by.to_owned();
        Ok(next)
    }

    /// Still in the state its batch creation left it in: the entry of this state is a line of
    /// the batch's objects (no object of its own is owed), and it has no in-flight marker (the
    /// window's open marker stands for it, `handlers::importer::sweeper`).
    pub fn in_batch_state(&self) -> bool {
        self.history_batch
            .as_ref()
            .is_some_and(|b| self.seq <= b.through_seq)
    }

    /// The attempt number that matters in the current state.
    pub fn current_attempt(&self) -> u32 {
        match self.state {
            ItemState::Discovered
            | ItemState::Downloading
            | ItemState::Downloaded
            | ItemState::DownloadingFailed
            | ItemState::Ignore
            | ItemState::Skipped => self.attempts.download,
            _ => self.attempts.processing,
        }
    }
}

/// One transition, written once under the history prefix and never rewritten — once the record
/// has moved past it; until then the record holds it ([`HistoryEntry::held_by`]). It carries
/// the record as it was after the transition, so the latest entry of an item rebuilds its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub item_id: GranuleId,
    pub seq: u32,
    pub from: Option<ItemState>,
    pub to: ItemState,
    pub reason: String,
    /// The attempt number of the kind of work the transition belongs to.
    pub attempt: u32,
    pub at: DateTime<Utc>,
    pub by: String,
    pub record: ItemRecord,
}

impl HistoryEntry {
    /// The entry for the record's latest transition (or its creation).
    pub fn of(record: &ItemRecord) -> Self {
        Self {
            item_id: record.id.clone(),
            seq: record.seq,
            from: record.previous_state,
            to: record.state,
            reason: record.reason.clone(),
            attempt: record.current_attempt(),
            at: record.last_updated,
            by: record.updated_by.clone(),
            record: ItemRecord {
                earlier_steps: Vec::new(),
                ..record.clone()
            },
        }
    }

    /// The entries the record holds (its latest write's), in transition order: the earlier
    /// steps of a multi-step write, then the current state's. An item's history is its history
    /// objects and these; they become objects when the record moves past them.
    pub fn held_by(record: &ItemRecord) -> Vec<Self> {
        let mut owed = record.earlier_steps.clone();
        owed.push(Self::of(record));
        owed
    }

    /// Where the entry is kept (`domain::layout::items::history_key`).
    pub fn key(&self, prefix: &str) -> String {
        super::layout::items::history_key(prefix, self.at, self.to, &self.item_id, self.seq)
    }
}

pub fn is_timed(state: ItemState) -> bool {
    matches!(state, ItemState::Downloading | ItemState::Processing)
}

/// The id of a discovered file: a prefix of its raw_file_hash, so a second discovery of the same
/// file lands on the same record (and its conditional create loses).
pub fn id_from_hash(raw_file_hash: &str) -> Result<GranuleId, super::granule::InvalidGranuleId> {
    let digest = raw_file_hash.rsplit(':').next().unwrap_or(raw_file_hash);
    let hex: String = digest
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(32)
        .collect();
    GranuleId::parse(&format!("f{hex}"))
}

/// The finders over item records. Every field set must match.
#[derive(Debug, Clone, Default)]
pub struct ItemQuery {
    pub name: Option<String>,
    pub state: Option<ItemState>,
    pub workflow_complete: Option<bool>,
    pub terminal: Option<bool>,
    pub updated_after: Option<DateTime<Utc>>,
    pub log_message: Option<Regex>,
    pub created_on: Option<NaiveDate>,
}

impl ItemQuery {
    pub fn matches(&self, r: &ItemRecord) -> bool {
        self.name.as_ref().is_none_or(|n| &r.name == n)
            && self.state.is_none_or(|s| r.state == s)
            && self
                .workflow_complete
                .is_none_or(|w| r.workflow_complete == w)
            && self.terminal.is_none_or(|t| r.terminal == t)
            && self.updated_after.is_none_or(|t| r.last_updated > t)
            && self
                .log_message
                .as_ref()
                .is_none_or(|re| r.log_messages.iter().any(|m| re.is_match(m)))
            && self.created_on.is_none_or(|d| r.created.date_naive() == d)
    }
}

#[cfg(test)]
mod tests;
