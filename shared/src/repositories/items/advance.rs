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
    pub(super) fn owes_history(&self, record: &ItemRecord) -> bool {
        let age = Utc::now().signed_duration_since(record.last_updated);
        age.num_seconds() < HISTORY_REPAIR_WINDOW_SECS && !record.in_batch_state()
    }

    /// Pays what the record's writer may have left owed: every entry, each `If-None-Match` (a
    /// 412 when it is there). Not a GET to see whether it is there: a GET of a missing key
    /// without s3:ListBucket is a 403, not a 404 (S3 API reference, GetObject, "Permissions").
    pub(super) async fn pay_owed(&self, record: &ItemRecord) -> Result<(), ItemError> {
        if !self.owes_history(record) {
            return Ok(());
        }
        self.pay(record).await
    }

    /// Writes every entry the record's write owes ([`HistoryEntry::owed_by`]), in order. Each
    /// is `If-None-Match` under a key fixed by its sequence number, so paying twice is a no-op;
    /// a refused write is tried again within the run.
    pub(super) async fn pay(&self, record: &ItemRecord) -> Result<(), ItemError> {
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

    pub(super) async fn mark_inflight(&self, record: &ItemRecord) -> Result<(), ItemError> {
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
