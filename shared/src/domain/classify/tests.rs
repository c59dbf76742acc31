use super::*;
use crate::domain::batch_event::{AttemptContainer, EvaluateOnExit, JobAttempt, RetryStrategy};

fn failed(
    status_reason: &str,
    container_reason: Option<&str>,
    exit_code: Option<i64>,
) -> JobDetail {
    JobDetail {
        job_name: "n".into(),
        job_id: "id".into(),
        job_queue: "q".into(),
        status: JobStatus::Failed,
        status_reason: Some(status_reason.into()),
        attempts: vec![JobAttempt {
            container: Some(AttemptContainer {
                exit_code,
                reason: container_reason.map(Into::into),
                ..Default::default()
            }),
            status_reason: Some(status_reason.into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn route_of(job: &JobDetail) -> Route {
    classify(job).unwrap().route()
}

const SPOT: &str = "Host EC2 (instance i-0123456789abcdef0) terminated.";

#[test]
fn success() {
    let job = JobDetail {
        status: JobStatus::Succeeded,
        ..Default::default()
    };
    let c = classify(&job).unwrap();
    assert_eq!(c.outcome, JobOutcome::Success);
    assert_eq!(c.route(), Route::Done);
}

#[test]
fn spot_is_retryable() {
    let c = classify(&failed(SPOT, None, None)).unwrap();
    assert_eq!(c.outcome, JobOutcome::Retryable);
    assert_eq!(c.failure, Some(FailureKind::SpotInterruption));
    assert_eq!(c.route(), Route::RetryQueue);
    // a Spot kill wins over whatever exit code the dying container left
    assert_eq!(route_of(&failed(SPOT, None, Some(137))), Route::RetryQueue);
}

#[test]
fn spot_signature_is_exact() {
    assert!(is_spot_interruption(SPOT));
    assert!(!is_spot_interruption("Host EC2 (instance i-) terminated."));
    assert!(!is_spot_interruption(
        "Host EC2 (instance i-0abc) terminated"
    ));
    assert!(!is_spot_interruption(
        "Host EC2 (instance i-0 abc) terminated."
    ));
    assert!(!is_spot_interruption("Essential container in task exited"));
}

#[test]
fn container_startup_errors_are_retryable() {
    for e in CONTAINER_STARTUP_ERRORS {
        let job = failed(
            "Essential container in task exited",
            Some(&format!("{e}: boom")),
            None,
        );
        let c = classify(&job).unwrap();
        assert_eq!(c.outcome, JobOutcome::Retryable, "{e}");
        assert_eq!(
            c.failure,
            Some(FailureKind::ContainerStartup {
                error: e.to_owned()
            })
        );
    }
    let c = classify(&failed("Task failed to start", None, None)).unwrap();
    assert_eq!(c.outcome, JobOutcome::Retryable);
}

#[test]
fn exit_codes_are_non_retryable() {
    let c = classify(&failed("Essential container in task exited", None, Some(1))).unwrap();
    assert_eq!(c.outcome, JobOutcome::NonRetryable);
    assert_eq!(
        c.failure,
        Some(FailureKind::ApplicationExit { exit_code: 1 })
    );
    assert_eq!(c.reason, "application exited with code 1");
    assert_eq!(c.route(), Route::FailureDlq);
}

#[test]
fn a_timed_out_attempt_is_retried_by_granary() {
    let t = classify(&failed(
        "Job attempt duration exceeded timeout",
        None,
        Some(137),
    ))
    .unwrap();
    assert_eq!(t.failure, Some(FailureKind::AttemptTimeout));
    assert_eq!(t.outcome, JobOutcome::Retryable);
    assert_eq!(t.route(), Route::RetryQueue);
}

#[test]
fn cancels_and_unknowns_are_non_retryable() {
    let mut cancelled = failed("", None, None);
    cancelled.status_reason = Some("Cancelled by operator".into());
    cancelled.attempts.clear();
    assert_eq!(
        classify(&cancelled).unwrap().failure,
        Some(FailureKind::Cancelled)
    );
    let unknown = classify(&failed("Something odd", None, Some(0))).unwrap();
    assert_eq!(unknown.failure, Some(FailureKind::Unknown));
    assert_eq!(unknown.outcome, JobOutcome::NonRetryable);
}

#[test]
fn granarys_own_cancel_is_known_by_its_reason_and_routed_to_the_cancelled_list() {
    let reason = crate::domain::cancel::reason("c20261127T060001-000000ab", "bad image");
    // Terminated while running: the container shows the kill's 137, the attempt Batch's
    // own words; the job's reason is the terminator's.
    let mut running = failed("Essential container in task exited", None, Some(137));
    running.status_reason = Some(reason.clone());
    // Cancelled before it ran: no attempt at all.
    let mut queued = failed("", None, None);
    queued.status_reason = Some(reason);
    queued.attempts.clear();
    for job in [running, queued] {
        let c = classify(&job).unwrap();
        assert_eq!(
            c.failure,
            Some(FailureKind::GranaryCancel {
                cancel: "c20261127T060001-000000ab".into()
            })
        );
        assert_eq!(c.route(), Route::Cancelled);
        assert!(c.reason.contains("bad image"), "{}", c.reason);
    }
    // Anyone else's cancel is still dead-lettered for a human.
    let mut by_hand = failed("", None, Some(137));
    by_hand.status_reason = Some("Terminated by the user".into());
    assert_eq!(classify(&by_hand).unwrap().route(), Route::FailureDlq);
}

#[test]
fn the_queues_runnable_watchdog_retries_capacity_and_dead_letters_misconfiguration() {
    let stuck = |reason: &str| {
        let mut job = failed("", None, None);
        job.status_reason = Some(format!("{STATE_TIME_LIMIT}{reason}"));
        job.attempts.clear();
        classify(&job).unwrap()
    };
    let capacity = stuck("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY");
    assert_eq!(capacity.outcome, JobOutcome::Retryable);
    assert_eq!(
        capacity.failure,
        Some(FailureKind::Capacity {
            reason: "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY".into()
        })
    );
    for reason in [
        "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
        "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
    ] {
        let c = stuck(reason);
        assert_eq!(c.outcome, JobOutcome::NonRetryable, "{reason}");
        assert!(matches!(
            c.failure,
            Some(FailureKind::Misconfiguration { .. })
        ));
        assert!(c.reason.contains(reason), "{}", c.reason);
    }
    // A person's cancel stays a cancel.
    let mut by_hand = failed("", None, None);
    by_hand.status_reason = Some("Canceled by the user".into());
    assert_eq!(
        classify(&by_hand).unwrap().failure,
        Some(FailureKind::Cancelled)
    );
}

#[test]
fn non_terminal_is_an_error() {
    let job = JobDetail {
        status: JobStatus::Running,
        ..Default::default()
    };
    assert!(classify(&job).is_err());
}

#[test]
fn a_failed_event_is_routed_whatever_the_retry_strategy_says() {
    let mut job = failed(SPOT, None, None);
    job.retry_strategy = Some(RetryStrategy {
        attempts: Some(3),
        evaluate_on_exit: vec![
            EvaluateOnExit {
                on_status_reason: Some("Host EC2*".into()),
                action: "RETRY".into(),
                ..Default::default()
            },
            EvaluateOnExit {
                on_reason: Some("*".into()),
                action: "EXIT".into(),
                ..Default::default()
            },
        ],
    });
    // A timed-out or terminated Spot job with attempts left and a RETRY rule is still FAILED:
    // Batch did not retry it, so granary must.
    let c = classify(&job).unwrap();
    assert_eq!(c.route(), Route::RetryQueue);
    assert!(
        c.batch_rules.contains("rule 0 says RETRY"),
        "{}",
        c.batch_rules
    );
    assert!(c.batch_rules.contains("1 of 3"), "{}", c.batch_rules);

    // application failure: rule 1 matches the reason and exits
    let mut app = failed("Essential container in task exited", Some("exit"), Some(2));
    app.retry_strategy = job.retry_strategy.clone();
    assert_eq!(route_of(&app), Route::FailureDlq);

    assert!(classify(&app)
        .unwrap()
        .batch_rules
        .contains("rule 1 says EXIT"));

    // third Spot kill: Batch's attempts are spent, so we retry it ourselves
    job.attempts = vec![job.attempts[0].clone(); 3];
    assert_eq!(route_of(&job), Route::RetryQueue);
    assert!(classify(&job).unwrap().batch_rules.contains("3 of 3"));
}

#[test]
fn a_string_prefix_is_not_enough() {
    // A status reason merely *starting* like a Spot reason, under a rule that needs the exact text.
    let mut job = failed("Host EC2 (instance i-1) terminated. extra", None, None);
    job.retry_strategy = Some(RetryStrategy {
        attempts: Some(2),
        evaluate_on_exit: vec![
            EvaluateOnExit {
                on_status_reason: Some("Host EC2 (instance i-1) terminated.".into()),
                action: "RETRY".into(),
                ..Default::default()
            },
            EvaluateOnExit {
                on_status_reason: Some("*".into()),
                action: "EXIT".into(),
                ..Default::default()
            },
        ],
    });
    let rules = classify(&job).unwrap().batch_rules;
    assert!(rules.contains("rule 1 says EXIT"), "{rules}");
}

#[test]
fn out_of_memory_is_its_own_class_and_retried_but_137_alone_is_not_it() {
    let oom = "OutOfMemoryError: Container killed due to memory usage";
    let c = classify(&failed(
        "Essential container in task exited",
        Some(oom),
        Some(137),
    ))
    .unwrap();
    assert_eq!(c.failure, Some(FailureKind::OutOfMemory));
    assert_eq!(
        c.failure.as_ref().map(FailureKind::class),
        Some("out_of_memory")
    );
    assert_eq!(c.route(), Route::RetryQueue);
    assert!(c.reason.contains(oom), "{}", c.reason);
    // The exit code alone is the kill's, whoever killed: an application failure.
    let plain = classify(&failed(
        "Essential container in task exited",
        None,
        Some(137),
    ))
    .unwrap();
    assert_eq!(
        plain.failure,
        Some(FailureKind::ApplicationExit { exit_code: 137 })
    );
    // Spot wins over a reason the dying container left.
    assert_eq!(
        classify(&failed(SPOT, Some(oom), Some(137)))
            .unwrap()
            .failure,
        Some(FailureKind::SpotInterruption)
    );
}
