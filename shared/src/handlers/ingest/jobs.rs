//! Job steps, in pipeline order. Each lists its state's index in priority order, takes each job
//! whose record still says that state (`Ingest::claim_listed`, which repairs stale markers), and
//! writes the transition its decision names with If-Match.

use super::processing::{self, EndedProcessing, ProcessingOutcome};
use super::{Ctx, TickSummary};
use crate::contracts::ingest::{processing_job, JobAnnouncement};
use crate::domain::batch_event::JobDetail;
use crate::domain::claim::Claim;
use crate::domain::classify::classify;
use crate::domain::granule::GranuleId;
use crate::domain::ingest::decisions;
use crate::domain::ingest::deposit::{parse_storage_manifest, ManifestEntry, STORAGE_MANIFEST};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::manifest::Payload;
use crate::domain::ingest::record::{JobRecord, StoredFile};
use crate::domain::job_name::processing_job_name;
use crate::domain::machine::Move;
use crate::handlers::transfer::{copy_into_store, Expected};
use crate::handlers::HandlerError;
use crate::repositories::ingest::Changed;
use crate::repositories::{submit_claim_once, Submission, SubmitOutcome};
use chrono::{DateTime, Utc};
use futures::StreamExt;
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
    ictx: &Ctx,
    state: JobState,
    now: DateTime<Utc>,
    s: &mut TickSummary,
    mut step: impl AsyncFnMut(
        &Ctx,
        JobRecord,
        DateTime<Utc>,
        &mut TickSummary,
    ) -> Result<(), HandlerError>,
) -> Result<(), HandlerError> {
    for job in taken(ictx, state, s).await? {
        let span = job_span(&job);
        let id = job.id.clone();
        if let Err(e) = step(ictx, job, now, s).instrument(span).await {
            tracing::error!(job = %id, %state, error = %e, "the job's step failed; the next tick tries again");
            s.errors += 1;
        }
    }
    Ok(())
}

/// The jobs whose records say `state`, in priority order.
async fn taken(
    ictx: &Ctx,
    state: JobState,
    s: &mut TickSummary,
) -> Result<Vec<JobRecord>, HandlerError> {
    let mut out = Vec::new();
    for (priority, id) in ictx.ingest().listed(state).await? {
        match ictx.ingest().claim_listed(state, priority, &id).await? {
            Some(job) => out.push(job),
            None => s.repaired += 1,
        }
    }
    Ok(out)
}

/// Writes the move a decision made for `job`, with `edit` applied to the new record (the facts
/// the step learnt). `Ok(false)` when someone else moved it first.
pub(super) async fn advance(
    ictx: &Ctx,
    job: &JobRecord,
    mv: &Move<JobState>,
    now: DateTime<Utc>,
    edit: impl Fn(&mut JobRecord),
) -> Result<bool, HandlerError> {
    let changed = ictx
        .ingest()
        .change_job(&job.id, |r| {
            mv.apply_with(r, now, &edit).map_err(|e| e.to_string())
        })
        .await?;
    Ok(matches!(changed, Changed::Moved(_)))
}

/// Pending → failed (an unreadable manifest entry), held, or estimating.
pub async fn dispatch(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let hold = super::holds::job_held_by(ictx, &job).await?;
    let mv = decisions::on_dispatch(&job, hold.as_deref());
    if advance(ictx, &job, &mv, now, |_| {}).await? {
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
    ictx: &Ctx,
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
            let size = match f.size {
                Some(n) => Some(n),
                None => ictx.remote.size_of(&f.url).await.unwrap_or_else(|e| {
                    tracing::warn!(job = %job.id, url = f.url, error = %e, "size unknown");
                    None
                }),
            };
            total = total.zip(size).map(|(a, b)| a.saturating_add(b));
        }
    }
    let need = total.unwrap_or(0);
    let priority = decisions::priority_for(
        job.submitted_priority.unwrap_or(job.priority),
        need,
        ictx.config.ingest.large_job_bytes,
    );
    if advance(ictx, &job, &decisions::on_estimated(need), now, |r| {
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
pub async fn in_flight(ictx: &Ctx) -> Result<u64, HandlerError> {
    let mut total = 0u64;
    for state in [
        JobState::Downloading,
        JobState::Processing,
        JobState::Storing,
    ] {
        for (_, id) in ictx.ingest().listed(state).await? {
            if let Some(j) = ictx.ingest().job(&id).await? {
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
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
    used: &mut u64,
) -> Result<(), HandlerError> {
    let settings = &ictx.config.ingest;
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
    if advance(ictx, &job, &mv, now, |_| {}).await? {
        *used = used.saturating_add(job.space_needed);
        s.provisioned += 1;
    }
    Ok(())
}

/// One file into the job's object folder.
async fn fetch_file(
    ictx: &Ctx,
    job: &JobRecord,
    file: &crate::domain::ingest::manifest::ManifestFile,
) -> Result<StoredFile, String> {
    let key = ictx.ingest().keys.object(&job.id, &file.name);
    fetch_to(ictx, job, file, &key).await
}

/// One file into `key`, with bounded attempts for failures that may pass.
async fn fetch_to(
    ictx: &Ctx,
    job: &JobRecord,
    file: &crate::domain::ingest::manifest::ManifestFile,
    key: &str,
) -> Result<StoredFile, String> {
    let key = key.to_owned();
    let digest = file.digest.as_ref().map(decisions::expected_digest);
    let expected = Expected {
        size: file.size,
        digest: digest.as_deref(),
    };
    let mut last = String::new();
    for attempt in 1..=ictx.config.ingest.download_attempts {
        match copy_into_store(
            ictx.store.as_ref(),
            &key,
            ictx.remote.fetch(&file.url),
            &expected,
            ictx.config.ingest.timeout,
        )
        .await
        {
            Ok(found) => {
                return Ok(StoredFile {
                    name: file.name.clone(),
                    key,
                    size: found.size,
                    sha256: found.sha256,
                })
            }
            Err(why) if decisions::download_failure_is_final(&why) => {
                return Err(format!("{}: {why}", file.url))
            }
            Err(why) => {
                tracing::warn!(job = %job.id, url = file.url, attempt, error = %why, "download failed");
                last = why;
            }
        }
    }
    Err(format!(
        "{}: {} attempts failed; the last: {last}",
        file.url, ictx.config.ingest.download_attempts
    ))
}

/// Downloading → processing (every file stored, digests checked, the size recomputed) or failed.
pub async fn download(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let stored = match &job.object.payload {
        Payload::Files { files } => download_files(ictx, &job, files).await,
        Payload::Container { zip } => download_container(ictx, &job, zip).await?,
        _ => Err("no files to download".to_owned()),
    };
    let mv = decisions::on_downloaded(match &stored {
        Ok(files) => Ok(files.as_slice()),
        Err(why) => Err(why.as_str()),
    });
    // The true size, and the priority it gives (the estimate may have been wrong, or 0 when no
    // server announced a size): the job's processing marker sorts by it.
    let moved = advance(ictx, &job, &mv, now, |r| {
        if let Ok(files) = &stored {
            let size: u64 = files.iter().map(|f| f.size).sum();
            r.priority = rechecked_priority(ictx, &job, size);
            r.stored = files.clone();
            r.space_needed = size;
        }
    })
    .await?;
    match (moved, mv.to) {
        (false, _) => {}
        (true, JobState::Failed) => s.failed += 1,
        (true, _) => s.downloaded += 1,
    }
    Ok(())
}

/// The job's files, downloaded in parallel (in manifest order for the record); the first
/// failure, in that order, is the job's reason.
async fn download_files(
    ictx: &Ctx,
    job: &JobRecord,
    files: &[crate::domain::ingest::manifest::ManifestFile],
) -> Result<Vec<StoredFile>, String> {
    futures::stream::iter(files)
        .map(|f| fetch_file(ictx, job, f))
        .buffered(PARALLEL_DOWNLOADS)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// The priority for the size the download found, from the priority the submission asked for. A
/// job recorded before that was kept keeps the priority it has (its estimate may already have
/// stepped it back: it must not step back twice).
fn rechecked_priority(ictx: &Ctx, job: &JobRecord, size: u64) -> u8 {
    match job.submitted_priority {
        Some(submitted) => {
            decisions::priority_for(submitted, size, ictx.config.ingest.large_job_bytes)
        }
        None => job.priority,
    }
}

/// A container deposit's files: the zip fetched (bounded attempts, its digest checked) into the
/// job's folder and expanded ([`super::container`]); the zip then goes (the record names the
/// files, not the zip). A crash after its delete and before the record's write leaves the job
/// DOWNLOADING: the next tick fetches and expands again.
async fn download_container(
    ictx: &Ctx,
    job: &JobRecord,
    zip: &crate::domain::ingest::manifest::ManifestFile,
) -> Result<Result<Vec<StoredFile>, String>, HandlerError> {
    let key = ictx.ingest().keys.container(&job.id, &zip.name);
    let expanded = match fetch_to(ictx, job, zip, &key).await {
        Ok(fetched) => super::container::expand(ictx, &job.id, &key, fetched.size).await,
        Err(why) => Err(why),
    };
    if expanded.is_ok() {
        ictx.store.delete(&key).await?;
    }
    Ok(expanded)
}

/// Processing: the job's AWS Batch job for its current attempt is submitted once (found by its
/// name if a SubmitJob answer was lost). Its end normally reaches the job monitor as Batch's
/// event (`processing::on_end`: Spot and other retryable failures get the next attempt, the
/// others fail the job and are dead-lettered); DescribeJobs here finds an end whose event was
/// lost and applies the same decision.
pub async fn process(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    if !ictx.config.ingest.container_step {
        if advance(ictx, &job, &decisions::on_processing_skipped(), now, |_| {}).await? {
            s.processed += 1;
        }
        return Ok(());
    }
    let name = processing_job_name(&job.id, job.retry_count, job.processing_attempt);
    let batch_job = match &job.processing_job {
        Some(id) => id.clone(),
        None => {
            // The one submission protocol (a claim before SubmitJob, its lease, a lookup by
            // name only on takeover): a lost answer, a ListJobs that does not show the job
            // yet, or an operator's tick beside the scheduled one submits nothing twice.
            let prefix = format!(
                "s3://{}/{}",
                ictx.config.layout.bucket,
                ictx.ingest().keys.objects(&job.id)
            );
            let request = processing_job(
                &job.id,
                job.retry_count,
                job.processing_attempt,
                &prefix,
                &job.deposit,
            );
            let work = GranuleId::parse(job.id.as_str()).map_err(|e| {
                HandlerError::Refused(format!("ingest job id {} as a claim: {e}", job.id))
            })?;
            let requests = |_: &Claim| vec![request.clone()];
            let submission = Submission {
                claim_key: ictx.ingest().keys.processing_claim(
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
            };
            let id = match submit_claim_once(
                ictx.store.as_ref(),
                ictx.jobs.as_ref(),
                &ictx.metrics,
                ictx.config.leases.claim_lease,
                submission,
            )
            .await?
            {
                SubmitOutcome::Submitted { job_id }
                | SubmitOutcome::AlreadySubmitted { job_id }
                | SubmitOutcome::Recovered { job_id } => job_id,
                // Another tick holds the claim and may be submitting: the next tick looks.
                SubmitOutcome::InFlight => return Ok(()),
            };
            ictx.ingest()
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
            return Ok(());
        }
    };
    let Some(described) = ictx.jobs.describe(&batch_job).await? else {
        return Ok(());
    };
    if !described.summary.status.is_terminal() {
        return Ok(());
    }
    let detail = match serde_json::from_value::<JobDetail>(described.detail) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(job = %job.id, batch_job, error = %e, "DescribeJobs answer unreadable; the job's event decides");
            return Ok(());
        }
    };
    let Ok(classification) = classify(&detail) else {
        return Ok(());
    };
    let ended = EndedProcessing {
        ingest_job: job.id.clone(),
        batch_job_id: batch_job.clone(),
        batch_job_name: detail.job_name.clone(),
        classification,
    };
    match processing::on_end(
        &ictx.ingest(),
        ictx.failure_dlq.as_ref(),
        ictx.config.max_attempt(),
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
async fn changed_file(ictx: &Ctx, job: &JobRecord) -> Result<Option<String>, HandlerError> {
    for file in &job.stored {
        let listed = ictx.store.list(&file.key).await?;
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

/// What recording found of the object: the storage manifest's identifier and files, each
/// checked to be in the store at its size; `Err(why)` when one is not (or the manifest cannot be
/// read). A job recorded before storing existed names no manifest: its downloaded files are
/// checked instead.
async fn stored_object(
    ictx: &Ctx,
    job: &JobRecord,
) -> Result<Result<(Option<String>, Vec<ManifestEntry>), String>, HandlerError> {
    let Some(key) = &job.storage_manifest else {
        return Ok(match changed_file(ictx, job).await? {
            Some(why) => Err(why),
            None => Ok((job.identifier.clone(), Vec::new())),
        });
    };
    let Some(body) = ictx.store.get(key).await? else {
        return Ok(Err(format!("the storage manifest {key} is missing")));
    };
    let text = String::from_utf8_lossy(&body.body);
    let manifest = match parse_storage_manifest(&text) {
        Ok(read) => read,
        Err(why) => return Ok(Err(format!("{key}: {why}"))),
    };
    let expected = job.identifier.as_deref().unwrap_or(job.id.as_str());
    if manifest.object != expected || manifest.job != job.id.as_str() {
        return Ok(Err(format!(
            "{key} is the manifest of {} deposited by {}, not of {expected} by {}",
            manifest.object, manifest.job, job.id
        )));
    }
    let files = manifest.files;
    let prefix = key.strip_suffix(STORAGE_MANIFEST).unwrap_or(key);
    let listed: std::collections::BTreeMap<String, u64> = ictx
        .store
        .list(prefix)
        .await?
        .into_iter()
        .map(|m| (m.key, m.size))
        .collect();
    for f in &files {
        match listed.get(&f.key) {
            Some(size) if *size == f.size => {}
            Some(size) => {
                return Ok(Err(format!(
                    "{} holds {size} bytes; the storage manifest says {}",
                    f.key, f.size
                )))
            }
            None => return Ok(Err(format!("{} is missing", f.key))),
        }
    }
    Ok(Ok((job.identifier.clone(), files)))
}

/// Recording → notify: seed 004's inventory step. The storage manifest is read back and every
/// file it lists checked in the store; the object's catalog record — one per stored object,
/// queryable in Athena as `granary_ingest_catalog` — is written from it. A file that is not as
/// the manifest says fails the job (resume records again).
pub async fn record(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let found = stored_object(ictx, &job).await?;
    let key = ictx.ingest().keys.catalog(&job.collection, &job.id);
    let mv = decisions::on_recording(found.as_ref().err().map(String::as_str), &key);
    let (identifier, files) = match found {
        Ok(found) => found,
        Err(_) => {
            if advance(ictx, &job, &mv, now, |_| {}).await? {
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
    ictx.store
        .put(&key, body, crate::ports::PutCondition::Overwrite)
        .await?;
    if advance(ictx, &job, &mv, now, |_| {}).await? {
        s.recorded += 1;
    }
    Ok(())
}

/// Notify → completed: the job's event on the notification bus, then the depositor's callback
/// (bounded attempts); a callback that keeps failing fails the job (resume retries the notify).
pub async fn notify(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let key = ictx.ingest().keys.catalog(&job.collection, &job.id);
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
    ictx.bus.put_events(vec![announcement.event()]).await?;
    let callback = match ictx.ingest().batch(&job.batch).await? {
        Some(b) => b.value.submission.callback,
        None => None,
    };
    let mut failure = None;
    if let Some(url) = callback {
        failure = Some(String::new());
        for attempt in 1..=ictx.config.ingest.callback_attempts {
            match ictx
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
                }
            }
        }
    }
    let mv = decisions::on_notified(failure);
    if advance(ictx, &job, &mv, now, |_| {}).await? {
        if mv.to == JobState::Failed {
            s.failed += 1;
        } else {
            s.notified += 1;
        }
    }
    Ok(())
}
