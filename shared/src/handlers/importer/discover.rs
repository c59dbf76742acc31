//! Discover: list the source and register every file not seen before as DISCOVERED. A file's
//! identity is its raw_file_hash (the digest the source publishes, else a hash of its URL, size
//! and version), and its record is created with If-None-Match under an id derived from that hash,
//! so discovering the same file again changes nothing.

use super::Ctx;
use crate::domain::item::{id_from_hash, NewItem};
use crate::domain::lifecycle::ItemState;
use crate::handlers::HandlerError;
use crate::ports::SourceFile;
use crate::repositories::items::Created;
use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiscoverSummary {
    pub listed: u64,
    pub new: u64,
    /// Files whose raw_file_hash is already registered.
    pub duplicates: u64,
    /// Files that could not be registered (a name that makes no key, ...).
    pub rejected: u64,
}

/// The identity of a file as its source describes it.
pub fn raw_file_hash(file: &SourceFile) -> String {
    if let Some(d) = &file.digest {
        return d.clone();
    }
    let mut h = Sha256::new();
    h.update(file.url.as_bytes());
    h.update(b"\n");
    h.update(file.size.map(|s| s.to_string()).unwrap_or_default());
    h.update(b"\n");
    h.update(file.version.as_deref().unwrap_or_default());
    h.update(b"\n");
    h.update(
        file.last_modified
            .map(|t| t.to_rfc3339())
            .unwrap_or_default(),
    );
    format!("sha256:{:x}", h.finalize())
}

pub async fn discover(imp: &Ctx) -> Result<DiscoverSummary, HandlerError> {
    let source = imp.source()?;
    let files = source.list().await?;
    let mut summary = DiscoverSummary {
        listed: files.len() as u64,
        ..DiscoverSummary::default()
    };
    let items = imp.items();
    for file in files {
        let hash = raw_file_hash(&file);
        let id = match id_from_hash(&hash) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(url = file.url, error = %e, "file not registered");
                summary.rejected += 1;
                continue;
            }
        };
        let new = NewItem {
            id: id.clone(),
            name: file.name.clone(),
            state: ItemState::Discovered,
            reason: format!("listed at {}", file.url),
            raw_file_hash: Some(hash),
            size: file.size,
            checksum: file.digest.clone(),
            source: Some(file.url.clone()),
            source_modified: file.last_modified,
        };
        match items.create(new, "importer-discover").await? {
            Created::New(_) => {
                summary.new += 1;
                imp.enqueue(&id, None).await?;
            }
            Created::Existing(existing) => {
                summary.duplicates += 1;
                // Registered but maybe never queued (a crash between create and send): queue it
                // again while it has not started; the download step's CAS admits only one runner.
                if existing.state == ItemState::Discovered {
                    imp.enqueue(&id, None).await?;
                }
                tracing::debug!(item_id = %id, state = %existing.state, url = file.url,
                    "already registered (same raw_file_hash): ignored");
            }
        }
    }
    tracing::info!(?summary, "discovery finished");
    Ok(summary)
}
