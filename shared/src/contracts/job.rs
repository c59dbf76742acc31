//! The Batch job contract, as granary writes it: every job names its granule and attempt in the
//! container environment and as job parameters ([`job_request`]); the names, and reading them
//! back from an event or DescribeJobs, are the domain's (`domain::job_tags`).

use crate::domain::campaign::Campaign;
use crate::domain::claim::Placement;
use crate::domain::granule::GranuleId;
use crate::domain::job_tags::{
    ATTEMPT_ENV, ATTEMPT_PARAM, CAMPAIGN_ENV, CAMPAIGN_PARAM, GRANULE_ID_ENV, GRANULE_ID_PARAM,
    SPOT_ENDS_PARAM, WINDOW_CLAIM_ENV, WINDOW_CLAIM_PARAM, WINDOW_TOKEN_ENV, WINDOW_TOKEN_PARAM,
};
use crate::ports::JobRequest;
use std::collections::BTreeMap;

/// The SubmitJob request for (granule, attempt) of `campaign` under its deterministic job name.
pub fn job_request(
    job_name: &str,
    campaign: Option<&Campaign>,
    granule: &GranuleId,
    attempt: u32,
) -> JobRequest {
    with_campaign(
        campaign,
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
            array_size: None,
            queue: None,
            memory_mib: None,
        },
    )
}

/// The request placed as its claim says (`domain::claim::Placement`): on its queue, and, when
/// earlier attempts ended for capacity, with their count as the `spot_ends` parameter.
pub fn placed(mut request: JobRequest, placement: &Placement) -> JobRequest {
    if placement.spot_ends > 0 {
        request
            .parameters
            .insert(SPOT_ENDS_PARAM.to_owned(), placement.spot_ends.to_string());
    }
    request.queue = placement.job_queue.clone();
    if let Some(mib) = placement.memory_mib {
        request.memory_mib = Some(mib);
        request.parameters.insert(
            crate::domain::memory::MEMORY_PARAM.to_owned(),
            mib.to_string(),
        );
    }
    request
}

/// A named campaign's job says whose it is: the `campaign` parameter (read back by the monitor,
/// `job_tags::campaign_of`) and `GRANARY_CAMPAIGN` for the container (which may write its
/// products under a campaign's own prefix). The unnamed campaign's jobs carry neither.
fn with_campaign(campaign: Option<&Campaign>, mut request: JobRequest) -> JobRequest {
    if let Some(c) = campaign {
        request
            .environment
            .insert(CAMPAIGN_ENV.to_owned(), c.to_string());
        request
            .parameters
            .insert(CAMPAIGN_PARAM.to_owned(), c.to_string());
    }
    request
}

/// The SubmitJob request of an array window: `size` children, child `i` processing granule `i`
/// of the window claim at `claim_key` in `bucket` (whose token is `token`), at `attempt`
/// (docs/array-windows.md).
pub fn window_job_request(
    job_name: &str,
    campaign: Option<&Campaign>,
    bucket: &str,
    claim_key: &str,
    token: Option<&str>,
    size: u32,
    attempt: u32,
) -> JobRequest {
    let mut parameters = BTreeMap::from([
        (WINDOW_CLAIM_PARAM.to_owned(), claim_key.to_owned()),
        (ATTEMPT_PARAM.to_owned(), attempt.to_string()),
    ]);
    if let Some(token) = token {
        parameters.insert(WINDOW_TOKEN_PARAM.to_owned(), token.to_owned());
    }
    let mut environment = BTreeMap::from([
        (
            WINDOW_CLAIM_ENV.to_owned(),
            format!("s3://{bucket}/{claim_key}"),
        ),
        (ATTEMPT_ENV.to_owned(), attempt.to_string()),
    ]);
    if let Some(token) = token {
        environment.insert(WINDOW_TOKEN_ENV.to_owned(), token.to_owned());
    }
    let request = JobRequest {
        job_name: job_name.to_owned(),
        environment,
        parameters,
        array_size: Some(size),
        queue: None,
        memory_mib: None,
    };
    with_campaign(campaign, request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::batch_event::JobDetail;
    use crate::domain::granule::GranuleProcessingEvent;
    use crate::domain::job_tags::granule_of;

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
        let request = job_request("n", None, &id, 3);
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
    fn a_named_campaign_is_written_into_the_job_and_read_back_from_either_place() {
        use crate::domain::job_tags::campaign_of;
        let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
        let v2 = Campaign::parse("v2").unwrap();
        let request = job_request("n", Some(&v2), &id, 1);
        let params = serde_json::to_value(&request.parameters).unwrap();
        assert_eq!(
            campaign_of(&detail(serde_json::json!([]), params)),
            Ok(Some(v2.clone()))
        );
        let env: Vec<_> = request
            .environment
            .iter()
            .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
            .collect();
        assert_eq!(
            campaign_of(&detail(env.into(), serde_json::json!({}))),
            Ok(Some(v2.clone()))
        );
        let window = window_job_request("w", Some(&v2), "b", "k", None, 3, 1);
        assert_eq!(window.parameters[CAMPAIGN_PARAM], "v2");
        assert_eq!(window.environment[CAMPAIGN_ENV], "v2");
        // The unnamed campaign's jobs are as they always were.
        let plain = job_request("n", None, &id, 1);
        assert!(!plain.parameters.contains_key(CAMPAIGN_PARAM));
        let params = serde_json::to_value(&plain.parameters).unwrap();
        assert_eq!(
            campaign_of(&detail(serde_json::json!([]), params)),
            Ok(None)
        );
        let bad = campaign_of(&detail(
            serde_json::json!([]),
            serde_json::json!({"campaign": "../x"}),
        ));
        assert!(bad.unwrap_err().to_string().contains("no campaign name"));
    }

    #[test]
    fn a_job_without_the_contract_or_with_attempt_zero_is_refused_with_the_reason() {
        let none = granule_of(&detail(serde_json::json!([]), serde_json::json!({})));
        assert!(none.unwrap_err().to_string().contains("GRANULE_ID"));
        let zero = granule_of(&detail(
            serde_json::json!([{"name": "GRANULE_ID", "value": "G"}, {"name": "ATTEMPT", "value": "0"}]),
            serde_json::json!({}),
        ));
        assert!(zero
            .unwrap_err()
            .to_string()
            .contains("not a positive integer"));
    }
}
