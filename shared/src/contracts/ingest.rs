//! What the ingest queue tells the world: the processing job it submits to AWS Batch, the events
//! it publishes on the notification bus, and the JSON it posts to a depositor's callback.

use crate::domain::ingest::index::{BatchId, JobId};
use crate::domain::ingest::record::Deposit;
use crate::domain::job_name::processing_job_name;
use crate::domain::job_tags::INGEST_JOB_ENV;
use crate::ports::{BusEvent, JobRequest};
use serde::Serialize;
use std::collections::BTreeMap;

/// The `source` of every event the ingest queue publishes.
pub const EVENT_SOURCE: &str = "granary.ingest";
pub const JOB_COMPLETED: &str = "Ingest Job Completed";
pub const BATCH_REPORTED: &str = "Ingest Batch Reported";
pub const BATCH_QUEUED: &str = "Ingest Batch Queued";
/// The detail-type of a submission sent as an event on the notification bus.
pub const SUBMISSION: &str = "Ingest Submission";

/// Why a queue message is no submission.
#[derive(Debug, thiserror::Error)]
pub enum UnreadableSubmission {
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// An EventBridge event of another detail-type (the one it has).
    #[error("an event of type {0:?}, not {SUBMISSION:?}")]
    OtherEvent(String),
    #[error("not a submission: {0}")]
    NotASubmission(#[source] serde_json::Error),
}

/// A submission as a queue message carries it: the submission's JSON, or an EventBridge event
/// (detail-type [`SUBMISSION`]) whose `detail` is.
pub fn submission_of(
    body: &str,
) -> Result<crate::domain::ingest::record::Submission, UnreadableSubmission> {
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(UnreadableSubmission::NotJson)?;
    let inner = match value.get("detail-type").and_then(|t| t.as_str()) {
        Some(SUBMISSION) => value.get("detail").cloned().unwrap_or_default(),
        Some(other) => return Err(UnreadableSubmission::OtherEvent(other.to_owned())),
        None => value,
    };
    serde_json::from_value(inner).map_err(UnreadableSubmission::NotASubmission)
}

/// The processing job of an ingest job: `INGEST_JOB_ID` and `INGEST_OBJECT_PREFIX` (where its
/// downloaded files are, `s3://bucket/prefix/`) in the container environment and as parameters,
/// and the deposit's description (`ERC_WHO`, `ERC_WHAT`, `ERC_WHEN`, `ERC_WHERE` when given,
/// `SUBMISSION_MODE`) in the environment.
/// The name carries the retry count and the attempt, so a resumed or retried job is a new Batch
/// job, a lost SubmitJob answer is found by name rather than submitted twice, and an end is
/// matched to the attempt the record waits for by name alone.
pub fn processing_job(
    job: &JobId,
    retry: u32,
    attempt: u32,
    object_prefix: &str,
    deposit: &Deposit,
) -> JobRequest {
    let pairs = [
        (INGEST_JOB_ENV, job.to_string()),
        ("INGEST_OBJECT_PREFIX", object_prefix.to_owned()),
    ];
    JobRequest {
        job_name: processing_job_name(job, retry, attempt),
        environment: pairs
            .iter()
            .cloned()
            .chain(deposit.environment())
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        parameters: pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        array_size: None,
        queue: None,
        memory_mib: None,
    }
}

/// The failure DLQ's message for an ingest job whose processing failed for good. `granary
/// redrive` leaves it (it is not a granule); `granary ingest resume` restarts the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IngestNotice {
    pub ingest_job: JobId,
    pub batch: BatchId,
    pub collection: String,
    pub processing_job: String,
    pub attempt: u32,
}

impl IngestNotice {
    pub fn to_message(
        &self,
        notice: &crate::contracts::messages::Notice,
    ) -> Result<crate::ports::OutgoingMessage, crate::contracts::EncodeError> {
        crate::contracts::messages::message("an ingest notice", self, notice)
    }
}

/// A job's end, as announced.
#[derive(Debug, Clone, Serialize)]
pub struct JobAnnouncement<'a> {
    pub batch: &'a BatchId,
    pub job: &'a JobId,
    pub collection: &'a str,
    pub local_id: Option<&'a str>,
    pub primary_id: Option<&'a str>,
    pub state: &'a str,
    pub files: usize,
    pub catalog_key: &'a str,
}

impl JobAnnouncement<'_> {
    pub fn event(&self) -> BusEvent {
        BusEvent {
            source: EVENT_SOURCE.to_owned(),
            detail_type: JOB_COMPLETED.to_owned(),
            detail: serde_json::json!(self),
            resources: Vec::new(),
        }
    }
}

/// A batch's report, as announced (the report itself is in S3 under `report_key`).
#[derive(Debug, Clone, Serialize)]
pub struct BatchAnnouncement<'a> {
    pub batch: &'a BatchId,
    pub collection: &'a str,
    pub state: &'a str,
    pub report: u32,
    pub report_key: &'a str,
    pub completed: usize,
    pub failed: usize,
}

impl BatchAnnouncement<'_> {
    pub fn event(&self) -> BusEvent {
        BusEvent {
            source: EVENT_SOURCE.to_owned(),
            detail_type: BATCH_REPORTED.to_owned(),
            detail: serde_json::json!(self),
            resources: Vec::new(),
        }
    }
}

/// A batch's jobs are queued (seed 004's queueing confirmation, for the profiles that ask for
/// it): on the bus as [`BATCH_QUEUED`], and posted to the batch's callback.
#[derive(Debug, Serialize)]
pub struct BatchQueued<'a> {
    pub batch: &'a BatchId,
    pub collection: &'a str,
    pub profile: &'a str,
    pub submitter: &'a str,
    pub state: &'static str,
    pub jobs: usize,
}

impl BatchQueued<'_> {
    pub fn event(&self) -> BusEvent {
        BusEvent {
            source: EVENT_SOURCE.to_owned(),
            detail_type: BATCH_QUEUED.to_owned(),
            detail: serde_json::json!(self),
            resources: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_arrives_bare_or_in_its_event() {
        let bare = r#"{"collection":"maps","manifest_url":"https://h/m","kind":"files","submitter":"svc"}"#;
        let s = submission_of(bare).unwrap();
        assert_eq!((s.collection.as_str(), s.priority), ("maps", 5));
        let event =
            format!(r#"{{"detail-type":"Ingest Submission","source":"svc","detail":{bare}}}"#);
        assert_eq!(submission_of(&event).unwrap(), s);
        assert!(submission_of(r#"{"detail-type":"Other","detail":{}}"#)
            .unwrap_err()
            .to_string()
            .contains("Other"));
        assert!(submission_of("{")
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        assert!(submission_of(r#"{"collection":"maps"}"#)
            .unwrap_err()
            .to_string()
            .contains("not a submission"));
    }
}
