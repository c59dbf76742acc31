//! The Batch job contract: every job granary submits names its granule and attempt in the
//! container environment (`GRANULE_ID`, `ATTEMPT`, what the container reads) and as job parameters
//! (`granule_id`, `attempt`, visible in the console and in DescribeJobs for a job submitted by
//! hand). [`job_request`] writes it; [`granule_of`] reads it back from an event or DescribeJobs.

use crate::domain::batch_event::JobDetail;
use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
use crate::domain::poison::RawText;
use crate::ports::JobRequest;
use std::collections::BTreeMap;

pub const GRANULE_ID_ENV: &str = "GRANULE_ID";
pub const ATTEMPT_ENV: &str = "ATTEMPT";
pub const GRANULE_ID_PARAM: &str = "granule_id";
pub const ATTEMPT_PARAM: &str = "attempt";

/// The SubmitJob request for (granule, attempt) under its deterministic job name.
pub fn job_request(job_name: &str, granule: &GranuleId, attempt: u32) -> JobRequest {
    JobRequest {
        job_name: job_name.to_owned(),
        environment: BTreeMap::from([
            (GRANULE_ID_ENV.to_owned(), granule.to_string()),
            (ATTEMPT_ENV.to_owned(), attempt.to_string()),
        ]),
        parameters: BTreeMap::from([
            (GRANULE_ID_PARAM.to_owned(), granule.to_string()),
            (ATTEMPT_PARAM.to_owned(), attempt.to_string()),
        ]),
    }
}

/// The granule and attempt a job was submitted for: its container environment, else its
/// parameters. `Err(why)` when the job carries none that granary can use.
pub fn granule_of(job: &JobDetail) -> Result<GranuleProcessingEvent, String> {
    let id = job
        .env(GRANULE_ID_ENV)
        .or(job.parameters.get(GRANULE_ID_PARAM).map(String::as_str))
        .ok_or_else(|| {
            format!(
                "neither {GRANULE_ID_ENV} in the environment nor a {GRANULE_ID_PARAM} parameter"
            )
        })?;
    let attempt = job
        .env(ATTEMPT_ENV)
        .or(job.parameters.get(ATTEMPT_PARAM).map(String::as_str))
        .ok_or_else(|| {
            format!("neither {ATTEMPT_ENV} in the environment nor an {ATTEMPT_PARAM} parameter")
        })?;
    let granule_id = GranuleId::parse(id).map_err(|e| e.to_string())?;
    let attempt = attempt
        .parse::<u32>()
        .ok()
        .filter(|a| *a >= 1)
        .ok_or_else(|| format!("attempt {} is not a positive integer", RawText::of(attempt)))?;
    Ok(GranuleProcessingEvent {
        granule_id,
        attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(environment: serde_json::Value, parameters: serde_json::Value) -> JobDetail {
        serde_json::from_value(serde_json::json!({
            "jobName": "n", "jobId": "j-1", "jobQueue": "q", "status": "FAILED",
            "parameters": parameters,
            "container": {"environment": environment},
        }))
        .unwrap()
    }

    #[test]
    fn what_is_written_is_read_back_from_the_environment_and_from_the_parameters() {
        let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
        let request = job_request("n", &id, 3);
        let env: Vec<_> = request
            .environment
            .iter()
            .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
            .collect();
        let want = GranuleProcessingEvent {
            granule_id: id.clone(),
            attempt: 3,
        };
        assert_eq!(
            granule_of(&detail(env.into(), serde_json::json!({}))),
            Ok(want.clone())
        );
        let params = serde_json::to_value(&request.parameters).unwrap();
        assert_eq!(granule_of(&detail(serde_json::json!([]), params)), Ok(want));
    }

    #[test]
    fn a_job_without_the_contract_or_with_attempt_zero_is_refused_with_the_reason() {
        let none = granule_of(&detail(serde_json::json!([]), serde_json::json!({})));
        assert!(none.unwrap_err().contains("GRANULE_ID"));
        let zero = granule_of(&detail(
            serde_json::json!([{"name": "GRANULE_ID", "value": "G"}, {"name": "ATTEMPT", "value": "0"}]),
            serde_json::json!({}),
        ));
        assert!(zero.unwrap_err().contains("not a positive integer"));
    }
}
