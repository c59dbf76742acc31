//! Archive jobs, under their prefix (`archive/` by default): `jobs/<id>.json` (the record),
//! `open/<id>` (the open-jobs index), `work/<id>/shards/<n>.json`, `work/<id>/tasks/<phase>/<task>.json`,
//! `work/<id>/archive/…` (the staged archive) and `work/<id>/tmp/…`.

use crate::domain::archive::job::Phase;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveKeys {
    pub prefix: String,
}

impl ArchiveKeys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// Every job record.
    pub fn jobs(&self) -> String {
        format!("{}jobs/", self.prefix)
    }

    /// The open-jobs index.
    pub fn open(&self) -> String {
        format!("{}open/", self.prefix)
    }

    pub fn job_key(&self, id: &str) -> String {
        format!("{}jobs/{id}.json", self.prefix)
    }

    pub fn work(&self, id: &str) -> String {
        format!("{}work/{id}/", self.prefix)
    }

    pub fn shard_key(&self, id: &str, n: u32) -> String {
        format!("{}shards/{n:05}.json", self.work(id))
    }

    pub fn tasks_prefix(&self, id: &str, phase: Phase) -> String {
        format!("{}tasks/{phase}/", self.work(id))
    }

    pub fn task_key(&self, id: &str, phase: Phase, task: &str) -> String {
        format!("{}{task}.json", self.tasks_prefix(id, phase))
    }

    /// The staged archive, laid out as at every destination.
    pub fn staged(&self, id: &str) -> String {
        format!("{}archive/", self.work(id))
    }

    pub fn tmp(&self, id: &str) -> String {
        format!("{}tmp/", self.work(id))
    }

    /// The open-jobs index: one empty marker per job that has not ended, so a tick reads only
    /// those, never every job ever created.
    pub fn open_key(&self, id: &str) -> String {
        format!("{}open/{id}", self.prefix)
    }
}
