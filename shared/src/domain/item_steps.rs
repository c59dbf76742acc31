//! The status of each step of an item's workflow (seed 001's append-only processing-status
//! rows): a download attempt, the admission checks, a processing attempt — each with its id,
//! name, type, whether it is complete, and a link to the item's record.
//!
//! They are read from the history, not written beside it: a step begins with the entry that
//! enters its state (DOWNLOADING, DOWNLOADED, PROCESSING) and is complete once a later entry
//! leaves that state, so the append-only history already holds every status row the seed asks
//! for, at no extra write. The Athena view `granary_item_steps` derives the same rows from the
//! history table.

use super::granule::GranuleId;
use super::item::HistoryEntry;
use super::lifecycle::ItemState;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What kind of work a step is (the seed's `processing_status_type`): where it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepType {
    /// Fetching the file into granary's bucket (DOWNLOADING).
    Download,
    /// Validation, eligibility, slot and prerequisites (DOWNLOADED).
    Admission,
    /// The Batch job (PROCESSING).
    Processing,
}

impl StepType {
    /// The step a state is, if it is one.
    pub fn of(state: ItemState) -> Option<Self> {
        match state {
            ItemState::Downloading => Some(Self::Download),
            ItemState::Downloaded => Some(Self::Admission),
            ItemState::Processing => Some(Self::Processing),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Download => "download",
            Self::Admission => "admission",
            Self::Processing => "processing",
        }
    }
}

impl std::str::FromStr for StepType {
    type Err = UnknownStepType;
    fn from_str(s: &str) -> Result<Self, UnknownStepType> {
        [Self::Download, Self::Admission, Self::Processing]
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStepType(s.to_owned()))
    }
}

/// A name that is no [`StepType`] (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no step type {0:?}: download, admission or processing")]
pub struct UnknownStepType(pub String);

/// One step of one item's workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStatus {
    /// `<item id>.<seq>`: the history entry that began the step.
    pub id: String,
    /// "download attempt 2", "admission", "processing attempt 1".
    pub name: String,
    #[serde(rename = "type")]
    pub step_type: StepType,
    /// False while the step runs; true once the item left its state.
    pub step_complete: bool,
    pub item_id: GranuleId,
    /// The item's record (its S3 key).
    pub item_record: String,
    pub started: DateTime<Utc>,
    pub ended: Option<DateTime<Utc>>,
    /// Where the item went when the step ended (DOWNLOADED, PROCESSING_FAILED, …).
    pub ended_in: Option<ItemState>,
}

/// The steps an item's `history` (its entries, in any order) records; `record_key` is its
/// record's key. Oldest first.
pub fn steps_of(history: &[HistoryEntry], record_key: &str) -> Vec<StepStatus> {
    let mut entries: Vec<&HistoryEntry> = history.iter().collect();
    entries.sort_by_key(|e| e.seq);
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            let step_type = StepType::of(entry.to)?;
            let next = entries.get(i + 1);
            let name = match step_type {
                StepType::Admission => "admission".to_owned(),
                t => format!("{} attempt {}", t.as_str(), entry.attempt),
            };
            Some(StepStatus {
                id: format!("{}.{}", entry.item_id, entry.seq),
                name,
                step_type,
                step_complete: next.is_some(),
                item_id: entry.item_id.clone(),
                item_record: record_key.to_owned(),
                started: entry.at,
                ended: next.map(|n| n.at),
                ended_in: next.map(|n| n.to),
            })
        })
        .collect()
}

/// The seed's finders over step statuses. Every field set must match.
#[derive(Debug, Clone, Default)]
pub struct StepQuery {
    pub id: Option<String>,
    pub name: Option<String>,
    pub step_complete: Option<bool>,
    pub item: Option<GranuleId>,
    pub step_type: Option<StepType>,
}

impl StepQuery {
    pub fn matches(&self, s: &StepStatus) -> bool {
        self.id.as_ref().is_none_or(|id| &s.id == id)
            && self.name.as_ref().is_none_or(|n| &s.name == n)
            && self.step_complete.is_none_or(|c| s.step_complete == c)
            && self.item.as_ref().is_none_or(|i| &s.item_id == i)
            && self.step_type.is_none_or(|t| s.step_type == t)
    }

    /// The one item a query names (by `item`, or by a step id's item part), if it names one:
    /// its history alone answers it.
    pub fn only_item(&self) -> Option<GranuleId> {
        if let Some(item) = &self.item {
            return Some(item.clone());
        }
        let (item, _) = self.id.as_deref()?.rsplit_once('.')?;
        GranuleId::parse(item).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::item::{Change, ItemRecord, NewItem};
    use ItemState::*;

    fn history(path: &[ItemState]) -> Vec<HistoryEntry> {
        let id = GranuleId::parse("f0123").unwrap();
        let t0 = chrono::DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap();
        let mut r: ItemRecord = NewItem {
            id,
            name: "a.h5".into(),
            state: path[0],
            reason: "found".into(),
            raw_file_hash: None,
            size: None,
            checksum: None,
            source: None,
            source_modified: None,
        }
        .into_record(t0, "t");
        let mut out = vec![HistoryEntry::of(&r)];
        for (n, to) in path[1..].iter().enumerate() {
            let at = t0 + chrono::Duration::minutes(n as i64 + 1);
            r = r.apply(&Change::to(*to, "next"), at, "t").unwrap();
            out.push(HistoryEntry::of(&r));
        }
        out
    }

    #[test]
    fn each_working_state_entered_is_a_step_complete_once_left() {
        let h = history(&[
            Discovered,
            Downloading,
            DownloadingFailed,
            Downloading,
            Downloaded,
            Ready,
            Processing,
        ]);
        let mut shuffled = h.clone();
        shuffled.reverse();
        let steps = steps_of(&shuffled, "items/f0123.json");
        let names: Vec<(&str, bool)> = steps
            .iter()
            .map(|s| (s.name.as_str(), s.step_complete))
            .collect();
        assert_eq!(
            names,
            vec![
                ("download attempt 1", true),
                ("download attempt 2", true),
                ("admission", true),
                ("processing attempt 1", false),
            ]
        );
        assert_eq!(steps[0].id, "f0123.1");
        assert_eq!(steps[0].ended_in, Some(DownloadingFailed));
        assert_eq!(steps[2].ended_in, Some(Ready));
        assert_eq!(steps[3].ended, None);
        assert_eq!(steps[3].item_record, "items/f0123.json");
    }

    #[test]
    fn the_finders_answer_by_id_name_completion_item_and_type() {
        let steps = steps_of(
            &history(&[Ready, Processing, ProcessingFailed, Ready, Processing]),
            "items/f0123.json",
        );
        let found = |q: StepQuery| -> Vec<String> {
            steps
                .iter()
                .filter(|s| q.matches(s))
                .map(|s| s.name.clone())
                .collect()
        };
        assert_eq!(
            found(StepQuery {
                step_complete: Some(false),
                ..Default::default()
            }),
            vec!["processing attempt 2"]
        );
        assert_eq!(
            found(StepQuery {
                id: Some("f0123.1".into()),
                ..Default::default()
            }),
            vec!["processing attempt 1"]
        );
        assert_eq!(
            found(StepQuery {
                step_type: Some(StepType::Download),
                ..Default::default()
            }),
            Vec::<String>::new()
        );
        assert_eq!(
            found(StepQuery {
                name: Some("processing attempt 1".into()),
                item: Some(GranuleId::parse("f0123").unwrap()),
                ..Default::default()
            }),
            vec!["processing attempt 1"]
        );
        let by_id = StepQuery {
            id: Some("HLS.S30.T01GBH.2022226T214921.v2.0.4".into()),
            ..Default::default()
        };
        assert_eq!(
            by_id.only_item().map(|i| i.to_string()).as_deref(),
            Some("HLS.S30.T01GBH.2022226T214921.v2.0")
        );
        assert_eq!("Processing".parse::<StepType>(), Ok(StepType::Processing));
        assert!("upload".parse::<StepType>().is_err());
    }
}
