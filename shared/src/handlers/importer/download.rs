//! Download: stream the file from its source into granary's bucket, part by part, hashing as it
//! goes; verify the size (announced and registered) and the published digest; retry at once
//! while attempts remain, IGNORE after. A file already stored and intact skips straight to
//! DOWNLOADED.

use super::Ctx;
use crate::contracts::messages::{ItemNotice, Notice, Outcome};
use crate::domain::granule::GranuleId;
use crate::domain::item::ItemRecord;
use crate::domain::lifecycle::decisions::{self, DownloadResult, StoredFile};
use crate::domain::lifecycle::ItemState::{self, *};
use crate::handlers::HandlerError;
use crate::repositories::json::Changed;
use crate::repositories::objects::{Expected, Found};

const BY: &str = "importer-download";

/// Where an item's raw file is stored (`domain::layout::items::raw_key`).
pub fn stored_key(ctx: &Ctx, record: &ItemRecord) -> String {
    crate::domain::layout::items::raw_key(&ctx.config.importer.raw_prefix, &record.id, &record.name)
}

/// A Download message found the item still DOWNLOADING: if its attempt is past the download
/// timeout with attempts left, the attempt is recorded as failed here (DOWNLOADING_FAILED) so the
/// download can start again. The sweeper sends that message before it writes the same change, so
/// whichever of the two comes first makes it, and a sweeper that died between them strands
/// nothing. Returns the state the item is left in.
pub async fn record_timeout(
    ctx: &Ctx,
    id: &GranuleId,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<ItemState, HandlerError> {
    let policy = ctx.config.retry_policy;
    let moved = ctx
        .items()
        .advance(id, BY, |r| {
            decisions::on_download_timed_out(r, &policy, now)
        })
        .await?;
    Ok(state_of(&moved))
}

/// Runs download attempts until the item is DOWNLOADED, IGNORE, or someone else's. `resume`
/// (an operator's) grants the first attempt even past the budget. Returns the state the item is
/// left in.
pub async fn download(ctx: &Ctx, id: &GranuleId, resume: bool) -> Result<ItemState, HandlerError> {
    let items = ctx.items();
    let policy = ctx.config.retry_policy;
    let mut granted = resume;
    loop {
        let Some(current) = items.get(id).await? else {
            return Ok(Discovered);
        };
        let record = current.value;
        let key = stored_key(ctx, &record);
        // The operational scenario: the file is already stored and intact.
        if record.state == Discovered {
            if let Ok(found) = ctx.objects().check_item_file(&key, &record).await {
                let file = StoredFile {
                    key: key.clone(),
                    size: found.size,
                    sha256: found.sha256,
                };
                let moved = items
                    .advance(id, BY, |r| decisions::on_found_stored(r, &file))
                    .await?;
                return Ok(state_of(&moved));
            }
        }
        // Giving up is reported on the failure DLQ like every failure an operator must see; sent
        // before the record moves, so a crash between the two repeats the notice, never loses it.
        if record.state == DownloadingFailed
            && !granted
            && policy.after_download_failure(record.attempts.download) == Ignore
        {
            dead_letter(ctx, &record).await?;
        }
        // Begin an attempt (or give up): only one runner wins this compare-and-swap.
        let begun = items
            .advance(id, BY, |r| {
                decisions::on_download_wanted(r, &policy, granted)
            })
            .await?;
        let record = match begun {
            Changed::Moved(r) if r.state == Downloading => r,
            other => return Ok(state_of(&other)),
        };
        granted = false;
        let attempt = record.attempts.download;
        let result = fetch_into_store(ctx, &record, &key).await;
        let result = match result {
            Ok(digests) => DownloadResult::Stored(StoredFile {
                key: key.clone(),
                size: digests.size,
                sha256: digests.sha256,
            }),
            Err(why) => {
                tracing::warn!(item_id = %id, attempt, error = %why, "download attempt failed");
                DownloadResult::Failed(why.to_string())
            }
        };
        let moved = items
            .advance(id, BY, |r| {
                decisions::on_download_result(r, attempt, &result)
            })
            .await?;
        // This attempt's failure, recorded: by this write, or by an earlier try of it whose
        // write landed before a later call of it was refused (the retried change then reads
        // back as already made). Ended here, the item would sit DOWNLOADING_FAILED with no
        // message and no marker to move it: the simulation with an importer found one so.
        let failed_here = moved
            .record()
            .is_some_and(|r| r.state == DownloadingFailed && r.attempts.download == attempt)
            && !crate::mutants::on("download-failure-read-back-ends-the-loop");
        if !failed_here {
            return Ok(state_of(&moved));
        }
        // Retry at once (the loop), after a short pause so a flapping server can recover.
        let pause = std::time::Duration::from_millis(200 * u64::from(attempt));
        tokio::time::sleep(pause).await;
    }
}

fn state_of(a: &Changed<ItemRecord>) -> ItemState {
    a.record().map(|r| r.state).unwrap_or(Discovered)
}

/// Tells operators an item gave up downloading, and why (the last attempt's failure).
async fn dead_letter(ctx: &Ctx, record: &ItemRecord) -> Result<(), HandlerError> {
    let notice = ItemNotice {
        item_id: record.id.clone(),
        state: Ignore,
        campaign: ctx.campaign().cloned(),
    };
    let reason = format!(
        "{} download attempts failed; the last: {}",
        record.attempts.download, record.reason
    );
    ctx.failure_dlq
        .send(notice.to_message(&Notice::new(Outcome::DownloadFailed, reason))?)
        .await?;
    Ok(())
}

/// Why one download attempt failed (its words become the item's reason).
#[derive(Debug, thiserror::Error)]
enum DownloadFailure {
    /// No source is configured (`GRANARY_SOURCE_URL`).
    #[error(transparent)]
    NoSource(#[from] HandlerError),
    #[error("the item names no source URL")]
    NoSourceUrl,
    #[error(transparent)]
    Transfer(#[from] crate::repositories::objects::TransferError),
}

/// One attempt: source → store, under the attempt timeout. Any failure aborts the upload.
async fn fetch_into_store(
    ctx: &Ctx,
    record: &ItemRecord,
    key: &str,
) -> Result<Found, DownloadFailure> {
    let source = ctx.source()?;
    let url = record
        .source
        .as_deref()
        .ok_or(DownloadFailure::NoSourceUrl)?;
    let expected = Expected {
        size: record.size,
        digest: record.checksum.as_deref(),
    };
    ctx.objects()
        .copy_in(
            key,
            source.open(url),
            &expected,
            super::timeout(&ctx.config),
        )
        .await
        .map_err(DownloadFailure::from)
}

#[cfg(test)]
mod tests;
