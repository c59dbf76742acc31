//! Storing → recording: seed 004's processing step. In this order, each write before the next
//! call that depends on it:
//!
//! 1. **The identifier** ([`identifier_step`]): the job's own, its local id's, the depositor's,
//!    or one minted from EZID. A mint is not idempotent, so:
//!    - the local id is **reserved** for this job first (its binding, If-None-Match) — two jobs
//!      of one local id never both mint ([`binding_step`]);
//!    - the mint is **claimed** on the job's record (`mint_claimed_at` and a token, If-Match)
//!      only while nothing is claimed or known — two passes at once never both mint;
//!    - the answer is written to the record right after, only by the pass whose token the
//!      claim holds; a claim whose answer was never written fails the job ("minting outcome
//!      unknown") for an operator instead of minting again.
//! 2. **The local id's binding** completed with the identifier (If-Match; created If-None-Match
//!    for a depositor's identifier): another identifier bound meanwhile fails the job.
//! 3. **The object stored** under its own folder for this deposit: the downloaded files copied
//!    under `producer/`, the ERC and Dublin Core files under `system/`, every file read back with
//!    the SHA-256 recorded at download (the store's answer checked), then the storage manifest
//!    (checkm, naming the object and the job) written last.
//! 4. The move to recording, naming the manifest.
//!
//! A mint EZID refuses, a store that answers with other bytes, a downloaded file that is gone, or
//! a local id bound elsewhere fails the job with its reason (`resume` restarts here, keeping the
//! identifier on the record). What may pass — S3 refusing or throttling granary's bucket, the
//! identifier service unreachable or refusing granary's login, another job minting for the same
//! local id — leaves the job storing for the next tick (an error counted in the tick's summary).

use super::jobs::advance;
use super::{Ctx, TickSummary};
use crate::domain::archive::manifest::sha256_hex;
use crate::domain::ingest::deposit::{
    binding_step, dublin_core_file, erc_file, identifier_step, mint_metadata, on_stored,
    producer_entry, rebind, storage_manifest, storage_name, BindingStep, Holder, IdentifierStep,
    LocalIdBinding, ManifestEntry, DUBLIN_CORE_FILE, ERC_FILE, MINT_UNKNOWN, STORAGE_MANIFEST,
};
use crate::domain::ingest::index::JobId;
use crate::domain::ingest::job::JobState;
use crate::domain::ingest::record::JobRecord;
use crate::domain::machine::Refused;
use crate::handlers::HandlerError;
use crate::ports::{MintError, PutCondition, StoreError};
use crate::repositories::json::{Changed, RecordError, Versioned};
use bytes::Bytes;
use chrono::{DateTime, Utc};

/// A local id's binding as read, with the condition that replaces exactly that version.
type Bound = Option<Versioned<LocalIdBinding>>;

async fn binding(ctx: &Ctx, key: &str) -> Result<Bound, HandlerError> {
    Ok(ctx.ingest().files().local_id_binding(key).await?)
}

/// Writes `binding` at `key` under `condition` (created If-None-Match, or replacing the version
/// read); `Ok(false)` when someone else wrote first.
async fn put_binding(
    ctx: &Ctx,
    key: &str,
    binding: &LocalIdBinding,
    condition: PutCondition,
) -> Result<bool, HandlerError> {
    Ok(ctx
        .ingest()
        .files()
        .put_local_id_binding(key, binding, condition)
        .await?)
}

/// What the job holding a local id's reservation has become.
async fn holder(ctx: &Ctx, job: &str) -> Result<Holder, HandlerError> {
    let Ok(id) = JobId::parse(job) else {
        return Ok(Holder::Gone);
    };
    Ok(match ctx.ingest().job(&id).await? {
        None => Holder::Gone,
        Some(j) => match j.value.identifier {
            Some(identifier) => Holder::Identified(identifier),
            None if matches!(j.value.state, JobState::Failed | JobState::Deleted)
                && j.value.mint_claimed_at.is_none() =>
            {
                Holder::Gone
            }
            None => Holder::Busy,
        },
    })
}

/// Writes `edit` to the job's record while it is still storing and `when` holds; `None` when it
/// moved, or `when` no longer holds, meanwhile.
async fn write_storing(
    ctx: &Ctx,
    job: &JobRecord,
    now: DateTime<Utc>,
    when: impl Fn(&JobRecord) -> bool,
    edit: impl Fn(&mut JobRecord),
) -> Result<Option<JobRecord>, HandlerError> {
    super::jobs::write_in_state(ctx, job, JobState::Storing, now, when, edit).await
}

/// Fails the job with `why` (if it is still storing).
async fn fail(
    ctx: &Ctx,
    job: &JobRecord,
    why: String,
    now: DateTime<Utc>,
    s: &mut TickSummary,
    edit: impl Fn(&mut JobRecord),
) -> Result<(), HandlerError> {
    tracing::warn!(job = %job.id, reason = why, "storing failed");
    if advance(ctx, job, &on_stored(Err(&why)), now, edit).await? {
        s.failed += 1;
    }
    Ok(())
}

/// A token no other pass's claim has: the claim's time and 64 random bits.
fn claim_token(now: DateTime<Utc>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(now.timestamp_nanos_opt().unwrap_or_default());
    format!("{}/{:016x}", now.to_rfc3339(), h.finish())
}

/// Claims a mint on the record, mints, and writes the identifier: `Some(the record holding it)`,
/// or `None` when the job failed or moved, or another pass claimed first.
async fn mint(
    ctx: &Ctx,
    minter: &dyn crate::ports::Minter,
    shoulder: &str,
    job: &JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<Option<JobRecord>, HandlerError> {
    let token = claim_token(now);
    let unclaimed = |r: &JobRecord| r.identifier.is_none() && r.mint_claimed_at.is_none();
    let ours = |r: &JobRecord| r.mint_claim_token.as_deref() == Some(token.as_str());
    // The claim first: from here on, a lost answer is never minted again.
    let claimed = if crate::mutants::on("mint-without-claim") {
        job.clone()
    } else {
        let claim = |r: &mut JobRecord| {
            r.mint_claimed_at = Some(now);
            r.mint_claim_token = Some(token.clone());
        };
        // `ours` too: a claim whose PUT landed, its answer lost, and the SDK's retry of it
        // answered 412 reads back as this pass's own (S3 user guide, "conditional writes": 412
        // when the ETag no longer matches; SDK for Rust, "Retries": standard mode resends after a
        // timeout or a 5xx). The token is 64 random bits: no other pass holds it.
        match write_storing(ctx, job, now, unclaimed, claim).await? {
            Some(claimed) => claimed,
            None => match ctx.ingest().job(&job.id).await? {
                Some(r) if r.value.state == JobState::Storing && ours(&r.value) => r.value,
                _ => return Ok(None),
            },
        }
    };
    match minter.mint(shoulder, &mint_metadata(&claimed)).await {
        Ok(id) => {
            // Logged before it is written: were the write to fail, the log still has it.
            tracing::info!(job = %job.id, identifier = id, "minted");
            let take = |r: &mut JobRecord| {
                r.identifier = Some(id.clone());
                r.mint_claimed_at = None;
                r.mint_claim_token = None;
            };
            let when = |r: &JobRecord| ours(r) || crate::mutants::on("mint-without-claim");
            match write_storing(ctx, &claimed, now, when, take).await {
                Ok(after) => Ok(after),
                Err(e) => Err(HandlerError::Refused(format!(
                    "minted {id} for {} and could not record it: {e}",
                    job.id
                ))),
            }
        }
        Err(MintError::Unavailable(why)) => {
            // Nothing was minted: the claim is withdrawn and the next tick mints.
            let withdraw = |r: &mut JobRecord| {
                r.mint_claimed_at = None;
                r.mint_claim_token = None;
            };
            write_storing(ctx, &claimed, now, ours, withdraw).await?;
            Err(HandlerError::Refused(format!(
                "minting for {} not possible now: {why}",
                job.id
            )))
        }
        Err(MintError::Refused(why)) => {
            let reason = format!("minting failed: {why}");
            let withdraw = |r: &mut JobRecord| {
                r.mint_claimed_at = None;
                r.mint_claim_token = None;
            };
            fail(ctx, &claimed, reason, now, s, withdraw).await?;
            Ok(None)
        }
        Err(e @ MintError::Unknown(_)) => {
            let reason = format!(
                "{MINT_UNKNOWN}: {e}; EZID may hold an identifier whose granary.job is {} — \
                 resume with --identifier ID, or --mint-again if it holds none",
                job.id
            );
            fail(ctx, &claimed, reason, now, s, |_| {}).await?;
            Ok(None)
        }
    }
}

/// The identifier this job's object is stored under ([`Identified::Under`]; `None`: none, by
/// design), or [`Identified::Stopped`] when the step stops here this tick (the job failed,
/// moved, or waits).
async fn identify(
    ctx: &Ctx,
    job: &mut JobRecord,
    local_key: Option<&str>,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<Identified, HandlerError> {
    let bound = match local_key {
        Some(k) => binding(ctx, k).await?,
        None => None,
    };
    let known = bound.as_ref().and_then(|b| b.value.identifier.clone());
    let ezid = ctx.config.ingest.ezid.as_ref();
    let minter = ctx.minter.as_deref().zip(ezid);
    let lease = ctx.config.leases.claim_lease;
    let step = identifier_step(job, known.as_deref(), minter.is_some(), now, lease);
    let identifier = match step {
        IdentifierStep::Fail(why) => {
            fail(ctx, job, why, now, s, |_| {}).await?;
            return Ok(Identified::Stopped);
        }
        IdentifierStep::Wait(why) => return Err(HandlerError::Refused(why)),
        IdentifierStep::InFlight(why) => {
            tracing::info!(job = %job.id, reason = why, "waiting for a mint");
            return Ok(Identified::Stopped);
        }
        IdentifierStep::Unidentified => return Ok(Identified::Under(None)),
        IdentifierStep::Use { identifier, .. } => identifier,
        IdentifierStep::Mint => {
            let Some((minter, ezid)) = minter else {
                return Ok(Identified::Stopped);
            };
            // One mint per local id: reserve it (or find what its holder minted) first.
            let read = bound.as_ref().map(|b| &b.value);
            let step = match (read, local_key) {
                (_, None) => BindingStep::Mint,
                (Some(b), Some(_)) if b.job != job.id.as_str() && b.identifier.is_none() => {
                    binding_step(Some(b), job.id.as_str(), holder(ctx, &b.job).await?)
                }
                (b, Some(_)) => binding_step(b, job.id.as_str(), Holder::Busy),
            };
            let mine = LocalIdBinding {
                identifier: None,
                job: job.id.to_string(),
            };
            let go = match (step, local_key) {
                (BindingStep::Mint, _) => true,
                (BindingStep::Reserve, Some(k)) => {
                    put_binding(ctx, k, &mine, PutCondition::IfAbsent).await?
                }
                (BindingStep::TakeOver, Some(k)) => match &bound {
                    Some(b) => put_binding(ctx, k, &mine, b.condition()).await?,
                    None => false,
                },
                (BindingStep::Use(id), _) => {
                    tracing::info!(job = %job.id, identifier = id, "the local id's holder minted it");
                    return use_identifier(ctx, job, id, now).await;
                }
                (BindingStep::Wait(why), _) => {
                    tracing::info!(job = %job.id, reason = why, "waiting");
                    return Ok(Identified::Stopped);
                }
                (BindingStep::Reserve | BindingStep::TakeOver, None) => true,
            };
            if !go {
                // Another job reserved it meanwhile: the next tick looks again.
                return Ok(Identified::Stopped);
            }
            match mint(ctx, minter, &ezid.shoulder, job, now, s).await? {
                Some(after) => {
                    *job = after;
                    match job.identifier.clone() {
                        Some(id) => id,
                        None => return Ok(Identified::Stopped),
                    }
                }
                None => return Ok(Identified::Stopped),
            }
        }
    };
    use_identifier(ctx, job, identifier, now).await
}

/// What the identifier step came to this tick.
enum Identified {
    /// The object is stored under this identifier (`None`: none, by design).
    Under(Option<String>),
    /// The job stops here this tick (failed, moved, or waiting); nothing more to do.
    Stopped,
}

/// Writes `identifier` to the record (if it does not hold it yet) before anything is stored.
async fn use_identifier(
    ctx: &Ctx,
    job: &mut JobRecord,
    identifier: String,
    now: DateTime<Utc>,
) -> Result<Identified, HandlerError> {
    if job.identifier.as_deref() == Some(identifier.as_str()) {
        return Ok(Identified::Under(Some(identifier)));
    }
    let unset = |r: &JobRecord| r.identifier.is_none();
    let set = |r: &mut JobRecord| r.identifier = Some(identifier.clone());
    match write_storing(ctx, job, now, unset, set).await? {
        Some(after) => {
            *job = after;
            Ok(Identified::Under(Some(identifier)))
        }
        None => Ok(Identified::Stopped),
    }
}

/// Completes (or creates) the local id's binding with `identifier` ([`rebind`], through the one
/// record protocol): [`Bind::Refused`] when another identifier is bound to it.
async fn bind(
    ctx: &Ctx,
    key: &str,
    local: &str,
    identifier: &str,
    job: &JobRecord,
) -> Result<Bind, HandlerError> {
    // Twice at most: a binding created by someone else between our read and our create is then
    // decided by the protocol like any other.
    for _ in 0..2 {
        // The record protocol takes a refusal as text (the job's failure reason).
        let decide =
            |b: &LocalIdBinding| rebind(b, local, identifier, job.id.as_str()).map_err(Refused::of);
        let files = ctx.ingest().files();
        match files.change_local_id_binding(key, local, decide).await {
            Ok(Changed::Moved(_) | Changed::Unchanged(_)) => return Ok(Bind::Bound),
            Err(RecordError::Illegal(why)) => return Ok(Bind::Refused { why }),
            Err(e) => return Err(e.into()),
            Ok(Changed::Missing) => {
                let ours = LocalIdBinding {
                    identifier: Some(identifier.to_owned()),
                    job: job.id.to_string(),
                };
                if put_binding(ctx, key, &ours, PutCondition::IfAbsent).await? {
                    return Ok(Bind::Bound);
                }
            }
        }
    }
    Err(HandlerError::Refused(format!(
        "{key} kept changing while {} bound it",
        job.id
    )))
}

/// What binding the local id to the identifier came to.
enum Bind {
    /// The binding names the identifier (it did, or now does).
    Bound,
    /// Another identifier is bound to the local id: the job fails with `why`.
    Refused { why: String },
}

/// What storing the object came to.
enum Storage {
    /// Every file is stored and read back as recorded; the storage manifest is at `manifest_key`.
    Stored { manifest_key: String },
    /// A downloaded file is gone, or the store answered with other bytes: the job fails with
    /// `why`.
    Refused { why: String },
}

/// The step: identifier, binding, files, manifest, then recording.
pub async fn store(
    ctx: &Ctx,
    job: JobRecord,
    now: DateTime<Utc>,
    s: &mut TickSummary,
) -> Result<(), HandlerError> {
    let keys = ctx.ingest().keys;
    let local = job.object.local_id.clone().filter(|l| !l.is_empty());
    let local_key = local.as_deref().map(|l| keys.local_id(&job.collection, l));
    let mut job = job;
    let identifier = match identify(ctx, &mut job, local_key.as_deref(), now, s).await? {
        Identified::Under(identifier) => identifier,
        Identified::Stopped => return Ok(()),
    };
    if let (Some(key), Some(local), Some(id)) = (&local_key, &local, &identifier) {
        if let Bind::Refused { why } = bind(ctx, key, local, id, &job).await? {
            return fail(ctx, &job, why, now, s, |_| {}).await;
        }
    }
    match stored(ctx, &job, identifier.as_deref(), now).await? {
        Storage::Stored { manifest_key } => {
            let key = manifest_key.clone();
            if advance(ctx, &job, &on_stored(Ok(&manifest_key)), now, |r| {
                r.storage_manifest = Some(key.clone());
            })
            .await?
            {
                s.stored += 1;
            }
            Ok(())
        }
        Storage::Refused { why } => fail(ctx, &job, why, now, s, |_| {}).await,
    }
}

/// Copies the object into its folder in storage with its ERC and Dublin Core files, checks every
/// file reads back as recorded, then writes the storage manifest: [`Storage::Stored`] (its key),
/// or [`Storage::Refused`] when a downloaded file is gone or the store answered with other bytes
/// than were stored.
async fn stored(
    ctx: &Ctx,
    job: &JobRecord,
    identifier: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Storage, HandlerError> {
    let ingest = ctx.ingest();
    let files = ingest.files();
    let at = ingest
        .keys
        .storage(&job.collection, &storage_name(identifier, job.id.as_str()));
    let mut entries: Vec<ManifestEntry> = Vec::with_capacity(job.stored.len() + 2);
    for file in &job.stored {
        let entry = producer_entry(file, &at);
        match files.copy_into_storage(&file.key, &entry.key).await {
            Ok(()) => {}
            // The download's copy is gone (removed by hand, or a lifecycle rule): only the file
            // put back, or a new submission, can store it.
            Err(StoreError::NotFound { .. }) => {
                let why = format!("storage: {} is missing", file.key);
                return Ok(Storage::Refused { why });
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
        files.put_storage_file(&key, bytes.clone()).await?;
        entries.push(ManifestEntry {
            key,
            sha256: sha256_hex(&bytes),
            size: bytes.len() as u64,
            name: name.to_owned(),
        });
    }
    // The store's answer: every file read back with the size and SHA-256 it was stored with.
    for e in &entries {
        match ctx.objects().hash(&e.key).await {
            Ok((size, sha)) if size == e.size && sha == e.sha256 => {}
            Ok((size, sha)) => {
                let why = format!(
                    "storage: {} reads back as {size} bytes with SHA-256 {sha}; stored {} bytes with {}",
                    e.key, e.size, e.sha256
                );
                return Ok(Storage::Refused { why });
            }
            Err(crate::ports::SourceError::Permanent { message, .. }) => {
                let why = format!("storage: {} cannot be read back: {message}", e.key);
                return Ok(Storage::Refused { why });
            }
            // Throttled or cut short: the next tick reads it again.
            Err(e) => return Err(e.into()),
        }
    }
    let name = identifier.unwrap_or(job.id.as_str());
    let manifest_key = format!("{at}{STORAGE_MANIFEST}");
    let manifest = storage_manifest(name, job.id.as_str(), &entries, now);
    files
        .put_storage_manifest(&manifest_key, Bytes::from(manifest))
        .await?;
    Ok(Storage::Stored { manifest_key })
}
