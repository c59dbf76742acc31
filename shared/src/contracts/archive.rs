//! What archive jobs send: one message per task on the archive task queue, and the events
//! announcing a job's completion or failure on the notification bus.

use crate::domain::archive::job::Phase;
use crate::ports::{BusEvent, OutgoingMessage};
use serde::{Deserialize, Serialize};

pub const EVENT_SOURCE: &str = "granary.archive";
pub const ARCHIVE_COMPLETED: &str = "Archive Job Completed";
pub const ARCHIVE_FAILED: &str = "Archive Job Failed";

/// One task to run: a shard to archive, the post-processing, a destination to store to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    pub job: String,
    pub phase: Phase,
    pub task: String,
}

impl TaskMessage {
    pub fn to_message(&self) -> Result<OutgoingMessage, super::EncodeError> {
        Ok(OutgoingMessage::new(super::encode_text(
            "an archive task message",
            self,
        )?))
    }
}

/// A job's end, announced: where its copies are, or why it failed.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveAnnouncement {
    pub archive: String,
    pub state: String,
    pub source: String,
    pub objects: u64,
    /// `s3://bucket/prefix<archive>/` per destination.
    pub copies: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl ArchiveAnnouncement {
    pub fn event(&self) -> BusEvent {
        BusEvent {
            source: EVENT_SOURCE.to_owned(),
            detail_type: if self.failure.is_some() {
                ARCHIVE_FAILED
            } else {
                ARCHIVE_COMPLETED
            }
            .to_owned(),
            detail: serde_json::json!(self),
            resources: Vec::new(),
        }
    }
}
