//! IAM proven by use for the ingest functions: a whole batch run (`platform::ingest`) with the
//! environment the template gives each function; every call is recorded as the IAM action and
//! ARN AWS checks, then both ways against the roles in `infra/template.yaml`: every call
//! granted, every grant used. The job monitor's ingest calls are checked with the rest of its
//! calls in `iam_by_use.rs`.

mod platform;

use granary::adapters::tap::access_log::Access;
use granary_template::check_role;
use platform::ingest::{ingest_needs, DISPATCHER, MONITOR, SUBMIT};
use platform::stack;
use std::collections::BTreeSet;

fn check(logical_id: &str, needed: &BTreeSet<Access>, problems: &mut Vec<String>) {
    let (_, resolved) = stack();
    let statements = resolved
        .function(logical_id)
        .and_then(|f| f.statements())
        .unwrap();
    let check = check_role(
        &statements,
        needed.iter().map(|a| (a.action, a.resource.as_str())),
    )
    .unwrap();
    for n in check.not_granted {
        problems.push(format!(
            "{logical_id} needs {n} and its role does not grant it"
        ));
    }
    for u in check.unused {
        problems.push(format!("{logical_id} is granted {u} and no call uses it"));
    }
}

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
