//! The dispatcher's work on one job: the transition its state calls for now, if any. Each step
//! writes the job record once, with If-Match; what a step does outside the record (shards, task
//! records, messages, announcements) is idempotent and done *before* the record says it is done,
//! so a crash between the two is finished by the next tick.

use super::{ArchiveCtx, ArchiveError, ArchiveTick};
use crate::contracts::archive::{ArchiveAnnouncement, TaskMessage};
use crate::domain::archive::decisions::{
    after_error, phase_progress, retry_target, PhaseProgress, TaskState,
};
use crate::domain::archive::job::{ArchiveState, Phase};
use crate::domain::archive::record::{ArchiveJob, TaskRecord};
use crate::repositories::archive::Changed;
use chrono::{DateTime, Utc};

/// Moves `from` → `to` if the job is still in `from`, with `edit` applied. Whether it moved.
pub(crate) async fn advance(
    actx: &ArchiveCtx,
    id: &str,
    from: ArchiveState,
    to: ArchiveState,
    reason: &str,
    now: DateTime<Utc>,
    edit: impl Fn(&mut ArchiveJob),
) -> Result<bool, ArchiveError> {
    let changed = actx
        .archives
        .change(id, |j| {
            if j.state != from {
                return Ok(None);
            }
            let mut next = j.moved(to, reason, now).map_err(|e| e.to_string())?;
            edit(&mut next);
            Ok(Some(next))
        })
        .await?;
    Ok(matches!(changed, Changed::Moved(_)))
}

/// The names of a phase's tasks.
pub fn task_names(job: &ArchiveJob, phase: Phase) -> Vec<String> {
    match phase {
        Phase::ActivityArchiving => (0..job.shards).map(|n| format!("shard-{n:05}")).collect(),
        Phase::PostProcessing => vec!["post".to_owned()],
        Phase::Store => (0..job.destinations.len())
            .map(|n| format!("dest-{n:02}"))
            .collect(),
    }
}

/// Makes sure every task of the phase exists and that each pending one has been sent (again,
/// when it was sent longer ago than the resend delay). A task is marked sent after its message
/// is: a crash between the two sends it once more, never never.
pub async fn start_phase(
    actx: &ArchiveCtx,
    job: &ArchiveJob,
    phase: Phase,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<(), ArchiveError> {
    let resend = chrono::Duration::from_std(actx.settings.task_resend_after)
        .unwrap_or(chrono::Duration::MAX);
    for name in task_names(job, phase) {
        let task = actx.archives.ensure_task(&job.id, phase, &name).await?;
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
        actx.task_queue.send(message.to_message()?).await?;
        actx.archives
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

/// The phase's fan-in: when every task has ended the job moves on (every task done) or errs
/// (some failed) — a compare-and-swap from the phase's state, so whoever gets here first moves
/// it and everyone after finds it moved. The next phase's tasks are started by the mover (and by
/// the next tick, should the mover die first). Whether the job moved.
pub async fn fan_in(
    actx: &ArchiveCtx,
    id: &str,
    phase: Phase,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, ArchiveError> {
    let Some(job) = actx.archives.job(id).await? else {
        return Ok(false);
    };
    let job = job.value;
    if job.state != phase.state() {
        return Ok(false);
    }
    let tasks = actx.archives.tasks(id, phase).await?;
    if tasks.len() < task_names(&job, phase).len() {
        return Ok(false);
    }
    let states: Vec<TaskState> = tasks.iter().map(|t| t.state).collect();
    match phase_progress(&states) {
        PhaseProgress::Running => Ok(false),
        PhaseProgress::Done => {
            let to = phase.next();
            let reason = format!("{phase}: all {} tasks done", tasks.len());
            let moved = advance(actx, id, phase.state(), to, &reason, now, |_| {}).await?;
            if moved {
                if let (Some(next), Some(job)) = (Phase::of(to), actx.archives.job(id).await?) {
                    start_phase(actx, &job.value, next, now, s).await?;
                }
            }
            Ok(moved)
        }
        PhaseProgress::Failed { recoverable } => {
            let reasons: Vec<String> = tasks
                .iter()
                .filter(|t| matches!(t.state, TaskState::Failed { .. }))
                .map(|t| format!("{}: {}", t.task, t.reason))
                .collect();
            let reason = format!("{phase} failed: {}", reasons.join("; "));
            advance(
                actx,
                id,
                phase.state(),
                ArchiveState::Error,
                &reason,
                now,
                |j| {
                    j.failed_phase = Some(phase);
                    j.recoverable = Some(recoverable);
                },
            )
            .await
        }
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

/// Deletes every object under `prefix` of granary's bucket.
async fn remove_all(actx: &ArchiveCtx, prefix: &str) -> Result<(), ArchiveError> {
    for meta in actx.store.list(prefix).await? {
        actx.store.delete(&meta.key).await?;
    }
    Ok(())
}

/// How long an archive job's source may fail to list before the job fails (a few dozen ticks
/// of the dispatcher's schedule): long enough for a bucket policy being fixed, short enough that
/// an operator sees the failure the same day.
pub const SOURCE_UNREADABLE_GRACE: chrono::Duration = chrono::Duration::hours(1);

/// The one transition job `id` calls for now, made. `Ok(false)` when it waits (for tasks, for
/// its retry time) or has ended.
pub async fn step(
    actx: &ArchiveCtx,
    id: &str,
    now: DateTime<Utc>,
    s: &mut ArchiveTick,
) -> Result<bool, ArchiveError> {
    use ArchiveState::*;
    let Some(job) = actx.archives.job(id).await? else {
        return Ok(false);
    };
    let job = job.value;
    match job.state {
        Uninitialized => {
            // The source, listed once, split into shards (written before the record says so).
            let source = actx.buckets.store(&job.source.bucket, None);
            let listed = match source.list(&job.source.prefix).await {
                Ok(listed) => listed,
                // Tried again each tick while it may pass (throttled, a grant on its way); a
                // source still unreadable past the grace fails the job with S3's reason rather
                // than leave it Uninitialized for ever.
                Err(e) if now.signed_duration_since(job.created_at) < SOURCE_UNREADABLE_GRACE => {
                    return Err(e.into())
                }
                Err(e) => {
                    let why = format!(
                        "{} could not be listed for {} minutes: {e}",
                        job.source,
                        SOURCE_UNREADABLE_GRACE.num_minutes()
                    );
                    return advance(actx, id, Uninitialized, Queued, &why, now, |j| {
                        j.failure = Some(why.clone());
                    })
                    .await;
                }
            };
            let keys: Vec<String> = listed
                .into_iter()
                .filter(|m| !m.key.ends_with('/'))
                .map(|m| m.key)
                .collect();
            let per = actx.settings.objects_per_shard.max(1) as usize;
            let mut shards = 0u32;
            for (n, chunk) in keys.chunks(per).enumerate() {
                let n = u32::try_from(n).unwrap_or(u32::MAX);
                actx.archives.put_shard(id, n, chunk).await?;
                shards = n + 1;
            }
            let objects = keys.len() as u64;
            let reason = format!("{objects} objects in {shards} shards");
            advance(actx, id, Uninitialized, Queued, &reason, now, |j| {
                j.shards = shards;
                j.objects = objects;
            })
            .await
        }
        Queued if job.failure.is_some() || job.objects == 0 => {
            let why = job
                .failure
                .clone()
                .unwrap_or_else(|| format!("{} holds no object to archive", job.source));
            advance(actx, id, Queued, Failure, &why, now, |j| {
                j.failure = Some(why.clone());
            })
            .await
        }
        Queued => {
            advance(
                actx,
                id,
                Queued,
                Processing,
                "taken by the schedule",
                now,
                |_| {},
            )
            .await
        }
        Processing => {
            let moved = advance(
                actx,
                id,
                Processing,
                ActivityArchiving,
                "archiving its shards",
                now,
                |_| {},
            )
            .await?;
            if moved {
                start_phase(actx, &job, Phase::ActivityArchiving, now, s).await?;
            }
            Ok(moved)
        }
        ActivityArchiving | PostProcessing | Store => {
            let Some(phase) = Phase::of(job.state) else {
                return Ok(false);
            };
            if !crate::mutants::on("archive-tick-without-fan-out-repair") {
                start_phase(actx, &job, phase, now, s).await?;
            }
            fan_in(actx, id, phase, now, s).await
        }
        Error => {
            let phase = job.failed_phase;
            let used = phase
                .and_then(|p| job.retries.get(&p).copied())
                .unwrap_or(0);
            let backoff = chrono::Duration::from_std(actx.settings.backoff)
                .unwrap_or(chrono::Duration::seconds(60));
            let (to, at) = after_error(
                job.recoverable.unwrap_or(false),
                used,
                actx.settings.max_retries,
                backoff,
                now,
            );
            let reason = match to {
                RecoverableError => format!(
                    "recoverable: retry {} of {}",
                    used + 1,
                    actx.settings.max_retries
                ),
                _ if job.recoverable == Some(true) => {
                    format!("retries spent ({used}): {}", job.reason)
                }
                _ => format!("not recoverable: {}", job.reason),
            };
            let failure = job.reason.clone();
            advance(actx, id, Error, to, &reason, now, |j| {
                j.retry_at = at;
                if to == Failure {
                    j.failure = Some(failure.clone());
                }
            })
            .await
        }
        RecoverableError => {
            if job.retry_at.is_some_and(|at| at > now) {
                return Ok(false);
            }
            let Some(phase) = job.failed_phase else {
                return Ok(false);
            };
            let moved = rerun_phase(
                actx,
                &job,
                RecoverableError,
                phase,
                "retrying its failed tasks",
                now,
                true,
            )
            .await?;
            if moved {
                if let Some(job) = actx.archives.job(id).await? {
                    start_phase(actx, &job.value, phase, now, s).await?;
                }
            }
            Ok(moved)
        }
        Failure => {
            advance(
                actx,
                id,
                Failure,
                ErrorHandling,
                "handling the failure",
                now,
                |_| {},
            )
            .await
        }
        ErrorHandling => {
            actx.bus
                .put_events(vec![announcement(&job).event()])
                .await?;
            advance(
                actx,
                id,
                ErrorHandling,
                Cleanup,
                "failure announced",
                now,
                |_| {},
            )
            .await
        }
        Cleanup => {
            // Temporaries always; after a success the staged archive and the task records too
            // (the destinations hold the archive). After a failure the staged archive stays, so
            // `granary archive retry` can re-run the phase that failed.
            remove_all(actx, &actx.archives.tmp(id)).await?;
            if job.failure.is_none() {
                remove_all(actx, &actx.archives.work(id)).await?;
                actx.bus
                    .put_events(vec![announcement(&job).event()])
                    .await?;
                let moved = advance(
                    actx,
                    id,
                    Cleanup,
                    Completed,
                    "stored, verified, cleaned up",
                    now,
                    |_| {},
                )
                .await?;
                actx.archives.mark_closed(id).await?;
                s.completed += u64::from(moved);
                Ok(moved)
            } else {
                let moved =
                    advance(actx, id, Cleanup, Failed, "failed; cleaned up", now, |_| {}).await?;
                actx.archives.mark_closed(id).await?;
                s.failed += u64::from(moved);
                Ok(moved)
            }
        }
        Completed | Failed => Ok(false),
    }
}

/// Failed tasks of `phase` back to pending, then the job `from` → the phase (an automatic retry
/// counts against the phase's budget; an operator's does not).
async fn rerun_phase(
    actx: &ArchiveCtx,
    job: &ArchiveJob,
    from: ArchiveState,
    phase: Phase,
    reason: &str,
    now: DateTime<Utc>,
    automatic: bool,
) -> Result<bool, ArchiveError> {
    for name in task_names(job, phase) {
        actx.archives
            .change_task(&job.id, phase, &name, |t| {
                matches!(t.state, TaskState::Failed { .. }).then(|| TaskRecord {
                    state: TaskState::Pending,
                    sent_at: None,
                    ..t.clone()
                })
            })
            .await?;
    }
    advance(actx, &job.id, from, phase.state(), reason, now, |j| {
        if automatic {
            *j.retries.entry(phase).or_insert(0) += 1;
        }
        j.retry_at = None;
        j.failure = None;
        j.recoverable = None;
    })
    .await
}

/// `granary archive retry`: a failed job from the phase that failed (its failed tasks only).
pub async fn retry(
    actx: &ArchiveCtx,
    id: &str,
    now: DateTime<Utc>,
) -> Result<ArchiveState, ArchiveError> {
    let Some(job) = actx.archives.job(id).await? else {
        return Err(ArchiveError::Refused(format!("no archive job {id}")));
    };
    let job = job.value;
    if job.state != ArchiveState::Failed {
        return Err(ArchiveError::Refused(format!(
            "archive job {id} is {}, not failed",
            job.state
        )));
    }
    let Some(to) = retry_target(job.failed_phase) else {
        return Err(ArchiveError::Refused(format!(
            "archive job {id} failed before any phase ran ({}): create it again",
            job.failure.as_deref().unwrap_or("no reason kept")
        )));
    };
    let Some(phase) = Phase::of(to) else {
        return Err(ArchiveError::Refused(format!("{to} is not a phase")));
    };
    actx.archives.mark_open(id).await?;
    if !rerun_phase(
        actx,
        &job,
        ArchiveState::Failed,
        phase,
        "retried by an operator",
        now,
        false,
    )
    .await?
    {
        return Err(ArchiveError::Refused(format!(
            "archive job {id} changed meanwhile; look again"
        )));
    }
    if let Some(job) = actx.archives.job(id).await? {
        start_phase(actx, &job.value, phase, now, &mut ArchiveTick::default()).await?;
    }
    Ok(to)
}
