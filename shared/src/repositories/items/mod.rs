//! The lifecycle engine: item records changed only by compare-and-swap, each transition appended
//! once to the history, and an in-flight index for the sweeper. Used by the importer steps and by
//! the backfill loop alike.
//!
//! A record holds the history entries of its latest write (the current state's, and those of a
//! multi-step write's earlier steps, [`ItemRecord::earlier_steps`]); they become history objects
//! when the record moves past them. An item's history is its objects and the entries its record
//! holds ([`Items::history`]). So the one atomic write, the record's, carries every entry it
//! makes: a crash after it loses none, nothing is ever owed to be repaired, and a record that
//! never moves again — a granule's end, most of a campaign's writes — costs no history PUT.
//!
//! Order of writes for a transition: (1) the entries the current record holds, with
//! If-None-Match, in transition order (idempotent: same keys and bodies if repeated), (2) the
//! in-flight marker when entering a timed state, (3) the record with If-Match — the lock; losing
//! it means re-read and re-decide, (4) the old marker's delete when leaving a timed state. The
//! change is the one record protocol ([`change_record`]) with the entries and the markers as its
//! followers.
//!
//! A window's creations ([`Items::create_batch`]) differ: their entries are lines of one object per
//! state for the whole window, written before the records (a record in its batch state holds
//! none of its own), and they get no in-flight marker (the window's open marker names them to
//! the sweeper).
//!
//! Rooms: [`create`] (one record, one moved along, a window's), [`advance`] (transitions and
//! the entries they move past), [`index`] (the in-flight index, queries, an item's history).

mod advance;
mod create;
mod index;
pub use create::BatchCalls;

use crate::domain::granule::GranuleId;
use crate::domain::item::{
    is_timed, Change, HistoryBatch, HistoryEntry, ItemQuery, ItemRecord, NewItem,
};
use crate::domain::layout::items::{
    batch_history_key, inflight_key, is_batch_history_key, record_key,
};
use crate::domain::lifecycle::ItemState;
use crate::ports::{ObjectStore, PutCondition, StoreError};
use crate::repositories::json::encode;
use crate::repositories::json::write_json_retrying;
use crate::repositories::json::{change_record, Changed, Followers, RecordAt, RecordError};
use crate::repositories::{read_json, write_json, RepositoryError, Versioned};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::sync::Arc;

/// Records looked for at once by [`Items::exist`], and how often each look is tried.
const EXISTENCE_LOOKS_AT_ONCE: usize = 16;
const EXISTENCE_TRIES: u32 = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemPrefixes {
    pub items: String,
    pub history: String,
    pub inflight: String,
}

impl Default for ItemPrefixes {
    fn default() -> Self {
        Self {
            items: "items/".into(),
            history: "history/".into(),
            inflight: "inflight/".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    New(ItemRecord),
    /// A record with this id exists already (a duplicate discovery): it is returned unchanged.
    Existing(ItemRecord),
}

/// The item store: records, history and in-flight index over the object-store port.
#[derive(Clone)]
pub struct Items {
    pub store: Arc<dyn ObjectStore>,
    pub prefixes: ItemPrefixes,
}

impl Items {
    pub fn new(store: Arc<dyn ObjectStore>, prefixes: ItemPrefixes) -> Self {
        Self { store, prefixes }
    }

    pub async fn get(&self, id: &GranuleId) -> Result<Option<Versioned<ItemRecord>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &record_key(&self.prefixes.items, id)).await?)
    }

    /// Which of `ids` have a record (one GET each, a few at a time, each retried within the
    /// run). A record that is there but unreadable counts as there.
    pub async fn exist(&self, ids: &[GranuleId]) -> Result<Vec<bool>, RecordError> {
        let looks: Vec<Result<bool, StoreError>> = futures::stream::iter(ids)
            .map(|id| async move {
                let key = record_key(&self.prefixes.items, id);
                // One look out of a window's thousand that stays refused would hold the whole
                // window back: more tries than a lone call gets (at 30% refused, ten in a row
                // happen once in 170,000 looks).
                crate::retry::again(
                    crate::retry::Backoff {
                        tries: EXISTENCE_TRIES,
                        ..crate::retry::Backoff::IN_RUN
                    },
                    "looking for an item record",
                    || async { Ok(self.store.get(&key).await?.is_some()) },
                    StoreError::is_transient,
                )
                .await
            })
            .buffered(EXISTENCE_LOOKS_AT_ONCE)
            .collect()
            .await;
        Ok(looks.into_iter().collect::<Result<_, _>>()?)
    }
}

/// `first`, then the record after each change in turn (each checked against the table).
fn along(
    first: ItemRecord,
    changes: &[Change],
    at: DateTime<Utc>,
    by: &str,
) -> Result<Vec<ItemRecord>, RecordError> {
    let mut steps = vec![first];
    for change in changes {
        // A change without a transition would rewrite the entry the record holds (its time
        // and author) after it may have been written as an object: every change here is one.
        if change.to.is_none() {
            return Err(RecordError::Illegal(format!(
                "item {}: a change without a transition ({})",
                steps[0].id, change.reason
            )));
        }
        let last = &steps[steps.len() - 1];
        let next = last
            .apply(change, at, by)
            .map_err(|e| RecordError::Illegal(format!("item {}: {e}", last.id)))?;
        steps.push(next);
    }
    Ok(steps)
}

/// The last of `steps` carrying the entries of the transitions before it that are new (past
/// `since`, the seq of the record they were applied to; all of them for a creation): the one
/// atomic write then holds every entry it makes.
fn holding(steps: &[ItemRecord], since: Option<u32>) -> ItemRecord {
    let mut last = steps[steps.len() - 1].clone();
    let mut seen = since;
    let mut earlier = Vec::new();
    for step in steps {
        if Some(step.seq) != seen && step.seq != last.seq {
            earlier.push(HistoryEntry::of(step));
        }
        seen = Some(step.seq);
    }
    if last.seq != since.unwrap_or(u32::MAX) {
        last.earlier_steps = earlier;
    }
    last
}

#[cfg(test)]
mod tests;
