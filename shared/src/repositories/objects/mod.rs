//! The data objects granary moves and checks but keeps no state in: a granule's downloaded file,
//! an ingest job's files, an archive's members, an operator's source bucket. Handlers reach
//! them through [`Objects`], one bucket's handle, so that what they do to S3 stays in this one
//! place: streamed copies (never a whole object in memory), digests and checks.

mod digests;
mod stored;
mod transfer;
pub mod verify;

pub use digests::{DigestError, Digests, Found};
pub use stored::InvalidStoredFile;
pub use transfer::{Expected, TransferError};

use crate::domain::item::ItemRecord;
use crate::ports::{ObjectMeta, ObjectStore, SourceError, SourceStream, StoreError, StoredObject};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// One bucket's data objects.
#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
}

impl Objects {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    /// Copies what `open` opens into `key`, checked against `expected`, under `timeout`; any
    /// failure aborts the upload, so nothing half-written becomes visible.
    pub async fn copy_in<O>(
        &self,
        key: &str,
        open: O,
        expected: &Expected<'_>,
        timeout: Duration,
    ) -> Result<Found, TransferError>
    where
        O: Future<Output = Result<(SourceStream, Option<u64>), SourceError>>,
    {
        transfer::copy_into_store(self.store.as_ref(), key, open, expected, timeout).await
    }

    /// The object at `key` as a stream of ranged GETs, with its size (absent: a permanent
    /// error): what a copy from this bucket reads.
    pub async fn open(&self, key: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        transfer::open_object(self.store.clone(), key).await
    }

    /// The size and SHA-256 (hex) of the object at `key`, read through once.
    pub async fn hash(&self, key: &str) -> Result<(u64, String), SourceError> {
        transfer::hash_object(self.store.clone(), key).await
    }

    /// Whether the object at `key` is `record`'s file: present, its registered size and digest,
    /// and of the kind its name says (`domain::file_format`).
    pub async fn check_item_file(
        &self,
        key: &str,
        record: &ItemRecord,
    ) -> Result<Found, InvalidStoredFile> {
        stored::check_stored(self.store.as_ref(), key, record).await
    }

    /// Whether an object is at exactly `key` (one LIST of `key` as a prefix).
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.store.list(key).await?.iter().any(|m| m.key == key))
    }

    /// Every object under `prefix`, with its size.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(prefix).await
    }

    /// Every object under `prefix` by key, with its size.
    pub async fn sizes_under(&self, prefix: &str) -> Result<BTreeMap<String, u64>, StoreError> {
        Ok(self
            .list(prefix)
            .await?
            .into_iter()
            .map(|m| (m.key, m.size))
            .collect())
    }

    /// The object at `key`, whole (`None`: missing): for the small ones only.
    pub async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        self.store.get(key).await
    }
}
