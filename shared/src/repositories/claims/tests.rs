use super::*;
use chrono::Utc;

fn at() -> AttemptAt<'static> {
    AttemptAt {
        claim_prefix: "c/",
        open_prefix: "open/",
        campaign: None,
        placement: &Placement {
            spot_ends: 0,
            job_queue: None,
            memory_mib: None,
        },
    }
}
use crate::adapters::memory::{FlakyJobRunner, MemoryJobRunner, MemoryStore};
use crate::domain::granule::GranuleId;
use crate::ports::{JobRequest, PutCondition};
use crate::repositories::json::write_json;
use std::collections::BTreeMap;

fn event() -> GranuleProcessingEvent {
    GranuleProcessingEvent::first(GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap())
}

#[tokio::test]
async fn submits_once_however_often_asked() {
    let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
    let lease = Duration::from_secs(900);
    let first = submit_once(
        &store,
        &jobs,
        &Default::default(),
        at(),
        lease,
        &event(),
        "t",
    )
    .await
    .unwrap();
    assert!(matches!(first, SubmitOutcome::Submitted { .. }));
    for _ in 0..3 {
        let again = submit_once(
            &store,
            &jobs,
            &Default::default(),
            at(),
            lease,
            &event(),
            "t",
        )
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
    assert!(
        submit_once(&store, &lost, &Default::default(), at(), long, &e, "t")
            .await
            .is_err()
    );
    // A redelivery inside the lease waits.
    let again = submit_once(
        &store,
        &lost.inner,
        &Default::default(),
        at(),
        long,
        &e,
        "t",
    )
    .await;
    assert_eq!(again.unwrap(), SubmitOutcome::InFlight);
    // After the lease, the job Batch did create is found by its name and recorded.
    let after = submit_once(
        &store,
        &lost.inner,
        &Default::default(),
        at(),
        Duration::ZERO,
        &e,
        "t",
    )
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
    assert!(
        submit_once(&store, &refused, &Default::default(), at(), long, &e, "t")
            .await
            .is_err()
    );
    let next = submit_once(
        &store,
        &refused.inner,
        &Default::default(),
        at(),
        long,
        &e,
        "t",
    )
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
    let claim = Claim::new(&e, None, "dead", Utc::now());
    write_json(&store, &claim_key("c/", &e), &claim, PutCondition::IfAbsent)
        .await
        .unwrap();
    let fresh = submit_once(
        &store,
        &jobs,
        &Default::default(),
        at(),
        Duration::from_secs(900),
        &e,
        "t",
    )
    .await
    .unwrap();
    assert_eq!(fresh, SubmitOutcome::InFlight);
    assert!(jobs.submitted().is_empty());
    let taken = submit_once(
        &store,
        &jobs,
        &Default::default(),
        at(),
        Duration::ZERO,
        &e,
        "t",
    )
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
    let claim = Claim::new(&e, None, "dead", Utc::now());
    write_json(&store, &claim_key("c/", &e), &claim, PutCondition::IfAbsent)
        .await
        .unwrap();
    let job = jobs
        .submit(JobRequest {
            job_name: claim.job_name.clone(),
            environment: BTreeMap::new(),
            parameters: BTreeMap::new(),
            array_size: None,
            queue: None,
            memory_mib: None,
        })
        .await
        .unwrap();
    let out = submit_once(
        &store,
        &jobs,
        &Default::default(),
        at(),
        Duration::ZERO,
        &e,
        "t",
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        SubmitOutcome::Recovered {
            job_id: job.job_id.clone()
        }
    );
    assert_eq!(jobs.submitted().len(), 1);
    let out = submit_once(
        &store,
        &jobs,
        &Default::default(),
        at(),
        Duration::ZERO,
        &e,
        "t",
    )
    .await
    .unwrap();
    assert_eq!(out, SubmitOutcome::AlreadySubmitted { job_id: job.job_id });
}
