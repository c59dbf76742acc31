//! The CloudWatch metrics a campaign's Lambdas emit (#32 item 1), checked against what the
//! campaign did: every line is a valid Embedded Metric Format document naming only metrics of
//! the catalogue, and the counts agree with the audit — granules succeeded and dead-lettered,
//! attempts submitted, SubmitJob refusals the Batch twin made — on an in-memory campaign whose
//! Batch refuses SubmitJob past twenty calls a second.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::metrics::{emf_violation, CATALOGUE, FAILURE_CLASS, PLATFORM};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::chaos;
use granary_local::fault_plan::FaultPlan;
use granary_local::simulate::on_the_virtual_clock;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn sum(docs: &[serde_json::Value], metric: &str) -> f64 {
    docs.iter().filter_map(|d| d[metric].as_f64()).sum()
}

/// On the virtual clock (`simulate::on_the_virtual_clock`): the
/// feeder's schedule and the quota's second are simulated seconds (on the wall the test took
/// 11 s, 0.5 s of it CPU).
#[test]
fn a_campaigns_metrics_are_valid_emf_and_agree_with_its_audit() {
    let ran = on_the_virtual_clock(1, async {
        let mut spec = CampaignSpec {
            granules: 200,
            inventories: 2,
            submit_limit: Some(20),
            plan: FaultPlan::default(),
            env: vec![("GRANARY_STACK_NAME".to_owned(), "metrics-test".to_owned())],
            ..CampaignSpec::default()
        };
        spec.runner.granule_submit_count = 50;
        spec.runner.feeder_interval = Duration::from_millis(20);
        spec.runner.deadline = Duration::from_secs(300);
        let mut campaign = Campaign::in_memory(&spec).await.unwrap();
        let started = Instant::now();
        campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();
        let report = chaos::audit(&campaign, started.elapsed()).await.unwrap();
        assert_eq!(report.unaccounted, 0, "{report:?}");
        assert!(report.dead_lettered > 0, "the plan fails some granules");
        let ctx = &campaign.runtime.ctx;
        let docs = ctx
            .metrics
            .take_documents(&ctx.config.stack, chrono::Utc::now());

        let known: Vec<&str> = CATALOGUE.iter().map(|s| s.name).collect();
        for d in &docs {
            assert_eq!(emf_violation(d), None, "{d}");
            assert_eq!(d["Stack"], "metrics-test");
            for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
            {
                let name = m["Name"].as_str().unwrap();
                assert!(known.contains(&name), "{name} is not in the catalogue");
            }
        }

        // Each granule's end counted once, by platform; the dead-lettered by failure class.
        assert_eq!(sum(&docs, "GranulesSucceeded"), report.succeeded as f64);
        assert_eq!(
            sum(&docs, "GranulesDeadLettered"),
            report.dead_lettered as f64
        );
        let mut platforms: BTreeMap<String, f64> = BTreeMap::new();
        for d in docs.iter().filter(|d| d.get("GranulesSucceeded").is_some()) {
            let platform = d[PLATFORM].as_str().unwrap_or("(none)").to_owned();
            *platforms.entry(platform).or_default() += d["GranulesSucceeded"].as_f64().unwrap();
        }
        assert!(
            platforms.keys().all(|p| p == "L30" || p == "S30"),
            "{platforms:?}"
        );
        assert!(docs
            .iter()
            .filter(|d| d.get("GranulesDeadLettered").is_some())
            .all(|d| d[FAILURE_CLASS].is_string()));
        // Every attempt submitted once: first attempts and the retries the audit saw.
        let batch = campaign.in_memory_batch.as_ref().unwrap();
        assert_eq!(
            sum(&docs, "GranulesSubmitted"),
            batch.accepted_submits() as f64
        );
        // Every refusal the twin made, counted where granary saw it.
        assert!(batch.refused_submits() > 0, "twenty a second refuses some");
        assert_eq!(
            sum(&docs, "SubmitJobThrottles"),
            batch.refused_submits() as f64
        );
        // One value a feeder run that submitted; the rows left end at none.
        let windows: f64 = docs
            .iter()
            .filter_map(|d| d["FeederWindowSize"].as_array())
            .flatten()
            .filter_map(|v| v.as_f64())
            .sum();
        assert_eq!(windows, 200.0);
        // Every row settled once, and none left at the end.
        assert_eq!(sum(&docs, "FeederRowsSettled"), 200.0);
        let left: Vec<f64> = docs
            .iter()
            .filter_map(|d| d["FeederRowsLeft"].as_array())
            .flatten()
            .filter_map(|v| v.as_f64())
            .collect();
        assert_eq!(
            left.iter().cloned().fold(f64::MAX, f64::min),
            0.0,
            "{left:?}"
        );
        let events = sum(&docs, "EventsHandled");
        assert!(
            events >= (report.succeeded + report.dead_lettered) as f64,
            "{events} events"
        );
        // Taken: nothing is left to print twice.
        assert!(ctx
            .metrics
            .take_documents(&ctx.config.stack, chrono::Utc::now())
            .is_empty());
        Ok(())
    });
    ran.unwrap();
}
