//! Holds on the ingest queue: an operator's hold on a collection, a batch or a job, kept as an
//! object of its own, and what the dispatcher's tick does about them (a held batch does not
//! spawn, a held job is not dispatched, and what no hold covers any more is moved back).

use super::Ctx;
use crate::domain::ingest::batch::BatchState;
use crate::domain::ingest::decisions;
use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::record::{BatchRecord, JobRecord};
use crate::handlers::HandlerError;
use crate::repositories::ingest::Changed;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Collection(String),
    Batch(BatchId),
    Job(JobId),
}

impl Target {
    /// Where the hold on this target is kept.
    pub fn key(&self, ctx: &Ctx) -> String {
        match self {
            Target::Collection(c) => ctx.ingest().keys.collection_hold(c),
            Target::Batch(b) => ctx.ingest().keys.batch_hold(b),
            Target::Job(j) => ctx.ingest().keys.job_hold(j),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Collection(c) => write!(f, "collection {c}"),
            Target::Batch(b) => write!(f, "batch {b}"),
            Target::Job(j) => write!(f, "job {j}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestHold {
    pub reason: String,
    pub by: String,
    pub at: DateTime<Utc>,
}

async fn hold_of(ctx: &Ctx, target: &Target) -> Result<Option<IngestHold>, HandlerError> {
    Ok(ctx.ingest().hold_at(&target.key(ctx)).await?)
}

/// Places a hold (the first one's reason is kept if one is there). New batches of a held
/// collection are held when they would spawn; pending jobs of a held collection, batch or job are
/// held when they would be dispatched.
pub async fn hold(
    ctx: &Ctx,
    target: &Target,
    reason: &str,
    by: &str,
    now: DateTime<Utc>,
) -> Result<IngestHold, HandlerError> {
    let hold = IngestHold {
        reason: reason.to_owned(),
        by: by.to_owned(),
        at: now,
    };
    let body = crate::contracts::encode("a hold", &hold)?;
    match ctx.ingest().place_hold(&target.key(ctx), body).await {
        Ok(_) => Ok(hold),
        Err(crate::ports::StoreError::Conflict { .. }) => {
            Ok(hold_of(ctx, target).await?.unwrap_or(hold))
        }
        Err(e) => Err(e.into()),
    }
}

/// What a release did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Released {
    pub batches: Vec<BatchId>,
    pub jobs: Vec<JobId>,
}

/// Removes the hold, then moves what it held back to pending: held batches of the collection (or
/// the batch), held jobs of the collection, batch or the job — unless another hold still holds them.
/// A release that dies after removing the hold leaves nothing stranded: every tick moves back
/// whatever is held with no hold left ([`release_unheld`]).
pub async fn release(
    ctx: &Ctx,
    target: &Target,
    now: DateTime<Utc>,
) -> Result<Released, HandlerError> {
    ctx.ingest().remove_hold(&target.key(ctx)).await?;
    release_unheld(ctx, Some(target), &format!("{target} released"), now).await
}

/// Moves back to pending every held batch and job that `target` covers (all, without one) and
/// that no hold holds any more.
pub async fn release_unheld(
    ctx: &Ctx,
    target: Option<&Target>,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Released, HandlerError> {
    let mut out = Released::default();
    let (job_back, batch_back) = decisions::on_released(reason);
    for b in ctx.ingest().batches_in(BatchState::Held).await? {
        let covered = match target {
            None => true,
            Some(Target::Collection(c)) => &b.submission.collection == c,
            Some(Target::Batch(bid)) => &b.id == bid,
            Some(Target::Job(_)) => false,
        };
        if covered && batch_held_by(ctx, &b).await?.is_none() {
            let changed = ctx
                .ingest()
                .change_batch(&b.id, batch_back.decide(now))
                .await?;
            if matches!(changed, Changed::Moved(_)) {
                out.batches.push(b.id.clone());
            }
        }
    }
    for (priority, id) in ctx.ingest().listed(JobState::Held).await? {
        let Some(job) = ctx
            .ingest()
            .claim_listed(JobState::Held, priority, &id)
            .await?
        else {
            continue;
        };
        let covered = match target {
            None => true,
            Some(Target::Collection(c)) => &job.collection == c,
            Some(Target::Batch(bid)) => &job.batch == bid,
            Some(Target::Job(jid)) => &job.id == jid,
        };
        if !covered || job_held_by(ctx, &job).await?.is_some() {
            continue;
        }
        let changed = ctx
            .ingest()
            .change_job(&job.id, job_back.decide(now))
            .await?;
        if matches!(changed, Changed::Moved(_)) {
            out.jobs.push(job.id.clone());
        }
    }
    Ok(out)
}

/// The hold a batch is under (its collection's or its own), if any.
pub async fn batch_held_by(ctx: &Ctx, batch: &BatchRecord) -> Result<Option<String>, HandlerError> {
    for target in [
        Target::Collection(batch.submission.collection.clone()),
        Target::Batch(batch.id.clone()),
    ] {
        if let Some(h) = hold_of(ctx, &target).await? {
            return Ok(Some(format!("{target} held by {}: {}", h.by, h.reason)));
        }
    }
    Ok(None)
}

/// The hold a job is under (its collection's, its batch's or its own), if any.
pub async fn job_held_by(ctx: &Ctx, job: &JobRecord) -> Result<Option<String>, HandlerError> {
    for target in [
        Target::Collection(job.collection.clone()),
        Target::Batch(job.batch.clone()),
        Target::Job(job.id.clone()),
    ] {
        if let Some(h) = hold_of(ctx, &target).await? {
            return Ok(Some(format!("{target} held by {}: {}", h.by, h.reason)));
        }
    }
    Ok(None)
}
