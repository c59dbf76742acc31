//! Moving item records: one or several transitions in one write. The entries of a record's
//! latest write live in the record; they are written as history objects before it moves on.

use super::*;

impl Items {
    /// Reads the record, asks `decide` what to change, and writes the result with If-Match. On a
    /// lost race it re-reads and asks again, so `decide` must look only at the record it is given.
    pub async fn advance<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: F,
    ) -> Result<Changed<ItemRecord>, RecordError>
    where
        F: Fn(&ItemRecord) -> Option<Change>,
    {
        self.advance_steps(id, by, |r| decide(r).into_iter().collect())
            .await
    }

    /// The record as it stands (`None` without one). Nothing is owed by a record a writer left
    /// (its latest entries live in it), so a recovery that finds the work done only reads.
    pub async fn look(&self, id: &GranuleId) -> Result<Option<ItemRecord>, RecordError> {
        Ok(self.get(id).await?.map(|v| v.value))
    }

    /// Where the record stands, its state and processing attempt alone (`None` without one):
    /// for a reader that asks only that of every granule of a window (the reconciler), the
    /// rest of the record — its history entries, most of its bytes — is skipped, not built.
    pub async fn standing(&self, id: &GranuleId) -> Result<Option<Standing>, RecordError> {
        Ok(
            read_json::<Standing>(self.store.as_ref(), &record_key(&self.prefixes.items, id))
                .await?
                .map(|v| v.value),
        )
    }

    /// Like [`Items::advance`], for a decision of several transitions in a row (PROCESSING_FAILED
    /// → READY → PROCESSING on a retry): each is checked against the table and gets its history
    /// entry, and the record is written once. An empty decision means nothing to do.
    pub async fn advance_steps<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: F,
    ) -> Result<Changed<ItemRecord>, RecordError>
    where
        F: Fn(&ItemRecord) -> Vec<Change>,
    {
        // A refused read or write did nothing: the change is decided again on a fresh read
        // after a backoff (a write whose answer was lost reads back as already made).
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "advancing an item record",
            || self.advance_steps_once(id, by, &decide),
            RecordError::is_refused_call,
        )
        .await
    }

    async fn advance_steps_once<F>(
        &self,
        id: &GranuleId,
        by: &str,
        decide: &F,
    ) -> Result<Changed<ItemRecord>, RecordError>
    where
        F: Fn(&ItemRecord) -> Vec<Change>,
    {
        let key = record_key(&self.prefixes.items, id);
        let named = id.to_string();
        let at = RecordAt {
            key: &key,
            what: "item",
            id: &named,
        };
        let next = |current: &ItemRecord| {
            let changes = decide(current);
            if changes.is_empty() {
                return Ok(None);
            }
            // The time of each round: after a lost race the entries follow the winner's.
            let now = crate::clock::now();
            let steps = along(current.clone(), &changes, now, by)
                .map_err(crate::domain::machine::Refused::of)?;
            Ok(Some(holding(&steps, Some(current.seq))))
        };
        change_record(self.store.as_ref(), at, next, &ItemFollowers(self)).await
    }
    /// Writes the entries the record holds ([`HistoryEntry::held_by`]) as history objects, in
    /// order, before it moves past them. Each is `If-None-Match` under a key fixed by its
    /// sequence number, so writing twice (a mover that died after its entries, before its
    /// record) is a no-op; a refused write is tried again within the run.
    pub(super) async fn write_held(&self, record: &ItemRecord) -> Result<(), RecordError> {
        for entry in HistoryEntry::held_by(record) {
            let key = entry.key(&self.prefixes.history);
            self.write_entry(&key, &entry).await?;
        }
        Ok(())
    }

    /// One history entry, `If-None-Match` (one already there is kept).
    async fn write_entry(&self, key: &str, entry: &HistoryEntry) -> Result<(), RecordError> {
        let written = write_json_retrying(
            self.store.as_ref(),
            key,
            entry,
            PutCondition::IfAbsent,
            "writing a history entry",
        )
        .await;
        match written {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn mark_inflight(&self, record: &ItemRecord) -> Result<(), RecordError> {
        self.store
            .put(
                &inflight_key(&self.prefixes.inflight, record.state, &record.id),
                Bytes::new(),
                PutCondition::Overwrite,
            )
            .await?;
        Ok(())
    }
}

/// What an item record's change needs around its write (the order is the module's: the
/// entries the record moves past, the new marker, the record, the old marker's delete).
struct ItemFollowers<'a>(&'a Items);

impl Followers<ItemRecord> for ItemFollowers<'_> {
    async fn before(&self, current: &ItemRecord, next: &ItemRecord) -> Result<(), RecordError> {
        // Before the record moves on: once it moves, nothing else holds the entries of its
        // last write. (A record still in its batch state has them as lines of its window's
        // batch objects.)
        if !current.in_batch_state() && !crate::mutants::on("history-not-paid-before-moving") {
            self.0.write_held(current).await?;
        }
        if next.seq != current.seq && is_timed(next.state) {
            self.0.mark_inflight(next).await?;
        }
        Ok(())
    }

    async fn after(&self, current: &ItemRecord, next: &ItemRecord) -> Result<(), RecordError> {
        // The new record holds its own entries: nothing to write for them now.
        if next.seq == current.seq {
            return Ok(());
        }
        let left = current.state;
        if is_timed(left) && left != next.state && !current.in_batch_state() {
            let marker = inflight_key(&self.0.prefixes.inflight, left, &current.id);
            self.0.store.delete(&marker).await?;
        }
        Ok(())
    }
}
