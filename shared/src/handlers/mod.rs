//! The Lambda handlers. Each is a plain async function over [`Ctx`] (ports + config), so the same
//! code runs in Lambda, in the local runtime and in tests.

pub mod archive;
pub mod cancel;
pub mod error;
pub mod feeder;
pub mod importer;
pub mod ingest;
pub mod item_sync;
pub mod monitor;
pub mod reconciler;
pub mod redrive;
pub mod requeuer;
pub mod resume;
mod state;

/// Log lines as the Lambdas write them (`wiring::json_logs`), kept in memory for tests that
/// follow an id through the logs.
#[cfg(test)]
pub(crate) mod log_capture {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        /// Logs of this thread go here until the guard drops.
        pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
            let writer = self.clone();
            tracing::subscriber::set_default(crate::wiring::json_logs(move || writer.clone()))
        }

        /// The lines whose message is `message`.
        pub fn saying(&self, message: &str) -> Vec<serde_json::Value> {
            let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|l| l["fields"]["message"] == message)
                .collect()
        }
    }

    /// The span `name` a line was logged in.
    pub fn span<'a>(line: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
        line["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == name))
            .unwrap_or_else(|| panic!("no {name} span in {line}"))
    }
}

pub use error::{HandlerError, LambdaFailure};

use crate::config::Config;
use crate::ports::{Buckets, EventBus, JobRunner, ObjectStore, Queue, Remote, Source};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use std::future::Future;
use std::sync::Arc;

/// The one application context: the configuration and every port, built once in `wiring.rs`
/// (AWS, in memory, tapped) for every handler of every workflow. A port of a section the
/// function does not read is an unset adapter that refuses every call, naming the variable that
/// would configure it; the repositories are views over the store, made on demand
/// ([`Ctx::items`], [`Ctx::ingest`], [`Ctx::archives`]) so a context with a tapped store never
/// keeps an untapped one.
#[derive(Clone)]
pub struct Ctx {
    pub config: Config,
    /// granary's bucket.
    pub store: Arc<dyn ObjectStore>,
    pub jobs: Arc<dyn JobRunner>,
    pub retry_queue: Arc<dyn Queue>,
    pub failure_dlq: Arc<dyn Queue>,
    /// The importer's source (`GRANARY_SOURCE_URL`), if any.
    pub source: Option<Arc<dyn Source>>,
    /// The importer's queue (`GRANARY_IMPORT_QUEUE_URL`), if any.
    pub import_queue: Option<Arc<dyn Queue>>,
    pub prerequisites: Arc<dyn importer::Prerequisites>,
    /// Depositors' servers (ingest downloads and callbacks).
    pub remote: Arc<dyn Remote>,
    /// The notification bus (ingest and archive announcements).
    pub bus: Arc<dyn EventBus>,
    /// Archive sources and destinations.
    pub buckets: Arc<dyn Buckets>,
    /// The archive task queue.
    pub task_queue: Arc<dyn Queue>,
    /// The Ed25519 key archive checksums are signed with (`None`: signing fails, not recoverable).
    pub signing_key: Option<Arc<ed25519_dalek::SigningKey>>,
    /// The identifier service objects are minted from (`None`: nothing is minted).
    pub minter: Option<Arc<dyn crate::ports::Minter>>,
    /// The queue downstream of granary the feeder waits on (`GRANARY_DOWNSTREAM_QUEUE_URL`).
    pub downstream: Option<Arc<dyn Queue>>,
    /// The window claims the job monitor read lately (array windows' children).
    pub window_granules: Arc<crate::repositories::windows::WindowGranules>,
    /// The open windows of first attempts this instance read (their granules' fingerprints),
    /// for the feeder's and the importer's look at what is in flight without a record.
    pub open_windows: Arc<crate::repositories::windows::OpenWindowsRead>,
    /// The latest job ends this instance's monitor handled, for the automatic brake.
    pub end_window: Arc<std::sync::Mutex<crate::domain::brake::EndWindow>>,
    /// What this invocation observed, printed as CloudWatch metrics at its end.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// A context in some campaign's state ([`Ctx::in_campaign`]): the context itself, or another
/// campaign's copy on the heap (a context is large, and the handlers' futures that hold one
/// nest deeply).
pub enum InCampaign<'a> {
    Same(&'a Ctx),
    Other(Box<Ctx>),
}

impl std::ops::Deref for InCampaign<'_> {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        match self {
            InCampaign::Same(ctx) => ctx,
            InCampaign::Other(ctx) => ctx,
        }
    }
}

impl InCampaign<'_> {
    /// The context, owned.
    pub fn into_owned(self) -> Ctx {
        match self {
            InCampaign::Same(ctx) => ctx.clone(),
            InCampaign::Other(ctx) => *ctx,
        }
    }
}

impl Ctx {
    /// This context over `campaign`'s state (`domain::campaign`): itself when that is its own,
    /// else a copy whose layout is the other campaign's. Work names its campaign (a job's
    /// `campaign` parameter, a retry message's field) and is handled in that campaign's state
    /// whatever campaign the stack runs now, so switching campaigns strands nothing.
    pub fn in_campaign(
        &self,
        campaign: Option<&crate::domain::campaign::Campaign>,
    ) -> InCampaign<'_> {
        if self.config.layout.campaign.as_ref() == campaign {
            return InCampaign::Same(self);
        }
        let mut other = self.clone();
        other.config.layout = self.config.layout.in_campaign(campaign);
        InCampaign::Other(Box::new(other))
    }

    /// The campaign whose state this context works on.
    pub fn campaign(&self) -> Option<&crate::domain::campaign::Campaign> {
        self.config.layout.campaign.as_ref()
    }
}

/// Every campaign a scheduled pass looks at, its own first (`domain::campaign::to_visit`): one
/// delimited listing of `campaigns/`.
pub async fn campaigns_to_visit(
    ctx: &Ctx,
) -> Result<Vec<Option<crate::domain::campaign::Campaign>>, HandlerError> {
    use crate::domain::campaign::{of_folder, to_visit, CAMPAIGNS_FOLDER};
    let folders = ctx
        .campaign_folders(CAMPAIGNS_FOLDER)
        .await
        .map_err(|e| HandlerError::during("listing the campaigns", e))?;
    let found: Vec<_> = folders.iter().filter_map(|f| of_folder(f)).collect();
    Ok(to_visit(ctx.campaign(), &found))
}

/// A scheduled pass's way through every campaign ([`campaigns_to_visit`]), each with a fair
/// share of the time left: a large campaign never starves another, and what one leaves unspent
/// goes to the next.
pub struct CampaignVisits {
    campaigns: std::vec::IntoIter<Option<crate::domain::campaign::Campaign>>,
}

/// One campaign of a pass.
pub struct CampaignVisit<'a> {
    pub campaign: Option<crate::domain::campaign::Campaign>,
    /// The pass's context in the campaign's state.
    pub ctx: InCampaign<'a>,
    /// Whether it is the campaign the stack runs (whose feeder comes back to its windows).
    pub own: bool,
    /// Its share of the pass's time (a spent share still counts its work out of time).
    pub share: crate::budget::Budget,
}

impl CampaignVisits {
    pub async fn of(ctx: &Ctx) -> Result<Self, HandlerError> {
        Ok(Self {
            campaigns: campaigns_to_visit(ctx).await?.into_iter(),
        })
    }

    /// The next campaign to visit with `ctx`, and its share of `budget`.
    pub fn next<'a>(
        &mut self,
        ctx: &'a Ctx,
        budget: &crate::budget::Budget,
    ) -> Option<CampaignVisit<'a>> {
        let left = self.campaigns.len();
        let campaign = self.campaigns.next()?;
        Some(CampaignVisit {
            ctx: ctx.in_campaign(campaign.as_ref()),
            own: campaign.as_ref() == ctx.campaign(),
            share: budget.part(1, u32::try_from(left).unwrap_or(u32::MAX)),
            campaign,
        })
    }
}

/// Runs `handle` on every record of an SQS batch, each on its own: a record whose handling fails
/// is reported in `batchItemFailures` (and comes back after its visibility timeout), the others are
/// deleted by Lambda. Records are handled concurrently, up to `concurrency` at once.
pub async fn for_each_record<F, Fut, E>(
    event: SqsEvent,
    concurrency: usize,
    handle: F,
) -> SqsBatchResponse
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    use futures::StreamExt;
    let results: Vec<(Option<String>, Result<(), String>)> =
        futures::stream::iter(event.records.into_iter().map(|r| {
            use tracing::Instrument;
            let id = r.message_id.clone();
            let body = r.body.unwrap_or_default();
            // Every log line of the record's handling carries its message id.
            let span = tracing::info_span!("sqs_record", message_id = id.as_deref().unwrap_or("?"));
            let fut = handle(body);
            async move { (id, fut.await.map_err(|e| e.to_string())) }.instrument(span)
        }))
        .buffered(concurrency.max(1))
        .collect()
        .await;
    let mut response = SqsBatchResponse::default();
    for (id, result) in results {
        if let Err(e) = result {
            tracing::error!(message_id = id.as_deref().unwrap_or("?"), error = %e, "record failed; SQS will redeliver it");
            match id {
                Some(id) => {
                    let mut failure = BatchItemFailure::default();
                    failure.item_identifier = id;
                    response.batch_item_failures.push(failure);
                }
                // Without an id the record cannot be reported alone: fail the batch's delete by
                // reporting an empty identifier, which Lambda treats as a whole-batch failure.
                None => response
                    .batch_item_failures
                    .push(BatchItemFailure::default()),
            }
        }
    }
    response
}
