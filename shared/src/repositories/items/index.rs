//! Reading items back: the in-flight index, queries over the records, an item's history and
//! the status of its steps.

use super::*;
use crate::domain::item_steps::{steps_of, StepQuery, StepStatus};

impl Items {
    /// Items the in-flight index lists, with the state the marker names.
    pub async fn inflight(&self) -> Result<Vec<(ItemState, GranuleId)>, RecordError> {
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
    pub async fn clear_inflight(
        &self,
        state: ItemState,
        id: &GranuleId,
    ) -> Result<(), RecordError> {
        self.store
            .delete(&inflight_key(&self.prefixes.inflight, state, id))
            .await?;
        Ok(())
    }

    /// Every record matching `query`, in id order. Reads every record: for millions of items,
    /// query the history with Athena instead.
    pub async fn find(&self, query: &ItemQuery) -> Result<Vec<ItemRecord>, RecordError> {
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

    /// An item's history in transition order: its history objects (and, for a record created
    /// with its window, the lines of the window's batch objects), then the entries its record
    /// holds ([`HistoryEntry::held_by`]) that no object has yet. Lists the whole history prefix:
    /// meant for the CLI and tests; at scale the Athena view `granary_item_transitions` answers
    /// the same question.
    pub async fn history(&self, id: &GranuleId) -> Result<Vec<HistoryEntry>, RecordError> {
        let suffix_start = format!("/{id}.");
        let mut out = Vec::new();
        let record = self.get(id).await?.map(|r| r.value);
        // A record created with its window names the batch objects holding its first entries.
        if let Some(batch) = record.as_ref().and_then(|r| r.history_batch.as_ref()) {
            for key in &batch.keys {
                let Some(object) = self.store.get(key).await? else {
                    continue;
                };
                for line in object.body.split(|b| *b == b'\n') {
                    if line.is_empty() {
                        continue;
                    }
                    let entry: HistoryEntry = serde_json::from_slice(line).map_err(|e| {
                        RecordError::Repository(RepositoryError::Corrupt {
                            key: key.clone(),
                            source: e,
                        })
                    })?;
                    if &entry.item_id == id {
                        out.push(entry);
                    }
                }
            }
        }
        for meta in self.store.list(&self.prefixes.history).await? {
            if !meta.key.contains(&suffix_start) || is_batch_history_key(&meta.key) {
                continue;
            }
            if let Some(v) = read_json::<HistoryEntry>(self.store.as_ref(), &meta.key).await? {
                if &v.value.item_id == id {
                    out.push(v.value);
                }
            }
        }
        if let Some(record) = record.filter(|r| !r.in_batch_state()) {
            let written: Vec<u32> = out.iter().map(|e| e.seq).collect();
            out.extend(
                HistoryEntry::held_by(&record)
                    .into_iter()
                    .filter(|e| !written.contains(&e.seq)),
            );
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    /// The steps (seed 001's status rows: a download attempt, the admission, a processing
    /// attempt) of the items `query` names, matching it, each item's oldest first. A query
    /// naming one item (by `item`, or by a step id) reads that item's history; any other reads
    /// every item's, one by one: meant for the CLI and tests, and at scale the Athena view
    /// `granary_item_steps` answers the same question.
    pub async fn steps(&self, query: &StepQuery) -> Result<Vec<StepStatus>, RecordError> {
        let ids: Vec<GranuleId> = match query.only_item() {
            Some(id) => vec![id],
            None => self
                .find(&ItemQuery::default())
                .await?
                .into_iter()
                .map(|r| r.id)
                .collect(),
        };
        let mut out = Vec::new();
        for id in ids {
            let history = self.history(&id).await?;
            let key = record_key(&self.prefixes.items, &id);
            out.extend(
                steps_of(&history, &key)
                    .into_iter()
                    .filter(|s| query.matches(s)),
            );
        }
        Ok(out)
    }
}
