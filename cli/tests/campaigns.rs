//! `granary report --scan --compare` against the emulator, as an operator runs it after
//! reprocessing: two campaigns' logs in one bucket (the unnamed campaign's at the root, `v2`'s
//! under `campaigns/v2/`), read back through S3 and compared granule by granule.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use common::{granary, json};
use granary::adapters::aws::AwsClients;
use granary::adapters::aws::S3Store;
use granary::domain::classify::{Classification, FailureKind, JobOutcome, Route};
use granary::domain::granule::{GranuleId, IdParser};
use granary::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use granary::ports::{ObjectStore, PutCondition};

/// The log the job monitor writes for `granule`'s `attempt` under `log_prefix`.
async fn logged(store: &S3Store, log_prefix: &str, granule: &str, attempt: u32, ok: bool) {
    let id = GranuleId::parse(granule).unwrap();
    let outcome = if ok {
        LogOutcome::Success
    } else {
        LogOutcome::Failure
    };
    let record = LogRecord {
        granule_id: id.clone(),
        attempt,
        outcome,
        classification: Classification {
            outcome: if ok {
                JobOutcome::Success
            } else {
                JobOutcome::NonRetryable
            },
            failure: (!ok).then_some(FailureKind::ApplicationExit { exit_code: 2 }),
            batch_rules: String::new(),
            reason: if ok { "succeeded" } else { "exit code 2" }.into(),
        },
        route: if ok { Route::Done } else { Route::FailureDlq },
        job_id: format!("job-{granule}-{attempt}"),
        job_name: format!("n-{attempt}"),
        logged_at: chrono::Utc::now(),
        routed_at: None,
        superseded: None,
        revoked: None,
        job: serde_json::json!({}),
        spot_ends_before: None,
    };
    let key = LogKey::new(outcome, &IdParser::hls().facts(&id), &id, attempt).to_key(log_prefix);
    let body = serde_json::to_vec(&record).unwrap();
    store
        .put(&key, body.into(), PutCondition::Overwrite)
        .await
        .unwrap();
}

#[tokio::test]
async fn two_campaigns_compare_granule_by_granule_and_side_by_side() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let bucket = common::bucket(&clients, format!("gt-campaigns-{}", std::process::id())).await;
    let store = S3Store::new(clients.s3.clone(), &bucket);
    let g = [
        "HLS.S30.T18TYN.2022002T153012.v2.0",
        "HLS.L30.T18TYN.2022001T153012.v2.0",
        "HLS.S30.T18TYP.2022003T153012.v2.0",
        "HLS.S30.T18TYQ.2022004T153012.v2.0",
    ];
    // The first campaign: g0 and g1 succeed, g2 fails; g3 was never run.
    logged(&store, "logs/", g[0], 1, true).await;
    logged(&store, "logs/", g[1], 1, true).await;
    logged(&store, "logs/", g[2], 1, false).await;
    // The reprocessing, v2: g0 still succeeds, g1 now fails (a regression), g2 is fixed, g3 runs.
    let v2 = "campaigns/v2/logs/";
    logged(&store, v2, g[0], 1, true).await;
    logged(&store, v2, g[1], 1, false).await;
    logged(&store, v2, g[2], 1, true).await;
    logged(&store, v2, g[3], 1, true).await;

    let vars = [
        ("GRANARY_BUCKET", bucket.as_str()),
        ("GRANARY_CAMPAIGN", "v2"),
    ];
    let out = json(&vars, &["report", "--scan", "--compare", "-"]);
    assert_eq!(out["campaigns"], serde_json::json!(["v2", "(unnamed)"]));
    let changes = out["outcome_changes"].as_array().unwrap();
    let moved = |from: &str, to: &str| -> Vec<String> {
        changes
            .iter()
            .find(|c| c["from"] == from && c["to"] == to)
            .map(|c| {
                c["examples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // From v2 (this campaign) to the unnamed one.
    assert_eq!(moved("success", "success"), vec![g[0]]);
    assert_eq!(moved("failure", "success"), vec![g[1]]);
    assert_eq!(moved("success", "failure"), vec![g[2]]);
    assert_eq!(moved("success", "not run"), vec![g[3]]);
    assert_eq!(out["reports"][0]["failures_by_reason"][0]["granules"], 1);

    // The tables: the changes first, then each section with both campaigns' counts.
    let (code, text, err) = granary(&vars, &["report", "--scan", "--compare", "-"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("first campaign to second"), "{text}");
    assert!(
        text.contains("(unnamed)") && text.contains("change"),
        "{text}"
    );
    let (code, csv, err) = granary(&vars, &["report", "--scan", "--compare", "-", "--csv"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        csv.contains("# outcome_changes\nv2,(unnamed),granules,for example\n"),
        "{csv}"
    );

    // Comparing a campaign with itself, or a name no campaign can have, is refused.
    let (code, _, err) = granary(&vars, &["report", "--scan", "--compare", "v2"]);
    assert_eq!(code, 2);
    assert!(err.contains("name another"), "{err}");
    let (code, _, err) = granary(&vars, &["report", "--scan", "--compare", "V2"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a campaign name"), "{err}");
    // --compare reads logs: it needs --scan.
    let (code, _, err) = granary(&vars, &["report", "--athena", "--compare", "-"]);
    assert_ne!(code, 0);
    assert!(err.contains("--scan"), "{err}");
}
