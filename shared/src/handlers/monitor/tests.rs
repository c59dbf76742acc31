use super::*;
use crate::adapters::memory::{job_state_change, Ending, MemoryJobRunner};
use crate::config::Config;
use crate::contracts::messages::RetryMessage;
use crate::domain::batch_event::JobStatus;
use crate::domain::granule::GranuleId;
use crate::domain::layout::logs::LogRecord;
use crate::ports::JobRunner;
use std::sync::Arc;

/// One id followed through the logs: every line of an event's handling names the SQS message
/// and the granule, attempt and job it is about, in its spans.
#[tokio::test]
async fn each_log_line_of_an_event_names_its_message_granule_attempt_and_job() {
    let lines = crate::handlers::log_capture::Lines::default();
    let _logs = lines.capture();
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let mut ctx = Ctx::in_memory(Config::for_unit_tests(&[]));
    ctx.jobs = jobs.clone();
    let id = GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap();
    let name = crate::domain::job_name::job_name(None, &id, 2);
    let job = jobs
        .submit(crate::contracts::job::job_request(&name, None, &id, 2))
        .await
        .unwrap()
        .job_id;
    let detail = jobs.end(&job, Ending::Succeeded).unwrap();
    let mut message = aws_lambda_events::event::sqs::SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.body = Some(job_state_change(&detail).to_string());
    let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
    event.records = vec![message];
    let response = handle_sqs(&ctx, event).await;
    assert!(response.batch_item_failures.is_empty());

    let finished = lines.saying("job finished");
    assert_eq!(finished.len(), 1);
    let span = |name: &str| crate::handlers::log_capture::span(&finished[0], name);
    assert_eq!(span("sqs_record")["message_id"], "m-1");
    let end = span("job_end");
    assert_eq!(end["granule_id"], id.as_str());
    assert_eq!(end["attempt"], 2);
    assert_eq!(end["job_id"], job.as_str());
}

/// The retry message counts the granule's Spot ends: those its job says came before it, and
/// this end when it is one (a timed-out attempt adds nothing).
#[tokio::test]
async fn a_retry_message_counts_the_spot_ends_so_far() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let mut ctx = Ctx::in_memory(Config::for_unit_tests(&[]));
    ctx.jobs = jobs.clone();
    const TIMEOUT: &str = "Job attempt duration exceeded timeout";
    let cases = [
        ("HLS.S30.T18TYN.2022002T153012.v2.0", 2, None, 3),
        ("HLS.S30.T18TYN.2022003T153012.v2.0", 0, None, 1),
        ("HLS.S30.T18TYN.2022004T153012.v2.0", 2, Some(TIMEOUT), 2),
    ];
    for (granule, before, reason, want) in cases {
        let id = GranuleId::parse(granule).unwrap();
        let name = crate::domain::job_name::job_name(None, &id, 3);
        let placement = crate::domain::claim::Placement {
            spot_ends: before,
            job_queue: None,
            memory_mib: None,
        };
        let request = crate::contracts::job::placed(
            crate::contracts::job::job_request(&name, None, &id, 3),
            &placement,
        );
        let job = jobs.submit(request).await.unwrap().job_id;
        let mut detail = jobs.end(&job, Ending::SpotReclaimed).unwrap();
        if let Some(reason) = reason {
            detail["statusReason"] = reason.into();
            detail["attempts"][0]["statusReason"] = reason.into();
        }
        handle_message(&ctx, &job_state_change(&detail).to_string())
            .await
            .unwrap();
        let sent = ctx.retry_queue.receive(10, 30, 0).await.unwrap();
        assert_eq!(sent.len(), 1, "{granule} is retried");
        let message: RetryMessage = serde_json::from_str(&sent[0].body).unwrap();
        assert_eq!((message.event.attempt, message.spot_ends), (3, want));
    }
}

/// A failed end delivered twice is routed once. Without item records the log's `routed_at`
/// says so; with them the log is written once and the record past the attempt says so. With
/// the record gone (its writer died after the send), the second delivery waits out the
/// routing lease instead of taking the end for a duplicate.
#[tokio::test]
async fn a_failure_delivered_twice_is_routed_once_by_the_log_or_the_record() {
    for records in [false, true] {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let on = if records { "true" } else { "false" };
        let mut ctx = Ctx::in_memory(Config::for_unit_tests(&[("GRANARY_ITEM_RECORDS", on)]));
        ctx.jobs = jobs.clone();
        let id = GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap();
        let name = crate::domain::job_name::job_name(None, &id, 1);
        let request = crate::contracts::job::job_request(&name, None, &id, 1);
        let job = jobs.submit(request).await.unwrap().job_id;
        let detail = jobs.end(&job, Ending::Exited(1)).unwrap();
        let event = job_state_change(&detail).to_string();
        let dead_lettered = MonitorOutcome::Routed {
            route: Route::FailureDlq,
        };
        assert_eq!(handle_message(&ctx, &event).await.unwrap(), dead_lettered);
        assert_eq!(
            handle_message(&ctx, &event).await.unwrap(),
            MonitorOutcome::Duplicate,
            "records {records}"
        );
        let sent = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
        assert_eq!(sent.len(), 1, "records {records}: dead-lettered once");
        let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
        assert_eq!(logs.len(), 1, "{logs:?}");
        let log: LogRecord = crate::repositories::read_json(ctx.store.as_ref(), &logs[0].key)
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(log.routed_at.is_some(), !records, "{log:?}");
        if !records {
            continue;
        }
        let standing = ctx.items().standing(&id).await.unwrap().unwrap();
        assert!(standing.past(1), "{standing:?}");
        // Item records switched off since: the record still marks the log's route.
        let mut off = ctx.clone();
        off.config.layout.track_items = false;
        assert_eq!(
            handle_message(&off, &event).await.unwrap(),
            MonitorOutcome::Duplicate
        );
        assert_eq!(ctx.failure_dlq.receive(10, 30, 0).await.unwrap().len(), 0);
        // The record's writer died after the send: a delivery inside the lease waits.
        let key =
            crate::domain::layout::items::record_key(&ctx.config.layout.item_prefixes.items, &id);
        ctx.store.delete(&key).await.unwrap();
        let waited = handle_message(&ctx, &event).await;
        assert!(
            matches!(waited, Err(HandlerError::InFlight(_))),
            "{waited:?}"
        );
    }
}

/// An unreadable item record is no mark of a route: a failure found logged and unmarked is
/// routed (past its lease) and the record set aside, not left failing on every delivery
/// until its event is parked and the failure never routed.
#[tokio::test]
async fn an_unreadable_record_is_no_mark_of_a_route() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let config = Config::for_unit_tests(&[("GRANARY_ROUTE_LEASE_SECS", "0")]);
    let mut ctx = Ctx::in_memory(config);
    ctx.jobs = jobs.clone();
    let id = GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap();
    let name = crate::domain::job_name::job_name(None, &id, 1);
    let request = crate::contracts::job::job_request(&name, None, &id, 1);
    let job = jobs.submit(request).await.unwrap().job_id;
    let event = job_state_change(&jobs.end(&job, Ending::Exited(1)).unwrap()).to_string();
    let dead_lettered = MonitorOutcome::Routed {
        route: Route::FailureDlq,
    };
    assert_eq!(handle_message(&ctx, &event).await.unwrap(), dead_lettered);
    let key = crate::domain::layout::items::record_key(&ctx.config.layout.item_prefixes.items, &id);
    ctx.store
        .put(
            &key,
            bytes::Bytes::from_static(b"{not json"),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(handle_message(&ctx, &event).await.unwrap(), dead_lettered);
    let sent = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
    let bodies: Vec<&str> = sent.iter().map(|m| m.body.as_str()).collect();
    // Routed again (past its lease, as a delivery that died before the send would be),
    // and the record's rejection notice beside it.
    let routed = bodies
        .iter()
        .filter(|b| b.contains("\"attempt\":1"))
        .count();
    let rejected = bodies
        .iter()
        .filter(|b| b.contains("corrupt_item_record"))
        .count();
    assert_eq!((bodies.len(), routed, rejected), (3, 2, 1), "{bodies:#?}");
}
