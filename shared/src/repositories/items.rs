//! The lifecycle engine: item records changed only by compare-and-swap, each transition appended
//! once to the history, and an in-flight index for the sweeper. Used by the importer steps and by
//! the backfill loop alike.
//!
//! Order of writes for a transition: (1) the in-flight marker when entering a timed state,
//! (2) the record with If-Match — the lock; losing it means re-read and re-decide, (3) the history
//! entries with If-None-Match, in transition order, (4) the old marker's delete when leaving a
//! timed state. The record names every entry its write owes (the current state's, and those of a
//! multi-step write's earlier steps, [`ItemRecord::earlier_steps`]), so a crash after (2) loses
//! none: whoever next reads the record to change it, or to find nothing to do, pays them first
//! (idempotently, same keys and bodies), and the sweeper does so for stuck items.
//!
//! A window's creations ([`Items::create_batch`]) differ: their entries are lines of one object per
//! state for the whole window, written before the records (so none is ever owed), and they get no
//! in-flight marker (the window's open marker names them to the sweeper).

use crate::domain::granule::GranuleId;
use crate::domain::item::{
    is_timed, Change, HistoryBatch, HistoryEntry, ItemQuery, ItemRecord, NewItem,
};
use crate::domain::layout::items::{
    batch_history_key, inflight_key, is_batch_history_key, record_key,
};
use crate::domain::lifecycle::ItemState;
use crate::domain::machine::IllegalTransition;
use crate::ports::{ObjectStore, PutCondition, StoreError};
use crate::repositories::json::encode;
use crate::repositories::json::write_json_retrying;
use crate::repositories::{read_json, write_json, RepositoryError, Versioned};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::sync::Arc;

/// Records looked for at once by [`Items::exist`], and how often each look is tried.
const EXISTENCE_LOOKS_AT_ONCE: usize = 16;
const EXISTENCE_TRIES: u32 = 10;

/// How often a transition re-reads and re-decides after losing a race before giving up.
const MAX_CAS_ROUNDS: usize = 16;

/// A record changed this recently may still owe its history entries (its writer may have died
/// between the writes, and SQS redelivers within minutes): a no-op decision on it pays them.
/// Older records had their redeliveries long ago; paying again would cost a PUT per no-op. A
/// transition pays whatever the age: it is the last chance.
const HISTORY_REPAIR_WINDOW_SECS: i64 = 3600;

#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("item {id}: {source}")]
    Illegal {
        id: String,
        source: IllegalTransition<ItemState>,
    },
    #[error(transparent)]
    State(#[from] RepositoryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("item {0} changed {MAX_CAS_ROUNDS} times while we tried to update it; retry later")]
    Contended(String),
}

impl ItemError {
    /// A store call that failed in transit or for its rate, or a record others kept changing:
    /// worth another try later.
    pub fn is_transient(&self) -> bool {
        match self {
            ItemError::State(e) => e.is_transient(),
            ItemError::Store(e) => e.is_transient(),
            ItemError::Contended(_) => true,
            ItemError::Illegal { .. } => false,
        }
    }
}

/// What a batch creation does for one item.
enum Planned {
    /// No record yet: these steps, the last one written as the record.
    New(Vec<ItemRecord>),
    /// Made by this batch in an earlier run.
    Found(ItemRecord),
    /// Made otherwise, already as the batch would leave it.
    InStep(ItemRecord),
    /// A record made otherwise, or one that could not be read: the caller's one-by-one path.
    Left,
}

impl Planned {
    fn steps(&self) -> &[ItemRecord] {
        match self {
            Planned::New(steps) => steps,
            Planned::Found(_) | Planned::InStep(_) | Planned::Left => &[],
        }
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

    /// Which of `ids` have a record (one GET each, a few at a time, each retried within the
    /// run). A record that is there but unreadable counts as there.
    pub async fn exist(&self, ids: &[GranuleId]) -> Result<Vec<bool>, ItemError> {
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

    /// Creates the record unless one with its id exists (`If-None-Match: *`).
    pub async fn create(&self, new: NewItem, by: &str) -> Result<Created, ItemError> {
        let record = new.into_record(Utc::now(), by);
        if is_timed(record.state) {
            self.mark_inflight(&record).await?;
        }
        let key = record_key(&self.prefixes.items, &record.id);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            Ok(_) => {
                self.pay(&record).await?;
                Ok(Created::New(record))
            }
            Err(e) if e.is_conflict() => match self.get(&record.id).await? {
                Some(existing) => {
                    // Its creator may have died before the entry (a rerun finds it so).
                    self.pay_owed(&existing.value).await?;
                    Ok(Created::Existing(existing.value))
                }
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
        let steps = along(new.into_record(now, by), changes, now, by)?;
        let record = owing(&steps, None);
        if is_timed(record.state) {
            self.mark_inflight(&record).await?;
        }
        let key = record_key(&self.prefixes.items, &record.id);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            Ok(_) => {
                self.pay(&record).await?;
                Ok(Created::New(record))
            }
            Err(e) if e.is_conflict() => match self.get(&record.id).await? {
                Some(existing) => {
                    self.pay_owed(&existing.value).await?;
                    Ok(Created::Existing(existing.value))
                }
                None => Err(ItemError::Contended(record.id.to_string())),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Creates, together, the records of new items already moved along their changes — a
    /// window's granules, READY and submitted in one breath — with one conditional PUT each and
    /// their history entries as lines of one object per state entered
    /// ([`batch_history_key`] with `tag`), not an object per entry; no in-flight marker (the
    /// window's open marker stands for them). Items that have a record (or an unreadable one)
    /// are left out: `None` at their place, for the caller's one-by-one path — and so is an item
    /// whose read or write failed (a throttled call): one item's trouble must not fail the
    /// window's other records, or a large window under throttling would never be done.
    ///
    /// Order: the records are read first; the batch objects are written before any record, so
    /// a record that says its entries are in a batch is never without them. A crash in between
    /// leaves lines for records not yet made; the retry, at the same `tag` and `at`, finds the
    /// same items without records, writes the same lines (the objects exist: nothing changes)
    /// and makes the records, equal to the lines.
    pub async fn create_batch(
        &self,
        tag: &str,
        at: DateTime<Utc>,
        by: &str,
        new: Vec<(NewItem, Vec<Change>)>,
        concurrency: usize,
        in_step: impl Fn(&ItemRecord) -> bool,
    ) -> Result<Vec<Option<ItemRecord>>, ItemError> {
        let found: Vec<Result<Option<Versioned<ItemRecord>>, ItemError>> =
            futures::stream::iter(&new)
                .map(|(item, _)| {
                    crate::retry::again(
                        crate::retry::Backoff::IN_RUN,
                        "reading an item record",
                        || self.get(&item.id),
                        ItemError::is_transient,
                    )
                })
                .buffered(concurrency.max(1))
                .collect()
                .await;
        let mut made: Vec<Planned> = Vec::with_capacity(new.len());
        for ((item, changes), found) in new.into_iter().zip(found) {
            match found {
                Ok(None) => made.push(Planned::New(self.batch_steps(item, &changes, tag, at, by)?)),
                // Made by this very batch in an earlier run (it died, or a call after the
                // records failed): done, at no further cost. A window redone must not turn into
                // a conditional write per granule.
                Ok(Some(found)) if self.made_by_batch(&found.value, tag, at) => {
                    made.push(Planned::Found(found.value))
                }
                // Made otherwise and already in step (the one-by-one path of an earlier run):
                // it owes at most its own entry, paid here as the one-by-one path would.
                Ok(Some(found)) if in_step(&found.value) => made.push(Planned::InStep(found.value)),
                Ok(Some(_)) => made.push(Planned::Left),
                Err(e) => {
                    tracing::warn!(item_id = %item.id, error = %e, "cannot read this item's record; it is left to the one-by-one path");
                    made.push(Planned::Left)
                }
            }
        }
        let mut lines: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        for step in made.iter().flat_map(Planned::steps) {
            let entry = HistoryEntry::of(step);
            let key = batch_history_key(&self.prefixes.history, at, step.state, tag);
            let object = lines.entry(key).or_default();
            object.extend_from_slice(
                &encode("history entry", &entry).map_err(RepositoryError::from)?,
            );
            object.push(b'\n');
        }
        // Each batch object tried again on its own while refused: failing the whole creation for
        // one refused PUT made its caller read every record of the window again (1,000 granules
        // at 30% throttling: nine GETs a granule for the feeder instead of three).
        for (key, body) in lines {
            let body = Bytes::from(body);
            let written = crate::retry::again(
                crate::retry::Backoff::IN_RUN,
                "writing a window's history lines",
                || self.store.put(&key, body.clone(), PutCondition::IfAbsent),
                StoreError::is_transient,
            )
            .await;
            match written {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let created: Vec<Option<ItemRecord>> = futures::stream::iter(made)
            .map(|planned| async move {
                let record = match planned {
                    Planned::Found(record) => return Some(record),
                    Planned::InStep(record) => {
                        if let Err(e) = self.pay_owed(&record).await {
                            tracing::warn!(item_id = %record.id, error = %e, "history entry not paid; the item is left to the one-by-one path");
                            return None;
                        }
                        return Some(record);
                    }
                    Planned::Left => return None,
                    Planned::New(steps) => steps.last().cloned()?,
                };
                let key = record_key(&self.prefixes.items, &record.id);
                // A refused write did nothing: tried again. One whose answer was lost comes back
                // as a conflict and goes to the one-by-one path, which finds it.
                let written = write_json_retrying(
                    self.store.as_ref(),
                    &key,
                    &record,
                    PutCondition::IfAbsent,
                    "creating an item record",
                )
                .await;
                match written {
                    Ok(_) => Some(record),
                    // Made by someone else since we looked: theirs stands, the caller's
                    // one-by-one path takes the item.
                    Err(e) if e.is_conflict() => None,
                    // Perhaps made (an answer lost): the one-by-one path finds out.
                    Err(e) => {
                        tracing::warn!(item_id = %record.id, error = %e, "item record not made with its window; it is left to the one-by-one path");
                        None
                    }
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
        Ok(created)
    }

    /// Whether `record` was created by the batch `tag` at `at` (its first entries are lines of
    /// that batch's objects), whatever happened to it since.
    fn made_by_batch(&self, record: &ItemRecord, tag: &str, at: DateTime<Utc>) -> bool {
        record.history_batch.as_ref().is_some_and(|b| {
            b.keys.iter().any(|k| {
                ItemState::ALL
                    .iter()
                    .any(|s| *k == batch_history_key(&self.prefixes.history, at, *s, tag))
            })
        })
    }

    /// The records a batch creation writes: the new one, then one per change.
    fn batch_steps(
        &self,
        item: NewItem,
        changes: &[Change],
        tag: &str,
        at: DateTime<Utc>,
        by: &str,
    ) -> Result<Vec<ItemRecord>, ItemError> {
        let mut states = vec![item.state];
        states.extend(changes.iter().filter_map(|c| c.to));
        let mut keys: Vec<String> = states
            .iter()
            .map(|s| batch_history_key(&self.prefixes.history, at, *s, tag))
            .collect();
        keys.dedup();
        let mut first = item.into_record(at, by);
        first.history_batch = Some(HistoryBatch {
            keys,
            through_seq: (states.len() - 1) as u32,
        });
        along(first, changes, at, by)
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

    /// The record, as a handler that may act on it reads it: a recovery that finds the work done
    /// (a redelivery, a reconciler's pass) also pays the entries a dead writer owed, which no
    /// later transition would (a terminal record has none). `None` without a record.
    pub async fn look(&self, id: &GranuleId, by: &str) -> Result<Option<ItemRecord>, ItemError> {
        Ok(match self.advance_steps(id, by, |_| Vec::new()).await? {
            Advanced::Missing => None,
            Advanced::Unchanged(record) | Advanced::Moved(record) => Some(record),
        })
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
        // A refused read or write did nothing: the change is decided again on a fresh read
        // after a backoff (a write whose answer was lost reads back as already made).
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "advancing an item record",
            || self.advance_steps_once(id, by, &decide),
            |e: &ItemError| {
                matches!(e, ItemError::State(_) | ItemError::Store(_)) && e.is_transient()
            },
        )
        .await
    }

    async fn advance_steps_once<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: &F,
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
                // A redelivery finding nothing to do pays what a recent writer may owe.
                self.pay_owed(&current.value).await?;
                return Ok(Advanced::Unchanged(current.value));
            }
            // Before the record moves on, whatever its age: once it moves, nothing else names
            // the entries its last write owed (a record untouched for a day may still owe one).
            if !current.value.in_batch_state()
                && !crate::mutants::on("history-not-paid-before-moving")
            {
                self.pay(&current.value).await?;
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
            let next = owing(&steps, Some(current.value.seq));
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
                self.pay(&next).await?;
                let left = current.value.state;
                if is_timed(left) && left != next.state && !current.value.in_batch_state() {
                    self.store
                        .delete(&inflight_key(&self.prefixes.inflight, left, id))
                        .await?;
                }
            }
            return Ok(Advanced::Moved(next));
        }
        Err(ItemError::Contended(id.to_string()))
    }

    /// Whether a record may still owe entries: changed recently (its writer may have died
    /// between the record and its entries) and not in a batch state (whose entries come first).
    fn owes_history(&self, record: &ItemRecord) -> bool {
        let age = Utc::now().signed_duration_since(record.last_updated);
        age.num_seconds() < HISTORY_REPAIR_WINDOW_SECS && !record.in_batch_state()
    }

    /// Pays what the record's writer may have left owed: every entry, each `If-None-Match` (a
    /// 412 when it is there). Not a GET to see whether it is there: a GET of a missing key
    /// without s3:ListBucket is a 403, not a 404 (S3 API reference, GetObject, "Permissions").
    async fn pay_owed(&self, record: &ItemRecord) -> Result<(), ItemError> {
        if !self.owes_history(record) {
            return Ok(());
        }
        self.pay(record).await
    }

    /// Writes every entry the record's write owes ([`HistoryEntry::owed_by`]), in order. Each
    /// is `If-None-Match` under a key fixed by its sequence number, so paying twice is a no-op;
    /// a refused write is tried again within the run.
    async fn pay(&self, record: &ItemRecord) -> Result<(), ItemError> {
        for entry in HistoryEntry::owed_by(record) {
            let key = entry.key(&self.prefixes.history);
            let written = write_json_retrying(
                self.store.as_ref(),
                &key,
                &entry,
                PutCondition::IfAbsent,
                "writing a history entry",
            )
            .await;
            match written {
                Ok(_) => {}
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
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
        // A record created with its window names the batch objects holding its first entries.
        if let Some(batch) = self.get(id).await?.and_then(|r| r.value.history_batch) {
            for key in &batch.keys {
                let Some(object) = self.store.get(key).await? else {
                    continue;
                };
                for line in object.body.split(|b| *b == b'\n') {
                    if line.is_empty() {
                        continue;
                    }
                    let entry: HistoryEntry = serde_json::from_slice(line).map_err(|e| {
                        ItemError::State(RepositoryError::Corrupt {
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
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }
}

/// `first`, then the record after each change in turn (each checked against the table).
fn along(
    first: ItemRecord,
    changes: &[Change],
    at: DateTime<Utc>,
    by: &str,
) -> Result<Vec<ItemRecord>, ItemError> {
    let mut steps = vec![first];
    for change in changes {
        let last = &steps[steps.len() - 1];
        let next = last
            .apply(change, at, by)
            .map_err(|source| ItemError::Illegal {
                id: last.id.to_string(),
                source,
            })?;
        steps.push(next);
    }
    Ok(steps)
}

/// The last of `steps` carrying the entries of the transitions before it that are new (past
/// `since`, the seq of the record they were applied to; all of them for a creation): the one
/// atomic write then names everything its entries must say.
fn owing(steps: &[ItemRecord], since: Option<u32>) -> ItemRecord {
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

    fn submitted(job: &str) -> Vec<Change> {
        vec![Change {
            job_id: Some(job.into()),
            ..Change::to(Processing, "submitted")
        }]
    }

    #[tokio::test]
    async fn a_batch_creation_writes_a_record_each_and_one_history_object_per_state() {
        let store = Arc::new(MemoryStore::new());
        let items = Items::new(store.clone(), ItemPrefixes::default());
        let at = "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        items.create(new_item("old", Ready), "t").await.unwrap();
        let batch = |ids: &[&str]| -> Vec<(NewItem, Vec<Change>)> {
            ids.iter()
                .map(|id| (new_item(id, Ready), submitted(&format!("job-{id}"))))
                .collect()
        };
        let made = items
            .create_batch("w.1", at, "feeder", batch(&["a", "old", "b"]), 4, |_| false)
            .await
            .unwrap();
        assert_eq!(
            made.iter().map(Option::is_some).collect::<Vec<_>>(),
            vec![true, false, true],
            "the item with a record is left to the caller"
        );
        let objects: Vec<String> = store
            .list("history/")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .filter(|k| is_batch_history_key(k))
            .collect();
        assert_eq!(
            objects,
            vec![
                "history/date=2026-11-24/state=PROCESSING/_batch.w.1.jsonl",
                "history/date=2026-11-24/state=READY/_batch.w.1.jsonl"
            ]
        );
        assert!(
            items.inflight().await.unwrap().is_empty(),
            "no marker: the window's open marker stands for them"
        );
        let a = GranuleId::parse("a").unwrap();
        let record = items.get(&a).await.unwrap().unwrap().value;
        assert_eq!((record.state, record.seq), (Processing, 1));
        assert!(record.in_batch_state());
        let history = items.history(&a).await.unwrap();
        assert_eq!(
            history
                .iter()
                .map(|e| (e.seq, e.from, e.to))
                .collect::<Vec<_>>(),
            vec![(0, None, Ready), (1, Some(Ready), Processing)]
        );
        assert_eq!(
            history[1].record, record,
            "the line carries the record as written"
        );

        // A retry (the run died after the records) makes nothing and writes nothing new.
        let before = store.list("").await.unwrap().len();
        let again = items
            .create_batch("w.1", at, "feeder", batch(&["a", "b"]), 4, |_| false)
            .await
            .unwrap();
        assert!(
            again.iter().all(Option::is_some),
            "made by this batch before: done, with nothing written"
        );
        assert_eq!(store.list("").await.unwrap().len(), before);

        // A no-op decision owes nothing (the entry is a line); the next transition gets its own
        // object and leaves the batch state.
        items.advance(&a, "t", |_| None).await.unwrap();
        items
            .advance(&a, "monitor", |_| Some(Change::to(Processed, "done")))
            .await
            .unwrap();
        let history = items.history(&a).await.unwrap();
        assert_eq!(
            history.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(!items.get(&a).await.unwrap().unwrap().value.in_batch_state());
    }

    #[tokio::test]
    async fn a_batch_written_before_its_records_is_completed_by_the_retry() {
        let store = Arc::new(MemoryStore::new());
        let items = Items::new(store.clone(), ItemPrefixes::default());
        let at = "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let batch = vec![(new_item("a", Ready), submitted("job-a"))];
        items
            .create_batch("w.2", at, "feeder", batch.clone(), 1, |_| false)
            .await
            .unwrap();
        // As if the run had died after the batch objects: the record is gone, the lines stay.
        store.delete("items/a.json").await.unwrap();
        let made = items
            .create_batch("w.2", at, "feeder", batch, 1, |_| false)
            .await
            .unwrap();
        assert!(made[0].is_some());
        let a = GranuleId::parse("a").unwrap();
        let history = items.history(&a).await.unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(
            history[1].record,
            items.get(&a).await.unwrap().unwrap().value,
            "the retry's record equals the line the first run wrote"
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
            "item a: an item cannot go from DISCOVERED to PROCESSED"
        );
        assert_eq!(
            items.get(&id).await.unwrap().unwrap().value.state,
            Discovered
        );
    }

    /// The writer died after the record and before its entries (deleted here), and the next
    /// thing to happen to the item is another transition: the entries are paid first, the
    /// earlier steps of a multi-step write included, with the bodies the dead writer would have
    /// written.
    #[tokio::test]
    async fn entries_a_dead_writer_owed_are_paid_before_the_record_moves_on() {
        let store = Arc::new(MemoryStore::new());
        let items = Items::new(store.clone(), ItemPrefixes::default());
        let id = GranuleId::parse("a").unwrap();
        items.create(new_item("a", Ready), "t").await.unwrap();
        let step = |to: ItemState| move |_: &ItemRecord| vec![Change::to(to, "step")];
        items
            .advance_steps(&id, "t", step(Processing))
            .await
            .unwrap();
        items
            .advance_steps(&id, "t", step(ProcessingFailed))
            .await
            .unwrap();
        items
            .advance_steps(&id, "t", |_| {
                vec![
                    Change::to(Ready, "retry"),
                    Change::to(Processing, "submit 2"),
                ]
            })
            .await
            .unwrap();
        let before = items.history(&id).await.unwrap();
        assert_eq!(before.len(), 5);
        let lose = |seqs: &'static [u32]| {
            let store = store.clone();
            async move {
                for meta in store.list("history/").await.unwrap() {
                    if seqs
                        .iter()
                        .any(|s| meta.key.ends_with(&format!("/a.{s:05}.json")))
                    {
                        store.delete(&meta.key).await.unwrap();
                    }
                }
            }
        };
        lose(&[3, 4]).await;
        assert_eq!(items.history(&id).await.unwrap().len(), 3);
        items
            .advance_steps(&id, "t", step(Processed))
            .await
            .unwrap();
        let after = items.history(&id).await.unwrap();
        assert_eq!(
            after[..5],
            before[..],
            "the lost entries come back unchanged"
        );
        assert_eq!(after.len(), 6);
        // A single transition's entry, lost, then a no-op decision: paid too.
        lose(&[5]).await;
        assert_eq!(items.history(&id).await.unwrap().len(), 5);
        let none = items.advance_steps(&id, "t", |_| Vec::new()).await.unwrap();
        assert!(matches!(none, Advanced::Unchanged(_)));
        assert_eq!(items.history(&id).await.unwrap(), after);
        // The record names only the last write's earlier steps; its entries carry none.
        let record = items.get(&id).await.unwrap().unwrap().value;
        assert!(record.earlier_steps.is_empty());
        assert!(after.iter().all(|e| e.record.earlier_steps.is_empty()));
    }

    /// A record its writer left owing an entry, untouched for longer than the repair window
    /// (no redelivery came): the next transition still pays the entry before moving it on.
    #[tokio::test]
    async fn an_old_record_pays_its_entry_before_it_moves_on() {
        let store = Arc::new(MemoryStore::new());
        let items = Items::new(store.clone(), ItemPrefixes::default());
        let id = GranuleId::parse("a").unwrap();
        items.create(new_item("a", Discovered), "t").await.unwrap();
        items
            .advance(&id, "t", |_| Some(Change::to(Downloading, "go")))
            .await
            .unwrap();
        // As if the writer had died two hours ago between the record and its entry.
        let mut record = items.get(&id).await.unwrap().unwrap().value;
        record.last_updated -= chrono::Duration::hours(2);
        store
            .put(
                "items/a.json",
                Bytes::from(serde_json::to_vec(&record).unwrap()),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        for meta in store.list("history/").await.unwrap() {
            if meta.key.ends_with("/a.00001.json") {
                store.delete(&meta.key).await.unwrap();
            }
        }
        let none = items.advance(&id, "t", |_| None).await.unwrap();
        assert!(matches!(none, Advanced::Unchanged(_)));
        assert_eq!(
            items.history(&id).await.unwrap().len(),
            1,
            "a no-op past the window pays nothing"
        );
        items
            .advance(&id, "t", |_| Some(Change::to(Downloaded, "stored")))
            .await
            .unwrap();
        let seqs: Vec<u32> = items
            .history(&id)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn a_creation_along_changes_names_its_earlier_steps_until_the_next_transition() {
        let items = items();
        let id = GranuleId::parse("a").unwrap();
        let Created::New(r) = items
            .create_along(new_item("a", Ready), &submitted("job-a"), "t")
            .await
            .unwrap()
        else {
            panic!("must create");
        };
        let owed: Vec<u32> = r.earlier_steps.iter().map(|e| e.seq).collect();
        assert_eq!(owed, vec![0]);
        let moved = items
            .advance(&id, "t", |_| Some(Change::to(Processed, "ok")))
            .await
            .unwrap();
        assert!(moved.record().unwrap().earlier_steps.is_empty());
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
        assert!(err.to_string().contains("from PROCESSED to READY"), "{err}");
        assert_eq!(
            items.get(&id).await.unwrap().unwrap().value.state,
            Processing
        );
    }
}
