//! Job steps, in pipeline order. Each lists its state's index in priority order, takes each job
//! whose record still says that state (`Ingest::claim_listed`, which repairs stale markers), and
//! writes the transition its decision names with If-Match.

use super::{Ctx, TickSummary};
use crate::domain::ingest::decisions;
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::manifest::Payload;
use crate::domain::ingest::record::JobRecord;
use crate::domain::machine::Move;
use crate::domain::machine::Refused;
use crate::handlers::HandlerError;
use crate::repositories::ingest::Changed;
use chrono::{DateTime, Utc};
use tracing::Instrument;

/// Files of one job downloaded at once.
const PARALLEL_DOWNLOADS: usize = 4;

/// The span of one job's step in a tick: every log line of it carries the job, its batch and its
/// collection, so one id can be followed through the JSON logs.
fn job_span(job: &JobRecord) -> tracing::Span {
    tracing::info_span!(
        "ingest_job",
        job = %job.id,
        batch = %job.batch,
        collection = %job.collection,
        state = %job.state
    )
}

/// Runs `step` on every job whose record says `state`, in priority order, each in its own span.
/// A job whose step fails is logged and counted (`errors`) and left where it is for the next
/// tick; the other jobs go on (one object the store cannot take must not stop the queue).
pub async fn each_job(
    ctx: &Ctx,
    state: JobState,
    now: DateTime<Utc>,
    budget: &crate::budget::Budget,
    s: &mut TickSummary,
    mut step: impl AsyncFnMut(
        &Ctx,
        JobRecord,
        DateTime<Utc>,
        &mut TickSummary,
    ) -> Result<(), HandlerError>,
) -> Result<(), HandlerError> {
    for job in taken(ctx, state, s).await? {
        let span = job_span(&job);
        let id = job.id.clone();
        let ran = super::within_share(
            budget,
            &ctx.config.ingest,
            step(ctx, job, now, s).instrument(span),
        )
        .await;
        super::count_step(ran, "job", &id, &state, s);
    }
    Ok(())
}

/// The jobs whose records say `state`, in priority order.
async fn taken(
    ctx: &Ctx,
    state: JobState,
    s: &mut TickSummary,
) -> Result<Vec<JobRecord>, HandlerError> {
    let mut out = Vec::new();
    for (priority, id) in ctx.ingest().listed(state).await? {
        match ctx.ingest().claim_listed(state, priority, &id).await? {
            Some(job) => out.push(job),
            None => s.repaired += 1,
        }
    }
    Ok(out)
}

/// Writes the move a decision made for `job`, with `edit` applied to the new record (the facts
/// the step learnt). `Ok(false)` when someone else moved it first.
pub(super) async fn advance(
    ctx: &Ctx,
    job: &JobRecord,
    mv: &Move<JobState>,
    now: DateTime<Utc>,
    edit: impl Fn(&mut JobRecord),
) -> Result<bool, HandlerError> {
    let changed = ctx
        .ingest()
        .change_job(&job.id, |r| {
            mv.apply_with(r, now, &edit).map_err(Refused::of)
        })
        .await?;
    Ok(matches!(changed, Changed::Moved(_)))
}

/// Writes `edit` to the job's record while it is still in `state` and `when` holds, without
/// moving it; `None` when it moved, or `when` no longer holds, meanwhile.
pub(crate) async fn write_in_state(
    ctx: &Ctx,
    job: &JobRecord,
    state: JobState,
    now: DateTime<Utc>,
    when: impl Fn(&JobRecord) -> bool,
    edit: impl Fn(&mut JobRecord),
) -> Result<Option<JobRecord>, HandlerError> {
    let changed = ctx
        .ingest()
        .change_job(&job.id, |r| {
            Ok((r.state == state && when(r)).then(|| {
                let mut next = r.clone();
                edit(&mut next);
                next.last_modified = now;
                next
            }))
        })
        .await?;
    Ok(match changed {
        Changed::Moved(after) => Some(after),
        _ => None,
    })
}

/// Records on a job still in `state` that its step's attempt `attempt` ended after the step's
/// margin (`JobRecord::slow_attempts`); nothing when it moved meanwhile.
pub(super) async fn note_slow_attempt(
    ctx: &Ctx,
    job: &JobRecord,
    state: JobState,
    attempt: u32,
) -> Result<(), HandlerError> {
    let behind = |r: &JobRecord| r.slow_attempts < attempt;
    let note = |r: &mut JobRecord| r.slow_attempts = attempt;
    write_in_state(ctx, job, state, crate::clock::now(), behind, note).await?;
    Ok(())
}

/// Pending → failed (an unreadable manifest entry), held, or estimating.
pub async fn dispatch(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let hold = super::holds::job_held_by(ctx, &job).await?;
    let mv = decisions::on_dispatch(&job, hold.as_deref());
    if advance(ctx, &job, &mv, now, |_| {}).await? {
        match mv.to {
            JobState::Failed => s.failed += 1,
            JobState::Held => s.held += 1,
            _ => s.dispatched += 1,
        }
    }
    Ok(())
}

/// Estimating → provisioning: HEAD of every file (the manifest's size when it gives one). Never
/// fails: a size that cannot be learnt makes the estimate 0 ("unknown").
pub async fn estimate(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let mut total = Some(0u64);
    let zip = match &job.object.payload {
        Payload::Container { zip } => Some(std::slice::from_ref(zip)),
        _ => None,
    };
    if let Some(files) = zip.or(match &job.object.payload {
        Payload::Files { files } => Some(files.as_slice()),
        _ => None,
    }) {
        for f in files {
            // One size unknown makes the estimate unknown: no HEAD after it. Nor of a server
            // that let a request of this tick run to its timeout.
            if total.is_none() {
                break;
            }
            let size = match f.size {
                Some(n) => Some(n),
                None if s.hangs(&f.url) => None,
                None => {
                    let asked = tokio::time::Instant::now();
                    let size = ctx.remote.size_of(&f.url).await.unwrap_or_else(|e| {
                        tracing::warn!(job = %job.id, url = f.url, error = %e, "size unknown");
                        None
                    });
                    if asked.elapsed() >= ctx.config.ingest.timeout {
                        s.hung(&f.url);
                    }
                    size
                }
            };
            total = total.zip(size).map(|(a, b)| a.saturating_add(b));
        }
    }
    let need = total.unwrap_or(0);
    let priority = decisions::priority_for(
        job.submitted_priority.unwrap_or(job.priority),
        need,
        ctx.config.ingest.large_job_bytes,
    );
    if advance(ctx, &job, &decisions::on_estimated(need), now, |r| {
        r.space_needed = need;
        r.priority = priority;
    })
    .await?
    {
        s.estimated += 1;
    }
    Ok(())
}

/// Bytes of the jobs downloading or processing now.
pub async fn in_flight(ctx: &Ctx) -> Result<u64, HandlerError> {
    let mut total = 0u64;
    for state in [
        JobState::Downloading,
        JobState::Processing,
        JobState::Storing,
    ] {
        for (_, id) in ctx.ingest().listed(state).await? {
            if let Some(j) = ctx.ingest().job(&id).await? {
                if j.value.state == state {
                    total = total.saturating_add(j.value.space_needed);
                }
            }
        }
    }
    Ok(total)
}

/// Provisioning → downloading while the capacity allows. Every waiting job is evaluated, in
/// priority order, on every tick: a small job may start while a large one ahead of it waits.
pub async fn provision(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
    used: &mut u64,
) -> Result<(), HandlerError> {
    let settings = &ctx.config.ingest;
    let admitted = decisions::on_provisioning(
        job.space_needed,
        *used,
        settings.capacity_bytes,
        settings.unestimated_reserve_bytes,
    );
    let Some(mv) = admitted else {
        s.waiting_for_capacity += 1;
        return Ok(());
    };
    if advance(ctx, &job, &mv, now, |_| {}).await? {
        *used = used.saturating_add(job.space_needed);
        s.provisioned += 1;
    }
    Ok(())
}

mod download;
mod finish;
mod process;

pub use download::download;
pub use finish::{notify, record};
pub use process::process;
