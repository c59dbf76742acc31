//! IAM proven by use for the ingest functions: a whole batch run (`platform::ingest`) with the
//! environment the template gives each function; every call is recorded as the IAM action and
//! ARN AWS checks, then both ways against the roles in `infra/template.yaml`: every call
//! granted, every grant used. The job monitor's ingest calls are checked with the rest of its
//! calls in `iam_by_use.rs`.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use platform::check_function_role as check;
use platform::ingest::{ingest_needs, DISPATCHER, MONITOR, SUBMIT};
use std::collections::BTreeSet;

#[tokio::test]
async fn the_ingest_functions_are_granted_what_they_use_and_use_what_they_are_granted() {
    let needs = ingest_needs().await;
    let actions = |f: &str| -> BTreeSet<&str> { needs[f].iter().map(|a| a.action).collect() };
    for wanted in [
        "events:PutEvents",
        "batch:SubmitJob",
        "s3:AbortMultipartUpload",
        "s3:DeleteObject",
        "sqs:SendMessage",
    ] {
        assert!(
            actions(DISPATCHER).contains(wanted),
            "the dispatcher never needed {wanted}: {:?}",
            actions(DISPATCHER)
        );
    }
    for wanted in ["s3:PutObject", "s3:DeleteObject", "sqs:SendMessage"] {
        assert!(
            actions(MONITOR).contains(wanted),
            "the monitor never needed {wanted} for an ingest job: {:?}",
            actions(MONITOR)
        );
    }
    let mut problems = Vec::new();
    check(DISPATCHER, &needs[DISPATCHER], &mut problems);
    check(SUBMIT, &needs[SUBMIT], &mut problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
