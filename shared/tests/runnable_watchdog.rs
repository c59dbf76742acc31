//! The job queue's stuck-job watchdog, read both ways: every `jobStateTimeLimitActions` entry of
//! `infra/template.yaml` cancels RUNNABLE jobs for a reason Batch documents, and the FAILED event
//! Batch sends for each ("Canceled by JobStateTimeLimit action due to reason: <reason>") is
//! routed by granary's own classification — capacity to the retry queue, misconfiguration to the
//! failure DLQ — through the job monitor's decision.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::batch_event::{JobDetail, JobStatus};
use granary::domain::classify::{classify, FailureKind, Route, STATE_TIME_LIMIT};
use granary_template::{Stack, Template};

/// The reasons Batch infers for a job blocking the head of a queue (AWS Batch user guide, "Jobs
/// stuck in a RUNNABLE status"), and the route granary gives each.
const DOCUMENTED: [(&str, Route); 3] = [
    ("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", Route::RetryQueue),
    (
        "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
        Route::FailureDlq,
    ),
    (
        "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        Route::FailureDlq,
    ),
];

#[test]
fn every_watchdog_action_cancels_a_documented_reason_and_its_end_is_routed() {
    let template = Template::granary().unwrap();
    let stack = Stack::new("watchdog")
        .with("SubnetIds", "subnet-1")
        .with("SecurityGroupIds", "sg-1")
        .with("ContainerImage", "image");
    let resolved = template.resolve(&stack).unwrap();
    let queues: Vec<_> = resolved
        .resources
        .values()
        .filter(|r| r["Type"] == "AWS::Batch::JobQueue")
        .collect();
    assert_eq!(queues.len(), 1);
    let actions = queues[0]["Properties"]["JobStateTimeLimitActions"]
        .as_array()
        .expect("the job queue declares jobStateTimeLimitActions");
    let mut reasons = Vec::new();
    for a in actions {
        assert_eq!(a["State"], "RUNNABLE");
        assert_eq!(a["Action"], "CANCEL");
        let seconds = match &a["MaxTimeSeconds"] {
            serde_json::Value::Number(n) => n.as_u64().unwrap(),
            serde_json::Value::String(s) => s.parse().unwrap(),
            other => panic!("MaxTimeSeconds {other}"),
        };
        // The API's bounds (CreateJobQueue, JobStateTimeLimitAction.maxTimeSeconds).
        assert!((600..=86_400).contains(&seconds), "{seconds}");
        reasons.push(a["Reason"].as_str().unwrap().to_owned());
    }
    let documented: Vec<&str> = DOCUMENTED.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        reasons, documented,
        "every documented reason, and only those"
    );

    for (reason, route) in DOCUMENTED {
        let job = JobDetail {
            job_name: "g".into(),
            job_id: "j".into(),
            job_queue: "q".into(),
            status: JobStatus::Failed,
            status_reason: Some(format!("{STATE_TIME_LIMIT}{reason}")),
            ..Default::default()
        };
        let c = classify(&job).unwrap();
        assert_eq!(c.route(), route, "{reason}");
        assert!(matches!(
            c.failure,
            Some(FailureKind::Capacity { .. } | FailureKind::Misconfiguration { .. })
        ));
    }
}
