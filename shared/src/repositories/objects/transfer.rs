//! A file from a remote server into granary's bucket: streamed in parts (never whole in memory),
//! its size and digests computed on the way, checked against what was announced and expected,
//! under one timeout. Any failure aborts the upload, so nothing half-written becomes visible.

use super::digests::{DigestError, Digests, Found};
use crate::ports::{ObjectStore, SourceError, SourceStream, StoreError, MIN_PART_BYTES};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use std::future::Future;
use std::time::Duration;

/// Parts are buffered to this size before they are written.
const PART_BYTES: usize = 8 * 1024 * 1024;

/// What the file should be, where that is known.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected<'a> {
    pub size: Option<u64>,
    /// `sha256:<hex>` or `md5:<hex>`.
    pub digest: Option<&'a str>,
}

/// Why a copy into the store failed, in words an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Writing the object failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("truncated: the source announced {announced} bytes and sent {sent}")]
    Truncated { announced: u64, sent: u64 },
    #[error("size mismatch: {expected} bytes were expected and {arrived} arrived")]
    SizeMismatch { expected: u64, arrived: u64 },
    #[error(transparent)]
    Digest(#[from] DigestError),
    #[error("timed out after {}s", .after.as_secs())]
    TimedOut { after: Duration },
}

/// Copies what `open` opens into `key`. `Err` says why, in words an operator can act on.
pub async fn copy_into_store<O>(
    store: &dyn ObjectStore,
    key: &str,
    open: O,
    expected: &Expected<'_>,
    timeout: Duration,
) -> Result<Found, TransferError>
where
    O: Future<Output = Result<(SourceStream, Option<u64>), SourceError>>,
{
    let mut upload = store.begin_upload(key).await?;
    let copy = async {
        let (mut stream, announced) = open.await?;
        let mut digests = Digests::new(expected.digest);
        let mut buffer = BytesMut::with_capacity(PART_BYTES);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            digests.update(&chunk);
            buffer.extend_from_slice(&chunk);
            if buffer.len() >= PART_BYTES.max(MIN_PART_BYTES) {
                let part: Bytes = buffer.split().freeze();
                upload.write_part(part).await?;
            }
        }
        if !buffer.is_empty() {
            upload.write_part(buffer.split().freeze()).await?;
        }
        let digests = digests.finish();
        if let Some(n) = announced.filter(|n| *n != digests.size) {
            return Err(TransferError::Truncated {
                announced: n,
                sent: digests.size,
            });
        }
        if let Some(n) = expected.size.filter(|n| *n != digests.size) {
            return Err(TransferError::SizeMismatch {
                expected: n,
                arrived: digests.size,
            });
        }
        digests.verify(expected.digest)?;
        Ok(digests)
    };
    let outcome = match tokio::time::timeout(timeout, copy).await {
        Ok(r) => r,
        Err(_) => Err(TransferError::TimedOut { after: timeout }),
    };
    match outcome {
        Ok(found) => {
            upload.finish().await?;
            Ok(found)
        }
        Err(e) => {
            upload.abort().await;
            Err(e)
        }
    }
}

/// Bytes read from a stored object per request when it is streamed.
const READ_BYTES: u64 = 8 * 1024 * 1024;

/// An object of `store` as a stream (ranged GETs of 8 MiB), with its size: what
/// [`copy_into_store`] copies from when the source is another bucket. An absent object is a
/// permanent error.
pub async fn open_object(
    store: std::sync::Arc<dyn ObjectStore>,
    key: &str,
) -> Result<(SourceStream, Option<u64>), SourceError> {
    let size = store
        .list(key)
        .await
        .map_err(|e| SourceError::Transient {
            url: key.to_owned(),
            message: e.to_string(),
            source: None,
        })?
        .into_iter()
        .find(|m| m.key == key)
        .map(|m| m.size)
        .ok_or_else(|| SourceError::Permanent {
            url: key.to_owned(),
            message: "no such object".to_owned(),
            source: None,
        })?;
    let key = key.to_owned();
    let stream = futures::stream::try_unfold(0u64, move |at| {
        let store = store.clone();
        let key = key.clone();
        async move {
            if at >= size {
                return Ok(None);
            }
            let end = (at + READ_BYTES).min(size);
            let part =
                store
                    .get_range(&key, at..end)
                    .await
                    .map_err(|e| SourceError::Transient {
                        url: key.clone(),
                        message: e.to_string(),
                        source: None,
                    })?;
            Ok(Some((part, end)))
        }
    });
    Ok((Box::pin(stream), Some(size)))
}

/// The size and SHA-256 (hex) of a stored object, read through once.
pub async fn hash_object(
    store: std::sync::Arc<dyn ObjectStore>,
    key: &str,
) -> Result<(u64, String), SourceError> {
    use sha2::{Digest, Sha256};
    let (mut stream, _) = open_object(store, key).await?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        size += chunk.len() as u64;
        hasher.update(&chunk);
    }
    Ok((size, hex::encode(hasher.finalize())))
}
