//! Moving item records: one or several transitions in one write, and the history entries
//! each write owes, paid before the record moves on.

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

    /// The record, as a handler that may act on it reads it: a recovery that finds the work done
    /// (a redelivery, a reconciler's pass) also pays the entries a dead writer owed, which no
    /// later transition would (a terminal record has none). `None` without a record.
    pub async fn look(&self, id: &GranuleId, by: &str) -> Result<Option<ItemRecord>, RecordError> {
        Ok(match self.advance_steps(id, by, |_| Vec::new()).await? {
            Changed::Missing => None,
            Changed::Unchanged(record) | Changed::Moved(record) => Some(record),
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
            let now = Utc::now();
            let steps = along(current.clone(), &changes, now, by).map_err(|e| e.to_string())?;
            Ok(Some(owing(&steps, Some(current.seq))))
        };
        change_record(self.store.as_ref(), at, next, &ItemFollowers(self)).await
    }
    /// Whether a record may still owe entries: changed recently (its writer may have died
    /// between the record and its entries) and not in a batch state (whose entries come first).
    pub(super) fn owes_history(&self, record: &ItemRecord) -> bool {
        let age = Utc::now().signed_duration_since(record.last_updated);
        age.num_seconds() < HISTORY_REPAIR_WINDOW_SECS && !record.in_batch_state()
    }

    /// Pays what the record's writer may have left owed. Here the entries are almost always
    /// there (the writer lived), so each is looked for with a GET first ($0.0004 a thousand)
    /// and written `If-None-Match` only when it is missing, instead of a PUT refused with 412
    /// that S3 bills as a PUT ($0.005 a thousand): the reconciler looks at every granule of a
    /// window once. A GET of a missing key needs s3:ListBucket to answer 404 rather than 403
    /// (S3 API Reference, GetObject, "Permissions"; the roles that look have it); a GET that
    /// fails for any reason falls back to the conditional PUT.
    pub(super) async fn pay_owed(&self, record: &ItemRecord) -> Result<(), RecordError> {
        if !self.owes_history(record) {
            return Ok(());
        }
        for entry in HistoryEntry::owed_by(record) {
            let key = entry.key(&self.prefixes.history);
            if !matches!(self.store.get(&key).await, Ok(Some(_))) {
                self.write_entry(&key, &entry).await?;
            }
        }
        Ok(())
    }

    /// Writes every entry the record's write owes ([`HistoryEntry::owed_by`]), in order. Each
    /// is `If-None-Match` under a key fixed by its sequence number, so paying twice is a no-op;
    /// a refused write is tried again within the run.
    pub(super) async fn pay(&self, record: &ItemRecord) -> Result<(), RecordError> {
        for entry in HistoryEntry::owed_by(record) {
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

/// What an item record's change owes (the order is the module's: marker, record, entries,
/// old marker's delete).
struct ItemFollowers<'a>(&'a Items);

impl Followers<ItemRecord> for ItemFollowers<'_> {
    async fn before(&self, current: &ItemRecord, next: &ItemRecord) -> Result<(), RecordError> {
        // Before the record moves on, whatever its age: once it moves, nothing else names the
        // entries its last write owed (a record untouched for a day may still owe one).
        if !current.in_batch_state() && !crate::mutants::on("history-not-paid-before-moving") {
            self.0.pay(current).await?;
        }
        if next.seq != current.seq && is_timed(next.state) {
            self.0.mark_inflight(next).await?;
        }
        Ok(())
    }

    async fn after(&self, current: &ItemRecord, next: &ItemRecord) -> Result<(), RecordError> {
        if next.seq == current.seq {
            return Ok(());
        }
        self.0.pay(next).await?;
        let left = current.state;
        if is_timed(left) && left != next.state && !current.in_batch_state() {
            let marker = inflight_key(&self.0.prefixes.inflight, left, &current.id);
            self.0.store.delete(&marker).await?;
        }
        Ok(())
    }

    /// A redelivery finding nothing to do pays what a recent writer may owe.
    async fn unchanged(&self, current: &ItemRecord) -> Result<(), RecordError> {
        self.0.pay_owed(current).await
    }
}
