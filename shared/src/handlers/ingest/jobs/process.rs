//! The processing step: the job's processing container on Batch, its end read, its products stored.

use super::*;
use crate::contracts::ingest::processing_job;
use crate::domain::batch_event::JobDetail;
use crate::domain::claim::Claim;
use crate::domain::classify::classify;
use crate::domain::granule::GranuleId;
use crate::domain::ingest::decisions;
use crate::domain::ingest::deposit::{parse_storage_manifest, ManifestEntry, STORAGE_MANIFEST};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::record::JobRecord;
use crate::domain::job_name::processing_job_name;
use crate::handlers::ingest::processing::{self, EndedProcessing, ProcessingOutcome};
use crate::handlers::ingest::{Ctx, TickSummary};
use crate::handlers::HandlerError;
use crate::repositories::{Submission, SubmitOutcome};
use chrono::{DateTime, Utc};

/// Processing: the job's AWS Batch job for its current attempt is submitted once (found by its
/// name if a SubmitJob answer was lost). Its end normally reaches the job monitor as Batch's
/// event (`processing::on_end`: Spot and other retryable failures get the next attempt, the
/// others fail the job and are dead-lettered); DescribeJobs here finds an end whose event was
/// lost and applies the same decision.
pub async fn process(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    if !ctx.config.ingest.container_step {
        if advance(ctx, &job, &decisions::on_processing_skipped(), now, |_| {}).await? {
            s.processed += 1;
        }
        return Ok(());
    }
    let batch_job = match &job.processing_job {
        Some(id) => id.clone(),
        None => return submit_processing(ctx, &job, now, s).await,
    };
    processing_end(ctx, &job, batch_job, now, s).await
}

/// The job's processing job for its current attempt submitted once, and the record told its id.
async fn submit_processing(
    ctx: &Ctx,
    job: &JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let name = processing_job_name(&job.id, job.retry_count, job.processing_attempt);
    // The one submission protocol (a claim before SubmitJob, its lease, a lookup by
    // name only on takeover): a lost answer, a ListJobs that does not show the job
    // yet, or an operator's tick beside the scheduled one submits nothing twice.
    let prefix = format!(
        "s3://{}/{}",
        ctx.config.layout.bucket,
        ctx.ingest().keys.objects(&job.id)
    );
    let request = processing_job(
        &job.id,
        job.retry_count,
        job.processing_attempt,
        &prefix,
        &job.deposit,
    );
    let work = GranuleId::parse(job.id.as_str())
        .map_err(|e| HandlerError::Refused(format!("ingest job id {} as a claim: {e}", job.id)))?;
    let requests = |_: &Claim| vec![request.clone()];
    let submission = Submission {
        claim_key: ctx.ingest().keys.processing_claim(
            &job.id,
            job.retry_count,
            job.processing_attempt,
        ),
        // Watched by this tick's DescribeJobs, not by the reconciler.
        open_key: None,
        claim: Claim::of_work(
            work,
            job.processing_attempt,
            name.clone(),
            "ingest-dispatcher",
            now,
        ),
        requests: &requests,
        screen: None,
    };
    let id = match ctx.submit_claim_once(submission).await? {
        SubmitOutcome::Submitted { job_id }
        | SubmitOutcome::AlreadySubmitted { job_id }
        | SubmitOutcome::Recovered { job_id } => job_id,
        // Another tick holds the claim and may be submitting: the next tick looks.
        SubmitOutcome::InFlight => return Ok(()),
    };
    ctx.ingest()
        .change_job(&job.id, |r| {
            (r.state == JobState::Processing
                && r.processing_attempt == job.processing_attempt
                && r.processing_job.as_deref() != Some(&id))
            .then(|| {
                let mut next = r.clone();
                next.processing_job = Some(id.clone());
                next
            })
            .map(Ok)
            .transpose()
        })
        .await?;
    s.processing_submitted += 1;
    Ok(())
}

/// The processing job's end found by DescribeJobs (its event may have been lost), decided as
/// the event would have been.
async fn processing_end(
    ctx: &Ctx,
    job: &JobRecord,
    batch_job: String,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let Some(described) = ctx.jobs.describe(&batch_job).await? else {
        return Ok(());
    };
    if !described.summary.status.is_terminal() {
        return Ok(());
    }
    let ended = match serde_json::from_value::<JobDetail>(described.detail.clone()) {
        Ok(detail) => {
            let Ok(classification) = classify(&detail) else {
                return Ok(());
            };
            EndedProcessing {
                ingest_job: job.id.clone(),
                batch_job_id: batch_job.clone(),
                batch_job_name: detail.job_name.clone(),
                classification,
            }
        }
        // An ended job of this record's own attempt (the record names it) that no code can
        // read: its event, the same detail, cannot be read either, so waiting for it would
        // leave the job PROCESSING for ever. The description is kept under rejects/, then the
        // attempt ends as a final failure that says why (as a granule's does).
        Err(e) => {
            let why = e.to_string();
            let reason = format!("DescribeJobs answer for job {batch_job}: {why}");
            ctx.reject(
                crate::domain::poison::RejectKind::UnreadableEvent,
                &reason,
                "ingest-dispatcher (DescribeJobs)",
                &described.detail.to_string(),
            )
            .await?;
            EndedProcessing {
                ingest_job: job.id.clone(),
                batch_job_id: batch_job.clone(),
                batch_job_name: described.summary.job_name.clone(),
                classification: crate::domain::job_end::undescribable_end(&batch_job, &why),
            }
        }
    };
    match processing::on_end(
        &ctx.ingest(),
        ctx.failure_dlq.as_ref(),
        ctx.config.max_attempt(),
        &ended,
        now,
    )
    .await?
    {
        ProcessingOutcome::Stale => {}
        ProcessingOutcome::Processed => s.processed += 1,
        ProcessingOutcome::Retrying { .. } => s.processing_retried += 1,
        ProcessingOutcome::Failed => s.failed += 1,
    }
    Ok(())
}

/// The first stored file that is not in the bucket as it was stored (missing, or another size).
async fn changed_file(ctx: &Ctx, job: &JobRecord) -> Result<Option<String>, HandlerError> {
    let stored = ctx.ingest().files();
    for file in &job.stored {
        let listed = stored.downloaded_file(&file.key).await?;
        match listed.iter().find(|m| m.key == file.key) {
            None => return Ok(Some(format!("{} is missing", file.key))),
            Some(m) if m.size != file.size => {
                return Ok(Some(format!(
                    "{} holds {} bytes, {} were stored",
                    file.key, m.size, file.size
                )))
            }
            Some(_) => {}
        }
    }
    Ok(None)
}

/// What recording found of the object.
pub(super) enum ObjectFound {
    /// The storage manifest's identifier and files, each in the store at its size (no files: a
    /// job recorded before storing existed, whose downloaded files are all there).
    Found {
        identifier: Option<String>,
        files: Vec<ManifestEntry>,
    },
    /// A file is not as stored, or the manifest cannot be read: the job fails with `why`.
    Refused { why: String },
}

/// What recording found of the object: the storage manifest's identifier and files, each
/// checked to be in the store at its size; [`ObjectFound::Refused`] when one is not (or the
/// manifest cannot be read). A job recorded before storing existed names no manifest: its
/// downloaded files are checked instead.
pub(super) async fn object_found(ctx: &Ctx, job: &JobRecord) -> Result<ObjectFound, HandlerError> {
    let refused = |why: String| Ok(ObjectFound::Refused { why });
    let Some(key) = &job.storage_manifest else {
        return match changed_file(ctx, job).await? {
            Some(why) => refused(why),
            None => Ok(ObjectFound::Found {
                identifier: job.identifier.clone(),
                files: Vec::new(),
            }),
        };
    };
    let stored = ctx.ingest().files();
    let Some(body) = stored.storage_manifest(key).await? else {
        return refused(format!("the storage manifest {key} is missing"));
    };
    let text = String::from_utf8_lossy(&body.body);
    let manifest = match parse_storage_manifest(&text) {
        Ok(read) => read,
        Err(why) => return refused(format!("{key}: {why}")),
    };
    let expected = job.identifier.as_deref().unwrap_or(job.id.as_str());
    if manifest.object != expected || manifest.job != job.id.as_str() {
        return refused(format!(
            "{key} is the manifest of {} deposited by {}, not of {expected} by {}",
            manifest.object, manifest.job, job.id
        ));
    }
    let files = manifest.files;
    let prefix = key.strip_suffix(STORAGE_MANIFEST).unwrap_or(key);
    let listed: std::collections::BTreeMap<String, u64> = stored
        .stored_files(prefix)
        .await?
        .into_iter()
        .map(|m| (m.key, m.size))
        .collect();
    for f in &files {
        match listed.get(&f.key) {
            Some(size) if *size == f.size => {}
            Some(size) => {
                return refused(format!(
                    "{} holds {size} bytes; the storage manifest says {}",
                    f.key, f.size
                ))
            }
            None => return refused(format!("{} is missing", f.key)),
        }
    }
    Ok(ObjectFound::Found {
        identifier: job.identifier.clone(),
        files,
    })
}
