//! The download step: a job's files fetched into granary's store, a container deposit expanded.

use super::*;
use crate::domain::ingest::decisions;
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::manifest::Payload;
use crate::domain::ingest::record::{JobRecord, StoredFile};
use crate::handlers::ingest::{Ctx, TickSummary};
use crate::handlers::HandlerError;
use crate::repositories::objects::Expected;
use chrono::{DateTime, Utc};
use futures::StreamExt;

/// Why a file of a job could not be fetched (its words become the job's reason).
#[derive(Debug, thiserror::Error)]
enum FetchFailure {
    /// A failure no attempt more would cure (`decisions::download_failure_is_final`).
    #[error("{url}: {source}")]
    Final {
        url: String,
        source: crate::repositories::objects::TransferError,
    },
    /// `last`: the last attempt's failure, in words.
    #[error("{url}: {attempts} attempts failed; the last: {last}")]
    Attempts {
        url: String,
        attempts: u32,
        last: String,
    },
    /// Attempt `attempt` failed after the step had spent more than the margin its share keeps
    /// beyond one request's timeout: the next attempt might not fit, so the next tick makes it
    /// (`JobRecord::slow_attempts`). A server that never answers, or answers errors slowly,
    /// costs a tick's share an attempt rather than outliving every share for ever.
    #[error("{url}: attempt {attempt} timed out ({last}); the next tick tries again")]
    Later {
        url: String,
        attempt: u32,
        last: String,
        /// The attempt ran to the client's timeout: its server hangs.
        hung: bool,
    },
}

/// One file into the job's object folder.
async fn fetch_file(
    ctx: &Ctx,
    job: &JobRecord,
    file: &crate::domain::ingest::manifest::ManifestFile,
) -> Result<StoredFile, FetchFailure> {
    let key = ctx.ingest().keys.object(&job.id, &file.name);
    fetch_to(ctx, job, file, &key).await
}

/// One file into `key`, with bounded attempts for failures that may pass.
async fn fetch_to(
    ctx: &Ctx,
    job: &JobRecord,
    file: &crate::domain::ingest::manifest::ManifestFile,
    key: &str,
) -> Result<StoredFile, FetchFailure> {
    let key = key.to_owned();
    let digest = file.digest.as_ref().map(decisions::expected_digest);
    let expected = Expected {
        size: file.size,
        digest: digest.as_deref(),
    };
    let mut last = String::new();
    let objects = ctx.objects();
    let attempts = ctx.config.ingest.download_attempts;
    let step_started = tokio::time::Instant::now();
    for attempt in (job.slow_attempts + 1).min(attempts)..=attempts {
        let attempt_started = tokio::time::Instant::now();
        match objects
            .copy_in(
                &key,
                ctx.remote.fetch(&file.url),
                &expected,
                ctx.config.ingest.timeout,
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
            Err(source) if decisions::download_failure_is_final(&source.to_string()) => {
                return Err(FetchFailure::Final {
                    url: file.url.clone(),
                    source,
                })
            }
            Err(why) => {
                tracing::warn!(job = %job.id, url = file.url, attempt, error = %why, "download failed");
                last = why.to_string();
                if attempt < attempts
                    && !crate::handlers::ingest::another_attempt_fits(step_started)
                {
                    return Err(FetchFailure::Later {
                        url: file.url.clone(),
                        attempt,
                        last,
                        hung: attempt_started.elapsed() >= ctx.config.ingest.timeout,
                    });
                }
            }
        }
    }
    Err(FetchFailure::Attempts {
        url: file.url.clone(),
        attempts: ctx.config.ingest.download_attempts,
        last,
    })
}

/// Downloading → processing (every file stored, digests checked, the size recomputed) or failed.
pub async fn download(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    if urls_of(&job).iter().any(|u| s.hangs(u)) {
        s.waiting_on_hosts += 1;
        return Ok(());
    }
    let stored = match &job.object.payload {
        Payload::Files { files } => match download_files(ctx, &job, files).await {
            Err(FetchFailure::Later {
                attempt, url, hung, ..
            }) => {
                if hung {
                    s.hung(&url);
                }
                return slow_attempt(ctx, &job, attempt, s).await;
            }
            other => other.map_err(|e| e.to_string()),
        },
        Payload::Container { zip } => match download_container(ctx, &job, zip).await? {
            Container::Expanded(files) => Ok(files),
            Container::Refused { why } => Err(why),
            Container::Later { attempt, url, hung } => {
                if hung {
                    s.hung(&url);
                }
                return slow_attempt(ctx, &job, attempt, s).await;
            }
        },
        _ => Err("no files to download".to_owned()),
    };
    let mv = decisions::on_downloaded(match &stored {
        Ok(files) => Ok(files.as_slice()),
        Err(why) => Err(why.as_str()),
    });
    // The true size, and the priority it gives (the estimate may have been wrong, or 0 when no
    // server announced a size): the job's processing marker sorts by it.
    let moved = advance(ctx, &job, &mv, now, |r| {
        if let Ok(files) = &stored {
            let size: u64 = files.iter().map(|f| f.size).sum();
            r.priority = rechecked_priority(ctx, &job, size);
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

/// The URLs a job downloads from.
fn urls_of(job: &JobRecord) -> Vec<&str> {
    match &job.object.payload {
        Payload::Files { files } => files.iter().map(|f| f.url.as_str()).collect(),
        Payload::Container { zip } => vec![zip.url.as_str()],
        _ => Vec::new(),
    }
}

/// Records that the job's download attempt `attempt` timed out, the job still downloading: the
/// next tick's step makes the next attempt.
async fn slow_attempt(
    ctx: &Ctx,
    job: &JobRecord,
    attempt: u32,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    super::note_slow_attempt(ctx, job, JobState::Downloading, attempt).await?;
    s.slow_attempts += 1;
    Ok(())
}

/// The job's files, downloaded in parallel (in manifest order for the record); the first
/// failure, in that order, is the job's reason.
async fn download_files(
    ctx: &Ctx,
    job: &JobRecord,
    files: &[crate::domain::ingest::manifest::ManifestFile],
) -> Result<Vec<StoredFile>, FetchFailure> {
    // The first failure ends the step (the downloads still under way are dropped): one left for
    // the next tick must be recorded within this step's share, not after every other file.
    let mut results = futures::stream::iter(files)
        .map(|f| fetch_file(ctx, job, f))
        .buffered(PARALLEL_DOWNLOADS);
    let mut stored = Vec::with_capacity(files.len());
    while let Some(file) = results.next().await {
        stored.push(file?);
    }
    Ok(stored)
}

/// The priority for the size the download found, from the priority the submission asked for. A
/// job recorded before that was kept keeps the priority it has (its estimate may already have
/// stepped it back: it must not step back twice).
fn rechecked_priority(ctx: &Ctx, job: &JobRecord, size: u64) -> u8 {
    match job.submitted_priority {
        Some(submitted) => {
            decisions::priority_for(submitted, size, ctx.config.ingest.large_job_bytes)
        }
        None => job.priority,
    }
}

/// What downloading a container deposit came to.
enum Container {
    /// The zip was fetched, expanded into these files, and deleted.
    Expanded(Vec<StoredFile>),
    /// The zip could not be fetched or expanded: the job fails with `why` (the zip is kept).
    Refused { why: String },
    /// Its fetch timed out at attempt `attempt`: the next tick tries again.
    Later {
        attempt: u32,
        url: String,
        hung: bool,
    },
}

/// A container deposit's files: the zip fetched (bounded attempts, its digest checked) into the
/// job's folder and expanded ([`crate::handlers::ingest::container`]); the zip then goes (the record names the
/// files, not the zip). A crash after its delete and before the record's write leaves the job
/// DOWNLOADING: the next tick fetches and expands again.
async fn download_container(
    ctx: &Ctx,
    job: &JobRecord,
    zip: &crate::domain::ingest::manifest::ManifestFile,
) -> Result<Container, HandlerError> {
    let key = ctx.ingest().keys.container(&job.id, &zip.name);
    let expanded = match fetch_to(ctx, job, zip, &key).await {
        Err(FetchFailure::Later {
            attempt, url, hung, ..
        }) => return Ok(Container::Later { attempt, url, hung }),
        Ok(fetched) => crate::handlers::ingest::container::expand(ctx, &job.id, &key, fetched.size)
            .await
            .map_err(|e| e.to_string()),
        Err(why) => Err(why.to_string()),
    };
    match expanded {
        Ok(files) => {
            ctx.ingest().files().delete_container(&key).await?;
            Ok(Container::Expanded(files))
        }
        Err(why) => Ok(Container::Refused { why }),
    }
}
