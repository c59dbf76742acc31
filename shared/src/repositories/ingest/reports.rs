//! A batch's reports (`reports/<batch>/NNN.json`), first to latest.

use super::Ingest;
use crate::domain::ingest::index::BatchId;
use crate::ports::{ObjectMeta, StoreError};
use crate::repositories::json::{read_json, RecordError};
use serde::de::DeserializeOwned;

impl Ingest {
    /// The objects under a batch's reports (one LIST), in key order: first to latest.
    pub async fn report_objects(&self, batch: &BatchId) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(&self.keys.reports(batch)).await
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
