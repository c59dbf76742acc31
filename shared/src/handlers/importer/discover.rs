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
    /// Files whose id is a granule of an open array window of first attempts: in flight with
    /// no record yet (made at its end); the next discovery finds that record.
    pub in_flight: u64,
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

pub async fn discover(ctx: &Ctx) -> Result<DiscoverSummary, HandlerError> {
    let source = ctx.source()?;
    let files = source.list().await?;
    let mut summary = DiscoverSummary {
        listed: files.len() as u64,
        ..DiscoverSummary::default()
    };
    // The granules of the open array windows of first attempts have no record until their
    // children end. Read before any record is created: a window closed since was closed only
    // once its granules' records were made, and the creation below finds those.
    let files: Vec<(SourceFile, String)> = files
        .into_iter()
        .map(|f| {
            let hash = raw_file_hash(&f);
            (f, hash)
        })
        .collect();
    let ids: Vec<_> = files
        .iter()
        .filter_map(|(_, hash)| id_from_hash(hash).ok())
        .collect();
    let mut open = ctx
        .windows()
        .in_open_arrays(&ctx.open_windows, &ids)
        .await?;
    if !open.unreadable.is_empty() {
        let (inventory, start, e) = open.unreadable.swap_remove(0);
        tracing::error!(inventory, start, error = %e, "an open window's claim cannot be read: nothing is registered until it can");
        return Err(e.into());
    }
    let in_flight = if crate::mutants::on("discover-ignores-open-windows") {
        std::collections::HashSet::new()
    } else {
        open.in_flight
    };
    let items = ctx.items();
    for (file, hash) in files {
        let id = match id_from_hash(&hash) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(url = file.url, error = %e, "file not registered");
                summary.rejected += 1;
                continue;
            }
        };
        if in_flight.contains(&id) {
            tracing::info!(item_id = %id, url = file.url, "a granule of an open array window, in flight: not registered now");
            summary.in_flight += 1;
            continue;
        }
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
                ctx.enqueue(&id, None).await?;
            }
            Created::Existing(existing) => {
                summary.duplicates += 1;
                // Registered but maybe never queued (a crash between create and send): queue it
                // again while it has not started; the download step's CAS admits only one runner.
                if existing.state == ItemState::Discovered {
                    ctx.enqueue(&id, None).await?;
                }
                tracing::debug!(item_id = %id, state = %existing.state, url = file.url,
                    "already registered (same raw_file_hash): ignored");
            }
        }
    }
    tracing::info!(?summary, "discovery finished");
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryQueue, MemorySource};
    use crate::config::Config;
    use crate::domain::granule::GranuleId;
    use crate::domain::layout::claims::window_key;
    use crate::domain::window::WindowClaim;
    use crate::ports::PutCondition;
    use std::sync::Arc;

    fn file(hex: &str) -> (SourceFile, bytes::Bytes) {
        let file = SourceFile {
            url: format!("https://source.example/{hex}.h5"),
            name: format!("{hex}.h5"),
            size: Some(3),
            last_modified: None,
            version: None,
            digest: Some(format!("sha256:{hex}")),
        };
        (file, bytes::Bytes::from_static(b"abc"))
    }

    #[tokio::test]
    async fn discovery_leaves_a_granule_of_an_open_array_window_alone() {
        let (running, other, new) = ("a".repeat(32), "b".repeat(32), "c".repeat(32));
        let ctx = Ctx {
            source: Some(Arc::new(MemorySource {
                files: vec![file(&running), file(&new)],
            })),
            import_queue: Some(Arc::new(MemoryQueue::new("import"))),
            ..Ctx::in_memory(Config::for_unit_tests(&[]))
        };
        // An array window of first attempts whose children run: no record for its granules
        // until they end, only its claim and its open marker.
        let granules: Vec<GranuleId> = [&running, &other]
            .iter()
            .map(|h| id_from_hash(&format!("sha256:{h}")).unwrap())
            .collect();
        let claim = WindowClaim::new(
            None,
            "inv.parquet",
            0,
            2,
            granules.clone(),
            "t",
            chrono::Utc::now(),
        )
        .in_array(true)
        .with_records_at_end(true);
        let layout = &ctx.config.layout;
        let body = bytes::Bytes::from(serde_json::to_vec(&claim).unwrap());
        for (key, body) in [
            (window_key(&layout.claim_prefix, "inv.parquet", 0), body),
            (
                window_key(&layout.open_claim_prefix, "inv.parquet", 0),
                bytes::Bytes::new(),
            ),
        ] {
            ctx.store
                .put(&key, body, PutCondition::Overwrite)
                .await
                .unwrap();
        }
        let summary = discover(&ctx).await.unwrap();
        assert_eq!((summary.new, summary.in_flight), (1, 1), "{summary:?}");
        assert!(ctx.items().look(&granules[0]).await.unwrap().is_none());
        // Its window closed (in a campaign, once the record was made at the child's end, which
        // this discovery would then find): nothing holds the file back any more.
        ctx.store
            .delete(&window_key(&layout.open_claim_prefix, "inv.parquet", 0))
            .await
            .unwrap();
        let summary = discover(&ctx).await.unwrap();
        assert_eq!((summary.new, summary.in_flight), (1, 0), "{summary:?}");
    }
}
