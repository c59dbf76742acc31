//! The archive task handler: one message, one task — archive a shard, post-process, or store to
//! a destination — then the fan-in. A task runs only while its record says pending and its job
//! is in its phase; its outcome is written with If-Match, so a duplicate delivery that finds it
//! done only checks the fan-in, and a delivery for a phase the job has left does nothing. Every
//! write a task makes is idempotent (members are stored under their checksum), so a task run
//! twice by two deliveries stores the same bytes.

use super::steps::fan_in;
use super::{ArchiveTick, Ctx};
use crate::contracts::archive::TaskMessage;
use crate::domain::archive::job::Phase;
use crate::domain::archive::job::TaskState;
use crate::domain::archive::manifest::{self, Manifest, Member};
use crate::domain::archive::record::{ArchiveJob, Destination, TaskRecord};
use crate::handlers::HandlerError;
use crate::repositories::objects::Expected;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::time::Duration;

/// Per object copied.
const COPY_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a task failed, and whether running it again may help.
#[derive(Debug)]
pub struct TaskFailure {
    pub reason: String,
    pub recoverable: bool,
}

impl TaskFailure {
    fn recoverable(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            recoverable: true,
        }
    }
    fn fatal(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            recoverable: false,
        }
    }
}

/// What a delivery did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// Ran: done or failed.
    Ran { state: TaskState },
    /// Already ended (a duplicate): only the fan-in was checked.
    Duplicate,
    /// The job is not in the task's phase any more (or is gone).
    Stale,
}

/// Handles one task message.
pub async fn handle(
    ctx: &Ctx,
    message: &TaskMessage,
    now: DateTime<Utc>,
) -> Result<TaskOutcome, HandlerError> {
    let TaskMessage { job, phase, task } = message;
    let Some(record) = ctx.archives().job(job).await? else {
        return Ok(TaskOutcome::Stale);
    };
    let record = record.value;
    if record.state != phase.state() {
        return Ok(TaskOutcome::Stale);
    }
    let Some(current) = ctx.archives().task(job, *phase, task).await? else {
        return Ok(TaskOutcome::Stale);
    };
    let mut tick = ArchiveTick::default();
    if current.value.state != TaskState::Pending {
        fan_in(ctx, job, *phase, now, &mut tick).await?;
        return Ok(TaskOutcome::Duplicate);
    }
    let result = match phase {
        Phase::ActivityArchiving => archive_shard(ctx, &record, task).await,
        Phase::PostProcessing => post_process(ctx, &record).await.map(|()| Vec::new()),
        Phase::Store => store_to(ctx, &record, task).await.map(|()| Vec::new()),
    };
    let (state, reason, members) = match result {
        Ok(members) => (TaskState::Done, "done".to_owned(), members),
        Err(f) => {
            tracing::warn!(archive = job, %phase, task, reason = f.reason, recoverable = f.recoverable, "archive task failed");
            (
                TaskState::Failed {
                    recoverable: f.recoverable,
                },
                f.reason,
                Vec::new(),
            )
        }
    };
    ctx.archives()
        .change_task(job, *phase, task, |t| {
            (t.state == TaskState::Pending).then(|| TaskRecord {
                state,
                reason: reason.clone(),
                runs: t.runs + 1,
                members: members.clone(),
                ..t.clone()
            })
        })
        .await?;
    fan_in(ctx, job, *phase, now, &mut tick).await?;
    Ok(TaskOutcome::Ran { state })
}

fn shard_number(task: &str) -> Option<u32> {
    task.strip_prefix("shard-")?.parse().ok()
}

/// A store error is worth another run; a missing source object is not.
fn failure_of(what: &str, e: &crate::ports::SourceError) -> TaskFailure {
    match e {
        crate::ports::SourceError::Permanent { .. } => TaskFailure::fatal(format!("{what}: {e}")),
        crate::ports::SourceError::Transient { .. } => {
            TaskFailure::recoverable(format!("{what}: {e}"))
        }
    }
}

/// ActivityArchiving: every object of the shard into the staged archive under its SHA-256.
async fn archive_shard(
    ctx: &Ctx,
    job: &ArchiveJob,
    task: &str,
) -> Result<Vec<Member>, TaskFailure> {
    let n = shard_number(task).ok_or_else(|| TaskFailure::fatal(format!("{task} is no shard")))?;
    let keys = ctx
        .archives()
        .shard(&job.id, n)
        .await
        .map_err(|e| TaskFailure::recoverable(e.to_string()))?
        .ok_or_else(|| TaskFailure::fatal(format!("shard {n} of {} is missing", job.id)))?;
    let source = ctx.bucket(&job.source.bucket, None);
    let objects = ctx.objects();
    let staged = ctx.archives().keys.staged(&job.id);
    let mut members = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let tmp = format!("{}{task}/{i:05}", ctx.archives().keys.tmp(&job.id));
        let found = objects
            .copy_in(&tmp, source.open(key), &Expected::default(), COPY_TIMEOUT)
            .await
            .map_err(|why| {
                let permanent = why.to_string().contains("not retried");
                let reason = format!("s3://{}/{key}: {why}", job.source.bucket);
                if permanent {
                    TaskFailure::fatal(reason)
                } else {
                    TaskFailure::recoverable(reason)
                }
            })?;
        let member = Member {
            name: key
                .strip_prefix(&job.source.prefix)
                .unwrap_or(key)
                .to_owned(),
            // `Found` spells digests as the transfer checks them (`sha256:<hex>`).
            sha256: found
                .sha256
                .strip_prefix("sha256:")
                .unwrap_or(&found.sha256)
                .to_owned(),
            size: found.size,
        };
        let address = format!("{staged}{}", member.key());
        let store_err = |e: crate::ports::StoreError| TaskFailure::recoverable(e.to_string());
        ctx.archives()
            .move_into_staged(&tmp, &address)
            .await
            .map_err(store_err)?;
        members.push(member);
    }
    Ok(members)
}

/// PostProcessing: CheckIntegrity (every member re-read: its size and SHA-256 must be what
/// archiving recorded, which its key also says), CalculateChecksums (the manifest and
/// `SHA256SUMS`), Sign (the checksums, with the operator's Ed25519 key).
async fn post_process(ctx: &Ctx, job: &ArchiveJob) -> Result<(), TaskFailure> {
    let store_err = |e: crate::ports::StoreError| TaskFailure::recoverable(e.to_string());
    let tasks = ctx
        .archives()
        .tasks(&job.id, Phase::ActivityArchiving)
        .await
        .map_err(|e| TaskFailure::recoverable(e.to_string()))?;
    let members: Vec<Member> = tasks.into_iter().flat_map(|t| t.members).collect();
    let staged = ctx.archives().keys.staged(&job.id);
    // CheckIntegrity.
    for m in &members {
        let key = format!("{staged}{}", m.key());
        let (size, sha) = ctx
            .objects()
            .hash(&key)
            .await
            .map_err(|e| failure_of(&format!("member {}", m.name), &e))?;
        if size != m.size || sha != m.sha256 {
            return Err(TaskFailure::fatal(format!(
                "integrity: member {} ({key}) reads back as {size} bytes with SHA-256 {sha}; archived as {} bytes with {}",
                m.name, m.size, m.sha256
            )));
        }
    }
    // CalculateChecksums.
    let manifest = Manifest::new(&job.id, &job.source.to_string(), members);
    let manifest_body = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| TaskFailure::fatal(format!("the manifest: {e}")))?;
    let sums = manifest.sums(&manifest::sha256_hex(&manifest_body));
    let put = |name: &'static str, body: Vec<u8>| async move {
        ctx.archives()
            .put_staged_file(&job.id, name, Bytes::from(body))
            .await
            .map_err(store_err)
    };
    put(manifest::MANIFEST, manifest_body.clone()).await?;
    put(manifest::SUMS, sums.clone().into_bytes()).await?;
    // Sign.
    let key = ctx.signing_key.as_ref().ok_or_else(|| {
        TaskFailure::fatal(
            "no signing key: set GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER to the SSM parameter holding it",
        )
    })?;
    let (signature, public) = manifest::sign(key, sums.as_bytes());
    put(manifest::SIGNATURE, format!("{signature}\n").into_bytes()).await?;
    put(manifest::PUBLIC_KEY, format!("{public}\n").into_bytes()).await?;
    Ok(())
}

/// Storage classes whose objects cannot be read back without a restore: their copies are
/// verified by size only.
fn readable(class: Option<&str>) -> bool {
    !matches!(class, Some("GLACIER" | "DEEP_ARCHIVE"))
}

/// Store: the staged archive copied to one destination (what is already there with the right
/// size is kept), then verified there: every file present at its size, and — where the storage
/// class allows reading — every member's SHA-256 read back equal to its name.
async fn store_to(ctx: &Ctx, job: &ArchiveJob, task: &str) -> Result<(), TaskFailure> {
    let n: usize = task
        .strip_prefix("dest-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| TaskFailure::fatal(format!("{task} is no destination")))?;
    let dest: &Destination = job
        .destinations
        .get(n)
        .ok_or_else(|| TaskFailure::fatal(format!("{} has no destination {n}", job.id)))?;
    let store_err = |e: crate::ports::StoreError| TaskFailure::recoverable(e.to_string());
    // Errors at the destination name its bucket (the store's own message names only the key).
    let dest_err = |e: crate::ports::StoreError| {
        TaskFailure::recoverable(format!("destination s3://{}: {e}", dest.bucket))
    };
    let target = ctx.bucket(&dest.bucket, dest.storage_class.as_deref());
    let objects = ctx.objects();
    let staged = ctx.archives().keys.staged(&job.id);
    let at = dest.archive_prefix(&job.id);
    let files = ctx
        .archives()
        .staged_files(&job.id)
        .await
        .map_err(store_err)?;
    let there = target.sizes_under(&at).await.map_err(dest_err)?;
    for f in &files {
        let rel = f.key.strip_prefix(&staged).unwrap_or(&f.key);
        let key = format!("{at}{rel}");
        if there.get(&key) == Some(&f.size) {
            continue;
        }
        let expected = Expected {
            size: Some(f.size),
            digest: None,
        };
        target
            .copy_in(&key, objects.open(&f.key), &expected, COPY_TIMEOUT)
            .await
            .map_err(|why| {
                TaskFailure::recoverable(format!("copying to s3://{}/{key}: {why}", dest.bucket))
            })?;
    }
    // Verify the copy.
    let copied = target.sizes_under(&at).await.map_err(dest_err)?;
    for f in &files {
        let rel = f.key.strip_prefix(&staged).unwrap_or(&f.key);
        let key = format!("{at}{rel}");
        match copied.get(&key) {
            Some(size) if *size == f.size => {}
            Some(size) => {
                return Err(TaskFailure::recoverable(format!(
                    "s3://{}/{key} holds {size} bytes, {} were copied",
                    dest.bucket, f.size
                )))
            }
            None => {
                return Err(TaskFailure::recoverable(format!(
                    "s3://{}/{key} is missing after the copy",
                    dest.bucket
                )))
            }
        }
        if let Some(sha) = rel.strip_prefix(manifest::MEMBERS) {
            if readable(dest.storage_class.as_deref()) {
                let (_, read) = target.hash(&key).await.map_err(|e| {
                    failure_of(&format!("reading back s3://{}/{key}", dest.bucket), &e)
                })?;
                if read != sha {
                    return Err(TaskFailure::recoverable(format!(
                        "s3://{}/{key} reads back with SHA-256 {read}",
                        dest.bucket
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The archive task Lambda: each SQS record one task message. A message that is not one is
/// reported failed (SQS parks it in the task queue's DLQ after its receives).
pub async fn handle_sqs(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    crate::handlers::for_each_record(event, 4, |body| async move {
        let message: TaskMessage = serde_json::from_str(&body)
            .map_err(|e| HandlerError::Refused(format!("not an archive task message: {e}")))?;
        handle(ctx, &message, crate::clock::now()).await.map(|_| ())
    })
    .await
}
