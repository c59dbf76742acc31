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
    /// The request failed: `message` says how (the service's code and message), `source` is
    /// the SDK's error itself when there is one, for whoever walks the cause chain.
    #[error("object store request for {key} failed: {message}")]
    Backend {
        key: String,
        message: String,
        #[source]
        source: Option<super::BoxError>,
    },
}

impl StoreError {
    /// A request that failed in transit or was refused for its rate (what the SDK's retries
    /// left): trying again later may succeed. A lost condition or a missing object will not.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Backend { .. })
    }

    pub fn backend(key: &str, e: impl std::fmt::Display) -> Self {
        StoreError::Backend {
            key: key.to_owned(),
            message: e.to_string(),
            source: None,
        }
    }

    /// The same error with the underlying error kept as its source.
    pub fn with_source(self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        match self {
            StoreError::Backend { key, message, .. } => StoreError::Backend {
                key,
                message,
                source: Some(Box::new(e)),
            },
            other => other,
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
    /// Replace only if the current ETag is this one (`If-Match`). S3 answers 412 when the
    /// object changed and 404 when there is no object (or a delete marker) under the key ("How
    /// to prevent object overwrites with conditional writes", S3 user guide): the port reports
    /// `Conflict` and `NotFound`.
    IfMatch(String),
}

/// The distinct folders directly under `prefix` that `keys` lie in, in order.
pub fn folders_of<'a>(prefix: &str, keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let folders: std::collections::BTreeSet<String> = keys
        .filter_map(|k| {
            let rest = k.strip_prefix(prefix)?;
            let (name, _) = rest.split_once('/')?;
            Some(format!("{prefix}{name}/"))
        })
        .collect();
    folders.into_iter().collect()
}

/// Keys in one ListObjectsV2 answer (its `MaxKeys` default and ceiling).
pub const LIST_PAGE_KEYS: usize = 1000;

/// One page of a listing ([`ObjectStore::list_page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// In key order.
    pub objects: Vec<ObjectMeta>,
    /// More keys under the prefix follow the last one (S3's `IsTruncated`).
    pub truncated: bool,
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
    /// Its ETag as the listing gives it (`None` where a store gives none): a new object written
    /// under the same key has another.
    pub etag: Option<String>,
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
    /// The folders directly under `prefix` (each `prefix` + a name + `/`, in order): S3's
    /// ListObjectsV2 with the delimiter `/` ("Organizing objects using prefixes", S3 user
    /// guide), one request however many objects they hold. The default lists every object.
    async fn list_folders(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(folders_of(
            prefix,
            self.list(prefix).await?.iter().map(|m| m.key.as_str()),
        ))
    }
    /// One ListObjectsV2 request: the first [`LIST_PAGE_KEYS`] keys under `prefix` that sort
    /// after `start_after` (its `StartAfter`: "Amazon S3 starts listing after this specified
    /// key", which need not exist; keys come in UTF-8 binary order), and whether more follow.
    /// A LIST sees every write that succeeded before it ("Amazon S3 data consistency model",
    /// S3 user guide). The default lists the whole prefix.
    async fn list_page(&self, prefix: &str, start_after: &str) -> Result<ListPage, StoreError> {
        let mut objects: Vec<ObjectMeta> = self
            .list(prefix)
            .await?
            .into_iter()
            .filter(|m| m.key.as_str() > start_after)
            .collect();
        let truncated = objects.len() > LIST_PAGE_KEYS;
        objects.truncate(LIST_PAGE_KEYS);
        Ok(ListPage { objects, truncated })
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError>;
    /// Deleting an absent object succeeds (as in S3).
    async fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// Starts writing a large object part by part (every part but the last at least
    /// [`MIN_PART_BYTES`]). Nothing is visible under `key` until `finish`. The default buffers the
    /// parts and writes them with one `put`; S3 streams them as a multipart upload.
    async fn begin_upload<'a>(&'a self, key: &str) -> Result<Box<dyn Upload + 'a>, StoreError> {
        Ok(Box::new(BufferedUpload {
            store: self,
            key: key.to_owned(),
            buffer: Vec::new(),
        }))
    }
}

/// S3's smallest multipart part (except the last).
pub const MIN_PART_BYTES: usize = 5 * 1024 * 1024;

/// An object being written in parts.
#[async_trait]
pub trait Upload: Send {
    async fn write_part(&mut self, part: Bytes) -> Result<(), StoreError>;
    /// Makes the object visible; returns its size.
    async fn finish(self: Box<Self>) -> Result<u64, StoreError>;
    /// Drops what was written so far (S3 frees the parts).
    async fn abort(self: Box<Self>);
}

struct BufferedUpload<'a, S: ?Sized> {
    store: &'a S,
    key: String,
    buffer: Vec<u8>,
}

#[async_trait]
impl<S: ObjectStore + ?Sized> Upload for BufferedUpload<'_, S> {
    async fn write_part(&mut self, part: Bytes) -> Result<(), StoreError> {
        self.buffer.extend_from_slice(&part);
        Ok(())
    }
    async fn finish(self: Box<Self>) -> Result<u64, StoreError> {
        let len = self.buffer.len() as u64;
        self.store
            .put(&self.key, Bytes::from(self.buffer), PutCondition::Overwrite)
            .await?;
        Ok(len)
    }
    async fn abort(self: Box<Self>) {}
}
