//! The feeder's tracker object: created with If-None-Match, advanced with If-Match.

use super::json::{read_json, write_json, RepositoryError, Versioned};
use crate::domain::tracker::Tracker;
use crate::ports::{ObjectMeta, ObjectStore, StoreError};
use chrono::Utc;

pub async fn load_tracker(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Versioned<Tracker>, RepositoryError> {
    Ok(read_json(store, key).await?.unwrap_or(Versioned {
        value: Tracker::default(),
        etag: None,
    }))
}

/// Saves the tracker if nobody changed it since it was read. `a conflict otherwise.
pub async fn save_tracker(
    store: &dyn ObjectStore,
    key: &str,
    tracker: &mut Versioned<Tracker>,
) -> Result<(), RepositoryError> {
    tracker.value.updated_at = Some(Utc::now());
    let etag = write_json(store, key, &tracker.value, tracker.condition()).await?;
    tracker.etag = Some(etag);
    Ok(())
}

/// Every object under the inventory prefix (one LIST, retried while refused): the inventories
/// the tracker adds as they come.
pub async fn list_inventories(
    store: &dyn ObjectStore,
    inventory_prefix: &str,
) -> Result<Vec<ObjectMeta>, StoreError> {
    crate::retry::again(
        crate::retry::Backoff::IN_RUN,
        "listing the inventories",
        || store.list(inventory_prefix),
        StoreError::is_transient,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use crate::ports::{PutCondition, StoreError};
    use bytes::Bytes;

    #[tokio::test]
    async fn tracker_create_advance_conflict() {
        let store = MemoryStore::new();
        let mut t = load_tracker(&store, "t.json").await.unwrap();
        assert_eq!(t.etag, None);
        t.value.add_inventories(["a".to_owned()]);
        save_tracker(&store, "t.json", &mut t).await.unwrap();
        // a second creator loses
        let mut other = Versioned {
            value: Tracker::default(),
            etag: None,
        };
        assert!(matches!(
            save_tracker(&store, "t.json", &mut other).await,
            Err(RepositoryError::Store(StoreError::Conflict { .. }))
        ));
        // a reader at the current etag advances; one holding the old etag then loses
        let mut stale = load_tracker(&store, "t.json").await.unwrap();
        let mut fresh = stale.clone();
        fresh.value.set_total_rows("a", 10).unwrap();
        fresh.value.advance_to("a", 5).unwrap();
        save_tracker(&store, "t.json", &mut fresh).await.unwrap();
        stale.value.set_total_rows("a", 10).unwrap();
        stale.value.advance_to("a", 7).unwrap();
        assert!(matches!(
            save_tracker(&store, "t.json", &mut stale).await,
            Err(RepositoryError::Store(StoreError::Conflict { .. }))
        ));
        assert_eq!(
            load_tracker(&store, "t.json")
                .await
                .unwrap()
                .value
                .inventories[0]
                .rows_submitted,
            5
        );
    }

    #[tokio::test]
    async fn corrupt_tracker_is_an_error() {
        let store = MemoryStore::new();
        store
            .put(
                "t.json",
                Bytes::from_static(b"{oops"),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        assert!(matches!(
            load_tracker(&store, "t.json").await,
            Err(RepositoryError::Corrupt { .. })
        ));
    }
}
