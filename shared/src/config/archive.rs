//! The archive jobs' section (`GRANARY_ARCHIVE_*`): read by the archive functions and commands.

use super::{ConfigError, Vars};
use std::time::Duration;

pub const DEFAULT_ARCHIVE_PREFIX: &str = crate::domain::layout::ARCHIVE_PREFIX;
pub const DEFAULT_OBJECTS_PER_SHARD: u32 = 100;
pub const DEFAULT_ARCHIVE_MAX_RETRIES: u32 = 3;
pub const DEFAULT_ARCHIVE_BACKOFF_SECS: u64 = 60;
/// A task whose message was sent this long ago and is still pending is sent again.
pub const DEFAULT_TASK_RESEND_SECS: u64 = 900;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSettings {
    /// Where job records, shards, tasks and the staged archive live in granary's bucket.
    pub prefix: String,
    /// The archive task queue (SQS): one message per task. Required by what sends tasks.
    pub task_queue_url: Option<String>,
    /// The SSM parameter (SecureString) holding the Ed25519 signing seed, hex.
    pub signing_key_parameter: Option<String>,
    pub objects_per_shard: u32,
    /// Automatic retries of a phase after a recoverable error.
    pub max_retries: u32,
    /// The first retry's wait; each next one doubles (capped at an hour).
    pub backoff: Duration,
    pub task_resend_after: Duration,
    /// The bus completions and failures are announced on (shared with the ingest queue).
    pub bus_name: String,
}

impl Default for ArchiveSettings {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_ARCHIVE_PREFIX.to_owned(),
            task_queue_url: None,
            signing_key_parameter: None,
            objects_per_shard: DEFAULT_OBJECTS_PER_SHARD,
            max_retries: DEFAULT_ARCHIVE_MAX_RETRIES,
            backoff: Duration::from_secs(DEFAULT_ARCHIVE_BACKOFF_SECS),
            task_resend_after: Duration::from_secs(DEFAULT_TASK_RESEND_SECS),
            bus_name: super::ingest::DEFAULT_BUS.to_owned(),
        }
    }
}

impl ArchiveSettings {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(&Vars { get: &get })
    }

    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            prefix: DEFAULT_ARCHIVE_PREFIX.to_owned(),
            task_queue_url: v.get("GRANARY_ARCHIVE_TASK_QUEUE_URL"),
            signing_key_parameter: v.get("GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER"),
            objects_per_shard: v
                .number(
                    "GRANARY_ARCHIVE_OBJECTS_PER_SHARD",
                    DEFAULT_OBJECTS_PER_SHARD,
                )?
                .max(1),
            max_retries: v.number("GRANARY_ARCHIVE_MAX_RETRIES", DEFAULT_ARCHIVE_MAX_RETRIES)?,
            backoff: Duration::from_secs(
                v.number("GRANARY_ARCHIVE_BACKOFF_SECS", DEFAULT_ARCHIVE_BACKOFF_SECS)?,
            ),
            task_resend_after: Duration::from_secs(
                v.number("GRANARY_ARCHIVE_TASK_RESEND_SECS", DEFAULT_TASK_RESEND_SECS)?,
            ),
            bus_name: v.or("GRANARY_NOTIFICATION_BUS", super::ingest::DEFAULT_BUS),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_bad_value_named() {
        assert_eq!(
            ArchiveSettings::from_lookup(|_| None).unwrap(),
            ArchiveSettings::default()
        );
        let e = ArchiveSettings::from_lookup(|k| {
            (k == "GRANARY_ARCHIVE_MAX_RETRIES").then(|| "many".into())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("GRANARY_ARCHIVE_MAX_RETRIES"), "{e}");
    }
}
