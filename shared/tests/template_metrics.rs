//! The template's dashboard and alarms against the metrics the code emits
//! (`granary::domain::metrics::CATALOGUE`), both ways: every granary metric the dashboard or an
//! alarm names is one the code emits, with dimensions it publishes, and every metric the code
//! emits is on the dashboard. The dashboard body is the JSON CloudFormation would send, for a
//! stack named `prod`.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::metrics::{MetricSpec, CATALOGUE, NAMESPACE, STACK};
use granary_template::Stack;
use granary_template::Template;
use serde_json::Value;
use std::collections::BTreeSet;

const STACK_NAME: &str = "prod";

fn spec(name: &str) -> &'static MetricSpec {
    CATALOGUE
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is named, but no code emits it"))
}

/// The dimension sets a metric is published with: the stack alone, and the stack with all its
/// dimensions (`domain::metrics::emf_documents`).
fn published(spec: &MetricSpec) -> Vec<BTreeSet<String>> {
    let alone = BTreeSet::from([STACK.to_owned()]);
    let mut all = alone.clone();
    all.extend(spec.dimensions.iter().map(|d| (*d).to_owned()));
    vec![alone, all]
}

/// The template resolved for a stack named `prod` (the parameters without defaults given).
fn resolved() -> granary_template::Resolved {
    let stack = Stack::new(STACK_NAME)
        .with("SubnetIds", "subnet-1")
        .with("SecurityGroupIds", "sg-1")
        .with("ContainerImage", "image");
    Template::granary().unwrap().resolve(&stack).unwrap()
}

fn dashboard_body() -> Value {
    let resolved = resolved();
    let body = resolved.resources["OperatorsDashboard"]["Properties"]["DashboardBody"]
        .as_str()
        .expect("the dashboard body resolves to a string")
        .to_owned();
    serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("the dashboard body is JSON: {e}\n{body}"))
}

/// The granary metrics a dashboard names, with the dimension keys each names.
fn dashboard_metrics(body: &Value) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    let widgets = body["widgets"].as_array().expect("widgets");
    for w in widgets {
        for row in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let row = row.as_array().expect("a metric row is an array");
            if let Some(expression) = row.first().and_then(|f| f["expression"].as_str()) {
                // SEARCH('{granary,Dim,…} … MetricName="X"', …)
                let schema = expression
                    .split_once('{')
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .map(|(inside, _)| inside)
                    .expect("a SEARCH schema");
                let mut keys = schema.split(',').map(str::to_owned);
                assert_eq!(keys.next().as_deref(), Some(NAMESPACE), "{expression}");
                let dims: BTreeSet<String> = keys.collect();
                let name = expression
                    .split("MetricName=\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .expect("a SEARCH names its metric");
                assert!(
                    expression.contains(&format!("Stack=\"{STACK_NAME}\"")),
                    "{expression} reads another stack's metrics"
                );
                out.push((name.to_owned(), dims));
                continue;
            }
            let strings: Vec<&str> = row.iter().filter_map(Value::as_str).collect();
            if strings.first() != Some(&NAMESPACE) {
                continue;
            }
            let name = strings[1].to_owned();
            let pairs: Vec<&[&str]> = strings[2..].chunks(2).collect();
            assert!(
                pairs.contains(&[STACK, STACK_NAME].as_slice()),
                "{name} on the dashboard is not this stack's: {row:?}"
            );
            out.push((name, pairs.iter().map(|p| p[0].to_owned()).collect()));
        }
    }
    out
}

#[test]
fn the_dashboard_names_every_metric_the_code_emits_and_no_other() {
    let body = dashboard_body();
    let named = dashboard_metrics(&body);
    assert!(!named.is_empty());
    for (name, dims) in &named {
        let spec = spec(name);
        assert!(
            published(spec).contains(dims),
            "{name} is read with dimensions {dims:?}, never published so"
        );
    }
    for spec in &CATALOGUE {
        assert!(
            named.iter().any(|(n, _)| n == spec.name),
            "{} is emitted but not on the dashboard",
            spec.name
        );
    }
}

#[test]
fn every_alarm_on_a_granary_metric_reads_one_the_code_emits_for_this_stack() {
    let resolved = resolved();
    let mut read = 0;
    for (id, resource) in &resolved.resources {
        if resource["Type"] != "AWS::CloudWatch::Alarm" {
            continue;
        }
        let props = &resource["Properties"];
        let mut stats: Vec<&Value> = vec![props];
        let queries = props["Metrics"].as_array().into_iter().flatten();
        let mut ids = BTreeSet::new();
        for q in queries.clone() {
            ids.insert(q["Id"].as_str().unwrap_or_default().to_owned());
            if q["MetricStat"].is_object() {
                stats.push(&q["MetricStat"]["Metric"]);
            }
        }
        for stat in stats {
            if stat["Namespace"] != NAMESPACE {
                continue;
            }
            let name = stat["MetricName"].as_str().unwrap_or_default();
            let spec = spec(name);
            let dims: Vec<(&str, &str)> = stat["Dimensions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| {
                    (
                        d["Name"].as_str().unwrap_or(""),
                        d["Value"].as_str().unwrap_or(""),
                    )
                })
                .collect();
            assert!(
                dims.contains(&(STACK, STACK_NAME)),
                "{id} reads {name} of another stack: {dims:?}"
            );
            let keys: BTreeSet<String> = dims.iter().map(|(k, _)| (*k).to_owned()).collect();
            assert!(published(spec).contains(&keys), "{id}: {name} {keys:?}");
            read += 1;
        }
        // An expression uses only the queries it defines (a misspelt id is an alarm that never
        // has data).
        for q in queries {
            let Some(expression) = q["Expression"].as_str() else {
                continue;
            };
            let words = expression
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()));
            for w in words {
                assert!(
                    ids.contains(w),
                    "{id}: {expression} uses {w}, no query of it"
                );
            }
        }
    }
    assert!(
        read >= 4,
        "the dead-letter rate and feeder-stalled alarms read granary's metrics"
    );
}
