//! Outside text quoted in a reason, a log line or a DLQ message. A poison input can be any size (an
//! inventory cell of 300 KB, an event field of a megabyte): quoting it whole would make the very
//! message that reports it too large to send (SQS takes 256 KiB), and the feeder would stop at that
//! row forever. So it is quoted by its start, its length and its hash — enough to find it again.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// How much of a raw value is quoted verbatim.
pub const QUOTED_CHARS: usize = 120;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawText {
    /// The first [`QUOTED_CHARS`] characters (all of it when shorter).
    pub quoted: String,
    /// The length in bytes of the whole value.
    pub bytes: usize,
    /// sha256 of the whole value, hex; only when `quoted` is not all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl RawText {
    pub fn of(raw: &str) -> Self {
        let quoted: String = raw.chars().take(QUOTED_CHARS).collect();
        let whole = quoted.len() == raw.len();
        Self {
            quoted,
            bytes: raw.len(),
            sha256: (!whole).then(|| hex(&Sha256::digest(raw.as_bytes()))),
        }
    }

    pub fn is_whole(&self) -> bool {
        self.sha256.is_none()
    }

    /// The value itself when short, else the quoted start with length and hash.
    pub fn shown(&self) -> String {
        if self.is_whole() {
            self.quoted.clone()
        } else {
            self.to_string()
        }
    }
}

impl fmt::Display for RawText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sha256 {
            None => write!(f, "{:?}", self.quoted),
            Some(h) => write!(f, "{:?}… ({} bytes, sha256 {})", self.quoted, self.bytes, h),
        }
    }
}

/// What kind of input was rejected (the `kind` attribute and the key's partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    InvalidInventoryRow,
    UnreadableEvent,
    EventWithoutGranule,
    MalformedRetryMessage,
    MalformedImportMessage,
    CorruptItemRecord,
}

impl RejectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectKind::InvalidInventoryRow => "invalid_inventory_row",
            RejectKind::UnreadableEvent => "unreadable_event",
            RejectKind::EventWithoutGranule => "event_without_granule",
            RejectKind::MalformedRetryMessage => "malformed_retry_message",
            RejectKind::MalformedImportMessage => "malformed_import_message",
            RejectKind::CorruptItemRecord => "corrupt_item_record",
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_quoted_whole() {
        let r = RawText::of("HLS.S30.x");
        assert!(r.is_whole());
        assert_eq!(r.to_string(), "\"HLS.S30.x\"");
    }

    #[test]
    fn long_text_is_cut_with_length_and_hash() {
        let raw = "é".repeat(200_000);
        let r = RawText::of(&raw);
        assert!(!r.is_whole());
        assert_eq!(r.bytes, 400_000);
        assert_eq!(r.quoted.chars().count(), QUOTED_CHARS);
        let shown = r.to_string();
        assert!(shown.len() < 400, "{}", shown.len());
        assert!(shown.contains("400000 bytes, sha256 "));
        // the same input always reads the same, a different one differently
        assert_eq!(RawText::of(&raw), r);
        assert_ne!(RawText::of(&format!("{raw}x")).sha256, r.sha256);
    }
}
