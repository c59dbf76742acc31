//! The feeder's tracker object: created with If-None-Match, advanced with If-Match.

use super::json::{read_json, write_json, RepositoryError, Versioned};
use crate::adapters::parquet::{Inventory, InventoryError};
use crate::domain::tracker::{PageMap, Tracker};
use crate::ports::{ObjectMeta, ObjectStore, StoreError};
use std::sync::Arc;

/// The feeder's tracker object at its key.
#[derive(Clone, Copy)]
pub struct TrackerObject<'a> {
    pub store: &'a dyn ObjectStore,
    pub key: &'a str,
}

impl TrackerObject<'_> {
    /// The tracker, or a new one when none was saved yet.
    pub async fn load(self) -> Result<Versioned<Tracker>, RepositoryError> {
        Ok(read_json(self.store, self.key).await?.unwrap_or(Versioned {
            value: Tracker::default(),
            etag: None,
        }))
    }

    /// Saves the tracker if nobody changed it since it was read; a conflict otherwise.
    pub async fn save(self, tracker: &mut Versioned<Tracker>) -> Result<(), RepositoryError> {
        tracker.value.updated_at = Some(crate::clock::now());
        let etag = write_json(self.store, self.key, &tracker.value, tracker.condition()).await?;
        tracker.etag = Some(etag);
        Ok(())
    }
}

/// The inventories under the inventory prefix, which the tracker adds as they come.
pub struct Inventories<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub prefix: &'a str,
}

impl Inventories<'_> {
    /// Every object under the prefix (one LIST, retried while refused).
    pub async fn list(&self) -> Result<Vec<ObjectMeta>, StoreError> {
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "listing the inventories",
            || self.store.list(self.prefix),
            StoreError::is_transient,
        )
        .await
    }

    /// Opens the inventory at `key` from its footer and index, its granule ids in `column`.
    pub async fn open(&self, key: &str, column: &str) -> Result<Inventory, InventoryError> {
        Inventory::open(self.store.clone(), key, column).await
    }

    /// Opens the inventory at `key` from the page map the tracker kept (no read of its own).
    pub fn from_page_map(
        &self,
        key: &str,
        column: &str,
        map: &PageMap,
    ) -> Result<Inventory, InventoryError> {
        Inventory::from_page_map(self.store.clone(), key, column, map)
    }
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
        let mut t = TrackerObject {
            store: &store,
            key: "t.json",
        }
        .load()
        .await
        .unwrap();
        assert_eq!(t.etag, None);
        t.value.add_inventories(["a".to_owned()]);
        TrackerObject {
            store: &store,
            key: "t.json",
        }
        .save(&mut t)
        .await
        .unwrap();
        // a second creator loses
        let mut other = Versioned {
            value: Tracker::default(),
            etag: None,
        };
        assert!(matches!(
            TrackerObject {
                store: &store,
                key: "t.json"
            }
            .save(&mut other)
            .await,
            Err(RepositoryError::Store(StoreError::Conflict { .. }))
        ));
        // a reader at the current etag advances; one holding the old etag then loses
        let mut stale = TrackerObject {
            store: &store,
            key: "t.json",
        }
        .load()
        .await
        .unwrap();
        let mut fresh = stale.clone();
        fresh.value.set_total_rows("a", 10).unwrap();
        fresh.value.advance_to("a", 5).unwrap();
        TrackerObject {
            store: &store,
            key: "t.json",
        }
        .save(&mut fresh)
        .await
        .unwrap();
        stale.value.set_total_rows("a", 10).unwrap();
        stale.value.advance_to("a", 7).unwrap();
        assert!(matches!(
            TrackerObject {
                store: &store,
                key: "t.json"
            }
            .save(&mut stale)
            .await,
            Err(RepositoryError::Store(StoreError::Conflict { .. }))
        ));
        assert_eq!(
            TrackerObject {
                store: &store,
                key: "t.json"
            }
            .load()
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
            TrackerObject {
                store: &store,
                key: "t.json"
            }
            .load()
            .await,
            Err(RepositoryError::Corrupt { .. })
        ));
    }
}
