//! What operators do to the ingest queue: hold and release a collection, a batch or a job
//! (`holds`, handed on from here); resume failed jobs where they failed; ask for an update
//! report; delete failed or held work; and read where everything stands.

pub use super::holds::{
    batch_held_by, hold, job_held_by, release, release_unheld, IngestHold, Released, Target,
};
use super::{batches, Ctx};
use crate::domain::ingest::decisions::{self, OperatorRefusal};
use crate::domain::ingest::deposit::{apply_mint_fix, resolve_mint, MintFix, MintFixRefused};
use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::job::{BatchGroup, JobState};
use crate::domain::ingest::record::{BatchRecord, JobRecord};
use crate::handlers::HandlerError;
use crate::repositories::ingest::Changed;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// What a resume did to one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resumed {
    pub job: JobId,
    /// The state it restarts in, or why it cannot.
    pub outcome: Result<JobState, NotResumed>,
}

/// Why a job was not resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotResumed {
    #[error("no such job")]
    NoSuchJob,
    #[error(transparent)]
    Refused(#[from] OperatorRefusal),
    /// The operator's word on its mint does not apply to it.
    #[error(transparent)]
    MintFix(#[from] MintFixRefused),
    /// Its record changed between the decision and the write.
    #[error("it changed meanwhile; look again")]
    ChangedMeanwhile,
}

/// As its text: what `granary ingest resume --json` has always shown for a job not resumed.
impl Serialize for NotResumed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Restarts failed jobs at the step after their last success (retry_count + 1). A job that failed
/// before any step succeeded cannot resume: its manifest entry is the problem.
pub async fn resume(
    ctx: &Ctx,
    jobs: &[JobId],
    now: DateTime<Utc>,
) -> Result<Vec<Resumed>, HandlerError> {
    let mut out = Vec::with_capacity(jobs.len());
    for id in jobs {
        out.push(resume_one(ctx, id, None, now).await?);
    }
    Ok(out)
}

/// Resumes a job that failed with its minting outcome unknown, saying what EZID holds: the
/// identifier it minted for the job (found by its `granary.job` metadata), or that it minted
/// none and a new mint is safe.
pub async fn resume_with_mint(
    ctx: &Ctx,
    job: &JobId,
    fix: &MintFix,
    now: DateTime<Utc>,
) -> Result<Resumed, HandlerError> {
    resume_one(ctx, job, Some(fix), now).await
}

async fn resume_one(
    ctx: &Ctx,
    id: &JobId,
    fix: Option<&MintFix>,
    now: DateTime<Utc>,
) -> Result<Resumed, HandlerError> {
    let decided = match ctx.ingest().job(id).await? {
        None => Err(NotResumed::NoSuchJob),
        Some(j) => decisions::on_resume(&j.value)
            .map_err(NotResumed::from)
            .and_then(|mv| match fix {
                Some(f) => resolve_mint(&j.value, f)
                    .map(|_| mv)
                    .map_err(NotResumed::from),
                None => Ok(mv),
            }),
    };
    let outcome = match decided {
        Err(why) => Err(why),
        Ok(mv) => {
            let edit = |r: &mut JobRecord| {
                if let Some(f) = fix {
                    apply_mint_fix(r, f);
                }
            };
            // Decided again on the record as written: a fix that no longer applies (another
            // operator resolved the mint meanwhile) changes nothing, and the resume says so.
            let changed = ctx
                .ingest()
                .change_job(id, |r| {
                    if fix.is_some_and(|f| resolve_mint(r, f).is_err()) {
                        return Ok(None);
                    }
                    mv.apply_with(r, now, edit)
                        .map_err(crate::domain::machine::Refused::of)
                })
                .await?;
            match changed {
                Changed::Moved(_) => Ok(mv.to),
                _ => Err(NotResumed::ChangedMeanwhile),
            }
        }
    };
    Ok(Resumed {
        job: id.clone(),
        outcome,
    })
}

/// An operator's command refused, in the words the decision gives.
fn refused(why: OperatorRefusal) -> HandlerError {
    HandlerError::Refused(why.to_string())
}

/// The failed jobs of a batch (for `resume --batch`).
pub async fn failed_jobs(ctx: &Ctx, batch: &BatchId) -> Result<Vec<JobId>, HandlerError> {
    Ok(ctx.ingest().batch_jobs(batch, BatchGroup::Failed).await?)
}

/// An operator finished resuming a failed batch's jobs: the batch writes a report of what changed
/// (update-reporting) on the next tick.
pub async fn update_report(
    ctx: &Ctx,
    batch: &BatchId,
    now: DateTime<Utc>,
) -> Result<BatchRecord, HandlerError> {
    let running = ctx
        .ingest()
        .batch_job_records(batch)
        .await?
        .into_iter()
        .filter(|j| !j.state.has_ended() && j.state != JobState::Deleted)
        .count();
    let mv = decisions::on_update_report(batch, running).map_err(refused)?;
    match ctx.ingest().change_batch(batch, mv.decide(now)).await? {
        Changed::Moved(b) => Ok(b),
        _ => Err(HandlerError::Refused(format!("no batch {batch}"))),
    }
}

/// Deletes a failed or held job (its files, markers and record). Refused while its batch has not
/// reported unless `confirmed`: the depositor would never hear of the job.
pub async fn delete_job(
    ctx: &Ctx,
    id: &JobId,
    confirmed: bool,
    now: DateTime<Utc>,
) -> Result<JobRecord, HandlerError> {
    let job = ctx
        .ingest()
        .job(id)
        .await?
        .ok_or_else(|| HandlerError::Refused(format!("no job {id}")))?
        .value;
    if job.state == JobState::Deleted {
        // Deleted by an earlier run of this command that may have died before removing the
        // job's markers and files: finish them.
        batches::remove_files(ctx, id).await?;
        ctx.ingest().reindex(&job).await?;
        return Ok(job);
    }
    let batch = ctx.ingest().batch(&job.batch).await?.map(|b| b.value);
    let reported = batch.as_ref().is_some_and(|b| b.reports > 0);
    let mv = decisions::on_delete_job(&job, reported, confirmed).map_err(refused)?;
    batches::remove_files(ctx, id).await?;
    let changed = ctx.ingest().change_job(id, mv.decide(now)).await?;
    match changed {
        Changed::Moved(j) => Ok(j),
        _ => Err(HandlerError::Refused(format!("job {id} changed meanwhile"))),
    }
}

/// Deletes a failed or held batch and every job it still has. Refused for a held batch unless
/// `confirmed`: its depositor is not told.
pub async fn delete_batch(
    ctx: &Ctx,
    id: &BatchId,
    confirmed: bool,
    now: DateTime<Utc>,
) -> Result<BatchRecord, HandlerError> {
    let batch = ctx
        .ingest()
        .batch(id)
        .await?
        .ok_or_else(|| HandlerError::Refused(format!("no batch {id}")))?
        .value;
    let mv = decisions::on_delete_batch(&batch, confirmed).map_err(refused)?;
    for group in BatchGroup::ALL {
        for jid in ctx.ingest().batch_jobs(id, group).await? {
            if let Some(job) = ctx.ingest().job(&jid).await? {
                batches::remove_files(ctx, &jid).await?;
                ctx.ingest().remove_job(&job.value).await?;
            }
        }
    }
    match ctx.ingest().change_batch(id, mv.decide(now)).await? {
        Changed::Moved(b) => Ok(b),
        _ => Err(HandlerError::Refused(format!(
            "batch {id} changed meanwhile"
        ))),
    }
}

/// Where a batch stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchStatus {
    pub batch: BatchRecord,
    /// Jobs per state.
    pub jobs: BTreeMap<JobState, u64>,
}

/// Every batch (or one), with its jobs counted per state.
pub async fn status(ctx: &Ctx, only: Option<&BatchId>) -> Result<Vec<BatchStatus>, HandlerError> {
    let ids = match only {
        Some(id) => vec![id.clone()],
        None => ctx.ingest().batch_ids().await?,
    };
    let mut out = Vec::new();
    for id in ids {
        let Some(batch) = ctx.ingest().batch(&id).await? else {
            continue;
        };
        let mut jobs = BTreeMap::new();
        for group in BatchGroup::ALL {
            for jid in ctx.ingest().batch_jobs(&id, group).await? {
                if let Some(j) = ctx.ingest().job(&jid).await? {
                    *jobs.entry(j.value.state).or_insert(0) += 1;
                }
            }
        }
        out.push(BatchStatus {
            batch: batch.value,
            jobs,
        });
    }
    Ok(out)
}

/// A batch's reports, first to latest.
pub async fn reports(
    ctx: &Ctx,
    batch: &BatchId,
) -> Result<Vec<batches::BatchReport>, HandlerError> {
    let mut out = Vec::new();
    let ingest = ctx.ingest();
    for meta in ingest.report_objects(batch).await? {
        if let Some(r) = ingest.report_at(&meta.key).await? {
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `granary ingest resume --json` writes a refusal as its words, as when it was a string.
    #[test]
    fn a_job_not_resumed_is_written_with_its_reason_as_text() {
        let refused = Resumed {
            job: JobId::parse("b1-j00001").unwrap(),
            outcome: Err(NotResumed::Refused(OperatorRefusal::NotFailed(
                JobState::Pending,
            ))),
        };
        assert_eq!(
            serde_json::to_value(&refused).unwrap(),
            serde_json::json!({"job": "b1-j00001", "outcome": {"Err": "it is pending, not failed"}})
        );
    }
}
