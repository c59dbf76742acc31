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
    /// Files registered (or found DISCOVERED) whose id an open window of the feeder holds: not
    /// queued, its job takes the record over (docs/items.md).
    pub in_flight: u64,
    /// Files queued for their download (new ones, and ones found still DISCOVERED).
    pub queued: u64,
    /// Files not registered or not queued this time, a call refused past its tries: the next
    /// discovery takes them (one refusal does not end the listing's run).
    pub errors: u64,
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
    let items = ctx.items();
    // Registered first, queued after: see `queue_unless_in_a_window`.
    let mut to_queue = Vec::new();
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
        let created = crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "registering a discovered file",
            || items.create(new.clone(), "importer-discover"),
            crate::repositories::RecordError::is_transient,
        )
        .await;
        let created = match created {
            Ok(created) => created,
            Err(e) => {
                tracing::warn!(item_id = %id, url = file.url, error = %e, "file not registered now: the next discovery tries again");
                summary.errors += 1;
                continue;
            }
        };
        match created {
            Created::New(_) => {
                summary.new += 1;
                to_queue.push(id);
            }
            Created::Existing(existing) => {
                summary.duplicates += 1;
                // Registered but maybe never queued (a crash between create and send, or a
                // window held it): queued again while it has not started; the download step's
                // CAS admits only one runner.
                if existing.state == ItemState::Discovered {
                    to_queue.push(id.clone());
                }
                tracing::debug!(item_id = %id, state = %existing.state, url = file.url,
                    "already registered (same raw_file_hash): ignored");
            }
        }
    }
    queue_unless_in_a_window(ctx, to_queue, &mut summary).await?;
    tracing::info!(?summary, "discovery finished");
    Ok(summary)
}

/// Queues each registered file for download unless a feeder's open window of first attempts
/// holds its id. The windows are read after the records are made, and the feeder looks for its
/// window's records after marking it open (`feeder::window`, `KnownRecords`): of a file both
/// discovered and listed, one side sees the other, so it is submitted once. A file left here
/// stays DISCOVERED: the window's job takes its record over (`decisions::on_submitted`), or,
/// when the window dropped it, the next discovery queues it.
async fn queue_unless_in_a_window(
    ctx: &Ctx,
    ids: Vec<crate::domain::granule::GranuleId>,
    summary: &mut DiscoverSummary,
) -> Result<(), HandlerError> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut open = ctx
        .windows()
        .in_open_windows(&ctx.open_windows, &ids)
        .await?;
    if !open.unreadable.is_empty() {
        let (inventory, start, e) = open.unreadable.swap_remove(0);
        tracing::error!(inventory, start, error = %e, "an open window's claim cannot be read: nothing is queued until it can");
        return Err(e.into());
    }
    let held = if crate::mutants::on("discover-ignores-open-windows") {
        std::collections::HashSet::new()
    } else {
        open.in_flight
    };
    for id in ids {
        if held.contains(&id) {
            tracing::info!(item_id = %id, "an open window of the feeder holds it: not queued now");
            summary.in_flight += 1;
            continue;
        }
        let sent = crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "queueing a discovered file",
            || ctx.enqueue(&id, None),
            |e| !matches!(e, HandlerError::NotConfigured(_)),
        )
        .await;
        match sent {
            Ok(()) => summary.queued += 1,
            // Left DISCOVERED: the next discovery queues it.
            Err(HandlerError::NotConfigured(why)) => return Err(HandlerError::NotConfigured(why)),
            Err(e) => {
                tracing::warn!(item_id = %id, error = %e, "file not queued now: the next discovery tries again");
                summary.errors += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryQueue, MemorySource};
    use crate::config::Config;
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

    /// A claim and its open marker, as the feeder leaves them while its window's jobs run.
    async fn open_window(ctx: &Ctx, inventory: &str, claim: &WindowClaim) {
        let layout = &ctx.config.layout;
        let body = bytes::Bytes::from(serde_json::to_vec(claim).unwrap());
        for (key, body) in [
            (window_key(&layout.claim_prefix, inventory, 0), body),
            (
                window_key(&layout.open_claim_prefix, inventory, 0),
                bytes::Bytes::new(),
            ),
        ] {
            ctx.store
                .put(&key, body, PutCondition::Overwrite)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn discovery_queues_no_file_an_open_window_holds() {
        let (in_array, in_single, other, new) = (
            "a".repeat(32),
            "d".repeat(32),
            "b".repeat(32),
            "c".repeat(32),
        );
        let queue = Arc::new(MemoryQueue::new("import"));
        let ctx = Ctx {
            source: Some(Arc::new(MemorySource {
                files: vec![file(&in_array), file(&in_single), file(&new)],
            })),
            import_queue: Some(queue.clone()),
            ..Ctx::in_memory(Config::for_unit_tests(&[]))
        };
        let id = |h: &str| id_from_hash(&format!("sha256:{h}")).unwrap();
        // An array window of first attempts whose children run (no record for its granules
        // until they end), and a single job's window not recorded yet: each only its claim
        // and its open marker.
        let array = WindowClaim::new(
            None,
            "a.parquet",
            0,
            2,
            vec![id(&in_array), id(&other)],
            "t",
            chrono::Utc::now(),
        )
        .in_array(true)
        .with_records_at_end(true);
        open_window(&ctx, "a.parquet", &array).await;
        let single = WindowClaim::new(
            None,
            "b.parquet",
            0,
            1,
            vec![id(&in_single)],
            "t",
            chrono::Utc::now(),
        );
        open_window(&ctx, "b.parquet", &single).await;
        let summary = discover(&ctx).await.unwrap();
        assert_eq!((summary.new, summary.in_flight), (3, 2), "{summary:?}");
        // Registered, not queued: the windows' jobs take those records over.
        let queued = || -> Vec<String> { queue.bodies() };
        assert_eq!(queued().len(), 1, "{:?}", queued());
        assert!(queued()[0].contains(id(&new).as_str()));
        let record = ctx.items().look(&id(&in_array)).await.unwrap().unwrap();
        assert_eq!(record.state, ItemState::Discovered);
        // The windows closed (once their records were made, in a campaign) or dropped the
        // files: the next discovery queues them.
        for inventory in ["a.parquet", "b.parquet"] {
            let key = window_key(&ctx.config.layout.open_claim_prefix, inventory, 0);
            ctx.store.delete(&key).await.unwrap();
        }
        let summary = discover(&ctx).await.unwrap();
        assert_eq!(
            (summary.duplicates, summary.in_flight),
            (3, 0),
            "{summary:?}"
        );
        for held in [&in_array, &in_single] {
            assert!(queued().iter().any(|b| b.contains(id(held).as_str())));
        }
    }
}
