//! Setting a campaign up: on an emulator stack, or on the in-memory twins of every port, with
//! the sample inventories in the store and the local runtime around the handlers.

use super::{
    campaign_env, Campaign, CampaignSpec, SampleGranules, ENDPOINT_EVENTS_QUEUE_LIMIT,
    EVENTS_QUEUE_MAX_RECEIVES, RETRY_QUEUE_MAX_RECEIVES,
};
use crate::events::default_retry_strategy;
use crate::granule_list::GranuleList;
use crate::in_memory::{InMemoryBatch, RuleToQueue};
use crate::runner::LocalRuntime;
use crate::simulator::BatchSimulator;
use crate::stack::{config_from, EmulatorStack, StackOptions};
use anyhow::{Context, Result};
use granary::adapters::aws::{AwsClients, EventBridgeBus, SqsQueue};
use granary::adapters::memory::{MemoryQueue, MemoryStore};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::adapters::tap::counting::RequestCounts;
use granary::adapters::tap::TappedQueue;
use granary::handlers::Ctx;
use granary::ports::{JobRunner, PutCondition, Queue};
use std::collections::HashMap;
use std::sync::Arc;

impl Campaign {
    /// A campaign on the emulator (or any endpoint with Batch): provisions a stack named `name`.
    pub async fn setup(
        clients: &AwsClients,
        iam: &aws_sdk_iam::Client,
        name: &str,
        spec: &CampaignSpec,
    ) -> Result<Self> {
        let options = StackOptions {
            batch_attempts: spec.batch_attempts,
            env: campaign_env(spec),
        };
        let stack = EmulatorStack::provision(clients, iam, name, options).await?;
        let counts = Arc::new(RequestCounts::default());
        // Without Batch at the endpoint (LocalStack), jobs go to granary's in-memory Batch; S3,
        // SQS and EventBridge stay the endpoint's.
        let crate::stack::StackBatch {
            jobs,
            ledger,
            in_memory: in_memory_batch,
        } = crate::stack::stack_batch(&stack, clients);
        let mut ctx = Ctx::aws(stack.config()?, clients)?;
        ctx.jobs = jobs;
        let ctx = ctx.tapped(counts.clone());
        let events_queue: Arc<dyn Queue> = Arc::new(TappedQueue {
            inner: Arc::new(SqsQueue::new(clients.sqs.clone(), &stack.events_queue_url)),
            tap: counts.clone(),
        });
        let events_dlq = Arc::new(SqsQueue::new(clients.sqs.clone(), &stack.events_dlq_url));
        let simulator = BatchSimulator::new(
            ledger,
            Arc::new(EventBridgeBus::new(clients.events.clone(), "default")),
            spec.plan.clone(),
        );
        let mut spec = spec.clone();
        spec.runner
            .events_queue_limit
            .get_or_insert(ENDPOINT_EVENTS_QUEUE_LIMIT);
        let mut campaign = Self::assemble(
            Some(stack),
            ctx,
            counts,
            events_queue,
            events_dlq,
            simulator,
            &spec,
        )
        .await?;
        campaign.in_memory_batch = in_memory_batch;
        Ok(campaign)
    }

    /// The same campaign on the in-memory twins of every port (store, queues, Batch, the
    /// EventBridge rule): granary's own cost, with no emulator in the loop. The events queue has
    /// no redrive here, so an event that keeps failing the monitor shows as a campaign that does
    /// not settle rather than in an events DLQ.
    pub async fn in_memory(spec: &CampaignSpec) -> Result<Self> {
        let mut spec = spec.clone();
        spec.runner.submit_quota |= spec.submit_limit.is_some();
        let spec = &spec;
        let config = config_from(&in_memory_env(spec))?;
        let jobs = config
            .jobs
            .clone()
            .context("the in-memory campaign's configuration names no job queue")?;
        let (batch, paced, batch_scratch) = batch_twin(spec, &jobs)?;
        let mut scratch_files = vec![batch_scratch];
        let (retry_url, dlq_url) = config.queue_names();
        let counts = Arc::new(RequestCounts::default());
        // Bodies go to a scratch file (removed when the campaign ends): a million granules write
        // gigabytes of logs, records and history.
        let scratch = tempfile::tempfile().context("a scratch file for the in-memory store")?;
        scratch_files.push(
            scratch
                .try_clone()
                .context("a second handle on the store's scratch file")?,
        );
        // The queues' redrive policies as the template sets them (`local/tests` checks the
        // counts against infra/template.yaml): a retry message the requeuer keeps failing on is
        // parked on the failure DLQ, an event the monitor keeps failing on on the events DLQ.
        let failure_dlq = Arc::new(MemoryQueue::new(&dlq_url));
        let imported = crate::campaign::imported::ImportedFiles::of(spec);
        let ctx = Ctx {
            source: imported.source(),
            import_queue: imported.queue(),
            store: Arc::new(MemoryStore::spilling(scratch)),
            jobs: paced,
            retry_queue: Arc::new(
                MemoryQueue::new(&retry_url)
                    .with_redrive(failure_dlq.clone(), RETRY_QUEUE_MAX_RECEIVES),
            ),
            failure_dlq,
            ..Ctx::in_memory(config)
        }
        .tapped(counts.clone());
        let events_dlq = Arc::new(MemoryQueue::new("batch-events-dlq"));
        let events = Arc::new(
            MemoryQueue::new("batch-events")
                .with_redrive(events_dlq.clone(), EVENTS_QUEUE_MAX_RECEIVES),
        );
        let events_queue: Arc<dyn Queue> = Arc::new(TappedQueue {
            inner: events.clone(),
            tap: counts.clone(),
        });
        let rule = Arc::new(RuleToQueue::new(events, batch.job_queue_arn()));
        let mut simulator = BatchSimulator::new(batch.clone(), rule, spec.plan.clone());
        // The per-tick cap stands in for the emulator's slow ReceiveMessage; without an emulator
        // it would only hold a fast feeder's events back in memory (a million granules' worth).
        simulator.max_events_per_tick = usize::MAX;
        let mut campaign =
            Self::assemble(None, ctx, counts, events_queue, events_dlq, simulator, spec).await?;
        imported.list_some(&campaign.runtime.ctx, spec).await?;
        campaign.granules = campaign.granules.with_imported(imported.ids());
        campaign.in_memory_batch = Some(batch);
        campaign.scratch_files = scratch_files;
        Ok(campaign)
    }

    /// The sample inventories in the store, and the runtime around the handlers.
    async fn assemble(
        stack: Option<EmulatorStack>,
        mut ctx: Ctx,
        counts: Arc<RequestCounts>,
        events_queue: Arc<dyn Queue>,
        events_dlq: Arc<dyn Queue>,
        simulator: BatchSimulator,
        spec: &CampaignSpec,
    ) -> Result<Self> {
        // One inventory's rows at a time (a campaign of millions never holds them all).
        let per = spec.granules.div_ceil(spec.inventories.max(1)).max(1);
        let mut rows = SampleGranules::new(spec.plan.seed).take(spec.granules);
        let mut granules = GranuleList::sample(spec.plan.seed, spec.granules);
        if let Some(given) = &spec.given {
            // The operator's inventory alone, as they will upload it.
            ctx.store
                .put(
                    &format!("{}0001.parquet", ctx.config.layout.inventory_prefix),
                    given.parquet.clone(),
                    PutCondition::Overwrite,
                )
                .await?;
            granules = GranuleList::given(given.ids.clone());
            rows = SampleGranules::new(spec.plan.seed).take(0);
        }
        for i in 0.. {
            let chunk: Vec<InventoryRow> = rows.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            let bytes = write_inventory(&chunk, &InventoryLayout::granary())
                .context("writing the sample inventory")?;
            // Inventory keys sort in feed order: newest first.
            ctx.store
                .put(
                    &format!("{}{:04}.parquet", ctx.config.layout.inventory_prefix, i + 1),
                    bytes,
                    PutCondition::Overwrite,
                )
                .await?;
        }
        // Batch learns of a job when it is submitted; so does the simulator. An array window's
        // children read their claim from granary's bucket, as their containers would.
        let mut simulator = simulator;
        simulator.read_claims_from(ctx.store.clone());
        ctx.jobs = simulator.watch(ctx.jobs.clone());
        let runtime = LocalRuntime::new(ctx, events_queue, simulator, spec.runner.clone());
        Ok(Self {
            stack,
            runtime,
            counts,
            granules,
            events_dlq,
            in_memory_batch: None,
            scratch_files: Vec::new(),
            keep_dlq_messages: true,
        })
    }
}

/// The spec's configuration overrides for a campaign on the in-memory twins, with names for
/// the resources a stack would have made.
fn in_memory_env(spec: &CampaignSpec) -> HashMap<String, String> {
    let mut env = campaign_env(spec);
    for (k, v) in [
        ("GRANARY_BUCKET", "granary-in-memory"),
        ("GRANARY_JOB_QUEUE", "granary-jobs"),
        ("GRANARY_JOB_DEFINITION", "granary-job"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "failure-dlq"),
        ("GRANARY_IMPORT_QUEUE_URL", "import"),
    ] {
        env.entry(k.to_owned()).or_insert_with(|| v.to_owned());
    }
    env
}

/// The in-memory Batch the spec asks for; the same, paced as wiring paces a deployed
/// function's submitters, for the handlers; and a second handle on its scratch file.
fn batch_twin(
    spec: &CampaignSpec,
    jobs: &granary::config::Jobs,
) -> Result<(Arc<InMemoryBatch>, Arc<dyn JobRunner>, std::fs::File)> {
    let attempts = u32::try_from(spec.batch_attempts).unwrap_or(1).max(1);
    let batch_scratch = tempfile::tempfile().context("a scratch file for the Batch twin")?;
    let scratch_handle = batch_scratch
        .try_clone()
        .context("a second handle on the Batch twin's scratch file")?;
    let mut twin = InMemoryBatch::new(
        &jobs.job_queue,
        &jobs.job_definition,
        default_retry_strategy(attempts),
    )
    .spilling(batch_scratch)
    .listing_lag(spec.listing_lag)
    .submit_limit(spec.submit_limit);
    if spec.plan.timing.takes_time() {
        twin = twin.queued_until_settled();
    }
    let batch = Arc::new(twin);
    // The submitters' pacing, as wiring gives a deployed function.
    let paced: Arc<dyn JobRunner> = match jobs.submit_spacing {
        Some(spacing) => Arc::new(granary::adapters::paced::PacedJobs {
            inner: batch.clone(),
            pacer: granary::adapters::paced::Pacer::spaced(spacing),
        }),
        None => batch.clone(),
    };
    Ok((batch, paced, scratch_handle))
}
