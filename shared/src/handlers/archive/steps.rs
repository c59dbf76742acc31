//! The dispatcher's work on one job: the step its state calls for now
//! (`domain::archive::decisions::next_step`), run. Each step writes the job record once, with
//! If-Match; what a step does outside the record (shards, task records, messages,
//! announcements) is idempotent and done *before* the record says it is done, so a crash between
//! the two is finished by the next tick.

use super::{ArchiveTick, Ctx};
use crate::contracts::archive::{ArchiveAnnouncement, TaskMessage};
use crate::domain::archive::decisions::{
    next_step, on_operator_retry, on_phase_tasks, on_source_listed, on_source_unreadable,
    task_names, ArchiveStep, JobMove, RetryPolicy,
};
use crate::domain::archive::job::{ArchiveState, Phase, TaskState};
use crate::domain::archive::record::{ArchiveJob, TaskRecord};
use crate::domain::machine::Refused;
use crate::handlers::HandlerError;
use crate::repositories::archive::Changed;
use chrono::{DateTime, Utc};

/// Writes `mv` if the job is still in its `from` state, then sends the tasks of the phase it
/// starts. Whether it moved.
async fn make(
    ctx: &Ctx,
    id: &str,
    mv: &JobMove,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, HandlerError> {
    let changed = ctx
        .archives()
        .change(id, |j| mv.apply(j, now).map_err(Refused::of))
        .await?;
    let Changed::Moved(job) = changed else {
        return Ok(false);
    };
    if let Some(phase) = mv.starts {
        start_phase(ctx, &job, phase, now, s).await?;
    }
    Ok(true)
}

/// Makes sure every task of the phase exists and that each pending one has been sent (again,
/// when it was sent longer ago than the resend delay). A task is marked sent after its message
/// is: a crash between the two sends it once more, never never.
pub async fn start_phase(
    ctx: &Ctx,
    job: &ArchiveJob,
    phase: Phase,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<(), HandlerError> {
    let resend = chrono::Duration::from_std(ctx.config.archive.task_resend_after)
        .unwrap_or(chrono::Duration::MAX);
    for name in task_names(job, phase) {
        let task = ctx.archives().ensure_task(&job.id, phase, &name).await?;
        let due =
            task.state == TaskState::Pending && task.sent_at.is_none_or(|at| now - at >= resend);
        if !due {
            continue;
        }
        let message = TaskMessage {
            job: job.id.clone(),
            phase,
            task: name.clone(),
        };
        ctx.task_queue.send(message.to_message()?).await?;
        ctx.archives()
            .change_task(&job.id, phase, &name, |t| {
                (t.state == TaskState::Pending).then(|| TaskRecord {
                    sent_at: Some(now),
                    ..t.clone()
                })
            })
            .await?;
        s.tasks_sent += 1;
    }
    Ok(())
}

/// The phase's fan-in (`decisions::on_phase_tasks`): a compare-and-swap from the phase's state,
/// so whoever gets here first moves the job and everyone after finds it moved. The next phase's
/// tasks are started by the mover (and by the next tick, should the mover die first). Whether
/// the job moved.
pub async fn fan_in(
    ctx: &Ctx,
    id: &str,
    phase: Phase,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, HandlerError> {
    let Some(job) = ctx.archives().job(id).await? else {
        return Ok(false);
    };
    if job.value.state != phase.state() {
        return Ok(false);
    }
    let tasks = ctx.archives().tasks(id, phase).await?;
    match on_phase_tasks(&job.value, phase, &tasks) {
        Some(mv) => make(ctx, id, &mv, now, s).await,
        None => Ok(false),
    }
}

fn announcement(job: &ArchiveJob) -> ArchiveAnnouncement {
    ArchiveAnnouncement {
        archive: job.id.clone(),
        state: if job.failure.is_some() {
            "failed"
        } else {
            "completed"
        }
        .to_owned(),
        source: job.source.to_string(),
        objects: job.objects,
        copies: job
            .destinations
            .iter()
            .map(|d| format!("s3://{}/{}", d.bucket, d.archive_prefix(&job.id)))
            .collect(),
        failure: job.failure.clone(),
    }
}

/// The one step job `id` calls for now, made. `Ok(false)` when it waits (for tasks, for its
/// retry time) or has ended.
pub async fn step(
    ctx: &Ctx,
    id: &str,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, HandlerError> {
    let Some(job) = ctx.archives().job(id).await? else {
        return Ok(false);
    };
    let job = job.value;
    let policy = RetryPolicy {
        max_retries: ctx.config.archive.max_retries,
        backoff: chrono::Duration::from_std(ctx.config.archive.backoff)
            .unwrap_or(chrono::Duration::seconds(60)),
    };
    match next_step(&job, now, policy) {
        ArchiveStep::Wait => Ok(false),
        ArchiveStep::ListSource => list_source(ctx, &job, now, s).await,
        ArchiveStep::RunPhase(phase) => {
            if !crate::mutants::on("archive-tick-without-fan-out-repair") {
                start_phase(ctx, &job, phase, now, s).await?;
            }
            fan_in(ctx, id, phase, now, s).await
        }
        ArchiveStep::RerunPhase { phase, then } => {
            reset_failed_tasks(ctx, &job, phase).await?;
            make(ctx, id, &then, now, s).await
        }
        ArchiveStep::Announce(then) => {
            ctx.bus.put_events(vec![announcement(&job).event()]).await?;
            make(ctx, id, &then, now, s).await
        }
        ArchiveStep::CleanUp { succeeded, then } => {
            // Temporaries always; after a success the staged archive and the task records too
            // (the destinations hold the archive). After a failure the staged archive stays, so
            // `granary archive retry` can re-run the phase that failed.
            ctx.archives().remove_temporaries(id).await?;
            if succeeded {
                ctx.archives().remove_work(id).await?;
                ctx.bus.put_events(vec![announcement(&job).event()]).await?;
            }
            let moved = make(ctx, id, &then, now, s).await?;
            ctx.archives().mark_closed(id).await?;
            let ended = if succeeded {
                &mut s.completed
            } else {
                &mut s.failed
            };
            *ended += u64::from(moved);
            Ok(moved)
        }
        ArchiveStep::Move(then) => make(ctx, id, &then, now, s).await,
    }
}

/// The source, listed once and split into shards (written before the record says so); a source
/// that cannot be listed is tried again each tick until `decisions::on_source_unreadable` fails it.
async fn list_source(
    ctx: &Ctx,
    job: &ArchiveJob,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, HandlerError> {
    let source = ctx.bucket(&job.source.bucket, None);
    let listed = match source.list(&job.source.prefix).await {
        Ok(listed) => listed,
        Err(e) => {
            return match on_source_unreadable(job, &e.to_string(), now) {
                Some(mv) => make(ctx, &job.id, &mv, now, s).await,
                None => Err(e.into()),
            }
        }
    };
    let keys: Vec<String> = listed
        .into_iter()
        .filter(|m| !m.key.ends_with('/'))
        .map(|m| m.key)
        .collect();
    let per = ctx.config.archive.objects_per_shard.max(1) as usize;
    let mut shards = 0u32;
    for (n, chunk) in keys.chunks(per).enumerate() {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        ctx.archives().put_shard(&job.id, n, chunk).await?;
        shards = n + 1;
    }
    let mv = on_source_listed(shards, keys.len() as u64);
    make(ctx, &job.id, &mv, now, s).await
}

/// The phase's failed tasks back to pending (before the job moves back into the phase).
async fn reset_failed_tasks(ctx: &Ctx, job: &ArchiveJob, phase: Phase) -> Result<(), HandlerError> {
    for name in task_names(job, phase) {
        ctx.archives()
            .change_task(&job.id, phase, &name, |t| {
                matches!(t.state, TaskState::Failed { .. }).then(|| TaskRecord {
                    state: TaskState::Pending,
                    sent_at: None,
                    ..t.clone()
                })
            })
            .await?;
    }
    Ok(())
}

/// `granary archive retry`: a failed job from the phase that failed (its failed tasks only).
pub async fn retry(ctx: &Ctx, id: &str, now: DateTime<Utc>) -> Result<ArchiveState, HandlerError> {
    let Some(job) = ctx.archives().job(id).await? else {
        return Err(HandlerError::Refused(format!("no archive job {id}")));
    };
    let job = job.value;
    let (phase, mv) = on_operator_retry(&job).map_err(|e| HandlerError::Refused(e.to_string()))?;
    ctx.archives().mark_open(id).await?;
    reset_failed_tasks(ctx, &job, phase).await?;
    if !make(ctx, id, &mv, now, &mut ArchiveTick::default()).await? {
        return Err(HandlerError::Refused(format!(
            "archive job {id} changed meanwhile; look again"
        )));
    }
    Ok(mv.moves.to)
}
