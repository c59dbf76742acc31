use super::*;
use granary::domain::batch_event::BatchJobStateChange;
use granary::domain::classify::{classify, Route};

fn facts(batch_attempts: u32) -> JobFacts {
    JobFacts {
        job_id: "4c7599ae-0a82-49aa-ba5a-4727fcce14a8".into(),
        job_name: "g-a1-0123456789".into(),
        job_arn: "arn:aws:batch:us-east-1:123456789012:job/4c7599ae".into(),
        job_queue_arn: "arn:aws:batch:us-east-1:123456789012:job-queue/q".into(),
        job_definition_arn: "arn:aws:batch:us-east-1:123456789012:job-definition/d:1".into(),
        granule_id: "HLS.S30.T01GBH.2022226T214921.v2.0".into(),
        attempt: 1,
        retry_strategy: default_retry_strategy(batch_attempts),
        created_at_ms: 1_700_000_000_000,
        account: "123456789012".into(),
        region: "us-east-1".into(),
        array: None,
        campaign: None,
    }
}

fn route(ends: &[AttemptEnd], status: &str, batch_attempts: u32) -> Route {
    let e =
        BatchJobStateChange::from_value(&state_change_event(&facts(batch_attempts), ends, status))
            .unwrap();
    classify(&e.detail).unwrap().route()
}

#[test]
fn generated_events_classify_as_intended() {
    let spot = AttemptEnd::SpotInterruption {
        instance: "i-0abc".into(),
    };
    assert_eq!(route(&[AttemptEnd::Success], "SUCCEEDED", 2), Route::Done);
    assert_eq!(
        route(&[spot.clone(), AttemptEnd::Success], "SUCCEEDED", 2),
        Route::Done
    );
    // FAILED is final whatever the retry strategy (a terminated or timed-out job).
    assert_eq!(
        route(std::slice::from_ref(&spot), "FAILED", 2),
        Route::RetryQueue
    );
    assert_eq!(
        route(&[spot.clone(), spot.clone()], "FAILED", 2),
        Route::RetryQueue
    );
    assert_eq!(
        route(&[AttemptEnd::AppFailure { exit_code: 1 }], "FAILED", 2),
        Route::FailureDlq
    );
    assert_eq!(
        route(&[AttemptEnd::Timeout], "FAILED", 2),
        Route::RetryQueue
    );
    assert_eq!(
        route(&[AttemptEnd::PullError], "FAILED", 1),
        Route::RetryQueue
    );
    assert_eq!(
        route(&[AttemptEnd::PullError], "FAILED", 2),
        Route::RetryQueue
    );
}

#[test]
fn a_retried_attempt_is_a_runnable_event_the_monitor_ignores() {
    let spot = AttemptEnd::SpotInterruption {
        instance: "i-0abc".into(),
    };
    let e = BatchJobStateChange::from_value(&state_change_event(
        &facts(2),
        std::slice::from_ref(&spot),
        "RUNNABLE",
    ))
    .unwrap();
    assert_eq!(e.detail.attempts.len(), 1, "the failed attempt is listed");
    assert!(e.detail.status_reason.is_none());
    assert!(classify(&e.detail).is_err(), "not terminal");
}
