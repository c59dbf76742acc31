//! The decision one Batch "Job State Change" event causes: ignore it (not finished), or log and
//! route a finished job's granule — or reject the event as unusable. The job monitor acts on it and
//! `granary classify` prints it; both call [`on_job_event`], so the two can never disagree.

use super::batch_event::{BatchEventError, BatchJobStateChange, JobDetail, JobStatus};
use super::campaign::Campaign;
use super::classify::{classify, Classification, Route};
use super::granule::GranuleProcessingEvent;
use super::poison::{RawText, RejectKind};

#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    /// SUBMITTED..RUNNING: granary's rule forwards only SUCCEEDED and FAILED, so this is a stray.
    NotFinished {
        job_id: String,
        status: JobStatus,
    },
    Finished(FinishedJob),
    /// One child of an array window ended: its granule is granule `index` of the window claim
    /// at `claim_key`, which only a read of the claim can name (`handlers::monitor`).
    WindowChild(WindowChildEnd),
    /// The parent of an array window: its status sums up its children, each of which sends its
    /// own event (AWS Batch user guide, "Array jobs"), so it routes nothing.
    ArrayParent {
        job_id: String,
        status: JobStatus,
    },
    /// The processing job of an ingest job (`INGEST_JOB_ID`): no granule; its end, classified
    /// as a granule's would be, goes to the ingest job's record.
    IngestJob {
        job_id: String,
        job_name: String,
        ingest_job: String,
        classification: Classification,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct FinishedJob {
    pub granule: GranuleProcessingEvent,
    /// The campaign the job belongs to: its end is handled in that campaign's state.
    pub campaign: Option<Campaign>,
    pub classification: Classification,
    pub route: Route,
    /// The Spot ends before this attempt, when the job's own parameters cannot say: an array
    /// child's are its parent's, and its window claim holds its count (`domain::attempt_budget`).
    pub spot_ends_before: Option<u32>,
    /// Where a first attempt submitted in an array window was listed (its window claim's key):
    /// its item record is made at its end (every window the feeder claims), and says
    /// so. `None` for any other job.
    pub listed_in: Option<String>,
}

/// A child of an array window that ended, before its granule is read from the window claim.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowChildEnd {
    pub job_id: String,
    pub claim_key: String,
    /// The bucket the job names its claim in, when only its environment names it.
    pub claim_bucket: Option<String>,
    /// The claim's token the job carries, if it does.
    pub claim_token: Option<String>,
    pub index: u32,
    /// The array's `ATTEMPT`: every child's in a window of first attempts, only the lowest in a
    /// window of retries, whose claim holds each child's ([`WindowChildEnd::of_entry`]).
    pub attempt: u32,
    /// The campaign the array belongs to: its claim is read from that campaign's state.
    pub campaign: Option<Campaign>,
    pub classification: Classification,
    pub route: Route,
}

impl WindowChildEnd {
    /// The end as a granule's, once the claim names the entry at `index`: its granule, its
    /// attempt (a window of retries holds each child's) and the Spot ends before it.
    pub fn of_entry(&self, entry: super::window::WindowEntry) -> FinishedJob {
        FinishedJob {
            granule: entry.event(),
            campaign: self.campaign.clone(),
            classification: self.classification.clone(),
            route: self.route,
            listed_in: entry.record_at_end.then(|| self.claim_key.clone()),
            spot_ends_before: Some(entry.spot_ends),
        }
    }
}

/// Why an event can never be handled, however often it is delivered: a permanent error. The
/// monitor records it and dead-letters it at once instead of letting SQS redeliver it.
#[derive(Debug, thiserror::Error)]
pub enum EventRejection {
    #[error(transparent)]
    Unreadable(#[from] BatchEventError),
    #[error("job {job_id} carries no usable granule: {why}")]
    NoGranule { job_id: String, why: String },
}

impl EventRejection {
    pub fn kind(&self) -> RejectKind {
        match self {
            EventRejection::Unreadable(_) => RejectKind::UnreadableEvent,
            EventRejection::NoGranule { .. } => RejectKind::EventWithoutGranule,
        }
    }
}

/// Parses an EventBridge event as the rule delivers it and decides what it causes.
pub fn on_job_event(
    raw: &serde_json::Value,
) -> Result<(BatchJobStateChange, JobEnd), EventRejection> {
    let event = BatchJobStateChange::from_value(raw)?;
    let end = on_job_detail(&event.detail)?;
    Ok((event, end))
}

/// The decision for one JobDetail (the event's detail, or what DescribeJobs returns).
pub fn on_job_detail(job: &JobDetail) -> Result<JobEnd, EventRejection> {
    let classification = match classify(job) {
        Ok(c) => c,
        Err(not_terminal) => {
            return Ok(JobEnd::NotFinished {
                job_id: not_terminal.job_id,
                status: not_terminal.status,
            })
        }
    };
    if let Some(ingest_job) = super::job_tags::ingest_job_of(job) {
        return Ok(JobEnd::IngestJob {
            job_id: job.job_id.clone(),
            job_name: job.job_name.clone(),
            ingest_job: ingest_job.to_owned(),
            classification,
        });
    }
    if let Some(window) = super::job_tags::window_claim_of(job) {
        return window_end(job, window, classification);
    }
    let granule = granule_of(job)?;
    let campaign = campaign_of(job)?;
    let route = classification.route();
    Ok(JobEnd::Finished(FinishedJob {
        granule,
        campaign,
        classification,
        route,
        spot_ends_before: None,
        listed_in: None,
    }))
}

/// An array window's job ended: the parent is ignored, a child names its place in the window.
/// A window job without an index and without an array size (a single job carrying a window
/// claim, which granary never submits) has no granule to name.
fn window_end(
    job: &JobDetail,
    window: super::job_tags::WindowRef,
    classification: Classification,
) -> Result<JobEnd, EventRejection> {
    let claim_key = window.key.as_str();
    let no_granule = |why: String| EventRejection::NoGranule {
        job_id: RawText::of(&job.job_id).shown(),
        why,
    };
    let array = job.array_properties.as_ref();
    let index = array
        .and_then(|a| a.index)
        .or_else(|| child_index(&job.job_id));
    let Some(index) = index else {
        if array.is_some_and(|a| a.size.is_some()) {
            return Ok(JobEnd::ArrayParent {
                job_id: job.job_id.clone(),
                status: job.status,
            });
        }
        return Err(no_granule(format!(
            "it names window claim {} but is no array job's child (no arrayProperties.index)",
            RawText::of(claim_key).shown()
        )));
    };
    let attempt = super::job_tags::attempt_of(job).map_err(|e| no_granule(e.to_string()))?;
    // The job names its campaign; if a child's details lack it, the claim's key says it (the
    // claim is read from that key, in that campaign's state).
    let campaign = campaign_of(job)?.or_else(|| super::campaign::of_key(claim_key));
    let route = classification.route();
    Ok(JobEnd::WindowChild(WindowChildEnd {
        job_id: job.job_id.clone(),
        claim_key: claim_key.to_owned(),
        claim_bucket: window.bucket.clone(),
        claim_token: window.token.clone(),
        index,
        attempt,
        campaign,
        classification,
        route,
    }))
}

/// The index a child's job id ends with (`<parent>:<index>`, AWS Batch user guide, "Array
/// jobs"), for a detail that lost its arrayProperties.
pub fn child_index(job_id: &str) -> Option<u32> {
    let (_, index) = job_id.rsplit_once(':')?;
    index.parse().ok()
}

/// The campaign a job was submitted for (the job contract, `job_tags`); a name no campaign
/// could have leaves its end with nowhere to go.
pub fn campaign_of(job: &JobDetail) -> Result<Option<Campaign>, EventRejection> {
    super::job_tags::campaign_of(job).map_err(|why| EventRejection::NoGranule {
        job_id: RawText::of(&job.job_id).shown(),
        why: why.to_string(),
    })
}

/// The granule and attempt a job was submitted for (the job contract, `job_tags`).
pub fn granule_of(job: &JobDetail) -> Result<GranuleProcessingEvent, EventRejection> {
    super::job_tags::granule_of(job).map_err(|why| EventRejection::NoGranule {
        job_id: RawText::of(&job.job_id).shown(),
        why: why.to_string(),
    })
}

/// A submitted attempt whose end never reached granary and that Batch no longer knows
/// (DescribeJobs answers nothing: Batch keeps a finished job's state "for at least 7 days",
/// AWS Batch user guide, "Job states"). Nothing can tell any more whether it succeeded, so it
/// is neither retried blindly nor left unrouted: it is a final failure, dead-lettered with a
/// reason an operator can act on (`granary redrive` sends it round again).
pub fn forgotten_by_batch(
    granule: GranuleProcessingEvent,
    campaign: Option<Campaign>,
    job_id: &str,
) -> FinishedJob {
    end_not_known(
        granule,
        campaign,
        format!(
            "Batch no longer knows job {job_id}: its end was never seen (the event was lost \
             and Batch forgot the job before the reconciler asked)"
        ),
    )
}

/// A submitted attempt whose end never reached granary and whose job Batch describes in a way
/// no code of granary can read (`why`; the description itself is kept under the reject
/// prefix). The caller knows the attempt from its own claim, so the granule is not left with
/// no end at all: like a forgotten job, nothing can tell whether it succeeded, and it is a
/// final failure with the reason.
pub fn undescribable(
    granule: GranuleProcessingEvent,
    campaign: Option<Campaign>,
    job_id: &str,
    why: &str,
) -> FinishedJob {
    FinishedJob {
        classification: undescribable_end(job_id, why),
        ..end_not_known(granule, campaign, String::new())
    }
}

/// How an end no code can read is classified, whatever the job (a granule's, an ingest job's
/// processing): a final failure whose reason says why.
pub fn undescribable_end(job_id: &str, why: &str) -> Classification {
    Classification {
        outcome: super::classify::JobOutcome::NonRetryable,
        failure: Some(super::classify::FailureKind::Unknown),
        batch_rules: String::new(),
        reason: format!(
            "Batch's description of job {job_id} cannot be read ({why}): its end was never \
             seen, and whether it succeeded is not known"
        ),
    }
}

/// An end granary never saw and cannot learn: dead-lettered with `reason`.
fn end_not_known(
    granule: GranuleProcessingEvent,
    campaign: Option<Campaign>,
    reason: String,
) -> FinishedJob {
    FinishedJob {
        granule,
        campaign,
        classification: Classification {
            outcome: super::classify::JobOutcome::NonRetryable,
            failure: Some(super::classify::FailureKind::Unknown),
            batch_rules: String::new(),
            reason,
        },
        route: Route::FailureDlq,
        spot_ends_before: None,
        listed_in: None,
    }
}

/// The JobDetail granary logs for such a job: what it knows, and that Batch said nothing.
pub fn forgotten_detail(job_id: &str, job_name: &str) -> serde_json::Value {
    serde_json::json!({
        "jobId": job_id,
        "jobName": job_name,
        "status": "UNKNOWN",
        "statusReason": "DescribeJobs no longer knows this job",
    })
}

/// The JobDetail granary logs for a job Batch describes unreadably: what granary knows, the
/// status Batch's summary gave, and where the description is kept (the log's detail stays a
/// JobDetail, the shape Athena's table reads).
pub fn undescribable_detail(
    job_id: &str,
    job_name: &str,
    status: &str,
    kept_at: &str,
) -> serde_json::Value {
    serde_json::json!({
        "jobId": job_id,
        "jobName": job_name,
        "status": status,
        "statusReason": format!("DescribeJobs answered a description granary cannot read; kept at {kept_at}"),
    })
}

/// A PROCESSING attempt the item sweeper found past its time with no job Batch knows (never
/// created, forgotten, or described as unreadable): an end like any other, logged before it is
/// routed, so that every attempt has its log before the next attempt exists (the late-success
/// check, `repositories::Logs::succeeded_attempt`, rests on it). Retried while the item's
/// attempts last (`gives_up` false: the requeuer submits the next one, or dead-letters it past
/// the attempt budget); dead-lettered once they are spent.
pub fn timed_out(
    granule: GranuleProcessingEvent,
    campaign: Option<Campaign>,
    timeout_secs: i64,
    gives_up: bool,
) -> FinishedJob {
    let (outcome, route, reason) = if gives_up {
        (
            super::classify::JobOutcome::NonRetryable,
            Route::FailureDlq,
            format!("processing timed out after {timeout_secs}s; no attempts left"),
        )
    } else {
        (
            super::classify::JobOutcome::Retryable,
            Route::RetryQueue,
            format!("processing timed out after {timeout_secs}s (timeout recovery)"),
        )
    };
    FinishedJob {
        granule,
        campaign,
        classification: Classification {
            outcome,
            failure: Some(super::classify::FailureKind::AttemptTimeout),
            batch_rules: String::new(),
            reason,
        },
        route,
        spot_ends_before: None,
        listed_in: None,
    }
}

/// The JobDetail granary logs for a timed-out attempt: its job as the record names it (none if
/// the record never learnt it), and that Batch did not describe it.
pub fn timed_out_detail(job_id: Option<&str>, job_name: &str) -> serde_json::Value {
    serde_json::json!({
        "jobId": job_id.unwrap_or(""),
        "jobName": job_name,
        "status": "UNKNOWN",
        "statusReason": "past its processing timeout and not described by DescribeJobs",
    })
}

#[cfg(test)]
mod forgotten_tests {
    use super::*;
    use crate::domain::granule::GranuleId;

    #[test]
    fn a_job_batch_forgot_is_a_final_failure_with_its_reason() {
        let granule = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap(),
            attempt: 2,
        };
        let f = forgotten_by_batch(granule.clone(), None, "job-9");
        assert_eq!((f.route, f.granule), (Route::FailureDlq, granule));
        assert_eq!(f.classification.route(), Route::FailureDlq);
        assert!(f.classification.reason.contains("job-9"));
    }

    #[test]
    fn a_job_batch_describes_unreadably_is_a_final_failure_naming_the_job_and_why() {
        let granule = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap(),
            attempt: 1,
        };
        let f = undescribable(
            granule.clone(),
            None,
            "array-7:3",
            "missing field `jobName`",
        );
        assert_eq!((f.route, f.granule), (Route::FailureDlq, granule));
        assert_eq!(f.classification.route(), Route::FailureDlq);
        let reason = &f.classification.reason;
        assert!(reason.contains("array-7:3"), "{reason}");
        assert!(reason.contains("missing field `jobName`"), "{reason}");
        let detail = undescribable_detail("array-7:3", "w", "SUCCEEDED", "rejects/x.json");
        assert_eq!(detail["status"], "SUCCEEDED");
        assert!(detail["statusReason"]
            .as_str()
            .is_some_and(|r| r.contains("rejects/x.json")));
    }

    #[test]
    fn a_timed_out_attempt_is_retried_while_attempts_last_and_dead_lettered_after() {
        let granule = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.S30.T18TYN.2022002T153012.v2.0").unwrap(),
            attempt: 3,
        };
        for (gives_up, route) in [(false, Route::RetryQueue), (true, Route::FailureDlq)] {
            let f = timed_out(granule.clone(), None, 60, gives_up);
            assert_eq!((f.route, f.classification.route()), (route, route));
            assert_eq!(
                f.classification.failure,
                Some(super::super::classify::FailureKind::AttemptTimeout)
            );
            assert!(f.classification.reason.contains("60s"), "{f:?}");
        }
        let detail = timed_out_detail(None, "g-3");
        assert_eq!(
            (detail["jobId"].as_str(), detail["jobName"].as_str()),
            (Some(""), Some("g-3"))
        );
    }
}

#[cfg(test)]
mod tests;
