//! Where the ingest queue's records and indexes live in S3.
//!
//! The design's ZooKeeper nodes become keys under one prefix:
//!
//! - `batches/<bid>.json`, `jobs/<jid>.json`: the records, changed only with If-Match;
//! - `job-states/<state>/<PP>-<jid>`: the job queue. An empty marker per job; listing a state's
//!   prefix returns keys in UTF-8 order, so two-digit priorities (00 first) list in priority
//!   order, and the priority is the only thing the key adds to the record;
//! - `batch-jobs/<bid>/<group>/<jid>`: the batch's own index (processing, completed, failed);
//!   a batch with nothing under `batch-processing/` has no job left running;
//! - `holds/collection=<c>.json`, `holds/batch=<bid>.json`, `holds/job=<jid>.json`: holds;
//! - `objects/<jid>/<name>`: a job's downloaded files; `catalog/collection=<c>/<jid>.json`: what
//!   a job stored;
//! - `reports/<bid>/<n>.json`: a batch's reports, the first and each update.

use crate::domain::ingest::batch::BatchState;
use crate::domain::ingest::index::{BatchId, JobId, MAX_PRIORITY};
use crate::domain::ingest::job::{BatchGroup, JobState};

/// The ingest queue's keys under one prefix (`ingest/` by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestKeys {
    pub prefix: String,
}

impl IngestKeys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    pub fn batch(&self, bid: &BatchId) -> String {
        format!("{}batches/{bid}.json", self.prefix)
    }

    pub fn batches(&self) -> String {
        format!("{}batches/", self.prefix)
    }

    /// The batch queue's index: one empty marker per batch under its state, so a step lists the
    /// batches in its state instead of reading every batch ever submitted.
    pub fn batch_states(&self, state: BatchState) -> String {
        format!("{}batch-states/{state}/", self.prefix)
    }

    pub fn batch_state(&self, state: BatchState, bid: &BatchId) -> String {
        format!("{}{bid}", self.batch_states(state))
    }

    pub fn job(&self, jid: &JobId) -> String {
        format!("{}jobs/{jid}.json", self.prefix)
    }

    /// The job queue's marker for a job in `state` at `priority`.
    pub fn job_state(&self, state: JobState, priority: u8, jid: &JobId) -> String {
        format!(
            "{}job-states/{state}/{:02}-{jid}",
            self.prefix,
            priority.min(MAX_PRIORITY)
        )
    }

    /// Everything in the job queue's `state`, listed in priority order.
    pub fn job_states(&self, state: JobState) -> String {
        format!("{}job-states/{state}/", self.prefix)
    }

    /// (priority, job id) of a job-queue marker listed under `job_states(state)`.
    pub fn parse_job_state(&self, state: JobState, key: &str) -> Option<(u8, JobId)> {
        let rest = key.strip_prefix(&self.job_states(state))?;
        let (priority, jid) = rest.split_once('-')?;
        if priority.len() != 2 {
            return None;
        }
        Some((priority.parse().ok()?, JobId::parse(jid).ok()?))
    }

    pub fn batch_group(&self, bid: &BatchId, group: BatchGroup, jid: &JobId) -> String {
        format!("{}batch-jobs/{bid}/{}/{jid}", self.prefix, group.as_str())
    }

    pub fn batch_groups(&self, bid: &BatchId, group: BatchGroup) -> String {
        format!("{}batch-jobs/{bid}/{}/", self.prefix, group.as_str())
    }

    pub fn collection_hold(&self, collection: &str) -> String {
        format!("{}holds/collection={collection}.json", self.prefix)
    }

    pub fn batch_hold(&self, bid: &BatchId) -> String {
        format!("{}holds/batch={bid}.json", self.prefix)
    }

    pub fn job_hold(&self, jid: &JobId) -> String {
        format!("{}holds/job={jid}.json", self.prefix)
    }

    /// The claim of one processing attempt's Batch job (`repositories::claims`): created before
    /// SubmitJob, completed with the job id after it.
    pub fn processing_claim(&self, jid: &JobId, retry: u32, attempt: u32) -> String {
        format!("{}r{retry}-a{attempt}.json", self.processing_claims(jid))
    }

    /// Every processing claim of a job (all under one prefix).
    pub fn processing_claims(&self, jid: &JobId) -> String {
        format!("{}claims/{jid}/", self.prefix)
    }

    /// Where a job's downloaded files are kept until its batch is cleaned up.
    pub fn objects(&self, jid: &JobId) -> String {
        format!("{}objects/{jid}/", self.prefix)
    }

    /// One downloaded file of a job.
    pub fn object(&self, jid: &JobId, name: &str) -> String {
        format!("{}{name}", self.objects(jid))
    }

    /// Where a container deposit's zip waits to be expanded: inside the job's object folder (so
    /// its cleanup removes it too), under a name no zip entry can take (`.container/`).
    pub fn container(&self, jid: &JobId, name: &str) -> String {
        format!("{}.container/{name}", self.objects(jid))
    }

    /// Every downloaded file of a batch's jobs (job ids start with the batch's): what a
    /// completed batch's archive job archives.
    pub fn batch_objects(&self, bid: &BatchId) -> String {
        format!("{}objects/{bid}-", self.prefix)
    }

    /// The catalog record of what a job stored (Merritt's inventory step; "inventory" in granary
    /// names only the feeder's Parquet granule lists).
    pub fn catalog(&self, collection: &str, jid: &JobId) -> String {
        format!("{}catalog/collection={collection}/{jid}.json", self.prefix)
    }

    /// Where a stored object lives: its files under `producer/`, granary's (ERC, Dublin Core, the
    /// storage manifest) under `system/`. `name` is [`crate::domain::ingest::deposit::storage_name`].
    /// Kept when the batch is cleaned up: this is the object as stored.
    pub fn storage(&self, collection: &str, name: &str) -> String {
        format!("{}storage/collection={collection}/{name}/", self.prefix)
    }

    /// The identifier a collection's local id is stored under (created `If-None-Match`, so the
    /// first binding stands and a second object claiming the local id is refused).
    pub fn local_id(&self, collection: &str, local_id: &str) -> String {
        format!(
            "{}local-ids/collection={collection}/{}.json",
            self.prefix,
            // Every byte but the unreserved ones `%XX`: two local ids never share a key.
            crate::domain::percent::encode(local_id, |b| {
                crate::domain::percent::unreserved(b) && b != b'~'
            })
        )
    }

    /// A submitted manifest kept in the bucket (`granary ingest submit` of a local file).
    pub fn manifest(&self, name: &str) -> String {
        format!("{}manifests/{name}", self.prefix)
    }

    pub fn report(&self, bid: &BatchId, n: u32) -> String {
        format!("{}reports/{bid}/{n:03}.json", self.prefix)
    }

    pub fn reports(&self, bid: &BatchId) -> String {
        format!("{}reports/{bid}/", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn local_ids_escape_into_one_segment() {
        let keys = IngestKeys::new("ingest/");
        assert_eq!(
            keys.local_id("maps", "sheet 12/a%"),
            "ingest/local-ids/collection=maps/sheet%2012%2Fa%25.json"
        );
        assert_ne!(keys.local_id("maps", "a/b"), keys.local_id("maps", "a%2Fb"));
    }

    #[test]
    fn job_queue_keys_list_in_priority_order_and_read_back() {
        let keys = IngestKeys::new("ingest/");
        let bid = BatchId::new(
            chrono::Utc.with_ymd_and_hms(2026, 11, 24, 3, 4, 5).unwrap(),
            "abcdef0123",
        );
        assert_eq!(bid.as_str(), "b20261124030405-abcdef01");
        let (a, b) = (bid.job(2), bid.job(10));
        let mut listed = [
            keys.job_state(JobState::Pending, 10, &a),
            keys.job_state(JobState::Pending, 5, &b),
            keys.job_state(JobState::Pending, 0, &a),
        ];
        listed.sort();
        let order: Vec<_> = listed
            .iter()
            .map(|k| keys.parse_job_state(JobState::Pending, k).unwrap())
            .collect();
        assert_eq!(order, vec![(0, a.clone()), (5, b), (10, a.clone())]);
        assert_eq!(keys.parse_job_state(JobState::Held, &listed[0]), None);
        assert_eq!(
            keys.job_state(JobState::Pending, 200, &a),
            keys.job_state(JobState::Pending, 99, &a)
        );
    }
}
