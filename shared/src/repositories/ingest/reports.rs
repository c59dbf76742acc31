//! A batch's reports (`reports/<batch>/NNN.json`), first to latest.

use super::Ingest;
use crate::domain::ingest::index::BatchId;
use crate::ports::{ObjectMeta, PutCondition, StoreError};
use crate::repositories::json::{read_json, RecordError};
use bytes::Bytes;
use serde::de::DeserializeOwned;

impl Ingest {
    /// The objects under a batch's reports (one LIST), in key order: first to latest.
    pub async fn report_objects(&self, batch: &BatchId) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(&self.keys.reports(batch)).await
    }

    /// Writes a batch's report `n` (overwriting a report of the same number a crash left).
    pub async fn put_report(
        &self,
        batch: &BatchId,
        n: u32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        self.store
            .put(&self.keys.report(batch, n), body, PutCondition::Overwrite)
            .await
    }

    /// The report at `key` (`None`: not there).
    pub async fn report_at<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, RecordError> {
        Ok(read_json(self.store.as_ref(), key)
            .await
            .map_err(RecordError::from)?
            .map(|v| v.value))
    }
}
