//! The decorators: each port's calls passed through a [`Tap`], written once.

use super::{Answer, Call, Fate, Op, Tap};
use crate::ports::{
    ActiveJobs, BusEvent, EventBus, EventBusError, JobDescription, JobRequest, JobRunner,
    JobRunnerError, JobSummary, ListPage, ObjectMeta, ObjectStore, OutgoingMessage, PutCondition,
    Queue, QueueDepth, QueueError, ReceivedMessage, Remote, Source, SourceError, SourceFile,
    SourceStream, StoreError, StoredObject, Upload,
};
use async_trait::async_trait;
use bytes::Bytes;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

const ANSWER_LOST: &str = "injected crash: the answer was lost";

async fn through<T, E>(
    tap: &dyn Tap,
    call: Call<'_>,
    request: impl Future<Output = Result<T, E>>,
    answer: impl FnOnce(&Result<T, E>) -> Answer,
    error: impl FnOnce(&str, bool) -> E,
) -> Result<T, E> {
    let interleaves = tap.interleaves();
    if interleaves {
        tokio::task::yield_now().await;
    }
    match tap.enter(&call) {
        Err(refusal) => Err(error(refusal.message, refusal.ambiguous)),
        Ok(fate) => {
            let result = request.await;
            if interleaves {
                tokio::task::yield_now().await;
            }
            tap.leave(&call, &answer(&result));
            if fate == Fate::MakeAndLoseAnswer {
                drop(result);
                Err(error(ANSWER_LOST, true))
            } else {
                result
            }
        }
    }
}

fn store_error(key: &str) -> impl FnOnce(&str, bool) -> StoreError + '_ {
    move |why, _| StoreError::backend(key, why)
}

fn bytes_read<T>(result: &Result<T, StoreError>, len: impl Fn(&T) -> usize) -> Answer {
    Answer {
        ok: result.is_ok(),
        bytes: result.as_ref().map_or(0, |v| len(v) as u64),
        ..Answer::default()
    }
}

/// An object store whose calls pass through a tap.
pub struct TappedStore {
    pub inner: Arc<dyn ObjectStore>,
    pub tap: Arc<dyn Tap>,
}

#[async_trait]
impl ObjectStore for TappedStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let answer = |r: &Result<Option<StoredObject>, StoreError>| Answer {
            ok: r.is_ok(),
            absent: matches!(r, Ok(None)),
            bytes: match r {
                Ok(Some(o)) => o.body.len() as u64,
                _ => 0,
            },
            items: 0,
        };
        let call = Call::new(Op::StoreGet, key);
        through(
            &*self.tap,
            call,
            self.inner.get(key),
            answer,
            store_error(key),
        )
        .await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let call = Call::new(Op::StoreGet, key);
        let request = self.inner.get_range(key, range);
        let answer = |r: &Result<Bytes, _>| bytes_read(r, Bytes::len);
        through(&*self.tap, call, request, answer, store_error(key)).await
    }
    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        let call = Call::new(Op::StoreGet, key);
        let request = self.inner.get_suffix(key, len);
        let answer = |r: &Result<(Bytes, u64), _>| bytes_read(r, |(b, _)| b.len());
        through(&*self.tap, call, request, answer, store_error(key)).await
    }
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        let call = Call::new(Op::StorePut, key);
        let request = self.inner.put(key, body, condition);
        through(&*self.tap, call, request, Answer::of, store_error(key)).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let answer = |r: &Result<Vec<ObjectMeta>, StoreError>| Answer {
            ok: r.is_ok(),
            items: r.as_ref().map_or(0, |v| v.len() as u64),
            ..Answer::default()
        };
        let call = Call::new(Op::StoreList, prefix);
        let request = self.inner.list(prefix);
        through(&*self.tap, call, request, answer, store_error(prefix)).await
    }
    async fn list_page(&self, prefix: &str, start_after: &str) -> Result<ListPage, StoreError> {
        let answer = |r: &Result<ListPage, StoreError>| Answer {
            ok: r.is_ok(),
            items: r.as_ref().map_or(0, |p| p.objects.len() as u64),
            ..Answer::default()
        };
        let call = Call::new(Op::StoreList, prefix);
        let request = self.inner.list_page(prefix, start_after);
        through(&*self.tap, call, request, answer, store_error(prefix)).await
    }
    async fn list_folders(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let answer = |r: &Result<Vec<String>, StoreError>| Answer {
            ok: r.is_ok(),
            items: r.as_ref().map_or(0, |v| v.len() as u64),
            ..Answer::default()
        };
        let call = Call::new(Op::StoreList, prefix);
        let request = self.inner.list_folders(prefix);
        through(&*self.tap, call, request, answer, store_error(prefix)).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let call = Call {
            from: Some(from),
            ..Call::new(Op::StoreCopy, to)
        };
        let request = self.inner.copy(from, to);
        through(&*self.tap, call, request, Answer::of, store_error(to)).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let call = Call::new(Op::StoreDelete, key);
        let request = self.inner.delete(key);
        through(&*self.tap, call, request, Answer::of, store_error(key)).await
    }
    async fn begin_upload<'a>(&'a self, key: &str) -> Result<Box<dyn Upload + 'a>, StoreError> {
        Ok(Box::new(TappedUpload {
            inner: self.inner.begin_upload(key).await?,
            tap: self.tap.clone(),
            key: key.to_owned(),
        }))
    }
}

struct TappedUpload<'a> {
    inner: Box<dyn Upload + 'a>,
    tap: Arc<dyn Tap>,
    key: String,
}

#[async_trait]
impl Upload for TappedUpload<'_> {
    async fn write_part(&mut self, part: Bytes) -> Result<(), StoreError> {
        let call = Call::new(Op::StoreUploadPart, &self.key);
        let request = self.inner.write_part(part);
        through(
            &*self.tap,
            call,
            request,
            Answer::of,
            store_error(&self.key),
        )
        .await
    }
    async fn finish(self: Box<Self>) -> Result<u64, StoreError> {
        let this = *self;
        let call = Call::new(Op::StoreUploadFinish, &this.key);
        let request = this.inner.finish();
        through(
            &*this.tap,
            call,
            request,
            Answer::of,
            store_error(&this.key),
        )
        .await
    }
    async fn abort(self: Box<Self>) {
        let this = *self;
        let call = Call::new(Op::StoreUploadAbort, &this.key);
        let request = async {
            this.inner.abort().await;
            Ok::<(), StoreError>(())
        };
        // Abort reports nothing: a refused or lost abort leaves parts the lifecycle rule removes.
        let _ = through(
            &*this.tap,
            call,
            request,
            Answer::of,
            store_error(&this.key),
        )
        .await;
    }
}

/// A queue whose calls pass through a tap.
pub struct TappedQueue {
    pub inner: Arc<dyn Queue>,
    pub tap: Arc<dyn Tap>,
}

impl TappedQueue {
    async fn call<T>(
        &self,
        op: Op,
        request: impl Future<Output = Result<T, QueueError>>,
        items: impl FnOnce(&T) -> u64,
    ) -> Result<T, QueueError> {
        let name = self.inner.name();
        let answer = |r: &Result<T, QueueError>| Answer {
            ok: r.is_ok(),
            items: r.as_ref().map_or(0, items),
            ..Answer::default()
        };
        let error = |why: &str, _| QueueError::new(name, why);
        through(&*self.tap, Call::new(op, name), request, answer, error).await
    }
}

#[async_trait]
impl Queue for TappedQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        self.call(Op::QueueSend, self.inner.send(message), |_| 1)
            .await
    }
    async fn receive(
        &self,
        max: u32,
        visibility_timeout_secs: u32,
        wait_secs: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let request = self.inner.receive(max, visibility_timeout_secs, wait_secs);
        self.call(Op::QueueReceive, request, |m| m.len() as u64)
            .await
    }
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let request = self.inner.delete(receipt_handle);
        self.call(Op::QueueDelete, request, |_| 1).await
    }
    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let request = self.inner.release(receipt_handle);
        self.call(Op::QueueRelease, request, |_| 1).await
    }
    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        self.call(Op::QueueDepth, self.inner.depth(), |_| 0).await
    }
}

/// A job runner whose calls pass through a tap.
pub struct TappedJobs {
    pub inner: Arc<dyn JobRunner>,
    pub tap: Arc<dyn Tap>,
}

fn jobs_error(why: &str, ambiguous: bool) -> JobRunnerError {
    if ambiguous {
        JobRunnerError::ambiguous(why)
    } else {
        JobRunnerError::refused(why)
    }
}

#[async_trait]
impl JobRunner for TappedJobs {
    async fn submit(&self, request: JobRequest) -> Result<JobSummary, JobRunnerError> {
        let (name, queue) = (request.job_name.clone(), request.queue.clone());
        let call = Call::new(Op::JobSubmit, &name).on_queue(queue.as_deref());
        let submit = self.inner.submit(request);
        through(&*self.tap, call, submit, Answer::of, jobs_error).await
    }
    async fn count_active(&self, stop_at: u64) -> Result<ActiveJobs, JobRunnerError> {
        let call = Call::new(Op::JobList, "");
        let request = self.inner.count_active(stop_at);
        through(&*self.tap, call, request, Answer::of, jobs_error).await
    }
    async fn find_by_name(&self, job_name: &str) -> Result<Option<JobSummary>, JobRunnerError> {
        let call = Call::new(Op::JobList, job_name);
        let request = self.inner.find_by_name(job_name);
        through(&*self.tap, call, request, Answer::of, jobs_error).await
    }
    async fn terminate(&self, job_id: &str, reason: &str) -> Result<(), JobRunnerError> {
        let call = Call::new(Op::JobTerminate, job_id);
        let request = self.inner.terminate(job_id, reason);
        through(&*self.tap, call, request, Answer::of, jobs_error).await
    }
    async fn describe(&self, job_id: &str) -> Result<Option<JobDescription>, JobRunnerError> {
        let call = Call::new(Op::JobDescribe, job_id);
        let request = self.inner.describe(job_id);
        through(&*self.tap, call, request, Answer::of, jobs_error).await
    }
    async fn describe_many(
        &self,
        job_ids: &[String],
    ) -> Result<Vec<JobDescription>, JobRunnerError> {
        let mut found = Vec::with_capacity(job_ids.len());
        // One call per DescribeJobs the adapter makes.
        for chunk in job_ids.chunks(crate::ports::DESCRIBE_BATCH) {
            let call = Call::new(Op::JobDescribe, chunk.first().map_or("", String::as_str));
            let request = self.inner.describe_many(chunk);
            found.extend(through(&*self.tap, call, request, Answer::of, jobs_error).await?);
        }
        Ok(found)
    }
}

/// A source whose calls pass through a tap. It names calls by URL: the source's own URL for a
/// listing, the file's for an open.
pub struct TappedSource {
    pub inner: Arc<dyn Source>,
    pub tap: Arc<dyn Tap>,
    pub url: String,
}

fn source_error(url: &str) -> impl FnOnce(&str, bool) -> SourceError + '_ {
    move |why, _| SourceError::Transient {
        url: url.to_owned(),
        message: why.to_owned(),
        source: None,
    }
}

#[async_trait]
impl Source for TappedSource {
    async fn list(&self) -> Result<Vec<SourceFile>, SourceError> {
        let call = Call::new(Op::SourceList, &self.url);
        let request = self.inner.list();
        through(
            &*self.tap,
            call,
            request,
            Answer::of,
            source_error(&self.url),
        )
        .await
    }
    async fn open(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        let call = Call::new(Op::SourceOpen, url);
        through(
            &*self.tap,
            call,
            self.inner.open(url),
            Answer::of,
            source_error(url),
        )
        .await
    }
}

/// A depositor's server (the ingest queue's downloads and callbacks) whose calls pass through a
/// tap. Calls are named by URL.
pub struct TappedRemote {
    pub inner: Arc<dyn Remote>,
    pub tap: Arc<dyn Tap>,
}

#[async_trait]
impl Remote for TappedRemote {
    async fn size_of(&self, url: &str) -> Result<Option<u64>, SourceError> {
        let call = Call::new(Op::RemoteSize, url);
        through(
            &*self.tap,
            call,
            self.inner.size_of(url),
            Answer::of,
            source_error(url),
        )
        .await
    }
    async fn fetch(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        let call = Call::new(Op::RemoteFetch, url);
        through(
            &*self.tap,
            call,
            self.inner.fetch(url),
            Answer::of,
            source_error(url),
        )
        .await
    }
    async fn call_back(&self, url: &str, body: &serde_json::Value) -> Result<(), SourceError> {
        let call = Call::new(Op::RemoteCallBack, url);
        let request = self.inner.call_back(url, body);
        through(&*self.tap, call, request, Answer::of, source_error(url)).await
    }
}

/// The identifier service whose mints pass through a tap, named by the shoulder. A refusal the
/// tap calls ambiguous (the call may have been made) is an unknown answer; any other, a request
/// never sent.
pub struct TappedMinter {
    pub inner: Arc<dyn crate::ports::Minter>,
    pub tap: Arc<dyn Tap>,
}

#[async_trait]
impl crate::ports::Minter for TappedMinter {
    async fn mint(
        &self,
        shoulder: &str,
        metadata: &str,
    ) -> Result<String, crate::ports::MintError> {
        let call = Call::new(Op::Mint, shoulder);
        let request = self.inner.mint(shoulder, metadata);
        let error = |why: &str, ambiguous: bool| {
            if ambiguous {
                crate::ports::MintError::Unknown(why.to_owned())
            } else {
                crate::ports::MintError::Unavailable(why.to_owned())
            }
        };
        through(&*self.tap, call, request, Answer::of, error).await
    }
}

/// An event bus whose PutEvents calls pass through a tap, named by the first event's
/// detail-type.
/// Every bucket's store (archive sources and destinations) through `tap`.
pub struct TappedBuckets {
    pub inner: Arc<dyn crate::ports::Buckets>,
    pub tap: Arc<dyn Tap>,
}

impl crate::ports::Buckets for TappedBuckets {
    fn store(&self, bucket: &str, class: Option<&str>) -> Arc<dyn ObjectStore> {
        Arc::new(TappedStore {
            inner: self.inner.store(bucket, class),
            tap: self.tap.clone(),
        })
    }
}

pub struct TappedBus {
    pub inner: Arc<dyn EventBus>,
    pub tap: Arc<dyn Tap>,
}

#[async_trait]
impl EventBus for TappedBus {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        let name = events
            .first()
            .map_or_else(String::new, |e| e.detail_type.clone());
        let call = Call::new(Op::BusPut, &name);
        let request = self.inner.put_events(events);
        through(&*self.tap, call, request, Answer::of, |why, _| {
            EventBusError::new(why)
        })
        .await
    }
}
