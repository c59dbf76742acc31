//! Seed 004's queueing confirmation: a batch whose profile asks for it (configured in
//! `GRANARY_INGEST_QUEUED_CONFIRMATION`) tells its depositor when its jobs are queued — an
//! `Ingest Batch Queued` event and a callback — before any job is processed; other profiles are
//! told only of the completion.

use super::*;

async fn submit_as(w: &World, name: &str, profile: Option<&str>, callback: &str) -> BatchId {
    let manifest = w
        .manifest(name, &[("a.txt", "alpha"), ("b.txt", "bravo")], &[])
        .await;
    let submission = crate::domain::ingest::record::Submission {
        collection: "coll".into(),
        manifest_url: manifest,
        kind: ManifestKind::Files,
        priority: 5,
        callback: Some(callback.into()),
        profile: profile.map(str::to_owned),
        submitter: "depositor".into(),
        deposit: Default::default(),
    };
    submit(&w.ingest_ctx, submission, Utc::now())
        .await
        .unwrap()
        .id
}

#[tokio::test]
async fn a_profile_that_asks_is_told_its_jobs_are_queued_before_they_run() {
    let w = world(IngestSettings {
        queued_confirmation: vec!["confirming".into()],
        ..IngestSettings::default()
    });
    let told = submit_as(&w, "told", Some("confirming"), "http://depositor/told").await;
    let quiet = submit_as(&w, "quiet", Some("plain"), "http://depositor/quiet").await;
    // The first tick queues both batches' jobs; nothing has been processed yet.
    tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    let queued: Vec<serde_json::Value> = w
        .bus
        .events()
        .into_iter()
        .filter(|e| e.detail_type == "Ingest Batch Queued")
        .map(|e| e.detail)
        .collect();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0]["batch"], told.to_string());
    assert_eq!(queued[0]["jobs"], 2);
    assert_eq!(queued[0]["profile"], "confirming");
    assert_eq!(queued[0]["submitter"], "depositor");
    let calls = w.remote.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, "http://depositor/told");
    assert_eq!(calls[0].1["state"], "queued");
    // Both run to the end; the confirming depositor hears of the queueing first, both of the
    // completion.
    w.run(|_| true).await;
    for id in [&told, &quiet] {
        assert_eq!(w.batch(id).await.state, BatchState::Deleted);
    }
    let told_calls: Vec<String> = w
        .remote
        .calls()
        .into_iter()
        .filter(|(url, _)| url == "http://depositor/told")
        .map(|(_, body)| body["state"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(told_calls.first().map(String::as_str), Some("queued"));
    assert!(
        told_calls.iter().any(|s| s == "completed"),
        "{told_calls:?}"
    );
    assert!(!w
        .remote
        .calls()
        .iter()
        .any(|(url, body)| url == "http://depositor/quiet" && body["state"] == "queued"));
}

#[tokio::test]
async fn without_a_confirming_profile_nobody_is_told_of_the_queueing() {
    let w = world(IngestSettings::default());
    submit_as(&w, "plain", Some("confirming"), "http://depositor/p").await;
    w.run(|_| true).await;
    assert!(!w
        .bus
        .events()
        .iter()
        .any(|e| e.detail_type == "Ingest Batch Queued"));
}

/// The deposit's description reaches the processing container: each processing job carries the
/// batch's ERC metadata and submission mode in its environment.
#[tokio::test]
async fn the_processing_container_gets_the_deposits_erc_metadata_and_mode() {
    let w = world(IngestSettings::default());
    let manifest = w.manifest("erc", &[("a.txt", "alpha")], &[]).await;
    let submission = crate::domain::ingest::record::Submission {
        collection: "coll".into(),
        manifest_url: manifest,
        kind: ManifestKind::Files,
        priority: 5,
        callback: None,
        profile: None,
        submitter: "depositor".into(),
        deposit: crate::domain::ingest::record::Deposit {
            erc_who: Some("Lange, Dorothea".into()),
            erc_what: Some("Migrant Mother".into()),
            erc_when: Some("1936".into()),
            erc_where: None,
            submission_mode: crate::domain::ingest::record::SubmissionMode::Update,
        },
    };
    submit(&w.ingest_ctx, submission, Utc::now()).await.unwrap();
    w.run(|_| true).await;
    let submitted = w.jobs.submitted();
    assert_eq!(submitted.len(), 1);
    let env = &submitted[0].environment;
    assert_eq!(env["ERC_WHO"], "Lange, Dorothea");
    assert_eq!(env["ERC_WHAT"], "Migrant Mother");
    assert_eq!(env["ERC_WHEN"], "1936");
    assert!(!env.contains_key("ERC_WHERE"));
    assert_eq!(env["SUBMISSION_MODE"], "update");
}
