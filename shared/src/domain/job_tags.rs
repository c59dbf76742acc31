//! What a Batch job carries that names its work, read back from its detail (an event, or
//! DescribeJobs). Every job granary submits names its granule and attempt in the container
//! environment (`GRANULE_ID`, `ATTEMPT`: what the container reads) and as job parameters
//! (`granule_id`, `attempt`: visible in the console, and in DescribeJobs for a job submitted by
//! hand); an ingest job's processing job names its ingest job (`INGEST_JOB_ID`). The names are
//! defined here, where they are read; `contracts::job` and `contracts::ingest` write them.

use super::batch_event::JobDetail;
use super::campaign::Campaign;
use super::granule::{GranuleId, GranuleProcessingEvent, InvalidGranuleId};
use super::poison::RawText;

pub const GRANULE_ID_ENV: &str = "GRANULE_ID";
pub const ATTEMPT_ENV: &str = "ATTEMPT";
pub const GRANULE_ID_PARAM: &str = "granule_id";
pub const ATTEMPT_PARAM: &str = "attempt";

/// An array window's job names its window claim, not a granule: every child of an array job
/// has the parent's environment and parameters, and only its index (`AWS_BATCH_JOB_ARRAY_INDEX`
/// in the container, `arrayProperties.index` in its events) tells them apart. The container
/// reads granule `index` of the claim at `s3://bucket/key` (docs/array-windows.md); the monitor
/// reads it from the `window_claim` parameter (the key in granary's bucket).
pub const WINDOW_CLAIM_ENV: &str = "GRANARY_WINDOW_CLAIM";
pub const WINDOW_CLAIM_PARAM: &str = "window_claim";
/// The window claim's token ([`crate::domain::window::WindowClaim::token`]), a parameter and an
/// environment variable: what AWS documents a child's detail to carry is its id
/// (`<parent>:<index>`) and `arrayProperties.index`; the published children carry their parent's
/// environment, and nothing published shows whether they carry its parameters.
pub const WINDOW_TOKEN_PARAM: &str = "window_token";
pub const WINDOW_TOKEN_ENV: &str = "GRANARY_WINDOW_TOKEN";

/// How many of the granule's earlier attempts ended for capacity (`domain::attempt_budget`): a
/// parameter of a retried attempt's job (absent: none), read back from its end by the monitor.
pub const SPOT_ENDS_PARAM: &str = "spot_ends";

/// The capacity ends a job says came before it (its `spot_ends` parameter), from its detail as
/// an event or DescribeJobs gives it; 0 when it carries none. A value granary did not write (not
/// a number) counts as none, and says so in the log: the budget then starts over, never stops a
/// granule early.
pub fn spot_ends_before(detail: &serde_json::Value) -> u32 {
    let Some(raw) = detail["parameters"][SPOT_ENDS_PARAM].as_str() else {
        return 0;
    };
    raw.parse().unwrap_or_else(|_| {
        tracing::warn!(
            value = raw,
            "a job's spot_ends parameter is not a number: counted as 0"
        );
        0
    })
}

/// A named campaign's job carries its name (`domain::campaign`): the container reads the
/// environment variable, the monitor the parameter (else the variable).
pub const CAMPAIGN_ENV: &str = "GRANARY_CAMPAIGN";
pub const CAMPAIGN_PARAM: &str = "campaign";

/// The environment variable that marks a Batch job as an ingest job's processing job (the job
/// monitor leaves those to the ingest dispatcher).
pub const INGEST_JOB_ENV: &str = "INGEST_JOB_ID";

/// Why a job's tags name no work granary can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnusableJobTags {
    #[error("neither {GRANULE_ID_ENV} in the environment nor a {GRANULE_ID_PARAM} parameter")]
    NoGranule,
    #[error(transparent)]
    InvalidGranule(#[from] InvalidGranuleId),
    #[error("neither {ATTEMPT_ENV} in the environment nor an {ATTEMPT_PARAM} parameter")]
    NoAttempt,
    /// The attempt as the job carries it.
    #[error("attempt {0} is not a positive integer")]
    InvalidAttempt(RawText),
    /// The campaign name as the job carries it.
    #[error("it names campaign {}, which is no campaign name", .0.shown())]
    InvalidCampaign(RawText),
}

/// The granule and attempt a job was submitted for: its container environment, else its
/// parameters. `Err(why)` when the job carries none that granary can use.
pub fn granule_of(job: &JobDetail) -> Result<GranuleProcessingEvent, UnusableJobTags> {
    let id = job
        .env(GRANULE_ID_ENV)
        .or(job.parameters.get(GRANULE_ID_PARAM).map(String::as_str))
        .ok_or(UnusableJobTags::NoGranule)?;
    let attempt = attempt_of(job)?;
    let granule_id = GranuleId::parse(id)?;
    Ok(GranuleProcessingEvent {
        granule_id,
        attempt,
    })
}

/// Where an array window's job (parent or child) says its window claim is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRef {
    /// The claim's key in granary's bucket.
    pub key: String,
    /// The bucket the job names, when it is named only by the environment's `s3://` URI.
    pub bucket: Option<String>,
    /// The claim's token, when the job carries it.
    pub token: Option<String>,
}

/// The window claim an array window's job names, if it is one: its `window_claim` parameter,
/// else its `GRANARY_WINDOW_CLAIM` environment variable (a child's detail has its parent's
/// environment: the published parent 03 and child 04 carry the same; nothing published shows
/// whether it has the parameters too).
pub fn window_claim_of(job: &JobDetail) -> Option<WindowRef> {
    let token = job
        .parameters
        .get(WINDOW_TOKEN_PARAM)
        .cloned()
        .or_else(|| job.env(WINDOW_TOKEN_ENV).map(str::to_owned))
        .filter(|t| !t.is_empty());
    if let Some(key) = job
        .parameters
        .get(WINDOW_CLAIM_PARAM)
        .filter(|k| !k.is_empty())
    {
        return Some(WindowRef {
            key: key.clone(),
            bucket: None,
            token,
        });
    }
    let (bucket, key) = job
        .env(WINDOW_CLAIM_ENV)?
        .strip_prefix("s3://")?
        .split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then(|| WindowRef {
        key: key.to_owned(),
        bucket: Some(bucket.to_owned()),
        token,
    })
}

/// The attempt a job names (its environment, else its parameters), as a positive integer.
pub fn attempt_of(job: &JobDetail) -> Result<u32, UnusableJobTags> {
    let attempt = job
        .env(ATTEMPT_ENV)
        .or(job.parameters.get(ATTEMPT_PARAM).map(String::as_str))
        .ok_or(UnusableJobTags::NoAttempt)?;
    attempt
        .parse::<u32>()
        .ok()
        .filter(|a| *a >= 1)
        .ok_or_else(|| UnusableJobTags::InvalidAttempt(RawText::of(attempt)))
}

/// The campaign a job belongs to: its `campaign` parameter, else `GRANARY_CAMPAIGN` in its
/// environment; neither: the unnamed campaign's. `Err(why)` for a name no campaign can have.
pub fn campaign_of(job: &JobDetail) -> Result<Option<Campaign>, UnusableJobTags> {
    job.parameters
        .get(CAMPAIGN_PARAM)
        .map(String::as_str)
        .or_else(|| job.env(CAMPAIGN_ENV))
        .filter(|name| !name.is_empty())
        .map(|name| {
            Campaign::parse(name).map_err(|_| UnusableJobTags::InvalidCampaign(RawText::of(name)))
        })
        .transpose()
}

/// The ingest job a Batch job processes, if it is one.
pub fn ingest_job_of(job: &JobDetail) -> Option<&str> {
    job.env(INGEST_JOB_ENV)
}
