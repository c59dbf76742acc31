//! IAM proven by use. Every handler path the crash-point harness drives (each scenario without a
//! crash and with a crash at each of its calls, then the platform's recovery) runs with the
//! environment `infra/template.yaml` gives each function, and every call is recorded as the IAM
//! action and resource ARN AWS checks for it (`adapters::tap::access_log`). Then both ways:
//! - every access a function needed is allowed by its role's statements in the template, as IAM
//!   matches them (wildcards, resources resolved for the stack) — what moto never checks;
//! - every (action, resource) a statement grants is needed by some call: least privilege.
//!
//! The job monitor's calls for ingest jobs' processing ends come from the ingest run
//! (`platform::ingest`), whose other functions `iam_ingest.rs` checks.
//!
//! Not covered here: the permissions Lambda itself uses for a function (its SQS event source's
//! receive/delete, its log group), which SAM adds with the event source and the execution role.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use granary::adapters::tap::access_log::Access;
use granary::adapters::tap::faults::{CrashMode, CrashPoint};
use granary_template::{check_role, wildcard, Statement};
use platform::{run, stack, Function, ALL};
use std::collections::{BTreeMap, BTreeSet};

/// Every access each function needed across all scenarios, crashed and not.
async fn accesses_by_function() -> BTreeMap<Function, BTreeSet<Access>> {
    let mut used: BTreeMap<Function, BTreeSet<Access>> = BTreeMap::new();
    let mut collect = |w: &platform::World| {
        for (f, log) in &w.logs {
            used.entry(*f).or_default().extend(log.accesses());
        }
    };
    for scenario in ALL {
        let (w, _, calls, settled) = run(scenario, None).await;
        settled.unwrap();
        collect(&w);
        for at_call in 1..=calls {
            for mode in [CrashMode::Before, CrashMode::After] {
                let (w, _, _, settled) = run(scenario, Some(CrashPoint { at_call, mode })).await;
                settled.unwrap();
                collect(&w);
            }
        }
    }
    // Every scenario again with the stack running a named campaign from the start: its state
    // lives under campaigns/<name>/, which the template grants apart from the root's.
    let named = || granary::domain::campaign::Campaign::parse("v7").ok();
    for scenario in ALL {
        let (w, _, calls, settled) = platform::run_in(scenario, named(), None).await;
        settled.unwrap();
        collect(&w);
        for at_call in 1..=calls {
            for mode in [CrashMode::Before, CrashMode::After] {
                let crash = Some(CrashPoint { at_call, mode });
                let (w, _, _, settled) = platform::run_in(scenario, named(), crash).await;
                settled.unwrap();
                collect(&w);
            }
        }
    }
    // The feeder's one-by-one record path: a record that appeared between the feeder's look for
    // known granules and its window's records (the importer made it meanwhile). No scenario
    // reaches that instant, so its calls are made here, as the feeder makes them.
    for campaign in [None, named()] {
        use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
        use granary::domain::item::NewItem;
        let w = platform::world_in(platform::Scenario::Feeder, campaign);
        let feeder = w.as_fn(Function::Feeder);
        let id = GranuleId::parse("HLS.S30.T18TYN.2022099T153012.v2.0").unwrap();
        feeder
            .items()
            .create(NewItem::ready(id.clone(), "imported meanwhile", None), "t")
            .await
            .unwrap();
        granary::handlers::item_sync::submitted(
            &feeder,
            &GranuleProcessingEvent::first(id),
            "job-raced",
            Some("inventories/0001.parquet#row=9".into()),
            "queue-feeder",
        )
        .await
        .unwrap();
        collect(&w);
    }
    // A record moved many times with the import step's own context: each move writes the
    // entries the record held out as history objects, whoever makes it, so the import step's
    // history grant is used here whatever the scenarios' records do.
    for campaign in [None, named()] {
        use granary::domain::item::{Change, NewItem};
        use granary::domain::lifecycle::ItemState::{Processing, ProcessingFailed, Ready};
        let w = platform::world_in(platform::Scenario::ImportStep, campaign);
        let step = w.as_fn(Function::ImportStep);
        let items = step.items();
        let id = granary::domain::granule::GranuleId::parse("HLS.S30.T18TYN.2022099T153012.v2.0")
            .unwrap();
        items
            .create(NewItem::ready(id.clone(), "imported", None), "t")
            .await
            .unwrap();
        let mut written = 0;
        for to in [Processing, ProcessingFailed, Ready]
            .into_iter()
            .cycle()
            .take(12)
        {
            items
                .advance(&id, "t", |_| Some(Change::to(to, "moved")))
                .await
                .unwrap();
            written = w
                .importer_ctx
                .store
                .list(&step.config.layout.item_prefixes.history)
                .await
                .unwrap()
                .len();
        }
        assert!(written >= 8, "{written} history objects");
        collect(&w);
    }
    // Discovery while an array window of first attempts runs: its granules have no record yet,
    // so discovery reads the window's claim. No scenario discovers during one: made here.
    for campaign in [None, named()] {
        use granary::domain::layout::claims::window_key;
        use granary::domain::window::WindowClaim;
        use granary::ports::PutCondition;
        let w = platform::world_in(platform::Scenario::Discover, campaign);
        let discover = w.as_fn(Function::Discover);
        let layout = &discover.config.layout;
        let granules = platform::BACKFILL
            .iter()
            .map(|g| granary::domain::granule::GranuleId::parse(g).unwrap())
            .collect();
        let claim = WindowClaim::new(
            None,
            "inventories/0001.parquet",
            0,
            2,
            granules,
            "t",
            chrono::Utc::now(),
        )
        .in_array(true)
        .with_records_at_end(true);
        let body = bytes::Bytes::from(serde_json::to_vec(&claim).unwrap());
        for (key, body) in [
            (window_key(&layout.claim_prefix, &claim.inventory, 0), body),
            (
                window_key(&layout.open_claim_prefix, &claim.inventory, 0),
                bytes::Bytes::new(),
            ),
        ] {
            w.importer_ctx
                .store
                .put(&key, body, PutCondition::Overwrite)
                .await
                .unwrap();
        }
        granary::handlers::importer::discover::discover(&discover)
            .await
            .unwrap();
        collect(&w);
    }
    // The spend cap's hold (`granary pace`): a feeder run with a budget already spent reads the
    // pace beside its tracker and holds itself. No scenario sets a pace: made here.
    for campaign in [None, named()] {
        let w = platform::world_in(platform::Scenario::Feeder, campaign);
        let feeder = w.as_fn(Function::Feeder);
        let spent = granary::domain::pace::Pace {
            budget_dollars: Some(0.001),
            deadline: None,
            dollars_per_granule: 0.01,
            measured_over: 0,
            set_at: granary::clock::now(),
            set_by: "t".into(),
        };
        // Written as the operator's command writes it, with the feeder's store.
        feeder.pace().write(&spent).await.unwrap();
        let event = granary::handlers::feeder::FeederEvent {
            granule_submit_count: 5,
        };
        let ran = granary::handlers::feeder::run(&feeder, event)
            .await
            .unwrap();
        assert!(ran.early_exit.unwrap_or_default().contains("spend cap"));
        collect(&w);
    }
    // The automatic brake's hold: no scenario ends enough jobs to judge, so the monitor's
    // calls are made here as it makes them — the hold placed, then found placed.
    for campaign in [None, named()] {
        use granary::domain::brake::{BrakeSettings, EndKind};
        let w = platform::world_in(platform::Scenario::MonitorFailure, campaign);
        let mut monitor = w.as_fn(Function::Monitor);
        monitor.config.brake = BrakeSettings {
            window: 4,
            min_ends: 1,
            application_percent: Some(50.0),
            ..BrakeSettings::default()
        };
        for _ in 0..2 {
            granary::handlers::monitor::brake(&monitor, EndKind::Application, "g: exit 1".into())
                .await;
        }
        let hold = monitor
            .hold()
            .read()
            .await
            .unwrap()
            .expect("the brake held the feeder");
        assert_eq!(hold.evidence, vec!["g: exit 1"]);
        collect(&w);
    }
    let ingest = platform::ingest::ingest_needs().await;
    used.entry(Function::Monitor)
        .or_default()
        .extend(ingest[platform::ingest::MONITOR].iter().cloned());
    used
}

#[tokio::test(start_paused = true)]
async fn every_call_is_granted_and_every_grant_is_used() {
    let used = accesses_by_function().await;
    let (_, resolved) = stack();
    let mut problems = Vec::new();
    for f in Function::ALL {
        let statements = resolved
            .function(f.logical_id())
            .and_then(|f| f.statements())
            .unwrap();
        let needed = used.get(&f).cloned().unwrap_or_default();
        assert!(!needed.is_empty(), "{f:?} made no call in any scenario");
        let pairs = needed.iter().map(|a| (a.action, a.resource.as_str()));
        let check = check_role(&statements, pairs).unwrap();
        let id = f.logical_id();
        for n in check.not_granted {
            problems.push(format!("{id} needs {n} and its role does not grant it"));
        }
        for u in check.unused {
            problems.push(format!("{id} is granted {u} and no call uses it"));
        }
    }
    if std::env::var_os("GRANARY_IAM_SHOW").is_some() {
        for (f, accesses) in &used {
            let patterns: BTreeSet<String> = accesses
                .iter()
                .map(|a| {
                    let r = match a.resource.split_once(":::") {
                        Some((_, path)) => match path.split_once('/') {
                            Some((b, k)) => format!("{b}/{}/*", k.split('/').next().unwrap_or("")),
                            None => path.to_owned(),
                        },
                        None => a.resource.clone(),
                    };
                    format!("{} {r}", a.action)
                })
                .collect();
            println!(
                "{}:\n  {}",
                f.logical_id(),
                patterns.into_iter().collect::<Vec<_>>().join("\n  ")
            );
        }
    }
    let mut report: Vec<String> = used
        .iter()
        .map(|(f, a)| format!("{}: {} distinct accesses", f.logical_id(), a.len()))
        .collect();
    report.sort();
    println!("{}", report.join("\n"));
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The check itself: a role missing a grant a call needs is caught, and so is a grant no call
/// uses (the test above cannot pass by matching everything).
#[test]
fn the_check_catches_a_missing_and_an_unused_grant() {
    let statement = |action: &str, resource: &str| Statement {
        allow: true,
        actions: vec![action.into()],
        resources: vec![resource.into()],
        condition: None,
    };
    let role = [
        statement("s3:GetObject", "arn:aws:s3:::b/logs/*"),
        statement("s3:PutObject", "arn:aws:s3:::b/raw/*"),
    ];
    let used = [
        ("s3:GetObject", "arn:aws:s3:::b/logs/x.json"),
        ("s3:GetObject", "arn:aws:s3:::b/holds/feeder.json"),
    ];
    let check = check_role(&role, used.iter().copied()).unwrap();
    assert_eq!(
        check.not_granted,
        ["s3:GetObject on arn:aws:s3:::b/holds/feeder.json"]
    );
    assert_eq!(check.unused, ["s3:PutObject on arn:aws:s3:::b/raw/*"]);
    assert!(!wildcard("arn:aws:s3:::b/raw/*", "arn:aws:s3:::b/logs/x"));
    let conditioned = Statement {
        condition: Some("{}".into()),
        ..statement("s3:GetObject", "*")
    };
    assert!(check_role(&[conditioned], used.iter().copied()).is_err());
}
