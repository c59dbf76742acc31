//! Where the importer finds files: an S3 prefix or an HTTP(S) open directory.

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Worth another attempt: a timeout, a reset connection, a 5xx, a truncated body.
    #[error("{url}: {message}")]
    Transient {
        url: String,
        message: String,
        /// The client's own error, when there is one.
        #[source]
        source: Option<super::BoxError>,
    },
    /// Not worth another attempt: 404, 403, a malformed listing.
    #[error("{url}: {message} (not retried)")]
    Permanent {
        url: String,
        message: String,
        #[source]
        source: Option<super::BoxError>,
    },
}

/// One file as its source describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Where to fetch it (`https://…` or `s3://bucket/key`).
    pub url: String,
    /// Its file name (the last path segment).
    pub name: String,
    pub size: Option<u64>,
    pub last_modified: Option<DateTime<Utc>>,
    /// The source's version tag (HTTP ETag, S3 ETag), if any.
    pub version: Option<String>,
    /// A digest the source publishes for it: `sha256:<hex>` or `md5:<hex>`.
    pub digest: Option<String>,
}

pub type SourceStream = BoxStream<'static, Result<Bytes, SourceError>>;

#[async_trait]
pub trait Source: Send + Sync {
    /// Every file the source offers now.
    async fn list(&self) -> Result<Vec<SourceFile>, SourceError>;
    /// The file's bytes as they arrive, and the length the source announced.
    async fn open(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError>;
}
