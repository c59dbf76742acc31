//! The published corpus of real AWS Batch events and JobDetails (`../shared/real-batch-events/`
//! beside the project; published data, read at test time and never copied here). For every file,
//! the route that its SOURCES.md table gives ("careful monitor" column) must be the route of the
//! job monitor's own decision, and the monitor must carry it out: log, then retry queue or DLQ.
//!
//! Set GRANARY_REAL_EVENTS to read the corpus from elsewhere. A missing corpus fails the test.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

// Memory-aware retries from a published failure made into the documented out-of-memory end.
#[path = "real_batch_events/out_of_memory.rs"]
mod out_of_memory;

use granary::config::Config;
use granary::domain::classify::{FailureKind, Route};
use granary::domain::job_end::{on_job_event, JobEnd};
use granary::handlers::monitor::{self, MonitorOutcome};
use granary::handlers::Ctx;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    match std::env::var_os("GRANARY_REAL_EVENTS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/real-batch-events"),
    }
}

/// What the table's "careful monitor" column says, as a route (`None`: not terminal, ignored).
fn expected_routes(sources: &str) -> BTreeMap<String, Option<Route>> {
    let mut out = BTreeMap::new();
    for line in sources.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | file | kind | status | attempts | Batch retries? | careful monitor | ...
        let file = cells[1].trim_matches('`').to_owned();
        let verdict = cells[6].trim_matches('*').to_ascii_lowercase();
        let route = if verdict.starts_with("success") {
            Some(Route::Done)
        } else if verdict.starts_with("non-retryable") {
            Some(Route::FailureDlq)
        } else if verdict.starts_with("retryable") {
            Some(Route::RetryQueue)
        } else if verdict.starts_with("not terminal") {
            None
        } else {
            panic!("SOURCES.md: unknown verdict {verdict:?} for {file}")
        };
        out.insert(file, route);
    }
    out
}

/// Step Functions returns the same JobDetail with PascalCase keys: lower the first letter of each
/// key (values untouched) to get the shape DescribeJobs and EventBridge use.
fn camel_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let mut c = k.chars();
                    let key = match c.next() {
                        Some(first) => first.to_lowercase().chain(c).collect(),
                        None => k,
                    };
                    (key, camel_keys(v))
                })
                .collect::<Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(camel_keys).collect()),
        other => other,
    }
}

/// The file as the rule would deliver it, for a job granary submitted (granule and attempt set as
/// granary sets them: job parameters besides the container environment).
fn as_granary_event(name: &str, raw: Value) -> Value {
    let raw = if name.contains("sfn-cause") {
        camel_keys(raw)
    } else {
        raw
    };
    let mut event = if raw.get("detail").is_some() {
        raw
    } else {
        json!({"detail-type": "Batch Job State Change", "source": "aws.batch", "detail": raw})
    };
    let n: String = name.chars().take(2).collect();
    let params = event["detail"]
        .as_object_mut()
        .map(|d| d.entry("parameters").or_insert_with(|| json!({})));
    let granule = format!("REAL.EVENT.{n}");
    if let Some(Value::Object(p)) = params {
        p.insert("granule_id".into(), json!(granule));
        p.insert("attempt".into(), json!("1"));
    }
    // The container environment wins over parameters: replace what another system put there
    // (HLS-VI's jobs carry their own zero-based ATTEMPT).
    if let Some(Value::Array(env)) = event["detail"]
        .get_mut("container")
        .and_then(|c| c.get_mut("environment"))
    {
        env.retain(|kv| !matches!(kv["name"].as_str(), Some("GRANULE_ID" | "ATTEMPT")));
        env.push(json!({"name": "GRANULE_ID", "value": granule}));
        env.push(json!({"name": "ATTEMPT", "value": "1"}));
    }
    event
}

fn memory_ctx() -> Ctx {
    let env = [
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
    ];
    Ctx::in_memory(Config::from_pairs(&env).expect("test config"))
}

#[tokio::test]
async fn every_published_event_gets_the_route_sources_md_gives_it() {
    let dir = corpus_dir();
    let sources = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap_or_else(|e| {
        panic!(
            "the published Batch events are expected at {} (SOURCES.md: {e}); set GRANARY_REAL_EVENTS",
            dir.display()
        )
    });
    let expected = expected_routes(&sources);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 31, "the corpus has 31 files: {files:?}");
    assert_eq!(
        files,
        expected.keys().cloned().collect::<Vec<_>>(),
        "every file has a row in SOURCES.md and every row a file"
    );

    let mut checked = 0;
    for name in &files {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let raw: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let event = as_granary_event(name, raw);
        let want = expected[name];

        // The decision, as `granary classify` prints it.
        let (_, end) = on_job_event(&event).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = match &end {
            JobEnd::NotFinished { .. } => None,
            // The published events carry granule jobs' environments (as_granary_event), never
            // an ingest job's.
            JobEnd::IngestJob { .. } => panic!("{name}: read as an ingest job: {end:?}"),
            // Nor a window claim (`array_windows_children_route_and_parents_are_ignored`).
            JobEnd::WindowChild(_) | JobEnd::ArrayParent { .. } => {
                panic!("{name}: read as an array window's job: {end:?}")
            }
            JobEnd::Finished(f) => Some(f.route),
        };
        assert_eq!(got, want, "{name}: decision {end:?}");

        // The monitor carries it out.
        let ctx = memory_ctx();
        let (retry, dlq) = (ctx.retry_queue.clone(), ctx.failure_dlq.clone());
        let out = monitor::handle_message(&ctx, &event.to_string())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let logs = ctx.store.list("logs/").await.unwrap();
        let (retried, dead) = (
            retry.depth().await.unwrap().visible,
            dlq.depth().await.unwrap().visible,
        );
        match want {
            None => {
                assert_eq!(out, MonitorOutcome::Ignored, "{name}");
                assert!(logs.is_empty() && retried + dead == 0, "{name}");
            }
            Some(Route::Done) => {
                assert!(
                    matches!(out, MonitorOutcome::Succeeded { .. }),
                    "{name}: {out:?}"
                );
                assert_eq!(logs.len(), 1, "{name}");
                assert!(logs[0].key.starts_with("logs/outcome=success/"), "{name}");
                assert_eq!(retried + dead, 0, "{name}");
            }
            Some(route) => {
                assert_eq!(out, MonitorOutcome::Routed { route }, "{name}");
                assert_eq!(logs.len(), 1, "{name}: every FAILED event is logged");
                assert!(logs[0].key.starts_with("logs/outcome=failure/"), "{name}");
                let to_retry = route == Route::RetryQueue;
                assert_eq!(
                    (retried, dead),
                    (u64::from(to_retry), u64::from(!to_retry)),
                    "{name}"
                );
            }
        }
        // The log keeps the whole JobDetail, attempts[] included.
        if let Some(meta) = logs.first() {
            let obj = ctx.store.get(&meta.key).await.unwrap().unwrap();
            let log: Value = serde_json::from_slice(&obj.body).unwrap();
            assert_eq!(
                log["job"]["attempts"], event["detail"]["attempts"],
                "{name}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 31);
}

#[test]
fn failure_kinds_of_the_cases_a_naive_rule_gets_wrong() {
    let dir = corpus_dir();
    let kind = |name: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let event = as_granary_event(name, serde_json::from_str(&text).unwrap());
        match on_job_event(&event).unwrap().1 {
            JobEnd::Finished(f) => f.classification.failure,
            other => panic!("{name}: {other:?}"),
        }
    };
    // 14: a user's termination leaves exit 137 behind; it is neither the application's nor OOM.
    assert_eq!(
        kind("14-pcluster-mnp-terminated-by-user.jobdetail.json"),
        Some(FailureKind::Cancelled)
    );
    // 15: an ECS-properties node: the exit code is on the attempt and its task containers.
    assert_eq!(
        kind("15-ecs-props-mnp-child-node-failed.json"),
        Some(FailureKind::ApplicationExit { exit_code: 1 })
    );
    // 17: Spot reclaim on Batch's last attempt; 18: no exit code, generic status reason.
    assert_eq!(
        kind("17-hlsvi-spot-host-terminated-3-attempts.jobdetail.json"),
        Some(FailureKind::SpotInterruption)
    );
    assert!(matches!(
        kind("18-sfn-cause-cannotinspectcontainer.jobdetail.json"),
        Some(FailureKind::ContainerStartup { .. })
    ));
}

/// The published array jobs as granary's array windows submit them: the parent and every child
/// carry the window claim's key (`window_claim`) and the attempt, never a granule. A child's end
/// is granule `arrayProperties.index` of the claim, routed as SOURCES.md says; a parent's end
/// (a summary of its children) routes nothing.
#[tokio::test]
async fn array_windows_children_route_and_parents_are_ignored() {
    use granary::domain::claim::JobsClaim;
    use granary::domain::granule::GranuleId;
    use granary::domain::window::WindowClaim;
    let dir = corpus_dir();
    let expected = expected_routes(&std::fs::read_to_string(dir.join("SOURCES.md")).unwrap());
    let cases = [
        (
            "03-pcluster-array-parent-succeeded.jobdetail.json",
            "parent",
        ),
        ("04-pcluster-array-child-succeeded.jobdetail.json", "child"),
        (
            "05-ofiry-array-child-succeeded-no-retrystrategy.jobdetail.json",
            "child",
        ),
        (
            "11-pcluster-array-child-exit127-failed.jobdetail.json",
            "child",
        ),
        ("12-pcluster-array-parent-failed.jobdetail.json", "parent"),
        ("29-pcluster-array-parent-pending.jobdetail.json", "parent"),
    ];
    for (name, kind) in cases {
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap();
        let job_id = raw["jobId"].as_str().unwrap().to_owned();
        let parent = job_id.split(':').next().unwrap().to_owned();
        let ctx = memory_ctx();
        let granules: Vec<GranuleId> = ["REAL.ARRAY.G0", "REAL.ARRAY.G1"]
            .iter()
            .map(|g| GranuleId::parse(g).unwrap())
            .collect();
        let claim = WindowClaim::new(
            None,
            "inventories/real.parquet",
            0,
            2,
            granules,
            "t",
            chrono::Utc::now(),
        )
        .in_array(true)
        .recording(&[Some(parent.clone())], chrono::Utc::now());
        let key = granary::domain::layout::claims::window_key(
            &ctx.config.layout.claim_prefix,
            "inventories/real.parquet",
            0,
        );
        granary::repositories::write_json(
            ctx.store.as_ref(),
            &key,
            &claim,
            granary::ports::PutCondition::IfAbsent,
        )
        .await
        .unwrap();
        let mut detail = raw;
        detail["parameters"] = json!({"window_claim": key, "attempt": "1"});
        let event = json!({"detail-type": "Batch Job State Change", "source": "aws.batch", "detail": detail});
        let (_, end) = on_job_event(&event).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = monitor::handle_message(&ctx, &event.to_string())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let logs = ctx.store.list("logs/").await.unwrap();
        let want = expected[name];
        match (kind, want) {
            ("parent", None) => {
                assert!(matches!(end, JobEnd::NotFinished { .. }), "{name}: {end:?}");
                assert_eq!(out, MonitorOutcome::Ignored, "{name}");
            }
            ("parent", Some(_)) => {
                assert!(matches!(end, JobEnd::ArrayParent { .. }), "{name}: {end:?}");
                assert_eq!(out, MonitorOutcome::ArrayParent, "{name}");
                assert!(logs.is_empty(), "{name}: a parent logs nothing");
            }
            ("child", Some(route)) => {
                let JobEnd::WindowChild(child) = &end else {
                    panic!("{name}: {end:?}")
                };
                assert_eq!((child.index, child.route), (0, route), "{name}");
                assert_eq!(logs.len(), 1, "{name}");
                assert!(
                    logs[0].key.contains("REAL.ARRAY.G0"),
                    "{name}: {}",
                    logs[0].key
                );
                let dead = ctx.failure_dlq.depth().await.unwrap().visible;
                assert_eq!(dead, u64::from(route == Route::FailureDlq), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
