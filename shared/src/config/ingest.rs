//! The ingest queue's section (`GRANARY_INGEST_*`, `GRANARY_NOTIFICATION_BUS`): read by the ingest
//! functions, and by the job monitor for the prefix its records live under.

use super::{ConfigError, Vars};
use std::time::Duration;

pub const DEFAULT_INGEST_PREFIX: &str = crate::domain::layout::INGEST_PREFIX;
pub const DEFAULT_CAPACITY_BYTES: u64 = 100 * 1024 * 1024 * 1024;
pub const DEFAULT_LARGE_JOB_BYTES: u64 = 10 * 1024 * 1024 * 1024;
/// The largest a container deposit's zip, and all it expands to, may be: it is expanded in the
/// dispatcher's memory (512 MB in the template), which holds the zip and one file at a time.
pub const DEFAULT_MAX_CONTAINER_BYTES: u64 = 128 * 1024 * 1024;
pub const DEFAULT_DOWNLOAD_ATTEMPTS: u32 = 3;
pub const DEFAULT_CALLBACK_ATTEMPTS: u32 = 3;
pub const DEFAULT_INGEST_TIMEOUT_SECS: u64 = 600;
pub const DEFAULT_BUS: &str = "default";

/// The ingest queue's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestSettings {
    /// Where its records, indexes, files and reports live in the bucket.
    pub prefix: String,
    /// Bytes that may be downloading or processing at once (the provisioning step's limit).
    pub capacity_bytes: u64,
    /// A job needing more than this steps back in priority after estimating.
    pub large_job_bytes: u64,
    /// A job whose size is unknown waits in provisioning while less than this much of the
    /// capacity is free (`GRANARY_INGEST_UNESTIMATED_RESERVE_BYTES`; the large-job size by
    /// default: an unknown size may be a large one).
    pub unestimated_reserve_bytes: u64,
    pub download_attempts: u32,
    pub callback_attempts: u32,
    /// Per request (HEAD, GET of one file, callback).
    pub timeout: Duration,
    /// The EventBridge bus job and batch events are published on.
    pub bus_name: String,
    /// Where a completed batch is archived before its cleanup (`GRANARY_INGEST_ARCHIVE_DESTINATIONS`,
    /// comma-separated `s3://bucket/prefix/[:CLASS]`); empty: batches are not archived.
    pub archive_destinations: Vec<crate::domain::archive::record::Destination>,
    /// The submission profiles whose depositors are told when a batch's jobs are queued
    /// (`GRANARY_INGEST_QUEUED_CONFIRMATION`: profile names, comma-separated; `*` for every
    /// batch; empty: nobody).
    pub queued_confirmation: Vec<String>,
    /// The largest a container deposit's zip, and all it expands to, may be
    /// (`GRANARY_INGEST_MAX_CONTAINER_BYTES`): it is expanded in the dispatcher's memory, so
    /// twice it must fit the function's memory setting.
    pub max_container_bytes: u64,
    /// Whether the depositor's own processing container runs on AWS Batch before the storing
    /// step (`GRANARY_INGEST_CONTAINER_STEP`, on by default); off: processing hands a job
    /// straight to storing.
    pub container_step: bool,
    /// The EZID-compatible service objects without an identifier are minted one from
    /// (`GRANARY_INGEST_EZID_URL`, `…_SHOULDER`, `…_CREDENTIALS_PARAMETER`); `None`: nothing is
    /// minted, and such an object is stored under its job id.
    pub ezid: Option<EzidSettings>,
}

/// Where and as whom identifiers are minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EzidSettings {
    /// The service's base URL (`https://ezid.cdlib.org`).
    pub url: String,
    /// The shoulder minted on (`ark:/99999/fk4`).
    pub shoulder: String,
    /// The SSM parameter (SecureString) holding `user:password` for HTTP Basic authentication,
    /// read once at start-up; `None`: requests go unauthenticated (a test server).
    pub credentials_parameter: Option<String>,
}

impl Default for IngestSettings {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_INGEST_PREFIX.to_owned(),
            capacity_bytes: DEFAULT_CAPACITY_BYTES,
            large_job_bytes: DEFAULT_LARGE_JOB_BYTES,
            unestimated_reserve_bytes: DEFAULT_LARGE_JOB_BYTES,
            download_attempts: DEFAULT_DOWNLOAD_ATTEMPTS,
            callback_attempts: DEFAULT_CALLBACK_ATTEMPTS,
            timeout: Duration::from_secs(DEFAULT_INGEST_TIMEOUT_SECS),
            bus_name: DEFAULT_BUS.to_owned(),
            archive_destinations: Vec::new(),
            queued_confirmation: Vec::new(),
            max_container_bytes: DEFAULT_MAX_CONTAINER_BYTES,
            container_step: true,
            ezid: None,
        }
    }
}

impl IngestSettings {
    /// From any lookup; unset variables keep their defaults.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(&Vars { get: &get })
    }

    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        // Zero attempts would mean "never try": at least one is made.
        let at_least_one = |n: u32| n.max(1);
        Ok(Self {
            prefix: DEFAULT_INGEST_PREFIX.to_owned(),
            capacity_bytes: v.number("GRANARY_INGEST_CAPACITY_BYTES", DEFAULT_CAPACITY_BYTES)?,
            large_job_bytes: v.number("GRANARY_INGEST_LARGE_JOB_BYTES", DEFAULT_LARGE_JOB_BYTES)?,
            unestimated_reserve_bytes: v.number(
                "GRANARY_INGEST_UNESTIMATED_RESERVE_BYTES",
                DEFAULT_LARGE_JOB_BYTES,
            )?,
            download_attempts: at_least_one(v.number(
                "GRANARY_INGEST_DOWNLOAD_ATTEMPTS",
                DEFAULT_DOWNLOAD_ATTEMPTS,
            )?),
            callback_attempts: at_least_one(v.number(
                "GRANARY_INGEST_CALLBACK_ATTEMPTS",
                DEFAULT_CALLBACK_ATTEMPTS,
            )?),
            timeout: Duration::from_secs(
                v.number("GRANARY_INGEST_TIMEOUT_SECS", DEFAULT_INGEST_TIMEOUT_SECS)?,
            ),
            bus_name: v.or("GRANARY_NOTIFICATION_BUS", DEFAULT_BUS),
            archive_destinations: v
                .list("GRANARY_INGEST_ARCHIVE_DESTINATIONS")
                .iter()
                .map(|d| crate::domain::archive::record::Destination::parse(d))
                .collect::<Result<_, _>>()
                .map_err(|why| ConfigError::Invalid {
                    var: "GRANARY_INGEST_ARCHIVE_DESTINATIONS",
                    value: v.or("GRANARY_INGEST_ARCHIVE_DESTINATIONS", ""),
                    why: why.to_string(),
                })?,
            queued_confirmation: v.list("GRANARY_INGEST_QUEUED_CONFIRMATION"),
            max_container_bytes: v.number(
                "GRANARY_INGEST_MAX_CONTAINER_BYTES",
                DEFAULT_MAX_CONTAINER_BYTES,
            )?,
            container_step: v.flag("GRANARY_INGEST_CONTAINER_STEP", true)?,
            ezid: Self::read_ezid(v)?,
        })
    }

    fn read_ezid(v: &Vars) -> Result<Option<EzidSettings>, ConfigError> {
        let Some(url) = v.get("GRANARY_INGEST_EZID_URL") else {
            return Ok(None);
        };
        // Every mint sends EZID's user:password (HTTP Basic): over plain http anyone on the path
        // reads them. Only a server on this machine (the local twin, a test) may go without TLS.
        if !(url.starts_with("https://") || is_loopback_http(&url)) {
            return Err(ConfigError::Invalid {
                var: "GRANARY_INGEST_EZID_URL",
                value: url,
                why: "an https URL, such as https://ezid.cdlib.org (http only to 127.0.0.1, [::1] or localhost: the credentials travel with each mint)".into(),
            });
        }
        Ok(Some(EzidSettings {
            url: url.trim_end_matches('/').to_owned(),
            shoulder: v.required(
                "GRANARY_INGEST_EZID_SHOULDER",
                "the shoulder identifiers are minted on (ark:/99999/fk4)",
            )?,
            credentials_parameter: v.get("GRANARY_INGEST_EZID_CREDENTIALS_PARAMETER"),
        }))
    }
}

/// Whether `url` is plain http to this machine (`127.0.0.1`, `[::1]`, `localhost`, any port).
fn is_loopback_http(url: &str) -> bool {
    // Parsed as a URL (reqwest's `Url`): `http://127.0.0.1@evil.example/` is evil's host,
    // whatever its text starts with.
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    url.scheme() == "http"
        && url.username().is_empty()
        && url.password().is_none()
        && matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_variables_keep_their_defaults_and_bad_ones_are_named() {
        assert_eq!(
            IngestSettings::from_lookup(|_| None).unwrap(),
            IngestSettings::default()
        );
        let s = IngestSettings::from_lookup(|k| match k {
            "GRANARY_INGEST_DOWNLOAD_ATTEMPTS" => Some("0".into()),
            "GRANARY_NOTIFICATION_BUS" => Some("ops".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(s.download_attempts, 1, "at least one attempt");
        assert_eq!(s.bus_name, "ops");
        for (var, value) in [
            ("GRANARY_INGEST_ARCHIVE_DESTINATIONS", "vault/x"),
            ("GRANARY_INGEST_CAPACITY_BYTES", "lots"),
        ] {
            let e = IngestSettings::from_lookup(|k| (k == var).then(|| value.to_owned()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(var), "{e}");
        }
    }

    #[test]
    fn an_ezid_url_must_be_https_unless_it_is_this_machine() {
        let ezid = |url: &str| {
            IngestSettings::from_lookup(|k| match k {
                "GRANARY_INGEST_EZID_URL" => Some(url.to_owned()),
                "GRANARY_INGEST_EZID_SHOULDER" => Some("ark:/99999/fk4".to_owned()),
                _ => None,
            })
        };
        for ok in [
            "https://ezid.cdlib.org",
            "http://127.0.0.1:8080",
            "http://localhost/ezid",
            "http://[::1]:9",
        ] {
            assert!(ezid(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://ezid.cdlib.org",
            "http://localhost.evil.example",
            "http://127.0.0.1@evil.example",
            "ftp://ezid.cdlib.org",
        ] {
            let e = ezid(refused).unwrap_err().to_string();
            assert!(e.contains("GRANARY_INGEST_EZID_URL"), "{refused}: {e}");
        }
    }
}
