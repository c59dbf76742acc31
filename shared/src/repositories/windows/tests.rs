use super::super::submission::JobSubmission;
use super::*;
use crate::adapters::memory::{FlakyJobRunner, MemoryJobRunner, MemoryStore};
use crate::domain::granule::GranuleId;
use chrono::Utc;

fn granules() -> Vec<GranuleId> {
    [
        "HLS.S30.T18TYN.2022002T153012.v2.0",
        "HLS.L30.T18TYN.2022001T153012.v2.0",
        "HLS.S30.T18TYN.2021365T153012.v2.0",
    ]
    .iter()
    .map(|g| GranuleId::parse(g).unwrap())
    .collect()
}

fn window() -> WindowClaim {
    WindowClaim::new(None, "inv/a.parquet", 0, 4, granules(), "t", Utc::now())
}

static METRICS: std::sync::LazyLock<crate::metrics::Metrics> =
    std::sync::LazyLock::new(Default::default);

fn windows<'a>(store: &'a MemoryStore, jobs: &'a dyn JobRunner, lease: u64) -> Windows<'a> {
    Windows {
        store,
        jobs,
        bucket: "b",
        claim_prefix: "claims/",
        open_prefix: "open/",
        lease: Duration::from_secs(lease),
        concurrency: 2,
        metrics: &METRICS,
    }
}

fn job_ids(outcome: &WindowOutcome) -> Vec<Option<String>> {
    match outcome {
        WindowOutcome::Worked { jobs: granules, .. } => granules
            .iter()
            .map(|g| g.job_id().map(str::to_owned))
            .collect(),
        WindowOutcome::InFlight { .. } => panic!("in flight"),
    }
}

#[tokio::test]
async fn a_window_is_submitted_once_with_three_puts() {
    let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
    let w = windows(&store, &jobs, 900);
    let first = w.submit(window(), None).await.unwrap();
    assert!(job_ids(&first).iter().all(Option::is_some));
    let again = w.submit(window(), None).await.unwrap();
    assert_eq!(job_ids(&again), job_ids(&first));
    let WindowOutcome::Worked { jobs: granules, .. } = again else {
        unreachable!()
    };
    assert!(granules
        .iter()
        .all(|g| matches!(g, JobSubmission::AlreadySubmitted { .. })));
    assert_eq!(jobs.submitted().len(), 3);
    assert!(jobs.submitted().iter().all(|r| r.job_name.contains("-a1-")));
    let keys: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(
        keys,
        vec![
            "claims/windows/inv/a.parquet/start=000000000000.json".to_owned(),
            "open/windows/inv/a.parquet/start=000000000000.json".to_owned(),
        ]
    );
}

#[tokio::test]
async fn refusals_are_tried_again_and_a_window_left_refused_is_released_at_once() {
    let store = MemoryStore::new();
    let flaky = FlakyJobRunner::refusing(3);
    let out = windows(&store, &flaky, 900)
        .submit(window(), None)
        .await
        .unwrap();
    assert!(job_ids(&out).iter().all(Option::is_some), "{out:?}");
    // Refused past the tries: nothing was created, so the window is free at once.
    let store = MemoryStore::new();
    let refusing = FlakyJobRunner::refusing(u32::MAX);
    let out = windows(&store, &refusing, 900)
        .submit(window(), None)
        .await
        .unwrap();
    assert!(job_ids(&out).iter().all(Option::is_none));
    let next = windows(&store, &refusing.inner, 900)
        .submit(window(), None)
        .await
        .unwrap();
    assert!(job_ids(&next).iter().all(Option::is_some), "{next:?}");
    assert_eq!(refusing.inner.submitted().len(), 3);
}

#[tokio::test]
async fn lost_answers_keep_the_lease_and_the_jobs_are_found_by_name_not_resubmitted() {
    let store = MemoryStore::new();
    let lossy = FlakyJobRunner::losing_answers();
    let out = windows(&store, &lossy, 900)
        .submit(window(), None)
        .await
        .unwrap();
    assert!(job_ids(&out).iter().all(Option::is_none));
    assert_eq!(lossy.inner.submitted().len(), 3, "each submitted once");
    // Inside the lease: left alone.
    let again = windows(&store, &lossy.inner, 900)
        .submit(window(), None)
        .await
        .unwrap();
    assert!(matches!(again, WindowOutcome::InFlight { .. }));
    // After it: taken over, every job found by its name.
    let after = windows(&store, &lossy.inner, 0)
        .submit(window(), None)
        .await
        .unwrap();
    let WindowOutcome::Worked { jobs: granules, .. } = after else {
        panic!("{after:?}")
    };
    assert!(granules
        .iter()
        .all(|g| matches!(g, JobSubmission::Recovered { .. })));
    assert_eq!(lossy.inner.submitted().len(), 3, "never submitted twice");
}

#[tokio::test]
async fn open_windows_of_first_attempts_say_a_granule_is_in_flight_single_jobs_or_arrays() {
    let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
    let w = windows(&store, &jobs, 900);
    let all = granules();
    let array = WindowClaim::new(
        None,
        "inv/a.parquet",
        0,
        2,
        all[..2].to_vec(),
        "t",
        Utc::now(),
    )
    .in_array(true)
    .with_records_at_end(true);
    w.submit(array, None).await.unwrap();
    let single = WindowClaim::new(
        None,
        "inv/b.parquet",
        0,
        1,
        all[2..].to_vec(),
        "t",
        Utc::now(),
    );
    w.submit(single, None).await.unwrap();
    let other = GranuleId::parse("HLS.S30.T18TYN.2021001T153012.v2.0").unwrap();
    let asked = [all[0].clone(), all[2].clone(), other];
    let cache = OpenWindowsRead::default();
    for _ in 0..2 {
        // Read, then answered from the fingerprints kept (a match confirmed by its claim).
        let found = w.in_open_windows(&cache, &asked).await.unwrap();
        let both = [all[0].clone(), all[2].clone()].into_iter().collect();
        assert_eq!(found.in_flight, both);
    }
    assert_eq!(w.open().await.unwrap().windows.len(), 2);
    // The array window closed: nothing of it is in flight, and nothing of it is kept.
    store
        .delete(&window_key("open/", "inv/a.parquet", 0))
        .await
        .unwrap();
    let found = w.in_open_windows(&cache, &asked).await.unwrap();
    assert_eq!(found.in_flight, [all[2].clone()].into_iter().collect());
    assert_eq!(cache.read.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_window_found_is_worked_as_its_claim_says() {
    let (store, jobs) = (MemoryStore::new(), MemoryJobRunner::default());
    let w = windows(&store, &jobs, 900);
    w.submit(window(), None).await.unwrap();
    // A later run reading more rows from the same start gets the first run's window.
    let mut wider = window();
    wider.rows = 10;
    wider
        .granules
        .push(GranuleId::parse("HLS.S30.T18TYN.2021364T153012.v2.0").unwrap());
    let WindowOutcome::Worked {
        claim,
        jobs: granules,
    } = w.submit(wider, None).await.unwrap()
    else {
        panic!()
    };
    assert_eq!((claim.rows, granules.len()), (4, 3));
    assert_eq!(jobs.submitted().len(), 3);
}
