use super::*;
use crate::events::default_retry_strategy;

#[test]
fn fates_are_reproducible_and_respect_batch_retries() {
    let plan = FaultPlan {
        spot_rate: 0.5,
        ..FaultPlan::default()
    };
    let retry = retry_strategy_of(&default_retry_strategy(3));
    let mut batch_retried = 0;
    for i in 0..500 {
        let name = format!("job-{i}");
        let a = plan.fate(&name, &format!("g{i}"), &retry);
        assert_eq!(a, plan.fate(&name, &format!("g{i}"), &retry));
        assert!(a.ends.len() <= 3);
        // Batch retries Spot (and only Spot or pull errors) until its 3 attempts are used.
        for e in &a.ends[..a.ends.len() - 1] {
            assert!(
                matches!(
                    e,
                    AttemptEnd::SpotInterruption { .. } | AttemptEnd::PullError
                ),
                "{a:?}"
            );
        }
        batch_retried += usize::from(a.ends.len() > 1);
    }
    assert!(batch_retried > 100, "{batch_retried}");
}

#[test]
fn no_faults_means_one_succeeding_attempt_and_one_event_each() {
    let plan = FaultPlan::none();
    plan.validate().unwrap();
    let retry = retry_strategy_of(&default_retry_strategy(2));
    for i in 0..500 {
        let f = plan.fate(&format!("g{i}-a1"), &format!("g{i}"), &retry);
        assert!(
            f.succeeded && !f.duplicate && !f.delayed && !f.lost,
            "{f:?}"
        );
        assert_eq!(f.ends.len(), 1, "{f:?}");
    }
}

#[test]
fn poisoned_granules_fail_every_time() {
    let plan = FaultPlan {
        spot_rate: 0.0,
        pull_error_rate: 0.0,
        app_failure_rate: 0.3,
        ..FaultPlan::default()
    };
    let retry = retry_strategy_of(&default_retry_strategy(2));
    let poisoned: Vec<usize> = (0..200)
        .filter(|i| plan.is_poisoned(&format!("g{i}")))
        .collect();
    assert!((30..90).contains(&poisoned.len()), "{}", poisoned.len());
    for i in poisoned {
        for attempt in 1..4 {
            let f = plan.fate(&format!("g{i}-a{attempt}"), &format!("g{i}"), &retry);
            assert!(!f.succeeded);
            assert_eq!(f.ends, vec![AttemptEnd::AppFailure { exit_code: 1 }]);
        }
    }
}

#[test]
fn bad_plans_are_refused() {
    assert!(FaultPlan {
        spot_rate: 1.5,
        ..FaultPlan::default()
    }
    .validate()
    .is_err());
    assert!(FaultPlan {
        spot_rate: 0.6,
        pull_error_rate: 0.6,
        ..FaultPlan::default()
    }
    .validate()
    .is_err());
    assert!(FaultPlan::default().validate().is_ok());
}
