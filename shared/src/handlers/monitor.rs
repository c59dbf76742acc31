//! The job monitor: one Batch Job State Change event in, the outcome logged, then routed.

use super::Ctx;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::batch_event::BatchEventError;
use crate::domain::classify::Route;
use crate::domain::job_end::{on_job_event, EventRejection, FinishedJob, JobEnd};
use crate::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use crate::handlers::ingest::processing::{self, EndedProcessing, ProcessingOutcome};
use crate::handlers::HandlerError;
use crate::repositories::logs::FailureLogged;
use chrono::Utc;
use serde::Serialize;

/// What the monitor did with one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum MonitorOutcome {
    /// Success logged (and earlier failure logs relocated).
    Succeeded { relocated: usize },
    /// Failure logged and sent to the retry queue or the DLQ.
    Routed { route: Route },
    /// This event was already handled (a duplicate delivery).
    Duplicate,
    /// A failure for a granule that has already succeeded, at `by_attempt` (a late or reordered
    /// event, or a timeout the sweeper judged of an attempt that had succeeded): not routed; an
    /// item record still at the failing attempt follows the success.
    AlreadySucceeded { by_attempt: u32 },
    /// Not a terminal state: nothing to do.
    Ignored,
    /// The parent of an array window ended: its children's own events carry their granules.
    ArrayParent,
    /// An ingest job's processing job ended: its record moved on (or the end was stale).
    IngestProcessing {
        ingest_job: String,
        outcome: ProcessingOutcome,
    },
    /// An event no delivery could ever handle: recorded under the reject prefix and
    /// dead-lettered with its reason at once, instead of being redelivered until SQS parks it.
    Rejected { reason: String },
}

pub async fn handle_sqs(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    super::for_each_record(event, 10, |body| async move {
        handle_message(ctx, &body).await.map(|_| ())
    })
    .await
}

/// Handles one SQS message body: an EventBridge event as delivered by the rule. Transient errors
/// (S3, SQS) are returned, so SQS redelivers the message; permanent ones are rejected here.
pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, HandlerError> {
    let outcome = handle_event(ctx, body).await?;
    use crate::domain::metrics::Metric;
    match outcome {
        MonitorOutcome::Rejected { .. } => ctx.metrics.count(Metric::EventsRejected, &[], 1),
        _ => ctx.metrics.count(Metric::EventsHandled, &[], 1),
    }
    Ok(outcome)
}

async fn handle_event(ctx: &Ctx, body: &str) -> Result<MonitorOutcome, HandlerError> {
    let decided = serde_json::from_str::<serde_json::Value>(body)
        .map_err(|e| EventRejection::from(BatchEventError::from(e)))
        .and_then(|mut raw| {
            let (_, end) = on_job_event(&raw)?;
            // Moved out, not copied: the event is done with once decided.
            let detail = raw
                .get_mut("detail")
                .map_or(serde_json::Value::Null, serde_json::Value::take);
            Ok((end, detail))
        });
    match decided {
        Err(rejection) => {
            let reason = rejection.to_string();
            ctx.reject(rejection.kind(), &reason, "batch events queue", body)
                .await?;
            Ok(MonitorOutcome::Rejected { reason })
        }
        Ok((JobEnd::NotFinished { job_id, status }, _)) => {
            tracing::info!(
                job_id,
                status = status.as_str(),
                "non-terminal event ignored"
            );
            Ok(MonitorOutcome::Ignored)
        }
        Ok((
            JobEnd::IngestJob {
                job_id,
                job_name,
                ingest_job,
                classification,
            },
            _,
        )) => {
            let Ok(ingest_job) = crate::domain::ingest::index::JobId::parse(&ingest_job) else {
                let reason = format!(
                    "job {job_id} names ingest job {:?}, which is no ingest job id",
                    crate::domain::poison::RawText::of(&ingest_job).shown()
                );
                ctx.reject(
                    crate::domain::poison::RejectKind::EventWithoutGranule,
                    &reason,
                    "batch events queue",
                    body,
                )
                .await?;
                return Ok(MonitorOutcome::Rejected { reason });
            };
            let ended = EndedProcessing {
                ingest_job,
                batch_job_id: job_id,
                batch_job_name: job_name,
                classification,
            };
            let ingest = ctx.ingest();
            let outcome = processing::on_end(
                &ingest,
                ctx.failure_dlq.as_ref(),
                ctx.config.max_attempt(),
                &ended,
                Utc::now(),
            )
            .await?;
            Ok(MonitorOutcome::IngestProcessing {
                ingest_job: ended.ingest_job.to_string(),
                outcome,
            })
        }
        Ok((JobEnd::Finished(finished), detail)) => job_finished(ctx, finished, detail, BY).await,
        Ok((JobEnd::WindowChild(child), detail)) => {
            window_child(ctx, child, detail, BY, "batch events queue", Some(body)).await
        }
        Ok((JobEnd::ArrayParent { job_id, status }, _)) => {
            tracing::info!(
                job_id,
                status = status.as_str(),
                "an array window's parent ended: its children's events are handled one by one"
            );
            Ok(MonitorOutcome::ArrayParent)
        }
    }
}

/// A child of an array window ended: its granule is read from the window claim, then its end is
/// handled as a single job's would be. A child whose claim cannot name its granule is rejected
/// with the reason (no delivery could ever handle it).
async fn window_child(
    ctx: &Ctx,
    child: crate::domain::job_end::WindowChildEnd,
    detail: serde_json::Value,
    by: &str,
    found_by: &str,
    // What the reject prefix keeps of an event that cannot be handled: the message as it came,
    // else (a DescribeJobs answer) the detail, written out only when it is rejected.
    input: Option<&str>,
) -> Result<MonitorOutcome, HandlerError> {
    use crate::repositories::windows::{ChildOf, WindowGranuleError};
    // The claim is in the array's campaign's state, whichever campaign this stack runs now.
    let ctx = &*ctx.in_campaign(child.campaign.as_ref());
    let parent = child
        .job_id
        .rsplit_once(':')
        .map_or(child.job_id.as_str(), |(p, _)| p);
    let granule = match &child.claim_bucket {
        Some(bucket) if *bucket != ctx.config.layout.bucket => {
            Err(WindowGranuleError::Unknown(format!(
                "its window claim is in bucket {}, not granary's",
                crate::domain::poison::RawText::of(bucket).shown()
            )))
        }
        _ => {
            ctx.window_granules
                .granule(
                    ctx.store.as_ref(),
                    &ctx.config.layout.claim_prefix,
                    ChildOf {
                        claim_key: &child.claim_key,
                        parent,
                        token: child.claim_token.as_deref(),
                        index: child.index,
                    },
                )
                .await
        }
    };
    match granule {
        Ok(entry) => job_finished(ctx, child.of_entry(entry), detail, by).await,
        Err(WindowGranuleError::Read(e)) => Err(e.into()),
        Err(WindowGranuleError::Unknown(why)) => {
            let reason = format!("array child {}: {why}", child.job_id);
            let input = input.map_or_else(|| detail.to_string(), str::to_owned);
            ctx.reject(
                crate::domain::poison::RejectKind::EventWithoutGranule,
                &reason,
                found_by,
                &input,
            )
            .await?;
            Ok(MonitorOutcome::Rejected { reason })
        }
    }
}

/// Who the item record names for an end the monitor's own handler took from its event.
pub const BY: &str = "job-monitor";

/// Who the item record names for an end found by DescribeJobs (the reconciler, the sweeper): a
/// scheduled pass, which no SQS redelivery repeats, so the reconciler's next pass pays the
/// history entries such a write may owe (`reconciler::windows`).
pub const RECOVERED_BY: &str = "job-monitor (end found by DescribeJobs)";

/// The attempt a caller knows a job was submitted for (the reconciler, from its own claim), and
/// the window claim whose records are made at its children's ends, if it is one.
#[derive(Clone, Copy)]
pub struct KnownAttempt<'a> {
    pub attempt: &'a crate::domain::granule::GranuleProcessingEvent,
    pub listed_in: Option<&'a str>,
}

/// A job as DescribeJobs describes it, handled as its event would have been (the reconciler and the
/// sweeper find ends whose event never came). `Ok(None)` while the job has not ended; a
/// description no code can read is recorded and dead-lettered like an unreadable event, and
/// when the caller knows the attempt (`known`), that attempt's end is then logged and routed as
/// a final failure with the reason (`job_end::undescribable`): its event never came, so nothing
/// else would ever end it.
pub async fn described_job(
    ctx: &Ctx,
    description: crate::ports::JobDescription,
    found_by: &str,
    known: Option<KnownAttempt<'_>>,
) -> Result<Option<MonitorOutcome>, HandlerError> {
    if !description.summary.status.is_terminal() {
        return Ok(None);
    }
    let decided = <crate::domain::batch_event::JobDetail as serde::Deserialize>::deserialize(
        &description.detail,
    )
    .map_err(|e| EventRejection::from(BatchEventError::from(e)))
    .and_then(|detail| crate::domain::job_end::on_job_detail(&detail));
    match decided {
        Ok(JobEnd::Finished(finished)) => Ok(Some(
            job_finished(ctx, finished, description.detail, RECOVERED_BY).await?,
        )),
        Ok(JobEnd::WindowChild(child)) => Ok(Some(
            window_child(ctx, child, description.detail, RECOVERED_BY, found_by, None).await?,
        )),
        Ok(JobEnd::NotFinished { .. } | JobEnd::IngestJob { .. } | JobEnd::ArrayParent { .. }) => {
            Ok(None)
        }
        Err(rejection) => {
            let summary = &description.summary;
            let reason = format!(
                "DescribeJobs answer for job {}: {rejection}",
                summary.job_id
            );
            let kept_at = ctx
                .reject(
                    rejection.kind(),
                    &reason,
                    found_by,
                    &description.detail.to_string(),
                )
                .await?;
            let known =
                known.filter(|_| !crate::mutants::on("unreadable-description-left-unended"));
            let Some(known) = known else {
                return Ok(Some(MonitorOutcome::Rejected { reason }));
            };
            // After the reject is kept: a crash between the two describes the job again on the
            // next pass, and its end is logged then (the log is the attempt's end).
            let finished = FinishedJob {
                listed_in: known.listed_in.map(str::to_owned),
                ..crate::domain::job_end::undescribable(
                    known.attempt.clone(),
                    ctx.campaign().cloned(),
                    &summary.job_id,
                    &rejection.to_string(),
                )
            };
            let detail = crate::domain::job_end::undescribable_detail(
                &summary.job_id,
                &summary.job_name,
                summary.status.as_str(),
                &kept_at,
            );
            Ok(Some(
                job_finished(ctx, finished, detail, RECOVERED_BY).await?,
            ))
        }
    }
}

/// An end already logged, handled again from its log (which holds the job's detail as its event
/// or DescribeJobs gave it): for an end whose item record never followed its log, once Batch no
/// longer describes the job. Duplicate-safe like any delivery. `listed_in`: the window claim of
/// an array whose records are made at its children's ends, the record's source.
pub async fn logged_end(
    ctx: &Ctx,
    log: Box<LogRecord>,
    by: &str,
    listed_in: Option<&str>,
) -> Result<MonitorOutcome, HandlerError> {
    let LogRecord {
        granule_id,
        attempt,
        classification,
        route,
        job,
        spot_ends_before,
        ..
    } = *log;
    let finished = FinishedJob {
        granule: crate::domain::granule::GranuleProcessingEvent {
            granule_id,
            attempt,
        },
        // The log was found in this context's campaign.
        campaign: ctx.campaign().cloned(),
        classification,
        route,
        spot_ends_before,
        listed_in: listed_in.map(str::to_owned),
    };
    job_finished(ctx, finished, job, by).await
}

/// Logs a finished job's outcome, then routes its granule. `detail` is the whole JobDetail as
/// Batch gave it (the log keeps it, `attempts[]` included, so Spot reclaims Batch absorbed stay
/// countable). Also called for jobs found finished by other means than an event.
pub async fn job_finished(
    ctx: &Ctx,
    finished: FinishedJob,
    detail: serde_json::Value,
    by: &str,
) -> Result<MonitorOutcome, HandlerError> {
    // Every log line of the end's handling carries its granule, attempt, job and campaign.
    let span = tracing::info_span!(
        "job_end",
        granule_id = %finished.granule.granule_id,
        attempt = finished.granule.attempt,
        job_id = detail.get("jobId").and_then(|v| v.as_str()).unwrap_or("?"),
        campaign = finished.campaign.as_ref().map_or("", |c| c.as_str()),
    );
    // The end is handled in its job's campaign's state, whichever campaign this stack runs now:
    // a campaign switched away from while its jobs ran is still finished where it lives.
    let ctx = ctx.in_campaign(finished.campaign.as_ref());
    tracing::Instrument::instrument(handle_end(&ctx, finished, detail, by), span).await
}

async fn handle_end(
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
    let record = LogRecord {
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
        logged_at: Utc::now(),
        routed_at: None,
        superseded: None,
        revoked: None,
        job: detail,
        spot_ends_before,
    };
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
    let record_end = match outcome {
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
        _ => Some((route, reason.clone())),
    };
    if let Some((record_route, record_reason)) = record_end {
        let end = super::item_sync::End {
            job_id: &ended_job,
            ends: crate::domain::lifecycle::decisions::end_states(record_route),
            reason: &record_reason,
            listed_in: listed_in.as_deref(),
            repeated: matches!(outcome, MonitorOutcome::Duplicate),
        };
        super::item_sync::finished(ctx, &granule, end, by).await?;
    }
    // Logged, routed, recorded: the attempt leaves the open-claims index the reconciler reads.
    let marker =
        crate::domain::layout::claims::claim_key(&ctx.config.layout.open_claim_prefix, &granule);
    crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        "removing an open-claims marker",
        || ctx.store.delete(&marker),
        crate::ports::StoreError::is_transient,
    )
    .await?;
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

/// The automatic brake (`domain::brake`): this end joins the instance's window; past a
/// threshold the feeder's hold is placed (If-None-Match: an operator's hold, or an earlier
/// brake's, is kept) with the reason and the latest failures behind it. A hold that cannot be
/// placed now is tried again at the next end; it never fails the end's handling, which is done.
pub async fn brake(ctx: &Ctx, kind: crate::domain::brake::EndKind, what: String) {
    let settings = ctx.config.brake;
    let braking = {
        let mut window = ctx.end_window.lock().unwrap_or_else(|p| p.into_inner());
        window.record(kind, what, &settings);
        window.judge(&settings)
    };
    let Some(braking) = braking else { return };
    let hold = crate::domain::hold::Hold {
        reason: braking.reason,
        held_by: "job-monitor (automatic brake)".to_owned(),
        at: Utc::now(),
        evidence: braking.evidence,
        cancel: None,
    };
    let placed =
        crate::repositories::place_hold(ctx.store.as_ref(), &ctx.config.layout.hold_key, &hold)
            .await;
    match placed {
        Ok(None) => {
            tracing::warn!(reason = hold.reason, evidence = ?hold.evidence, "automatic brake: feeder held");
            ctx.metrics
                .count(crate::domain::metrics::Metric::FeederBraked, &[], 1);
        }
        Ok(Some(existing)) => {
            tracing::info!(
                held_by = existing.held_by,
                "automatic brake: the feeder is held already"
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "automatic brake: the hold could not be placed; tried again at the next end");
            return;
        }
    }
    ctx.end_window
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
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
            let age = Utc::now().signed_duration_since(log.value.logged_at);
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
                    let end = super::item_sync::End {
                        job_id: &listed.job_id,
                        ends: crate::domain::lifecycle::decisions::end_states(route),
                        reason: &listed.classification.reason,
                        listed_in: None,
                        repeated: false,
                    };
                    Box::pin(super::item_sync::finished(ctx, &granule, end, BY)).await?;
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
    // The granule's capacity ends so far: the job's count of those before it, and this one.
    let before = record
        .spot_ends_before
        .unwrap_or_else(|| crate::domain::job_tags::spot_ends_before(&record.job));
    // The job's parameter is input from outside: a count past u32's end stays at its end.
    let spot_ends = before.saturating_add(u32::from(crate::domain::attempt_budget::is_spot_end(
        record.classification.failure.as_ref(),
    )));
    let message = RetryMessage::ended(record.granule_id.clone(), record.attempt)
        .with_spot_ends(spot_ends)
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
        at: Utc::now(),
    };
    crate::repositories::cancels::list(ctx.store.as_ref(), &ctx.config.layout.claim_prefix, &entry)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{job_state_change, Ending, MemoryJobRunner};
    use crate::config::Config;
    use crate::domain::batch_event::JobStatus;
    use crate::domain::granule::GranuleId;
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
            let key = crate::domain::layout::items::record_key(
                &ctx.config.layout.item_prefixes.items,
                &id,
            );
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
        let key =
            crate::domain::layout::items::record_key(&ctx.config.layout.item_prefixes.items, &id);
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
}
