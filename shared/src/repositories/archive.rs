//! Archive jobs' records over the object store: the job (If-Match, every change checked against
//! the table), its shards, its tasks (created if absent, changed with If-Match), and where its
//! staged archive lives.
//!
//! Their keys: `domain::layout::archive`.

pub use super::json::Changed;
use super::json::{
    change_record, read_json, record_names, write_json, RecordAt, RecordError, Versioned,
};
use crate::domain::archive::job::Phase;
use crate::domain::archive::job::TaskState;
use crate::domain::archive::record::{ArchiveJob, TaskRecord};
use crate::domain::layout::archive::ArchiveKeys;
use crate::domain::machine::Refused;
use crate::ports::{ObjectMeta, ObjectStore, PutCondition, StoreError};
use std::sync::Arc;

/// A change's outcome as the repository reports it.
#[derive(Clone)]
pub struct Archives {
    pub store: Arc<dyn ObjectStore>,
    pub keys: ArchiveKeys,
}

impl Archives {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            keys: ArchiveKeys::new(prefix),
        }
    }

    pub async fn open_ids(&self) -> Result<Vec<String>, RecordError> {
        let prefix = self.keys.open();
        let mut ids: Vec<String> = self
            .store
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|m| Some(m.key.strip_prefix(&prefix)?.to_owned()))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Put before a job is created or retried: a crash after it leaves a marker the tick skips
    /// (no record yet) or repairs (the job has ended), never a live job no tick reads.
    pub async fn mark_open(&self, id: &str) -> Result<(), RecordError> {
        self.store
            .put(
                &self.keys.open_key(id),
                bytes::Bytes::new(),
                PutCondition::Overwrite,
            )
            .await?;
        Ok(())
    }

    /// Removed after the record says the job ended.
    pub async fn mark_closed(&self, id: &str) -> Result<(), RecordError> {
        self.store.delete(&self.keys.open_key(id)).await?;
        Ok(())
    }

    /// Creates the job (its open marker first) unless it exists; the stored one either way.
    pub async fn create(&self, job: &ArchiveJob) -> Result<ArchiveJob, RecordError> {
        let key = self.keys.job_key(&job.id);
        if !job.state.has_ended() {
            self.mark_open(&job.id).await?;
        }
        match write_json(self.store.as_ref(), &key, job, PutCondition::IfAbsent).await {
            Ok(_) => Ok(job.clone()),
            Err(e) if e.is_conflict() => match self.job(&job.id).await? {
                Some(existing) => Ok(existing.value),
                None => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    pub async fn job(&self, id: &str) -> Result<Option<Versioned<ArchiveJob>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &self.keys.job_key(id)).await?)
    }

    /// Every job id, oldest first (ids sort by creation time).
    pub async fn ids(&self) -> Result<Vec<String>, RecordError> {
        Ok(record_names(self.store.as_ref(), &self.keys.jobs()).await?)
    }

    /// Reads the job, asks `decide` for the next record, writes it with If-Match.
    pub async fn change<F>(&self, id: &str, decide: F) -> Result<Changed<ArchiveJob>, RecordError>
    where
        F: Fn(&ArchiveJob) -> Result<Option<ArchiveJob>, Refused>,
    {
        let key = self.keys.job_key(id);
        let at = RecordAt {
            key: &key,
            what: "archive job",
            id,
        };
        change_record(self.store.as_ref(), at, decide, &()).await
    }

    pub async fn put_shard(&self, id: &str, n: u32, keys: &[String]) -> Result<(), RecordError> {
        write_json(
            self.store.as_ref(),
            &self.keys.shard_key(id, n),
            &keys,
            PutCondition::Overwrite,
        )
        .await?;
        Ok(())
    }

    pub async fn shard(&self, id: &str, n: u32) -> Result<Option<Vec<String>>, RecordError> {
        Ok(
            read_json::<Vec<String>>(self.store.as_ref(), &self.keys.shard_key(id, n))
                .await?
                .map(|v| v.value),
        )
    }

    /// Creates the task pending unless it exists; the stored one either way.
    pub async fn ensure_task(
        &self,
        id: &str,
        phase: Phase,
        task: &str,
    ) -> Result<TaskRecord, RecordError> {
        let record = TaskRecord {
            job: id.to_owned(),
            phase,
            task: task.to_owned(),
            state: TaskState::Pending,
            reason: String::new(),
            runs: 0,
            sent_at: None,
            members: Vec::new(),
        };
        let key = self.keys.task_key(id, phase, task);
        match write_json(self.store.as_ref(), &key, &record, PutCondition::IfAbsent).await {
            Ok(_) => Ok(record),
            Err(e) if e.is_conflict() => match self.task(id, phase, task).await? {
                Some(t) => Ok(t.value),
                None => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    pub async fn task(
        &self,
        id: &str,
        phase: Phase,
        task: &str,
    ) -> Result<Option<Versioned<TaskRecord>>, RecordError> {
        Ok(read_json(self.store.as_ref(), &self.keys.task_key(id, phase, task)).await?)
    }

    /// Changes a task with If-Match, as `change` does a job.
    pub async fn change_task<F>(
        &self,
        id: &str,
        phase: Phase,
        task: &str,
        decide: F,
    ) -> Result<Changed<TaskRecord>, RecordError>
    where
        F: Fn(&TaskRecord) -> Option<TaskRecord>,
    {
        let key = self.keys.task_key(id, phase, task);
        let named = format!("{id}/{phase}/{task}");
        let at = RecordAt {
            key: &key,
            what: "archive task",
            id: &named,
        };
        change_record(self.store.as_ref(), at, |t| Ok(decide(t)), &()).await
    }

    /// Moves a copied member from its temporary key into the staged archive at `address` (a
    /// copy, then the temporary's delete).
    pub async fn move_into_staged(&self, tmp: &str, address: &str) -> Result<(), StoreError> {
        self.store.copy(tmp, address).await?;
        self.store.delete(tmp).await
    }

    /// Writes one of granary's files (`name`) into job `id`'s staged archive.
    pub async fn put_staged_file(
        &self,
        id: &str,
        name: &str,
        body: bytes::Bytes,
    ) -> Result<String, StoreError> {
        self.store
            .put(
                &format!("{}{name}", self.keys.staged(id)),
                body,
                PutCondition::Overwrite,
            )
            .await
    }

    /// Every file of job `id`'s staged archive (one LIST).
    pub async fn staged_files(&self, id: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(&self.keys.staged(id)).await
    }

    /// Deletes job `id`'s temporaries.
    pub async fn remove_temporaries(&self, id: &str) -> Result<(), StoreError> {
        self.remove_all(&self.keys.tmp(id)).await
    }

    /// Deletes job `id`'s work area: its shards, task records, staged archive and temporaries.
    pub async fn remove_work(&self, id: &str) -> Result<(), StoreError> {
        self.remove_all(&self.keys.work(id)).await
    }

    /// Deletes every object under `prefix`.
    async fn remove_all(&self, prefix: &str) -> Result<(), StoreError> {
        for meta in self.store.list(prefix).await? {
            self.store.delete(&meta.key).await?;
        }
        Ok(())
    }

    /// Every task of the phase, in name order.
    pub async fn tasks(&self, id: &str, phase: Phase) -> Result<Vec<TaskRecord>, RecordError> {
        let mut out = Vec::new();
        for meta in self.store.list(&self.keys.tasks_prefix(id, phase)).await? {
            if let Some(t) = read_json::<TaskRecord>(self.store.as_ref(), &meta.key).await? {
                out.push(t.value);
            }
        }
        Ok(out)
    }
}
