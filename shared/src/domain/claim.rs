//! A claim is the exactly-once guard for submitting jobs: created with If-None-Match before
//! SubmitJob, completed with the job ids after it. A claim without (all) its job ids was left
//! half-done by a run that died; whoever finds it after its lease looks each unrecorded job up by
//! its deterministic name before submitting again.
//!
//! Every submission is one of two shapes of [`JobsClaim`]: a [`Claim`] of one job (a granule's
//! later attempt, an ingest job's processing attempt) or a window claim of the feeder's first
//! attempts (`domain::window`). `repositories::submission` runs the one protocol over either.

use super::campaign::Campaign;
use super::granule::{GranuleId, GranuleProcessingEvent};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who holds a claim and since when (the start of its lease). Flattened into each claim's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Which component claimed it (queue-feeder, requeuer, ...), for the operator.
    pub claimed_by: String,
    pub claimed_at: DateTime<Utc>,
}

impl Lease {
    pub fn new(by: &str, at: DateTime<Utc>) -> Self {
        Self {
            claimed_by: by.to_owned(),
            claimed_at: at,
        }
    }
}

/// A claim over jobs that are submitted at most once, as the submission protocol sees it.
pub trait JobsClaim: Clone + Serialize + DeserializeOwned + Send + Sync {
    fn lease(&self) -> &Lease;
    fn lease_mut(&mut self) -> &mut Lease;

    /// The claim as `by` holds it from `at` (a takeover; the Unix epoch releases it).
    fn reclaimed(mut self, by: &str, at: DateTime<Utc>) -> Self {
        *self.lease_mut() = Lease::new(by, at);
        self
    }
    /// The recorded job id of each job the claim covers, in order (`None`: not recorded).
    fn recorded(&self) -> Vec<Option<String>>;
    /// The claim with `found[i]` recorded for job `i` (a job already recorded is kept).
    fn recording(&self, found: &[Option<String>], now: DateTime<Utc>) -> Self;

    fn is_submitted(&self) -> bool {
        self.recorded().iter().all(Option::is_some)
    }

    /// Whether the claim still waits on the look its submitter makes once it is marked open
    /// ([`crate::repositories::submission::Screen`]): no job of it is submitted before that look
    /// is written back, so a run that takes it over may make the look itself.
    fn screen_pending(&self) -> bool {
        false
    }

    /// The decision a run that finds this claim makes (pure: the claim, the clock, the lease).
    fn on_found(&self, now: DateTime<Utc>, lease: Duration) -> FoundClaim {
        by_lease(self, now, lease)
    }
}

/// [`JobsClaim::on_found`]'s rule: submitted, else in flight while its lease runs, else taken
/// over.
fn by_lease<C: JobsClaim>(claim: &C, now: DateTime<Utc>, lease: Duration) -> FoundClaim {
    if claim.is_submitted() {
        return FoundClaim::Submitted;
    }
    let age = now.signed_duration_since(claim.lease().claimed_at);
    if age.to_std().unwrap_or(Duration::ZERO) < lease {
        FoundClaim::InFlight
    } else {
        FoundClaim::TakeOver
    }
}

/// What an existing claim means for a run that finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundClaim {
    /// Every job is recorded.
    Submitted,
    /// Its owner may be submitting right now (the lease runs): leave it.
    InFlight,
    /// Its owner died (the lease ran out) or released it after a refusal: take it over, look up
    /// the unrecorded jobs by name, submit the ones Batch does not have.
    TakeOver,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub granule_id: GranuleId,
    pub attempt: u32,
    pub job_name: String,
    #[serde(flatten)]
    pub lease: Lease,
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub submitted_at: Option<DateTime<Utc>>,
    /// The campaign whose attempt this is (its job says so too); none: the unnamed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign: Option<Campaign>,
    #[serde(flatten)]
    pub placement: Placement,
    /// Parked by the requeuer for the feeder's next window of retries (`GRANARY_ARRAY_RETRIES`)
    /// instead of submitted: never taken over as a single job. The window that takes it records
    /// its job here (`job_id`, a child `<array>:<i>`); until then its pending marker waits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parked: bool,
}

/// What a granule's attempt is submitted with beyond its name, decided once when it is claimed
/// (a run taking the claim over submits it the same): how many of the granule's earlier
/// attempts ended for capacity (its job carries the count on, `domain::attempt_budget`), and
/// the job queue it goes to (none: the stack's own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spot_ends: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    /// The memory the job asks for, MiB (`domain::memory`); `None`: the job definition's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Claim {
    pub fn new(
        event: &GranuleProcessingEvent,
        campaign: Option<&Campaign>,
        claimed_by: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            granule_id: event.granule_id.clone(),
            attempt: event.attempt,
            job_name: super::job_name::job_name(campaign, &event.granule_id, event.attempt),
            lease: Lease::new(claimed_by, now),
            job_id: None,
            submitted_at: None,
            campaign: campaign.cloned(),
            placement: Placement::default(),
            parked: false,
        }
    }

    /// The claim with its attempt's placement.
    pub fn placed(self, placement: Placement) -> Self {
        Self { placement, ..self }
    }

    /// The claim as the requeuer parks it for a window of retries.
    pub fn parked(self) -> Self {
        Self {
            parked: true,
            ..self
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
            lease: Lease::new(claimed_by, now),
            job_id: None,
            submitted_at: None,
            campaign: None,
            placement: Placement::default(),
            parked: false,
        }
    }
}

impl JobsClaim for Claim {
    fn lease(&self) -> &Lease {
        &self.lease
    }

    /// A parked retry waits for its window of retries however old its lease: only that window
    /// submits it (as an array's child, under the window's name, which a lookup by this
    /// claim's own job name would never find).
    fn on_found(&self, now: DateTime<Utc>, lease: Duration) -> FoundClaim {
        if self.parked && self.job_id.is_none() {
            return FoundClaim::InFlight;
        }
        by_lease(self, now, lease)
    }

    fn lease_mut(&mut self) -> &mut Lease {
        &mut self.lease
    }

    fn recorded(&self) -> Vec<Option<String>> {
        vec![self.job_id.clone()]
    }

    fn recording(&self, found: &[Option<String>], now: DateTime<Utc>) -> Self {
        Self {
            job_id: self
                .job_id
                .clone()
                .or_else(|| found.first().cloned().flatten()),
            submitted_at: Some(now),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::layout::claims::claim_key;

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
        let c = Claim::new(&e, None, "requeuer", Utc::now());
        assert!(!c.is_submitted());
        assert!(c.job_name.contains("-a2-"));
    }

    #[test]
    fn a_found_claim_is_done_in_flight_or_taken_over() {
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 2,
        };
        let lease = Duration::from_secs(900);
        let c = Claim::new(&e, None, "requeuer", Utc::now());
        assert_eq!(c.on_found(c.lease.claimed_at, lease), FoundClaim::InFlight);
        let later = c.lease.claimed_at + chrono::Duration::seconds(901);
        assert_eq!(c.on_found(later, lease), FoundClaim::TakeOver);
        let released = c.clone().reclaimed("t", DateTime::<Utc>::UNIX_EPOCH);
        assert_eq!(
            released.on_found(c.lease.claimed_at, lease),
            FoundClaim::TakeOver
        );
        let done = c.recording(&[Some("j1".into())], later);
        assert_eq!(
            done.on_found(c.lease.claimed_at, lease),
            FoundClaim::Submitted
        );
        // A parked retry is never taken over, however old: its window submits it.
        let parked = c.clone().parked();
        assert_eq!(parked.on_found(later, lease), FoundClaim::InFlight);
        let windowed = parked.recording(&[Some("a:3".into())], later);
        assert_eq!(windowed.on_found(later, lease), FoundClaim::Submitted);
        // A job recorded is kept, whatever a later recording finds.
        assert_eq!(
            done.recording(&[Some("j2".into())], later).job_id,
            Some("j1".into())
        );
    }
}
