//! The hold on the feeder (`granary hold` / `granary release`): while the object exists the
//! feeder submits nothing. Placed with If-None-Match so a second hold keeps the first one's reason.

use super::json::{read_json, write_json, write_json_retrying, RepositoryError};
use crate::domain::hold::Hold;
use crate::ports::{ObjectStore, PutCondition, StoreError};

/// The feeder's hold object at its key.
#[derive(Clone, Copy)]
pub struct HoldObject<'a> {
    pub store: &'a dyn ObjectStore,
    pub key: &'a str,
}

impl HoldObject<'_> {
    /// The hold in place, if any.
    pub async fn read(self) -> Result<Option<Hold>, RepositoryError> {
        Ok(read_json(self.store, self.key).await?.map(|v| v.value))
    }

    /// Places a hold; `Ok(Some(existing))` when one is already there (it is left as it is).
    pub async fn place(self, hold: &Hold) -> Result<Option<Hold>, RepositoryError> {
        let (store, key) = (self.store, self.key);
        match write_json(store, key, hold, PutCondition::IfAbsent).await {
            Ok(_) => Ok(None),
            Err(e) if e.is_conflict() => match self.read().await? {
                Some(existing) => Ok(Some(existing)),
                // Released between the refused write and the read: placed once more, so that
                // `None` always means this hold is the one in place.
                None => match write_json(store, key, hold, PutCondition::IfAbsent).await {
                    Ok(_) => Ok(None),
                    Err(e) if e.is_conflict() => self.read().await,
                    Err(e) => Err(e),
                },
            },
            Err(e) => Err(e),
        }
    }

    /// Puts `hold` in place of whatever hold is there (`granary cancel`'s, which names the
    /// cancel the requeuer holds back for).
    pub async fn replace(self, hold: &Hold) -> Result<(), RepositoryError> {
        write_json_retrying(
            self.store,
            self.key,
            hold,
            PutCondition::Overwrite,
            "holding the feeder",
        )
        .await?;
        Ok(())
    }

    /// Releases the hold (nothing in place is nothing to do).
    pub async fn release(self) -> Result<(), StoreError> {
        self.store.delete(self.key).await
    }
}
