//! Object storage with compare-and-swap: the only state store granary has.

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::ops::Range;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: the object exists (If-None-Match) or changed (If-Match).
    #[error("conditional write to {key} lost: the object exists or changed")]
    Conflict { key: String },
    #[error("object {key} does not exist")]
    NotFound { key: String },
    #[error("object store request for {key} failed: {message}")]
    Backend { key: String, message: String },
}

impl StoreError {
    pub fn backend(key: &str, e: impl std::fmt::Display) -> Self {
        StoreError::Backend {
            key: key.to_owned(),
            message: e.to_string(),
        }
    }
}

/// How a put is guarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutCondition {
    /// Last writer wins.
    Overwrite,
    /// Create only if absent (`If-None-Match: *`).
    IfAbsent,
    /// Replace only if the current ETag is this one (`If-Match`).
    IfMatch(String),
}

#[derive(Debug, Clone)]
pub struct StoredObject {
    pub body: Bytes,
    pub etag: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    pub last_modified: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// The object and its ETag, or `None` when absent.
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError>;
    /// Bytes `range` of an object.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError>;
    /// The last `len` bytes (fewer if the object is smaller) and the object's full size.
    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError>;
    /// Writes and returns the new ETag; `StoreError::Conflict` when the condition fails.
    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError>;
    /// Every object under `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError>;
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError>;
    /// Deleting an absent object succeeds (as in S3).
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
}
