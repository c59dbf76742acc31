//! Configuration from environment variables (Lambda environment, or the shell for the CLI).
//! Every variable, its default and meaning is listed in the README.

use crate::domain::granule::{IdParser, IdParserError};
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
    pub log_prefix: String,
    pub claim_prefix: String,
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
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
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
        Ok(Self {
            bucket: required(
                "GRANARY_BUCKET",
                "the S3 bucket holding inventories, tracker, claims and logs",
            )?,
            inventory_prefix: prefix("GRANARY_INVENTORY_PREFIX", "inventories/")?,
            inventory_id_column: or(
                "GRANARY_INVENTORY_ID_COLUMN",
                crate::inventory::DEFAULT_ID_COLUMN,
            ),
            tracker_key: or("GRANARY_TRACKER_KEY", "tracker/tracker.json"),
            log_prefix: prefix("GRANARY_LOG_PREFIX", "logs/")?,
            claim_prefix: prefix("GRANARY_CLAIM_PREFIX", "claims/")?,
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
            max_retries: number("GRANARY_MAX_RETRIES", or("GRANARY_MAX_RETRIES", "3"))?,
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
        })
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
    }
}
