//! requeuer against the emulator.

use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::job_name::job_name;
use granary::handlers::requeuer::{self, RequeueOutcome, ATTEMPTS_EXHAUSTED};
use granary_tests::*;

fn msg(id: &str, attempt: u32) -> String {
    serde_json::to_string(&GranuleProcessingEvent {
        granule_id: GranuleId::parse(id).unwrap(),
        attempt,
    })
    .unwrap()
}

#[tokio::test]
async fn increments_the_attempt_and_submits_once() {
    let s = stack("requeue", 2, &[]).await;
    let id = "HLS.L30.T18TYN.2020001T153012.v2.0";
    let out = requeuer::handle_message(&s.ctx, &msg(id, 1)).await.unwrap();
    assert!(
        matches!(out, RequeueOutcome::Resubmitted { attempt: 2, .. }),
        "{out:?}"
    );
    // A duplicate retry message does not submit attempt 2 again.
    let out = requeuer::handle_message(&s.ctx, &msg(id, 1)).await.unwrap();
    assert_eq!(out, RequeueOutcome::AlreadySubmitted { attempt: 2 });
    let jobs = all_jobs(&s).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].0, job_name(None, &GranuleId::parse(id).unwrap(), 2));
    let facts = facts(&s, &[jobs[0].1.clone()]).await;
    assert_eq!((facts[0].granule_id.as_str(), facts[0].attempt), (id, 2));
}

#[tokio::test]
async fn respects_the_attempt_budget() {
    let s = stack("budget", 2, &[("GRANARY_MAX_RETRIES", "2")]).await;
    let id = "HLS.S30.T01GBH.2022226T214921.v2.0";
    // attempts 1 and 2 failed: 3 is the last allowed (1 + 2 retries)
    assert!(matches!(
        requeuer::handle_message(&s.ctx, &msg(id, 2)).await.unwrap(),
        RequeueOutcome::Resubmitted { attempt: 3, .. }
    ));
    let out = requeuer::handle_message(&s.ctx, &msg(id, 3)).await.unwrap();
    assert_eq!(
        out,
        RequeueOutcome::DeadLettered {
            reason: ATTEMPTS_EXHAUSTED.into()
        }
    );
    assert_eq!(all_jobs(&s).await.len(), 1);
    let dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].attributes["reason"], "attempts exhausted");
    assert_eq!(dlq[0].body, msg(id, 3));
}

#[tokio::test]
async fn reports_failures_per_message() {
    let s = stack("partial", 2, &[]).await;
    let batch = vec![
        msg("HLS.S30.T01GBH.2022226T214921.v2.0", 1),
        "not json".to_owned(),
        msg("HLS.S30.T01GBH.2022227T214921.v2.0", 1),
    ];
    let resp = requeuer::handle_sqs(&s.ctx, sqs_event(&batch)).await;
    assert!(
        resp.batch_item_failures.is_empty(),
        "a malformed message is dead-lettered, not retried forever"
    );
    assert_eq!(all_jobs(&s).await.len(), 2);
    let dlq = drain(&s.clients, &s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert!(dlq[0].attributes["reason"].starts_with("malformed retry message"));
    assert_eq!(dlq[0].attributes["kind"], "malformed_retry_message");

    // A message whose next attempt is claimed by a run in flight fails alone and comes back.
    let held = GranuleProcessingEvent {
        granule_id: GranuleId::parse("held-granule").unwrap(),
        attempt: 2,
    };
    let claim = granary::domain::claim::Claim::new(&held, None, "someone", chrono::Utc::now());
    granary::repositories::write_json(
        s.ctx.store.as_ref(),
        &granary::domain::layout::claims::claim_key("claims/", &held),
        &claim,
        granary::ports::PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    let resp = requeuer::handle_sqs(
        &s.ctx,
        sqs_event(&[msg("held-granule", 1), msg("other-granule", 1)]),
    )
    .await;
    let failed: Vec<&str> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["m0"]);
}
