//! Request counts at the port (a [`Tap`]), for the demo's and benchmarks' figures.

use super::{Answer, Call, Op, Tap};
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// SubmitJob calls among them (refused ones too: each is a call against the quota).
    pub batch_submits: AtomicU64,
    /// S3 PUTs by the key's first folder (`logs`, `items`, `history`, `claims`, …): where a
    /// granule's writes go.
    pub puts_by_folder: ByFolder,
    /// S3 GETs by the key's first folder: where a granule's reads go.
    pub gets_by_folder: ByFolder,
    /// S3 LIST requests (pages of 1,000 keys) by the listed prefix's first folder.
    pub lists_by_folder: ByFolder,
    /// Counts no folders (the three maps stay empty): the totals alone, with no lock taken.
    totals_only: bool,
}

impl RequestCounts {
    /// Counters of the totals alone, for one of many taps watching side by side (a function's
    /// own calls): the by-folder maps' lock is not taken on every request.
    pub fn totals_only() -> Self {
        Self {
            totals_only: true,
            ..Self::default()
        }
    }

    /// The PUTs counted so far, by the key's first folder.
    pub fn puts_by_folder(&self) -> std::collections::BTreeMap<String, u64> {
        snapshot(&self.puts_by_folder)
    }

    /// The GETs counted so far, by the key's first folder.
    pub fn gets_by_folder(&self) -> std::collections::BTreeMap<String, u64> {
        snapshot(&self.gets_by_folder)
    }

    /// The LIST requests counted so far, by the listed prefix's first folder.
    pub fn lists_by_folder(&self) -> std::collections::BTreeMap<String, u64> {
        snapshot(&self.lists_by_folder)
    }
}

type ByFolder = std::sync::Mutex<std::collections::BTreeMap<String, u64>>;

fn snapshot(counts: &ByFolder) -> std::collections::BTreeMap<String, u64> {
    counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn count_in_folder_n(counts: &ByFolder, key: &str, n: u64) {
    let folder = key.split('/').next().unwrap_or("");
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    // The folder's text is copied only the first time it is met: every request is counted, and
    // a copy each was a heap allocation under the lock both cores' requests wait on.
    match counts.get_mut(folder) {
        Some(count) => *count += n,
        None => {
            counts.insert(folder.to_owned(), n);
        }
    }
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

impl Tap for RequestCounts {
    fn leave(&self, call: &Call<'_>, answer: &Answer) {
        let add = |c: &AtomicU64, n: u64| {
            c.fetch_add(n, Ordering::Relaxed);
        };
        let in_folder = |counts: &ByFolder, n: u64| {
            if !self.totals_only {
                count_in_folder_n(counts, call.target, n);
            }
        };
        match call.op {
            Op::StoreGet => {
                add(&self.s3_get, 1);
                add(&self.s3_bytes_read, answer.bytes);
                in_folder(&self.gets_by_folder, 1);
            }
            Op::StorePut | Op::StoreUploadPart | Op::StoreUploadFinish => {
                add(&self.s3_put, 1);
                in_folder(&self.puts_by_folder, 1);
            }
            // One request per 1,000 keys, as S3 pages them.
            Op::StoreList if answer.ok => {
                let pages = answer.items.div_ceil(1000).max(1);
                add(&self.s3_list, pages);
                in_folder(&self.lists_by_folder, pages);
            }
            Op::StoreList => {}
            Op::StoreCopy | Op::StoreUploadAbort => add(&self.s3_other, 1),
            Op::StoreDelete => add(&self.s3_delete, 1),
            Op::QueueSend => add(&self.sqs_send, 1),
            Op::QueueReceive => add(&self.sqs_receive, 1),
            Op::QueueDelete => add(&self.sqs_delete, 1),
            Op::QueueRelease | Op::QueueDepth => add(&self.sqs_other, 1),
            Op::JobSubmit => {
                add(&self.batch_calls, 1);
                add(&self.batch_submits, 1);
            }
            Op::JobList | Op::JobDescribe | Op::JobTerminate => add(&self.batch_calls, 1),
            Op::SourceList
            | Op::SourceOpen
            | Op::RemoteSize
            | Op::RemoteFetch
            | Op::RemoteCallBack
            | Op::Mint
            | Op::BusPut => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use crate::adapters::tap::TappedStore;
    use crate::ports::{ObjectStore, PutCondition};
    use std::sync::Arc;

    /// Three PUTs, a GET and a LIST through `counts`, whose totals say so.
    async fn count(counts: Arc<RequestCounts>) {
        let store = TappedStore {
            inner: Arc::new(MemoryStore::new()),
            tap: counts.clone() as Arc<dyn Tap>,
        };
        let body = bytes::Bytes::from_static(b"{}");
        for key in ["logs/a.json", "logs/b.json", "items/a.json"] {
            store
                .put(key, body.clone(), PutCondition::Overwrite)
                .await
                .unwrap();
        }
        store.get("items/a.json").await.unwrap();
        store.list("logs/").await.unwrap();
        let total = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let totals = (
            total(&counts.s3_put),
            total(&counts.s3_get),
            total(&counts.s3_list),
        );
        assert_eq!(totals, (3, 1, 1));
    }

    #[tokio::test]
    async fn requests_are_counted_in_all_and_by_folder() {
        let counts = Arc::new(RequestCounts::default());
        count(counts.clone()).await;
        let puts = counts.puts_by_folder();
        assert_eq!((puts.get("logs"), puts.get("items")), (Some(&2), Some(&1)));
        assert_eq!(counts.gets_by_folder().get("items"), Some(&1));
        assert_eq!(counts.lists_by_folder().get("logs"), Some(&1));
    }

    #[tokio::test]
    async fn totals_only_counts_the_same_totals_and_no_folders() {
        let counts = Arc::new(RequestCounts::totals_only());
        count(counts.clone()).await;
        assert!(counts.puts_by_folder().is_empty());
        assert!(counts.gets_by_folder().is_empty());
        assert!(counts.lists_by_folder().is_empty());
    }
}
