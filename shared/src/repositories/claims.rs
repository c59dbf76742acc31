//! Claims of one job — a granule's later attempt, an ingest job's processing attempt — on the
//! one submission protocol (`repositories::submission`).

use super::json::RepositoryError;
use super::json::{
    change_record, read_json, read_json_retrying, write_json_retrying, Changed, RecordAt,
    RecordError, Versioned,
};
use super::submission::{JobSubmission, Submission, Submitted, Submitter};
use crate::contracts::job::job_request;
use crate::domain::campaign::Campaign;
use crate::domain::claim::{Claim, Placement};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::{claim_key, parked_prefix};
use crate::domain::machine::Refused;
use crate::ports::{JobRunner, JobRunnerError, ObjectMeta, ObjectStore, PutCondition, StoreError};
use std::time::Duration;

/// What submitting one job did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// We submitted the job now.
    Submitted { job_id: String },
    /// A job was already submitted and recorded for this (granule, attempt).
    AlreadySubmitted { job_id: String },
    /// A half-done claim whose job existed in Batch: recorded it, submitted nothing.
    Recovered { job_id: String },
    /// Someone else holds a fresh claim and may be submitting right now: try again later.
    InFlight,
}

/// Where an attempt's claim lives and whose attempt it is.
#[derive(Debug, Clone, Copy)]
pub struct AttemptAt<'a> {
    /// The claim goes under this prefix.
    pub claim_prefix: &'a str,
    /// Its open marker under this one.
    pub open_prefix: &'a str,
    /// The campaign the attempt is of (its job's name and parameters say so).
    pub campaign: Option<&'a Campaign>,
    /// Its job's queue and the Spot ends before it, kept in the claim.
    pub placement: &'a Placement,
}

/// Submits (granule, attempt) to Batch at most once, however often and concurrently it is asked,
/// with its claim and open marker where `at` says.
pub async fn submit_once(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    metrics: &crate::metrics::Metrics,
    at: AttemptAt<'_>,
    lease: Duration,
    event: &GranuleProcessingEvent,
    claimed_by: &str,
) -> Result<SubmitOutcome, RepositoryError> {
    let AttemptAt {
        claim_prefix,
        open_prefix,
        campaign,
        placement,
    } = at;
    // The claim found is submitted as it says (its placement was decided when it was made).
    let request = |c: &Claim| {
        let request = job_request(&c.job_name, c.campaign.as_ref(), &c.granule_id, c.attempt);
        vec![crate::contracts::job::placed(request, &c.placement)]
    };
    let submission = Submission {
        claim_key: claim_key(claim_prefix, event),
        open_key: Some(claim_key(open_prefix, event)),
        claim: Claim::new(event, campaign, claimed_by, crate::clock::now())
            .placed(placement.clone()),
        requests: &request,
        screen: None,
    };
    submit_claim_once(store, jobs, metrics, lease, submission).await
}

/// What parking a retry found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkOutcome {
    /// Parked for the feeder's next window of retries (now, or again: its marker rewritten,
    /// which the window reading its claim tells from a fresh one).
    Parked,
    /// A window of retries took it already: its job.
    Windowed { job_id: String },
    /// The attempt has an ordinary claim (a single job, submitted or being submitted).
    Claimed,
}

/// Parks (granule, attempt) for the feeder's next window of retries, at most once: its claim,
/// created If-None-Match (the same guard a single job's submission has), marked parked; then
/// its pending marker, which the feeder lists. A crash between the two leaves a parked claim
/// without a marker: the retry message comes back, finds the claim parked and not taken, and
/// writes the marker. A marker written again after a window took the claim is stale: the
/// window that lists it reads the claim, finds its job, and removes it.
pub async fn park_once(
    store: &dyn ObjectStore,
    at: AttemptAt<'_>,
    event: &GranuleProcessingEvent,
    claimed_by: &str,
) -> Result<ParkOutcome, RepositoryError> {
    let key = claim_key(at.claim_prefix, event);
    let claim = Claim::new(event, at.campaign, claimed_by, crate::clock::now())
        .placed(at.placement.clone())
        .parked();
    match write_json_retrying(
        store,
        &key,
        &claim,
        PutCondition::IfAbsent,
        "parking a retry",
    )
    .await
    {
        Ok(_) => {}
        Err(e) if e.is_conflict() => {
            match read_json_retrying::<Claim>(store, &key, "reading a retry's claim").await? {
                Some(found) if !found.value.parked => return Ok(ParkOutcome::Claimed),
                Some(found) => {
                    if let Some(job_id) = found.value.job_id {
                        return Ok(ParkOutcome::Windowed { job_id });
                    }
                }
                // Made and gone since (an operator's cleanup): parked again below.
                None => {
                    write_json_retrying(
                        store,
                        &key,
                        &claim,
                        PutCondition::IfAbsent,
                        "parking a retry",
                    )
                    .await?;
                }
            }
        }
        Err(e) => return Err(e),
    }
    let marker = crate::domain::layout::claims::parked_key(at.claim_prefix, event);
    write_json_retrying(
        store,
        &marker,
        &serde_json::json!({ "parked_at": crate::clock::now() }),
        PutCondition::Overwrite,
        "marking a parked retry",
    )
    .await?;
    Ok(ParkOutcome::Parked)
}

/// Submits one job of any workflow to Batch at most once (its claim says which; `request` is
/// the job). A job not submitted this run is an error: the caller's next delivery or tick asks
/// again.
pub async fn submit_claim_once(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    metrics: &crate::metrics::Metrics,
    lease: Duration,
    submission: Submission<'_, Claim>,
) -> Result<SubmitOutcome, RepositoryError> {
    let claimed_by = submission.claim.lease.claimed_by.clone();
    let submitter = Submitter {
        store,
        jobs,
        lease,
        concurrency: 1,
        claimed_by: &claimed_by,
        metrics,
    };
    let mut done = match submitter.submit(submission).await? {
        Submitted::InFlight { .. } => return Ok(SubmitOutcome::InFlight),
        Submitted::Worked { jobs, .. } => jobs,
    };
    match done.pop() {
        Some(JobSubmission::Submitted { job_id }) => Ok(SubmitOutcome::Submitted { job_id }),
        Some(JobSubmission::AlreadySubmitted { job_id }) => {
            Ok(SubmitOutcome::AlreadySubmitted { job_id })
        }
        Some(JobSubmission::Recovered { job_id }) => Ok(SubmitOutcome::Recovered { job_id }),
        Some(JobSubmission::NotSubmitted { error, answer_lost }) => {
            Err(RepositoryError::Jobs(JobRunnerError {
                message: error,
                may_have_taken_effect: answer_lost,
                source: None,
            }))
        }
        None => Err(RepositoryError::Jobs(JobRunnerError::refused(
            "a claim of one job named no job",
        ))),
    }
}

/// Claims of one job and the indexes over them: the open-claims index the reconciler reads
/// and the parked retries' pending markers the feeder lists.
#[derive(Clone, Copy)]
pub struct Claims<'a> {
    pub store: &'a dyn ObjectStore,
    pub claim_prefix: &'a str,
    pub open_prefix: &'a str,
}

impl Claims<'_> {
    /// The claim of `attempt`, with its ETag (`None`: never claimed, or cleaned up).
    pub async fn claim(
        &self,
        attempt: &GranuleProcessingEvent,
    ) -> Result<Option<Versioned<Claim>>, RepositoryError> {
        read_json(self.store, &claim_key(self.claim_prefix, attempt)).await
    }

    /// [`Claims::claim`], read again while refused (`what` names the read in its error).
    pub async fn claim_retrying(
        &self,
        attempt: &GranuleProcessingEvent,
        what: &'static str,
    ) -> Result<Option<Claim>, RepositoryError> {
        let key = claim_key(self.claim_prefix, attempt);
        Ok(read_json_retrying::<Claim>(self.store, &key, what)
            .await?
            .map(|c| c.value))
    }

    /// Changes `attempt`'s claim as `decide` says, on the one record protocol
    /// (`json::change_record`, retried while refused): `what` names the claim in errors,
    /// `doing` the change.
    pub async fn change_claim<F>(
        &self,
        attempt: &GranuleProcessingEvent,
        (what, doing): (&'static str, &'static str),
        decide: F,
    ) -> Result<Changed<Claim>, RecordError>
    where
        F: Fn(&Claim) -> Result<Option<Claim>, Refused>,
    {
        let key = claim_key(self.claim_prefix, attempt);
        let id = format!("{} (attempt {})", attempt.granule_id, attempt.attempt);
        let at = RecordAt {
            key: &key,
            what,
            id: &id,
        };
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            doing,
            || change_record(self.store, at, &decide, &()),
            RecordError::is_transient,
        )
        .await
    }

    /// Every marker of the open-claims index (one LIST of the open prefix): a requeued
    /// attempt's and a window's alike.
    pub async fn open_markers(self) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(self.open_prefix).await
    }

    /// Takes `granule`'s attempt out of the open-claims index (its marker deleted, retried
    /// while refused).
    pub async fn close_open_claim(
        self,
        granule: &GranuleProcessingEvent,
    ) -> Result<(), StoreError> {
        let marker = claim_key(self.open_prefix, granule);
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "removing an open-claims marker",
            || self.store.delete(&marker),
            StoreError::is_transient,
        )
        .await
    }

    /// Marks `granule`'s attempt open again (an empty marker): a claim taken over between the
    /// reconciler's look and its delete of the marker.
    pub async fn reopen_claim(self, granule: &GranuleProcessingEvent) -> Result<(), StoreError> {
        let marker = claim_key(self.open_prefix, granule);
        self.store
            .put(&marker, bytes::Bytes::new(), PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    /// The pending markers of the retries the requeuer parked (one LIST of the parked prefix,
    /// retried while refused).
    pub async fn parked_markers(self) -> Result<Vec<ObjectMeta>, StoreError> {
        let prefix = parked_prefix(self.claim_prefix);
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "listing the parked retries",
            || self.store.list(&prefix),
            StoreError::is_transient,
        )
        .await
    }

    /// Removes a parked retry's pending marker at `key` (retried while refused).
    pub async fn remove_parked_marker(self, key: &str) -> Result<(), StoreError> {
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "removing a parked retry's marker",
            || self.store.delete(key),
            StoreError::is_transient,
        )
        .await
    }
}

#[cfg(test)]
mod tests;
