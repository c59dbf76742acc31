//! File validation (size, digest, and the kind of file its name says) and the re-validation step: a stored raw file that no longer
//! validates sends its item back to the download path, a processed item whose products are
//! missing or empty back to the processing path.

use super::{Ctx, Step};
use crate::contracts::messages::{ItemNotice, Notice, Outcome};

use crate::domain::granule::GranuleId;
use crate::domain::item::ItemRecord;
use crate::domain::layout::logs::{LogKey, LogOutcome};
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::ItemState::{self, *};
use crate::handlers::HandlerError;
use crate::ports::StoreError;
use crate::repositories::json::Changed;
use crate::repositories::objects::InvalidStoredFile;

/// Why a stored item no longer validates: its raw file, or a processed item's products.
#[derive(Debug, thiserror::Error)]
pub enum RevalidationFailure {
    #[error(transparent)]
    File(#[from] InvalidStoredFile),
    /// Listing the products failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("product {key} is missing")]
    ProductMissing { key: String },
    #[error("product {key} is empty")]
    ProductEmpty { key: String },
}

/// What an operator's `granary revalidate` asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RevalidationRequests {
    /// Items whose re-validation was asked of the importer, or would be in a dry run (id, state).
    pub requested: Vec<(String, String)>,
    /// Items in a state with nothing stored to re-validate (id, state).
    pub nothing_to_check: Vec<(String, String)>,
    pub missing: Vec<String>,
}

/// Asks the importer to re-validate each of `ids` that is DOWNLOADED (its stored file) or
/// PROCESSED (its products): one import message each, step `revalidate`, which the
/// importer-step Lambda runs like any other step ([`revalidate`]). `dry_run` sends nothing.
pub async fn request_revalidation(
    ctx: &Ctx,
    ids: &[GranuleId],
    dry_run: bool,
) -> Result<RevalidationRequests, HandlerError> {
    let mut out = RevalidationRequests::default();
    for id in ids {
        let Some(current) = ctx.items().get(id).await? else {
            out.missing.push(id.to_string());
            continue;
        };
        let state = current.value.state;
        if !matches!(state, Downloaded | Processed) {
            out.nothing_to_check
                .push((id.to_string(), state.to_string()));
            continue;
        }
        if !dry_run {
            ctx.enqueue(id, Some(Step::Revalidate)).await?;
        }
        out.requested.push((id.to_string(), state.to_string()));
    }
    Ok(out)
}

const BY: &str = "importer-revalidate";

const REVALIDATION_FAILED: &str = "re-validation failed";

/// Re-validates a DOWNLOADED or PROCESSED item; returns its state afterwards.
///
/// A processed item's success is revoked first (`Logs::revoke_success`), then the failure is
/// recorded (DOWNLOADING_FAILED / PROCESSING_FAILED), then the item is sent on.
/// If the run dies between the two, the message that asked for the re-validation comes back and
/// finds the item failed by re-validation: it finishes the hand-off instead of stopping there.
pub async fn revalidate(ctx: &Ctx, id: &GranuleId) -> Result<Option<ItemState>, HandlerError> {
    let items = ctx.items();
    let Some(current) = items.get(id).await? else {
        return Ok(None);
    };
    let record = current.value;
    let verdict = match record.state {
        Downloaded => match &record.stored_key {
            Some(key) => ctx
                .objects()
                .check_item_file(key, &record)
                .await
                .map(|_| ())
                .map_err(RevalidationFailure::from),
            None => Err(InvalidStoredFile::NotRecorded.into()),
        },
        Processed => check_products(ctx, &record).await,
        DownloadingFailed | ProcessingFailed if record.reason.starts_with(REVALIDATION_FAILED) => {
            return send_on(ctx, &record).await;
        }
        other => {
            tracing::info!(item_id = %id, state = %other, "nothing to re-validate in this state");
            return Ok(Some(other));
        }
    };
    let Err(why) = verdict else {
        return Ok(Some(record.state));
    };
    let (was, seq) = (record.state, record.seq);
    let reason = format!("{REVALIDATION_FAILED}: {why}");
    if was == Processed {
        // Revoked before the record says so: once the record is PROCESSING_FAILED, something
        // else (`granary resume`, a retry message) may send the item round before this message
        // comes back, and a redelivery finding it moved on would not revoke. Revoking a success
        // whose item then stays PROCESSED changes nothing: only attempts after it look past it.
        revoke_success(ctx, &record, &reason).await?;
    }
    let moved = items
        .advance(id, BY, |r| {
            decisions::on_revalidation_failed(r, was, seq, &reason)
        })
        .await?;
    let Changed::Moved(failed) = moved else {
        return Ok(moved.record().map(|r| r.state));
    };
    // A processed item's success was revoked above: not read again.
    hand_on(ctx, &failed).await
}

/// Back on the path the failure belongs to, under the usual attempt budget; with none left the
/// item is dead-lettered (the message first, then ABANDONED).
async fn send_on(ctx: &Ctx, failed: &ItemRecord) -> Result<Option<ItemState>, HandlerError> {
    // Again for a redelivery (and an item failed before revocations existed): idempotent.
    if failed.state == ProcessingFailed {
        revoke_success(ctx, failed, &failed.reason).await?;
    }
    hand_on(ctx, failed).await
}

/// [`send_on`] once the success of an item failed in processing is revoked.
async fn hand_on(ctx: &Ctx, failed: &ItemRecord) -> Result<Option<ItemState>, HandlerError> {
    let id = &failed.id;
    if failed.state == DownloadingFailed {
        ctx.enqueue(id, Some(Step::Download)).await?;
        return Ok(Some(failed.state));
    }
    let policy = ctx.config.item_retry_policy();
    if policy.after_processing_failure(failed.attempts.processing) == Ready {
        ctx.hand_to_processing(failed).await?;
        return Ok(Some(failed.state));
    }
    let reason = format!(
        "{}; {} processing attempts spent",
        failed.reason, failed.attempts.processing
    );
    ctx.failure_dlq
        .send(
            ItemNotice {
                item_id: id.clone(),
                state: Abandoned,
                campaign: ctx.campaign().cloned(),
            }
            .to_message(&Notice::new(Outcome::NonRetryable, reason.clone()))?,
        )
        .await?;
    let done = ctx
        .items()
        .advance(id, BY, |r| decisions::on_no_attempts_left(r, &reason))
        .await?;
    Ok(done.record().map(|r| r.state))
}

/// The success the item's products came from no longer stands for the attempts to come: revoked
/// before the granule is sent round, or the next attempt's failure would be taken for a late end
/// of a granule that succeeded, and not routed (the record left PROCESSING).
async fn revoke_success(ctx: &Ctx, record: &ItemRecord, reason: &str) -> Result<(), HandlerError> {
    if crate::mutants::on("revalidation-keeps-the-success") {
        return Ok(());
    }
    let facts = ctx.config.layout.id_parser.facts(&record.id);
    let key = LogKey::new(
        LogOutcome::Success,
        &facts,
        &record.id,
        record.attempts.processing,
    );
    ctx.logs().revoke_success(&key, reason).await?;
    Ok(())
}

/// A processed item's products: every `GRANARY_PRODUCT_KEYS` template names a non-empty object.
/// Without templates, the stored raw file (if any) is what is checked.
async fn check_products(ctx: &Ctx, record: &ItemRecord) -> Result<(), RevalidationFailure> {
    let templates = &ctx.config.importer.product_keys;
    if templates.is_empty() {
        if let Some(key) = &record.stored_key {
            ctx.objects().check_item_file(key, record).await?;
        }
        return Ok(());
    }
    for t in templates {
        let key = t
            .replace("{id}", record.id.as_str())
            .replace("{name}", &record.name);
        let listed = ctx.items().products_at(&key).await?;
        match listed.iter().find(|m| m.key == key) {
            None => return Err(RevalidationFailure::ProductMissing { key }),
            Some(m) if m.size == 0 => return Err(RevalidationFailure::ProductEmpty { key }),
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attempt a re-validation sends a processed item round to make is routed when it
    /// fails: its end is not taken for a late end of the granule's earlier (revoked) success,
    /// which would leave the item PROCESSING with nothing coming.
    #[tokio::test]
    async fn the_attempt_a_revalidation_sends_round_is_routed_when_it_fails() {
        use crate::adapters::memory::{MemoryQueue, MemoryStore};
        use crate::config::Config;
        use crate::domain::classify::Route;
        use crate::domain::granule::GranuleProcessingEvent;
        use crate::domain::item::NewItem;
        use crate::handlers::monitor::{self, MonitorOutcome};
        use crate::ports::Queue;
        use std::sync::Arc;
        let config = Config::for_unit_tests(&[
            ("GRANARY_PRODUCT_KEYS", "products/{id}.tif"),
            ("GRANARY_MAX_RETRIES", "3"),
        ]);
        let retry = Arc::new(MemoryQueue::new("retry"));
        let ctx = Ctx {
            store: Arc::new(MemoryStore::new()),
            retry_queue: retry.clone(),
            ..Ctx::in_memory(config)
        };
        let id = GranuleId::parse("reval-item").unwrap();
        ctx.items()
            .create(NewItem::ready(id.clone(), "t", None), "t")
            .await
            .unwrap();
        // The requeuer's submission of an attempt, and Batch's event for its end.
        let run = |attempt: u32, status: &'static str, exit_code: i64| {
            let (ctx, id) = (&ctx, id.clone());
            async move {
                let job_id = format!("job-{attempt}");
                let event = GranuleProcessingEvent {
                    granule_id: id.clone(),
                    attempt,
                };
                crate::handlers::item_sync::submitted(ctx, &event, &job_id, None, "t")
                    .await
                    .unwrap();
                let end = serde_json::json!({
                    "detail-type": "Batch Job State Change", "source": "aws.batch",
                    "detail": {"jobName": "n", "jobId": job_id, "jobQueue": "q", "status": status,
                               "statusReason": "Essential container in task exited",
                               "attempts": [{"container": {"exitCode": exit_code}}],
                               "container": {"environment": [
                                   {"name": "GRANULE_ID", "value": id.as_str()},
                                   {"name": "ATTEMPT", "value": attempt.to_string()}]}}});
                monitor::handle_message(ctx, &end.to_string())
                    .await
                    .unwrap()
            }
        };
        let state = |ctx: &Ctx| {
            let items = ctx.items();
            let id = id.clone();
            async move { items.get(&id).await.unwrap().unwrap().value.state }
        };
        let first = run(1, "SUCCEEDED", 0).await;
        assert!(
            matches!(first, MonitorOutcome::Succeeded { .. }),
            "{first:?}"
        );
        assert_eq!(state(&ctx).await, Processed);
        // Its product never appeared: failed, and handed to the requeuer.
        assert_eq!(revalidate(&ctx, &id).await.unwrap(), Some(ProcessingFailed));
        assert_eq!(retry.depth().await.unwrap().visible, 1);
        let second = run(2, "FAILED", 2).await;
        assert_eq!(
            second,
            MonitorOutcome::Routed {
                route: Route::FailureDlq
            }
        );
        assert_eq!(state(&ctx).await, Abandoned);
    }
}
