//! Exactly-once submission: the claim protocol over the object store and the job runner.

use super::json::{read_json, write_json, RepositoryError, Versioned};
use crate::contracts::job::job_request;
use crate::domain::claim::{claim_key, Claim};
use crate::domain::granule::GranuleProcessingEvent;
use crate::ports::{JobRequest, JobRunner, ObjectStore, PutCondition};
use chrono::Utc;
use std::time::Duration;

/// What `submit_once` did for one (granule, attempt).
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

/// One unit of work to submit at most once: its claim, where the claim lives, the open-claims
/// marker the reconciler reads (none for work another loop watches, such as an ingest job's
/// processing, which its own tick describes), and the job it asks Batch for.
#[derive(Debug, Clone)]
pub struct Submission {
    pub claim_key: String,
    pub open_key: Option<String>,
    pub claim: Claim,
    pub request: JobRequest,
}

/// Submits (granule, attempt) to Batch at most once, however often and concurrently it is asked.
/// See [`submit_claim_once`].
pub async fn submit_once(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    claim_prefix: &str,
    open_prefix: &str,
    lease: Duration,
    event: &GranuleProcessingEvent,
    claimed_by: &str,
) -> Result<SubmitOutcome, RepositoryError> {
    let claim = Claim::new(event, claimed_by, Utc::now());
    let request = job_request(&claim.job_name, &claim.granule_id, claim.attempt);
    let submission = Submission {
        claim_key: claim_key(claim_prefix, event),
        open_key: Some(claim_key(open_prefix, event)),
        claim,
        request,
    };
    submit_claim_once(store, jobs, lease, &submission).await
}

/// Submits one unit of work to Batch at most once, however often and concurrently it is asked:
/// the one submission protocol of every workflow.
///
/// The claim object is created with If-None-Match before SubmitJob and completed with the job id
/// after it. A claim without a job id is left alone while its lease runs (its owner may be inside
/// SubmitJob), then taken over with If-Match — so only one taker — and the job is looked up by its
/// deterministic name before anything is submitted again.
pub async fn submit_claim_once(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    lease: Duration,
    submission: &Submission,
) -> Result<SubmitOutcome, RepositoryError> {
    let key = &submission.claim_key;
    let open = submission.open_key.as_deref();
    match write_json(store, key, &submission.claim, PutCondition::IfAbsent).await {
        Ok(etag) => {
            return submit_claimed(store, jobs, submission, submission.claim.clone(), etag).await
        }
        Err(e) if e.is_conflict() => {}
        Err(e) => return Err(e),
    }
    // Someone claimed it before. A handful of rounds covers every interleaving of one other writer.
    for _ in 0..4 {
        let Some(Versioned {
            value: existing,
            etag,
        }) = read_json::<Claim>(store, key).await?
        else {
            // Claims are never deleted by granary; if an operator removed it, claim afresh.
            return Box::pin(submit_claim_once(store, jobs, lease, submission)).await;
        };
        let etag = etag.unwrap_or_default();
        if let Some(job_id) = existing.job_id.clone() {
            return Ok(SubmitOutcome::AlreadySubmitted { job_id });
        }
        let age = Utc::now().signed_duration_since(existing.claimed_at);
        if age.to_std().unwrap_or(Duration::ZERO) < lease
            && !crate::mutants::on("claim-takeover-within-lease")
        {
            return Ok(SubmitOutcome::InFlight);
        }
        if let Some(job) = jobs.find_by_name(&existing.job_name).await? {
            if let Some(open) = open {
                mark_open(store, open).await?;
            }
            let recorded = Claim {
                job_id: Some(job.job_id.clone()),
                submitted_at: Some(Utc::now()),
                ..existing
            };
            match write_json(store, key, &recorded, PutCondition::IfMatch(etag)).await {
                Ok(_) => return Ok(SubmitOutcome::Recovered { job_id: job.job_id }),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        let takeover = Claim {
            claimed_at: Utc::now(),
            claimed_by: submission.claim.claimed_by.clone(),
            ..existing
        };
        match write_json(store, key, &takeover, PutCondition::IfMatch(etag)).await {
            Ok(etag) => return submit_claimed(store, jobs, submission, takeover, etag).await,
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(SubmitOutcome::InFlight)
}

/// Puts the attempt in the open-claims index, which the reconciler reads: written before SubmitJob,
/// so every job granary may have created is indexed; the monitor removes it once the attempt's
/// end is logged and routed. Overwriting is harmless (an empty marker).
pub(crate) async fn mark_open(
    store: &dyn ObjectStore,
    open_key: &str,
) -> Result<(), RepositoryError> {
    store
        .put(open_key, bytes::Bytes::new(), PutCondition::Overwrite)
        .await?;
    Ok(())
}

async fn submit_claimed(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    submission: &Submission,
    claim: Claim,
    etag: String,
) -> Result<SubmitOutcome, RepositoryError> {
    let key = submission.claim_key.as_str();
    if let Some(open) = &submission.open_key {
        mark_open(store, open).await?;
    }
    let request = submission.request.clone();
    let job = match jobs.submit(request).await {
        Ok(job) => job,
        Err(e) if !e.may_have_taken_effect => {
            // Refused (4xx, throttled) or never sent: no job exists, so the claim may be taken
            // over at once by the next delivery.
            let released = Claim {
                claimed_at: chrono::DateTime::<Utc>::UNIX_EPOCH,
                ..claim
            };
            if let Err(release) =
                write_json(store, key, &released, PutCondition::IfMatch(etag)).await
            {
                tracing::warn!(claim = key, error = %release, "claim not released; it waits for its lease");
            }
            return Err(e.into());
        }
        Err(e) => {
            // The answer was lost: Batch may have created the job. The claim keeps its lease, and
            // whoever takes it over afterwards looks the job up by name before submitting.
            tracing::warn!(claim = key, job_name = claim.job_name, error = %e, "SubmitJob's outcome is unknown; the claim keeps its lease");
            return Err(e.into());
        }
    };
    let recorded = Claim {
        job_id: Some(job.job_id.clone()),
        submitted_at: Some(Utc::now()),
        ..claim
    };
    match write_json(store, key, &recorded, PutCondition::IfMatch(etag)).await {
        Ok(_) => Ok(SubmitOutcome::Submitted { job_id: job.job_id }),
        // Only a taker after the lease could have changed it: it will find our job by name.
        Err(e) if e.is_conflict() => {
            tracing::warn!(
                claim = key,
                job_id = job.job_id,
                "claim changed while submitting; the job is findable by name"
            );
            Ok(SubmitOutcome::Submitted { job_id: job.job_id })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{FlakyJobRunner, MemoryJobRunner, MemoryStore};
    use crate::domain::granule::GranuleId;
    use crate::ports::JobRequest;
    use std::collections::BTreeMap;

    fn event() -> GranuleProcessingEvent {
        GranuleProcessingEvent::first(
            GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap(),
        )
    }

    #[tokio::test]
    async fn submits_once_however_often_asked() {
        let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
        let lease = Duration::from_secs(900);
        let first = submit_once(&store, &jobs, "c/", "open/", lease, &event(), "t")
            .await
            .unwrap();
        assert!(matches!(first, SubmitOutcome::Submitted { .. }));
        for _ in 0..3 {
            let again = submit_once(&store, &jobs, "c/", "open/", lease, &event(), "t")
                .await
                .unwrap();
            assert!(matches!(again, SubmitOutcome::AlreadySubmitted { .. }));
        }
        assert_eq!(jobs.submitted().len(), 1);
        let env = &jobs.submitted()[0].environment;
        assert_eq!(env["GRANULE_ID"], "HLS.S30.T01GBH.2022226T214921.v2.0");
        assert_eq!(env["ATTEMPT"], "1");
    }

    #[tokio::test]
    async fn a_lost_submit_answer_keeps_the_lease_and_is_found_by_name_not_resubmitted() {
        let store = MemoryStore::new();
        let lost = FlakyJobRunner::losing_answers();
        let e = event();
        let long = Duration::from_secs(900);
        assert!(submit_once(&store, &lost, "c/", "open/", long, &e, "t")
            .await
            .is_err());
        // A redelivery inside the lease waits.
        let again = submit_once(&store, &lost.inner, "c/", "open/", long, &e, "t").await;
        assert_eq!(again.unwrap(), SubmitOutcome::InFlight);
        // After the lease, the job Batch did create is found by its name and recorded.
        let after = submit_once(&store, &lost.inner, "c/", "open/", Duration::ZERO, &e, "t")
            .await
            .unwrap();
        assert!(
            matches!(after, SubmitOutcome::Recovered { .. }),
            "{after:?}"
        );
        assert_eq!(lost.inner.submitted().len(), 1, "never submitted twice");
    }

    #[tokio::test]
    async fn a_refused_submit_releases_the_claim_at_once() {
        let store = MemoryStore::new();
        let refused = FlakyJobRunner::refusing(u32::MAX);
        let e = event();
        let long = Duration::from_secs(900);
        assert!(submit_once(&store, &refused, "c/", "open/", long, &e, "t")
            .await
            .is_err());
        let next = submit_once(&store, &refused.inner, "c/", "open/", long, &e, "t")
            .await
            .unwrap();
        assert!(matches!(next, SubmitOutcome::Submitted { .. }), "{next:?}");
        assert_eq!(refused.inner.submitted().len(), 1);
    }

    #[tokio::test]
    async fn half_done_claims_wait_for_the_lease_then_recover() {
        let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
        let e = event();
        // A claim made by a run that died before SubmitJob.
        let claim = Claim::new(&e, "dead", Utc::now());
        write_json(&store, &claim_key("c/", &e), &claim, PutCondition::IfAbsent)
            .await
            .unwrap();
        let fresh = submit_once(
            &store,
            &jobs,
            "c/",
            "open/",
            Duration::from_secs(900),
            &e,
            "t",
        )
        .await
        .unwrap();
        assert_eq!(fresh, SubmitOutcome::InFlight);
        assert!(jobs.submitted().is_empty());
        let taken = submit_once(&store, &jobs, "c/", "open/", Duration::ZERO, &e, "t")
            .await
            .unwrap();
        assert!(matches!(taken, SubmitOutcome::Submitted { .. }));
        assert_eq!(jobs.submitted().len(), 1);
    }

    #[tokio::test]
    async fn claim_whose_job_exists_is_recovered_not_resubmitted() {
        let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
        let e = event();
        // A run that died after SubmitJob but before recording the job id.
        let claim = Claim::new(&e, "dead", Utc::now());
        write_json(&store, &claim_key("c/", &e), &claim, PutCondition::IfAbsent)
            .await
            .unwrap();
        let job = jobs
            .submit(JobRequest {
                job_name: claim.job_name.clone(),
                environment: BTreeMap::new(),
                parameters: BTreeMap::new(),
            })
            .await
            .unwrap();
        let out = submit_once(&store, &jobs, "c/", "open/", Duration::ZERO, &e, "t")
            .await
            .unwrap();
        assert_eq!(
            out,
            SubmitOutcome::Recovered {
                job_id: job.job_id.clone()
            }
        );
        assert_eq!(jobs.submitted().len(), 1);
        let out = submit_once(&store, &jobs, "c/", "open/", Duration::ZERO, &e, "t")
            .await
            .unwrap();
        assert_eq!(out, SubmitOutcome::AlreadySubmitted { job_id: job.job_id });
    }
}
