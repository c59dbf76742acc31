//! Storing → recording: seed 004's processing step. In this order, each write before the next
//! call that depends on it:
//!
//! 1. **The identifier** ([`identifier_step`]): the job's own, its local id's, the depositor's,
//!    or one minted from EZID — the mint claimed on the record *before* the request
//!    (`mint_claimed_at`, If-Match) and the answer written to the record *right after* it, so a
//!    restarted job never mints twice; a claim whose answer was never written fails the job
//!    ("minting outcome unknown") for an operator instead of minting again.
//! 2. **The local id's binding** (`local-ids/…`, If-None-Match): the first object stored under a
//!    local id fixes its identifier; another identifier for it fails the job.
//! 3. **The object stored**: the downloaded files copied under `producer/`, the ERC and Dublin
//!    Core files under `system/`, every file read back from the store with the SHA-256 recorded
//!    at download (the store's answer checked), then the storage manifest (checkm) written last.
//! 4. The move to recording, naming the manifest.
//!
//! A mint EZID refuses, a store that answers with other bytes, or a local id bound elsewhere
//! fails the job with its reason (`resume` restarts here: the identifier already on the record
//! is kept). S3 errors on granary's own bucket leave the job storing: the next tick goes on.

use super::jobs::advance;
use super::{Ctx, TickSummary};
use crate::domain::archive::manifest::sha256_hex;
use crate::domain::ingest::deposit::{
    dublin_core_file, erc_file, identifier_step, mint_metadata, on_stored, producer_entry,
    storage_manifest, storage_name, IdentifierStep, ManifestEntry, DUBLIN_CORE_FILE, ERC_FILE,
    MINT_UNKNOWN, STORAGE_MANIFEST,
};
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::record::JobRecord;
use crate::handlers::transfer::hash_object;
use crate::handlers::HandlerError;
use crate::ports::{MintError, PutCondition, StoreError};
use crate::repositories::ingest::Changed;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A local id's binding: the identifier its collection's objects are stored under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LocalIdBinding {
    identifier: String,
    /// The job that bound it.
    job: String,
}

async fn binding(ictx: &Ctx, key: &str) -> Result<Option<LocalIdBinding>, HandlerError> {
    match ictx.store.get(key).await? {
        None => Ok(None),
        Some(o) => serde_json::from_slice(&o.body)
            .map(Some)
            .map_err(|e| HandlerError::Refused(format!("{key} is not a local id binding: {e}"))),
    }
}

/// Writes `edit` to the job's record while it is still storing; `None` when it moved meanwhile.
async fn write_storing(
    ictx: &Ctx,
    job: &JobRecord,
    now: DateTime<Utc>,
    edit: impl Fn(&mut JobRecord),
) -> Result<Option<JobRecord>, HandlerError> {
    let changed = ictx
        .ingest()
        .change_job(&job.id, |r| {
            Ok((r.state == JobState::Storing).then(|| {
                let mut next = r.clone();
                edit(&mut next);
                next.last_modified = now;
                next
            }))
        })
        .await?;
    Ok(match changed {
        Changed::Moved(after) => Some(after),
        _ => None,
    })
}

/// Fails the job with `why` (if it is still storing).
async fn fail(
    ictx: &Ctx,
    job: &JobRecord,
    why: String,
    now: DateTime<Utc>,
    s: &mut TickSummary,
    edit: impl Fn(&mut JobRecord),
) -> Result<(), HandlerError> {
    tracing::warn!(job = %job.id, reason = why, "storing failed");
    if advance(ictx, job, &on_stored(Err(&why)), now, edit).await? {
        s.failed += 1;
    }
    Ok(())
}

/// Claims a mint on the record, mints, and writes the identifier: `Some(identifier)`, or `None`
/// when the job failed or moved (or nothing was sent: the next tick tries again).
async fn mint(
    ictx: &Ctx,
    minter: &dyn crate::ports::Minter,
    shoulder: &str,
    job: &JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<Option<String>, HandlerError> {
    // The claim first: from here on, a lost answer is never minted again.
    let claimed = if crate::mutants::on("mint-without-claim") {
        job.clone()
    } else {
        match write_storing(ictx, job, now, |r| r.mint_claimed_at = Some(now)).await? {
            Some(claimed) => claimed,
            None => return Ok(None),
        }
    };
    match minter.mint(shoulder, &mint_metadata(&claimed)).await {
        Ok(id) => {
            let written = write_storing(ictx, &claimed, now, |r| {
                r.identifier = Some(id.clone());
                r.mint_claimed_at = None;
            })
            .await?;
            tracing::info!(job = %job.id, identifier = id, "minted");
            Ok(written.map(|_| id))
        }
        Err(MintError::NotSent(why)) => {
            // Nothing reached the service: the claim is withdrawn and the next tick mints.
            tracing::warn!(job = %job.id, reason = why, "minting not sent; tried again next tick");
            write_storing(ictx, &claimed, now, |r| r.mint_claimed_at = None).await?;
            Ok(None)
        }
        Err(MintError::Refused(why)) => {
            let reason = format!("minting failed: {why}");
            fail(ictx, &claimed, reason, now, s, |r| r.mint_claimed_at = None).await?;
            Ok(None)
        }
        Err(e @ MintError::Unknown(_)) => {
            let reason = format!(
                "{MINT_UNKNOWN}: {e}; EZID may hold an identifier whose granary.job is {} — \
                 resume with --identifier ID, or --mint-again if it holds none",
                job.id
            );
            fail(ictx, &claimed, reason, now, s, |_| {}).await?;
            Ok(None)
        }
    }
}

/// The step: identifier, binding, files, manifest, then recording.
pub async fn store(
    ictx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let keys = ictx.ingest().keys;
    let local_key = job
        .object
        .local_id
        .as_deref()
        .filter(|l| !l.is_empty())
        .map(|l| keys.local_id(&job.collection, l));
    let known = match &local_key {
        Some(k) => binding(ictx, k).await?,
        None => None,
    };
    let ezid = ictx.config.ingest.ezid.as_ref();
    let minter = ictx.minter.as_deref().zip(ezid);
    let step = identifier_step(
        &job,
        known.as_ref().map(|b| b.identifier.as_str()),
        minter.is_some(),
    );
    let mut job = job;
    let identifier = match step {
        IdentifierStep::Fail(why) => return fail(ictx, &job, why, now, s, |_| {}).await,
        IdentifierStep::Unidentified => None,
        IdentifierStep::Use { identifier, why } => {
            if job.identifier.as_deref() != Some(identifier.as_str()) {
                // Written before anything is stored under it.
                let Some(after) = write_storing(ictx, &job, now, |r| {
                    r.identifier = Some(identifier.clone());
                })
                .await?
                else {
                    return Ok(());
                };
                tracing::info!(job = %job.id, identifier, why, "identifier");
                job = after;
            }
            Some(identifier)
        }
        IdentifierStep::Mint => {
            let Some((minter, ezid)) = minter else {
                return Ok(());
            };
            match mint(ictx, minter, &ezid.shoulder, &job, now, s).await? {
                Some(id) => Some(id),
                None => return Ok(()),
            }
        }
    };
    // The local id's binding: the first one stands.
    if let (Some(key), Some(id), None) = (&local_key, &identifier, &known) {
        let body = crate::contracts::encode(
            "a local id binding",
            &LocalIdBinding {
                identifier: id.clone(),
                job: job.id.to_string(),
            },
        )?;
        match ictx.store.put(key, body, PutCondition::IfAbsent).await {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) => {
                if let Some(other) = binding(ictx, key).await? {
                    if &other.identifier != id {
                        let why = format!(
                            "local id {} was bound to {} by {} meanwhile; this job holds {id}",
                            job.object.local_id.as_deref().unwrap_or(""),
                            other.identifier,
                            other.job
                        );
                        return fail(ictx, &job, why, now, s, |_| {}).await;
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    match stored(ictx, &job, identifier.as_deref(), now).await? {
        Ok(manifest_key) => {
            let key = manifest_key.clone();
            if advance(ictx, &job, &on_stored(Ok(&manifest_key)), now, |r| {
                r.storage_manifest = Some(key.clone());
            })
            .await?
            {
                s.stored += 1;
            }
            Ok(())
        }
        Err(why) => fail(ictx, &job, why, now, s, |_| {}).await,
    }
}

/// Copies the object into storage with its ERC and Dublin Core files, checks every file reads
/// back as recorded, then writes the storage manifest: `Ok(its key)`, or `Err(why)` when the
/// store answered with other bytes than were stored.
async fn stored(
    ictx: &Ctx,
    job: &JobRecord,
    identifier: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Result<String, String>, HandlerError> {
    let at = ictx
        .ingest()
        .keys
        .storage(&job.collection, &storage_name(identifier, job.id.as_str()));
    let mut entries: Vec<ManifestEntry> = Vec::with_capacity(job.stored.len() + 2);
    for file in &job.stored {
        let entry = producer_entry(file, &at);
        match ictx.store.copy(&file.key, &entry.key).await {
            Ok(()) => {}
            // The download's copy is gone (removed by hand, or a lifecycle rule): only a resume
            // that downloads again, or the file put back, can store it.
            Err(StoreError::NotFound { .. }) => {
                return Ok(Err(format!("storage: {} is missing", file.key)))
            }
            Err(e) => return Err(e.into()),
        }
        entries.push(entry);
    }
    for (name, body) in [
        (ERC_FILE, erc_file(&job.deposit, identifier)),
        (DUBLIN_CORE_FILE, dublin_core_file(&job.deposit, identifier)),
    ] {
        let key = format!("{at}{name}");
        let bytes = Bytes::from(body);
        ictx.store
            .put(&key, bytes.clone(), PutCondition::Overwrite)
            .await?;
        entries.push(ManifestEntry {
            key,
            sha256: sha256_hex(&bytes),
            size: bytes.len() as u64,
            name: name.to_owned(),
        });
    }
    // The store's answer: every file read back with the size and SHA-256 it was stored with.
    for e in &entries {
        match hash_object(ictx.store.clone(), &e.key).await {
            Ok((size, sha)) if size == e.size && sha == e.sha256 => {}
            Ok((size, sha)) => {
                return Ok(Err(format!(
                    "storage: {} reads back as {size} bytes with SHA-256 {sha}; stored {} bytes with {}",
                    e.key, e.size, e.sha256
                )))
            }
            Err(crate::ports::SourceError::Permanent { message, .. }) => {
                return Ok(Err(format!("storage: {} cannot be read back: {message}", e.key)))
            }
            // Throttled or cut short: the next tick reads it again.
            Err(e) => return Err(e.into()),
        }
    }
    let name = identifier.unwrap_or(job.id.as_str());
    let manifest_key = format!("{at}{STORAGE_MANIFEST}");
    ictx.store
        .put(
            &manifest_key,
            Bytes::from(storage_manifest(name, &entries, now)),
            PutCondition::Overwrite,
        )
        .await?;
    Ok(Ok(manifest_key))
}
