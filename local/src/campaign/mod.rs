//! A whole campaign on the emulator (or on the in-memory twins): stack, sample inventory, local
//! runtime, and the accounting at the end ("did anything get lost").

use super::fault_plan::FaultPlan;
use super::granule_list::GranuleList;
use super::in_memory::InMemoryBatch;
use super::runner::{LocalRuntime, RunnerOptions};
use super::stack::EmulatorStack;
use granary::adapters::tap::counting::RequestCounts;
use granary::ports::Queue;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) mod imported;
mod peek;
mod setup;
mod summary;
#[cfg(test)]
mod tests;

pub use peek::{peek_all, peek_each};
pub use summary::{is_stale_parked_retry, parked_by_sqs, PlatformCounts, Summary};

#[derive(Debug, Clone)]
pub struct CampaignSpec {
    pub granules: usize,
    pub inventories: usize,
    pub plan: FaultPlan,
    pub runner: RunnerOptions,
    /// The job definition's RetryStrategy.attempts.
    pub batch_attempts: i32,
    pub env: Vec<(String, String)>,
    /// How long after SubmitJob the in-memory Batch's ListJobs shows a job (none by default; see
    /// `InMemoryBatch::listing_lag`).
    pub listing_lag: std::time::Duration,
    /// SubmitJob calls the in-memory Batch accepts in a second (`None`: no limit; Batch's own
    /// is 50 per account). With `GRANARY_SUBMIT_JOB_RATE` in `env`, the submitters pace
    /// themselves to it.
    pub submit_limit: Option<usize>,
    /// Files an importer finds at its source (in-memory campaigns only; none by default), with
    /// `runner.discover_interval` its discovery's schedule. Every other one is also listed in an
    /// inventory of its own, fed after the sample's: a file both listed and discovered.
    pub imported_files: usize,
    /// An operator's own inventory in place of the sample (`granary-local demo --inventory`):
    /// its Parquet, as `granary inventory convert` wrote it, and its ids in its order.
    pub given: Option<GivenInventory>,
}

/// An inventory the campaign runs instead of the sample's.
#[derive(Debug, Clone)]
pub struct GivenInventory {
    pub parquet: bytes::Bytes,
    pub ids: std::sync::Arc<[String]>,
}

impl Default for CampaignSpec {
    fn default() -> Self {
        Self {
            granules: 10_000,
            inventories: 2,
            plan: FaultPlan::default(),
            runner: RunnerOptions::default(),
            batch_attempts: 2,
            env: Vec::new(),
            listing_lag: std::time::Duration::ZERO,
            submit_limit: None,
            imported_files: 0,
            given: None,
        }
    }
}

/// The spec's configuration overrides, with the local runtime's defaults.
fn campaign_env(spec: &CampaignSpec) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = spec.env.iter().cloned().collect();
    // Locally, a delivery that dies is retried within seconds, not minutes.
    env.entry("GRANARY_ROUTE_LEASE_SECS".into())
        .or_insert_with(|| "10".into());
    env
}

pub use super::granule_list::{sample_granules, SampleGranules};

/// Whether a failure-DLQ message is of `campaign`'s (its `campaign` field; none: the unnamed
/// campaign's). Messages that name no granule or item (poison notices) count for every campaign.
pub fn dlq_message_of(campaign: Option<&granary::domain::campaign::Campaign>, body: &str) -> bool {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(body) else {
        return true;
    };
    if message.get("granule_id").is_none() && message.get("item_id").is_none() {
        return true;
    }
    message.get("campaign").and_then(|c| c.as_str()) == campaign.map(|c| c.as_str())
}

/// maxReceiveCount of the retry queue's redrive policy in infra/template.yaml.
pub const RETRY_QUEUE_MAX_RECEIVES: u32 = 10;
/// maxReceiveCount of the import queue's redrive policy in infra/template.yaml (an item waiting
/// for its prerequisites comes back every visibility timeout).
pub const IMPORT_QUEUE_MAX_RECEIVES: u32 = 48;
/// maxReceiveCount of the Batch events queue's redrive policy in infra/template.yaml.
pub const EVENTS_QUEUE_MAX_RECEIVES: u32 = 5;

pub struct Campaign {
    /// The emulator stack it runs on; `None` for a campaign on the in-memory twins.
    pub stack: Option<EmulatorStack>,
    pub runtime: LocalRuntime,
    pub counts: Arc<RequestCounts>,
    /// Every granule the campaign's inventories list, in their order.
    pub granules: GranuleList,
    /// Where the events queue's redrive policy puts events that failed the monitor five times.
    events_dlq: Arc<dyn Queue>,
    /// The in-memory Batch, for a campaign on the in-memory twins.
    pub in_memory_batch: Option<Arc<InMemoryBatch>>,
    /// The in-memory twins' scratch files (handles to the same unlinked files), to say how much
    /// disk a campaign's bodies and job details took.
    scratch_files: Vec<std::fs::File>,
    /// Whether [`Campaign::summarize`] hands back the DLQ's messages (`Summary::dlq`, on by
    /// default; the bench's ten million granules' 200,000 are ~200 MB it does not need).
    pub keep_dlq_messages: bool,
}

/// The events queue's depth at an endpoint past which the simulator holds Batch's events
/// (`RunnerOptions::events_queue_limit`): a few rounds of the monitor's receives (4 batches of
/// 10 a round), and shallow enough that moto's walk of the queue on every receive stays cheap.
const ENDPOINT_EVENTS_QUEUE_LIMIT: u64 = 200;

impl Campaign {
    /// Bytes the in-memory twins have written to their scratch files (0 on the emulator).
    pub fn scratch_bytes(&self) -> std::io::Result<u64> {
        self.scratch_files
            .iter()
            .map(|f| f.metadata().map(|m| m.len()))
            .sum()
    }
}
