//! athena/ checked by real engines: every file parses as Athena SQL (sqlglot), and the views and
//! report queries, transpiled to DuckDB and run over the logs a campaign left in the emulator,
//! give exactly the numbers `granary report --scan` gives for the same logs.
//! `granary report --athena` is run as it is, against Athena's query API served on loopback over
//! the same DuckDB tables: the statements it sends must be athena/'s text, its numbers the scan's.
//! The engines come from PyPI into .venv-sql (`scripts/sql.sh install`, run by `make test`).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary_cli::ops::report;
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use granary_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let p = std::env::var_os("GRANARY_SQL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-sql/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: run `scripts/sql.sh install` (make test does)",
        p.display()
    );
    p
}

fn check(args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(root().join("scripts/athena_check.py"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running athena_check.py: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "athena_check.py {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_athena_file_parses_as_athena_sql() {
    let out = check(&["parse"]);
    let files = out.lines().filter(|l| l.starts_with("ok")).count();
    assert!(files >= 11, "{out}");
}

/// Granules in the campaign the SQL is checked on: enough for every outcome and platform the
/// plan below makes, several times over (each costs the emulator a few dozen calls).
const GRANULES: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_on_the_sql_gives_the_numbers_report_scan_gives() {
    let (clients, iam) = clients().await;
    let mut spec = CampaignSpec {
        granules: GRANULES,
        inventories: 1,
        plan: FaultPlan {
            seed: 11,
            spot_rate: 0.2,
            app_failure_rate: 0.08,
            app_exit_code: 3,
            timeout_rate: 0.02,
            ..FaultPlan::default()
        },
        batch_attempts: 1,
        env: vec![("GRANARY_MAX_RETRIES".into(), "1".into())],
        ..CampaignSpec::default()
    };
    spec.runner.deadline = Duration::from_secs(600);
    let mut c = Campaign::setup(&clients, &iam, &unique_name("sql"), &spec)
        .await
        .unwrap();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let store = c.runtime.ctx.store.clone();
    let prefix = c.runtime.ctx.config.layout.log_prefix.clone();
    // One success a re-validation found wanting (`granary revalidate`), revoked as the importer
    // revokes it: both engines count it as its attempt's failure, for the re-validation's reason.
    const REVOKED: &str = "re-validation failed: product products/x.tif is missing";
    let logs = granary::repositories::logs::Logs::new(store.as_ref(), &prefix);
    let mut revoked = None;
    for meta in store.list(&prefix).await.unwrap() {
        let key = granary::domain::layout::logs::LogKey::parse(&prefix, &meta.key).unwrap();
        if key.outcome == granary::domain::layout::logs::LogOutcome::Success && key.attempt == 1 {
            // A failure a later success superseded has nothing of its own to revoke: None.
            revoked = logs.revoke_success(&key, REVOKED).await.unwrap();
            if revoked.is_some() {
                break;
            }
        }
    }
    assert_eq!(revoked, Some(1), "a first attempt's success to revoke");

    // A local copy of logs/, three partition levels deep like the table's partitions, and the
    // S3 Inventory reports of logs/ as S3 would write them: an older report holding half the
    // keys, the latest holding all (the job logs table must read the latest only).
    let dir = std::env::temp_dir().join(unique_name("logs"));
    let mut copied = 0;
    let listed = store.list(&prefix).await.unwrap();
    let mut inventory = String::from("bucket,key,size,last_modified_date,dt\n");
    for (i, meta) in listed.iter().enumerate() {
        let modified = meta.last_modified.unwrap().format("%Y-%m-%d %H:%M:%S");
        let row = |dt: &str| format!("b,{},{},{modified},{dt}\n", meta.key, meta.size);
        inventory.push_str(&row("2026-11-23-01-00"));
        if i % 2 == 0 {
            inventory.push_str(&row("2026-11-22-01-00"));
        }
    }
    // What the job logs table must say, from the listing itself: by (outcome, platform), log
    // objects and distinct granules.
    let mut by_key: std::collections::BTreeMap<
        (String, String),
        (u64, std::collections::BTreeSet<String>),
    > = Default::default();
    for meta in &listed {
        let key = granary::domain::layout::logs::LogKey::parse(&prefix, &meta.key).unwrap();
        let platform = meta
            .key
            .split("platform=")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        let e = by_key
            .entry((key.outcome.as_str().to_owned(), platform.to_owned()))
            .or_default();
        e.0 += 1;
        e.1.insert(key.granule_id.to_string());
    }
    std::fs::create_dir_all(&dir).unwrap();
    let inventory_csv = dir.join("inventory.csv");
    std::fs::write(&inventory_csv, inventory).unwrap();
    let logs_dir = dir.join("logs");
    for meta in &listed {
        let key = granary::domain::layout::logs::LogKey::parse(&prefix, &meta.key).unwrap();
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        let rel = &meta.key[prefix.len()..];
        let parts: Vec<&str> = rel.split('/').collect();
        let folder = logs_dir.join(parts[0]).join(parts[1]).join(parts[2]);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join(format!("{}__a{}.json", key.granule_id, key.attempt)),
            &body,
        )
        .unwrap();
        copied += 1;
    }
    assert!(copied >= GRANULES, "{copied} logs");

    // The item history as granary wrote it (one entry an object, or a window's as JSON lines)
    // and the records, each holding the entries of its latest write; the steps the domain reads
    // from the same entries.
    let items_dir = dir.join("item-state");
    let history_prefix = c.runtime.ctx.config.layout.item_prefixes.history.clone();
    let mut entries: Vec<granary::domain::item::HistoryEntry> = Vec::new();
    for meta in store.list(&history_prefix).await.unwrap() {
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        let path = items_dir
            .join("history")
            .join(&meta.key[history_prefix.len()..]);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &body).unwrap();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            entries.push(serde_json::from_slice(line).unwrap());
        }
    }
    let records_prefix = c.runtime.ctx.config.layout.item_prefixes.items.clone();
    std::fs::create_dir_all(items_dir.join("items")).unwrap();
    let mut held = 0;
    for meta in store.list(&records_prefix).await.unwrap() {
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        std::fs::write(
            items_dir
                .join("items")
                .join(&meta.key[records_prefix.len()..]),
            &body,
        )
        .unwrap();
        let record: granary::domain::item::ItemRecord = serde_json::from_slice(&body).unwrap();
        if record.in_batch_state() {
            continue;
        }
        for entry in granary::domain::item::HistoryEntry::held_by(&record) {
            if !entries
                .iter()
                .any(|e| e.item_id == entry.item_id && e.seq == entry.seq)
            {
                held += 1;
                entries.push(entry);
            }
        }
    }
    assert!(
        held >= GRANULES,
        "every ended granule's record holds its end: {held}"
    );
    let mut by_item: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for e in entries {
        by_item.entry(e.item_id.to_string()).or_default().push(e);
    }
    let mut want_steps: Vec<serde_json::Value> = by_item
        .values()
        .flat_map(|h| granary::domain::item_steps::steps_of(h, "items/"))
        .map(|s| {
            serde_json::json!({"id": s.id, "name": s.name, "type": s.step_type.as_str(),
                "step_complete": s.step_complete, "ended_in": s.ended_in.map(|e| e.to_string())})
        })
        .collect();
    want_steps.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));

    let scanned = report::scan(store.as_ref(), &prefix, &|_, _| {})
        .await
        .unwrap();
    let revoked_reason = scanned
        .failures_by_reason
        .iter()
        .find(|r| r.reason == REVOKED);
    assert_eq!(
        revoked_reason.map(|r| r.granules),
        Some(1),
        "{:?}",
        scanned.failures_by_reason
    );
    let mut engine: serde_json::Value = serde_json::from_str(&check(&[
        "run",
        logs_dir.to_str().unwrap(),
        inventory_csv.to_str().unwrap(),
        items_dir.to_str().unwrap(),
    ]))
    .unwrap();
    let from_inventory = engine
        .as_object_mut()
        .unwrap()
        .remove("from_inventory")
        .unwrap();
    let steps = engine
        .as_object_mut()
        .unwrap()
        .remove("item_steps")
        .unwrap();
    // The compute report: the same hours `granary report --cost` prices, from the same logs.
    let usage = engine
        .as_object_mut()
        .unwrap()
        .remove("compute_usage")
        .unwrap();
    let facts = report::scan_facts(store.as_ref(), &prefix, &|_, _| {})
        .await
        .unwrap();
    let cost = granary::domain::report::cost_of_logs(
        &facts,
        granary::domain::cost::ComputePrices {
            vcpu_hour: 1.0,
            gib_hour: 0.0,
        },
        granary::domain::cost::OWN_COST_RECORDS_ON,
    );
    let row = &usage[0];
    assert_eq!(row["jobs"], cost.jobs, "{row}");
    assert_eq!(row["jobs_without_usage"], cost.jobs_without_usage, "{row}");
    let close = |name: &str, want: f64| {
        let got = row[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} in {row}"));
        assert!(
            (got - want).abs() <= 1e-9 * want.max(1.0),
            "{name}: DuckDB {got}, report --cost {want}"
        );
    };
    assert!(
        cost.vcpu_hours > 0.0 && cost.retried_compute_dollars > 0.0,
        "{cost:?}"
    );
    close("vcpu_hours", cost.vcpu_hours);
    close("gib_hours", cost.gib_hours);
    // At $1 a vCPU-hour and nothing for memory, the retried compute is the retried vCPU-hours.
    close("retried_vcpu_hours", cost.retried_compute_dollars);
    assert!(
        want_steps.len() >= GRANULES
            && want_steps
                .iter()
                .any(|s| s["ended_in"] == "PROCESSING_FAILED"),
        "a processing step per granule at least, some failed: {}",
        want_steps.len()
    );
    assert_eq!(
        steps,
        serde_json::Value::Array(want_steps),
        "the granary_item_steps view vs domain::item_steps over the same history"
    );
    let want: Vec<serde_json::Value> = by_key
        .iter()
        .map(|((outcome, platform), (objects, granules))| {
            serde_json::json!({"outcome": outcome, "platform": platform,
                "log_objects": objects, "granules": granules.len()})
        })
        .collect();
    assert_eq!(
        from_inventory["log_keys_by_outcome"],
        serde_json::Value::Array(want),
        "the job logs table vs the listing of logs/"
    );
    assert!(
        from_inventory["log_keys_by_acquisition_year"]
            .as_array()
            .is_some_and(|rows| rows.len() >= 2),
        "{from_inventory}"
    );
    let ours = serde_json::to_value(&scanned).unwrap();
    // Something to compare: successes, failures for more than one reason, several years.
    assert!(
        scanned.failures_by_reason.len() >= 2,
        "{:?}",
        scanned.failures_by_reason
    );
    assert!(scanned.granules_by_platform_outcome.len() >= 3);
    for name in ours.as_object().unwrap().keys() {
        assert_eq!(ours[name], engine[name], "report {name}: scan vs DuckDB");
    }
    assert_eq!(ours, engine);

    // `granary report --athena` itself, talking to Athena's API served on loopback over the
    // same tables: the statements it sends are the athena/ files' text, and its reports are
    // the scan's.
    let queries = dir.join("queries.jsonl");
    let athena = AthenaOnLoopback::start(&logs_dir, &inventory_csv, &items_dir, &queries);
    let target = report::AthenaTarget {
        workgroup: "granary-operators".into(),
        database: "granary".into(),
        output: None,
    };
    let from_athena = report::athena(&athena.client().await, &target, &root().join("athena"))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&from_athena).unwrap(),
        ours,
        "report --athena vs report --scan"
    );
    let sent: Vec<serde_json::Value> = std::fs::read_to_string(&queries)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let files = [
        "views/granary_latest_outcome",
        "views/granary_current_failures",
        "reports/granules_by_platform_outcome",
        "reports/granules_by_acquisition_year",
        "reports/failures_by_reason",
        "reports/successes_per_day",
        "reports/successes_per_acquisition_month",
    ];
    assert_eq!(sent.len(), files.len(), "{sent:?}");
    for (query, file) in sent.iter().zip(files) {
        let text = std::fs::read_to_string(root().join(format!("athena/{file}.sql"))).unwrap();
        assert_eq!(
            query["sql"].as_str().unwrap(),
            text.trim().trim_end_matches(';'),
            "{file}: the command sends the file's text"
        );
        assert_eq!(query["work_group"], "granary-operators");
        assert_eq!(query["database"], "granary");
    }
    drop(athena);
    std::fs::remove_dir_all(&dir).ok();
}

/// `athena_check.py serve`: Athena's query API on 127.0.0.1 over DuckDB; stopped (by its PID)
/// when dropped.
struct AthenaOnLoopback {
    child: std::process::Child,
    port: u16,
}

impl AthenaOnLoopback {
    fn start(logs: &Path, inventory: &Path, items: &Path, queries: &Path) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(python())
            .arg(root().join("scripts/athena_check.py"))
            .arg("serve")
            .args([logs, inventory, items, queries])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting athena_check.py serve: {e}"));
        let mut first = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .unwrap();
        let port = first
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                child.kill().ok();
                panic!("athena_check.py serve said {first:?}, not its port")
            });
        Self { child, port }
    }

    /// A client made as granary makes its SDK clients, pointed at this server.
    async fn client(&self) -> aws_sdk_athena::Client {
        let endpoint = format!("http://127.0.0.1:{}", self.port);
        aws_sdk_athena::Client::new(&granary::adapters::aws::load_sdk_config_for(&endpoint).await)
    }
}

impl Drop for AthenaOnLoopback {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The ingest catalog's table and report over what recording wrote: a batch of five objects in
/// one collection and two in another, run through the dispatcher on the in-memory twins (an
/// identifier minted for each but one the depositor named); the report for `maps` must count
/// exactly that collection's records.
#[tokio::test]
async fn the_ingest_catalog_report_counts_what_recording_wrote() {
    use granary::adapters::memory::{MemoryMinter, MemoryRemote, MemoryStore};
    use granary::domain::ingest::manifest::ManifestKind;
    use granary::domain::ingest::record::Submission;
    use granary::handlers::ingest;
    use granary::ports::{ObjectStore, PutCondition};
    use std::sync::Arc;
    let store = Arc::new(MemoryStore::new());
    let remote = Arc::new(MemoryRemote::default());
    let mut config = granary::config::Config::from_pairs(&[
        ("GRANARY_BUCKET", "bucket"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
        ("GRANARY_INGEST_CONTAINER_STEP", "off"),
    ])
    .unwrap();
    config.ingest.ezid = Some(granary::config::ingest::EzidSettings {
        url: "https://ezid.example".into(),
        shoulder: "ark:/99999/fk4".into(),
        credentials_parameter: None,
    });
    let ingest_ctx = granary::handlers::Ctx {
        store: store.clone(),
        remote: remote.clone(),
        minter: Some(Arc::new(MemoryMinter::default())),
        ..granary::handlers::Ctx::in_memory(config)
    };
    for (collection, objects) in [("maps", 5), ("plans", 2)] {
        let mut text = String::from("#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier | mrt:primaryIdentifier\n");
        for n in 0..objects {
            for f in 0..=n % 2 {
                let url = format!("http://depositor/{collection}/{n}/{f}.tif");
                remote.serve(&url, bytes::Bytes::from("x".repeat(10 + n + f)));
                let primary = if n == 0 { "ark:/1/given" } else { "" };
                text.push_str(&format!(
                    "{url} | | | | {f}.tif | {collection}-{n} | {primary}\n"
                ));
            }
        }
        let key = format!("ingest/manifests/{collection}");
        store
            .put(&key, bytes::Bytes::from(text), PutCondition::Overwrite)
            .await
            .unwrap();
        ingest::submit(
            &ingest_ctx,
            Submission {
                collection: collection.into(),
                manifest_url: format!("s3://bucket/{key}"),
                kind: ManifestKind::Files,
                priority: 5,
                callback: None,
                profile: None,
                submitter: "t".into(),
                deposit: Default::default(),
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    }
    for _ in 0..20 {
        ingest::tick(&ingest_ctx, chrono::Utc::now()).await.unwrap();
    }
    // The catalog as recording wrote it, copied out; what the report must say, from it.
    let dir = std::env::temp_dir().join(unique_name("catalog"));
    let (mut objects, mut files, mut bytes, mut identified) = (0u64, 0u64, 0u64, 0u64);
    for meta in store.list("ingest/catalog/").await.unwrap() {
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        let path = dir.join(&meta.key["ingest/catalog/".len()..]);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &body).unwrap();
        let record: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if record["collection"] == "maps" {
            objects += 1;
            files += record["file_count"].as_u64().unwrap();
            bytes += record["bytes"].as_u64().unwrap();
            identified += u64::from(record["identifier"].is_string());
        }
    }
    // Five objects of one or two files each, and each object's ERC and Dublin Core files.
    assert_eq!((objects, files), (5, 7 + 5 * 2));
    assert_eq!(identified, 5, "four minted, one the depositor's");
    let out: serde_json::Value =
        serde_json::from_str(&check(&["catalog", dir.to_str().unwrap(), "maps"])).unwrap();
    let row = &out["ingest_objects_of_collection"][0];
    assert_eq!(row["collection"], "maps");
    assert_eq!(row["objects"], objects);
    assert_eq!(row["files"], files);
    assert_eq!(row["bytes"], bytes);
    assert_eq!(row["identified"], identified);
    assert_eq!(
        out["ingest_objects_of_collection"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    std::fs::remove_dir_all(&dir).ok();
}
