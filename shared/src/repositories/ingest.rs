//! The ingest queue's records and indexes over the object store (layout: `domain::ingest::index`).
//!
//! A change to a job is written in the design's order — the job record first (If-Match: that is
//! the lock), then the indexes — with one deliberate difference inside the index update: the new
//! marker is created *before* the old one is deleted. The design deletes first; a crash between
//! its two steps would leave a job with no marker at all, which nothing lists and so nothing
//! repairs. Created first, a crash leaves a job listed twice at worst, and whoever lists the
//! stale marker reads the record, sees it has moved, and repairs both indexes
//! ([`Ingest::claim_listed`]). So for every job, the marker of the state its record names exists
//! once the record is written and the next handler has looked.

pub use super::json::Changed;
use super::json::{
    change_record, read_json, record_names, write_json, Markers, RecordAt, RecordError, Versioned,
};
use crate::domain::ingest::batch::BatchState;
use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::job::{BatchGroup, JobState};
use crate::domain::ingest::record::{BatchRecord, JobRecord};
use crate::domain::layout::ingest::IngestKeys;
use crate::domain::machine::Refused;
use crate::ports::{ObjectStore, PutCondition, StoreError};
use bytes::Bytes;
use std::sync::Arc;

/// Whether a batch's change moves its marker before its record: when it leaves a state no tick
/// scans (see [`Ingest::change_batch`]).
fn batch_markers_first(from: BatchState, to: BatchState) -> bool {
    !from.is_scanned()
        && to != from
        && to != BatchState::Deleted
        && !crate::mutants::on("ingest-record-before-markers-leaving-an-end")
}

/// Whether a job's change moves its markers before its record: when it leaves an ended state,
/// which no tick scans (see [`Ingest::change_job`]).
fn job_markers_first(from: JobState, to: JobState) -> bool {
    from.has_ended()
        && to != from
        && to != JobState::Deleted
        && !crate::mutants::on("ingest-record-before-markers-leaving-an-end")
}

#[derive(Clone)]
pub struct Ingest {
    store: Arc<dyn ObjectStore>,
    pub keys: IngestKeys,
}

impl Ingest {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            keys: IngestKeys::new(prefix),
        }
    }

    /// What the jobs store beside their records, over the same store.
    pub fn files(&self) -> super::ingest_files::IngestFiles {
        super::ingest_files::IngestFiles::new(self.store.clone())
    }

    // ---- batches ----

    /// Creates the batch unless it exists; returns the stored one either way. Its state marker is
    /// put first: a crash after the record cannot leave a batch no step lists (a marker whose
    /// record never came is skipped by the listers).
    pub async fn create_batch(&self, record: &BatchRecord) -> Result<BatchRecord, RecordError> {
        let key = self.keys.batch(&record.id);
        self.marker(&self.keys.batch_state(record.state, &record.id))
            .await?;
        match write_json(self.store.as_ref(), &key, record, PutCondition::IfAbsent).await {
            Ok(_) => Ok(record.clone()),
            Err(e) if e.is_conflict() => match self.batch(&record.id).await? {
                Some(existing) => Ok(existing.value),
                None => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// The batches whose records say `state`, oldest first, from the batch queue's index. A
    /// marker its record contradicts (a crash between the record and the index) is repaired on
    /// the way; a marker with no record yet (a submission under way, or one that died before its
    /// record) is skipped.
    pub async fn batches_in(&self, state: BatchState) -> Result<Vec<BatchRecord>, RecordError> {
        let prefix = self.keys.batch_states(state);
        let mut ids: Vec<BatchId> = self
            .store
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|m| BatchId::parse(m.key.strip_prefix(&prefix)?).ok())
            .collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids {
            let Some(record) = self.batch(&id).await? else {
                continue;
            };
            let record = record.value;
            if record.state == state {
                out.push(record);
                continue;
            }
            tracing::warn!(batch = %id, listed = %state, is = %record.state, "stale batch-queue marker repaired");
            if record.state != BatchState::Deleted {
                self.marker(&self.keys.batch_state(record.state, &id))
                    .await?;
            }
            self.store
                .delete(&self.keys.batch_state(state, &id))
                .await?;
        }
        Ok(out)
    }

    pub async fn batch(&self, id: &BatchId) -> Result<Option<Versioned<BatchRecord>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &self.keys.batch(id)).await?)
    }

    /// Every batch id, oldest first (ids sort by submission time).
    pub async fn batch_ids(&self) -> Result<Vec<BatchId>, RecordError> {
        let names = record_names(self.store.as_ref(), &self.keys.batches()).await?;
        Ok(names
            .iter()
            .filter_map(|n| BatchId::parse(n).ok())
            .collect())
    }

    /// Reads the batch, asks `decide` for the next record, writes it with If-Match.
    pub async fn change_batch<F>(
        &self,
        id: &BatchId,
        decide: F,
    ) -> Result<Changed<BatchRecord>, RecordError>
    where
        F: Fn(&BatchRecord) -> Result<Option<BatchRecord>, Refused>,
    {
        let key = self.keys.batch(id);
        let named = id.to_string();
        let at = RecordAt {
            key: &key,
            what: "batch",
            id: &named,
        };
        // As for jobs ([`Ingest::change_job`]): a batch leaving a state no tick scans (an
        // operator's update report of a failed batch) has its marker moved before its record.
        let first = |b: &BatchRecord, a: &BatchRecord| batch_markers_first(b.state, a.state);
        let move_marker = |b: &BatchRecord, a: &BatchRecord| {
            let (from, to) = (b.state, a.state);
            async move { self.move_batch_marker(id, from, to).await }
        };
        let markers = Markers {
            first,
            moving: move_marker,
        };
        change_record(self.store.as_ref(), at, decide, &markers).await
    }

    /// A batch's queue marker moved from `from` to `to`: the new one put, then the old removed.
    async fn move_batch_marker(
        &self,
        id: &BatchId,
        from: BatchState,
        to: BatchState,
    ) -> Result<(), crate::ports::StoreError> {
        if to == from {
            return Ok(());
        }
        if to != BatchState::Deleted {
            self.store
                .put(
                    &self.keys.batch_state(to, id),
                    Bytes::new(),
                    PutCondition::Overwrite,
                )
                .await?;
        }
        self.store.delete(&self.keys.batch_state(from, id)).await
    }

    /// The jobs the batch's own index lists under `group`.
    pub async fn batch_jobs(
        &self,
        id: &BatchId,
        group: BatchGroup,
    ) -> Result<Vec<JobId>, RecordError> {
        let prefix = self.keys.batch_groups(id, group);
        Ok(self
            .store
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|m| JobId::parse(m.key.strip_prefix(&prefix)?).ok())
            .collect())
    }

    /// Every job the batch's index lists, read from its record, the index repaired on the way:
    /// a job listed in a group its record contradicts (a crash between creating the new group
    /// marker and deleting the old one) gets the right marker and loses the stale one. A marker
    /// whose record is gone is removed.
    pub async fn batch_job_records(&self, id: &BatchId) -> Result<Vec<JobRecord>, RecordError> {
        let mut out: Vec<JobRecord> = Vec::new();
        for group in BatchGroup::ALL {
            for jid in self.batch_jobs(id, group).await? {
                let marker = self.keys.batch_group(id, group, &jid);
                let Some(record) = self.job(&jid).await? else {
                    self.store.delete(&marker).await?;
                    continue;
                };
                let record = record.value;
                if BatchGroup::of(record.state) != Some(group) {
                    tracing::warn!(job = %jid, listed = group.as_str(), is = %record.state, "stale batch index marker repaired");
                    self.index(&record).await?;
                    self.store.delete(&marker).await?;
                }
                if !out.iter().any(|r| r.id == record.id) {
                    out.push(record);
                }
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    // ---- jobs ----

    /// Creates the job unless it exists, then makes sure both indexes list it as its record says
    /// (a creator that died between the record and the indexes is repaired by the next run).
    pub async fn create_job(&self, record: &JobRecord) -> Result<JobRecord, RecordError> {
        let key = self.keys.job(&record.id);
        let stored =
            match write_json(self.store.as_ref(), &key, record, PutCondition::IfAbsent).await {
                Ok(_) => record.clone(),
                Err(e) if e.is_conflict() => match self.job(&record.id).await? {
                    Some(existing) => existing.value,
                    None => return Err(e.into()),
                },
                Err(e) => return Err(e.into()),
            };
        self.index(&stored).await?;
        Ok(stored)
    }

    pub async fn job(&self, id: &JobId) -> Result<Option<Versioned<JobRecord>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &self.keys.job(id)).await?)
    }

    /// Reads the job, asks `decide` for the next record (a transition made with
    /// `JobRecord::moved`, or a change of priority or estimate), writes it with If-Match, then
    /// moves its index markers.
    pub async fn change_job<F>(
        &self,
        id: &JobId,
        decide: F,
    ) -> Result<Changed<JobRecord>, RecordError>
    where
        F: Fn(&JobRecord) -> Result<Option<JobRecord>, Refused>,
    {
        let key = self.keys.job(id);
        let named = id.to_string();
        let at = RecordAt {
            key: &key,
            what: "job",
            id: &named,
        };
        // Usually the record comes first, then its markers: a crash in between leaves the old
        // state's marker, and the tick's scan of that state repairs it. A job leaving a state no
        // tick scans (an operator's resume of a failed job) would be left a live record no marker
        // names, which nothing would ever move: its markers move first, and a crash before the
        // record leaves a marker of the new state, whose scan finds the record still in the old
        // one and puts that state's marker back (the operator's command failed: run it again).
        let first = |b: &JobRecord, a: &JobRecord| job_markers_first(b.state, a.state);
        let move_markers = |b: &JobRecord, a: &JobRecord| {
            let (before, after) = (b.clone(), a.clone());
            async move {
                self.index(&after).await?;
                self.unindex(&before, &after).await
            }
        };
        let markers = Markers {
            first,
            moving: move_markers,
        };
        change_record(self.store.as_ref(), at, decide, &markers).await
    }

    /// Puts the markers `record` needs (idempotent: empty objects, overwritten).
    async fn index(&self, record: &JobRecord) -> Result<(), crate::ports::StoreError> {
        let mut keys = Vec::with_capacity(2);
        if record.state != JobState::Deleted {
            keys.push(
                self.keys
                    .job_state(record.state, record.priority, &record.id),
            );
        }
        if let Some(group) = BatchGroup::of(record.state) {
            keys.push(self.keys.batch_group(&record.batch, group, &record.id));
        }
        for key in keys {
            self.store
                .put(&key, Bytes::new(), PutCondition::Overwrite)
                .await?;
        }
        Ok(())
    }

    /// Puts the markers the job's record says it needs and removes every other marker of the
    /// job (each state, each batch group): for a command run again after one that died between
    /// the record and its markers, when the record already says what the command wants. Only for
    /// a record no one moves any more (deleted): for a live one, a move landing between the read
    /// and these deletes would lose its new marker, which is why the listers' repair
    /// ([`Ingest::claim_listed`]) removes only the marker it found stale.
    pub async fn reindex(&self, record: &JobRecord) -> Result<(), RecordError> {
        self.index(record).await?;
        for state in JobState::ALL {
            if state != record.state {
                self.store
                    .delete(&self.keys.job_state(state, record.priority, &record.id))
                    .await?;
            }
        }
        for group in BatchGroup::ALL {
            if BatchGroup::of(record.state) != Some(group) {
                self.store
                    .delete(&self.keys.batch_group(&record.batch, group, &record.id))
                    .await?;
            }
        }
        Ok(())
    }

    /// Removes the markers `old` had that `new` does not.
    async fn unindex(
        &self,
        old: &JobRecord,
        new: &JobRecord,
    ) -> Result<(), crate::ports::StoreError> {
        let old_state = self.keys.job_state(old.state, old.priority, &old.id);
        if new.state == JobState::Deleted
            || old_state != self.keys.job_state(new.state, new.priority, &new.id)
        {
            self.store.delete(&old_state).await?;
        }
        if let Some(group) = BatchGroup::of(old.state) {
            if BatchGroup::of(new.state) != Some(group) {
                self.store
                    .delete(&self.keys.batch_group(&old.batch, group, &old.id))
                    .await?;
            }
        }
        Ok(())
    }

    async fn marker(&self, key: &str) -> Result<(), RecordError> {
        self.store
            .put(key, Bytes::new(), PutCondition::Overwrite)
            .await?;
        Ok(())
    }

    /// The jobs the job queue lists in `state`, in priority order (a job may be listed twice, or
    /// in a state it has left, after a crash: see [`Ingest::claim_listed`]).
    pub async fn listed(&self, state: JobState) -> Result<Vec<(u8, JobId)>, RecordError> {
        let prefix = self.keys.job_states(state);
        let mut listed: Vec<(u8, JobId)> = self
            .store
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|m| self.keys.parse_job_state(state, &m.key))
            .collect();
        listed.sort();
        Ok(listed)
    }

    /// The record behind a marker listed under `state` at `priority`, if it is still there. A
    /// marker its record contradicts (a crash between the record and the indexes, or a lost race)
    /// is repaired here: the record's own markers are put and the stale one removed.
    pub async fn claim_listed(
        &self,
        state: JobState,
        priority: u8,
        id: &JobId,
    ) -> Result<Option<JobRecord>, RecordError> {
        let stale = self.keys.job_state(state, priority, id);
        let Some(record) = self.job(id).await? else {
            self.store.delete(&stale).await?;
            return Ok(None);
        };
        let record = record.value;
        if record.state == state && record.priority == priority {
            return Ok(Some(record));
        }
        tracing::warn!(job = %id, listed = %state, is = %record.state, "stale job-queue marker repaired");
        self.index(&record).await?;
        self.store.delete(&stale).await?;
        for group in BatchGroup::ALL {
            if BatchGroup::of(record.state) != Some(group) {
                self.store
                    .delete(&self.keys.batch_group(&record.batch, group, id))
                    .await?;
            }
        }
        Ok(None)
    }

    /// Removes a job's record and markers (an operator's delete, or cleanup).
    pub async fn remove_job(&self, record: &JobRecord) -> Result<(), RecordError> {
        for state in JobState::ALL {
            if state == record.state {
                self.store
                    .delete(&self.keys.job_state(state, record.priority, &record.id))
                    .await?;
            }
        }
        for group in BatchGroup::ALL {
            self.store
                .delete(&self.keys.batch_group(&record.batch, group, &record.id))
                .await?;
        }
        self.store.delete(&self.keys.job(&record.id)).await?;
        Ok(())
    }

    /// Deletes a job's downloaded files (one LIST, a DELETE each).
    pub async fn remove_downloaded_files(&self, job: &JobId) -> Result<(), StoreError> {
        for meta in self.store.list(&self.keys.objects(job)).await? {
            self.store.delete(&meta.key).await?;
        }
        Ok(())
    }
}

mod holds;
mod reports;

#[cfg(test)]
mod tests;
