//! IAM proven by use. Every handler path the crash-point harness drives (each scenario without a
//! crash and with a crash at each of its calls, then the platform's recovery) runs with the
//! environment `infra/template.yaml` gives each function, and every call is recorded as the IAM
//! action and resource ARN AWS checks for it (`adapters::access_log`). Then both ways:
//! - every access a function needed is allowed by its role's statements in the template, as IAM
//!   matches them (wildcards, resources resolved for the stack) — what moto never checks;
//! - every (action, resource) a statement grants is needed by some call: least privilege.
//!
//! Not covered here: the permissions Lambda itself uses for a function (its SQS event source's
//! receive/delete, its log group), which SAM adds with the event source and the execution role.

mod platform;

use granary::adapters::access_log::Access;
use granary::adapters::faults::{CrashMode, CrashPoint};
use granary_template::{wildcard, Statement};
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
    used
}

/// What one statement grants: each (action, resource pattern) pair.
fn grants(s: &Statement) -> Vec<(String, String)> {
    s.actions
        .iter()
        .flat_map(|a| s.resources.iter().map(move |r| (a.clone(), r.clone())))
        .collect()
}

// Paused time: the download step's pauses between attempts pass at once.
#[tokio::test(start_paused = true)]
async fn every_call_is_granted_and_every_grant_is_used() {
    let used = accesses_by_function().await;
    let (_, resolved) = stack();
    let mut problems = Vec::new();
    for f in Function::ALL {
        let function = resolved.function(f.logical_id()).unwrap();
        let statements = function.statements().unwrap();
        for s in &statements {
            assert!(
                s.condition.is_none() && s.allow,
                "{}: a conditioned or Deny statement needs its own check here: {s:?}",
                f.logical_id()
            );
        }
        let needed = used.get(&f).cloned().unwrap_or_default();
        assert!(!needed.is_empty(), "{f:?} made no call in any scenario");
        for a in &needed {
            if !statements.iter().any(|s| s.allows(a.action, &a.resource)) {
                problems.push(format!(
                    "{} needs {} on {} and its role does not grant it",
                    f.logical_id(),
                    a.action,
                    a.resource
                ));
            }
        }
        for s in &statements {
            for (action, resource) in grants(s) {
                let used = needed.iter().any(|a| {
                    wildcard(&action.to_ascii_lowercase(), &a.action.to_ascii_lowercase())
                        && wildcard(&resource, &a.resource)
                });
                if !used {
                    problems.push(format!(
                        "{} is granted {action} on {resource} and no call uses it",
                        f.logical_id()
                    ));
                }
            }
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
    let s = Statement {
        allow: true,
        actions: vec!["s3:GetObject".into()],
        resources: vec!["arn:aws:s3:::b/logs/*".into()],
        condition: None,
    };
    assert!(s.allows("s3:GetObject", "arn:aws:s3:::b/logs/x"));
    assert!(!s.allows("s3:GetObject", "arn:aws:s3:::b/holds/feeder.json"));
    assert!(!s.allows("s3:ListBucket", "arn:aws:s3:::b"));
    assert!(!wildcard("arn:aws:s3:::b/raw/*", "arn:aws:s3:::b/logs/x"));
}
