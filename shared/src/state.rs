//! Reading and writing granary's state objects with compare-and-swap: the tracker and claims.

use crate::domain::claim::{claim_key, Claim};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::tracker::Tracker;
use crate::ports::{JobRequest, JobRunner, JobRunnerError, ObjectStore, PutCondition, StoreError};
use bytes::Bytes;
use chrono::Utc;
use serde::{de::DeserializeOwned, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{key} is not valid JSON for granary ({why}); fix or remove it by hand")]
    Corrupt { key: String, why: String },
    #[error(transparent)]
    Jobs(#[from] JobRunnerError),
}

/// A value with the ETag it was read at; `etag: None` means it is not stored yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub value: T,
    pub etag: Option<String>,
}

impl<T> Versioned<T> {
    pub fn condition(&self) -> PutCondition {
        match &self.etag {
            Some(etag) => PutCondition::IfMatch(etag.clone()),
            None => PutCondition::IfAbsent,
        }
    }
}

pub async fn read_json<T: DeserializeOwned>(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Option<Versioned<T>>, StateError> {
    let Some(obj) = store.get(key).await? else {
        return Ok(None);
    };
    let value = serde_json::from_slice(&obj.body).map_err(|e| StateError::Corrupt {
        key: key.to_owned(),
        why: e.to_string(),
    })?;
    Ok(Some(Versioned {
        value,
        etag: Some(obj.etag),
    }))
}

pub fn to_json_bytes<T: Serialize>(value: &T) -> Bytes {
    // Serializing our own plain structs cannot fail (no maps with non-string keys, no I/O).
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// The JSON text of one of granary's own messages (see [`to_json_bytes`] on why it cannot fail).
pub fn to_json_string<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Writes `value` under `condition`; Conflict when the condition fails.
pub async fn write_json<T: Serialize>(
    store: &dyn ObjectStore,
    key: &str,
    value: &T,
    condition: PutCondition,
) -> Result<String, StoreError> {
    store.put(key, to_json_bytes(value), condition).await
}

/// The tracker: created with If-None-Match, advanced with If-Match.
pub async fn load_tracker(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Versioned<Tracker>, StateError> {
    Ok(read_json(store, key).await?.unwrap_or(Versioned {
        value: Tracker::default(),
        etag: None,
    }))
}

/// Saves the tracker if nobody changed it since it was read. `StoreError::Conflict` otherwise.
pub async fn save_tracker(
    store: &dyn ObjectStore,
    key: &str,
    tracker: &mut Versioned<Tracker>,
) -> Result<(), StoreError> {
    tracker.value.updated_at = Some(Utc::now());
    let etag = write_json(store, key, &tracker.value, tracker.condition()).await?;
    tracker.etag = Some(etag);
    Ok(())
}

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

/// Submits (granule, attempt) to Batch at most once, however often and concurrently it is asked.
///
/// The claim object is created with If-None-Match before SubmitJob and completed with the job id
/// after it. A claim without a job id is left alone while its lease runs (its owner may be inside
/// SubmitJob), then taken over with If-Match — so only one taker — and the job is looked up by its
/// deterministic name before anything is submitted again.
pub async fn submit_once(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    claim_prefix: &str,
    open_prefix: &str,
    lease: Duration,
    event: &GranuleProcessingEvent,
    claimed_by: &str,
) -> Result<SubmitOutcome, StateError> {
    let key = claim_key(claim_prefix, event);
    let open = claim_key(open_prefix, event);
    let claim = Claim::new(event, claimed_by, Utc::now());
    match write_json(store, &key, &claim, PutCondition::IfAbsent).await {
        Ok(etag) => return submit_claimed(store, jobs, &key, &open, claim, etag).await,
        Err(StoreError::Conflict { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // Someone claimed it before. A handful of rounds covers every interleaving of one other writer.
    for _ in 0..4 {
        let Some(Versioned {
            value: existing,
            etag,
        }) = read_json::<Claim>(store, &key).await?
        else {
            // Claims are never deleted by granary; if an operator removed it, claim afresh.
            return Box::pin(submit_once(
                store,
                jobs,
                claim_prefix,
                open_prefix,
                lease,
                event,
                claimed_by,
            ))
            .await;
        };
        let etag = etag.unwrap_or_default();
        if let Some(job_id) = existing.job_id.clone() {
            return Ok(SubmitOutcome::AlreadySubmitted { job_id });
        }
        let age = Utc::now().signed_duration_since(existing.claimed_at);
        if age.to_std().unwrap_or(Duration::ZERO) < lease {
            return Ok(SubmitOutcome::InFlight);
        }
        if let Some(job) = jobs.find_by_name(&existing.job_name).await? {
            mark_open(store, &open).await?;
            let recorded = Claim {
                job_id: Some(job.job_id.clone()),
                submitted_at: Some(Utc::now()),
                ..existing
            };
            match write_json(store, &key, &recorded, PutCondition::IfMatch(etag)).await {
                Ok(_) => return Ok(SubmitOutcome::Recovered { job_id: job.job_id }),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let takeover = Claim {
            claimed_at: Utc::now(),
            claimed_by: claimed_by.to_owned(),
            ..existing
        };
        match write_json(store, &key, &takeover, PutCondition::IfMatch(etag)).await {
            Ok(etag) => return submit_claimed(store, jobs, &key, &open, takeover, etag).await,
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(SubmitOutcome::InFlight)
}

/// Puts the attempt in the open-claims index, which the reconciler reads: written before SubmitJob,
/// so every job granary may have created is indexed; the monitor removes it once the attempt's
/// end is logged and routed. Overwriting is harmless (an empty marker).
async fn mark_open(store: &dyn ObjectStore, open_key: &str) -> Result<(), StateError> {
    store
        .put(open_key, bytes::Bytes::new(), PutCondition::Overwrite)
        .await?;
    Ok(())
}

async fn submit_claimed(
    store: &dyn ObjectStore,
    jobs: &dyn JobRunner,
    key: &str,
    open_key: &str,
    claim: Claim,
    etag: String,
) -> Result<SubmitOutcome, StateError> {
    mark_open(store, open_key).await?;
    let request = JobRequest {
        job_name: claim.job_name.clone(),
        environment: BTreeMap::from([
            ("GRANULE_ID".to_owned(), claim.granule_id.to_string()),
            ("ATTEMPT".to_owned(), claim.attempt.to_string()),
        ]),
        parameters: BTreeMap::from([
            ("granule_id".to_owned(), claim.granule_id.to_string()),
            ("attempt".to_owned(), claim.attempt.to_string()),
        ]),
    };
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
        Err(StoreError::Conflict { .. }) => {
            tracing::warn!(
                claim = key,
                job_id = job.job_id,
                "claim changed while submitting; the job is findable by name"
            );
            Ok(SubmitOutcome::Submitted { job_id: job.job_id })
        }
        Err(e) => Err(e.into()),
    }
}

/// The hold on the feeder, if one is placed.
pub async fn read_hold(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Option<crate::domain::hold::Hold>, StateError> {
    Ok(read_json(store, key).await?.map(|v| v.value))
}

/// Places a hold; `Ok(Some(existing))` when one is already there (it is left as it is).
pub async fn place_hold(
    store: &dyn ObjectStore,
    key: &str,
    hold: &crate::domain::hold::Hold,
) -> Result<Option<crate::domain::hold::Hold>, StateError> {
    match write_json(store, key, hold, PutCondition::IfAbsent).await {
        Ok(_) => Ok(None),
        Err(StoreError::Conflict { .. }) => read_hold(store, key).await,
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryJobRunner, MemoryStore};
    use crate::domain::granule::GranuleId;

    fn event() -> GranuleProcessingEvent {
        GranuleProcessingEvent::first(
            GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap(),
        )
    }

    #[tokio::test]
    async fn tracker_create_advance_conflict() {
        let store = MemoryStore::new();
        let mut t = load_tracker(&store, "t.json").await.unwrap();
        assert_eq!(t.etag, None);
        t.value.add_inventories(["a".to_owned()]);
        save_tracker(&store, "t.json", &mut t).await.unwrap();
        // a second creator loses
        let mut other = Versioned {
            value: Tracker::default(),
            etag: None,
        };
        assert!(matches!(
            save_tracker(&store, "t.json", &mut other).await,
            Err(StoreError::Conflict { .. })
        ));
        // a reader at the current etag advances; one holding the old etag then loses
        let mut stale = load_tracker(&store, "t.json").await.unwrap();
        let mut fresh = stale.clone();
        fresh.value.set_total_rows("a", 10).unwrap();
        fresh.value.advance_to("a", 5).unwrap();
        save_tracker(&store, "t.json", &mut fresh).await.unwrap();
        stale.value.set_total_rows("a", 10).unwrap();
        stale.value.advance_to("a", 7).unwrap();
        assert!(matches!(
            save_tracker(&store, "t.json", &mut stale).await,
            Err(StoreError::Conflict { .. })
        ));
        assert_eq!(
            load_tracker(&store, "t.json")
                .await
                .unwrap()
                .value
                .inventories[0]
                .rows_submitted,
            5
        );
    }

    #[tokio::test]
    async fn corrupt_tracker_is_an_error() {
        let store = MemoryStore::new();
        store
            .put(
                "t.json",
                Bytes::from_static(b"{oops"),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        assert!(matches!(
            load_tracker(&store, "t.json").await,
            Err(StateError::Corrupt { .. })
        ));
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

    /// Batch that creates the job and then loses the answer (or refuses the call outright).
    struct LostAnswer {
        inner: MemoryJobRunner,
        created_then_lost: bool,
    }

    #[async_trait::async_trait]
    impl JobRunner for LostAnswer {
        async fn submit(
            &self,
            request: JobRequest,
        ) -> Result<crate::ports::JobSummary, JobRunnerError> {
            if self.created_then_lost {
                self.inner.submit(request).await?;
                Err(JobRunnerError::ambiguous("read timeout"))
            } else {
                Err(JobRunnerError::refused("TooManyRequestsException"))
            }
        }
        async fn count_active(&self, n: u64) -> Result<crate::ports::ActiveJobs, JobRunnerError> {
            self.inner.count_active(n).await
        }
        async fn find_by_name(
            &self,
            name: &str,
        ) -> Result<Option<crate::ports::JobSummary>, JobRunnerError> {
            self.inner.find_by_name(name).await
        }
        async fn describe(
            &self,
            id: &str,
        ) -> Result<Option<crate::ports::JobDescription>, JobRunnerError> {
            self.inner.describe(id).await
        }
    }

    #[tokio::test]
    async fn a_lost_submit_answer_keeps_the_lease_and_is_found_by_name_not_resubmitted() {
        let store = MemoryStore::new();
        let lost = LostAnswer {
            inner: MemoryJobRunner::default(),
            created_then_lost: true,
        };
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
        let refused = LostAnswer {
            inner: MemoryJobRunner::default(),
            created_then_lost: false,
        };
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
