//! The hold on the feeder (`granary hold` / `granary release`): while the object exists the
//! feeder submits nothing. Placed with If-None-Match so a second hold keeps the first one's reason.

use super::json::{read_json, write_json, write_json_retrying, RepositoryError};
use crate::domain::hold::Hold;
use crate::ports::{ObjectStore, PutCondition};

pub async fn read_hold(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<Option<Hold>, RepositoryError> {
    Ok(read_json(store, key).await?.map(|v| v.value))
}

/// Places a hold; `Ok(Some(existing))` when one is already there (it is left as it is).
pub async fn place_hold(
    store: &dyn ObjectStore,
    key: &str,
    hold: &Hold,
) -> Result<Option<Hold>, RepositoryError> {
    match write_json(store, key, hold, PutCondition::IfAbsent).await {
        Ok(_) => Ok(None),
        Err(e) if e.is_conflict() => match read_hold(store, key).await? {
            Some(existing) => Ok(Some(existing)),
            // Released between the refused write and the read: placed once more, so that
            // `None` always means this hold is the one in place.
            None => match write_json(store, key, hold, PutCondition::IfAbsent).await {
                Ok(_) => Ok(None),
                Err(e) if e.is_conflict() => read_hold(store, key).await,
                Err(e) => Err(e),
            },
        },
        Err(e) => Err(e),
    }
}

/// Puts `hold` in place of whatever hold is there (`granary cancel`'s, which names the cancel the
/// requeuer holds back for).
pub async fn replace_hold(
    store: &dyn ObjectStore,
    key: &str,
    hold: &Hold,
) -> Result<(), RepositoryError> {
    write_json_retrying(
        store,
        key,
        hold,
        PutCondition::Overwrite,
        "holding the feeder",
    )
    .await?;
    Ok(())
}
