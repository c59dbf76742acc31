use super::*;
use crate::adapters::memory::MemoryStore;
use crate::adapters::tap::counting::RequestCounts;
use crate::adapters::tap::TappedStore;
use crate::domain::classify::{Classification, JobOutcome, Route};
use crate::domain::granule::{GranuleId, IdParser};
use chrono::Utc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const PREFIX: &str = "logs/";

fn key(outcome: LogOutcome, attempt: u32) -> LogKey {
    let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
    LogKey::new(outcome, &IdParser::hls().facts(&id), &id, attempt)
}

fn record(outcome: LogOutcome, attempt: u32) -> LogRecord {
    LogRecord {
        granule_id: key(outcome, attempt).granule_id,
        attempt,
        outcome,
        classification: Classification {
            outcome: match outcome {
                LogOutcome::Success => JobOutcome::Success,
                LogOutcome::Failure => JobOutcome::Retryable,
            },
            failure: None,
            batch_rules: String::new(),
            reason: "test".into(),
        },
        route: Route::RetryQueue,
        job_id: format!("job-{attempt}"),
        job_name: format!("name-{attempt}"),
        logged_at: Utc::now(),
        routed_at: Some(Utc::now()),
        superseded: None,
        revoked: None,
        job: serde_json::Value::Null,
        spot_ends_before: None,
    }
}

async fn fail(logs: &Logs<'_>, attempt: u32) {
    let failure = key(LogOutcome::Failure, attempt);
    logs.log_failure(&failure, record(LogOutcome::Failure, attempt))
        .await
        .unwrap();
}

async fn succeed(logs: &Logs<'_>, attempt: u32) -> SuccessLogged {
    let success = key(LogOutcome::Success, attempt);
    logs.log_success(&success, &record(LogOutcome::Success, attempt))
        .await
        .unwrap()
}

/// Failure logs at `failed`, then a success at `succeeded`: what is left under each
/// outcome, and the LIST pages the success took.
async fn succeed_after(failed: &[u32], succeeded: u32) -> (Vec<u32>, Vec<u32>, u64) {
    let counts = Arc::new(RequestCounts::default());
    let store = TappedStore {
        inner: Arc::new(MemoryStore::new()),
        tap: counts.clone(),
    };
    let logs = Logs::new(&store, PREFIX);
    for attempt in failed {
        let failure = record(LogOutcome::Failure, *attempt);
        let logged = logs
            .log_failure(&key(LogOutcome::Failure, *attempt), failure)
            .await
            .unwrap();
        assert!(matches!(logged, FailureLogged::New(_)));
    }
    let before = counts.s3_list.load(Ordering::Relaxed);
    let logged = logs
        .log_success(
            &key(LogOutcome::Success, succeeded),
            &record(LogOutcome::Success, succeeded),
        )
        .await
        .unwrap();
    let lists = counts.s3_list.load(Ordering::Relaxed) - before;
    let moved = failed.iter().filter(|a| **a < succeeded).count();
    assert_eq!(logged.relocated, moved);
    let attempts = |outcome: LogOutcome| {
        let store = &store;
        async move {
            let folder = key(outcome, 1).granule_prefix(PREFIX);
            let mut found = Vec::new();
            for meta in store.list(&folder).await.unwrap() {
                let k = LogKey::parse(PREFIX, &meta.key).unwrap();
                let log = read_json::<LogRecord>(store, &meta.key)
                    .await
                    .unwrap()
                    .unwrap();
                if k.attempt < succeeded {
                    let by = log
                        .value
                        .superseded
                        .expect("an earlier failure is superseded");
                    assert_eq!(by.by_attempt, succeeded);
                }
                found.push(k.attempt);
            }
            found.sort_unstable();
            found
        }
    };
    (
        attempts(LogOutcome::Failure).await,
        attempts(LogOutcome::Success).await,
        lists,
    )
}

#[tokio::test]
async fn a_success_moves_the_earlier_failures_by_their_keys_while_there_are_few() {
    // Attempts 1 and 2 failed (3 was never logged): found by key, no LIST.
    let (failure, success, lists) = succeed_after(&[1, 2], 4).await;
    assert_eq!((failure, success, lists), (vec![], vec![1, 2, 4], 0));
    // A later attempt's failure is not this success's to supersede.
    let (failure, success, _) = succeed_after(&[1, 5], 4).await;
    assert_eq!((failure, success), (vec![5], vec![1, 4]));
}

#[tokio::test]
async fn a_late_failure_finds_the_success_before_or_after_it() {
    let store = MemoryStore::new();
    let logs = Logs::new(&store, PREFIX);
    let failure = |attempt| key(LogOutcome::Failure, attempt);
    assert_eq!(logs.succeeded_attempt(&failure(1)).await.unwrap(), None);
    for attempt in [1, 2] {
        logs.log_failure(&failure(attempt), record(LogOutcome::Failure, attempt))
            .await
            .unwrap();
    }
    assert_eq!(logs.succeeded_attempt(&failure(2)).await.unwrap(), None);
    logs.log_success(
        &key(LogOutcome::Success, 3),
        &record(LogOutcome::Success, 3),
    )
    .await
    .unwrap();
    // Attempt 1's or 2's failure delivered again after attempt 3 succeeded: its own
    // success-side key holds it, superseded by 3.
    for attempt in [1, 2, 3] {
        let found = logs.succeeded_attempt(&failure(attempt)).await.unwrap();
        assert_eq!(found, Some(3), "attempt {attempt}");
    }
    // A failure at a later attempt than the success (a stray job): found below it.
    assert_eq!(logs.succeeded_attempt(&failure(5)).await.unwrap(), Some(3));
    // Past the attempts looked up by key, the folder is listed.
    let late = ATTEMPTS_LOOKED_UP_BY_KEY + 4;
    assert_eq!(
        logs.succeeded_attempt(&failure(late)).await.unwrap(),
        Some(3)
    );
}

#[tokio::test]
async fn a_revoked_success_stands_for_the_attempts_before_it_not_after() {
    let store = MemoryStore::new();
    let logs = Logs::new(&store, PREFIX);
    let failure = |attempt| key(LogOutcome::Failure, attempt);
    fail(&logs, 1).await;
    succeed(&logs, 2).await;
    // Nothing to revoke for a granule that never succeeded.
    let other = LogKey {
        granule_id: GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.1").unwrap(),
        ..key(LogOutcome::Success, 2)
    };
    assert_eq!(logs.revoke_success(&other, "gone").await.unwrap(), None);
    // Re-validation at the item's attempt 2 revokes the success at 2; again is the same.
    let at_two = key(LogOutcome::Success, 2);
    for _ in 0..2 {
        let revoked = logs.revoke_success(&at_two, "gone").await.unwrap();
        assert_eq!(revoked, Some(2));
    }
    // Late ends of attempts 1 and 2 still find it: not routed again.
    for attempt in [1, 2] {
        let found = logs.succeeded_attempt(&failure(attempt)).await.unwrap();
        assert_eq!(found, Some(2), "attempt {attempt}");
    }
    // The attempts re-validation sends the granule round to make are routed.
    for attempt in [3, ATTEMPTS_LOOKED_UP_BY_KEY + 2] {
        let found = logs.succeeded_attempt(&failure(attempt)).await.unwrap();
        assert_eq!(found, None, "attempt {attempt}");
    }
    // Attempt 3 fails and is routed; attempt 4 succeeds: that success stands for all.
    fail(&logs, 3).await;
    succeed(&logs, 4).await;
    for attempt in [3, 4, 5, ATTEMPTS_LOOKED_UP_BY_KEY + 2] {
        let found = logs.succeeded_attempt(&failure(attempt)).await.unwrap();
        assert_eq!(found, Some(4), "attempt {attempt}");
    }
}

#[tokio::test]
async fn a_late_failure_filed_after_a_revoked_success_points_at_it() {
    let store = MemoryStore::new();
    let logs = Logs::new(&store, PREFIX);
    let failure = |attempt| key(LogOutcome::Failure, attempt);
    // Attempt 1 succeeded late, after attempt 2 was made; attempt 2's failure is filed
    // under the success side, naming attempt 1.
    succeed(&logs, 1).await;
    assert_eq!(logs.succeeded_attempt(&failure(2)).await.unwrap(), Some(1));
    logs.file_late_failure(&failure(2), record(LogOutcome::Failure, 2), 1)
        .await
        .unwrap();
    // Re-validated at the item's attempt 2: the success at 1 is what is revoked.
    let at_two = key(LogOutcome::Success, 2);
    let revoked = logs.revoke_success(&at_two, "gone").await.unwrap();
    assert_eq!(revoked, Some(1));
    assert_eq!(logs.succeeded_attempt(&failure(2)).await.unwrap(), Some(1));
    assert_eq!(logs.succeeded_attempt(&failure(3)).await.unwrap(), None);
}

/// Attempt 1 timed out (failure logged) and then succeeded late; re-validation revoked that
/// success, attempt 2 failed and attempt 3 succeeded. Attempt 1's success log stays (the
/// job's evidence, revoked); its failure stays beside it on the failure side.
#[tokio::test]
async fn a_later_success_never_writes_over_an_earlier_attempts_success() {
    let store = MemoryStore::new();
    let logs = Logs::new(&store, PREFIX);
    let failure = |attempt| key(LogOutcome::Failure, attempt);
    fail(&logs, 1).await;
    succeed(&logs, 1).await;
    let at_one = key(LogOutcome::Success, 1);
    assert_eq!(logs.revoke_success(&at_one, "gone").await.unwrap(), Some(1));
    fail(&logs, 2).await;
    let logged = succeed(&logs, 3).await;
    assert_eq!(logged.relocated, 1, "attempt 2's failure only");
    let one = read_json::<LogRecord>(&store, &at_one.to_key(PREFIX))
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!((one.outcome, one.superseded), (LogOutcome::Success, None));
    assert!(one.revoked.is_some());
    let kept = read_json::<LogRecord>(&store, &failure(1).to_key(PREFIX)).await;
    assert!(kept.unwrap().is_some(), "attempt 1's failure stays");
    // Done again (a run that died before its deletes): the same outcome.
    let again = succeed(&logs, 3).await;
    assert_eq!((again.duplicate, again.relocated), (true, 0));
}

#[tokio::test]
async fn a_success_after_many_attempts_lists_the_failures_instead() {
    let failed: Vec<u32> = (1..20).filter(|a| *a != 7).collect();
    let (failure, success, lists) = succeed_after(&failed, 20).await;
    assert_eq!(failure, Vec::<u32>::new());
    assert_eq!(success, (1..=20).filter(|a| *a != 7).collect::<Vec<_>>());
    assert_eq!(lists, 1);
    let (failure, _, _) = succeed_after(&[3, 21], 20).await;
    assert_eq!(failure, vec![21]);
}
