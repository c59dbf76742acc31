//! One job's end: logged first, then routed (success, retry, dead letter, cancelled), and
//! counted.

use super::*;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::classify::Route;
use crate::domain::job_end::FinishedJob;
use crate::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use crate::handlers::Ctx;
use crate::handlers::HandlerError;
use crate::repositories::logs::FailureLogged;

pub(super) async fn handle_end(
    ctx: &Ctx,
    finished: FinishedJob,
    detail: serde_json::Value,
    by: &str,
) -> Result<MonitorOutcome, HandlerError> {
    // The campaign is this context's now (`job_finished` moved it there).
    let FinishedJob {
        granule,
        classification,
        route,
        spot_ends_before,
        listed_in,
        ..
    } = finished;
    let facts = ctx.config.layout.id_parser.facts(&granule.granule_id);
    let record = log_record_of(&granule, &classification, route, detail, spot_ends_before);
    let key = LogKey::new(record.outcome, &facts, &granule.granule_id, granule.attempt);
    let reason = classification.reason.clone();
    let ended_job = record.job_id.clone();
    let class = classification
        .failure
        .as_ref()
        .map_or("unknown", |f| f.class());
    let end_kind = crate::domain::brake::end_kind(classification.failure.as_ref());
    // The route the granule took: this end's, or an earlier handling's of the same attempt (a
    // log already there wins, and the record must follow the message that was sent).
    let (outcome, route) = match route {
        Route::Done => (log_success(ctx, &key, &record).await?, route),
        Route::RetryQueue | Route::FailureDlq | Route::Cancelled => {
            log_and_route_failure(ctx, &key, record).await?
        }
    };
    count_end(ctx, &outcome, facts.platform.as_deref(), class);
    // The log is the evidence and the route is the action; the item record follows them, also on
    // a duplicate delivery (the first may have died before getting here). A failure of a granule
    // that succeeded at this attempt or an earlier one follows the success: a record still
    // PROCESSING this attempt (the success logged by an earlier attempt's late end, or by this
    // attempt's own end whose handler died before the record) would otherwise sit there with
    // nothing coming; a record at a later attempt is left alone (`decisions::on_job_finished`).
    // A success at a later attempt moves the record itself, at its own end.
    let ended = (ended_job.as_str(), listed_in.as_deref(), reason.as_str());
    record_follows(ctx, &granule, &outcome, route, ended, by).await?;
    close_open_claim(ctx, &granule).await?;
    // Last, once the end is handled: the brake only ever places a hold. Only ends that came as
    // events are judged: the item sweeper's recoveries (ends found by DescribeJobs) run in
    // another function, which neither reads the brake's settings nor may place a hold.
    // A duplicate delivery is judged again: after a handling that died placing the hold, the
    // redelivery is the only end left to place it (it may count the end twice in this
    // instance's window, as EventBridge's at-least-once delivery may anyway).
    if by == BY
        && matches!(
            outcome,
            MonitorOutcome::Succeeded { .. }
                | MonitorOutcome::Routed { .. }
                | MonitorOutcome::Duplicate
        )
    {
        brake(ctx, end_kind, format!("{}: {reason}", granule.granule_id)).await;
    }
    Ok(outcome)
}

/// The log of this end: the whole job description beside the classification and route.
fn log_record_of(
    granule: &crate::domain::granule::GranuleProcessingEvent,
    classification: &crate::domain::classify::Classification,
    route: Route,
    detail: serde_json::Value,
    spot_ends_before: Option<u32>,
) -> LogRecord {
    let job_id = detail
        .get("jobId")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    let job_name = detail
        .get("jobName")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_owned();
    tracing::info!(
        granule_id = %granule.granule_id, attempt = granule.attempt, job_id,
        outcome = ?classification.outcome, ?route, reason = classification.reason,
        batch_rules = classification.batch_rules, "job finished"
    );
    LogRecord {
        granule_id: granule.granule_id.clone(),
        attempt: granule.attempt,
        outcome: if route == Route::Done {
            LogOutcome::Success
        } else {
            LogOutcome::Failure
        },
        classification: classification.clone(),
        route,
        job_id,
        job_name,
        logged_at: crate::clock::now(),
        routed_at: None,
        superseded: None,
        revoked: None,
        job: detail,
        spot_ends_before,
    }
}

/// The item record follows the log and the route (`item_sync::finished`), also on a duplicate
/// delivery: `ended` is the job, the window claim it was listed in, and the end's reason.
async fn record_follows(
    ctx: &Ctx,
    granule: &crate::domain::granule::GranuleProcessingEvent,
    outcome: &MonitorOutcome,
    route: Route,
    (ended_job, listed_in, reason): (&str, Option<&str>, &str),
    by: &str,
) -> Result<(), HandlerError> {
    let record_end = match *outcome {
        MonitorOutcome::AlreadySucceeded { by_attempt }
            if by_attempt > granule.attempt
                || crate::mutants::on("already-succeeded-leaves-the-record") =>
        {
            None
        }
        MonitorOutcome::AlreadySucceeded { by_attempt } => Some((
            Route::Done,
            format!("{reason}; the granule succeeded at attempt {by_attempt}"),
        )),
        _ => Some((route, reason.to_owned())),
    };
    if let Some((record_route, record_reason)) = record_end {
        let end = crate::handlers::item_sync::End {
            job_id: ended_job,
            ends: crate::domain::lifecycle::decisions::end_states(record_route),
            reason: &record_reason,
            listed_in,
            repeated: matches!(outcome, MonitorOutcome::Duplicate),
        };
        crate::handlers::item_sync::finished(ctx, granule, end, by).await?;
    }
    Ok(())
}

/// Logged, routed, recorded: the attempt leaves the open-claims index the reconciler reads.
async fn close_open_claim(
    ctx: &Ctx,
    granule: &crate::domain::granule::GranuleProcessingEvent,
) -> Result<(), HandlerError> {
    ctx.claims().close_open_claim(granule).await?;
    Ok(())
}

/// An end this delivery settled, counted once (a duplicate found as such is not).
fn count_end(ctx: &Ctx, outcome: &MonitorOutcome, platform: Option<&str>, class: &str) {
    use crate::domain::metrics::{Metric, FAILURE_CLASS, PLATFORM};
    let platform = platform.unwrap_or("unknown");
    match outcome {
        MonitorOutcome::Succeeded { .. } => {
            ctx.metrics
                .count(Metric::GranulesSucceeded, &[(PLATFORM, platform)], 1)
        }
        MonitorOutcome::Routed { route } => {
            let metric = match route {
                Route::RetryQueue => Metric::GranulesRetried,
                Route::FailureDlq | Route::Done => Metric::GranulesDeadLettered,
                Route::Cancelled => {
                    return ctx
                        .metrics
                        .count(Metric::GranulesCancelled, &[(PLATFORM, platform)], 1)
                }
            };
            let dims = [(PLATFORM, platform), (FAILURE_CLASS, class)];
            ctx.metrics.count(metric, &dims, 1)
        }
        _ => {}
    }
}

async fn log_success(
    ctx: &Ctx,
    key: &LogKey,
    record: &LogRecord,
) -> Result<MonitorOutcome, HandlerError> {
    let logged = ctx.logs().log_success(key, record).await?;
    Ok(if logged.duplicate && logged.relocated == 0 {
        MonitorOutcome::Duplicate
    } else {
        MonitorOutcome::Succeeded {
            relocated: logged.relocated,
        }
    })
}

/// Logs the failure, routes the granule (retry queue or DLQ), then records that it was routed: a
/// crash after the send leaves an unrouted log that the next delivery routes again (the
/// requeuer's claim absorbs the second message), never a granule with no message. The record of
/// the route is the log's `routed_at` without item records; with them it is the item record's
/// move past the attempt, which `handle_end` makes right after this (`Standing::past`), and the
/// log is not written a second time (a failure's log PUT saved: 0.027 a granule under the
/// default fault plan, issue 31's cost floor). Also returns the route
/// taken: the attempt's log, once written, decides it (two handlers of one attempt may judge it
/// differently: the reconciler dead-letters a job Batch forgot, the item sweeper retries an
/// attempt past its time).
async fn log_and_route_failure(
    ctx: &Ctx,
    key: &LogKey,
    record: LogRecord,
) -> Result<(MonitorOutcome, Route), HandlerError> {
    let logs = ctx.logs();
    let judged = record.route;
    // A late failure for a granule that already succeeded must not send it round again.
    if let Some(by_attempt) = logs.succeeded_attempt(key).await? {
        tracing::warn!(granule_id = %record.granule_id, attempt = record.attempt, by_attempt, "failure for an already-succeeded granule: not routed");
        logs.file_late_failure(key, record, by_attempt).await?;
        return Ok((MonitorOutcome::AlreadySucceeded { by_attempt }, judged));
    }
    let log = match logs.log_failure(key, record).await? {
        FailureLogged::New(log) => log,
        FailureLogged::AlreadyRouted(route) => return Ok((MonitorOutcome::Duplicate, route)),
        FailureLogged::Unrouted(log) => {
            // With item records a log is never marked: a record past the attempt says its end
            // was routed (and recorded) by an earlier delivery.
            if routed_by_record(ctx, &log.value).await? {
                return Ok((MonitorOutcome::Duplicate, log.value.route));
            }
            // Either a concurrent delivery is routing it right now (wait: SQS brings this message
            // back) or one died before routing (finish its work).
            let age = crate::clock::now().signed_duration_since(log.value.logged_at);
            if age.to_std().unwrap_or_default() < ctx.config.leases.route_lease {
                return Err(HandlerError::InFlight(format!(
                    "attempt {} of {} is being routed by another delivery",
                    log.value.attempt, log.value.granule_id
                )));
            }
            log
        }
    };
    let record = &log.value;
    let route = record.route;
    let (queue, outcome) = match route {
        Route::RetryQueue => (&ctx.retry_queue, Outcome::Retryable),
        Route::FailureDlq | Route::Done => (&ctx.failure_dlq, Outcome::NonRetryable),
        Route::Cancelled => {
            // The cancelled list is this route's queue: written (overwritten alike by a
            // redelivery) before the log is marked routed, as a message is sent.
            if crate::mutants::on("cancel-listed-after-routing") {
                let listed = record.clone();
                if ctx.config.layout.track_items {
                    // With item records the route's mark is the record's move, made here first.
                    let granule = crate::domain::granule::GranuleProcessingEvent {
                        granule_id: listed.granule_id.clone(),
                        attempt: listed.attempt,
                    };
                    let end = crate::handlers::item_sync::End {
                        job_id: &listed.job_id,
                        ends: crate::domain::lifecycle::decisions::end_states(route),
                        reason: &listed.classification.reason,
                        listed_in: None,
                        repeated: false,
                    };
                    Box::pin(crate::handlers::item_sync::finished(ctx, &granule, end, BY)).await?;
                }
                mark_routed(ctx, key, log).await?;
                Box::pin(put_cancelled(ctx, &listed)).await?;
                return Ok((MonitorOutcome::Routed { route }, route));
            }
            // Boxed, as the rare route: the monitor's future stays the size it was.
            Box::pin(put_cancelled(ctx, record)).await?;
            mark_routed(ctx, key, log).await?;
            return Ok((MonitorOutcome::Routed { route }, route));
        }
    };
    let notice = Notice::new(outcome, record.classification.reason.clone())
        .job(record.job_id.clone())
        .attempt(record.attempt);
    let message = retry_message(record)
        .of_campaign(ctx.campaign().cloned())
        .to_message(&notice)?;
    // A refused send sent nothing; one whose answer was lost may send it twice, which the
    // requeuer's claim (or the DLQ's reader) absorbs, as with any redelivery.
    crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        "routing a failure",
        || queue.send(message.clone()),
        |_| true,
    )
    .await?;
    mark_routed(ctx, key, log).await?;
    Ok((MonitorOutcome::Routed { route }, route))
}

/// Whether an earlier delivery routed this failure and then moved its item record past the
/// attempt: the mark of the route with item records. Read whatever the setting, as only a
/// delivery that finds an unmarked log asks: logs written while records were on stay routed
/// after records are switched off. An unreadable record is no mark: the failure is routed, and
/// the record set aside after that (`item_sync::finished`), where an error here would leave the
/// failure unrouted once its event was parked.
async fn routed_by_record(ctx: &Ctx, log: &LogRecord) -> Result<bool, HandlerError> {
    if crate::mutants::on("monitor-routes-a-recorded-failure-again") {
        return Ok(false);
    }
    match ctx.items().standing(&log.granule_id).await {
        Ok(standing) => Ok(standing.is_some_and(|s| s.past(log.attempt))),
        Err(crate::repositories::json::RecordError::Repository(
            crate::repositories::RepositoryError::Corrupt { key, source },
        )) => {
            tracing::warn!(key, error = %source, "unreadable item record: the failure is routed");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Marks a routed failure's log, without item records: the only evidence then that its message
/// was sent (read by a redelivery, so as not to route twice, and by the reconciler). With item
/// records the record's move past the attempt is that evidence, and follows at once.
async fn mark_routed(
    ctx: &Ctx,
    key: &LogKey,
    log: crate::repositories::Versioned<LogRecord>,
) -> Result<(), HandlerError> {
    if ctx.config.layout.track_items {
        return Ok(());
    }
    ctx.logs().mark_routed(key, log).await?;
    Ok(())
}

/// The attempt `granary cancel` ended, on the campaign's cancelled list for `granary resume
/// --cancelled`.
async fn put_cancelled(ctx: &Ctx, record: &LogRecord) -> Result<(), HandlerError> {
    let cancel = match &record.classification.failure {
        Some(crate::domain::classify::FailureKind::GranaryCancel { cancel }) => cancel.clone(),
        _ => String::new(),
    };
    let entry = crate::domain::cancel::Cancelled {
        granule_id: record.granule_id.clone(),
        attempt: record.attempt,
        cancel,
        job_id: record.job_id.clone(),
        reason: record.classification.reason.clone(),
        at: crate::clock::now(),
    };
    ctx.cancelled().list(&entry).await?;
    Ok(())
}

/// The message a failure is routed with: its capacity ends and its memory carried on.
fn retry_message(record: &LogRecord) -> RetryMessage {
    // The granule's capacity ends so far: the job's count of those before it, and this one.
    let before = record
        .spot_ends_before
        .unwrap_or_else(|| crate::domain::job_tags::spot_ends_before(&record.job));
    // The job's parameter is input from outside: a count past u32's end stays at its end.
    let spot_ends = before.saturating_add(u32::from(crate::domain::attempt_budget::is_spot_end(
        record.classification.failure.as_ref(),
    )));
    // The memory the attempt had: where it ran out (the next asks for more), or where granary
    // set it (the next keeps it); `domain::memory`.
    let out_of_memory = matches!(
        record.classification.failure,
        Some(crate::domain::classify::FailureKind::OutOfMemory)
    );
    let memory_mib = if out_of_memory {
        crate::domain::memory::memory_of(&record.job)
    } else {
        crate::domain::memory::memory_set(&record.job)
    };
    RetryMessage::ended(record.granule_id.clone(), record.attempt)
        .with_spot_ends(spot_ends)
        .with_memory(memory_mib, out_of_memory)
}
