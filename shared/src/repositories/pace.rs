//! The campaign's pace (`granary pace`, `domain::pace`): beside its tracker, so a named
//! campaign has its own (`tracker/pace.json`, or under `campaigns/<name>/`). Written only by the
//! operator's command, read by the feeder each run.

use super::json::{read_json, write_json_retrying, RepositoryError};
use crate::domain::pace::Pace;
use crate::ports::{ObjectStore, PutCondition, StoreError};

pub struct PaceObject<'a> {
    pub store: &'a dyn ObjectStore,
    pub key: String,
}

/// The pace's key beside the tracker at `tracker_key`.
pub fn pace_key(tracker_key: &str) -> String {
    match tracker_key.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/pace.json"),
        None => "pace.json".to_owned(),
    }
}

impl PaceObject<'_> {
    pub async fn read(&self) -> Result<Option<Pace>, RepositoryError> {
        Ok(read_json(self.store, &self.key).await?.map(|v| v.value))
    }

    pub async fn write(&self, pace: &Pace) -> Result<(), RepositoryError> {
        write_json_retrying(
            self.store,
            &self.key,
            pace,
            PutCondition::Overwrite,
            "setting the pace",
        )
        .await?;
        Ok(())
    }

    pub async fn clear(&self) -> Result<(), StoreError> {
        self.store.delete(&self.key).await
    }
}
