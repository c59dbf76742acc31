//! The ids that name the ingest queue's batches and jobs (their keys: `domain::layout::ingest`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The priority every job starts with (lower runs first).
pub const DEFAULT_PRIORITY: u8 = 5;
/// The lowest priority a key can carry.
pub const MAX_PRIORITY: u8 = 99;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?} is not valid: {why}")]
pub struct InvalidId {
    pub what: &'static str,
    pub value: String,
    pub why: &'static str,
}

fn check(what: &'static str, raw: &str) -> Result<(), InvalidId> {
    let bad = |why| InvalidId {
        what,
        value: raw.chars().take(80).collect(),
        why,
    };
    if raw.is_empty() || raw.len() > 64 {
        return Err(bad("1 to 64 characters"));
    }
    if !raw
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(bad("letters, digits, '-' and '_' only"));
    }
    Ok(())
}

/// A batch id: `b<yyyymmddHHMMSS>-<8 hex>`, sortable by submission time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BatchId(String);

impl BatchId {
    pub fn parse(raw: &str) -> Result<Self, InvalidId> {
        check("batch id", raw)?;
        Ok(Self(raw.to_owned()))
    }

    /// The id of a batch submitted at `at` whose submission hashes to `digest` (hex).
    pub fn new(at: chrono::DateTime<chrono::Utc>, digest: &str) -> Self {
        let short: String = digest
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(8)
            .collect();
        Self(format!("b{}-{short}", at.format("%Y%m%d%H%M%S")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `n`th job of this batch (1-based).
    pub fn job(&self, n: usize) -> JobId {
        JobId(format!("{}-j{n:05}", self.0))
    }
}

impl TryFrom<String> for BatchId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<BatchId> for String {
    fn from(b: BatchId) -> String {
        b.0
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A job id: its batch's id and its place in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    pub fn parse(raw: &str) -> Result<Self, InvalidId> {
        check("job id", raw)?;
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<JobId> for String {
    fn from(j: JobId) -> String {
        j.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_safe_in_keys() {
        assert!(BatchId::parse("b1-x").is_ok());
        assert!(BatchId::parse("../etc").is_err());
        assert!(JobId::parse("").is_err());
        assert!(JobId::parse(&"j".repeat(65)).is_err());
        let bid = BatchId::parse("b1").unwrap();
        assert_eq!(bid.job(3).as_str(), "b1-j00003");
        let json = serde_json::to_string(&bid.job(3)).unwrap();
        assert_eq!(serde_json::from_str::<JobId>(&json).unwrap(), bid.job(3));
        assert!(serde_json::from_str::<JobId>("\"a/b\"").is_err());
    }
}
