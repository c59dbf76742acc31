//! Configuration from environment variables (Lambda environment, or the shell for the CLI).
//! Every variable, its default and meaning is listed in the README.

use crate::domain::granule::{IdParser, IdParserError};
use crate::domain::lifecycle::{ActiveSlots, RetryPolicy};
use regex::Regex;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is not set; it must name {what}")]
    Missing {
        var: &'static str,
        what: &'static str,
    },
    #[error("{var}={value:?} is not valid: {why}")]
    Invalid {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error("GRANARY_ID_PATTERN / GRANARY_ID_DATE_FORMAT: {0}")]
    IdParser(#[from] IdParserError),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub bucket: String,
    pub inventory_prefix: String,
    pub inventory_id_column: String,
    pub tracker_key: String,
    /// While this object exists the feeder submits nothing (`granary hold` / `granary release`).
    pub hold_key: String,
    pub log_prefix: String,
    pub claim_prefix: String,
    /// The open-claims index: one empty marker per submitted attempt whose end is not yet logged
    /// and routed. The reconciler reads only this, never every claim of a campaign.
    pub open_claim_prefix: String,
    /// How old an open claim must be before the reconciler asks Batch about its job: longer than
    /// EventBridge normally takes to deliver an end, so it only catches events that were lost.
    pub reconcile_after: Duration,
    /// Where poison inputs (unusable rows, events, messages, records) are kept, each with its
    /// reason, before they are dead-lettered: SQS keeps a message 14 days at most, S3 for good.
    pub reject_prefix: String,
    pub job_queue: String,
    pub job_definition: String,
    pub retry_queue_url: String,
    pub failure_dlq_url: String,
    /// The feeder submits nothing while this many jobs are unfinished.
    pub max_active_jobs: u64,
    /// Retries granary makes after the first attempt (so attempts go up to 1 + max_retries).
    pub max_retries: u32,
    pub submit_concurrency: usize,
    /// How long a claim without a job id belongs to whoever made it; longer than any Lambda runs.
    pub claim_lease: Duration,
    /// How long a logged-but-unrouted failure belongs to the delivery that logged it; longer than
    /// the monitor's Lambda timeout. A duplicate arriving inside it is retried later, not routed.
    pub route_lease: Duration,
    pub id_parser: IdParser,
    /// Where item records, their history and the in-flight index live.
    pub item_prefixes: crate::repositories::items::ItemPrefixes,
    /// Whether the backfill loop keeps an item record per granule (costs ~3 S3 PUTs per transition).
    pub track_items: bool,
    pub retry_policy: RetryPolicy,
    pub importer: ImporterConfig,
    /// The running function's timeout (`GRANARY_FUNCTION_TIMEOUT_SECS`, set per function by the
    /// template). When set, both leases must outlast it: a lease that can expire while its holder
    /// still runs lets a second invocation submit the same attempt or route the same end.
    pub function_timeout: Option<Duration>,
}

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

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Builds the config from name/value pairs only (tests, local runs).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    /// Builds the config from any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |var: &'static str, what: &'static str| {
            get(var)
                .filter(|v| !v.is_empty())
                .ok_or(ConfigError::Missing { var, what })
        };
        let or = |var: &str, default: &str| {
            get(var)
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        fn number<T: std::str::FromStr>(var: &'static str, raw: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            raw.parse().map_err(|e: T::Err| ConfigError::Invalid {
                var,
                value: raw.clone(),
                why: e.to_string(),
            })
        }
        let prefix = |var: &'static str, default: &str| -> Result<String, ConfigError> {
            let p = or(var, default);
            if p.starts_with('/') || !p.ends_with('/') {
                return Err(ConfigError::Invalid {
                    var,
                    value: p,
                    why: "a key prefix must end with '/' and not start with one".into(),
                });
            }
            Ok(p)
        };
        let submit_concurrency: usize = number(
            "GRANARY_SUBMIT_CONCURRENCY",
            or("GRANARY_SUBMIT_CONCURRENCY", "8"),
        )?;
        if submit_concurrency == 0 {
            return Err(ConfigError::Invalid {
                var: "GRANARY_SUBMIT_CONCURRENCY",
                value: "0".into(),
                why: "must be at least 1".into(),
            });
        }
        let max_retries: u32 = number("GRANARY_MAX_RETRIES", or("GRANARY_MAX_RETRIES", "3"))?;
        let secs = |var: &'static str, default: &str| -> Result<chrono::Duration, ConfigError> {
            let n: u32 = number(var, or(var, default))?;
            Ok(chrono::Duration::seconds(i64::from(n)))
        };
        let regex = |var: &'static str, default: &str| -> Result<Regex, ConfigError> {
            let raw = or(var, default);
            Regex::new(&raw).map_err(|e| ConfigError::Invalid {
                var,
                value: raw.clone(),
                why: e.to_string(),
            })
        };
        let max_download_attempts: u32 = number(
            "GRANARY_MAX_DOWNLOAD_ATTEMPTS",
            or("GRANARY_MAX_DOWNLOAD_ATTEMPTS", "3"),
        )?;
        let not_before = match get("GRANARY_NOT_BEFORE").filter(|v| !v.is_empty()) {
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
        let flag = |var: &'static str, default: bool| -> Result<bool, ConfigError> {
            match get(var).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "on" | "yes" => Ok(true),
                    "0" | "false" | "off" | "no" => Ok(false),
                    _ => Err(ConfigError::Invalid {
                        var,
                        value: v,
                        why: "use on or off".into(),
                    }),
                },
            }
        };
        let importer = ImporterConfig {
            source_url: get("GRANARY_SOURCE_URL").filter(|v| !v.is_empty()),
            raw_prefix: prefix("GRANARY_RAW_PREFIX", "raw/")?,
            import_queue_url: get("GRANARY_IMPORT_QUEUE_URL").filter(|v| !v.is_empty()),
            active_slots: ActiveSlots::parse(&or("GRANARY_ACTIVE_SLOTS", "*")),
            slot_pattern: regex("GRANARY_SLOT_PATTERN", r"^[^.]+\.([^.]+)\.")?,
            eligible_pattern: regex("GRANARY_ELIGIBLE_PATTERN", ".")?,
            not_before,
            prerequisites: or("GRANARY_PREREQUISITES", "")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            product_keys: or("GRANARY_PRODUCT_KEYS", "")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            discover_concurrency: number(
                "GRANARY_DISCOVER_CONCURRENCY",
                or("GRANARY_DISCOVER_CONCURRENCY", "8"),
            )?,
        };
        Self {
            item_prefixes: crate::repositories::items::ItemPrefixes {
                items: prefix("GRANARY_ITEM_PREFIX", "items/")?,
                history: prefix("GRANARY_HISTORY_PREFIX", "history/")?,
                inflight: prefix("GRANARY_INFLIGHT_PREFIX", "inflight/")?,
            },
            track_items: flag("GRANARY_ITEM_RECORDS", true)?,
            retry_policy: RetryPolicy {
                max_download_attempts: max_download_attempts.max(1),
                max_processing_attempts: max_retries.saturating_add(1),
                download_timeout: secs("GRANARY_DOWNLOAD_TIMEOUT_SECS", "240")?,
                processing_timeout: secs("GRANARY_PROCESSING_TIMEOUT_SECS", "21600")?,
            },
            importer,
            bucket: required(
                "GRANARY_BUCKET",
                "the S3 bucket holding inventories, tracker, claims and logs",
            )?,
            inventory_prefix: prefix("GRANARY_INVENTORY_PREFIX", "inventories/")?,
            inventory_id_column: or(
                "GRANARY_INVENTORY_ID_COLUMN",
                crate::adapters::parquet::DEFAULT_ID_COLUMN,
            ),
            tracker_key: or("GRANARY_TRACKER_KEY", "tracker/tracker.json"),
            hold_key: or("GRANARY_HOLD_KEY", "holds/feeder.json"),
            log_prefix: prefix("GRANARY_LOG_PREFIX", "logs/")?,
            claim_prefix: prefix("GRANARY_CLAIM_PREFIX", "claims/")?,
            open_claim_prefix: prefix("GRANARY_OPEN_CLAIM_PREFIX", "open-claims/")?,
            reconcile_after: Duration::from_secs(number(
                "GRANARY_RECONCILE_AFTER_SECS",
                or("GRANARY_RECONCILE_AFTER_SECS", "3600"),
            )?),
            reject_prefix: prefix("GRANARY_REJECT_PREFIX", "rejects/")?,
            job_queue: required("GRANARY_JOB_QUEUE", "the AWS Batch job queue (name or ARN)")?,
            job_definition: required(
                "GRANARY_JOB_DEFINITION",
                "the AWS Batch job definition (name, name:revision or ARN)",
            )?,
            retry_queue_url: required("GRANARY_RETRY_QUEUE_URL", "the SQS retry queue URL")?,
            failure_dlq_url: required(
                "GRANARY_FAILURE_DLQ_URL",
                "the SQS failure dead-letter queue URL",
            )?,
            max_active_jobs: number(
                "GRANARY_MAX_ACTIVE_JOBS",
                or("GRANARY_MAX_ACTIVE_JOBS", "10000"),
            )?,
            max_retries,
            submit_concurrency,
            claim_lease: Duration::from_secs(number(
                "GRANARY_CLAIM_LEASE_SECS",
                or("GRANARY_CLAIM_LEASE_SECS", "900"),
            )?),
            route_lease: Duration::from_secs(number(
                "GRANARY_ROUTE_LEASE_SECS",
                or("GRANARY_ROUTE_LEASE_SECS", "120"),
            )?),
            id_parser: IdParser::new(
                &or("GRANARY_ID_PATTERN", IdParser::HLS_PATTERN),
                &or("GRANARY_ID_DATE_FORMAT", IdParser::HLS_DATE_FORMAT),
            )?,
            function_timeout: match get("GRANARY_FUNCTION_TIMEOUT_SECS").filter(|v| !v.is_empty()) {
                Some(v) => Some(Duration::from_secs(number(
                    "GRANARY_FUNCTION_TIMEOUT_SECS",
                    v,
                )?)),
                None => None,
            },
        }
        .with_leases_checked()
    }

    /// Refuses leases that do not outlast the function holding them.
    fn with_leases_checked(self) -> Result<Self, ConfigError> {
        let Some(timeout) = self.function_timeout else {
            return Ok(self);
        };
        for (var, lease) in [
            ("GRANARY_CLAIM_LEASE_SECS", self.claim_lease),
            ("GRANARY_ROUTE_LEASE_SECS", self.route_lease),
        ] {
            if lease <= timeout {
                return Err(ConfigError::Invalid {
                    var,
                    value: lease.as_secs().to_string(),
                    why: format!(
                        "a lease must outlast the function's timeout ({}s, GRANARY_FUNCTION_TIMEOUT_SECS), or a second invocation can take over work the first is still doing",
                        timeout.as_secs()
                    ),
                });
            }
        }
        Ok(self)
    }

    /// The attempt number past which a granule is dead-lettered.
    pub fn max_attempt(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn base() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("GRANARY_BUCKET", "b"),
            ("GRANARY_JOB_QUEUE", "q"),
            ("GRANARY_JOB_DEFINITION", "d"),
            ("GRANARY_RETRY_QUEUE_URL", "r"),
            ("GRANARY_FAILURE_DLQ_URL", "f"),
        ])
    }

    fn load(m: &HashMap<&'static str, &'static str>) -> Result<Config, ConfigError> {
        Config::from_lookup(|k| m.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn defaults() {
        let c = load(&base()).unwrap();
        assert_eq!(c.max_retries, 3);
        assert_eq!(c.max_attempt(), 4);
        assert_eq!(c.log_prefix, "logs/");
        assert_eq!(c.claim_lease, Duration::from_secs(900));
        assert!(c.track_items);
        assert_eq!(c.retry_policy.max_processing_attempts, 4);
        assert_eq!(c.retry_policy.max_download_attempts, 3);
        assert_eq!(c.importer.active_slots, ActiveSlots::All);
        let slot = c
            .importer
            .slot_pattern
            .captures("HLS.S30.T01GBH.2022226T214921.v2.0");
        assert_eq!(slot.and_then(|c| c.get(1)).map(|m| m.as_str()), Some("S30"));
        assert_eq!(c.item_prefixes.history, "history/");
    }

    #[test]
    fn clear_errors() {
        let mut m = base();
        m.remove("GRANARY_BUCKET");
        let e = load(&m).unwrap_err().to_string();
        assert!(e.contains("GRANARY_BUCKET is not set"), "{e}");
        let mut m = base();
        m.insert("GRANARY_MAX_RETRIES", "many");
        assert!(load(&m)
            .unwrap_err()
            .to_string()
            .contains("GRANARY_MAX_RETRIES=\"many\""));
        let mut m = base();
        m.insert("GRANARY_LOG_PREFIX", "logs");
        assert!(matches!(load(&m), Err(ConfigError::Invalid { .. })));
        let mut m = base();
        m.insert("GRANARY_ID_PATTERN", "(?P<platform>x)");
        assert!(matches!(load(&m), Err(ConfigError::IdParser(_))));
        let mut m = base();
        m.insert("GRANARY_ITEM_RECORDS", "maybe");
        assert!(load(&m).unwrap_err().to_string().contains("use on or off"));
        let mut m = base();
        m.insert("GRANARY_NOT_BEFORE", "yesterday");
        assert!(load(&m).unwrap_err().to_string().contains("RFC 3339"));
    }

    #[test]
    fn leases_must_outlast_the_function_that_holds_them() {
        let mut m = base();
        m.insert("GRANARY_FUNCTION_TIMEOUT_SECS", "300");
        m.insert("GRANARY_CLAIM_LEASE_SECS", "900");
        m.insert("GRANARY_ROUTE_LEASE_SECS", "301");
        assert_eq!(
            load(&m).unwrap().function_timeout,
            Some(Duration::from_secs(300))
        );
        m.insert("GRANARY_ROUTE_LEASE_SECS", "300");
        let e = load(&m).unwrap_err().to_string();
        assert!(
            e.contains("GRANARY_ROUTE_LEASE_SECS") && e.contains("outlast"),
            "{e}"
        );
        m.insert("GRANARY_ROUTE_LEASE_SECS", "900");
        m.insert("GRANARY_CLAIM_LEASE_SECS", "0");
        assert!(load(&m)
            .unwrap_err()
            .to_string()
            .contains("GRANARY_CLAIM_LEASE_SECS"));
        // Without a function timeout (tests, the CLI) any lease is taken as given.
        m.remove("GRANARY_FUNCTION_TIMEOUT_SECS");
        assert!(load(&m).is_ok());
    }
}
