//! The cancelled list (`claims/cancelled/granule_id=G/attempt=N.json`): the attempts `granary
//! cancel` ended or held back, until `granary resume --cancelled` sends them round again.

use super::json::{read_json, write_json_retrying, RepositoryError};
use crate::domain::cancel::{CancelRecord, Cancelled};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::{
    cancel_record_key, cancelled_key, cancelled_prefix, parse_claim_key,
};
use crate::ports::{ObjectStore, PutCondition, StoreError};

/// Writes a cancel's record (`claims/cancels/<id>.json`, overwriting the round before's): what it
/// means to terminate and why.
pub async fn record_cancel(
    store: &dyn ObjectStore,
    claim_prefix: &str,
    record: &CancelRecord,
) -> Result<(), RepositoryError> {
    write_json_retrying(
        store,
        &cancel_record_key(claim_prefix, &record.id),
        record,
        PutCondition::Overwrite,
        "recording a cancel",
    )
    .await?;
    Ok(())
}

/// Lists `entry` (overwriting an earlier listing of the same attempt): the route of an end
/// `granary cancel` made (the monitor), and of a next attempt it held back (the requeuer).
pub async fn list(
    store: &dyn ObjectStore,
    claim_prefix: &str,
    entry: &Cancelled,
) -> Result<(), RepositoryError> {
    let key = cancelled_key(
        claim_prefix,
        &GranuleProcessingEvent {
            granule_id: entry.granule_id.clone(),
            attempt: entry.attempt,
        },
    );
    write_json_retrying(
        store,
        &key,
        entry,
        PutCondition::Overwrite,
        "listing a cancelled attempt",
    )
    .await?;
    Ok(())
}

/// Every listed attempt, by granule.
pub async fn listed(
    store: &dyn ObjectStore,
    claim_prefix: &str,
) -> Result<Vec<Cancelled>, RepositoryError> {
    let prefix = cancelled_prefix(claim_prefix);
    let mut out = Vec::new();
    for meta in store.list(&prefix).await? {
        if parse_claim_key(&prefix, &meta.key).is_none() {
            continue;
        }
        if let Some(entry) = read_json::<Cancelled>(store, &meta.key).await? {
            out.push(entry.value);
        }
    }
    Ok(out)
}

/// Takes `attempt` off the list (one DELETE; nothing listed is nothing to do).
pub async fn unlist(
    store: &dyn ObjectStore,
    claim_prefix: &str,
    attempt: &GranuleProcessingEvent,
) -> Result<(), StoreError> {
    store.delete(&cancelled_key(claim_prefix, attempt)).await
}
