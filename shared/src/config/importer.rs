//! The importer's section: what discovery lists and admits, and the sweeper's checks.

use super::sections::{
    DEFAULT_DISCOVER_CONCURRENCY, DEFAULT_ELIGIBLE_PATTERN, DEFAULT_SLOT_PATTERN,
};
use super::{ConfigError, Vars};
use crate::domain::layout;
use crate::domain::lifecycle::ActiveSlots;
use regex::Regex;

/// Settings of the importer steps (discover, download, admit) and the sweeper.
#[derive(Debug, Clone)]
pub struct ImporterConfig {
    /// What discover lists: `s3://bucket/prefix/` or an http(s) directory index URL.
    pub source_url: Option<String>,
    /// Where downloaded raw files are stored in granary's bucket.
    pub raw_prefix: String,
    /// The SQS queue that carries item ids between importer steps.
    pub import_queue_url: Option<String>,
    pub active_slots: ActiveSlots,
    /// A regex whose first capture group is an item's slot (taken from its name).
    pub slot_pattern: Regex,
    /// Names that do not match are SKIPPED as ineligible.
    pub eligible_pattern: Regex,
    /// Files last modified before this are SKIPPED as outdated.
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Keys (with `{id}` / `{name}` placeholders) that must exist before an item is READY.
    pub prerequisites: Vec<String>,
    /// Keys (with `{id}` / `{name}`) of a processed item's products, checked by re-validation.
    pub product_keys: Vec<String>,
    /// Concurrent HEAD requests while discovering.
    pub discover_concurrency: usize,
}

/// A pattern granary ships as a default: a constant, compiled by a unit test too
/// (`config::tests::sections_not_read_keep_the_defaults_the_variables_have`).
fn default_pattern(pattern: &'static str) -> Regex {
    crate::domain::pattern::compiled(pattern).expect("granary's default patterns are valid regexes")
}

impl Default for ImporterConfig {
    fn default() -> Self {
        Self {
            source_url: None,
            raw_prefix: layout::RAW_PREFIX.to_owned(),
            import_queue_url: None,
            active_slots: ActiveSlots::All,
            slot_pattern: default_pattern(DEFAULT_SLOT_PATTERN),
            eligible_pattern: default_pattern(DEFAULT_ELIGIBLE_PATTERN),
            not_before: None,
            prerequisites: Vec::new(),
            product_keys: Vec::new(),
            discover_concurrency: DEFAULT_DISCOVER_CONCURRENCY,
        }
    }
}

impl ImporterConfig {
    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        let not_before = match v.get("GRANARY_NOT_BEFORE") {
            None => None,
            Some(raw) => Some(
                chrono::DateTime::parse_from_rfc3339(&raw)
                    .map_err(|e| ConfigError::Invalid {
                        var: "GRANARY_NOT_BEFORE",
                        value: raw.clone(),
                        why: format!("{e}; use RFC 3339, e.g. 2024-01-01T00:00:00Z"),
                    })?
                    .with_timezone(&chrono::Utc),
            ),
        };
        Ok(Self {
            source_url: v.get("GRANARY_SOURCE_URL"),
            raw_prefix: layout::RAW_PREFIX.to_owned(),
            import_queue_url: v.get("GRANARY_IMPORT_QUEUE_URL"),
            active_slots: ActiveSlots::parse(&v.or("GRANARY_ACTIVE_SLOTS", "*")),
            slot_pattern: v.regex("GRANARY_SLOT_PATTERN", DEFAULT_SLOT_PATTERN)?,
            eligible_pattern: v.regex("GRANARY_ELIGIBLE_PATTERN", DEFAULT_ELIGIBLE_PATTERN)?,
            not_before,
            prerequisites: v.list("GRANARY_PREREQUISITES"),
            product_keys: v.list("GRANARY_PRODUCT_KEYS"),
            discover_concurrency: v
                .number("GRANARY_DISCOVER_CONCURRENCY", DEFAULT_DISCOVER_CONCURRENCY)?,
        })
    }
}
