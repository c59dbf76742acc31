//! Creating item records: one, one moved along its first changes, a window's together.

use super::*;

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

/// How a batch creation makes its calls.
#[derive(Debug, Clone, Copy)]
pub struct BatchCalls {
    /// Reads and writes in flight at once.
    pub at_once: usize,
    /// The caller looked for these records just before and found none: they are not read again.
    pub known_absent: bool,
}

impl Items {
    /// Creates the record unless one with its id exists (`If-None-Match: *`).
    pub async fn create(&self, new: NewItem, by: &str) -> Result<Created, RecordError> {
        self.create_along(new, &[], by).await
    }

    /// Creates the record already moved along `changes` (each checked against the table), with one
    /// conditional PUT; the record holds the history entries of the creation and of each change
    /// until it moves on ([`HistoryEntry::held_by`]). Used
    /// where the first transitions follow at once (a backfill granule is READY and submitted in
    /// the same breath). `Existing` when a record with the id exists: nothing is written.
    pub async fn create_along(
        &self,
        new: NewItem,
        changes: &[Change],
        by: &str,
    ) -> Result<Created, RecordError> {
        let now = crate::clock::now();
        let steps = along(new.into_record(now, by), changes, now, by)?;
        let record = holding(&steps, None);
        if is_timed(record.state) {
            self.mark_inflight(&record).await?;
        }
        let key = record_key(&self.prefixes.items, &record.id);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            // The record holds the entries of its creation and changes until it moves on.
            Ok(_) => Ok(Created::New(record)),
            Err(e) if e.is_conflict() => match self.get(&record.id).await? {
                Some(existing) => Ok(Created::Existing(existing.value)),
                // Deleted between our create and our read: an operator's doing; say so.
                None => Err(RecordError::Contended {
                    what: "item",
                    id: record.id.to_string(),
                }),
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
    /// `known_absent`: the caller looked for these records just before (the feeder's
    /// known-granule check of a window it claims now) and found none, so they are not read again;
    /// one made since is only a refused PUT and the one-by-one path. Otherwise each is read first
    /// (a window redone after a crash finds its earlier run's records at no PUT).
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
        calls: BatchCalls,
        in_step: impl Fn(&ItemRecord) -> bool,
    ) -> Result<Vec<Option<ItemRecord>>, RecordError> {
        let BatchCalls {
            at_once: concurrency,
            known_absent,
        } = calls;
        let found = self.read_existing(&new, concurrency, known_absent).await;
        let mut made: Vec<Planned> = Vec::with_capacity(new.len());
        for ((item, changes), found) in new.into_iter().zip(found) {
            made.push(self.plan(item, &changes, found, (tag, at, by), &in_step)?);
        }
        // The batch objects before any record: a record that says its entries are in a batch
        // is never without them.
        self.write_batch_lines(&made, tag, at).await?;
        Ok(self.write_records(made, concurrency).await)
    }

    /// Each new item's record as it stands, unless the caller has just found none.
    async fn read_existing(
        &self,
        new: &[(NewItem, Vec<Change>)],
        concurrency: usize,
        known_absent: bool,
    ) -> Vec<Result<Option<Versioned<ItemRecord>>, RecordError>> {
        if known_absent {
            return new.iter().map(|_| Ok(None)).collect();
        }
        futures::stream::iter(new)
            .map(|(item, _)| {
                crate::retry::again(
                    crate::retry::Backoff::IN_RUN,
                    "reading an item record",
                    || self.get(&item.id),
                    RecordError::is_transient,
                )
            })
            .buffered(concurrency.max(1))
            .collect()
            .await
    }

    /// What the batch does for one item, given the record found for it.
    fn plan(
        &self,
        item: NewItem,
        changes: &[Change],
        found: Result<Option<Versioned<ItemRecord>>, RecordError>,
        (tag, at, by): (&str, DateTime<Utc>, &str),
        in_step: &impl Fn(&ItemRecord) -> bool,
    ) -> Result<Planned, RecordError> {
        Ok(match found {
            Ok(None) => Planned::New(self.batch_steps(item, changes, tag, at, by)?),
            // Made by this very batch in an earlier run (it died, or a call after the records
            // failed): done, at no further cost. A window redone must not turn into a
            // conditional write per granule.
            Ok(Some(found)) if self.made_by_batch(&found.value, tag, at) => {
                Planned::Found(found.value)
            }
            // Made otherwise and already in step (the one-by-one path of an earlier run): it
            // holds its own entries.
            Ok(Some(found)) if in_step(&found.value) => Planned::InStep(found.value),
            Ok(Some(_)) => Planned::Left,
            Err(e) => {
                tracing::warn!(item_id = %item.id, error = %e, "cannot read this item's record; it is left to the one-by-one path");
                Planned::Left
            }
        })
    }

    /// The history lines of every planned step, one object a state (If-None-Match).
    async fn write_batch_lines(
        &self,
        made: &[Planned],
        tag: &str,
        at: DateTime<Utc>,
    ) -> Result<(), RecordError> {
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
        Ok(())
    }

    /// The records of the new items, made at once (If-None-Match); `None` where the one-by-one
    /// path must take the item.
    async fn write_records(
        &self,
        made: Vec<Planned>,
        concurrency: usize,
    ) -> Vec<Option<ItemRecord>> {
        futures::stream::iter(made)
            .map(|planned| async move {
                let record = match planned {
                    Planned::Found(record) => return Some(record),
                    Planned::InStep(record) => return Some(record),
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
            .await
    }

    /// Whether `record` was created by the batch `tag` at `at` (its first entries are lines of
    /// that batch's objects), whatever happened to it since.
    pub(super) fn made_by_batch(&self, record: &ItemRecord, tag: &str, at: DateTime<Utc>) -> bool {
        record.history_batch.as_ref().is_some_and(|b| {
            b.keys.iter().any(|k| {
                ItemState::ALL
                    .iter()
                    .any(|s| *k == batch_history_key(&self.prefixes.history, at, *s, tag))
            })
        })
    }

    /// The records a batch creation writes: the new one, then one per change.
    pub(super) fn batch_steps(
        &self,
        item: NewItem,
        changes: &[Change],
        tag: &str,
        at: DateTime<Utc>,
        by: &str,
    ) -> Result<Vec<ItemRecord>, RecordError> {
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
}
