//! An archive job's record (changed only with If-Match, every change checked against the table
//! and kept in its history) and its tasks' records.

use super::job::{ArchiveState, Phase, TaskState};
use crate::domain::machine::Record;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What is archived: every object under an S3 prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveSource {
    pub bucket: String,
    /// Ends in `/` (or is empty: the whole bucket).
    pub prefix: String,
}

impl std::fmt::Display for ArchiveSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// Where the archive is stored: `s3://bucket/prefix<archive id>/…` in a storage class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    pub bucket: String,
    pub prefix: String,
    /// An S3 storage class (`STANDARD`, `GLACIER_IR`, `DEEP_ARCHIVE`, …); `None`: the bucket's
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
}

/// A destination that is not `s3://bucket/prefix/[:CLASS]` (the text as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDestination {
    #[error("{0:?}: a destination is s3://bucket/prefix/[:CLASS]")]
    NotS3(String),
    #[error("{0:?}: no bucket")]
    NoBucket(String),
}

impl Destination {
    /// `s3://bucket/prefix/[:CLASS]`.
    pub fn parse(raw: &str) -> Result<Self, InvalidDestination> {
        let (url, class) = match raw.rsplit_once(':') {
            Some((u, c)) if !c.contains('/') && u.starts_with("s3") && u.contains("//") => {
                (u, Some(c.to_ascii_uppercase()))
            }
            _ => (raw, None),
        };
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| InvalidDestination::NotS3(raw.to_owned()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(InvalidDestination::NoBucket(raw.to_owned()));
        }
        let prefix = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_owned()
        } else {
            format!("{prefix}/")
        };
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix,
            storage_class: class,
        })
    }

    /// Where archive `id` lives at this destination.
    pub fn archive_prefix(&self, id: &str) -> String {
        format!("{}{id}/", self.prefix)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub from: ArchiveState,
    pub to: ArchiveState,
    pub at: DateTime<Utc>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveJob {
    pub id: String,
    pub state: ArchiveState,
    pub source: ArchiveSource,
    pub destinations: Vec<Destination>,
    /// Shards of the source (set at initialization).
    pub shards: u32,
    pub objects: u64,
    /// Retries used per phase (automatic ones).
    #[serde(default)]
    pub retries: BTreeMap<Phase, u32>,
    /// The phase the last error happened in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_phase: Option<Phase>,
    /// Why it failed, once it did (cleared by an operator's retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable: Option<bool>,
    /// A recoverable error's retry waits until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    /// Every transition, in order: each phase's completion appears once.
    pub history: Vec<Transition>,
}

impl ArchiveJob {
    pub fn new(
        id: &str,
        source: ArchiveSource,
        destinations: Vec<Destination>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id: id.to_owned(),
            state: ArchiveState::Uninitialized,
            source,
            destinations,
            shards: 0,
            objects: 0,
            retries: BTreeMap::new(),
            failed_phase: None,
            failure: None,
            recoverable: None,
            retry_at: None,
            reason: "created".into(),
            created_at: now,
            last_modified: now,
            history: Vec::new(),
        }
    }

    /// How many times the job went `from` → `to`.
    pub fn times(&self, from: ArchiveState, to: ArchiveState) -> usize {
        self.history
            .iter()
            .filter(|t| t.from == from && t.to == to)
            .count()
    }
}

/// One task of a phase: a shard to archive, the post-processing, a destination to store to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub job: String,
    pub phase: Phase,
    pub task: String,
    pub state: TaskState,
    #[serde(default)]
    pub reason: String,
    /// Runs of this task (a retry re-runs only failed tasks).
    #[serde(default)]
    pub runs: u32,
    /// When its message was last sent: a pending task not run long after is sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<DateTime<Utc>>,
    /// What a shard's archiving produced: its members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<super::manifest::Member>,
}

impl Record for ArchiveJob {
    type State = ArchiveState;
    fn state(&self) -> ArchiveState {
        self.state
    }
    /// Every transition is kept in the job's history.
    fn entered(&self, to: ArchiveState, reason: &str, now: DateTime<Utc>) -> Self {
        let mut next = self.clone();
        next.history.push(Transition {
            from: self.state,
            to,
            at: now,
            reason: reason.to_owned(),
        });
        next.state = to;
        next.reason = reason.to_owned();
        next.last_modified = now;
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_read_with_and_without_a_storage_class() {
        let d = Destination::parse("s3://vault/archives:deep_archive").unwrap();
        assert_eq!(
            (
                d.bucket.as_str(),
                d.prefix.as_str(),
                d.storage_class.as_deref()
            ),
            ("vault", "archives/", Some("DEEP_ARCHIVE"))
        );
        let d = Destination::parse("s3://vault").unwrap();
        assert_eq!((d.prefix.as_str(), d.storage_class.as_deref()), ("", None));
        assert_eq!(d.archive_prefix("a1"), "a1/");
        assert!(Destination::parse("vault/x").is_err());
    }

    #[test]
    fn every_change_is_checked_and_kept_in_the_history() {
        let now = Utc::now();
        let src = ArchiveSource {
            bucket: "b".into(),
            prefix: "p/".into(),
        };
        let j = ArchiveJob::new("a1", src, vec![], now);
        let q = j.moved(ArchiveState::Queued, "initialized", now).unwrap();
        assert!(q.moved(ArchiveState::Store, "no", now).is_err());
        assert_eq!(
            q.times(ArchiveState::Uninitialized, ArchiveState::Queued),
            1
        );
        assert_eq!(q.history.len(), 1);
    }
}
