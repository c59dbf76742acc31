//! Where an outcome log lives. The key itself carries outcome, platform, acquisition date, granule
//! and attempt (hive partitions), so Athena and a plain prefix listing can answer most questions
//! without reading a single object.

use crate::domain::granule::{GranuleFacts, GranuleId};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogOutcome {
    Success,
    Failure,
}

impl LogOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            LogOutcome::Success => "success",
            LogOutcome::Failure => "failure",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogKey {
    pub outcome: LogOutcome,
    pub platform: String,
    /// `None` when the id does not tell; written as `unknown`.
    pub acquisition_date: Option<NaiveDate>,
    pub granule_id: GranuleId,
    pub attempt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a granary log key: {key:?} ({why})")]
pub struct BadLogKey {
    pub key: String,
    pub why: &'static str,
}

impl LogKey {
    pub fn new(
        outcome: LogOutcome,
        facts: &GranuleFacts,
        granule_id: &GranuleId,
        attempt: u32,
    ) -> Self {
        Self {
            outcome,
            platform: facts.platform_label().to_owned(),
            acquisition_date: facts.acquisition_date,
            granule_id: granule_id.clone(),
            attempt,
        }
    }

    fn date_label(&self) -> String {
        self.acquisition_date
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_else(|| GranuleFacts::UNKNOWN.to_owned())
    }

    /// The full key under `prefix` (e.g. `logs/`).
    pub fn to_key(&self, prefix: &str) -> String {
        format!(
            "{}attempt={}.json",
            self.granule_prefix(prefix),
            self.attempt
        )
    }

    /// The folder holding every attempt of this granule under this key's outcome.
    pub fn granule_prefix(&self, prefix: &str) -> String {
        format!(
            "{}granule_id={}/",
            self.partition_prefix(prefix),
            self.granule_id
        )
    }

    /// The partition folder (outcome, platform, acquisition date) this key is in.
    pub fn partition_prefix(&self, prefix: &str) -> String {
        format!(
            "{prefix}outcome={}/platform={}/acquisition_date={}/",
            self.outcome.as_str(),
            self.platform,
            self.date_label(),
        )
    }

    pub fn with_outcome(&self, outcome: LogOutcome) -> Self {
        Self {
            outcome,
            ..self.clone()
        }
    }

    pub fn parse(prefix: &str, key: &str) -> Result<Self, BadLogKey> {
        let bad = |why| BadLogKey {
            key: key.to_owned(),
            why,
        };
        let rest = key
            .strip_prefix(prefix)
            .ok_or_else(|| bad("wrong prefix"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [outcome, platform, date, granule, attempt] = parts.as_slice() else {
            return Err(bad("expected five path segments"));
        };
        let field = |seg: &'static str, part: &str| -> Result<String, BadLogKey> {
            part.strip_prefix(seg)
                .and_then(|v| v.strip_prefix('='))
                .map(str::to_owned)
                .ok_or_else(|| bad("segment out of order"))
        };
        let outcome = match field("outcome", outcome)?.as_str() {
            "success" => LogOutcome::Success,
            "failure" => LogOutcome::Failure,
            _ => return Err(bad("outcome must be success or failure")),
        };
        let platform = field("platform", platform)?;
        let date = field("acquisition_date", date)?;
        let acquisition_date = if date == GranuleFacts::UNKNOWN {
            None
        } else {
            Some(NaiveDate::parse_from_str(&date, "%Y-%m-%d").map_err(|_| bad("bad date"))?)
        };
        let granule_id =
            GranuleId::parse(&field("granule_id", granule)?).map_err(|_| bad("bad granule id"))?;
        let attempt = field("attempt", attempt)?
            .strip_suffix(".json")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad("bad attempt"))?;
        Ok(Self {
            outcome,
            platform,
            acquisition_date,
            granule_id,
            attempt,
        })
    }
}

impl fmt::Display for LogKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_key(""))
    }
}

/// Set on a failure log that was moved under outcome=success because a later attempt succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Supersession {
    pub by_attempt: u32,
    pub by_job_id: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Set on a success whose products a re-validation later found wanting, before the granule was
/// sent round again: the success no longer stands for the attempts after `through_attempt` (the
/// item's attempt when it was revoked). The log stays where it is, the evidence of what the job
/// did; the attempts before it still count it (their late ends must not send the granule round).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    pub through_attempt: u32,
    pub reason: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// What the log first found on a granule's success side, at or below a failing attempt, says of
/// the granule (the success side holds successes, failures a later success superseded, and late
/// failures filed after the success they name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuccessEvidence {
    /// The granule succeeded at this attempt, and that stands for the failing attempt.
    Succeeded(u32),
    /// Its success was revoked before the failing attempt was made: the failure is routed.
    Revoked,
    /// A failure filed after the success at this (earlier) attempt: that log decides.
    SeeSuccessAt(u32),
}

impl LogRecord {
    /// This success-side log's [`SuccessEvidence`] for a failure of `failing_attempt`.
    pub fn success_evidence(&self, failing_attempt: u32) -> SuccessEvidence {
        match &self.superseded {
            None => match &self.revoked {
                Some(r) if failing_attempt > r.through_attempt => SuccessEvidence::Revoked,
                _ => SuccessEvidence::Succeeded(self.attempt),
            },
            // A later success than the failing attempt (its log would be found first otherwise):
            // any revocation of it came after the failing attempt was made, so it stands.
            Some(s) if s.by_attempt > failing_attempt => SuccessEvidence::Succeeded(s.by_attempt),
            Some(s) => SuccessEvidence::SeeSuccessAt(s.by_attempt),
        }
    }
}

/// The body of one outcome log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    pub granule_id: GranuleId,
    pub attempt: u32,
    pub outcome: LogOutcome,
    pub classification: crate::domain::classify::Classification,
    pub route: crate::domain::classify::Route,
    pub job_id: String,
    pub job_name: String,
    pub logged_at: chrono::DateTime<chrono::Utc>,
    /// When the granule was put on its queue, written only with item records off; `None` until
    /// then, for successes, and always with item records on, where the record's move past the
    /// attempt marks the route (`monitor::log_and_route_failure`).
    #[serde(default)]
    pub routed_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    pub superseded: Option<Supersession>,
    /// Set on a success a re-validation revoked ([`Revocation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Revocation>,
    /// The Batch JobDetail exactly as the event carried it.
    pub job: serde_json::Value,
    /// The Spot ends before this attempt when the job's parameters cannot say (an array
    /// child's: its window claim holds them); absent: the job's `spot_ends` parameter says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_ends_before: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::granule::IdParser;

    #[test]
    fn key_layout() {
        let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
        let facts = IdParser::hls().facts(&id);
        let key = LogKey::new(LogOutcome::Failure, &facts, &id, 2);
        assert_eq!(
            key.to_key("logs/"),
            "logs/outcome=failure/platform=S30/acquisition_date=2022-08-14/granule_id=HLS.S30.T01GBH.2022226T214921.v2.0/attempt=2.json"
        );
        assert_eq!(LogKey::parse("logs/", &key.to_key("logs/")).unwrap(), key);
    }

    #[test]
    fn unknown_facts_round_trip() {
        let id = GranuleId::parse("granule-7").unwrap();
        let key = LogKey::new(LogOutcome::Success, &IdParser::hls().facts(&id), &id, 1);
        let s = key.to_key("p/");
        assert_eq!(s, "p/outcome=success/platform=unknown/acquisition_date=unknown/granule_id=granule-7/attempt=1.json");
        assert_eq!(LogKey::parse("p/", &s).unwrap(), key);
    }

    #[test]
    fn rejects_foreign_keys() {
        for k in [
            "other/outcome=success/platform=S30/acquisition_date=2022-01-01/granule_id=a/attempt=1.json",
            "logs/outcome=maybe/platform=S30/acquisition_date=2022-01-01/granule_id=a/attempt=1.json",
            "logs/platform=S30/outcome=success/acquisition_date=2022-01-01/granule_id=a/attempt=1.json",
            "logs/outcome=success/platform=S30/acquisition_date=2022-13-01/granule_id=a/attempt=1.json",
            "logs/outcome=success/platform=S30/acquisition_date=2022-01-01/granule_id=a/attempt=x.json",
            "logs/outcome=success/platform=S30/acquisition_date=2022-01-01/granule_id=a/attempt=1",
            "logs/outcome=success/platform=S30/granule_id=a/attempt=1.json",
        ] {
            assert!(LogKey::parse("logs/", k).is_err(), "{k}");
        }
    }

    #[test]
    fn moving_outcome_keeps_the_rest() {
        let id = GranuleId::parse("g").unwrap();
        let key = LogKey::new(LogOutcome::Failure, &IdParser::hls().facts(&id), &id, 3);
        let moved = key.with_outcome(LogOutcome::Success);
        assert_eq!(moved.attempt, 3);
        assert!(moved.to_key("logs/").starts_with("logs/outcome=success/"));
    }

    #[test]
    fn a_success_stands_unless_revoked_before_the_failing_attempt() {
        use crate::domain::classify::{Classification, JobOutcome, Route};
        let log = |attempt, superseded_by: Option<u32>, revoked_through: Option<u32>| LogRecord {
            granule_id: GranuleId::parse("g-1").unwrap(),
            attempt,
            outcome: LogOutcome::Success,
            classification: Classification {
                outcome: JobOutcome::Success,
                failure: None,
                batch_rules: String::new(),
                reason: String::new(),
            },
            route: Route::Done,
            job_id: String::new(),
            job_name: String::new(),
            logged_at: chrono::Utc::now(),
            routed_at: None,
            superseded: superseded_by.map(|by_attempt| Supersession {
                by_attempt,
                by_job_id: String::new(),
                at: chrono::Utc::now(),
            }),
            revoked: revoked_through.map(|through_attempt| Revocation {
                through_attempt,
                reason: "gone".into(),
                at: chrono::Utc::now(),
            }),
            job: serde_json::Value::Null,
            spot_ends_before: None,
        };
        use SuccessEvidence::*;
        assert_eq!(log(2, None, None).success_evidence(5), Succeeded(2));
        assert_eq!(log(2, None, Some(3)).success_evidence(3), Succeeded(2));
        assert_eq!(log(2, None, Some(3)).success_evidence(4), Revoked);
        // A failure a later success superseded: that success came after the failing attempt.
        assert_eq!(log(1, Some(4), None).success_evidence(2), Succeeded(4));
        // A failure filed late, after the success it names: that success's log decides.
        assert_eq!(log(3, Some(1), None).success_evidence(3), SeeSuccessAt(1));
        assert_eq!(log(3, Some(3), None).success_evidence(3), SeeSuccessAt(3));
    }
}
