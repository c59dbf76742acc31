use super::*;

#[test]
fn an_ingest_processing_job_is_classified_for_its_ingest_job_not_rejected() {
    let ev = event(
        "FAILED",
        json!([{"name": "INGEST_JOB_ID", "value": "b1-j00001"}]),
    );
    let (_, end) = on_job_event(&ev).unwrap();
    let JobEnd::IngestJob {
        job_id,
        ingest_job,
        classification,
        ..
    } = end
    else {
        panic!("{end:?}")
    };
    assert_eq!((job_id.as_str(), ingest_job.as_str()), ("j-1", "b1-j00001"));
    assert_eq!(classification.route(), Route::FailureDlq, "exit code 3");
}
use serde_json::json;

/// A job's campaign is its parameter, else its environment; a window child lacking both
/// has its claim's key say it; a name no campaign can have is rejected with the reason.
#[test]
fn an_end_is_its_jobs_campaigns() {
    let v2 = crate::domain::campaign::Campaign::parse("v2").unwrap();
    let with = |params: serde_json::Value, env: serde_json::Value| {
        json!({"detail-type": "Batch Job State Change", "source": "aws.batch",
               "detail": {"jobName": "n", "jobId": "j-1", "jobQueue": "q",
                          "status": "SUCCEEDED", "attempts": [{"container": {"exitCode": 0}}],
                          "parameters": params, "container": {"environment": env}}})
    };
    let granule = env("HLS.S30.T01GBH.2022226T214921.v2.0", "1");
    let (_, end) = on_job_event(&with(json!({"campaign": "v2"}), granule.clone())).unwrap();
    let JobEnd::Finished(f) = end else {
        panic!("{end:?}")
    };
    assert_eq!(f.campaign, Some(v2.clone()));
    let (_, end) = on_job_event(&with(json!({}), granule.clone())).unwrap();
    let JobEnd::Finished(f) = end else {
        panic!("{end:?}")
    };
    assert_eq!(f.campaign, None, "no campaign named: the unnamed one's");
    let bad = on_job_event(&with(json!({"campaign": "V2/x"}), granule)).unwrap_err();
    assert!(bad.to_string().contains("no campaign name"), "{bad}");
    // A child whose details carry only its claim's URI: the key says the campaign.
    let child = json!({"detail-type": "Batch Job State Change", "source": "aws.batch",
        "detail": {"jobName": "w", "jobId": "p:1", "jobQueue": "q", "status": "SUCCEEDED",
                   "attempts": [{"container": {"exitCode": 0}}], "arrayProperties": {"index": 1},
                   "container": {"environment": [
                       {"name": "GRANARY_WINDOW_CLAIM",
                        "value": "s3://b/campaigns/v2/claims/windows/k.json"},
                       {"name": "ATTEMPT", "value": "1"}]}}});
    let (_, end) = on_job_event(&child).unwrap();
    let JobEnd::WindowChild(c) = end else {
        panic!("{end:?}")
    };
    assert_eq!(c.campaign, Some(v2));
}

fn event(status: &str, env: serde_json::Value) -> serde_json::Value {
    json!({"detail-type": "Batch Job State Change", "source": "aws.batch",
           "detail": {"jobName": "n", "jobId": "j-1", "jobQueue": "q", "status": status,
                      "statusReason": "Essential container in task exited",
                      "attempts": [{"container": {"exitCode": 3}}],
                      "container": {"environment": env}}})
}

fn env(id: &str, attempt: &str) -> serde_json::Value {
    json!([{"name": "GRANULE_ID", "value": id}, {"name": "ATTEMPT", "value": attempt}])
}

/// A child names its window claim by its parameters, or — its detail carrying only its
/// parent's environment — by the `s3://` URI there; its index by `arrayProperties.index`,
/// or by its id's `:N`. The parent, with the same claim and a size, routes nothing.
#[test]
fn an_array_windows_child_names_its_claim_and_index_and_its_parent_nothing() {
    let child = |params: serde_json::Value, env: serde_json::Value, array: serde_json::Value| {
        json!({"detail-type": "Batch Job State Change", "source": "aws.batch",
               "detail": {"jobName": "w", "jobId": "p:4", "jobQueue": "q",
                          "status": "SUCCEEDED", "attempts": [{"container": {"exitCode": 0}}],
                          "parameters": params, "arrayProperties": array,
                          "container": {"environment": env}}})
    };
    let env = json!([{"name": "GRANARY_WINDOW_CLAIM", "value": "s3://b/claims/windows/k.json"},
                     {"name": "ATTEMPT", "value": "1"}]);
    let (_, end) = on_job_event(&child(json!({}), env.clone(), json!({"index": 4}))).unwrap();
    let JobEnd::WindowChild(c) = end else {
        panic!("{end:?}")
    };
    assert_eq!(
        (
            c.claim_key.as_str(),
            c.claim_bucket.as_deref(),
            c.index,
            c.attempt
        ),
        ("claims/windows/k.json", Some("b"), 4, 1)
    );
    let params = json!({"window_claim": "claims/windows/k.json", "window_token": "t",
                        "attempt": "1"});
    let (_, end) = on_job_event(&child(params.clone(), json!([]), json!(null))).unwrap();
    let JobEnd::WindowChild(c) = end else {
        panic!("{end:?}")
    };
    assert_eq!(
        (c.index, c.claim_bucket, c.claim_token.as_deref()),
        (4, None, Some("t"))
    );
    let mut parent = child(params, json!([]), json!({"size": 5}));
    parent["detail"]["jobId"] = "p".into();
    parent["detail"]["status"] = "FAILED".into();
    parent["detail"]["statusReason"] = "Array Child Job failed".into();
    let (_, end) = on_job_event(&parent).unwrap();
    assert!(matches!(end, JobEnd::ArrayParent { .. }), "{end:?}");
}

#[test]
fn a_failed_job_is_finished_and_routed() {
    let (_, end) = on_job_event(&event("FAILED", env("G.1", "2"))).unwrap();
    let JobEnd::Finished(f) = end else {
        panic!("{end:?}")
    };
    assert_eq!(f.granule.attempt, 2);
    assert_eq!(f.route, Route::FailureDlq);
}

#[test]
fn unfinished_jobs_are_ignored_even_without_a_granule() {
    let (_, end) = on_job_event(&event("RUNNABLE", json!([]))).unwrap();
    assert!(matches!(
        end,
        JobEnd::NotFinished {
            status: JobStatus::Runnable,
            ..
        }
    ));
}

#[test]
fn permanent_errors_are_rejections_with_a_reason() {
    let no_env = on_job_event(&event("FAILED", json!([]))).unwrap_err();
    assert_eq!(no_env.kind(), RejectKind::EventWithoutGranule);
    let bad_attempt = on_job_event(&event("FAILED", env("G.1", "-1"))).unwrap_err();
    assert!(bad_attempt.to_string().contains("not a positive integer"));
    let bad_id = on_job_event(&event("SUCCEEDED", env("a/b", "1"))).unwrap_err();
    assert!(bad_id.to_string().contains("'/'"));
    let long = "x".repeat(100_000);
    let long_attempt = on_job_event(&event("FAILED", env("G.1", &long))).unwrap_err();
    assert!(long_attempt.to_string().len() < 400, "reasons stay short");
    let wrong = on_job_event(&json!({"detail-type": "x", "source": "aws.ec2", "detail": {}}));
    assert_eq!(wrong.unwrap_err().kind(), RejectKind::UnreadableEvent);
}
