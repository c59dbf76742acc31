//! Batch steps: spawning a pending batch's jobs, reporting a batch whose jobs have all ended
//! (and again after an operator's update-report), and cleaning up a completed one.

use super::{holds, Ctx, TickSummary, MAX_MANIFEST_BYTES};
use crate::contracts::ingest::{BatchAnnouncement, BatchQueued};
use crate::domain::ingest::batch::{reported_state, BatchState};
use crate::domain::ingest::decisions;
use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::manifest::{self, ManifestKind, ManifestObject, Payload};
use crate::domain::ingest::record::{BatchRecord, JobRecord};
use crate::domain::machine::Refused;
use crate::handlers::HandlerError;
use crate::repositories::ingest::Changed;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

/// The span of one batch's step in a tick (its id and collection on every log line of it).
fn batch_span(batch: &BatchRecord) -> tracing::Span {
    tracing::info_span!(
        "ingest_batch",
        batch = %batch.id,
        collection = %batch.submission.collection,
        state = %batch.state
    )
}

/// Runs `step` on every batch whose record says `state`, oldest first, each in its own span.
pub async fn each_batch(
    ctx: &Ctx,
    state: BatchState,
    now: DateTime<Utc>,
    budget: &crate::budget::Budget,
    s: &mut TickSummary,
    step: impl AsyncFn(&Ctx, BatchRecord, DateTime<Utc>, &mut TickSummary) -> Result<(), HandlerError>,
) -> Result<(), HandlerError> {
    for batch in batches_in(ctx, state).await? {
        let span = batch_span(&batch);
        let id = batch.id.clone();
        let ran = super::within_share(
            budget,
            &ctx.config.ingest,
            step(ctx, batch, now, s).instrument(span),
        )
        .await;
        super::count_step(ran, "batch", &id, &state, s);
    }
    Ok(())
}

/// The batches in `state`, oldest first.
async fn batches_in(ctx: &Ctx, state: BatchState) -> Result<Vec<BatchRecord>, HandlerError> {
    Ok(ctx.ingest().batches_in(state).await?)
}

/// Why a manifest could not be read (its words become the job's reason).
#[derive(Debug, thiserror::Error)]
enum UnreadableManifest {
    /// A key of granary's own bucket outside the manifests it keeps: another collection's
    /// objects and records are never read for a submitter.
    #[error(
        "{url} is not a manifest granary keeps: in its bucket only keys under {folder} are read"
    )]
    NotKept { url: String, folder: String },
    #[error(transparent)]
    Store(#[from] crate::ports::StoreError),
    #[error("{url} does not exist")]
    Missing { url: String },
    #[error(transparent)]
    Source(#[from] crate::ports::SourceError),
    #[error("{url} is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge { url: String },
    #[error("{url} is not UTF-8 text")]
    NotText { url: String },
}

/// Reads a manifest (or an object's manifest): `s3://<granary's bucket>/key` from the store,
/// where only the manifests granary keeps (`granary ingest submit FILE`) may be named; anything
/// else from the depositor's server.
async fn read_text(ctx: &Ctx, url: &str) -> Result<String, UnreadableManifest> {
    let bytes = if let Some(key) = url
        .strip_prefix("s3://")
        .and_then(|rest| rest.strip_prefix(ctx.config.layout.bucket.as_str()))
        .and_then(|rest| rest.strip_prefix('/'))
    {
        let folder = ctx.ingest().keys.manifest("");
        let kept = key.starts_with(&folder) && key.len() > folder.len() && !key.contains("/../");
        if !kept && !crate::mutants::on("manifest-read-anywhere") {
            return Err(UnreadableManifest::NotKept {
                url: url.to_owned(),
                folder,
            });
        }
        ctx.ingest()
            .files()
            .manifest(key)
            .await?
            .ok_or_else(|| UnreadableManifest::Missing {
                url: url.to_owned(),
            })?
            .body
            .to_vec()
    } else {
        let (mut stream, _) = ctx.remote.fetch(url).await?;
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
            if out.len() > MAX_MANIFEST_BYTES {
                return Err(UnreadableManifest::TooLarge {
                    url: url.to_owned(),
                });
            }
        }
        out
    };
    String::from_utf8(bytes).map_err(|_| UnreadableManifest::NotText {
        url: url.to_owned(),
    })
}

/// The objects a submission names, one per job. What cannot be read becomes one unreadable
/// object (its job fails at once with the reason), so the batch always reports.
async fn objects_of(ctx: &Ctx, batch: &BatchRecord) -> Vec<ManifestObject> {
    let url = &batch.submission.manifest_url;
    let unreadable = |why: String| ManifestObject {
        local_id: None,
        primary_id: None,
        payload: Payload::Unreadable {
            line: 0,
            input: url.clone(),
            why,
        },
    };
    match batch.submission.kind {
        ManifestKind::File => return vec![manifest::single_file(url, None)],
        ManifestKind::Container => return vec![manifest::container(url)],
        ManifestKind::Files | ManifestKind::Manifests => {}
    }
    let text = match read_text(ctx, url).await {
        Ok(t) => t,
        Err(why) => return vec![unreadable(format!("the manifest cannot be read: {why}"))],
    };
    let objects = match manifest::parse(&text, batch.submission.kind) {
        Ok(o) => o,
        Err(why) => return vec![unreadable(format!("the manifest is corrupt: {why}"))],
    };
    let mut out = Vec::with_capacity(objects.len());
    for object in objects {
        let Payload::Manifest { url } = &object.payload else {
            out.push(object);
            continue;
        };
        // A manifest of manifests: each object's own files manifest is read now, so that a
        // corrupt one fails its job at once, as the design asks.
        let payload = match read_text(ctx, url).await {
            Err(why) => Payload::Unreadable {
                line: 0,
                input: url.clone(),
                why: format!("the object's manifest cannot be read: {why}"),
            },
            Ok(text) => match manifest::parse(&text, ManifestKind::Files) {
                Err(why) => Payload::Unreadable {
                    line: 0,
                    input: url.clone(),
                    why: format!("the object's manifest is corrupt: {why}"),
                },
                Ok(parts) => {
                    let mut files = Vec::new();
                    let mut bad = None;
                    for part in parts {
                        match part.payload {
                            Payload::Files { files: f } => files.extend(f),
                            Payload::Unreadable { line, why, input } if bad.is_none() => {
                                bad = Some(Payload::Unreadable { line, input, why })
                            }
                            _ => {}
                        }
                    }
                    bad.unwrap_or(Payload::Files { files })
                }
            },
        };
        out.push(ManifestObject { payload, ..object });
    }
    out
}

/// Pending batches: held while their collection is, else their jobs are created (idempotent: a
/// crash half-way is finished by the next tick), the depositor is told they are queued when the
/// batch's profile asks for it, and the batch moves to processing. The confirmation comes before
/// the move: a crash in between confirms again at the next tick (at least once, never skipped).
pub async fn spawn(
    ctx: &Ctx,
    batch: BatchRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    if let Some(hold) = holds::batch_held_by(ctx, &batch).await? {
        let held = decisions::on_batch_pending(Some(&hold), 0);
        ctx.ingest()
            .change_batch(&batch.id, held.decide(now))
            .await?;
        s.batches_held += 1;
        return Ok(());
    }
    let objects = objects_of(ctx, &batch).await;
    for (n, object) in objects.iter().enumerate() {
        let mut job = JobRecord::new(batch.id.job(n + 1), &batch, object.clone(), now);
        job.mints_identifier = ctx.config.ingest.ezid.is_some();
        ctx.ingest().create_job(&job).await?;
        s.jobs_created += 1;
    }
    let count = objects.len();
    confirm_queued(ctx, &batch, count).await?;
    let mv = decisions::on_batch_pending(None, count);
    let spawned = ctx
        .ingest()
        .change_batch(&batch.id, |b| {
            mv.apply_with(b, now, |next| next.jobs = count)
                .map_err(Refused::of)
        })
        .await?;
    if matches!(spawned, Changed::Moved(_)) {
        s.batches_spawned += 1;
    }
    Ok(())
}

/// Tells the depositor, when the batch's profile asks for it, that its `jobs` are queued: an
/// `Ingest Batch Queued` event and, with a callback, a POST of the same (a courtesy, as the
/// report's: a failed callback is logged and the batch goes on).
async fn confirm_queued(ctx: &Ctx, batch: &BatchRecord, jobs: usize) -> Result<(), HandlerError> {
    let submission = &batch.submission;
    let confirming = &ctx.config.ingest.queued_confirmation;
    if !decisions::confirms_queueing(submission.profile.as_deref(), confirming) {
        return Ok(());
    }
    let queued = BatchQueued {
        batch: &batch.id,
        collection: &submission.collection,
        profile: submission.profile.as_deref().unwrap_or(""),
        submitter: &submission.submitter,
        state: "queued",
        jobs,
    };
    let body = serde_json::json!(queued);
    announce(ctx, batch, queued.event(), &body, "queued-confirmation").await
}

/// Puts `event` on the notification bus and POSTs `body` to the batch's callback, if it has one:
/// a courtesy, so a failed callback is logged and the batch goes on (the event and the records
/// in S3 stand).
async fn announce(
    ctx: &Ctx,
    batch: &BatchRecord,
    event: crate::ports::BusEvent,
    body: &serde_json::Value,
    what: &str,
) -> Result<(), HandlerError> {
    ctx.bus.put_events(vec![event]).await?;
    if let Some(url) = &batch.submission.callback {
        if let Err(e) = ctx.remote.call_back(url, body).await {
            tracing::warn!(batch = %batch.id, error = %e, "{what} callback failed");
        }
    }
    Ok(())
}

/// A batch's report: every job that completed and every one that failed (with why), and, after
/// the first, what changed since the previous report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReport {
    pub batch: BatchId,
    pub collection: String,
    pub number: u32,
    pub written_at: DateTime<Utc>,
    pub completed: Vec<JobId>,
    pub failed: Vec<FailedJob>,
    /// Jobs completed since the previous report (all completed jobs in the first).
    pub newly_completed: Vec<JobId>,
    /// Jobs failed in the previous report that are still failed.
    pub still_failed: Vec<JobId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedJob {
    pub job: JobId,
    pub last_successful_status: Option<JobState>,
    pub reason: String,
}

/// The jobs the batch's index names, read from their records (the index repaired on the way).
async fn ended_jobs(ctx: &Ctx, batch: &BatchRecord) -> Result<Vec<JobRecord>, HandlerError> {
    Ok(ctx.ingest().batch_job_records(&batch.id).await?)
}

/// A processing batch moves to reporting once none of its jobs is running (none left at all: an
/// operator deleted them, and it reports what it has).
pub async fn end_processing(
    ctx: &Ctx,
    batch: BatchRecord,
    now: DateTime<Utc>,
    _: &mut TickSummary,
) -> Result<(), HandlerError> {
    let running = ended_jobs(ctx, &batch)
        .await?
        .iter()
        .filter(|j| !j.state.has_ended() && j.state != JobState::Deleted)
        .count();
    if let Some(mv) = decisions::on_batch_jobs(running) {
        ctx.ingest().change_batch(&batch.id, mv.decide(now)).await?;
    }
    Ok(())
}

/// A reporting or update-reporting batch writes its report, announces it and becomes completed
/// or failed.
pub async fn report(
    ctx: &Ctx,
    batch: BatchRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    write_report(ctx, &batch, now).await?;
    s.batches_reported += 1;
    Ok(())
}

async fn previous_report(
    ctx: &Ctx,
    batch: &BatchRecord,
) -> Result<Option<BatchReport>, HandlerError> {
    if batch.reports == 0 {
        return Ok(None);
    }
    let key = ctx.ingest().keys.report(&batch.id, batch.reports);
    Ok(ctx.ingest().report_at(&key).await?)
}

async fn write_report(
    ctx: &Ctx,
    batch: &BatchRecord,
    now: DateTime<Utc>,
) -> Result<(), HandlerError> {
    let jobs = ended_jobs(ctx, batch).await?;
    let completed: Vec<JobId> = jobs
        .iter()
        .filter(|j| j.state == JobState::Completed)
        .map(|j| j.id.clone())
        .collect();
    let failed: Vec<FailedJob> = jobs
        .iter()
        .filter(|j| j.state == JobState::Failed)
        .map(|j| FailedJob {
            job: j.id.clone(),
            last_successful_status: j.last_successful_status,
            reason: j.reason.clone(),
        })
        .collect();
    let previous = previous_report(ctx, batch).await?;
    let (newly_completed, still_failed) = match &previous {
        None => (completed.clone(), Vec::new()),
        Some(p) => (
            completed
                .iter()
                .filter(|id| !p.completed.contains(id))
                .cloned()
                .collect(),
            failed
                .iter()
                .filter(|f| p.failed.iter().any(|pf| pf.job == f.job))
                .map(|f| f.job.clone())
                .collect(),
        ),
    };
    let number = batch.reports + 1;
    let report = BatchReport {
        batch: batch.id.clone(),
        collection: batch.submission.collection.clone(),
        number,
        written_at: now,
        completed,
        failed,
        newly_completed,
        still_failed,
    };
    // Written under its number before the batch moves: a crash in between rewrites the same
    // report and announces it again (at least once), never skips it.
    let key = ctx.ingest().keys.report(&batch.id, number);
    let body = crate::contracts::encode("a batch report", &report)?;
    ctx.ingest().put_report(&batch.id, number, body).await?;
    let to = reported_state(report.failed.len());
    let announcement = BatchAnnouncement {
        batch: &batch.id,
        collection: &batch.submission.collection,
        state: to.as_str(),
        report: number,
        report_key: &key,
        completed: report.completed.len(),
        failed: report.failed.len(),
    };
    let body = serde_json::json!(announcement);
    announce(ctx, batch, announcement.event(), &body, "batch report").await?;
    let (completed, failed) = (report.completed.len(), report.failed.len());
    ctx.ingest()
        .change_batch(&batch.id, |b| {
            let Some(mv) = decisions::on_reported(b, number, completed, failed) else {
                return Ok(None);
            };
            mv.apply_with(b, now, |next| next.reports = number)
                .map_err(Refused::of)
        })
        .await?;
    Ok(())
}

/// Completed batches: their jobs' working files and index markers are removed (records and
/// reports stay, for reports), each job and the batch move to deleted.
pub async fn clean_up(
    ctx: &Ctx,
    batch: BatchRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    if !archived(ctx, &batch, now).await? {
        s.batches_waiting_for_archive += 1;
        return Ok(());
    }
    let (job_gone, batch_gone) = decisions::on_cleaned_up();
    for job in ended_jobs(ctx, &batch).await? {
        if job.state != JobState::Completed {
            continue;
        }
        remove_files(ctx, &job.id).await?;
        ctx.ingest()
            .change_job(&job.id, job_gone.decide(now))
            .await?;
    }
    ctx.ingest()
        .change_batch(&batch.id, batch_gone.decide(now))
        .await?;
    s.batches_cleaned += 1;
    Ok(())
}

/// The archive job of a completed batch (created here, once, when batches are archived): its id.
pub fn archive_id(batch: &BatchId) -> String {
    format!("a-{batch}")
}

/// Whether the batch's files may be removed: batches are not archived, or its archive job has
/// archived them (its archiving phase handed on). An archive job that fails before that keeps
/// the files until an operator retries it (`granary archive retry`).
async fn archived(
    ctx: &Ctx,
    batch: &BatchRecord,
    now: DateTime<Utc>,
) -> Result<bool, HandlerError> {
    use crate::domain::archive::job::ArchiveState;
    use crate::domain::archive::record::{ArchiveJob, ArchiveSource};
    let destinations = &ctx.config.ingest.archive_destinations;
    if destinations.is_empty() {
        return Ok(true);
    }
    let id = archive_id(&batch.id);
    let source = ArchiveSource {
        bucket: ctx.config.layout.bucket.clone(),
        prefix: ctx.ingest().keys.batch_objects(&batch.id),
    };
    let job = ctx
        .archives()
        .create(&ArchiveJob::new(&id, source, destinations.clone(), now))
        .await?;
    // Once archiving has handed on, every member is in the archive's staging area.
    Ok(job.times(
        ArchiveState::ActivityArchiving,
        ArchiveState::PostProcessing,
    ) > 0)
}

/// Deletes a job's downloaded files.
pub async fn remove_files(ctx: &Ctx, job: &JobId) -> Result<(), HandlerError> {
    ctx.ingest().remove_downloaded_files(job).await?;
    Ok(())
}
