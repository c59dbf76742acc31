//! requeuer against the emulator.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

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

/// A granule's last chance against capacity goes to the last-attempt queue through the real
/// SDK: the requeuer's SubmitJob names that queue (the endpoint refuses a queue it does not
/// know), the job carries the Spot ends before it, and only a runner that lists that queue too
/// finds the job by its name — ListJobs lists one queue a call (AWS Batch API Reference,
/// "ListJobs": `jobQueue`), which is why the wiring asks both.
#[tokio::test]
async fn the_last_chance_goes_to_the_last_attempt_queue() {
    use granary::adapters::aws::BatchJobRunner;
    use granary::ports::JobRunner;
    let s = stack("lastq", 1, &[]).await;
    let batch = &s.clients.batch;
    let ce = batch
        .describe_compute_environments()
        .compute_environments(format!("{}-ce", s.stack.name))
        .send()
        .await
        .unwrap();
    let ce_arn = ce.compute_environments()[0]
        .compute_environment_arn()
        .unwrap()
        .to_owned();
    let on_demand = format!("{}-on-demand", s.stack.name);
    batch
        .create_job_queue()
        .job_queue_name(&on_demand)
        .state(aws_sdk_batch::types::JqState::Enabled)
        .priority(1)
        .compute_environment_order(
            aws_sdk_batch::types::ComputeEnvironmentOrder::builder()
                .order(1)
                .compute_environment(ce_arn)
                .build(),
        )
        .send()
        .await
        .unwrap();
    // One Spot retry apart from two others; the last chance on the on-demand queue.
    let mut env = s.stack.env.clone();
    env.insert("GRANARY_LAST_ATTEMPT_JOB_QUEUE".into(), on_demand.clone());
    env.insert("GRANARY_MAX_RETRIES".into(), "2".into());
    env.insert("GRANARY_MAX_SPOT_RETRIES".into(), "1".into());
    let config = granary_local::stack::config_from(&env).unwrap();
    let ctx = granary::handlers::Ctx::aws(config, &s.clients).unwrap();

    let reclaimed = "HLS.L30.T18TYN.2020001T153012.v2.0";
    let timed_out = "HLS.L30.T18TYN.2020002T153012.v2.0";
    let retry = |id: &str, spot_ends: u32| {
        serde_json::json!({"granule_id": id, "attempt": 1, "spot_ends": spot_ends}).to_string()
    };
    // Attempt 1 was reclaimed: a second reclaim would spend the Spot budget, so attempt 2 is
    // the last chance. Attempt 1 of the other timed out: Spot retries remain for attempt 2.
    for (id, spot_ends) in [(reclaimed, 1), (timed_out, 0)] {
        let out = requeuer::handle_message(&ctx, &retry(id, spot_ends))
            .await
            .unwrap();
        assert!(
            matches!(out, RequeueOutcome::Resubmitted { attempt: 2, .. }),
            "{out:?}"
        );
    }
    // A duplicate message submits nothing again (the claim, found on the other queue's side).
    let out = requeuer::handle_message(&ctx, &retry(reclaimed, 1))
        .await
        .unwrap();
    assert_eq!(out, RequeueOutcome::AlreadySubmitted { attempt: 2 });

    let name = |id: &str| job_name(None, &GranuleId::parse(id).unwrap(), 2);
    let main_only = BatchJobRunner::new(batch.clone(), &s.stack.job_queue, &s.stack.job_definition);
    let both = main_only.clone().listing_also(vec![on_demand.clone()]);
    // The last chance is on the on-demand queue only; the other retry on the stack's own.
    assert!(main_only
        .find_by_name(&name(reclaimed))
        .await
        .unwrap()
        .is_none());
    let found = both.find_by_name(&name(reclaimed)).await.unwrap().unwrap();
    assert!(main_only
        .find_by_name(&name(timed_out))
        .await
        .unwrap()
        .is_some());
    let described = both.describe(&found.job_id).await.unwrap().unwrap();
    assert_eq!(described.detail["parameters"]["spot_ends"], "1");
    assert!(
        described.detail["jobQueue"]
            .as_str()
            .is_some_and(|q| q.ends_with(&format!("job-queue/{on_demand}"))),
        "{}",
        described.detail["jobQueue"]
    );
}
