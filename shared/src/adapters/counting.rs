//! Decorators that count requests at the port, for the demo's and benchmarks' figures.

use crate::ports::{
    ActiveJobs, JobRequest, JobRunner, JobRunnerError, JobSummary, ObjectMeta, ObjectStore,
    OutgoingMessage, PutCondition, Queue, QueueDepth, QueueError, ReceivedMessage, StoreError,
    StoredObject,
};
use async_trait::async_trait;
use bytes::Bytes;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Request counters shared by every decorated port of one runtime.
#[derive(Debug, Default)]
pub struct RequestCounts {
    pub s3_get: AtomicU64,
    pub s3_put: AtomicU64,
    pub s3_list: AtomicU64,
    /// Copies (billed as PUTs).
    pub s3_other: AtomicU64,
    /// Deletes (free in S3).
    pub s3_delete: AtomicU64,
    pub s3_bytes_read: AtomicU64,
    pub sqs_send: AtomicU64,
    pub sqs_receive: AtomicU64,
    pub sqs_delete: AtomicU64,
    pub sqs_other: AtomicU64,
    /// Batch API calls (SubmitJob, ListJobs, DescribeJobs; a paginated listing counts once).
    pub batch_calls: AtomicU64,
}

impl RequestCounts {
    pub fn s3_total(&self) -> u64 {
        [
            &self.s3_get,
            &self.s3_put,
            &self.s3_list,
            &self.s3_other,
            &self.s3_delete,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    pub fn sqs_total(&self) -> u64 {
        [
            &self.sqs_send,
            &self.sqs_receive,
            &self.sqs_delete,
            &self.sqs_other,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub struct CountingStore {
    pub inner: Arc<dyn ObjectStore>,
    pub counts: Arc<RequestCounts>,
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        bump(&self.counts.s3_get);
        let r = self.inner.get(key).await?;
        if let Some(o) = &r {
            self.counts
                .s3_bytes_read
                .fetch_add(o.body.len() as u64, Ordering::Relaxed);
        }
        Ok(r)
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        bump(&self.counts.s3_get);
        let b = self.inner.get_range(key, range).await?;
        self.counts
            .s3_bytes_read
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }
    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        bump(&self.counts.s3_get);
        let r = self.inner.get_suffix(key, len).await?;
        self.counts
            .s3_bytes_read
            .fetch_add(r.0.len() as u64, Ordering::Relaxed);
        Ok(r)
    }
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        bump(&self.counts.s3_put);
        self.inner.put(key, body, condition).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        // One request per 1,000 keys, as S3 pages them.
        let r = self.inner.list(prefix).await?;
        self.counts
            .s3_list
            .fetch_add((r.len() as u64).div_ceil(1000).max(1), Ordering::Relaxed);
        Ok(r)
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        bump(&self.counts.s3_other);
        self.inner.copy(from, to).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        bump(&self.counts.s3_delete);
        self.inner.delete(key).await
    }
}

pub struct CountingQueue {
    pub inner: Arc<dyn Queue>,
    pub counts: Arc<RequestCounts>,
}

#[async_trait]
impl Queue for CountingQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        bump(&self.counts.sqs_send);
        self.inner.send(message).await
    }
    async fn receive(
        &self,
        max: u32,
        visibility_timeout_secs: u32,
        wait_secs: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        bump(&self.counts.sqs_receive);
        self.inner
            .receive(max, visibility_timeout_secs, wait_secs)
            .await
    }
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        bump(&self.counts.sqs_delete);
        self.inner.delete(receipt_handle).await
    }
    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        bump(&self.counts.sqs_other);
        self.inner.release(receipt_handle).await
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        bump(&self.counts.sqs_other);
        self.inner.depth().await
    }
}

pub struct CountingJobs {
    pub inner: Arc<dyn JobRunner>,
    pub counts: Arc<RequestCounts>,
}

#[async_trait]
impl JobRunner for CountingJobs {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        bump(&self.counts.batch_calls);
        self.inner.submit(request).await
    }
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        bump(&self.counts.batch_calls);
        self.inner.count_active(stop_at).await
    }
    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        bump(&self.counts.batch_calls);
        self.inner.find_by_name(job_name).await
    }
    async fn describe(
        &self,
        job_id: &str,
    ) -> Result<Option<crate::ports::JobDescription>, JobRunnerError> {
        bump(&self.counts.batch_calls);
        self.inner.describe(job_id).await
    }
}
