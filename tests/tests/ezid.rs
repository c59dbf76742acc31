//! Minting against an EZID-compatible server on loopback (`granary_tests::ezid_server`): the
//! HTTP adapter's answers (a mint, EZID's refusal, a stall past the timeout, a 500, nothing
//! listening) and, through the ingest dispatcher itself, the rule that a mint whose answer was
//! lost is never sent again.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::http::ezid::HttpMinter;
use granary::adapters::memory::{MemoryRemote, MemoryStore};
use granary::config::ingest::EzidSettings;
use granary::domain::ingest::deposit::{parse_anvl, MINT_UNKNOWN};
use granary::domain::ingest::job::JobState;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::{Deposit, Submission};
use granary::handlers::ingest;
use granary::handlers::Ctx;
use granary::ports::{MintError, Minter, ObjectStore, PutCondition};
use granary_tests::ezid_server::{self, Answer};
use std::sync::Arc;
use std::time::Duration;

const SHOULDER: &str = "ark:/99999/fk4";

fn minter(server: &ezid_server::EzidServer, timeout: Duration) -> HttpMinter {
    HttpMinter::new(&server.url, Some(server.login.clone()), timeout)
}

#[tokio::test]
async fn a_mint_sends_anvl_with_basic_auth_and_reads_the_identifier() {
    let server = ezid_server::start(SHOULDER).await;
    let m = minter(&server, Duration::from_secs(5));
    let id = m
        .mint(
            SHOULDER,
            "_profile: erc\nerc.what: 100%25 maps\ngranary.job: b1-j00001\n",
        )
        .await
        .unwrap();
    assert_eq!(id, "ark:/99999/fk400001");
    let got = &server.received()[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, "/shoulder/ark:/99999/fk4");
    assert_eq!(
        got.content_type.as_deref(),
        Some("text/plain; charset=UTF-8")
    );
    let pairs = parse_anvl(&got.body);
    assert!(
        pairs.contains(&("erc.what".into(), "100% maps".into())),
        "{pairs:?}"
    );
    // Without the login: EZID's 401 says the configuration, not the request, is wrong: nothing
    // minted, and the job waits (tried again) rather than failing.
    let anonymous = HttpMinter::new(&server.url, None, Duration::from_secs(5));
    let e = anonymous.mint(SHOULDER, "").await.unwrap_err();
    assert!(
        matches!(&e, MintError::Unavailable(why) if why.contains("unauthorized")),
        "{e}"
    );
    assert_eq!(server.minted().len(), 1);
}

#[tokio::test]
async fn ezids_error_answer_is_a_refusal_that_minted_nothing() {
    let server = ezid_server::start(SHOULDER).await;
    server.plan(vec![Answer::Refuse("invalid shoulder".into())]);
    let e = minter(&server, Duration::from_secs(5))
        .mint(SHOULDER, "")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, MintError::Refused(why) if why.contains("invalid shoulder")),
        "{e}"
    );
    assert!(server.minted().is_empty());
    // A shoulder the server does not have: its own error, also a refusal.
    server.plan(vec![Answer::Mint]);
    let e = minter(&server, Duration::from_secs(5))
        .mint("ark:/1/nope", "")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, MintError::Refused(why) if why.contains("no such shoulder")),
        "{e}"
    );
}

#[tokio::test]
async fn a_stall_or_a_500_after_minting_is_an_unknown_answer_and_no_listener_is_not_sent() {
    let server = ezid_server::start(SHOULDER).await;
    server.plan(vec![Answer::MintAndStall(Duration::from_secs(10))]);
    let e = minter(&server, Duration::from_millis(300))
        .mint(SHOULDER, "")
        .await
        .unwrap_err();
    assert!(matches!(e, MintError::Unknown(_)), "{e}");
    assert_eq!(server.minted().len(), 1, "minted, answer lost");
    server.plan(vec![Answer::MintAndFail]);
    let e = minter(&server, Duration::from_secs(5))
        .mint(SHOULDER, "")
        .await
        .unwrap_err();
    assert!(matches!(e, MintError::Unknown(_)), "{e}");
    // Nothing listens on a port just released.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let nobody = HttpMinter::new(
        &format!("http://127.0.0.1:{port}"),
        None,
        Duration::from_secs(2),
    );
    let e = nobody.mint(SHOULDER, "").await.unwrap_err();
    assert!(matches!(e, MintError::Unavailable(_)), "{e}");
}

/// The dispatcher on in-memory S3 and a depositor's twin, minting from the loopback server.
fn dispatcher(
    server: &ezid_server::EzidServer,
    store: Arc<MemoryStore>,
    remote: Arc<MemoryRemote>,
) -> Ctx {
    let mut config = granary::config::Config::from_pairs(&[
        ("GRANARY_BUCKET", "bucket"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
        ("GRANARY_INGEST_CONTAINER_STEP", "off"),
    ])
    .unwrap();
    config.ingest.ezid = Some(EzidSettings {
        url: server.url.clone(),
        shoulder: SHOULDER.into(),
        credentials_parameter: None,
    });
    Ctx {
        store,
        remote,
        minter: Some(Arc::new(HttpMinter::new(
            &server.url,
            Some(server.login.clone()),
            Duration::from_millis(300),
        ))),
        ..Ctx::in_memory(config)
    }
}

#[tokio::test]
async fn the_dispatcher_mints_over_http_once_and_never_again_after_a_lost_answer() {
    let server = ezid_server::start(SHOULDER).await;
    let store = Arc::new(MemoryStore::new());
    let remote = Arc::new(MemoryRemote::default());
    let ingest_ctx = dispatcher(&server, store.clone(), remote.clone());
    let mut manifest = String::from("#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n");
    for n in 1..=2 {
        let url = format!("http://depositor/sheet {n}.tif");
        remote.serve(&url, bytes::Bytes::from(format!("sheet {n}")));
        manifest.push_str(&format!("{url} | | | | sheet {n}.tif | sheet-{n}\n"));
    }
    store
        .put(
            "ingest/manifests/m",
            bytes::Bytes::from(manifest),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    // The first mint succeeds, the second stalls past the timeout (minted, answer lost).
    server.plan(vec![
        Answer::Mint,
        Answer::MintAndStall(Duration::from_secs(5)),
        Answer::Mint,
    ]);
    let batch = ingest::submit(
        &ingest_ctx,
        Submission {
            collection: "maps".into(),
            manifest_url: "s3://bucket/ingest/manifests/m".into(),
            kind: ManifestKind::Files,
            priority: 5,
            callback: None,
            profile: None,
            submitter: "t".into(),
            deposit: Deposit {
                erc_what: Some("Sheets".into()),
                ..Deposit::default()
            },
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    for _ in 0..20 {
        ingest::tick(&ingest_ctx, chrono::Utc::now()).await.unwrap();
    }
    let job = |n| {
        let ingest_ctx = &ingest_ctx;
        let id = batch.id.job(n);
        async move { ingest_ctx.ingest().job(&id).await.unwrap().unwrap().value }
    };
    let (one, two) = (job(1).await, job(2).await);
    assert_eq!(one.identifier.as_deref(), Some("ark:/99999/fk400001"));
    assert!(
        matches!(one.state, JobState::Completed | JobState::Deleted),
        "{}",
        one.reason
    );
    assert_eq!(two.state, JobState::Failed);
    assert!(two.reason.starts_with(MINT_UNKNOWN), "{}", two.reason);
    // Twenty ticks and a plain resume later, still two mints: the lost one never again.
    ingest::operator::resume(
        &ingest_ctx,
        std::slice::from_ref(&two.id),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    for _ in 0..5 {
        ingest::tick(&ingest_ctx, chrono::Utc::now()).await.unwrap();
    }
    assert_eq!(
        ingest_ctx
            .ingest()
            .job(&two.id)
            .await
            .unwrap()
            .unwrap()
            .value
            .state,
        JobState::Storing,
        "waits while a pass may be minting"
    );
    // A lease later no pass can be: the outcome is unknown, the job fails again.
    let lease = chrono::Duration::from_std(ingest_ctx.config.leases.claim_lease).unwrap();
    ingest::tick(&ingest_ctx, chrono::Utc::now() + lease)
        .await
        .unwrap();
    assert_eq!(
        ingest_ctx
            .ingest()
            .job(&two.id)
            .await
            .unwrap()
            .unwrap()
            .value
            .state,
        JobState::Failed
    );
    assert_eq!(server.minted().len(), 2);
    // What EZID minted for job two names it; the operator resumes with it.
    let minted = server.minted()[1].clone();
    let sent = &server.received()[1].body;
    assert!(
        parse_anvl(sent).contains(&("granary.job".into(), two.id.to_string())),
        "{sent}"
    );
    ingest::operator::resume_with_mint(
        &ingest_ctx,
        &two.id,
        &granary::domain::ingest::deposit::MintFix::Identifier(minted.clone()),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    for _ in 0..10 {
        ingest::tick(&ingest_ctx, chrono::Utc::now()).await.unwrap();
    }
    let two = job(2).await;
    assert_eq!(two.identifier.as_deref(), Some(minted.as_str()));
    assert!(
        matches!(two.state, JobState::Completed | JobState::Deleted),
        "{}",
        two.reason
    );
    assert_eq!(server.minted().len(), 2);
    // A file name with a space, copied into storage under the identifier.
    let folder = granary::domain::ingest::deposit::storage_name(
        Some("ark:/99999/fk400001"),
        one.id.as_str(),
    );
    let stored = store
        .list(&format!(
            "ingest/storage/collection=maps/{folder}/producer/"
        ))
        .await
        .unwrap();
    assert_eq!(stored[0].key.rsplit('/').next(), Some("sheet 1.tif"));
}
