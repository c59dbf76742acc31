//! One granule of a window looked at: its end found, logged and its record moved past it.

use super::*;

/// `listed_in`: the window claim's key where the window's records are made at its ends (the
/// record a recovery makes names it as its source, as the monitor's would).
pub(super) async fn granule(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
    job_id: &str,
    description: Option<&JobDescription>,
    listed_in: Option<&str>,
    // Whether a description no code can read ends this attempt here
    // (`reconciler::unreadable_description_ends_here`).
    unreadable_ended: bool,
) -> Result<Granule, HandlerError> {
    let Some(description) = description else {
        return forgotten(ctx, attempt, job_id, listed_in).await;
    };
    if !description.summary.status.is_terminal() {
        return Ok(Granule::StillRunning);
    }
    if let Some(Logged::AndRecorded) = handled(ctx, attempt).await? {
        return Ok(Granule::Handled);
    }
    // Not handled, or logged with its record not moved (the monitor died between the two, and
    // its event was parked or lost): its handler again, which logs once, routes once and makes
    // or moves the record.
    Ok(
        // Copied only here, for the rare end no one handled: most granules a pass looks at are.
        // Known where nothing else would end it: a child Batch describes unreadably, whose job
        // this claim recorded, is this window's granule i; its end is dead-lettered with why.
        match monitor::described_job(
            ctx,
            description.clone(),
            "reconciler (DescribeJobs)",
            unreadable_ended.then_some(monitor::KnownAttempt { attempt, listed_in }),
        )
        .await?
        {
            None => Granule::StillRunning,
            Some(
                MonitorOutcome::Duplicate
                | MonitorOutcome::AlreadySucceeded { .. }
                | MonitorOutcome::Rejected { .. },
            ) => Granule::Handled,
            Some(outcome) => {
                tracing::info!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, ?outcome, "finished job reconciled from DescribeJobs");
                Granule::Recovered
            }
        },
    )
}

/// A granule whose job Batch no longer describes (it keeps ended jobs for days, not for ever).
async fn forgotten(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
    job_id: &str,
    listed_in: Option<&str>,
) -> Result<Granule, HandlerError> {
    // With item records made at submission, the item sweeper times such an attempt out (the
    // window's open marker names it to the sweeper) and the record leaves PROCESSING at it:
    // handled (`handled` looks at the record first). A granule of an array window recorded at
    // its ends has no record to time out: it is dead-lettered below.
    match handled(ctx, attempt).await? {
        Some(Logged::AndRecorded) => Ok(Granule::Handled),
        // Its end was logged and the record never followed: handled again from the log, which
        // holds the job's detail as its event or DescribeJobs gave it.
        Some(Logged::RecordBehind(log)) => {
            monitor::logged_end(ctx, log, monitor::RECOVERED_BY, listed_in).await?;
            Ok(Granule::Recovered)
        }
        None => {
            tracing::warn!(granule_id = %attempt.granule_id, attempt = attempt.attempt, job_id, "Batch no longer knows this job; its end was never logged: dead-lettered");
            super::super::route_forgotten(ctx, attempt, job_id, listed_in).await?;
            Ok(Granule::UnknownToBatch)
        }
    }
}

/// Whether the monitor has logged (and, a failure, routed) this attempt's end: the job has
/// ended, and `granary cancel` leaves it alone.
pub(crate) async fn end_logged(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
) -> Result<bool, HandlerError> {
    Ok(handled(ctx, attempt).await?.is_some())
}

/// How far the monitor got with an attempt's end.
pub(super) enum Logged {
    /// Logged (a failure also routed) and, with item records, the record moved past the attempt.
    AndRecorded,
    /// Logged, and the item record not made or not moved: the log, to hand the end on again.
    RecordBehind(Box<LogRecord>),
}

/// Whether the monitor finished with this attempt's end: logged (a failure also routed) and,
/// with item records, the record moved past the attempt. No record is not "handled": the
/// monitor makes a record still missing when it handles an end (its submitter's may come
/// later), so a record that is missing after the log means the monitor died in between.
///
/// With item records the record is read first, and a record past the attempt answers alone
/// (one GET a granule, not two): every writer that moves a record past PROCESSING has done the
/// rest before — the monitor logs and routes first (`monitor::handle_end`), and so does the
/// sweeper's timed-out attempt, through the same handler (`importer::sweeper`); the requeuer
/// moves only a routed attempt.
pub(super) async fn handled(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
) -> Result<Option<Logged>, HandlerError> {
    let layout = &ctx.config.layout;
    let moved = if layout.track_items {
        let moved = record_moved_past(ctx, attempt).await?;
        if moved == Some(true) {
            return Ok(Some(Logged::AndRecorded));
        }
        Some(moved)
    } else {
        None
    };
    let facts = layout.id_parser.facts(&attempt.granule_id);
    let success = LogKey::new(
        LogOutcome::Success,
        &facts,
        &attempt.granule_id,
        attempt.attempt,
    );
    // Each read tried again on its own while refused: under throttling, redoing the granule's
    // whole look for one refused read multiplied its calls (1,000 granules at 30%: 9 a granule
    // for the reconciler instead of 3).
    let logs = ctx.logs();
    let log = match logs
        .read_retrying(&success, "reading a success log")
        .await?
    {
        Some(log) => Some(log),
        None => {
            let failure = success.with_outcome(LogOutcome::Failure);
            logs.read_retrying(&failure, "reading a failure log")
                .await?
                // Without item records a failure counts once it is marked routed. With them
                // no failure log is marked (the record's move is the mark), and the record was
                // not past the attempt: the end is handed on again from this log either way.
                .filter(|log| layout.track_items || log.routed_at.is_some())
        }
    };
    let Some(log) = log else {
        return Ok(None);
    };
    // Without item records the log is all there is; with them, the record was not past it.
    let Some(moved) = moved else {
        return Ok(Some(Logged::AndRecorded));
    };
    if crate::mutants::on("reconciler-counts-no-record-as-handled") && moved.is_none() {
        return Ok(Some(Logged::AndRecorded));
    }
    Ok(Some(Logged::RecordBehind(Box::new(log))))
}

/// Whether the item record has moved past this attempt (a later attempt, or this one's end);
/// `None` without a record. A record behind the attempt (READY at attempt 0, made by the
/// importer between the feeder's look and the window's records) is not past it.
async fn record_moved_past(
    ctx: &Ctx,
    attempt: &GranuleProcessingEvent,
) -> Result<Option<bool>, HandlerError> {
    // A record holds the entries it has not written out, so one whose writer died right after it
    // (a monitor whose event was then parked in the events DLQ) owes nothing to repair here.
    let record = ctx.items().standing(&attempt.granule_id).await?;
    Ok(record.map(|r| r.past(attempt.attempt)))
}
