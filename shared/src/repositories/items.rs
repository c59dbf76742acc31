//! The lifecycle engine: item records changed only by compare-and-swap, each transition appended
//! once to the history, and an in-flight index for the sweeper. Used by the importer steps and by
//! the backfill loop alike.
//!
//! Order of writes for a transition: (1) the in-flight marker when entering a timed state,
//! (2) the record with If-Match — the lock; losing it means re-read and re-decide, (3) the history
//! entry with If-None-Match, (4) the old marker's delete when leaving a timed state. A crash after
//! (2) leaves the history entry owed; whoever next finds nothing to do on that item writes it
//! (idempotently, same key and body), and the sweeper does so for stuck items.

use crate::domain::granule::GranuleId;
use crate::domain::item::{
    inflight_key, is_timed, record_key, Change, HistoryEntry, ItemQuery, ItemRecord, NewItem,
};
use crate::domain::lifecycle::{IllegalTransition, ItemState};
use crate::ports::{ObjectStore, PutCondition, StoreError};
use crate::repositories::{read_json, write_json, RepositoryError, Versioned};
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use std::sync::Arc;

/// How often a transition re-reads and re-decides after losing a race before giving up.
const MAX_CAS_ROUNDS: usize = 16;

/// A record changed this recently may still owe its history entry (its writer may have died
/// between the two writes, and SQS redelivers within minutes): a no-op decision on it pays the
/// entry. Older records had their redeliveries long ago; paying again would cost a PUT per no-op.
const HISTORY_REPAIR_WINDOW_SECS: i64 = 3600;

#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("item {id}: {source}")]
    Illegal {
        id: String,
        source: IllegalTransition,
    },
    #[error(transparent)]
    State(#[from] RepositoryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("item {0} changed {MAX_CAS_ROUNDS} times while we tried to update it; retry later")]
    Contended(String),
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advanced {
    Moved(ItemRecord),
    /// The decision, made on the current record, was to do nothing.
    Unchanged(ItemRecord),
    Missing,
}

impl Advanced {
    pub fn record(&self) -> Option<&ItemRecord> {
        match self {
            Advanced::Moved(r) | Advanced::Unchanged(r) => Some(r),
            Advanced::Missing => None,
        }
    }
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

    pub async fn get(&self, id: &GranuleId) -> Result<Option<Versioned<ItemRecord>>, ItemError> {
        Ok(read_json(self.store.as_ref(), &record_key(&self.prefixes.items, id)).await?)
    }

    /// Creates the record unless one with its id exists (`If-None-Match: *`).
    pub async fn create(&self, new: NewItem, by: &str) -> Result<Created, ItemError> {
        let record = new.into_record(Utc::now(), by);
        if is_timed(record.state) {
            self.mark_inflight(&record).await?;
        }
        let key = record_key(&self.prefixes.items, &record.id);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            Ok(_) => {
                self.write_history(&record).await?;
                Ok(Created::New(record))
            }
            Err(e) if e.is_conflict() => match self.get(&record.id).await? {
                Some(existing) => Ok(Created::Existing(existing.value)),
                // Deleted between our create and our read: an operator's doing; say so.
                None => Err(ItemError::Contended(record.id.to_string())),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the record already moved along `changes` (each checked against the table), with one
    /// conditional PUT, and writes a history entry for the creation and for each change. Used
    /// where the first transitions follow at once (a backfill granule is READY and submitted in
    /// the same breath). `Existing` when a record with the id exists: nothing is written.
    pub async fn create_along(
        &self,
        new: NewItem,
        changes: &[Change],
        by: &str,
    ) -> Result<Created, ItemError> {
        let now = Utc::now();
        let mut steps = vec![new.into_record(now, by)];
        for change in changes {
            let last = &steps[steps.len() - 1];
            let next = last
                .apply(change, now, by)
                .map_err(|source| ItemError::Illegal {
                    id: last.id.to_string(),
                    source,
                })?;
            steps.push(next);
        }
        let record = steps[steps.len() - 1].clone();
        if is_timed(record.state) {
            self.mark_inflight(&record).await?;
        }
        let key = record_key(&self.prefixes.items, &record.id);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            Ok(_) => {
                for step in &steps {
                    self.write_history(step).await?;
                }
                Ok(Created::New(record))
            }
            Err(e) if e.is_conflict() => match self.get(&record.id).await? {
                Some(existing) => Ok(Created::Existing(existing.value)),
                None => Err(ItemError::Contended(record.id.to_string())),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the record, asks `decide` what to change, and writes the result with If-Match. On a
    /// lost race it re-reads and asks again, so `decide` must look only at the record it is given.
    pub async fn advance<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: F,
    ) -> Result<Advanced, ItemError>
    where
        F: Fn(&ItemRecord) -> Option<Change>,
    {
        self.advance_steps(id, by, |r| decide(r).into_iter().collect())
            .await
    }

    /// Like [`Items::advance`], for a decision of several transitions in a row (PROCESSING_FAILED
    /// → READY → PROCESSING on a retry): each is checked against the table and gets its history
    /// entry, and the record is written once. An empty decision means nothing to do.
    pub async fn advance_steps<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: F,
    ) -> Result<Advanced, ItemError>
    where
        F: Fn(&ItemRecord) -> Vec<Change>,
    {
        let key = record_key(&self.prefixes.items, id);
        for _ in 0..MAX_CAS_ROUNDS {
            let Some(current) = self.get(id).await? else {
                return Ok(Advanced::Missing);
            };
            let changes = decide(&current.value);
            if changes.is_empty() {
                // Pay any history entry a crashed writer owed before reporting "nothing to do".
                let age = Utc::now().signed_duration_since(current.value.last_updated);
                if age.num_seconds() < HISTORY_REPAIR_WINDOW_SECS {
                    self.write_history(&current.value).await?;
                }
                return Ok(Advanced::Unchanged(current.value));
            }
            let now = Utc::now();
            let mut steps: Vec<ItemRecord> = Vec::with_capacity(changes.len());
            for change in &changes {
                let from = steps.last().unwrap_or(&current.value);
                let next = from
                    .apply(change, now, by)
                    .map_err(|source| ItemError::Illegal {
                        id: id.to_string(),
                        source,
                    })?;
                steps.push(next);
            }
            let next = steps[steps.len() - 1].clone();
            let moved = next.seq != current.value.seq;
            if moved && is_timed(next.state) {
                self.mark_inflight(&next).await?;
            }
            match write_json(self.store.as_ref(), &key, &next, current.condition()).await {
                Ok(_) => {}
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e.into()),
            }
            if moved {
                let mut seen = current.value.seq;
                for step in &steps {
                    if step.seq != seen {
                        self.write_history(step).await?;
                        seen = step.seq;
                    }
                }
                let left = current.value.state;
                if is_timed(left) && left != next.state {
                    self.store
                        .delete(&inflight_key(&self.prefixes.inflight, left, id))
                        .await?;
                }
            }
            return Ok(Advanced::Moved(next));
        }
        Err(ItemError::Contended(id.to_string()))
    }

    async fn write_history(&self, record: &ItemRecord) -> Result<(), ItemError> {
        let entry = HistoryEntry::of(record);
        match write_json(
            self.store.as_ref(),
            &entry.key(&self.prefixes.history),
            &entry,
            PutCondition::IfAbsent,
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn mark_inflight(&self, record: &ItemRecord) -> Result<(), ItemError> {
        self.store
            .put(
                &inflight_key(&self.prefixes.inflight, record.state, &record.id),
                Bytes::new(),
                PutCondition::Overwrite,
            )
            .await?;
        Ok(())
    }

    /// Items the in-flight index lists, with the state the marker names.
    pub async fn inflight(&self) -> Result<Vec<(ItemState, GranuleId)>, ItemError> {
        let prefix = &self.prefixes.inflight;
        let mut out = Vec::new();
        for meta in self.store.list(prefix).await? {
            let rest = &meta.key[prefix.len()..];
            let parsed = rest.split_once('/').and_then(|(state, id)| {
                Some((state.parse::<ItemState>().ok()?, GranuleId::parse(id).ok()?))
            });
            match parsed {
                Some(p) => out.push(p),
                None => tracing::warn!(key = meta.key, "foreign object in the in-flight index"),
            }
        }
        Ok(out)
    }

    /// Removes a marker the record no longer justifies (the item left the state, or is gone).
    pub async fn clear_inflight(&self, state: ItemState, id: &GranuleId) -> Result<(), ItemError> {
        self.store
            .delete(&inflight_key(&self.prefixes.inflight, state, id))
            .await?;
        Ok(())
    }

    /// Every record matching `query`, in id order. Reads every record: for millions of items,
    /// query the history with Athena instead.
    pub async fn find(&self, query: &ItemQuery) -> Result<Vec<ItemRecord>, ItemError> {
        let keys: Vec<String> = self
            .store
            .list(&self.prefixes.items)
            .await?
            .into_iter()
            .map(|m| m.key)
            .filter(|k| k.ends_with(".json"))
            .collect();
        let store = self.store.clone();
        let records: Vec<Result<Option<Versioned<ItemRecord>>, RepositoryError>> =
            futures::stream::iter(keys)
                .map(|k| {
                    let store = store.clone();
                    async move { read_json::<ItemRecord>(store.as_ref(), &k).await }
                })
                .buffered(32)
                .collect()
                .await;
        let mut out = Vec::new();
        for r in records {
            if let Some(v) = r? {
                if query.matches(&v.value) {
                    out.push(v.value);
                }
            }
        }
        Ok(out)
    }

    /// An item's history in transition order. Lists the whole history prefix: meant for the CLI
    /// and tests; at scale the Athena history table answers the same question.
    pub async fn history(&self, id: &GranuleId) -> Result<Vec<HistoryEntry>, ItemError> {
        let suffix_start = format!("/{id}.");
        let mut out = Vec::new();
        for meta in self.store.list(&self.prefixes.history).await? {
            if !meta.key.contains(&suffix_start) {
                continue;
            }
            if let Some(v) = read_json::<HistoryEntry>(self.store.as_ref(), &meta.key).await? {
                if &v.value.item_id == id {
                    out.push(v.value);
                }
            }
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use ItemState::*;

    fn items() -> Items {
        Items::new(Arc::new(MemoryStore::new()), ItemPrefixes::default())
    }

    fn new_item(id: &str, state: ItemState) -> NewItem {
        NewItem {
            id: GranuleId::parse(id).unwrap(),
            name: id.into(),
            state,
            reason: "test".into(),
            raw_file_hash: None,
            size: None,
            checksum: None,
            source: None,
            source_modified: None,
        }
    }

    #[tokio::test]
    async fn a_second_create_returns_the_existing_record_untouched() {
        let items = items();
        let Created::New(first) = items.create(new_item("a", Discovered), "t").await.unwrap()
        else {
            panic!("first create must create");
        };
        let second = items.create(new_item("a", Ready), "t").await.unwrap();
        assert_eq!(second, Created::Existing(first));
        assert_eq!(
            items
                .history(&GranuleId::parse("a").unwrap())
                .await
                .unwrap()
                .len(),
            1
        );
    }

    #[tokio::test]
    async fn timed_states_are_indexed_while_the_item_is_in_them() {
        let items = items();
        let id = GranuleId::parse("a").unwrap();
        items.create(new_item("a", Ready), "t").await.unwrap();
        items
            .advance(&id, "t", |_| Some(Change::to(Processing, "go")))
            .await
            .unwrap();
        assert_eq!(
            items.inflight().await.unwrap(),
            vec![(Processing, id.clone())]
        );
        items
            .advance(&id, "t", |_| Some(Change::to(Processed, "ok")))
            .await
            .unwrap();
        assert!(items.inflight().await.unwrap().is_empty());
        let h = items.history(&id).await.unwrap();
        let path: Vec<_> = h.iter().map(|e| (e.from, e.to)).collect();
        assert_eq!(
            path,
            vec![
                (None, Ready),
                (Some(Ready), Processing),
                (Some(Processing), Processed)
            ]
        );
    }

    #[tokio::test]
    async fn an_illegal_decision_is_an_error_and_changes_nothing() {
        let items = items();
        let id = GranuleId::parse("a").unwrap();
        items.create(new_item("a", Discovered), "t").await.unwrap();
        let err = items
            .advance(&id, "t", |_| Some(Change::to(Processed, "?")))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "item a: illegal item transition DISCOVERED → PROCESSED"
        );
        assert_eq!(
            items.get(&id).await.unwrap().unwrap().value.state,
            Discovered
        );
    }

    #[tokio::test]
    async fn several_steps_are_one_write_with_a_history_entry_each() {
        let items = items();
        let id = GranuleId::parse("a").unwrap();
        items.create(new_item("a", Ready), "t").await.unwrap();
        items
            .advance(&id, "t", |_| Some(Change::to(Processing, "submit 1")))
            .await
            .unwrap();
        items
            .advance(&id, "t", |_| Some(Change::to(ProcessingFailed, "spot")))
            .await
            .unwrap();
        let retry = |r: &ItemRecord| {
            if r.state == ProcessingFailed {
                vec![
                    Change::to(Ready, "retry"),
                    Change::to(Processing, "submit 2"),
                ]
            } else {
                Vec::new()
            }
        };
        let out = items.advance_steps(&id, "t", retry).await.unwrap();
        let r = out.record().unwrap();
        assert_eq!((r.state, r.seq, r.attempts.processing), (Processing, 4, 2));
        // again: nothing to do, nothing written twice
        let again = items.advance_steps(&id, "t", retry).await.unwrap();
        assert!(matches!(again, Advanced::Unchanged(_)));
        let path: Vec<_> = items
            .history(&id)
            .await
            .unwrap()
            .iter()
            .map(|e| (e.seq, e.to))
            .collect();
        assert_eq!(
            path,
            vec![
                (0, Ready),
                (1, Processing),
                (2, ProcessingFailed),
                (3, Ready),
                (4, Processing)
            ]
        );
        // an illegal step anywhere refuses the whole decision
        let err = items
            .advance_steps(&id, "t", |_| {
                vec![Change::to(Processed, "ok"), Change::to(Ready, "?")]
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("PROCESSED → READY"), "{err}");
        assert_eq!(
            items.get(&id).await.unwrap().unwrap().value.state,
            Processing
        );
    }
}
