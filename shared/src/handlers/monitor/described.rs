//! A job's end the monitor did not take from its event: found by DescribeJobs (the reconciler,
//! the sweeper), or already logged by another path; handled as its event would have been.

use super::*;
use crate::domain::batch_event::BatchEventError;
use crate::domain::job_end::{EventRejection, FinishedJob, JobEnd};
use crate::domain::layout::logs::LogRecord;
use crate::handlers::Ctx;
use crate::handlers::HandlerError;

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
