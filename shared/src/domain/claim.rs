//! A claim is the exactly-once guard for submitting (granule, attempt): created with
//! If-None-Match before SubmitJob, completed with the job id after it. A claim without a job id
//! was left half-done by a run that died; whoever finds it looks the job up by its deterministic
//! name before submitting again.

use super::granule::{GranuleId, GranuleProcessingEvent};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub granule_id: GranuleId,
    pub attempt: u32,
    pub job_name: String,
    /// Which component claimed it (queue-feeder, requeuer, ...), for the operator.
    pub claimed_by: String,
    pub claimed_at: DateTime<Utc>,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub submitted_at: Option<DateTime<Utc>>,
}

impl Claim {
    pub fn new(event: &GranuleProcessingEvent, claimed_by: &str, now: DateTime<Utc>) -> Self {
        Self {
            granule_id: event.granule_id.clone(),
            attempt: event.attempt,
            job_name: super::job_name::job_name(&event.granule_id, event.attempt),
            claimed_by: claimed_by.to_owned(),
            claimed_at: now,
            job_id: None,
            submitted_at: None,
        }
    }

    /// The claim of another workflow's unit of work (an ingest job's processing attempt), named
    /// by `work` and submitted as `job_name`.
    pub fn of_work(
        work: GranuleId,
        attempt: u32,
        job_name: String,
        claimed_by: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            granule_id: work,
            attempt,
            job_name,
            claimed_by: claimed_by.to_owned(),
            claimed_at: now,
            job_id: None,
            submitted_at: None,
        }
    }

    pub fn is_submitted(&self) -> bool {
        self.job_id.is_some()
    }
}

/// `claims/granule_id=G/attempt=N.json`: all attempts of a granule under one prefix.
pub fn claim_key(prefix: &str, event: &GranuleProcessingEvent) -> String {
    format!(
        "{prefix}granule_id={}/attempt={}.json",
        event.granule_id, event.attempt
    )
}

/// The (granule, attempt) a key made by [`claim_key`] under `prefix` names; `None` for any other key.
pub fn parse_claim_key(prefix: &str, key: &str) -> Option<GranuleProcessingEvent> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("granule_id=")?;
    let (granule, attempt) = rest.rsplit_once("/attempt=")?;
    Some(GranuleProcessingEvent {
        granule_id: GranuleId::parse(granule).ok()?,
        attempt: attempt.strip_suffix(".json")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_parse_back() {
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 3,
        };
        assert_eq!(parse_claim_key("open/", &claim_key("open/", &e)), Some(e));
        for foreign in [
            "open/x",
            "open/granule_id=g/attempt=x.json",
            "open/granule_id=g/attempt=1",
            "other/granule_id=g/attempt=1.json",
        ] {
            assert_eq!(parse_claim_key("open/", foreign), None, "{foreign}");
        }
    }

    #[test]
    fn key_and_name() {
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 2,
        };
        assert_eq!(
            claim_key("claims/", &e),
            "claims/granule_id=HLS.L30.T18TYN.2020001T153012.v2.0/attempt=2.json"
        );
        let c = Claim::new(&e, "requeuer", Utc::now());
        assert!(!c.is_submitted());
        assert!(c.job_name.contains("-a2-"));
    }
}
