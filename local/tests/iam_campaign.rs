//! IAM by use, over a whole campaign: the feeder, monitor, requeuer and reconciler run a 300-granule
//! campaign (Spot reclaims, application failures, timeouts, duplicated and delayed events, lost
//! events) on the in-memory twins, configured with the environment `infra/template.yaml` gives
//! the functions; every call each makes must be allowed by its role in the template. (That every
//! grant is used is checked over the handler scenarios: `shared/tests/iam_by_use.rs`.)
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::tap::access_log::{AccessLog, AwsAccount};
use granary::adapters::tap::Tap;
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use granary_local::runner::LambdaFunction;
use granary_template::{check_role, Stack, Template};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_a_campaign_is_granted_by_the_template() {
    let stack = Stack::new("granary-campaign")
        .with("SubnetIds", "subnet-1")
        .with("SecurityGroupIds", "sg-1")
        .with("ContainerImage", "image");
    let resolved = Template::granary().unwrap().resolve(&stack).unwrap();
    let mut env: Vec<(String, String)> = resolved
        .function("QueueFeederFunction")
        .and_then(|f| f.environment())
        .unwrap()
        .into_iter()
        .collect();
    // The local runtime plays every function with one configuration and compresses time: no
    // function timeout, the local route lease, lost ends looked up after a second, not an hour.
    env.retain(|(k, _)| {
        !matches!(
            k.as_str(),
            "GRANARY_FUNCTION_TIMEOUT_SECS"
                | "GRANARY_ROUTE_LEASE_SECS"
                | "GRANARY_RECONCILE_AFTER_SECS"
        )
    });
    env.push(("GRANARY_RECONCILE_AFTER_SECS".into(), "1".into()));
    let mut spec = CampaignSpec {
        granules: 300,
        inventories: 2,
        plan: FaultPlan {
            seed: 5,
            spot_rate: 0.2,
            app_failure_rate: 0.05,
            timeout_rate: 0.02,
            lost_rate: 0.05,
            ..FaultPlan::default()
        },
        env,
        ..CampaignSpec::default()
    };
    spec.runner.deadline = Duration::from_secs(300);
    spec.runner.feeder_interval = Duration::from_millis(20);
    let mut campaign = Campaign::in_memory(&spec).await.unwrap();
    let account = AwsAccount {
        partition: stack.partition.clone(),
        region: stack.region.clone(),
        account: stack.account.clone(),
    };
    let functions = [
        (LambdaFunction::Feeder, "QueueFeederFunction"),
        (LambdaFunction::Monitor, "JobMonitorFunction"),
        (LambdaFunction::Requeuer, "RequeuerFunction"),
        (LambdaFunction::Sweeper, "ItemSweeperFunction"),
    ];
    let logs: Vec<(&str, Arc<AccessLog>)> = functions
        .iter()
        .map(|(f, id)| {
            let log = Arc::new(AccessLog::new(
                &campaign.runtime.ctx.config,
                account.clone(),
            ));
            campaign
                .runtime
                .function_taps
                .insert(*f, log.clone() as Arc<dyn Tap>);
            (*id, log)
        })
        .collect();
    campaign.runtime.run_to_quiescence(|_| {}).await.unwrap();

    let mut problems = Vec::new();
    for (id, log) in &logs {
        let accesses = log.accesses();
        assert!(!accesses.is_empty(), "{id} made no call");
        let statements = resolved.function(id).and_then(|f| f.statements()).unwrap();
        let pairs = accesses.iter().map(|a| (a.action, a.resource.as_str()));
        for n in check_role(&statements, pairs).unwrap().not_granted {
            problems.push(format!("{id} needs {n} and its role does not grant it"));
        }
    }
    // The campaign met what it was meant to: retries, failures and lost ends all happened.
    let p = &campaign.runtime.progress;
    assert!(
        p.reconciled > 0 && p.dead_lettered > 0 && p.requeuer_invocations > 0,
        "{p:?}"
    );
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The in-memory campaign's queues park messages after as many receives as the template's
/// redrive policies say.
#[test]
fn the_in_memory_redrive_counts_are_the_templates() {
    let template = Template::granary().unwrap();
    let max_receives = |queue: &str| {
        template
            .resources_of_type("AWS::SQS::Queue")
            .find(|(id, _)| id.as_str() == queue)
            .and_then(|(_, q)| q["Properties"]["RedrivePolicy"]["maxReceiveCount"].as_u64())
            .unwrap_or_else(|| panic!("{queue} has no maxReceiveCount"))
    };
    assert_eq!(
        max_receives("RetryQueue"),
        u64::from(granary_local::campaign::RETRY_QUEUE_MAX_RECEIVES)
    );
    assert_eq!(
        max_receives("BatchEventsQueue"),
        u64::from(granary_local::campaign::EVENTS_QUEUE_MAX_RECEIVES)
    );
}
