//! The batch and job records, and the one way each changes: a transition the table allows,
//! applied as a pure function (the repository writes it with If-Match).

use super::batch::BatchState;
use super::index::{BatchId, JobId};
use super::job::{last_successful_after, JobState};
use super::manifest::{ManifestKind, ManifestObject};
use crate::domain::machine::Record;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a depositor (or a service) submits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub collection: String,
    /// Where the manifest (or the single file) is: an http(s) URL or `s3://bucket/key`.
    pub manifest_url: String,
    pub kind: ManifestKind,
    #[serde(default = "default_priority")]
    pub priority: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub submitter: String,
    /// What the depositor says of the object, and how it changes what is stored.
    #[serde(flatten)]
    pub deposit: Deposit,
}

/// Seed 004's description of a deposit: the object's ERC metadata (who made it, what it is,
/// when, where) and the submission mode. Each job carries it to its processing container
/// (`ERC_WHO`, `ERC_WHAT`, `ERC_WHEN`, `ERC_WHERE`, `SUBMISSION_MODE`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deposit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc_who: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc_what: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc_when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc_where: Option<String>,
    #[serde(default)]
    pub submission_mode: SubmissionMode,
}

/// How a deposit changes an object already stored: `add` (a new version with these files added
/// to the last), `update` (a new version of exactly these files), `reset` (the object begun
/// again). Granary carries it to the processing container, which applies it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionMode {
    #[default]
    Add,
    Update,
    Reset,
}

impl SubmissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Update => "update",
            Self::Reset => "reset",
        }
    }
}

impl std::str::FromStr for SubmissionMode {
    type Err = UnknownSubmissionMode;
    fn from_str(s: &str) -> Result<Self, UnknownSubmissionMode> {
        [Self::Add, Self::Update, Self::Reset]
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownSubmissionMode(s.to_owned()))
    }
}

/// A name that is no [`SubmissionMode`] (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no submission mode {0:?}: add, update or reset")]
pub struct UnknownSubmissionMode(pub String);

impl Deposit {
    /// The container environment that carries it (set fields only).
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        let erc = [
            ("ERC_WHO", &self.erc_who),
            ("ERC_WHAT", &self.erc_what),
            ("ERC_WHEN", &self.erc_when),
            ("ERC_WHERE", &self.erc_where),
        ];
        let mut env: Vec<(&'static str, String)> = erc
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.clone()?)))
            .collect();
        env.push(("SUBMISSION_MODE", self.submission_mode.as_str().to_owned()));
        env
    }
}

fn default_priority() -> u8 {
    super::index::DEFAULT_PRIORITY
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub id: BatchId,
    pub state: BatchState,
    pub submission: Submission,
    /// Jobs spawned (set when the batch leaves pending).
    pub jobs: usize,
    /// Reports written so far (the first, then one per update-report).
    pub reports: u32,
    pub created_at: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    /// Why it is in its state, in a few words.
    pub reason: String,
}

impl BatchRecord {
    pub fn new(id: BatchId, submission: Submission, now: DateTime<Utc>) -> Self {
        Self {
            id,
            state: BatchState::Pending,
            submission,
            jobs: 0,
            reports: 0,
            created_at: now,
            last_modified: now,
            reason: "submitted".to_owned(),
        }
    }
}

/// A file of a job as stored in granary's bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFile {
    pub name: String,
    pub key: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub batch: BatchId,
    pub collection: String,
    pub state: JobState,
    pub last_successful_status: Option<JobState>,
    pub retry_count: u32,
    /// Where the job's keys sort in each state's queue (lower first): its submission's, stepped
    /// back while its size is large ([`crate::domain::ingest::decisions::priority_for`]).
    pub priority: u8,
    /// The priority its submission asked for, which every size check starts from (absent in
    /// records written before it was kept: their current priority stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_priority: Option<u8>,
    /// Bytes the job needs (0 until estimated, or when the estimate could not be made).
    pub space_needed: u64,
    pub object: ManifestObject,
    /// The batch's deposit description, for the processing container.
    #[serde(default)]
    pub deposit: Deposit,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stored: Vec<StoredFile>,
    /// The processing job's id, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing_job: Option<String>,
    /// Which processing attempt of this run (retry) the job is on: a Spot reclaim or another
    /// failure a new attempt may fix starts the next one, up to the backfill's attempt budget.
    #[serde(default = "first_attempt")]
    pub processing_attempt: u32,
    /// Attempts of the job's current step (a file's download, the callback) that ended at the
    /// HTTP client's timeout, one a tick: a server that never answers costs a tick's share an
    /// attempt, and the step's attempts run out across ticks. Cleared when the job moves.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slow_attempts: u32,
    /// The identifier the object is stored under, written before anything else the storing
    /// step does (a restarted job reads it and never mints again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<String>,
    /// When a mint was claimed for this job and not yet answered: written before EZID is asked,
    /// cleared in the write that records the identifier (or EZID's refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mint_claimed_at: Option<DateTime<Utc>>,
    /// The claiming pass's token: only the pass that claimed a mint writes its answer (or
    /// withdraws it), so two passes at once never both mint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mint_claim_token: Option<String>,
    /// Whether an object with no identifier is minted one (an identifier service was configured
    /// when the job was made): decided once, so a pass run without the service's settings makes
    /// the job wait rather than store it unidentified.
    #[serde(default)]
    pub mints_identifier: bool,
    /// The storage manifest's key, once the object is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_manifest: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_modified: DateTime<Utc>,
    pub reason: String,
}

fn first_attempt() -> u32 {
    1
}

impl JobRecord {
    pub fn new(id: JobId, batch: &BatchRecord, object: ManifestObject, now: DateTime<Utc>) -> Self {
        Self {
            id,
            batch: batch.id.clone(),
            collection: batch.submission.collection.clone(),
            state: JobState::Pending,
            last_successful_status: None,
            retry_count: 0,
            priority: batch.submission.priority,
            submitted_priority: Some(batch.submission.priority),
            space_needed: 0,
            object,
            deposit: batch.submission.deposit.clone(),
            stored: Vec::new(),
            processing_job: None,
            processing_attempt: 1,
            slow_attempts: 0,
            identifier: None,
            mint_claimed_at: None,
            mint_claim_token: None,
            mints_identifier: false,
            storage_manifest: None,
            created_at: now,
            last_modified: now,
            reason: "created from the batch's manifest".to_owned(),
        }
    }
}

impl Record for BatchRecord {
    type State = BatchState;
    fn state(&self) -> BatchState {
        self.state
    }
    fn entered(&self, to: BatchState, reason: &str, now: DateTime<Utc>) -> Self {
        Self {
            state: to,
            last_modified: now,
            reason: reason.to_owned(),
            ..self.clone()
        }
    }
}

impl Record for JobRecord {
    type State = JobState;
    fn state(&self) -> JobState {
        self.state
    }
    /// `last_successful_status` moves on only when a step hands on to the next, and a resume
    /// (failed → a step) counts a retry.
    fn entered(&self, to: JobState, reason: &str, now: DateTime<Utc>) -> Self {
        let resumed = self.state == JobState::Failed && JobState::STEPS.contains(&to);
        // A resume into processing is a new run: a new Batch job, its attempts counted afresh.
        let rerun = resumed && to == JobState::Processing;
        Self {
            processing_job: if rerun {
                None
            } else {
                self.processing_job.clone()
            },
            processing_attempt: if rerun { 1 } else { self.processing_attempt },
            // A new step (or the same one resumed) starts its attempts afresh.
            slow_attempts: 0,
            state: to,
            last_successful_status: last_successful_after(
                self.state,
                to,
                self.last_successful_status,
            ),
            retry_count: self.retry_count + u32::from(resumed),
            last_modified: now,
            reason: reason.to_owned(),
            ..self.clone()
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ingest::manifest::single_file;

    fn batch() -> BatchRecord {
        BatchRecord::new(
            BatchId::parse("b1").unwrap(),
            Submission {
                collection: "c".into(),
                manifest_url: "http://h/m.checkm".into(),
                kind: ManifestKind::Files,
                priority: 5,
                callback: None,
                profile: None,
                submitter: "me".into(),
                deposit: Default::default(),
            },
            Utc::now(),
        )
    }

    #[test]
    fn a_job_keeps_its_last_success_through_a_failure_and_a_resume_counts_a_retry() {
        let b = batch();
        let now = Utc::now();
        let mut j = JobRecord::new(b.id.job(1), &b, single_file("http://h/a", None), now);
        for to in [
            JobState::Estimating,
            JobState::Provisioning,
            JobState::Downloading,
            JobState::Failed,
        ] {
            j = j.moved(to, "t", now).unwrap();
        }
        assert_eq!(j.last_successful_status, Some(JobState::Provisioning));
        assert_eq!(j.retry_count, 0);
        let again = j.moved(JobState::Downloading, "resumed", now).unwrap();
        assert_eq!(again.retry_count, 1);
        assert_eq!(again.last_successful_status, Some(JobState::Provisioning));
        assert!(j.moved(JobState::Completed, "no", now).is_err());
    }

    #[test]
    fn a_batch_moves_only_as_its_table_allows() {
        let b = batch();
        let now = Utc::now();
        assert!(b.moved(BatchState::Reporting, "no", now).is_err());
        let p = b
            .moved(BatchState::Processing, "jobs created", now)
            .unwrap();
        assert_eq!(p.state, BatchState::Processing);
        assert_eq!(p.submission, b.submission);
    }

    #[test]
    fn a_submission_carries_its_deposit_description_and_older_ones_read_as_plain_adds() {
        let old =
            r#"{"collection":"maps","manifest_url":"s3://b/m","kind":"files","submitter":"svc"}"#;
        let s: Submission = serde_json::from_str(old).unwrap();
        assert_eq!(s.deposit, Deposit::default());
        assert_eq!(
            s.deposit.environment(),
            vec![("SUBMISSION_MODE", "add".to_owned())]
        );
        let full = r#"{"collection":"maps","manifest_url":"s3://b/m","kind":"files","submitter":"svc",
            "erc_who":"Lange, Dorothea","erc_what":"Migrant Mother","erc_when":"1936",
            "submission_mode":"update"}"#;
        let s: Submission = serde_json::from_str(full).unwrap();
        assert_eq!(
            s.deposit.environment(),
            vec![
                ("ERC_WHO", "Lange, Dorothea".to_owned()),
                ("ERC_WHAT", "Migrant Mother".to_owned()),
                ("ERC_WHEN", "1936".to_owned()),
                ("SUBMISSION_MODE", "update".to_owned()),
            ]
        );
        // Written back flat, as the design's submission is.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["erc_what"], "Migrant Mother");
        assert!(json.get("erc_where").is_none());
        assert!(serde_json::from_str::<Submission>(&full.replace("update", "merge")).is_err());
        assert_eq!("reset".parse::<SubmissionMode>(), Ok(SubmissionMode::Reset));
    }
}
