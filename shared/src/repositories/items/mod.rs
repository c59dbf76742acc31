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
const EXISTENCE_BACKOFF: crate::retry::Backoff = crate::retry::Backoff {
    tries: 10,
    ..crate::retry::Backoff::IN_RUN
};

/// GETs that cost what one LIST page does (S3 prices a LIST as a PUT: 0.005 / 0.0004 = 12.5).
const GETS_A_LIST_PAGE_IS_WORTH: usize = crate::domain::cost::prices::GETS_A_LIST_IS_WORTH;

/// An item record's state and processing attempt, read without the rest ([`Items::standing`]):
/// the fields an [`ItemRecord`] writes under these names (its attempts are flattened into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct Standing {
    pub state: ItemState,
    pub processing: u32,
}

impl Standing {
    /// Whether the record has moved past this processing attempt: a later attempt, or this
    /// one's end. Every writer that moves a record there has logged and routed the attempt's end
    /// first (the monitor's handler, which the item sweeper's timeouts and the reconciler's
    /// recoveries go through; the requeuer moves only a routed attempt), so with item records
    /// this is the evidence that the end is handled: the reconciler's, and the monitor's for a
    /// failure log written with no `routed_at` (`monitor::log_and_route_failure`).
    pub fn past(&self, attempt: u32) -> bool {
        self.processing > attempt
            || (self.processing == attempt && self.state != ItemState::Processing)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemPrefixes {
    pub items: String,
    pub history: String,
    pub inflight: String,
}

impl Default for ItemPrefixes {
    fn default() -> Self {
        Self {
            items: crate::domain::layout::ITEM_PREFIX.into(),
            history: crate::domain::layout::HISTORY_PREFIX.into(),
            inflight: crate::domain::layout::INFLIGHT_PREFIX.into(),
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

    /// The objects listed under a product's key (one LIST): the product itself among them if it
    /// was made.
    pub async fn products_at(
        &self,
        key: &str,
    ) -> Result<Vec<crate::ports::ObjectMeta>, StoreError> {
        self.store.list(key).await
    }

    pub async fn get(&self, id: &GranuleId) -> Result<Option<Versioned<ItemRecord>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &record_key(&self.prefixes.items, id)).await?)
    }

    /// Which of `ids` have a record. The keys are looked for in key order with LIST pages
    /// (ListObjectsV2 from just before the next key sought: a page answers for up to 1,000
    /// keys, and a window of an inventory sorted by granule id is one range), while the pages
    /// cost less than GETs would: a LIST is priced as a PUT, $0.005 a thousand, a GET $0.0004
    /// (`domain::cost::prices`), so [`GETS_A_LIST_PAGE_IS_WORTH`] keys a page. Where records
    /// lie thick between the keys sought (an unsorted inventory over a campaign's records), the
    /// pages stop once they answer for fewer keys than that, and the rest are one GET each. A LIST sees every record written
    /// before it, as a GET does ("Amazon S3 data consistency model", S3 user guide). Each call
    /// is tried again within the run; a record that is there but unreadable counts as there.
    pub async fn exist(&self, ids: &[GranuleId]) -> Result<Vec<bool>, StoreError> {
        let mut sought: Vec<(String, usize)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (record_key(&self.prefixes.items, id), i))
            .collect();
        sought.sort_unstable();
        let mut found = vec![false; ids.len()];
        let listed = self
            .exist_by_listing(&sought, ids.len() / GETS_A_LIST_PAGE_IS_WORTH, &mut found)
            .await?;
        let looks: Vec<Result<(usize, bool), StoreError>> =
            // Owned keys: a closure over borrowed ones makes a future the compiler cannot prove
            // `Send` for every lifetime, as a boxed screen (`submission::Screen`) needs.
            futures::stream::iter(sought[listed..].iter().cloned())
                .map(|(key, i)| async move {
                    // One look out of a window's thousand that stays refused would hold the
                    // whole window back: more tries than a lone call gets (at 30% refused, ten
                    // in a row happen once in 170,000 looks).
                    let there = crate::retry::again(
                        EXISTENCE_BACKOFF,
                        "looking for an item record",
                        || async { Ok(self.store.get(&key).await?.is_some()) },
                        StoreError::is_transient,
                    )
                    .await?;
                    Ok((i, there))
                })
                .buffered(EXISTENCE_LOOKS_AT_ONCE)
                .collect()
                .await;
        for look in looks {
            let (i, there) = look?;
            found[i] = there;
        }
        Ok(found)
    }

    /// Settles `sought` (sorted keys, each with its place in `found`) from the front with at
    /// most `pages` LIST pages; returns how many it settled.
    async fn exist_by_listing(
        &self,
        sought: &[(String, usize)],
        pages: usize,
        found: &mut [bool],
    ) -> Result<usize, StoreError> {
        let mut settled = 0;
        let mut page_ended_at = String::new();
        for listed_pages in 0..pages {
            // Pages that answer for fewer keys than their price in GETs stop the listing (the
            // records between the keys sought are thick here: an inventory in no order).
            if settled < listed_pages * GETS_A_LIST_PAGE_IS_WORTH {
                break;
            }
            let Some((next, _)) = sought.get(settled) else {
                break;
            };
            // Just before the next key sought (it without its last character: keys between
            // the two only take a place on the page), or past the last page's end.
            let mut after = next.clone();
            after.pop();
            let after = after.max(std::mem::take(&mut page_ended_at));
            let page = crate::retry::again(
                EXISTENCE_BACKOFF,
                "listing item records",
                || self.store.list_page(&self.prefixes.items, &after),
                StoreError::is_transient,
            )
            .await?;
            let last = page.objects.last().map(|m| m.key.as_str());
            let mut listed = page.objects.iter().map(|m| m.key.as_str()).peekable();
            for (key, i) in &sought[settled..] {
                // Past the page's end, a truncated page says nothing.
                if page.truncated && last.is_none_or(|last| key.as_str() > last) {
                    break;
                }
                while listed.next_if(|k| *k < key.as_str()).is_some() {}
                found[*i] = listed.peek() == Some(&key.as_str());
                settled += 1;
            }
            match last {
                Some(last) if page.truncated => page_ended_at = last.to_owned(),
                _ => break,
            }
        }
        Ok(settled)
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
