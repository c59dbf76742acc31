//! A file from a remote server into granary's bucket: streamed in parts (never whole in memory),
//! its size and digests computed on the way, checked against what was announced and expected,
//! under one timeout. Any failure aborts the upload, so nothing half-written becomes visible.

use super::importer::validate::{Digests, Found};
use crate::ports::{ObjectStore, SourceError, SourceStream, MIN_PART_BYTES};
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

/// Copies what `open` opens into `key`. `Err` says why, in words an operator can act on.
pub async fn copy_into_store<O>(
    store: &dyn ObjectStore,
    key: &str,
    open: O,
    expected: &Expected<'_>,
    timeout: Duration,
) -> Result<Found, String>
where
    O: Future<Output = Result<(SourceStream, Option<u64>), SourceError>>,
{
    let mut upload = store.begin_upload(key).await.map_err(|e| e.to_string())?;
    let copy = async {
        let (mut stream, announced) = open.await.map_err(|e| e.to_string())?;
        let mut digests = Digests::new(expected.digest);
        let mut buffer = BytesMut::with_capacity(PART_BYTES);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            digests.update(&chunk);
            buffer.extend_from_slice(&chunk);
            if buffer.len() >= PART_BYTES.max(MIN_PART_BYTES) {
                let part: Bytes = buffer.split().freeze();
                upload.write_part(part).await.map_err(|e| e.to_string())?;
            }
        }
        if !buffer.is_empty() {
            upload
                .write_part(buffer.split().freeze())
                .await
                .map_err(|e| e.to_string())?;
        }
        let digests = digests.finish();
        if let Some(n) = announced.filter(|n| *n != digests.size) {
            return Err(format!(
                "truncated: the source announced {n} bytes and sent {}",
                digests.size
            ));
        }
        if let Some(n) = expected.size.filter(|n| *n != digests.size) {
            return Err(format!(
                "size mismatch: {n} bytes were expected and {} arrived",
                digests.size
            ));
        }
        digests.verify(expected.digest)?;
        Ok(digests)
    };
    let outcome = match tokio::time::timeout(timeout, copy).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {}s", timeout.as_secs())),
    };
    match outcome {
        Ok(found) => {
            upload.finish().await.map_err(|e| e.to_string())?;
            Ok(found)
        }
        Err(e) => {
            upload.abort().await;
            Err(e)
        }
    }
}
