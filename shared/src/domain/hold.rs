//! A hold: an operator's "stop feeding" that keeps the feeder's place. While it exists the feeder
//! exits at once without touching the tracker; releasing it resumes at the same row.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub reason: String,
    pub held_by: String,
    pub at: DateTime<Utc>,
    /// What the holder saw: for the automatic brake, the latest failures behind it (granule
    /// and reason, newest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// Placed by `granary cancel`: the requeuer holds back the next attempts it takes too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelHold>,
}

/// The cancel behind a hold: its id and what it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelHold {
    pub id: String,
    pub filter: super::cancel::CancelFilter,
}

impl Hold {
    /// The feeder's early-exit message: what, since when, and how to undo it.
    pub fn describe(&self) -> String {
        format!(
            "held by {} since {}: {} (run `granary release` to resume)",
            self.held_by,
            self.at.format("%Y-%m-%d %H:%M:%S UTC"),
            self.reason
        )
    }
}
