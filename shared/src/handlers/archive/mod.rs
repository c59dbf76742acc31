//! Archive jobs (design document 002) as plain async functions over [`Ctx`]: `create`,
//! then — on every tick of the archive dispatcher's schedule — each job moves through its table
//! (`domain::archive::job`); the phases that do the work fan out one task per shard or
//! destination on the archive task queue (`tasks`), and the task that finds its phase's last task
//! done moves the job on: a compare-and-swap on the job record, so the phase completes exactly
//! once however the tasks' messages are duplicated or reordered. The tick also does what a dead
//! task handler left undone (a pending task sent again, a finished phase moved on), so a crash
//! at any step delays a job and never strands it. `verify` re-checks a stored copy on its own.

pub mod steps;
pub mod tasks;
pub use crate::repositories::objects::verify;

use crate::domain::archive::record::{ArchiveJob, ArchiveSource, Destination};
use crate::handlers::{Ctx, HandlerError};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Creates an archive job (uninitialized); the dispatcher's next tick resolves its source.
pub async fn create(
    ctx: &Ctx,
    source: ArchiveSource,
    destinations: Vec<Destination>,
    now: DateTime<Utc>,
) -> Result<ArchiveJob, HandlerError> {
    use sha2::{Digest, Sha256};
    if destinations.is_empty() {
        return Err(HandlerError::Refused(
            "an archive needs at least one destination (--dest s3://bucket/prefix/[:CLASS])".into(),
        ));
    }
    let seed = format!(
        "{source} {destinations:?} {}",
        now.timestamp_nanos_opt().unwrap_or(0)
    );
    let digest = hex::encode(Sha256::digest(seed.as_bytes()));
    let id = format!("a{}-{}", now.format("%Y%m%d%H%M%S"), &digest[..8]);
    let job = ArchiveJob::new(&id, source, destinations, now);
    Ok(ctx.archives().create(&job).await?)
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveTick {
    /// Transitions made.
    pub moved: u64,
    /// Task messages sent (first sends and resends).
    pub tasks_sent: u64,
    pub completed: u64,
    pub failed: u64,
    /// Jobs whose step met an error (logged; the next tick tries again).
    pub errors: u64,
    /// Jobs the tick's time ran out before (the next tick takes them up).
    pub out_of_time: u64,
}

/// One pass over every job that has not ended (the open-jobs index): each is moved as far as it
/// can go now, within four fifths of the dispatcher's timeout (`GRANARY_FUNCTION_TIMEOUT_SECS`):
/// a step is not started once that is spent. The pass starts at a different job each tick, so
/// a tick that Lambda ends anyway does not always end at the same job and leave the same ones
/// behind it for ever.
pub async fn tick(ctx: &Ctx, now: DateTime<Utc>) -> Result<ArchiveTick, HandlerError> {
    let mut s = ArchiveTick::default();
    let budget = crate::budget::Budget::of_invocation(ctx.config.leases.function_timeout);
    let mut ids = ctx.archives().open_ids().await?;
    let first = crate::budget::first_of(ids.len());
    ids.rotate_left(first);
    for (done, id) in ids.iter().enumerate() {
        if budget.spent() {
            s.out_of_time = (ids.len() - done) as u64;
            tracing::warn!(
                left = s.out_of_time,
                "the tick's time is spent; the next tick takes the rest"
            );
            break;
        }
        let id = id.clone();
        match ctx.archives().job(&id).await? {
            // A creation under way, or one that died before its record: nothing to move yet.
            None => continue,
            // Ended, its marker left by a crash: repaired.
            Some(j) if j.value.state.has_ended() => {
                ctx.archives().mark_closed(&id).await?;
                continue;
            }
            Some(_) => {}
        }
        let span = tracing::info_span!("archive_job", archive = %id);
        for _ in 0..16 {
            if budget.spent() {
                break;
            }
            let stepped =
                tracing::Instrument::instrument(steps::step(ctx, &id, now, &mut s), span.clone())
                    .await;
            match stepped {
                Ok(true) => s.moved += 1,
                Ok(false) => break,
                Err(e) => {
                    tracing::error!(archive = id, error = %e, "archive step failed; the next tick tries again");
                    s.errors += 1;
                    break;
                }
            }
        }
    }
    Ok(s)
}

/// Every job (or one), as its record says.
pub async fn status(ctx: &Ctx, only: Option<&str>) -> Result<Vec<ArchiveJob>, HandlerError> {
    let ids = match only {
        Some(id) => vec![id.to_owned()],
        None => ctx.archives().ids().await?,
    };
    let mut out = Vec::new();
    for id in ids {
        match ctx.archives().job(&id).await? {
            Some(j) => out.push(j.value),
            None => return Err(HandlerError::Refused(format!("no archive job {id}"))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
