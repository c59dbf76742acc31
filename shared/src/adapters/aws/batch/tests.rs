use super::*;
use aws_sdk_batch::types::{ArrayPropertiesSummary, JobSummary as SdkSummary};

fn parent(summary: &[(&str, i32)]) -> SdkSummary {
    let mut array = ArrayPropertiesSummary::builder().size(100);
    for (k, v) in summary {
        array = array.status_summary(*k, *v);
    }
    SdkSummary::builder()
        .job_id("p")
        .job_name("w")
        .array_properties(array.build())
        .build()
}

#[test]
fn an_array_parent_counts_as_its_unfinished_children_by_their_status() {
    let single = SdkSummary::builder().job_id("j").job_name("g").build();
    assert_eq!(
        jobs_counted(&single, JobStatus::Runnable),
        vec![("RUNNABLE".to_owned(), 1)]
    );
    let p = parent(&[
        ("SUCCEEDED", 60),
        ("FAILED", 5),
        ("RUNNING", 30),
        ("RUNNABLE", 5),
    ]);
    let mut counted = jobs_counted(&p, JobStatus::Pending);
    counted.sort();
    assert_eq!(
        counted,
        vec![("RUNNABLE".to_owned(), 5), ("RUNNING".to_owned(), 30)]
    );
    // Without a summary yet, every child is counted under the parent's status.
    assert_eq!(
        jobs_counted(&parent(&[]), JobStatus::Submitted),
        vec![("SUBMITTED".to_owned(), 100)]
    );
    // A summary behind the parent (all zero, or missing some children): the children not
    // ended are counted all the same, and an unfinished parent is never nothing.
    let zeros = parent(&[("SUCCEEDED", 0), ("RUNNING", 0)]);
    assert_eq!(
        jobs_counted(&zeros, JobStatus::Pending),
        vec![("PENDING".to_owned(), 100)]
    );
    assert_eq!(
        jobs_counted(&parent(&[("SUCCEEDED", 100)]), JobStatus::Pending),
        vec![("PENDING".to_owned(), 1)]
    );
    // A child listed with the queue's jobs (moto) is its parent's to count.
    let child = SdkSummary::builder()
        .job_id("p:3")
        .job_name("w")
        .array_properties(ArrayPropertiesSummary::builder().index(3).build())
        .build();
    assert!(jobs_counted(&child, JobStatus::Running).is_empty());
}
