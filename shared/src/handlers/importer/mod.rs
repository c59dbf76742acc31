//! The importer steps: discover files at a source, download them into S3, admit them for
//! processing, re-validate what is stored; and the sweeper that recovers timed-out items. They
//! share one engine (`crate::repositories::items`) with the backfill loop, and hand READY items to it through
//! the retry queue, where the requeuer submits them to Batch like any other granule.

pub mod admit;
pub mod discover;
pub mod download;
pub mod sweeper;
pub mod validate;

use super::Ctx;
use crate::contracts::messages::{Notice, Outcome, RetryMessage};
use crate::domain::granule::GranuleId;
use crate::domain::item::ItemRecord;
use crate::domain::lifecycle::ItemState;
use crate::handlers::HandlerError;
use crate::ports::{Source, StoreError};
use crate::repositories::objects::Objects;
use async_trait::async_trait;
use serde::Serialize;

pub use crate::contracts::messages::{ImportMessage, Step};

/// Why an item cannot be processed yet; the text is what its admission waits on.
#[derive(Debug, thiserror::Error)]
pub enum PrerequisitesMissing {
    /// The object a prerequisite names is not in granary's bucket.
    #[error("{key} does not exist yet")]
    Object { key: String },
    /// Granary's bucket could not be listed to tell.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Processing prerequisites: pluggable, since they depend on the algorithm.
#[async_trait]
pub trait Prerequisites: Send + Sync {
    /// `Err(what is missing)` while the item cannot be processed yet. `objects` are granary's
    /// bucket's.
    async fn check(
        &self,
        objects: &Objects,
        record: &ItemRecord,
    ) -> Result<(), PrerequisitesMissing>;
}

/// The default check: objects that must exist in granary's bucket, named by templates with
/// `{id}` and `{name}` placeholders (`GRANARY_PREREQUISITES`). No templates: always satisfied.
pub struct ObjectsExist {
    pub templates: Vec<String>,
}

#[async_trait]
impl Prerequisites for ObjectsExist {
    async fn check(
        &self,
        objects: &Objects,
        record: &ItemRecord,
    ) -> Result<(), PrerequisitesMissing> {
        for template in &self.templates {
            let key = template
                .replace("{id}", record.id.as_str())
                .replace("{name}", &record.name);
            if !objects.exists(&key).await? {
                return Err(PrerequisitesMissing::Object { key });
            }
        }
        Ok(())
    }
}

/// The importer's own parts of the one context.
impl Ctx {
    fn source(&self) -> Result<&dyn Source, HandlerError> {
        self.source.as_deref().ok_or(HandlerError::NotConfigured(
            "no importer source configured: set GRANARY_SOURCE_URL to s3://bucket/prefix/ or an http(s) directory URL",
        ))
    }

    /// Puts the item on the import queue for its next step.
    pub async fn enqueue(&self, id: &GranuleId, step: Option<Step>) -> Result<(), HandlerError> {
        self.send(ImportMessage {
            item_id: id.clone(),
            step,
            resume: false,
            campaign: None,
        })
        .await
    }

    pub async fn send(&self, message: ImportMessage) -> Result<(), HandlerError> {
        // The item is this context's campaign's; its step is taken there.
        let message = ImportMessage {
            campaign: self.campaign().cloned(),
            ..message
        };
        let queue = self
            .import_queue
            .as_ref()
            .ok_or(HandlerError::NotConfigured(
                "no import queue configured: set GRANARY_IMPORT_QUEUE_URL",
            ))?;
        queue.send(message.to_message()?).await?;
        Ok(())
    }

    /// Hands a READY item to the processing path: the requeuer submits its next attempt.
    pub async fn hand_to_processing(&self, record: &ItemRecord) -> Result<(), HandlerError> {
        self.send_retry(
            &record.id,
            record.attempts.processing,
            Outcome::Ready,
            "admitted for processing",
        )
        .await
    }

    /// Puts (item, attempt) on the retry queue: the requeuer submits attempt + 1 (or
    /// dead-letters it past the budget), moving the item record along. The Spot ends before
    /// the attempt go with it, from the attempt's claim (a requeued attempt's keeps them; a
    /// first attempt has none): the end itself (timed out, re-validated) was not Spot's.
    pub async fn send_retry(
        &self,
        id: &GranuleId,
        attempt: u32,
        outcome: Outcome,
        reason: &str,
    ) -> Result<(), HandlerError> {
        let event = crate::domain::granule::GranuleProcessingEvent {
            granule_id: id.clone(),
            attempt,
        };
        let placed = self.placed_before(&event).await?;
        let message = RetryMessage::ended(id.clone(), attempt)
            .with_spot_ends(placed.spot_ends)
            .with_memory(placed.memory_mib, false)
            .of_campaign(self.campaign().cloned())
            .to_message(&Notice::new(outcome, reason))?;
        self.retry_queue.send(message).await?;
        Ok(())
    }
}

/// Per-attempt download timeout (also the HTTP client's request timeout).
pub(crate) fn timeout(config: &crate::config::Config) -> std::time::Duration {
    config
        .retry_policy
        .download_timeout
        .to_std()
        .unwrap_or(std::time::Duration::from_secs(240))
}

/// What one import-queue message led to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    pub item_id: String,
    pub final_state: Option<ItemState>,
    pub steps: Vec<String>,
}

/// The import-queue Lambda: each message's item does the step its state (or the message) asks.
pub async fn handle_sqs(
    ctx: &Ctx,
    event: aws_lambda_events::event::sqs::SqsEvent,
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    super::for_each_record(event, 4, |body| async move {
        handle_message(ctx, &body).await.map(|_| ())
    })
    .await
}

/// Handles one import-queue message. A message no delivery could ever handle is recorded under
/// the reject prefix and dead-lettered with its reason at once (the report names no state), not
/// redelivered until the queue parks it; transient errors are returned, so SQS redelivers.
pub async fn handle_message(ctx: &Ctx, body: &str) -> Result<StepReport, HandlerError> {
    let message: ImportMessage = match serde_json::from_str(body) {
        Ok(m) => m,
        Err(e) => {
            let reason = format!("malformed import message: {e}");
            ctx.reject(
                crate::repositories::rejects::RejectKind::MalformedImportMessage,
                &reason,
                "import queue",
                body,
            )
            .await
            .map_err(HandlerError::from)?;
            return Ok(StepReport {
                item_id: String::new(),
                final_state: None,
                steps: vec![format!("rejected: {reason}")],
            });
        }
    };
    let span = tracing::info_span!(
        "import_message",
        item_id = %message.item_id,
        step = ?message.step
    );
    // The item's campaign's state, whichever campaign this stack runs now.
    let ctx = &*ctx.in_campaign(message.campaign.as_ref());
    tracing::Instrument::instrument(run(ctx, &message), span).await
}

/// Runs the item forward as far as it goes now: download, then admission.
async fn run(ctx: &Ctx, message: &ImportMessage) -> Result<StepReport, HandlerError> {
    let (id, step) = (&message.item_id, message.step);
    let mut report = StepReport {
        item_id: id.to_string(),
        final_state: None,
        steps: Vec::new(),
    };
    if step == Some(Step::Revalidate) {
        let state = validate::revalidate(ctx, id).await?;
        report.steps.push("revalidate".into());
        report.final_state = state;
        return Ok(report);
    }
    // A redelivery may find the work done by a run that died after it (the record holds the
    // entries of what it did: nothing to repair).
    let Some(record) = ctx.items().look(id).await? else {
        tracing::warn!(item_id = %id, "import message for an unknown item: dropped");
        return Ok(report);
    };
    let mut state = record.state;
    if state == ItemState::Downloading && step == Some(Step::Download) {
        state = download::record_timeout(ctx, id, crate::clock::now()).await?;
    }
    // READY and never processed: admitted by an earlier delivery of this message (or of a
    // download retry the sweeper sent), which may have died between recording READY and handing
    // the item on. Handing it on again is harmless (the requeuer claims each attempt once); not
    // doing it strands the item (a second crash in the recovery found this).
    if state == ItemState::Ready && record.attempts.processing == 0 {
        ctx.hand_to_processing(&record).await?;
        report.steps.push("hand to processing".into());
        report.final_state = Some(state);
        return Ok(report);
    }
    if matches!(state, ItemState::Discovered | ItemState::DownloadingFailed)
        && step != Some(Step::Admit)
    {
        state = download::download(ctx, id, message.resume).await?;
        report.steps.push("download".into());
    }
    if state == ItemState::Downloaded {
        state = admit::admit(ctx, id).await?;
        report.steps.push("admit".into());
    }
    report.final_state = Some(state);
    Ok(report)
}
