//! The last steps: a job's objects recorded in the catalog, its depositor notified.

use super::process::{object_found, ObjectFound};
use super::*;
use crate::contracts::ingest::JobAnnouncement;
use crate::domain::ingest::decisions;
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::record::JobRecord;
use crate::handlers::ingest::{Ctx, TickSummary};
use crate::handlers::HandlerError;
use chrono::{DateTime, Utc};

/// Recording → notify: seed 004's inventory step. The storage manifest is read back and every
/// file it lists checked in the store; the object's catalog record — one per stored object,
/// queryable in Athena as `granary_ingest_catalog` — is written from it. A file that is not as
/// the manifest says fails the job (resume records again).
pub async fn record(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let found = object_found(ctx, &job).await?;
    let key = ctx.ingest().keys.catalog(&job.collection, &job.id);
    let refused = match &found {
        ObjectFound::Refused { why } => Some(why.as_str()),
        ObjectFound::Found { .. } => None,
    };
    let mv = decisions::on_recording(refused, &key);
    let (identifier, files) = match found {
        ObjectFound::Found { identifier, files } => (identifier, files),
        ObjectFound::Refused { .. } => {
            if advance(ctx, &job, &mv, now, |_| {}).await? {
                s.failed += 1;
            }
            return Ok(());
        }
    };
    let bytes: u64 = files.iter().map(|f| f.size).sum();
    let entry = serde_json::json!({
        "job": job.id, "batch": job.batch, "collection": job.collection,
        "identifier": identifier, "local_id": job.object.local_id,
        "primary_id": job.object.primary_id,
        "submission_mode": job.deposit.submission_mode,
        "erc_who": job.deposit.erc_who, "erc_what": job.deposit.erc_what,
        "erc_when": job.deposit.erc_when,
        "storage_manifest": job.storage_manifest,
        "file_count": files.len(), "bytes": bytes,
        "files": if files.is_empty() { serde_json::json!(job.stored) } else { serde_json::json!(files) },
        "processing_job": job.processing_job, "recorded_at": now,
    });
    let body = crate::contracts::encode("a catalog record", &entry)?;
    ctx.ingest().files().put_catalog_record(&key, body).await?;
    if advance(ctx, &job, &mv, now, |_| {}).await? {
        s.recorded += 1;
    }
    Ok(())
}

/// Notify → completed: the job's event on the notification bus, then the depositor's callback
/// (bounded attempts); a callback that keeps failing fails the job (resume retries the notify).
pub async fn notify(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let key = ctx.ingest().keys.catalog(&job.collection, &job.id);
    let announcement = JobAnnouncement {
        batch: &job.batch,
        job: &job.id,
        collection: &job.collection,
        local_id: job.object.local_id.as_deref(),
        primary_id: job.object.primary_id.as_deref(),
        state: JobState::Completed.as_str(),
        files: job.stored.len(),
        catalog_key: &key,
    };
    let callback = match ctx.ingest().batch(&job.batch).await? {
        Some(b) => b.value.submission.callback,
        None => None,
    };
    if callback.as_deref().is_some_and(|u| s.hangs(u)) {
        s.waiting_on_hosts += 1;
        return Ok(());
    }
    // Announced once: a job whose callback timed out was announced by the tick that tried it.
    if job.slow_attempts == 0 {
        ctx.bus.put_events(vec![announcement.event()]).await?;
    }
    let mut failure = None;
    if let Some(url) = callback {
        failure = Some(String::new());
        let attempts = ctx.config.ingest.callback_attempts;
        let step_started = tokio::time::Instant::now();
        for attempt in (job.slow_attempts + 1).min(attempts)..=attempts {
            let attempt_started = tokio::time::Instant::now();
            match ctx
                .remote
                .call_back(&url, &serde_json::json!(announcement))
                .await
            {
                Ok(()) => {
                    failure = None;
                    break;
                }
                Err(e) => {
                    tracing::warn!(job = %job.id, attempt, error = %e, "callback failed");
                    failure = Some(format!(
                        "callback {url} failed {attempt} times; the last: {e}"
                    ));
                    // The next attempt might not fit this step's share: the next tick's (as a
                    // download's).
                    let fits = crate::handlers::ingest::another_attempt_fits(step_started);
                    if attempt_started.elapsed() >= ctx.config.ingest.timeout {
                        s.hung(&url);
                    }
                    if !fits && attempt < attempts {
                        super::note_slow_attempt(ctx, &job, JobState::Notify, attempt).await?;
                        s.slow_attempts += 1;
                        return Ok(());
                    }
                }
            }
        }
    }
    let mv = decisions::on_notified(failure);
    if advance(ctx, &job, &mv, now, |_| {}).await? {
        if mv.to == JobState::Failed {
            s.failed += 1;
        } else {
            s.notified += 1;
        }
    }
    // Seed 004: a completed job's working files go as it completes, whatever its batch's end
    // (a batch that ends Failed is cleaned up only when an operator updates or deletes it).
    // Not while batches are archived: the archive job reads them after the batch completes,
    // and the batch's cleanup removes them once archived. A crash before this leaves them to
    // that cleanup; removing them again removes nothing.
    if mv.to == JobState::Completed && ctx.config.ingest.archive_destinations.is_empty() {
        crate::handlers::ingest::batches::remove_files(ctx, &job.id).await?;
    }
    Ok(())
}
