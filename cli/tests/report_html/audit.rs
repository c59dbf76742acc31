//! `granary audit` on a campaign with planted gaps (#65 item 1): a granule whose logs were lost,
//! a success whose product is absent and one whose product is empty, a product no inventory row
//! explains, a granule with two successes. Each list holds exactly the planted granules; the
//! dead letters are exactly the failure DLQ's granules, as `granary redrive --all --dry-run`
//! finds them there; the sort spills to disk; and resuming from the missing list brings the lost
//! granule round, so a second audit finds nothing missing. On the in-memory twins.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::audit::AuditList;
use granary::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use granary::handlers::redrive::{redrive, RedriveFilter, RedriveOptions};
use granary::handlers::resume::{resume_listed, ListedAttempt};
use granary::ports::PutCondition;
use granary_cli::ops::audit::{self, lists::read_list};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn listed(dir: &Path, list: AuditList) -> BTreeSet<String> {
    for ext in ["csv", "parquet"] {
        let at = dir.join(format!("{}.{ext}", list.name()));
        let rows = read_list(&at).unwrap();
        let ids: BTreeSet<String> = rows.iter().map(|r| r.granule_id.clone()).collect();
        if ext == "parquet" {
            let csv = read_list(&dir.join(format!("{}.csv", list.name()))).unwrap();
            assert_eq!(
                rows,
                csv,
                "{}: the two formats hold the same rows",
                list.name()
            );
            return ids;
        }
    }
    unreachable!()
}

async fn dlq_granules(
    ctx: &granary::handlers::Ctx,
    only: Option<&BTreeSet<String>>,
) -> BTreeSet<String> {
    let filter = RedriveFilter {
        granules: only.map(|o| o.iter().cloned().collect()),
        campaign: only.map(|_| None),
        ..RedriveFilter::default()
    };
    let opts = RedriveOptions {
        dry_run: true,
        visibility_secs: 1,
        ..RedriveOptions::default()
    };
    let s = redrive(
        ctx.failure_dlq.as_ref(),
        ctx.retry_queue.as_ref(),
        &filter,
        &opts,
        &|_| {},
    )
    .await
    .unwrap();
    s.matched.into_iter().map(|m| m.granule_id).collect()
}

/// The command's lists as (list, granule, attempt) rows.
fn command_rows(dir: &Path) -> BTreeSet<(String, String, u32)> {
    let mut rows = BTreeSet::new();
    for list in AuditList::ALL {
        for r in read_list(&dir.join(format!("{}.csv", list.name()))).unwrap() {
            rows.insert((list.name().to_owned(), r.granule_id, r.attempt.unwrap()));
        }
    }
    rows
}

/// The tables copied out of the store (logs three partitions deep, the inventories' Parquet
/// files, a listing of the products as an S3 Inventory report's rows), and the SQL's rows.
async fn duckdb_rows(ctx: &granary::handlers::Ctx, dir: &Path) -> BTreeSet<(String, String, u32)> {
    let store = ctx.store.clone();
    let prefix = &ctx.config.layout.log_prefix;
    let logs = dir.join("tables/logs");
    for meta in store.list(prefix).await.unwrap() {
        let key = LogKey::parse(prefix, &meta.key).unwrap();
        let parts: Vec<&str> = meta.key[prefix.len()..].split('/').collect();
        let folder = logs.join(parts[0]).join(parts[1]).join(parts[2]);
        std::fs::create_dir_all(&folder).unwrap();
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        std::fs::write(
            folder.join(format!("{}__a{}.json", key.granule_id, key.attempt)),
            &body,
        )
        .unwrap();
    }
    let inventories = dir.join("tables/inventories");
    std::fs::create_dir_all(&inventories).unwrap();
    for (i, meta) in store
        .list(&ctx.config.layout.inventory_prefix)
        .await
        .unwrap()
        .iter()
        .enumerate()
    {
        let body = store.get(&meta.key).await.unwrap().unwrap().body;
        std::fs::write(inventories.join(format!("{i}.parquet")), &body).unwrap();
    }
    let mut listing = String::from("bucket,key,size,last_modified_date,dt\n");
    for meta in store.list("products/").await.unwrap() {
        listing.push_str(&format!(
            "b,{},{},2026-12-07 00:00:00,2026-12-07-01-00\n",
            meta.key, meta.size
        ));
    }
    let products = dir.join("tables/products.csv");
    std::fs::write(&products, listing).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv-sql/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `scripts/sql.sh install` (make test does)",
        python.display()
    );
    let out = std::process::Command::new(python)
        .arg(root.join("scripts/athena_check.py"))
        .arg("audit")
        .args([&logs, &inventories, &products])
        .args([
            &ctx.config.attempt_budget.retries.to_string(),
            "products/{id}.tif",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, String, u32)> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_lists_exactly_the_planted_gaps_and_its_missing_list_reruns() {
    let mut spec = CampaignSpec {
        granules: 120,
        plan: FaultPlan {
            seed: 7,
            spot_rate: 0.25,
            app_failure_rate: 0.05,
            timeout_rate: 0.0,
            pull_error_rate: 0.0,
            ..FaultPlan::default()
        },
        batch_attempts: 1,
        ..CampaignSpec::default()
    };
    spec.env.push(("GRANARY_MAX_RETRIES".into(), "1".into()));
    spec.env.push(("GRANARY_ITEM_RECORDS".into(), "off".into()));
    let mut c = Campaign::in_memory(&spec).await.unwrap();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let mut ctx = c.runtime.ctx.clone();
    ctx.config.importer.product_keys = vec!["products/{id}.tif".into()];
    let store = ctx.store.clone();
    let prefix = ctx.config.layout.log_prefix.clone();

    // The successes, from the logs themselves.
    let mut successes: BTreeMap<String, (LogKey, String)> = BTreeMap::new();
    for meta in store.list(&prefix).await.unwrap() {
        let key = LogKey::parse(&prefix, &meta.key).unwrap();
        if key.outcome != LogOutcome::Success {
            continue;
        }
        let body = store.get(&meta.key).await.unwrap().unwrap();
        let record: LogRecord = serde_json::from_slice(&body.body).unwrap();
        if record.superseded.is_none() {
            successes.insert(key.granule_id.to_string(), (key, meta.key.clone()));
        }
    }
    assert!(successes.len() > 60, "{} successes", successes.len());
    let picked: Vec<String> = successes.keys().take(4).cloned().collect();
    let (lost, absent, empty, twice) = (&picked[0], &picked[1], &picked[2], &picked[3]);

    // Products for every success but `absent`; `empty`'s has no bytes; one nobody asked for.
    for id in successes.keys().filter(|id| *id != absent) {
        let body = if id == empty {
            Vec::new()
        } else {
            b"tif".to_vec()
        };
        let key = format!("products/{id}.tif");
        store
            .put(&key, body.into(), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    let orphan = "HLS.S30.T99ZZZ.2022001T000000.v2.0";
    store
        .put(
            &format!("products/{orphan}.tif"),
            b"x".to_vec().into(),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    // `lost`'s logs gone; `twice`'s success logged again at another attempt.
    for meta in store.list(&prefix).await.unwrap() {
        if LogKey::parse(&prefix, &meta.key)
            .unwrap()
            .granule_id
            .as_str()
            == lost
        {
            store.delete(&meta.key).await.unwrap();
        }
    }
    let (twice_key, twice_raw) = &successes[twice];
    let again = LogKey {
        attempt: 7,
        ..twice_key.clone()
    }
    .to_key(&prefix);
    let body = store.get(twice_raw).await.unwrap().unwrap().body;
    let mut record: serde_json::Value = serde_json::from_slice(&body).unwrap();
    record["attempt"] = 7.into();
    let body = serde_json::to_vec(&record).unwrap();
    store
        .put(&again, body.into(), PutCondition::Overwrite)
        .await
        .unwrap();

    let out = tempfile::tempdir().unwrap();
    let summary = audit::audit(&ctx, out.path(), 4096, &|_| {}).await.unwrap();
    assert!(summary.runs > 1, "the sort spilled: {} runs", summary.runs);
    assert_eq!(summary.read.rows, 120);
    let one = |id: &str| BTreeSet::from([id.to_owned()]);
    assert_eq!(listed(out.path(), AuditList::Missing), one(lost));
    assert_eq!(
        listed(out.path(), AuditList::ProductMissing),
        BTreeSet::from([absent.clone(), empty.clone()])
    );
    assert_eq!(listed(out.path(), AuditList::OrphanProduct), one(orphan));
    assert_eq!(listed(out.path(), AuditList::Doubled), one(twice));
    let dead = listed(out.path(), AuditList::DeadLetter);
    assert!(
        !dead.is_empty(),
        "the fault plan dead-letters some granules"
    );
    assert_eq!(
        dead,
        dlq_granules(&ctx, None).await,
        "the DLQ's granules, exactly"
    );
    assert_eq!(
        dlq_granules(&ctx, Some(&dead)).await,
        dead,
        "redrive --from-list takes them"
    );
    let standings = &summary.judged.standings;
    assert_eq!(
        standings["succeeded"] + standings["dead_lettered"] + standings["missing"],
        120
    );
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(on_disk["judged"]["standings"]["missing"], 1);

    // athena/audit/audit_lists.sql, on DuckDB over a copy of the same tables, gives the rows.
    assert_eq!(
        duckdb_rows(&ctx, out.path()).await,
        command_rows(out.path())
    );

    // The missing list rerun: a dry run sends nothing, the run sends the lost granule round.
    let rows: Vec<ListedAttempt> = read_list(&out.path().join("missing.csv"))
        .unwrap()
        .into_iter()
        .map(|r| ListedAttempt {
            granule_id: granary::domain::granule::GranuleId::parse(&r.granule_id).unwrap(),
            attempt: r.attempt,
        })
        .collect();
    let dry = resume_listed(&ctx, &rows, true).await.unwrap();
    assert_eq!(dry.sent.len(), 1);
    assert_eq!(ctx.retry_queue.depth().await.unwrap().visible, 0);
    let sent = resume_listed(&ctx, &rows, false).await.unwrap();
    assert_eq!(
        (sent.sent[0].item_id.as_str(), sent.sent[0].next_attempt),
        (lost.as_str(), 2)
    );
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let again = tempfile::tempdir().unwrap();
    let after = audit::audit(&ctx, again.path(), 1 << 20, &|_| {})
        .await
        .unwrap();
    assert!(
        listed(again.path(), AuditList::Missing).is_empty(),
        "{:?}",
        after.judged
    );
    assert_eq!(after.judged.standings.get("missing"), None);
}
