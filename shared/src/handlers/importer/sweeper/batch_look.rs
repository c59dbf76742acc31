//! The sweeper's look at Batch for a PROCESSING item past its time: a job Batch still knows is
//! handled as its event would have been; one it does not know timed out.

use super::{Ctx, BY};
use crate::domain::granule::GranuleProcessingEvent;
use crate::handlers::monitor::MonitorOutcome;
use crate::handlers::HandlerError;

/// A PROCESSING attempt past its time whose job Batch does not know, ended through the monitor's
/// own handler like any end (`domain::job_end::timed_out`): its failure log first, then the
/// route (the retry queue, or the DLQ once the item's attempts are spent), then the item record
/// (PROCESSING → PROCESSING_FAILED, and ABANDONED on giving up). A crash between two of them
/// leaves an unrouted log the next sweep routes once its lease has run (the record is still
/// PROCESSING and overdue). Logged before the next attempt exists, as every end is, so a success
/// of a later attempt supersedes this attempt's log at its key.
pub(super) async fn timed_out_attempt(
    ctx: &Ctx,
    attempt: GranuleProcessingEvent,
    job_id: Option<&str>,
    gives_up: bool,
    timeout: chrono::Duration,
) -> Result<MonitorOutcome, HandlerError> {
    let campaign = ctx.campaign();
    let name = crate::domain::job_name::job_name(campaign, &attempt.granule_id, attempt.attempt);
    let mut detail = crate::domain::job_end::timed_out_detail(job_id, &name);
    // The Spot ends before the attempt go on with it, from its claim (the timeout was not
    // Spot's), and so does the memory it asked for (`domain::memory`): the detail carries it as
    // the job did, for the retry the monitor sends.
    let placed = ctx.placed_before(&attempt).await?;
    if let Some(mib) = placed.memory_mib {
        detail["parameters"] =
            serde_json::json!({ crate::domain::memory::MEMORY_PARAM: mib.to_string() });
    }
    let finished = crate::domain::job_end::FinishedJob {
        spot_ends_before: Some(placed.spot_ends),
        ..crate::domain::job_end::timed_out(
            attempt,
            campaign.cloned(),
            timeout.num_seconds(),
            gives_up,
        )
    };
    crate::handlers::monitor::job_finished(ctx, finished, detail, BY).await
}

pub(super) enum JobSeen {
    Alive,
    Finished,
    /// Batch does not know the job (never created, or forgotten): the attempt timed out.
    Unknown,
}

/// What Batch says about a PROCESSING item's job; a finished job is handled as its event would
/// have been (the monitor's handler logs it, routes it and moves the item).
pub(super) async fn job_end(ctx: &Ctx, job_id: &str) -> Result<JobSeen, HandlerError> {
    // An array's child Batch does not describe yet is answered from its parent.
    let described =
        crate::ports::job_runner::describe_with_parents(ctx.jobs.as_ref(), &[job_id.to_owned()])
            .await
            .map_err(|e| HandlerError::during(format!("DescribeJobs {job_id}"), e))?;
    let Some(description) = described.into_iter().find(|d| d.summary.job_id == job_id) else {
        return Ok(JobSeen::Unknown);
    };
    let handled =
        // Not `known`: an unreadable description leaves the attempt to this sweeper's timeout,
        // which retries it while its attempts last.
        crate::handlers::monitor::described_job(
            ctx,
            description,
            "item sweeper (DescribeJobs)",
            None,
        )
            .await
            .map_err(|e| HandlerError::during(format!("handling job {job_id}'s end"), e))?;
    Ok(match handled {
        None => JobSeen::Alive,
        // Recorded and dead-lettered as unreadable; the attempt itself is treated as timed out.
        Some(crate::handlers::monitor::MonitorOutcome::Rejected { .. }) => JobSeen::Unknown,
        Some(_) => JobSeen::Finished,
    })
}
