//! Harness for integration tests: the real AWS SDK against whatever AWS_ENDPOINT_URL names
//! (moto started by `make test`, LocalStack, ...). Every test provisions its own uniquely named
//! stack, so tests run in parallel on one emulator and never depend on account ids or ARNs.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod ezid_server;
pub mod http_source;

use anyhow::Result;
use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use granary::adapters::aws::{AwsClients, SqsQueue};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::handlers::Ctx;
use granary::ports::{
    ObjectMeta, ObjectStore, PutCondition, Queue, ReceivedMessage, StoreError, StoredObject,
};
use granary_local::simulator::JobLedger;
use granary_local::stack::{stack_batch, EmulatorStack, StackOptions};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use granary_local::events::{state_change_event, AttemptEnd, JobFacts};

pub struct TestStack {
    pub stack: EmulatorStack,
    pub clients: AwsClients,
    /// The handlers' context: the endpoint's S3 and SQS, and its Batch or, at an endpoint without
    /// one (LocalStack), granary's in-memory Batch.
    pub ctx: Ctx,
    /// What Batch knows of the stack's jobs (the endpoint's, or the in-memory one).
    pub ledger: Arc<dyn JobLedger>,
}

/// A name no other test (or run) uses: lowercase, short enough for buckets and IAM roles.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(12)
        .collect::<String>()
        .to_lowercase();
    format!(
        "gt-{tag}-{}-{}{}",
        std::process::id(),
        nanos % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn clients() -> (AwsClients, aws_sdk_iam::Client) {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some() || std::env::var_os("GRANARY_TEST_REAL_AWS").is_some(),
        "integration tests need an AWS endpoint: run `make test` (it starts the emulator), or set AWS_ENDPOINT_URL"
    );
    let config = granary::adapters::aws::load_sdk_config().await;
    (AwsClients::new(&config), aws_sdk_iam::Client::new(&config))
}

/// Provisions a fresh stack. `env` overrides granary's configuration for this test.
pub async fn stack(tag: &str, batch_attempts: i32, env: &[(&str, &str)]) -> TestStack {
    let (clients, iam) = clients().await;
    let options = StackOptions {
        batch_attempts,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let stack = EmulatorStack::provision(&clients, &iam, &unique_name(tag), options)
        .await
        .unwrap_or_else(|e| panic!("provisioning the test stack: {e:#}"));
    let config = stack.config().unwrap_or_else(|e| panic!("{e:#}"));
    let batch = stack_batch(&stack, &clients);
    let mut ctx = Ctx::aws(config, &clients).unwrap_or_else(|e| panic!("wiring the stack: {e}"));
    ctx.jobs = batch.jobs;
    TestStack {
        stack,
        clients,
        ctx,
        ledger: batch.ledger,
    }
}

pub fn ids(n: usize, prefix: &str) -> Vec<String> {
    // HLS-like, newest first: day-of-year counts down.
    (0..n)
        .map(|i| {
            let platform = if i % 2 == 0 { "S30" } else { "L30" };
            let day = 365 - (i / 40) % 365;
            format!(
                "HLS.{platform}.T{prefix}{:03}.2022{day:03}T{:06}.v2.0",
                i % 1000,
                100000 + i % 800000
            )
        })
        .collect()
}

pub async fn put_inventory(
    store: &dyn ObjectStore,
    key: &str,
    ids: &[String],
    layout: &InventoryLayout,
) {
    let rows: Vec<InventoryRow> = ids
        .iter()
        .map(|id| InventoryRow {
            granule_id: id.clone(),
            start_datetime: "2022-08-14T21:49:21Z".into(),
        })
        .collect();
    let bytes = write_inventory(&rows, layout).unwrap_or_else(|e| panic!("writing inventory: {e}"));
    store
        .put(key, bytes, PutCondition::Overwrite)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Runs the feeder once for `count` granules; panics on error.
pub async fn feed(ctx: &Ctx, count: u64) -> granary::handlers::feeder::FeederSummary {
    granary::handlers::feeder::run(
        ctx,
        granary::handlers::feeder::FeederEvent {
            granule_submit_count: count,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("feeder: {e}"))
}

/// A small-row-group layout so test inventories have several row groups and pages.
pub fn small_layout() -> InventoryLayout {
    InventoryLayout {
        row_group_rows: 100,
        page_rows: 20,
        offset_index: true,
    }
}

/// A stack (with Batch) holding one inventory `inventories/a.parquet` of `n` generated ids.
pub async fn stack_with_inventory(
    tag: &str,
    env: &[(&str, &str)],
    n: usize,
    id_prefix: &str,
) -> (TestStack, Vec<String>) {
    let s = stack(tag, 2, env).await;
    let granules = ids(n, id_prefix);
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/a.parquet",
        &granules,
        &small_layout(),
    )
    .await;
    (s, granules)
}

/// Every job on the stack's queue, in any status: (job name, job id), sorted.
pub async fn all_jobs(s: &TestStack) -> Vec<(String, String)> {
    s.ledger
        .jobs()
        .await
        .unwrap_or_else(|e| panic!("listing jobs: {e:#}"))
}

/// What Batch says of these jobs (the simulator's input).
pub async fn facts(s: &TestStack, job_ids: &[String]) -> Vec<JobFacts> {
    s.ledger
        .facts(job_ids)
        .await
        .unwrap_or_else(|e| panic!("describing jobs: {e:#}"))
}

/// Receives until the queue is empty (deleting what it receives).
pub async fn drain(clients: &AwsClients, url: &str) -> Vec<ReceivedMessage> {
    let q = SqsQueue::new(clients.sqs.clone(), url);
    let mut all = Vec::new();
    loop {
        let got = q.receive(10, 30, 0).await.unwrap_or_else(|e| panic!("{e}"));
        if got.is_empty() {
            return all;
        }
        for m in &got {
            q.delete(&m.receipt_handle)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        all.extend(got);
    }
}

/// An SQS event as Lambda delivers it.
pub fn sqs_event(bodies: &[String]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("m{i}"));
            m.body = Some(b.clone());
            m
        })
        .collect();
    event
}

pub async fn keys(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    store
        .list(prefix)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|m| m.key)
        .collect()
}

/// Wraps a store and fails puts whose key contains `needle` (and whose condition matches
/// `on_if_match`, and whose body contains `body_needle` when set), `remaining` times: a process
/// dying at that exact point.
pub struct FailingStore {
    pub inner: Arc<dyn ObjectStore>,
    pub needle: String,
    pub on_if_match: bool,
    pub body_needle: Option<String>,
    pub remaining: AtomicU64,
}

impl FailingStore {
    pub fn new(inner: Arc<dyn ObjectStore>, needle: &str, on_if_match: bool, times: u64) -> Self {
        Self {
            inner,
            needle: needle.to_owned(),
            on_if_match,
            body_needle: None,
            remaining: AtomicU64::new(times),
        }
    }

    /// Only puts whose body contains `needle` fail.
    pub fn with_body(self, needle: &str) -> Self {
        Self {
            body_needle: Some(needle.to_owned()),
            ..self
        }
    }
}

#[async_trait]
impl ObjectStore for FailingStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        self.inner.get_range(key, range).await
    }
    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        self.inner.get_suffix(key, len).await
    }
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        let matches = key.contains(&self.needle)
            && (matches!(condition, PutCondition::IfMatch(_)) == self.on_if_match)
            && self
                .body_needle
                .as_ref()
                .is_none_or(|needle| body.windows(needle.len()).any(|w| w == needle.as_bytes()));
        if matches && self.remaining.load(Ordering::SeqCst) > 0 {
            self.remaining.fetch_sub(1, Ordering::SeqCst);
            return Err(StoreError::backend(
                key,
                "injected failure: the process died here",
            ));
        }
        self.inner.put(key, body, condition).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        self.inner.copy(from, to).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}
