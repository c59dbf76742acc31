//! `granary cancel`: which of a campaign's open attempts an operator's cancel terminates, the
//! reason it gives Batch, and how the job monitor knows the end that reason comes back with.
//!
//! TerminateJob takes a `reason` of up to 1,024 characters that "is returned by future
//! DescribeJobs operations on the job" (AWS Batch API Reference, TerminateJob); jobs not yet
//! STARTING are cancelled and the others terminated, and either way the job ends FAILED with
//! that reason as its `statusReason`. granary's cancel writes its own prefix and cancel id
//! there, so the end is recognised from the event alone ([`cancel_of`]): logged, and routed to
//! neither the retry queue nor the DLQ but to the cancelled list `granary resume --cancelled`
//! sends round again.

use super::granule::GranuleId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What every reason granary's cancel gives Batch starts with.
pub const REASON_PREFIX: &str = "granary cancel ";

/// TerminateJob's limit on `reason` (AWS Batch API Reference, TerminateJob).
pub const REASON_MAX_CHARS: usize = 1024;

/// A cancel's id: `c<UTC time to the second>-<8 hex>`, sortable by when it ran.
pub fn new_cancel_id(now: DateTime<Utc>, entropy: u32) -> String {
    format!("c{}-{entropy:08x}", now.format("%Y%m%dT%H%M%S"))
}

/// The TerminateJob reason for cancel `id`: the prefix, the id, then the operator's words, cut
/// to Batch's limit (on a character boundary).
pub fn reason(id: &str, why: &str) -> String {
    let full = format!("{REASON_PREFIX}{id}: {why}");
    full.chars().take(REASON_MAX_CHARS).collect()
}

/// The cancel id a job's `statusReason` names, if granary's cancel ended it.
pub fn cancel_of(status_reason: &str) -> Option<&str> {
    let rest = status_reason.strip_prefix(REASON_PREFIX)?;
    let id = rest.split_once(':').map_or(rest, |(id, _)| id);
    let well_formed = id.starts_with('c')
        && id.len() > 1
        && id[1..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
    well_formed.then_some(id)
}

/// Which open attempts a cancel takes: every one, or those of a platform, an inventory (a
/// feeder window's) or an attempt number. Each given filter must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// An inventory's object key: only first attempts submitted from its windows carry one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// One open attempt as the cancel sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenAttempt {
    pub granule_id: GranuleId,
    pub attempt: u32,
    /// The job to terminate (an array's child `<parent>:<index>`); none while its submitter has
    /// not recorded it yet.
    pub job_id: Option<String>,
    /// The inventory whose window submitted it; none for a later attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<String>,
}

impl CancelFilter {
    /// Whether `open`, of platform `platform` (from its id), is one this cancel takes.
    pub fn takes(&self, open: &OpenAttempt, platform: Option<&str>) -> bool {
        self.platform
            .as_deref()
            .is_none_or(|p| platform.is_some_and(|q| q.eq_ignore_ascii_case(p)))
            && self
                .inventory
                .as_deref()
                .is_none_or(|i| open.inventory.as_deref() == Some(i))
            && self.attempt.is_none_or(|a| open.attempt == a)
    }

    /// The filter in words, for the operator's output.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.platform {
            parts.push(format!("platform {p}"));
        }
        if let Some(i) = &self.inventory {
            parts.push(format!("inventory {i}"));
        }
        if let Some(a) = self.attempt {
            parts.push(format!("attempt {a}"));
        }
        if parts.is_empty() {
            "every open attempt".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// What a cancel wrote before its first TerminateJob: what it meant to terminate, and why. Kept
/// under the campaign's claims (`claims/cancels/<id>.json`) for the operator's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRecord {
    pub id: String,
    pub reason: String,
    pub by: String,
    pub at: DateTime<Utc>,
    pub filter: CancelFilter,
    pub targets: Vec<OpenAttempt>,
}

/// An attempt granary's cancel ended, waiting for `granary resume --cancelled`: the monitor's
/// route for such an end (`claims/cancelled/granule_id=G/attempt=N.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    pub granule_id: GranuleId,
    pub attempt: u32,
    pub cancel: String,
    pub job_id: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(attempt: u32, inventory: Option<&str>) -> OpenAttempt {
        OpenAttempt {
            granule_id: GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap(),
            attempt,
            job_id: Some("j".into()),
            inventory: inventory.map(str::to_owned),
        }
    }

    #[test]
    fn the_reason_names_the_cancel_and_the_end_is_known_by_it() {
        let id = new_cancel_id("2026-11-27T06:00:01Z".parse().unwrap(), 0xab);
        assert_eq!(id, "c20261127T060001-000000ab");
        let r = reason(&id, "wrong container image");
        assert_eq!(r, format!("granary cancel {id}: wrong container image"));
        assert_eq!(cancel_of(&r), Some(id.as_str()));
        // Cut to Batch's limit, and still known.
        let long = reason(&id, &"é".repeat(2000));
        assert_eq!(long.chars().count(), REASON_MAX_CHARS);
        assert_eq!(cancel_of(&long), Some(id.as_str()));
    }

    #[test]
    fn other_cancels_and_terminations_are_not_granarys() {
        for other in [
            "Terminated by the user",
            "Cancelled by operator",
            "granary cancel",
            "granary cancel : x",
            "granary cancel x y: z",
            "Canceled by JobStateTimeLimit action due to reason: CAPACITY:X",
            "",
        ] {
            assert_eq!(cancel_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_filter_takes_what_each_of_its_parts_matches() {
        let all = CancelFilter::default();
        assert!(all.takes(&open(1, Some("inv/a.parquet")), Some("S30")));
        assert!(all.takes(&open(3, None), None));
        assert_eq!(all.describe(), "every open attempt");

        let s30 = CancelFilter {
            platform: Some("s30".into()),
            ..Default::default()
        };
        assert!(s30.takes(&open(1, None), Some("S30")));
        assert!(!s30.takes(&open(1, None), Some("L30")));
        assert!(!s30.takes(&open(1, None), None));

        let inv = CancelFilter {
            inventory: Some("inv/a.parquet".into()),
            attempt: Some(1),
            ..Default::default()
        };
        assert!(inv.takes(&open(1, Some("inv/a.parquet")), Some("S30")));
        assert!(!inv.takes(&open(1, Some("inv/b.parquet")), Some("S30")));
        assert!(!inv.takes(&open(2, Some("inv/a.parquet")), Some("S30")));
        assert!(!inv.takes(&open(1, None), Some("S30")));
        assert_eq!(inv.describe(), "inventory inv/a.parquet, attempt 1");
    }
}
