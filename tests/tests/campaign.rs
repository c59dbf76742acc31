//! The end-to-end campaign: inventory in, every granule accounted for out.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::classify::Route;
use granary::domain::granule::GranuleProcessingEvent;
use granary::domain::layout::logs::{LogKey, LogOutcome, LogRecord};
use granary::repositories::read_json;
use granary_local::campaign::{Campaign, CampaignSpec, Summary};
use granary_local::fault_plan::FaultPlan;
use granary_tests::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A small campaign with every fault the plan knows (the audit asserts Batch's own retries,
/// duplicated, delayed and intermediate events, and retryable and dead-letter-bound ends each
/// showed up): 400 granules on the emulator, whose every call is an HTTP round trip to a Python
/// server; the in-memory twins run the same plan over 2,000.
fn spec() -> CampaignSpec {
    let mut spec = CampaignSpec {
        granules: 400,
        plan: FaultPlan {
            seed: 7,
            spot_rate: 0.12,
            app_failure_rate: 0.03,
            app_exit_code: 2,
            timeout_rate: 0.01,
            pull_error_rate: 0.01,
            intermediate_events: true,
            duplicate_rate: 0.05,
            delay_rate: 0.05,
            delay_ticks: 2,
            // The emulator's DescribeJobs answers from its own job records, not the simulator's
            // fates, so lost events are exercised on the in-memory twins (`granary-local chaos`).
            lost_rate: 0.0,
            timing: granary_local::fault_plan::BatchTiming::instant(),
        },
        batch_attempts: 2,
        env: vec![("GRANARY_MAX_RETRIES".into(), "2".into())],
        ..CampaignSpec::default()
    };
    spec.runner.deadline = Duration::from_secs(1200);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_granule_is_accounted_for() {
    let (clients, iam) = clients().await;
    let mut c = Campaign::setup(&clients, &iam, &unique_name("campaign"), &spec())
        .await
        .unwrap();
    let started = Instant::now();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let summary = c.summarize(started.elapsed()).await.unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&summary).unwrap());

    // No (granule, attempt) was submitted twice: one Batch job per name, one name per planned job.
    let jobs = c.runtime.simulator.ledger().jobs().await.unwrap();
    let names: BTreeSet<&String> = jobs.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), jobs.len(), "a job name was submitted twice");
    assert_eq!(jobs.len(), c.runtime.simulator.planned.len());

    assert_accounted_for(&c, &summary).await;
}

/// The campaign with array windows, through the emulator's Batch: a window is one SubmitJob
/// with `arrayProperties.size`, each child's end is routed from its event, and every granule is
/// accounted for as in single-job mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_granule_is_accounted_for_with_array_windows() {
    let (clients, iam) = clients().await;
    let mut spec = spec();
    spec.granules = 300;
    spec.env.push(("GRANARY_ARRAY_WINDOWS".into(), "on".into()));
    let mut c = Campaign::setup(&clients, &iam, &unique_name("arrays"), &spec)
        .await
        .unwrap();
    let started = Instant::now();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let summary = c.summarize(started.elapsed()).await.unwrap();
    let sim = c.runtime.simulator.stats.clone();
    eprintln!("{}", serde_json::to_string_pretty(&summary).unwrap());
    // Every window of first attempts was one array; later attempts are single jobs.
    assert!(sim.arrays > 0, "{sim:?}");
    let first_attempts = c
        .runtime
        .simulator
        .planned
        .iter()
        .filter(|p| p.attempt == 1)
        .count();
    assert_eq!(
        first_attempts,
        c.granules.len(),
        "each granule's first attempt ran once"
    );
    assert_accounted_for(&c, &summary).await;
}

/// The same campaign on the in-memory twins: the same handlers, runner and simulator, no emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_granule_is_accounted_for_on_the_in_memory_twins() {
    let mut spec = spec();
    spec.granules = 2_000;
    let mut c = Campaign::in_memory(&spec).await.unwrap();
    let started = Instant::now();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let summary = c.summarize(started.elapsed()).await.unwrap();
    assert_accounted_for(&c, &summary).await;
}

/// What every settled campaign must show, whatever it ran on.
async fn assert_accounted_for(c: &Campaign, summary: &Summary) {
    let ctx = &c.runtime.ctx;
    let planned = &c.runtime.simulator.planned;

    // The plan exercised what it should.
    let sim = &c.runtime.simulator.stats;
    assert!(
        sim.batch_internal_retries > 0
            && sim.duplicates > 0
            && sim.delayed > 0
            && sim.intermediate > 0,
        "{sim:?}"
    );
    assert!(sim.retryable > 0 && sim.dead_letter_bound > 0, "{sim:?}");
    // Every job reached the simulator through the submission tap; the settling sweep found none.
    assert_eq!(sim.swept, 0, "{sim:?}");
    // Each (granule, attempt) went to Batch once: one job name per planned job.
    let names: BTreeSet<&str> = planned.iter().map(|p| p.job_name.as_str()).collect();
    assert_eq!(names.len(), planned.len(), "a job name was submitted twice");

    // What each granule's final job was meant to end as, by the plan.
    let mut last: BTreeMap<&str, &granary_local::simulator::PlannedJob> = BTreeMap::new();
    let mut successes: BTreeMap<&str, usize> = BTreeMap::new();
    for p in planned {
        let e = last.entry(p.granule_id.as_str()).or_insert(p);
        if p.attempt > e.attempt {
            *e = p;
        }
        if p.route == Route::Done {
            *successes.entry(p.granule_id.as_str()).or_default() += 1;
        }
    }
    assert_eq!(last.len(), c.granules.len(), "every granule reached Batch");
    assert!(
        successes.values().all(|n| *n == 1),
        "no granule succeeded twice"
    );

    // The DLQ holds exactly the granules that should be there, once each, with the right reason.
    let dlq = &summary.dlq;
    let mut dead: BTreeMap<String, String> = BTreeMap::new();
    for m in dlq {
        let e: GranuleProcessingEvent = serde_json::from_str(&m.body).unwrap();
        assert!(
            dead.insert(e.granule_id.to_string(), m.attributes["reason"].clone())
                .is_none(),
            "two DLQ messages for {}",
            e.granule_id
        );
    }
    let max_attempt = ctx.config.max_attempt();
    for (granule, p) in &last {
        match p.route {
            Route::Done => assert!(
                !dead.contains_key(*granule),
                "{granule} succeeded but is in the DLQ"
            ),
            Route::FailureDlq => assert_eq!(
                dead.get(*granule),
                Some(&p.reason),
                "{granule}: planned {:?}; logs {:?}",
                planned
                    .iter()
                    .filter(|q| q.granule_id == *granule)
                    .collect::<Vec<_>>(),
                keys(ctx.store.as_ref(), "logs/")
                    .await
                    .into_iter()
                    .filter(|k| k.contains(*granule))
                    .collect::<Vec<_>>()
            ),
            Route::RetryQueue => {
                assert_eq!(
                    p.attempt, max_attempt,
                    "{granule}: a retryable failure below the budget was not retried"
                );
                assert_eq!(
                    dead.get(*granule).map(String::as_str),
                    Some("attempts exhausted"),
                    "{granule}"
                );
            }
            // These campaigns cancel nothing: a settled campaign's last job of a granule is
            // never one `granary cancel` ended (tests/tests/cancel.rs resumes those).
            Route::Cancelled => panic!("{granule}: its last job was cancelled and never resumed"),
        }
    }

    // Logs: one per finished job, successes un-superseded, failures of later successes relocated.
    let mut logs = 0;
    let mut failing: BTreeSet<String> = BTreeSet::new();
    let mut success_attempt: BTreeMap<String, u32> = BTreeMap::new();
    for meta in ctx.store.list("logs/").await.unwrap() {
        let key = LogKey::parse("logs/", &meta.key).unwrap();
        logs += 1;
        match key.outcome {
            LogOutcome::Failure => {
                failing.insert(key.granule_id.to_string());
            }
            LogOutcome::Success => {
                let a = success_attempt
                    .entry(key.granule_id.to_string())
                    .or_default();
                *a = (*a).max(key.attempt);
            }
        }
    }
    assert_eq!(
        logs,
        planned.len(),
        "one log per finished job, no more, no less"
    );
    let dead_set: BTreeSet<String> = dead.keys().cloned().collect();
    assert_eq!(
        failing, dead_set,
        "outcome=failure holds exactly the granules still failing"
    );
    for (granule, p) in last.iter().filter(|(_, p)| p.route == Route::Done) {
        assert_eq!(success_attempt.get(*granule), Some(&p.attempt), "{granule}");
    }
    // Spot-check relocated failure logs are marked superseded by the winning attempt.
    let relocated: Vec<(&str, u32)> = last
        .iter()
        .filter(|(_, p)| p.route == Route::Done && p.attempt > 1)
        .map(|(g, p)| (*g, p.attempt))
        .take(20)
        .collect();
    assert!(!relocated.is_empty());
    for (granule, attempt) in relocated {
        let prefix = "logs/outcome=success/";
        let keys: Vec<String> = keys(ctx.store.as_ref(), prefix)
            .await
            .into_iter()
            .filter(|k| k.contains(&format!("granule_id={granule}/")))
            .collect();
        assert_eq!(keys.len() as u32, attempt, "{granule}: {keys:?}");
        for k in keys
            .iter()
            .filter(|k| !k.ends_with(&format!("attempt={attempt}.json")))
        {
            let r: LogRecord = read_json(ctx.store.as_ref(), k)
                .await
                .unwrap()
                .unwrap()
                .value;
            assert_eq!(r.superseded.map(|s| s.by_attempt), Some(attempt), "{k}");
        }
    }

    // Item records agree with the plan: each granule's lifecycle ended where its last job did.
    let records = ctx.items().find(&Default::default()).await.unwrap();
    assert_eq!(
        records.len(),
        c.granules.len(),
        "one item record per granule"
    );
    for r in &records {
        let p = last[r.id.as_str()];
        let want = match p.route {
            Route::Done => granary::domain::lifecycle::ItemState::Processed,
            // Dead-lettered by the monitor, or by the requeuer once its attempts were spent.
            _ => granary::domain::lifecycle::ItemState::Abandoned,
        };
        assert_eq!(
            (r.state, r.attempts.processing),
            (want, p.attempt),
            "{}",
            r.id
        );
    }
    assert!(
        ctx.items().inflight().await.unwrap().is_empty(),
        "no item is left in flight"
    );

    assert_eq!(summary.unaccounted, 0);
    assert_eq!(
        summary.events_dlq, 0,
        "no event failed the monitor for good"
    );
    let tracker = ctx.tracker().load().await.unwrap();
    assert!(tracker.value.is_complete());
    assert_eq!(tracker.value.rows_submitted(), c.granules.len() as u64);
}
