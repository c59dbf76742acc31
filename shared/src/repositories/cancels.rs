//! The cancelled list (`claims/cancelled/granule_id=G/attempt=N.json`): the attempts `granary
//! cancel` ended or held back, until `granary resume --cancelled` sends them round again.

use super::json::{read_json, write_json_retrying, RepositoryError};
use crate::domain::cancel::{CancelRecord, Cancelled};
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::layout::claims::{
    cancel_record_key, cancelled_key, cancelled_prefix, parse_claim_key,
};
use crate::ports::{ObjectStore, PutCondition, StoreError};

/// The cancelled list and the cancels' records, under the claim prefix.
#[derive(Clone, Copy)]
pub struct CancelledList<'a> {
    pub store: &'a dyn ObjectStore,
    pub claim_prefix: &'a str,
}

impl CancelledList<'_> {
    /// Writes a cancel's record (`claims/cancels/<id>.json`, overwriting the round before's):
    /// what it means to terminate and why.
    pub async fn record_cancel(self, record: &CancelRecord) -> Result<(), RepositoryError> {
        write_json_retrying(
            self.store,
            &cancel_record_key(self.claim_prefix, &record.id),
            record,
            PutCondition::Overwrite,
            "recording a cancel",
        )
        .await?;
        Ok(())
    }

    /// Lists `entry` (overwriting an earlier listing of the same attempt): the route of an end
    /// `granary cancel` made (the monitor), and of a next attempt it held back (the requeuer).
    pub async fn list(self, entry: &Cancelled) -> Result<(), RepositoryError> {
        let key = cancelled_key(
            self.claim_prefix,
            &GranuleProcessingEvent {
                granule_id: entry.granule_id.clone(),
                attempt: entry.attempt,
            },
        );
        write_json_retrying(
            self.store,
            &key,
            entry,
            PutCondition::Overwrite,
            "listing a cancelled attempt",
        )
        .await?;
        Ok(())
    }

    /// Every listed attempt, by granule.
    pub async fn listed(self) -> Result<Vec<Cancelled>, RepositoryError> {
        let prefix = cancelled_prefix(self.claim_prefix);
        let mut out = Vec::new();
        for meta in self.store.list(&prefix).await? {
            if parse_claim_key(&prefix, &meta.key).is_none() {
                continue;
            }
            if let Some(entry) = read_json::<Cancelled>(self.store, &meta.key).await? {
                out.push(entry.value);
            }
        }
        Ok(out)
    }

    /// Takes `attempt` off the list (one DELETE; nothing listed is nothing to do).
    pub async fn unlist(self, attempt: &GranuleProcessingEvent) -> Result<(), StoreError> {
        self.store
            .delete(&cancelled_key(self.claim_prefix, attempt))
            .await
    }
}
