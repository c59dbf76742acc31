use super::*;
use std::collections::BTreeMap;

fn request(name: &str) -> JobRequest {
    JobRequest {
        job_name: name.into(),
        environment: BTreeMap::new(),
        parameters: BTreeMap::new(),
        array_size: None,
        queue: None,
        memory_mib: None,
    }
}

#[tokio::test]
async fn counting_says_how_long_the_oldest_runnable_job_has_waited() {
    let jobs = MemoryJobRunner::new(JobStatus::Runnable);
    let before = chrono::Utc::now().timestamp_millis();
    jobs.submit(request("a")).await.unwrap();
    jobs.submit(request("b")).await.unwrap();
    let active = jobs.count_active(10).await.unwrap();
    assert_eq!(active.by_status.get("RUNNABLE"), Some(&2));
    let oldest = active.oldest_runnable_created_ms.unwrap();
    assert!(oldest >= before && oldest <= chrono::Utc::now().timestamp_millis());
    let running = MemoryJobRunner::new(JobStatus::Running);
    running.submit(request("c")).await.unwrap();
    assert_eq!(
        running
            .count_active(10)
            .await
            .unwrap()
            .oldest_runnable_created_ms,
        None,
        "nothing waits in RUNNABLE"
    );
}

#[tokio::test]
async fn a_lagging_listing_hides_new_jobs_from_list_jobs_until_time_passes() {
    let batch = MemoryJobRunner::new(JobStatus::Running).listing_lags();
    let job = batch.submit(request("g-a1")).await.unwrap();
    // ListJobs (by name, and counting active jobs) does not show it yet; DescribeJobs does.
    assert_eq!(batch.find_by_name("g-a1").await.unwrap(), None);
    assert_eq!(batch.count_active(10).await.unwrap().total, 0);
    assert!(batch.describe(&job.job_id).await.unwrap().is_some());
    assert!(batch.catch_up_listing());
    assert_eq!(batch.find_by_name("g-a1").await.unwrap(), Some(job));
    assert_eq!(batch.count_active(10).await.unwrap().total, 1);
    assert!(!batch.catch_up_listing());
}
