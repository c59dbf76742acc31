//! An operator's holds on the ingest queue (a collection's, a batch's or a job's), each an object
//! of its own at the key `IngestKeys` gives it.

use super::Ingest;
use crate::ports::{PutCondition, StoreError};
use crate::repositories::json::{read_json, RecordError};
use bytes::Bytes;
use serde::de::DeserializeOwned;

impl Ingest {
    /// The hold at `key` (`None`: nothing held there).
    pub async fn hold_at<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, RecordError> {
        Ok(read_json(self.store.as_ref(), key)
            .await
            .map_err(RecordError::from)?
            .map(|v| v.value))
    }

    /// Places the hold `body` at `key` If-None-Match: `StoreError::Conflict` when a hold is there
    /// already (it is left as it is).
    pub async fn place_hold(&self, key: &str, body: Bytes) -> Result<String, StoreError> {
        self.store.put(key, body, PutCondition::IfAbsent).await
    }

    /// Removes the hold at `key`.
    pub async fn remove_hold(&self, key: &str) -> Result<(), StoreError> {
        self.store.delete(key).await
    }
}
